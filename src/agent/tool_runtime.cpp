// Where the built-in tools act: the host (confined), a container, an ssh host, and the
// container --tools-runtime docker:IMAGE starts. See tool_runtime.h.
#include "agent/tool_runtime.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "agent/confine.h"
#include "agent/shell_limits.h"
#include "sys/strings.h"

namespace edgellm::agent {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using sys::Child;
using sys::close_fd;
using sys::errno_text;
using sys::exited_without_reaping;
using sys::kill_group;
using sys::reap;
using sys::run_process;
using sys::RunOptions;
using sys::RunResult;
using sys::trim;
using sys::utf8_cut;

namespace {

// ---- runtimes --------------------------------------------------------------------------

const char* const kJunkDirs[] = {".git",   ".svn",  ".hg",    "node_modules", "__pycache__",
                                 ".venv",  "venv",  "dist",   "build",        "target",
                                 ".cache", ".idea", ".vscode"};

bool is_junk_dir(std::string_view name) {
    for (const char* j : kJunkDirs)
        if (name == j) return true;
    return false;
}

int path_depth(std::string_view rel) {
    return 1 + (int)std::count(rel.begin(), rel.end(), '/');
}

// The host, confined to its working directory (confine.h). Its commands get the server's
// environment without its secrets and a cap on their processes (shell_limits.h).
class HostRuntime final : public ToolRuntime {
  public:
    // dir: the working directory, absolute (x-tool-cwd inside the server's, or the
    // server's own).
    explicit HostRuntime(const std::string& dir) : box_(dir) {}

    bool is_host() const override { return true; }

    std::string resolve(const std::string& path, std::string* why) const override {
        return box_.resolve(path, why);
    }

    FileStat stat(const std::string& path) const override {
        FileStat st;
        struct stat sb;
        std::string name;
        const int dir = box_.open_parent(path, false, &name);
        const bool ok = dir >= 0 ? ::fstatat(dir, name.c_str(), &sb, AT_SYMLINK_NOFOLLOW) == 0
                                 : errno == EISDIR && ::stat(path.c_str(), &sb) == 0;  // the root
        if (!ok) {
            if (errno != ENOENT && errno != ENOTDIR) st.error = errno_text(errno);
            if (dir >= 0) ::close(dir);
            return st;
        }
        if (dir >= 0) ::close(dir);
        st.exists = true;
        st.is_dir = S_ISDIR(sb.st_mode);
        st.is_file = S_ISREG(sb.st_mode);  // (a symbolic link swapped in: neither)
        st.size = (uint64_t)sb.st_size;
        return st;
    }

    ReadResult read(const std::string& path, size_t max_bytes) const override {
        ReadResult r;
        // O_NONBLOCK: a FIFO swapped in does not hang the call (it is refused below)
        const int fd = box_.open(path, O_RDONLY | O_NOCTTY | O_NONBLOCK);
        struct stat sb;
        if (fd < 0 || ::fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
            r.error = fd < 0 ? errno_text(errno) : "not a regular file";
            if (fd >= 0) ::close(fd);
            return r;
        }
        std::vector<char> buf(64 * 1024);
        for (;;) {
            const ssize_t n = ::read(fd, buf.data(), buf.size());
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) {
                r.error = errno_text(errno);
                break;
            }
            if (n == 0) break;
            const size_t room = max_bytes - r.data.size();
            if ((size_t)n > room) {
                r.data.append(buf.data(), room);
                r.truncated = true;
                break;
            }
            r.data.append(buf.data(), (size_t)n);
        }
        ::close(fd);
        return r;
    }

    // Through the directory's descriptor: the temporary file is created there (O_EXCL,
    // O_NOFOLLOW) and renamed over the name there. A symbolic link that resolve() followed
    // is written through (path is its target); one swapped in since is replaced.
    std::string write(const std::string& path, const std::string& content) const override {
        std::string name;
        const int dir = box_.open_parent(path, true, &name);
        if (dir < 0) return errno == EISDIR ? "it is a directory" : errno_text(errno);
        struct stat old;
        const bool had = ::fstatat(dir, name.c_str(), &old, AT_SYMLINK_NOFOLLOW) == 0;
        if (had && S_ISDIR(old.st_mode)) {
            ::close(dir);
            return "it is a directory";
        }
        static std::atomic<uint64_t> counter{0};
        std::string tmp;
        int fd = -1;
        for (int attempt = 0; attempt < 16 && fd < 0; ++attempt) {
            tmp = "." + name.substr(0, 200) + ".edgellm-" + std::to_string(::getpid()) + "-" +
                  std::to_string(counter.fetch_add(1));
            fd = ::openat(dir, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                          0666);
            if (fd < 0 && errno != EEXIST) {
                const std::string why = errno_text(errno);
                ::close(dir);
                return why;
            }
        }
        if (fd < 0) {
            ::close(dir);
            return "cannot create a temporary file beside " + path;
        }
        std::string why;
        for (size_t off = 0; off < content.size() && why.empty();) {
            const ssize_t n = ::write(fd, content.data() + off, content.size() - off);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0)
                why = errno_text(errno);
            else
                off += (size_t)n;
        }
        if (why.empty() && had && S_ISREG(old.st_mode)) ::fchmod(fd, old.st_mode & 07777);
        if (why.empty() && ::fsync(fd) != 0) why = errno_text(errno);
        if (::close(fd) != 0 && why.empty()) why = errno_text(errno);
        if (why.empty() && ::renameat(dir, tmp.c_str(), dir, name.c_str()) != 0)
            why = errno_text(errno);
        if (!why.empty()) ::unlinkat(dir, tmp.c_str(), 0);
        ::close(dir);
        return why;
    }

    Listing list(const std::string& dir, int max_depth, ListKind kind,
                 const std::atomic<bool>* cancel) const override {
        Listing out;
        if (!stat(dir).is_dir) {
            out.error = "path does not exist or is not a directory";
            return out;
        }
        const auto deadline = Clock::now() + std::chrono::seconds(tool_limits::list_seconds);
        // In a git work tree, files are what git knows and does not ignore (.gitignore);
        // an empty answer (the directory is itself ignored) falls back to the walk.
        if (kind != ListKind::Files || !git_files(dir, max_depth, cancel, &out) ||
            out.entries.empty()) {
            out.entries.clear();
            walk(dir, max_depth, kind, deadline, cancel, &out);
        }
        std::sort(out.entries.begin(), out.entries.end(),
                  [](const ListEntry& a, const ListEntry& b) { return a.rel < b.rel; });
        return out;
    }

    RunResult exec(const ExecRequest& e) const override {
        RunOptions o;
        o.cwd = box_.root();
        o.env = environment_without_secrets();
        o.max_output = e.max_output;
        o.timeout = std::chrono::seconds(e.timeout_s);
        o.cancel = e.cancel;
        o.on_chunk = e.on_chunk;
        return run_process(e.argv, o);
    }

    // The process cap: what the user runs now, plus tool_limits::exec_processes.
    std::vector<std::string> shell(const std::string& command, std::string* why) const override {
        const long running = user_task_count();
        if (running < 0) {
            *why = "cannot count this user's processes (/proc) to limit the command's";
            return {};
        }
        return shell_with_process_limit(command, running + tool_limits::exec_processes);
    }

    std::string working_dir() const override { return box_.root(); }

    std::string check_working_dir() const override {
        std::error_code ec;
        if (!fs::is_directory(box_.root(), ec))
            return "working directory does not exist: " + box_.root();
        return "";
    }

  private:
    // `git ls-files` of dir; false when dir is not in a work tree (or git failed). A file
    // whose real path is outside (a tracked symbolic link) is left out. core.fsmonitor
    // off: a hook named in the work tree's .git/config (which write_file can write) would
    // otherwise run here.
    bool git_files(const std::string& dir, int max_depth, const std::atomic<bool>* cancel,
                   Listing* out) const {
        const std::vector<std::string> argv = {
            "git",      "-c",       "core.fsmonitor=false", "-C", dir, "ls-files", "-z",
            "--cached", "--others", "--exclude-standard"};
        RunOptions o;
        o.merge_stderr = false;
        o.max_output = tool_limits::git_listing;
        o.timeout = std::chrono::seconds(tool_limits::list_seconds);
        o.cancel = cancel;
        const RunResult r = run_process(argv, o);
        if (!r.started() || r.exit_code != 0 || r.timed_out || r.cancelled || r.truncated)
            return false;
        std::string_view rest = r.output;
        std::string last;
        while (!rest.empty()) {
            const size_t z = rest.find('\0');
            const std::string rel(rest.substr(0, z));
            rest = z == std::string_view::npos ? std::string_view() : rest.substr(z + 1);
            if (rel.empty() || rel == last) continue;  // (a conflicted file: several stages)
            last = rel;
            if (max_depth > 0 && path_depth(rel) > max_depth) continue;
            const std::string abs = dir + "/" + rel;
            std::error_code ec;
            // --cached lists deleted files, and submodules (directories)
            // (git lists no path through a symbolic link: only the entry itself can be one)
            if (!fs::is_regular_file(abs, ec) || (fs::is_symlink(abs, ec) && !box_.contains(abs)))
                continue;
            out->entries.push_back({rel, false});
        }
        return true;
    }

    // Depth-first walk. Symbolic links are listed when they lead inside the working
    // directory (as what they lead to), never followed into a directory (a loop); junk
    // directories are listed but not entered (they can be enormous).
    void walk(const std::string& base, int max_depth, ListKind kind, Clock::time_point deadline,
              const std::atomic<bool>* cancel, Listing* out) const {
        struct Dir {
            fs::path abs;
            std::string rel;
            int depth;
        };
        std::vector<Dir> stack{{fs::path(base), "", 0}};
        size_t visited = 0;
        while (!stack.empty()) {
            Dir d = std::move(stack.back());
            stack.pop_back();
            std::error_code ec;
            fs::directory_iterator it(d.abs, fs::directory_options::skip_permission_denied, ec);
            if (ec) {
                out->truncated = true;
                continue;
            }
            for (const fs::directory_iterator end; it != end; it.increment(ec)) {
                if (ec) {
                    out->truncated = true;
                    break;
                }
                if ((++visited & 255) == 0 &&
                    (Clock::now() >= deadline || (cancel && cancel->load()))) {
                    out->truncated = true;
                    return;
                }
                const fs::directory_entry& e = *it;
                const std::string name = e.path().filename().string();
                const std::string rel = d.rel.empty() ? name : d.rel + "/" + name;
                std::error_code lec;
                const bool link = e.is_symlink(lec) || lec;
                if (link && !box_.contains(e.path().string())) continue;
                std::error_code tec;
                if (e.is_directory(tec)) {
                    if (kind != ListKind::Files) out->entries.push_back({rel, true});
                    if (!link && !is_junk_dir(name) && (max_depth == 0 || d.depth + 1 < max_depth))
                        stack.push_back({e.path(), rel, d.depth + 1});
                } else if (!tec && e.is_regular_file(tec)) {
                    if (kind != ListKind::Dirs) out->entries.push_back({rel, false});
                }
                if (out->entries.size() >= tool_limits::list_entries) {
                    out->truncated = true;
                    return;
                }
            }
        }
    }

    Confined box_;
};

// is one command; paths travel as positional arguments ("$1") of fixed sh snippets, never
// spliced into a command line.
class IsolateRuntime : public ToolRuntime {
  public:
    // cwd: the x-tool-cwd header, a path over there ('~' is not expanded), or empty.
    explicit IsolateRuntime(std::string cwd) : cwd_(std::move(cwd)) {
        if (!cwd_.empty() && cwd_[0] != '/') cwd_ = "./" + cwd_;  // (never read as an option)
    }

    bool is_host() const override { return false; }

    // The isolate is the boundary (its files are its own): only the lexical check here.
    std::string resolve(const std::string& path, std::string* why) const override {
        *why = lexically_outside(path, cwd_);
        if (!why->empty()) return "";
        std::string p = path;
        if (p.empty() || p[0] != '/') p = (cwd_.empty() ? std::string(".") : cwd_) + "/" + p;
        p = normal_path(p);
        return p[0] == '/' ? p : "./" + p;  // (so no path reads as an option)
    }

    FileStat stat(const std::string& path) const override {
        FileStat st;
        const RunResult r = aux({"sh", "-c",
                                 "if [ -d \"$1\" ]; then echo d; elif [ -f \"$1\" ]; then "
                                 "echo f; wc -c < \"$1\"; elif [ -e \"$1\" ]; then echo o; "
                                 "else echo n; fi",
                                 "_", path},
                                4096, true);
        const std::string out = trim(r.output);
        if (!r.started() || r.exit_code != 0 || out.empty() ||
            std::string("dfon").find(out[0]) == std::string::npos) {
            st.error = failure_text(r);
            return st;
        }
        st.exists = out[0] != 'n';
        st.is_dir = out[0] == 'd';
        st.is_file = out[0] == 'f';
        if (st.is_file) st.size = std::strtoull(out.c_str() + 1, nullptr, 10);
        return st;
    }

    ReadResult read(const std::string& path, size_t max_bytes) const override {
        ReadResult rr;
        // stderr kept apart: it must not end up among the file's bytes
        const RunResult r =
            aux({"head", "-c", std::to_string(max_bytes + 1), path}, max_bytes + 1, false);
        if (!r.started() || r.exit_code != 0 || r.timed_out) {
            rr.error = failure_text(r);
            return rr;
        }
        rr.data = r.output;
        if (rr.data.size() > max_bytes) {
            rr.data.resize(max_bytes);
            rr.truncated = true;
        }
        return rr;
    }

    std::string write(const std::string& path, const std::string& content) const override {
        // The content travels on stdin; a symlink is written through, as on the host.
        static const char* script =
            "p=$1; if [ -L \"$p\" ]; then p=$(readlink -f \"$p\") || exit 1; fi; "
            "mkdir -p \"$(dirname \"$p\")\" || exit 1; t=\"$p.edgellm-tmp.$$\"; "
            "if cat > \"$t\" && mv -f \"$t\" \"$p\"; then exit 0; fi; rm -f \"$t\"; exit 1";
        const RunResult r = aux({"sh", "-c", script, "_", path}, 4096, false, &content);
        if (r.started() && r.exit_code == 0 && !r.timed_out) return "";
        return failure_text(r);
    }

    Listing list(const std::string& dir, int max_depth, ListKind kind,
                 const std::atomic<bool>*) const override {
        Listing out;
        const FileStat st = stat(dir);
        if (!st.error.empty()) {
            out.error = st.error;
            return out;
        }
        if (!st.is_dir) {
            out.error = "path does not exist or is not a directory";
            return out;
        }
        if (kind == ListKind::Files) {
            const RunResult r =
                aux({"sh", "-c",
                     "cd \"$1\" && git ls-files -z --cached --others --exclude-standard", "_", dir},
                    tool_limits::git_listing, false);
            if (r.started() && r.exit_code == 0 && !r.timed_out && !r.truncated) {
                std::string_view rest = r.output;
                while (!rest.empty()) {
                    const size_t z = rest.find('\0');
                    const std::string rel(rest.substr(0, z));
                    rest = z == std::string_view::npos ? std::string_view() : rest.substr(z + 1);
                    if (rel.empty() || (max_depth > 0 && path_depth(rel) > max_depth)) continue;
                    out.entries.push_back({rel, false});
                }
                if (!out.entries.empty()) {
                    std::sort(out.entries.begin(), out.entries.end(),
                              [](const ListEntry& a, const ListEntry& b) { return a.rel < b.rel; });
                    out.entries.erase(std::unique(out.entries.begin(), out.entries.end(),
                                                  [](const ListEntry& a, const ListEntry& b) {
                                                      return a.rel == b.rel;
                                                  }),
                                      out.entries.end());
                    return out;
                }
            }
        }
        if (kind != ListKind::Files) find(dir, max_depth, true, &out);
        if (kind != ListKind::Dirs) find(dir, max_depth, false, &out);
        std::sort(out.entries.begin(), out.entries.end(),
                  [](const ListEntry& a, const ListEntry& b) { return a.rel < b.rel; });
        if (out.entries.size() > tool_limits::list_entries) {
            out.entries.resize(tool_limits::list_entries);
            out.truncated = true;
        }
        return out;
    }

    // The command also runs under the isolate's own `timeout`: killing the local client
    // (docker exec, ssh) does not stop what it started on the other side.
    RunResult exec(const ExecRequest& e) const override {
        std::vector<std::string> inner = {"timeout", std::to_string(e.timeout_s)};
        inner.insert(inner.end(), e.argv.begin(), e.argv.end());
        if (!cwd_.empty()) {
            // 127: what a shell reports for a command it could not run
            std::vector<std::string> cd = {"sh", "-c", "cd \"$1\" || exit 127; shift; exec \"$@\"",
                                           "_", cwd_};
            inner.insert(inner.begin(), cd.begin(), cd.end());
        }
        RunOptions o;
        o.max_output = e.max_output;
        o.timeout = std::chrono::seconds(e.timeout_s + 5);  // room for the inner timeout
        o.cancel = e.cancel;
        o.on_chunk = e.on_chunk;
        RunResult r = run_process(wrap(inner, false), o);
        if (r.exit_code == 124) r.timed_out = true;  // `timeout`'s own report
        return r;
    }

    std::vector<std::string> shell(const std::string& command, std::string*) const override {
        return {"sh", "-c", command};
    }

    std::string working_dir() const override {
        if (!cwd_.empty()) return cwd_;
        const RunResult r = aux({"pwd"}, 4096, false);
        return r.started() && r.exit_code == 0 ? trim(r.output) : "unknown";
    }

  protected:
    // The local argv that runs `inner` (a POSIX argv) in the isolate.
    virtual std::vector<std::string> wrap(const std::vector<std::string>& inner,
                                          bool with_stdin) const = 0;

  private:
    RunResult aux(const std::vector<std::string>& inner, size_t max_output, bool merge_stderr,
                  const std::string* input = nullptr) const {
        RunOptions o;
        o.max_output = max_output;
        o.merge_stderr = merge_stderr;
        o.input = input;
        o.timeout = std::chrono::seconds(tool_limits::isolate_aux_seconds);
        return run_process(wrap(inner, input != nullptr), o);
    }

    static std::string failure_text(const RunResult& r) {
        if (!r.started()) return r.start_error;
        if (r.timed_out) return "the runtime did not answer in time";
        std::string why = trim(r.errors.empty() ? r.output : r.errors);
        if (why.size() > 300) why = why.substr(0, utf8_cut(why, 300)) + "...";
        return why.empty() ? "exit code " + std::to_string(r.exit_code) : why;
    }

    // One `find` pass (busybox's and GNU's alike); junk directories are printed but pruned.
    void find(const std::string& dir, int max_depth, bool dirs, Listing* out) const {
        std::string junk;
        for (const char* j : kJunkDirs)
            junk += std::string(junk.empty() ? "" : " -o ") + "-name " + j;
        std::string cmd = "cd \"$1\" && find . -mindepth 1";
        if (max_depth > 0) cmd += " -maxdepth " + std::to_string(max_depth);
        cmd += " \\( -type d \\( " + junk + " \\) \\) -prune";
        cmd += dirs ? " -print -o -type d -print" : " -o -type f -print";
        const RunResult r = aux({"sh", "-c", cmd, "_", dir}, tool_limits::git_listing, false);
        if (!r.started() || r.timed_out || r.truncated) out->truncated = true;
        std::string_view rest = r.output;
        while (!rest.empty()) {
            const size_t nl = rest.find('\n');
            std::string_view line = rest.substr(0, nl);
            rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
            if (line.starts_with("./")) line.remove_prefix(2);
            if (!line.empty()) out->entries.push_back({std::string(line), dirs});
        }
    }

    std::string cwd_;
};

class ContainerRuntime final : public IsolateRuntime {
  public:
    ContainerRuntime(std::string engine, std::string id, std::string cwd)
        : IsolateRuntime(std::move(cwd)), engine_(std::move(engine)), id_(std::move(id)) {}

  protected:
    std::vector<std::string> wrap(const std::vector<std::string>& inner,
                                  bool with_stdin) const override {
        std::vector<std::string> argv = {engine_, "exec"};
        if (with_stdin) argv.push_back("-i");
        argv.push_back(id_);  // (checked: cannot read as an option)
        argv.insert(argv.end(), inner.begin(), inner.end());
        return argv;
    }

  private:
    std::string engine_, id_;
};

// Remoting, not isolation: the tools can do whatever the target's account can.
class SshRuntime final : public IsolateRuntime {
  public:
    SshRuntime(std::string target, std::string cwd)
        : IsolateRuntime(std::move(cwd)), target_(std::move(target)) {}

  protected:
    // No terminal to answer a prompt: keys only, a known host key, a bounded connect.
    // The remote shell re-parses its command, so `inner` goes as one quoted word.
    std::vector<std::string> wrap(const std::vector<std::string>& inner,
                                  bool with_stdin) const override {
        std::vector<std::string> argv = {"ssh", "-T"};
        for (const char* opt :
             {"BatchMode=yes", "PasswordAuthentication=no", "KbdInteractiveAuthentication=no",
              "StrictHostKeyChecking=yes", "ConnectTimeout=10"}) {
            argv.push_back("-o");
            argv.push_back(opt);
        }
        if (!with_stdin) argv.push_back("-n");
        argv.push_back("--");
        argv.push_back(target_);
        std::string cmd;
        for (const auto& a : inner) {
            if (!cmd.empty()) cmd += ' ';
            cmd += '\'';
            for (char c : a) {
                if (c == '\'')
                    cmd += "'\\''";  // close the quote, an escaped quote, reopen
                else
                    cmd += c;
            }
            cmd += '\'';
        }
        argv.push_back(cmd);
        return argv;
    }

  private:
    std::string target_;
};

// ---- runtime specs ---------------------------------------------------------------------

bool id_char(unsigned char c) {
    return std::isalnum(c) || c == '.' || c == '-' || c == '_';
}

// Container ids and names: [A-Za-z0-9][A-Za-z0-9_.-]* (a leading '-' would be an option
// of `<engine> exec`, e.g. --privileged).
bool valid_container_id(std::string_view id) {
    return !id.empty() && std::isalnum((unsigned char)id[0]) &&
           std::all_of(id.begin(), id.end(), [](unsigned char c) { return id_char(c); });
}

// [user@]host, no leading '-' (ssh would read -oProxyCommand=... as an option and run it).
bool valid_ssh_target(std::string_view t) {
    return !t.empty() && t[0] != '-' &&
           std::all_of(t.begin(), t.end(), [](unsigned char c) { return id_char(c) || c == '@'; });
}

bool valid_image(std::string_view im) {
    return !im.empty() && std::isalnum((unsigned char)im[0]) &&
           std::all_of(im.begin(), im.end(), [](unsigned char c) {
               return id_char(c) || c == '/' || c == ':' || c == '@';
           });
}

}  // namespace

std::optional<ApiError> parse_runtime(const std::string& s, RuntimeSpec* out) {
    *out = {};
    if (s.empty()) return std::nullopt;
    for (const char* engine : {"docker", "podman"}) {
        const std::string attach = std::string(engine) + "-container:";
        const std::string spawn = std::string(engine) + ":";
        if (s.starts_with(attach)) {
            *out = {RuntimeSpec::Attach, engine, s.substr(attach.size())};
            if (!valid_container_id(out->arg))
                return bad_request("invalid container id: " + out->arg);
            return std::nullopt;
        }
        if (s.starts_with(spawn)) {
            *out = {RuntimeSpec::Spawn, engine, s.substr(spawn.size())};
            if (!valid_image(out->arg)) return bad_request("invalid container image: " + out->arg);
            return std::nullopt;
        }
    }
    if (s.starts_with("ssh:")) {
        *out = {RuntimeSpec::Ssh, "", s.substr(4)};
        if (!valid_ssh_target(out->arg)) return bad_request("invalid ssh target: " + out->arg);
        return std::nullopt;
    }
    // never the host instead: the caller asked for an isolate
    return bad_request("unknown tool runtime: " + s);
}

std::optional<ApiError> make_runtime(const RuntimeSpec& spec, const std::string& spec_text,
                                     const std::string& cwd, std::unique_ptr<ToolRuntime>* out) {
    switch (spec.kind) {
        case RuntimeSpec::Host: {
            std::string dir = server_dir();
            if (!cwd.empty()) {
                const std::string why = cwd_inside_server_dir(cwd, &dir);
                if (!why.empty()) return ApiError{403, "permission_error", why, {}};
            }
            *out = std::make_unique<HostRuntime>(dir);
            return std::nullopt;
        }
        case RuntimeSpec::Attach:
            *out = std::make_unique<ContainerRuntime>(spec.engine, spec.arg, cwd);
            return std::nullopt;
        case RuntimeSpec::Ssh:
            *out = std::make_unique<SshRuntime>(spec.arg, cwd);
            return std::nullopt;
        case RuntimeSpec::Spawn:
            break;
    }
    // a container is started by the server (--tools-runtime), not by a request
    return bad_request("tool runtime must name a running container: " + spec_text + " (" +
                       spec.engine + "-container:ID; " + spec.engine +
                       ":IMAGE is for --tools-runtime)");
}

// ---- --tools-runtime docker:IMAGE ------------------------------------------------------

Result<std::unique_ptr<SpawnedContainer>> SpawnedContainer::start(const std::string& engine,
                                                                  const std::string& image) {
    std::unique_ptr<SpawnedContainer> c(new SpawnedContainer(engine, image));
    std::error_code ec;
    std::string dir = (fs::temp_directory_path(ec) / "edgellm-tools-XXXXXX").string();
    if (::mkdtemp(dir.data()) == nullptr)
        return Result<std::unique_ptr<SpawnedContainer>>::fail(
            "--tools-runtime: cannot create a temporary directory: " + errno_text(errno));
    c->dir_ = dir;
    const std::string why = c->launch();
    if (!why.empty()) return Result<std::unique_ptr<SpawnedContainer>>::fail(why);
    return Result<std::unique_ptr<SpawnedContainer>>(std::move(c));
}

SpawnedContainer::~SpawnedContainer() {
    std::lock_guard<std::mutex> lock(mu_);
    stop();
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
}

Result<std::string> SpawnedContainer::spec() {
    std::lock_guard<std::mutex> lock(mu_);
    if (child_.pid < 0 || exited_without_reaping(child_.pid)) {
        stop();
        std::fprintf(stderr, "edgellm: the %s tools container exited; starting another\n",
                     engine_.c_str());
        const std::string why = launch();
        if (!why.empty()) return Result<std::string>::fail(why);
    }
    return engine_ + "-container:" + id_;
}

SpawnedContainer::SpawnedContainer(std::string engine, std::string image)
    : engine_(std::move(engine)), image_(std::move(image)) {}

std::string SpawnedContainer::launch() {
    const std::string cidfile = dir_ + "/cid", logfile = dir_ + "/run.log";
    std::error_code ec;
    fs::remove(cidfile, ec);  // (the engine refuses an existing one)
    const int log = ::open(logfile.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (log < 0) return "--tools-runtime: cannot create " + logfile + ": " + errno_text(errno);
    sys::SpawnSpec s;
    s.argv = {engine_, "run", "--rm", "-i", "--cidfile", cidfile, image_, "sh"};
    s.in = sys::SpawnSpec::Stdin::Socket;
    s.out_fd = log;
    const sys::Spawned started = sys::spawn(s);
    ::close(log);
    if (!started.ok())
        return "--tools-runtime " + engine_ + ":" + image_ + ": " +
               sys::spawn_error_text(s, started);
    child_ = started.child;

    // Up to two minutes: the image may have to be pulled first.
    const auto deadline = Clock::now() + std::chrono::seconds(120);
    for (;;) {
        std::string cid;
        {
            std::ifstream f(cidfile);
            if (f) std::getline(f, cid);
        }
        cid = trim(cid);
        if (!cid.empty()) {
            if (!valid_container_id(cid)) {
                stop();
                return "--tools-runtime: " + engine_ + " wrote an odd container id: " + cid;
            }
            id_ = cid;
            return "";
        }
        if (exited_without_reaping(child_.pid) || Clock::now() >= deadline) {
            const bool timed_out = !exited_without_reaping(child_.pid);
            stop();
            std::ifstream f(logfile);
            std::string log_text((std::istreambuf_iterator<char>(f)),
                                 std::istreambuf_iterator<char>());
            log_text = trim(log_text.substr(0, 1000));
            return "--tools-runtime " + engine_ + ":" + image_ + ": the container " +
                   (timed_out ? "did not start in 120 s" : "failed to start") +
                   (log_text.empty() ? "" : ": " + log_text);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
}

// Closing stdin ends the container's shell, and --rm removes it; a client that does
// not exit within 20 s is killed and the container removed by force.
void SpawnedContainer::stop() {
    if (child_.pid < 0) return;
    close_fd(&child_.in);
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    while (!exited_without_reaping(child_.pid) && Clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (!exited_without_reaping(child_.pid)) {
        kill_group(child_.pid);
        if (!id_.empty()) {
            RunOptions o;
            o.timeout = std::chrono::seconds(10);
            run_process({engine_, "rm", "-f", id_}, o);
        }
    }
    reap(child_.pid);
    child_ = Child{};
    id_.clear();
}

}  // namespace edgellm::agent
