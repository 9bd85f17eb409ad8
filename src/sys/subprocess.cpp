#include "sys/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "sys/strings.h"

extern char** environ;

namespace edgellm::sys {

using Clock = std::chrono::steady_clock;

void close_fd(int* fd) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
}

namespace {

// Both ends moved above stdin/stdout/stderr (so that the dup2 onto 0, 1, 2 in the child
// never lands on one of its own pipes) and close-on-exec. False (nothing open) on failure.
bool above_stdio(int fds[2]) {
    for (int k = 0; k < 2; ++k) {
        if (fds[k] <= 2) {
            const int moved = ::fcntl(fds[k], F_DUPFD_CLOEXEC, 3);
            ::close(fds[k]);
            fds[k] = moved;
        }
    }
    if (fds[0] >= 0 && fds[1] >= 0) return true;
    close_fd(&fds[0]);
    close_fd(&fds[1]);
    return false;
}

bool make_pipe(int fds[2]) {
    return ::pipe2(fds, O_CLOEXEC) == 0 && above_stdio(fds);
}

bool make_socket(int fds[2]) {
    return ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0 && above_stdio(fds);
}

void set_nonblocking(int fd) {
    const int fl = ::fcntl(fd, F_GETFL);
    if (fl >= 0) ::fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

std::vector<char*> c_strings(const std::vector<std::string>& v) {
    std::vector<char*> out;
    for (const std::string& s : v) out.push_back(const_cast<char*>(s.c_str()));
    out.push_back(nullptr);
    return out;
}

// The descriptors of one spawn: the child's ends go to 0, 1, 2, ours into the Child.
struct Pipes {
    int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
    int null_err = -1;  // /dev/null for Stderr::Null

    void close_all() {
        for (int* fd : {&in[0], &in[1], &out[0], &out[1], &err[0], &err[1], &null_err})
            close_fd(fd);
    }
    void close_childs() {
        close_fd(&in[0]);
        close_fd(&out[1]);
        close_fd(&err[1]);
        close_fd(&null_err);
    }
    // 0 when made, else errno (and nothing open).
    int make(const SpawnSpec& s) {
        bool ok = true;
        if (s.in == SpawnSpec::Stdin::Pipe) ok = make_pipe(in);
        // (a socket: the child reads in[0]; as with the pipe, ours is in[1])
        if (ok && s.in == SpawnSpec::Stdin::Socket) ok = make_socket(in);
        if (ok && s.out_fd < 0) ok = make_pipe(out);
        if (ok && s.err == SpawnSpec::Stderr::Pipe) ok = make_pipe(err);
        if (ok && s.err == SpawnSpec::Stderr::Null) {
            null_err = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
            ok = null_err >= 0;
        }
        if (ok) return 0;
        const int e = errno;
        close_all();
        return e;
    }
    int child_out(const SpawnSpec& s) const { return s.out_fd >= 0 ? s.out_fd : out[1]; }
    int child_err(const SpawnSpec& s) const {
        switch (s.err) {
            case SpawnSpec::Stderr::Pipe: return err[1];
            case SpawnSpec::Stderr::Null: return null_err;
            case SpawnSpec::Stderr::Merge: break;
        }
        return child_out(s);
    }
};

int posix_spawn_child(const SpawnSpec& s, const Pipes& p, char* const* argv, char* const* envp,
                      pid_t* pid) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (s.in == SpawnSpec::Stdin::Null)
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    else
        posix_spawn_file_actions_adddup2(&fa, p.in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, p.child_out(s), 1);
    posix_spawn_file_actions_adddup2(&fa, p.child_err(s), 2);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    // Descriptors another part of the process opened without O_CLOEXEC do not leak either.
    posix_spawn_file_actions_addclosefrom_np(&fa, 3);
#endif
    if (!s.cwd.empty()) posix_spawn_file_actions_addchdir_np(&fa, s.cwd.c_str());

    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    sigset_t def, none;
    sigemptyset(&def);
    for (int sig : s.default_signals) sigaddset(&def, sig);
    sigemptyset(&none);
    posix_spawnattr_setsigdefault(&at, &def);
    posix_spawnattr_setsigmask(&at, &none);
    short flags = POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK;
    if (s.own_group) {
        posix_spawnattr_setpgroup(&at, 0);
        flags |= POSIX_SPAWN_SETPGROUP;
    }
    posix_spawnattr_setflags(&at, flags);

    char* const* env = envp ? envp : environ;
    const int rc = s.exe.empty() ? ::posix_spawnp(pid, argv[0], &fa, &at, argv, env)
                                 : ::posix_spawn(pid, s.exe.c_str(), &fa, &at, argv, env);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    return rc;
}

// Writes "what: why\n" to stderr with one write (no stdio: its lock may be held by a thread
// that does not exist in a forked child).
void child_complain(const std::string& what, int e) {
    char buf[1024];
    const char* why = std::strerror(e);
    const size_t a = std::min(what.size(), sizeof buf - 2);
    std::memcpy(buf, what.data(), a);
    size_t n = a;
    for (const char* c = why; *c && n < sizeof buf - 1; ++c) buf[n++] = *c;
    buf[n++] = '\n';
    [[maybe_unused]] const ssize_t w = ::write(2, buf, n);
}

// fork + exec, for what posix_spawn cannot do (PR_SET_PDEATHSIG). Between the two the child
// calls only async-signal-safe functions (strerror aside, for a message before _exit).
int fork_child(const SpawnSpec& s, const Pipes& p, char* const* argv, char* const* envp,
               pid_t* pid) {
    const char* exe = s.exe.empty() ? argv[0] : s.exe.c_str();
    const std::string cannot_run = std::string("cannot run ") + exe + ": ";
    const std::string cannot_cd = "cannot start in " + s.cwd + ": ";
    const int child_out = p.child_out(s), child_err = p.child_err(s);
    const pid_t parent = ::getpid();
    const pid_t child = ::fork();
    if (child < 0) return errno;
    if (child > 0) {
        *pid = child;
        return 0;
    }
    ::prctl(PR_SET_PDEATHSIG, s.death_signal);
    if (::getppid() != parent) ::_exit(127);  // (the parent ended before the prctl)
    if (s.own_group) ::setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    ::pthread_sigmask(SIG_SETMASK, &none, nullptr);
    for (int sig : s.default_signals) ::signal(sig, SIG_DFL);
    if (s.in == SpawnSpec::Stdin::Null) {
        const int null_in = ::open("/dev/null", O_RDONLY);
        if (null_in >= 0) ::dup2(null_in, 0);
    } else {
        ::dup2(p.in[0], 0);
    }
    ::dup2(child_out, 1);
    ::dup2(child_err, 2);
#ifdef SYS_close_range
    if (::syscall(SYS_close_range, 3u, ~0u, 0u) != 0)
#endif
        for (int fd = 3; fd < 4096; ++fd) ::close(fd);
    if (!s.cwd.empty() && ::chdir(s.cwd.c_str()) != 0) {
        child_complain(cannot_cd, errno);
        ::_exit(127);
    }
    if (envp)
        s.exe.empty() ? ::execvpe(exe, argv, envp) : ::execve(exe, argv, envp);
    else
        s.exe.empty() ? ::execvp(exe, argv) : ::execv(exe, argv);
    child_complain(cannot_run, errno);
    ::_exit(127);
}

}  // namespace

Spawned spawn(const SpawnSpec& s) {
    Spawned r;
    Pipes p;
    if ((r.error = p.make(s)) != 0) {
        r.pipe_error = true;
        return r;
    }
    const std::vector<char*> argv = c_strings(s.argv);
    std::vector<char*> envp;
    if (s.env) envp = c_strings(*s.env);
    char* const* env = s.env ? envp.data() : nullptr;
    pid_t pid = -1;
    r.error = s.death_signal != 0 ? fork_child(s, p, argv.data(), env, &pid)
                                  : posix_spawn_child(s, p, argv.data(), env, &pid);
    p.close_childs();  // (the child has its own copies now)
    if (r.error != 0) {
        p.close_all();
        return r;
    }
    r.child.pid = pid;
    r.child.in = p.in[1];
    r.child.out = p.out[0];
    r.child.err = p.err[0];
    if (s.nonblocking)
        for (int fd : {r.child.out, r.child.err, r.child.in})
            if (fd >= 0) set_nonblocking(fd);
    return r;
}

std::string spawn_error_text(const SpawnSpec& s, const Spawned& r) {
    if (r.pipe_error) return errno_text(r.error);
    std::string why = "cannot run " + s.argv[0] + ": " + errno_text(r.error);
    if (!s.cwd.empty() && r.error == ENOENT) why += " (or no directory " + s.cwd + ")";
    return why;
}

std::vector<std::string> environment_with(const std::map<std::string, std::string>& overrides) {
    std::vector<std::string> env;
    for (char** e = environ; e && *e; ++e) {
        std::string_view kv(*e);
        std::string key(kv.substr(0, kv.find('=')));
        if (!overrides.count(key)) env.emplace_back(kv);
    }
    for (const auto& [k, v] : overrides) env.push_back(k + "=" + v);
    return env;
}

bool exited_without_reaping(pid_t pid, bool* zombie) {
    siginfo_t si;
    std::memset(&si, 0, sizeof si);
    if (::waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) != 0)
        return errno == ECHILD;  // (reaped by someone else)
    const bool exited = si.si_pid == pid;
    if (zombie) *zombie = exited;
    return exited;
}

int wait_status(pid_t pid) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) return -1;
    }
    return status;
}

int reap(pid_t pid) {
    const int status = wait_status(pid);
    if (status < 0) return -1;
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return -1;
}

std::string exit_text(int status) {
    if (status < 0) return "";
    if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
    if (WIFSIGNALED(status)) return "was killed by signal " + std::to_string(WTERMSIG(status));
    return "";
}

void kill_group(pid_t pid, int sig) {
    if (::kill(-pid, sig) != 0) ::kill(pid, sig);
}

// ---- run_process ---------------------------------------------------------------------------

RunResult run_process(const std::vector<std::string>& argv, const RunOptions& o) {
    RunResult r;
    SpawnSpec s;
    s.argv = argv;
    s.cwd = o.cwd;
    s.env = o.env;
    s.in = o.input != nullptr ? SpawnSpec::Stdin::Socket : SpawnSpec::Stdin::Null;
    s.err = o.merge_stderr ? SpawnSpec::Stderr::Merge : SpawnSpec::Stderr::Pipe;
    const Spawned sp = spawn(s);
    if (!sp.ok()) {
        r.start_error = spawn_error_text(s, sp);
        return r;
    }
    Child c = sp.child;

    constexpr size_t kMaxErrors = 4096;
    std::vector<char> buf(64 * 1024);
    size_t in_off = 0;
    bool stop = false;
    if (c.in >= 0 && o.input->empty()) close_fd(&c.in);

    // One read from fd (a fast writer must not keep us from the clock).
    auto pull = [&](int* fd, bool is_out) {
        const ssize_t n = ::read(*fd, buf.data(), buf.size());
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
        if (n <= 0) {
            close_fd(fd);
            return;
        }
        const std::string_view got(buf.data(), (size_t)n);
        if (!is_out) {
            if (r.errors.size() < kMaxErrors)
                r.errors.append(got.substr(0, kMaxErrors - r.errors.size()));
            return;
        }
        const size_t room = o.max_output > r.output.size() ? o.max_output - r.output.size() : 0;
        const std::string_view keep = got.substr(0, room);
        if (keep.size() < got.size()) r.truncated = true;
        if (keep.empty()) return;
        r.output.append(keep);
        if (!stop && o.on_chunk && !o.on_chunk(keep)) stop = true;
    };

    // The output descriptors still open, to poll for input (each one's owner beside it).
    auto watch_output = [&](pollfd* fds, int** owners) {
        nfds_t n = 0;
        for (int* fd : {&c.out, &c.err}) {
            if (*fd < 0) continue;
            fds[n] = {*fd, POLLIN, 0};
            owners[n++] = fd;
        }
        return n;
    };

    const auto deadline = Clock::now() + o.timeout;
    bool exited = false;
    for (;;) {
        if (!exited) exited = exited_without_reaping(c.pid);
        if (exited && c.out < 0 && c.err < 0) break;
        if (stop || (o.cancel && o.cancel->load())) {
            r.cancelled = true;
            break;
        }
        const auto now = Clock::now();
        if (now >= deadline) {
            r.timed_out = true;
            break;
        }
        pollfd fds[3];
        int* owners[3];
        nfds_t n = watch_output(fds, owners);
        if (c.in >= 0) {
            fds[n] = {c.in, POLLOUT, 0};
            owners[n++] = &c.in;
        }
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
        // 50 ms: how soon an exit with the output still held open, or a cancel, is seen.
        const int wait_ms = (int)std::clamp<int64_t>(left, 1, 50);
        if (::poll(fds, n, wait_ms) < 0 && errno != EINTR) break;
        for (nfds_t i = 0; i < n; ++i) {
            if (fds[i].revents == 0) continue;
            int* fd = owners[i];
            if (fd == &c.in) {
                const ssize_t w = ::send(c.in, o.input->data() + in_off, o.input->size() - in_off,
                                         MSG_NOSIGNAL | MSG_DONTWAIT);
                if (w > 0) in_off += (size_t)w;
                if ((w < 0 && errno != EAGAIN && errno != EINTR) || in_off >= o.input->size())
                    close_fd(&c.in);
            } else {
                pull(fd, fd == &c.out);
            }
        }
    }
    close_fd(&c.in);
    if (!exited || r.timed_out || r.cancelled) {
        kill_group(c.pid);
        // What the group wrote before it died; a process that left the group (setsid)
        // may still hold the pipe, so this waits at most half a second.
        const auto drain_until = Clock::now() + std::chrono::milliseconds(500);
        while ((c.out >= 0 || c.err >= 0) && Clock::now() < drain_until) {
            pollfd fds[2];
            int* owners[2];
            const nfds_t n = watch_output(fds, owners);
            if (::poll(fds, n, 50) <= 0) continue;
            for (nfds_t i = 0; i < n; ++i)
                if (fds[i].revents) pull(owners[i], owners[i] == &c.out);
        }
    }
    close_fd(&c.out);
    close_fd(&c.err);
    r.exit_code = reap(c.pid);
    return r;
}

}  // namespace edgellm::sys
