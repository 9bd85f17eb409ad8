#include "sys/paths.h"

#include <filesystem>

namespace edgellm::sys {

namespace fs = std::filesystem;

std::string real_path(const std::string& path) {
    std::error_code ec;
    const fs::path abs = fs::absolute(path.empty() ? "." : path, ec);
    const fs::path p = ec ? fs::path() : fs::weakly_canonical(abs, ec);
    if (ec) return "";  // (a directory on the way that cannot be read: judged as nowhere)
    std::string s = p.string();
    while (s.size() > 1 && s.back() == '/') s.pop_back();  // ("/a/b/" as "/a/b")
    return s;
}

bool within(const std::string& real, const std::string& dir) {
    if (real.empty() || dir.empty()) return false;
    if (dir == "/") return real[0] == '/';
    return real.size() >= dir.size() && real.compare(0, dir.size(), dir) == 0 &&
           (real.size() == dir.size() || real[dir.size()] == '/');
}

std::string real_path_within(const std::string& path, const std::vector<std::string>& dirs) {
    const std::string real = real_path(path);
    for (const std::string& dir : dirs)
        if (within(real, dir)) return real;
    return "";
}

}  // namespace edgellm::sys
