// The host's file tools kept inside one directory: the server's working directory, or the
// x-tool-cwd a request names inside it. What a request names is taken lexically ("a/../b" is
// "b"; '~' is $HOME), its real path (the symbolic links of the part that exists resolved)
// must lie inside the directory's real path, and the file is then opened one component at a
// time from the directory with O_NOFOLLOW: neither "..", an absolute path, '~', nor a
// symbolic link (one there before the check, or one swapped in after it) reaches a file
// outside. A link that stays inside is followed as before.
#pragma once

#include <sys/types.h>

#include <string>

namespace edgellm::agent {

// "" when x-tool-cwd (relative: to the server's directory) names a directory inside the
// server's working directory (itself included), else why not; *dir is it made absolute and
// lexically normal.
std::string cwd_inside_server_dir(const std::string& header, std::string* dir);

// The server's working directory ("/" when it cannot be told).
std::string server_dir();

// Lexically normal (no "." or ".."), without a trailing '/' (except "/").
std::string normal_path(const std::string& p);

// ~ and ~/... as $HOME/...; any other path as it is.
std::string expand_home(const std::string& p);

// An isolate's check (its files are not ours to open): "" when path, lexically, stays inside
// base (a relative path must not climb above it with ".."; an absolute one must lie below
// base when base is absolute, and cannot be checked when it is not), else why not.
std::string lexically_outside(const std::string& path, const std::string& base);

class Confined {
  public:
    // root: an absolute directory. Its real path is taken now (that of its nearest existing
    // ancestor, the rest as written, when it does not exist).
    explicit Confined(const std::string& root);

    const std::string& root() const { return root_; }  // as given, lexically normal

    // A path a request gave (relative to the root, absolute, or ~/...) as the real path
    // the tools then use, or "" and *why when it is outside the root.
    std::string resolve(const std::string& path, std::string* why) const;
    // Whether the real path of an absolute path lies inside (a listing's symbolic links).
    bool contains(const std::string& abs) const;

    // A path resolve() gave, opened from the root one component at a time (O_NOFOLLOW), so
    // a directory replaced by a symbolic link since the check fails (ELOOP, ENOTDIR) instead
    // of leading out. -1 with errno set on failure.
    int open(const std::string& real, int flags, mode_t mode = 0) const;
    // Its parent directory opened that way (O_PATH), *name its last component; create: the
    // missing directories are made on the way. The root itself has no parent: -1, EISDIR.
    int open_parent(const std::string& real, bool create, std::string* name) const;

  private:
    bool inside(const std::string& real) const;
    std::string root_, real_root_;
};

}  // namespace edgellm::agent
