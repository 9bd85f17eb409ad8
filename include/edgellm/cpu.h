// Which CPUs to run on, as the command line names them (--cpus, --cpu-mask).
#pragma once

#include <optional>
#include <string_view>
#include <vector>

namespace edgellm {

// "0-3,6" -> {0,1,2,3,6}; nullopt on bad syntax.
std::optional<std::vector<int>> parse_cpu_list(std::string_view s);
// "0xF0" or "F0" (hex, bit i = CPU i) -> {4,5,6,7}; nullopt on bad syntax or an empty mask.
std::optional<std::vector<int>> parse_cpu_mask(std::string_view s);

}  // namespace edgellm
