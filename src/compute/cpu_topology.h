// Which CPUs to run on: user-given lists and masks, and the big cores of a big.LITTLE SoC
// (SA8295, RK3588), where a decode thread on a little core slows every token down.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "edgellm/cpu.h"

namespace edgellm {

// (parse_cpu_list, parse_cpu_mask: edgellm/cpu.h)

// The big cores: CPUs whose capacity (sysfs cpu_capacity, else cpuinfo_max_freq) under
// sysfs_root/devices/system/cpu is within 20 % of the fastest. Empty when every CPU
// qualifies or nothing is known: then there is nothing to choose.
std::vector<int> big_cores(const std::string& sysfs_root = "/sys");

std::string cpu_list_string(const std::vector<int>& cpus);  // {0,1,2,3,6} -> "0-3,6"

}  // namespace edgellm
