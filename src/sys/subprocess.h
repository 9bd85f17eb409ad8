// Child processes: the one way the server starts them (the built-in tools' commands and
// their container, MCP servers, the router's model servers), waits for them and stops them.
//
// A child starts with the signals its parent may ignore back to their defaults, no blocked
// signal, no descriptor of ours above 2, and (by default) in a process group of its own,
// so that stopping it reaches whatever it started and a Ctrl-C on our terminal does not.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace edgellm::sys {

// A started child: its pid and our ends of the pipes it was given (-1: none).
struct Child {
    pid_t pid = -1;
    int in = -1;   // its stdin
    int out = -1;  // its stdout, and its stderr when merged
    int err = -1;  // its stderr when kept apart
};

// Closes *fd when open and sets it to -1 (on Linux the descriptor is gone even when close
// reports EINTR).
void close_fd(int* fd);

struct SpawnSpec {
    std::vector<std::string> argv;
    // The file to execute; empty: argv[0], looked up in PATH when it has no '/'.
    std::string exe;
    // Its environment ("KEY=value" each); none: ours.
    std::optional<std::vector<std::string>> env;
    std::string cwd;  // empty: ours

    enum class Stdin {
        Null,    // /dev/null
        Pipe,    // a pipe: Child::in
        Socket,  // a socket (Child::in): a write to a child that is gone is EPIPE, never
                 // SIGPIPE, with send(MSG_NOSIGNAL)
    };
    Stdin in = Stdin::Null;
    int out_fd = -1;  // its stdout (and a merged stderr) to this descriptor instead of a pipe
    enum class Stderr {
        Merge,  // where its stdout goes
        Pipe,   // a pipe of its own: Child::err
        Null,   // /dev/null
    };
    Stderr err = Stderr::Merge;

    bool own_group = true;  // a new process group (its pid is the group's id)
    // Our ends of the pipes non-blocking (for a poll loop); false: blocking reads.
    bool nonblocking = true;
    // Reset to their defaults in the child (only a signal its parent ignores needs it: exec
    // resets the handled ones).
    std::vector<int> default_signals = {SIGPIPE, SIGINT,  SIGTERM, SIGHUP,  SIGQUIT,
                                        SIGCHLD, SIGALRM, SIGUSR1, SIGUSR2, SIGTTIN,
                                        SIGTTOU, SIGTSTP, SIGXFSZ};
    // Not 0: the child gets this signal when its parent ends (PR_SET_PDEATHSIG, Linux), so
    // it cannot outlive us. posix_spawn cannot set that, so such a child is started with
    // fork + exec instead: the page tables are copied (vfork-like posix_spawn does not), and
    // a failed exec is not returned but written to the child's stderr ("cannot run EXE:
    // why"), which then exits with 127. "Parent" is the *thread* that forked it: fork from
    // a thread that lives as long as the child should (not a request's).
    int death_signal = 0;
};

struct Spawned {
    Child child;
    int error = 0;            // errno when it did not start (then nothing is left open)
    bool pipe_error = false;  // the error came from making its pipes, not from starting it
    bool ok() const { return error == 0; }
};

// Starts the child s describes. Without death_signal: posix_spawn (glibc runs it as a
// vfork + exec, so starting a child does not copy the page tables of a process holding
// gigabytes of weights and KV cache, nor need overcommit for them, and the child runs no
// code of ours between fork and exec).
Spawned spawn(const SpawnSpec& s);

// Why a spawn failed, for a message: errno's text for a pipe, else "cannot run ARGV0: why"
// (with a cwd: "(or no directory CWD)" after an ENOENT, which names either).
std::string spawn_error_text(const SpawnSpec& s, const Spawned& r);

// Our environment with `overrides` set over it.
std::vector<std::string> environment_with(const std::map<std::string, std::string>& overrides);

// Whether the child has exited, without reaping it: while it is a zombie its pid (its
// process group's id) cannot be reused, so a signal to the group never reaches a stranger.
// True too when it is no child of ours any more (reaped elsewhere: SIGCHLD ignored, a
// waitpid(-1)). *zombie (when given): it has exited and is not reaped yet.
bool exited_without_reaping(pid_t pid, bool* zombie = nullptr);

// Waits for the child to end and reaps it: waitpid's status, -1 when there is no such child.
int wait_status(pid_t pid);

// Waits for the child and reaps it: its exit code, 128 + N when signal N killed it (as a
// shell reports it), -1 otherwise.
int reap(pid_t pid);

// "exited with status N" or "was killed by signal N" for a waitpid status; "" otherwise.
std::string exit_text(int status);

// sig to the child's process group, and to the child alone when it has no group of its own
// (the group signal found no one).
void kill_group(pid_t pid, int sig = SIGKILL);

// ---- running a command to its end -------------------------------------------------------

struct RunOptions {
    std::string cwd;                     // empty: ours
    std::optional<std::vector<std::string>> env;  // its environment ("KEY=value"); none: ours
    const std::string* input = nullptr;  // written to its stdin (else /dev/null)
    bool merge_stderr = true;
    size_t max_output = 0;  // bytes of stdout kept (and passed to on_chunk)
    std::chrono::milliseconds timeout{0};
    const std::atomic<bool>* cancel = nullptr;
    // Each piece of output as read, within max_output; false stops the command.
    std::function<bool(std::string_view)> on_chunk;
};

struct RunResult {
    std::string start_error;  // set when it could not start
    std::string output;       // stdout (+ stderr), at most max_output bytes
    std::string errors;       // stderr when kept apart, at most 4 KiB
    int exit_code = -1;       // 128 + signal when killed
    bool truncated = false;   // output went past max_output (the rest was read and dropped)
    bool timed_out = false;
    bool cancelled = false;  // cancel was set, or on_chunk said stop
    bool started() const { return start_error.empty(); }
};

// Runs argv (looked up in PATH) in a process group of its own to its end, its timeout or a
// cancel (then the group is killed), and reaps it. Output is drained past max_output so the
// child never blocks on a full pipe. Background jobs that keep the output open keep it
// running until the timeout; a job that detached from it (nohup ... >/dev/null &) outlives
// the call.
RunResult run_process(const std::vector<std::string>& argv, const RunOptions& o);

}  // namespace edgellm::sys
