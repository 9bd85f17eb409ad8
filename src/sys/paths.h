// Files a request names, confined to the directories the operator chose: a path is judged
// by where it leads (its symbolic links and `..` resolved), never by how it is spelled.
#pragma once

#include <string>
#include <vector>

namespace edgellm::sys {

// `path` absolute, its symbolic links resolved as far as it exists (the rest as written,
// `.` and `..` taken out): what within() compares. "" when it cannot be resolved (a
// directory on the way that cannot be read).
std::string real_path(const std::string& path);

// Whether the real path `real` is `dir` or lies under it (both real_path's; "" is nowhere).
bool within(const std::string& real, const std::string& dir);

// The real path of `path` (every symbolic link resolved, as far as it exists) when it lies
// under one of `dirs` (real_path's), else "".
std::string real_path_within(const std::string& path, const std::vector<std::string>& dirs);

}  // namespace edgellm::sys
