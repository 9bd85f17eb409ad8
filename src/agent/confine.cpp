// The host's file tools kept inside their working directory: see confine.h.
#include "agent/confine.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <string_view>

#include "sys/paths.h"

namespace edgellm::agent {

namespace fs = std::filesystem;
using sys::real_path;
using sys::within;

namespace {

// errno kept across a close.
void close_keeping_errno(int fd) {
    const int e = errno;
    ::close(fd);
    errno = e;
}

}  // namespace

std::string server_dir() {
    std::error_code ec;
    const fs::path p = fs::current_path(ec);
    return ec ? std::string("/") : normal_path(p.string());
}

std::string normal_path(const std::string& p) {
    std::string s = fs::path(p).lexically_normal().generic_string();
    while (s.size() > 1 && s.back() == '/') s.pop_back();
    return s.empty() ? "." : s;
}

// (read once: getenv races with setenv)
std::string expand_home(const std::string& p) {
    static const std::string home = [] {
        const char* h = std::getenv("HOME");
        return std::string(h ? h : "");
    }();
    if (p.empty() || p[0] != '~' || (p.size() > 1 && p[1] != '/')) return p;
    return home.empty() ? p : home + p.substr(1);
}

std::string cwd_inside_server_dir(const std::string& header, std::string* dir) {
    const std::string server = server_dir();
    const fs::path h(expand_home(header));
    *dir = normal_path((h.is_absolute() ? h : fs::path(server) / h).string());
    std::string why;
    if (Confined(server).resolve(*dir, &why).empty())
        return "x-tool-cwd " + header + " is not inside the server's working directory " + server +
               ": the tools act only inside it";
    return "";
}

std::string lexically_outside(const std::string& path, const std::string& base) {
    const fs::path p(path);
    if (p.is_relative()) {
        const std::string n = normal_path(path);
        if (n == ".." || n.starts_with("../"))
            return "path " + path + " climbs out of the working directory";
        return "";
    }
    if (!fs::path(base).is_absolute() || within(normal_path(path), normal_path(base))) return "";
    return "path " + path + " is outside the working directory " + base;
}

Confined::Confined(const std::string& root) : root_(normal_path(root)) {
    real_root_ = real_path(root_);
    if (real_root_.empty()) real_root_ = root_;
}

bool Confined::inside(const std::string& real) const {
    return within(real, real_root_);
}

bool Confined::contains(const std::string& abs) const {
    const std::string r = real_path(abs);
    return !r.empty() && inside(r);
}

std::string Confined::resolve(const std::string& path, std::string* why) const {
    const fs::path p(expand_home(path));
    const std::string abs = normal_path((p.is_absolute() ? p : fs::path(root_) / p).string());
    const std::string real = real_path(abs);
    if (real.empty()) {
        *why = "cannot resolve " + path +
               " (a loop of symbolic links, or a directory that "
               "cannot be searched)";
        return "";
    }
    if (inside(real)) return real;
    if (within(abs, root_) || within(abs, real_root_))
        *why = "path " + path + " leads outside the working directory " + root_ +
               " through a symbolic link";
    else
        *why = "path " + path + " is outside the working directory " + root_ +
               " (the tools act only inside it)";
    return "";
}

int Confined::open_parent(const std::string& real, bool create, std::string* name) const {
    if (!inside(real)) {
        errno = EXDEV;
        return -1;
    }
    if (real == real_root_) {
        errno = EISDIR;
        return -1;
    }
    std::string_view rel(real);
    rel.remove_prefix(real_root_ == "/" ? 1 : real_root_.size() + 1);
    int fd = ::open(real_root_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    while (fd >= 0) {
        const size_t slash = rel.find('/');
        if (slash == std::string_view::npos) {
            *name = std::string(rel);
            return fd;
        }
        const std::string part(rel.substr(0, slash));
        rel.remove_prefix(slash + 1);
        constexpr int kDir = O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
        int next = ::openat(fd, part.c_str(), kDir);
        if (next < 0 && errno == ENOENT && create &&
            (::mkdirat(fd, part.c_str(), 0777) == 0 || errno == EEXIST))
            next = ::openat(fd, part.c_str(), kDir);
        close_keeping_errno(fd);
        fd = next;
    }
    return -1;
}

int Confined::open(const std::string& real, int flags, mode_t mode) const {
    if (real == real_root_) return ::open(real_root_.c_str(), flags | O_CLOEXEC, mode);
    std::string name;
    const int dir = open_parent(real, false, &name);
    if (dir < 0) return -1;
    const int fd = ::openat(dir, name.c_str(), flags | O_NOFOLLOW | O_CLOEXEC, mode);
    close_keeping_errno(dir);
    return fd;
}

}  // namespace edgellm::agent
