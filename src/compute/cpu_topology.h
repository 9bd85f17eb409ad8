// Which CPUs to run on: user-given lists and masks, and the big cores of a big.LITTLE SoC
// (SA8295, RK3588), where a decode thread on a little core slows every token down.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace edgellm {

// "0-3,6" -> {0,1,2,3,6}; nullopt on bad syntax.
std::optional<std::vector<int>> parse_cpu_list(std::string_view s);
// "0xF0" or "F0" (hex, bit i = CPU i) -> {4,5,6,7}; nullopt on bad syntax or an empty mask.
std::optional<std::vector<int>> parse_cpu_mask(std::string_view s);

// The big cores: CPUs whose capacity (sysfs cpu_capacity, else cpuinfo_max_freq) under
// sysfs_root/devices/system/cpu is within 20 % of the fastest. Empty when every CPU
// qualifies or nothing is known: then there is nothing to choose.
std::vector<int> big_cores(const std::string& sysfs_root = "/sys");

std::string cpu_list_string(const std::vector<int>& cpus);  // {0,1,2,3,6} -> "0-3,6"

}  // namespace edgellm
