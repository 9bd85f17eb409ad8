// MCP over stdio: child processes, line framing, JSON-RPC ids, warm-up and respawn.
// Behaviour follows llama-server's tools/server/server-mcp.cpp (the config format, the
// initialize / notifications/initialized / tools/list / tools/call exchange, NAME_TOOL,
// the 30 s call and 10 s warm-up bounds, the /tools result shapes); the implementation is
// ours: calls to one server are multiplexed by id instead of taking turns.
#include "agent/mcp.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <system_error>
#include <thread>

#include "edgellm/version.h"
#include "sys/strings.h"
#include "sys/subprocess.h"

namespace edgellm::agent {

namespace {

using Clock = std::chrono::steady_clock;
using sys::close_fd;
using sys::errno_text;
using std::chrono::milliseconds;

constexpr const char* kProtocolVersion = "2024-11-05";  // what llama-server asks for
constexpr int kPollMs = 50;                // every wait looks at its stop flags this often
constexpr int kCloseStdinWaitMs = 200;     // stopping: stdin closed, then this long to exit
constexpr int kKillWaitMs = 2000;          // after SIGKILL (a process in D state may linger)
constexpr int kExitAfterEofMs = 500;       // stdout closed: this long for the exit status
constexpr int kReplyWriteMs = 1000;        // the reader answering a server's request
constexpr int kNoticeWriteMs = 200;        // notifications/cancelled, best effort
constexpr size_t kStderrLineBytes = 4096;  // a longer stderr line is cut
constexpr size_t kStderrTailBytes = 512;   // kept for the error when a server dies
constexpr size_t kIdScanBytes = 4096;      // of an oversized line, searched for its "id"
constexpr int kMalformedLogged = 5;        // per process; further ones are only counted
constexpr int kMaxToolPages = 100;         // tools/list nextCursor pages followed

using Logger = std::function<void(const std::string&)>;

void log_to_stderr(const std::string& line) {
    std::time_t t = std::time(nullptr);
    std::tm local{};
    localtime_r(&t, &local);
    char ts[32];
    std::strftime(ts, sizeof ts, "%H:%M:%S", &local);
    std::fprintf(stderr, "%s edgellm mcp: %s\n", ts, line.c_str());
}

// At most `max` bytes of s for a log line or an error message: control characters and bytes
// that are not UTF-8 become '?' (the text may go into a JSON response, which must be UTF-8).
std::string printable(std::string_view s, size_t max) {
    std::string out;
    const size_t n = std::min(s.size(), max);
    for (size_t i = 0; i < n;) {
        const unsigned char c = (unsigned char)s[i];
        size_t len = c < 0x80           ? 1
                     : (c >> 5) == 0x6  ? 2
                     : (c >> 4) == 0xE  ? 3
                     : (c >> 3) == 0x1E ? 4
                                        : 0;
        bool ok = len > 0 && i + len <= n;
        for (size_t k = 1; ok && k < len; ++k) ok = ((unsigned char)s[i + k] >> 6) == 0x2;
        if (!ok) {
            out += '?';
            ++i;
        } else if (len == 1) {
            out += c < 0x20 || c == 0x7F ? '?' : char(c);
            ++i;
        } else {
            out.append(s.data() + i, len);
            i += len;
        }
    }
    if (s.size() > max) out += "...";
    return out;
}

// Splits a byte stream into lines ("\n", an optional "\r" before it dropped). A line longer
// than `max` is not kept: on_oversized gets its first bytes, the rest up to its newline is
// skipped, so the buffer never holds more than `max` bytes.
class LineSplitter {
  public:
    explicit LineSplitter(size_t max) : max_(max) {}

    template <typename OnLine, typename OnOversized>
    void feed(const char* p, size_t n, OnLine&& on_line, OnOversized&& on_oversized) {
        while (n > 0) {
            const char* nl = static_cast<const char*>(std::memchr(p, '\n', n));
            const size_t take = nl ? size_t(nl - p) : n;
            if (!skipping_) {
                if (buf_.size() + take > max_) {
                    std::string head = buf_.substr(0, kIdScanBytes);
                    head.append(p, std::min(take, kIdScanBytes - head.size()));
                    on_oversized(head);
                    buf_.clear();
                    skipping_ = true;
                } else {
                    buf_.append(p, take);
                }
            }
            if (!nl) break;
            if (!skipping_) emit(on_line);
            buf_.clear();
            skipping_ = false;
            p = nl + 1;
            n -= take + 1;
        }
    }
    // End of stream: a last line without its newline still counts.
    template <typename OnLine>
    void finish(OnLine&& on_line) {
        if (!skipping_) emit(on_line);
        buf_.clear();
        skipping_ = false;
    }

  private:
    template <typename OnLine>
    void emit(OnLine& on_line) {
        if (!buf_.empty() && buf_.back() == '\r') buf_.pop_back();
        if (!buf_.empty()) on_line(buf_);
    }
    size_t max_;
    std::string buf_;
    bool skipping_ = false;
};

// The integer "id" member of the top-level object that `s` begins (a prefix of a JSON
// text), if it comes before `s` ends. Nested objects and strings are skipped, so an "id"
// inside "result" does not count.
std::optional<int64_t> top_level_id(std::string_view s) {
    size_t i = 0;
    auto skip_ws = [&] {
        while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n')) ++i;
    };
    // i at an opening quote; returns the raw contents, i past the closing quote.
    auto read_string = [&]() -> std::optional<std::string_view> {
        size_t start = ++i;
        for (; i < s.size(); ++i) {
            if (s[i] == '\\') {
                ++i;
            } else if (s[i] == '"') {
                return s.substr(start, i++ - start);
            }
        }
        return std::nullopt;
    };
    skip_ws();
    if (i >= s.size() || s[i] != '{') return std::nullopt;
    ++i;
    int depth = 1;
    bool expect_key = true;  // at depth 1: the next string is a member name
    while (i < s.size()) {
        char c = s[i];
        if (c == '"') {
            auto str = read_string();
            if (!str) return std::nullopt;
            if (depth == 1 && expect_key) {
                skip_ws();
                if (i >= s.size() || s[i] != ':') return std::nullopt;
                ++i;
                expect_key = false;
                if (*str == "id") {
                    skip_ws();
                    size_t start = i;
                    if (i < s.size() && s[i] == '-') ++i;
                    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
                    if (i == start || i >= s.size()) return std::nullopt;  // not (all) there
                    if (s[i] != ',' && s[i] != '}' && s[i] != ' ' && s[i] != '\n')
                        return std::nullopt;
                    try {
                        return std::stoll(std::string(s.substr(start, i - start)));
                    } catch (...) {
                        return std::nullopt;
                    }
                }
            }
            continue;
        }
        if (c == '{' || c == '[') ++depth;
        if (c == '}' || c == ']') {
            if (--depth == 0) return std::nullopt;
        }
        if (c == ',' && depth == 1) expect_key = true;
        ++i;
    }
    return std::nullopt;
}

// SIGPIPE blocked in this thread while it writes to a child's stdin: a child that is gone
// makes write() fail with EPIPE instead of killing us (whatever the application did with
// SIGPIPE). A SIGPIPE that the failed write raised is taken back before unblocking.
class SigpipeBlock {
  public:
    SigpipeBlock() {
        sigemptyset(&set_);
        sigaddset(&set_, SIGPIPE);
        pthread_sigmask(SIG_BLOCK, &set_, &old_);
        sigset_t pending;
        sigemptyset(&pending);
        sigpending(&pending);
        pending_before_ = sigismember(&pending, SIGPIPE) == 1;
    }
    ~SigpipeBlock() {
        if (got_epipe && !pending_before_) {
            timespec zero{0, 0};
            while (sigtimedwait(&set_, nullptr, &zero) > 0) {
            }
        }
        pthread_sigmask(SIG_SETMASK, &old_, nullptr);
    }
    bool got_epipe = false;

  private:
    sigset_t set_, old_;
    bool pending_before_ = false;
};

// What stops a wait early: the caller's cancel flag and the clients' shutdown.
struct StopFlags {
    const std::atomic<bool>* cancel = nullptr;
    const std::atomic<bool>* stopping = nullptr;
    bool raised() const { return (cancel && cancel->load()) || (stopping && stopping->load()); }
};

bool is_executable_file(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
           ::access(path.c_str(), X_OK) == 0;
}

// The file to execute for `command`: as given when it has a '/' (relative to the child's
// cwd), else the first executable in PATH. "" and *err when there is none.
std::string resolve_command(const McpServerConfig& cfg, std::string* err) {
    const std::string& cmd = cfg.command;
    if (cmd.find('/') != std::string::npos) {
        std::string path = cmd[0] != '/' && !cfg.cwd.empty() ? cfg.cwd + "/" + cmd : cmd;
        if (!is_executable_file(path)) {
            *err = "cannot run '" + path + "': " + errno_text(errno ? errno : ENOENT);
            return "";
        }
        return cmd;
    }
    std::string path_var;
    if (auto it = cfg.env.find("PATH"); it != cfg.env.end()) {
        path_var = it->second;
    } else if (const char* p = std::getenv("PATH")) {
        path_var = p;
    } else {
        path_var = "/usr/local/bin:/usr/bin:/bin";
    }
    size_t start = 0;
    while (start <= path_var.size()) {
        size_t end = path_var.find(':', start);
        if (end == std::string::npos) end = path_var.size();
        std::string dir = path_var.substr(start, end - start);
        std::string candidate = (dir.empty() ? "." : dir) + "/" + cmd;
        if (is_executable_file(candidate)) return candidate;
        start = end + 1;
    }
    *err = "command not found in PATH: '" + cmd + "'";
    return "";
}

std::string rpc_error_message(const json& error) {
    if (error.is_object() && error.contains("message") && error["message"].is_string())
        return error["message"].get<std::string>();
    if (error.is_string()) return error.get<std::string>();
    return "unknown error";
}

// A tools/call response as POST /tools answers it (llama-server's two formats).
json tool_response(const json& message) {
    if (message.contains("error")) return {{"error", rpc_error_message(message["error"])}};
    if (!message.contains("result") || !message["result"].is_object())
        return {{"error", "invalid response from MCP server"}};
    const json& result = message["result"];
    std::string text;
    bool any = false;
    auto add = [&](const std::string& part) {
        if (any) text += "\n";
        text += part;
        any = true;
    };
    if (result.contains("content") && result["content"].is_array()) {
        for (const auto& part : result["content"]) {
            if (!part.is_object()) continue;
            std::string type = part.value("type", "");
            if (type == "text" && part.contains("text") && part["text"].is_string()) {
                add(part["text"].get<std::string>());
            } else if (type == "resource" && part.contains("resource") &&
                       part["resource"].is_object() && part["resource"].contains("text") &&
                       part["resource"]["text"].is_string()) {
                add(part["resource"]["text"].get<std::string>());
            }
        }
    }
    if (!any && result.contains("structuredContent") && !result["structuredContent"].is_null())
        add(result["structuredContent"].dump(-1, ' ', false, json::error_handler_t::replace));
    if (result.contains("isError") && result["isError"].is_boolean() &&
        result["isError"].get<bool>())
        return {{"error", text.empty() ? std::string("MCP tool returned an error") : text}};
    return {{"plain_text_response", text}};
}

// ---- one server process -----------------------------------------------------------------

struct SessionOptions {
    std::string name;
    Logger log;
    bool capture_stderr = true;
    size_t max_line_bytes = 0;
    int term_grace_ms = 1000;
};

// How a request ended.
struct RpcOutcome {
    enum Kind {
        Answered,  // message: the response object (with "result" or "error")
        NotSent,   // nothing reached the server (it was already gone): safe to send again
        Lost,      // sent, but the server died or the stream broke before answering
        TimedOut,
        Cancelled,
    } kind = NotSent;
    json message;
    std::string error;  // NotSent / Lost: why
};

// A running child process and its JSON-RPC session: one reader thread, any number of
// requests in flight. Created by spawn(); stop() (or the destructor) ends the child.
class Session {
  public:
    static std::shared_ptr<Session> spawn(const McpServerConfig& cfg, SessionOptions opt,
                                          std::string* err);
    ~Session() { stop(); }
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;

    // Send a request and wait for its response until `deadline` or a stop flag.
    RpcOutcome request(const std::string& method, const json& params, Clock::time_point deadline,
                       const StopFlags& stop);
    bool notify(const std::string& method, const json& params, Clock::time_point deadline);

    // initialize, then notifications/initialized. False and *err when it did not complete.
    bool initialize(Clock::time_point deadline, const StopFlags& stop, std::string* err);

    // Close stdin, then SIGTERM and SIGKILL to the process group as needed; joins the reader
    // and reaps the child. Idempotent, bounded (about 200 ms + grace + 2 s at worst).
    void stop();

    bool alive() const { return !dead_flag_.load(); }
    std::string dead_reason() const {
        std::lock_guard<std::mutex> lock(mu_);
        return dead_reason_;
    }
    pid_t pid() const { return pid_; }
    const json& server_info() const { return server_info_; }

  private:
    explicit Session(SessionOptions opt) : opt_(std::move(opt)) {}

    enum class Sent { Yes, No, Partial };
    Sent send_line(const std::string& line, Clock::time_point deadline, const StopFlags* stop);

    void read_loop();
    // Reads what fd has; false at end of stream (or an error that ends it).
    template <typename OnLine, typename OnOversized>
    bool drain(int fd, LineSplitter& splitter, OnLine&& on_line, OnOversized&& on_oversized);
    void on_stdout_line(const std::string& line);
    void on_oversized(const std::string& head);
    void on_stderr_line(const std::string& line);
    bool child_exited();
    void reap_exited_child();
    bool zombie_ = false;  // child_exited() saw it (not reaped by someone else)
    void mark_dead(const std::string& reason);
    bool wait_reaped(int ms);
    void log(const std::string& s) const { opt_.log("mcp " + opt_.name + ": " + s); }

    SessionOptions opt_;
    pid_t pid_ = -1;                 // also the process group id (the child leads its own group)
    int in_fd_ = -1;                 // child's stdin (used by the write token's holder only)
    int out_fd_ = -1, err_fd_ = -1;  // child's stdout and stderr (err: -1 when /dev/null)
    json server_info_ = nullptr;     // initialize's result.serverInfo

    std::thread reader_;
    std::atomic<bool> stop_reader_{false};
    std::atomic<bool> stopping_{false};  // stop() began: writers give up
    std::once_flag stop_once_;
    // The write token: one writer of in_fd_ at a time, so lines are never interleaved. (A
    // flag under a mutex rather than std::timed_mutex, whose timed lock TSan cannot see.)
    std::mutex write_mu_;
    std::condition_variable write_cv_;
    bool writing_ = false;
    bool take_write_token(Clock::time_point deadline) {
        std::unique_lock<std::mutex> lock(write_mu_);
        auto free = [this] { return !writing_; };
        if (deadline == Clock::time_point::max()) {
            write_cv_.wait(lock, free);
        } else if (!write_cv_.wait_until(lock, deadline, free)) {
            return false;
        }
        writing_ = true;
        return true;
    }
    void give_write_token() {
        {
            std::lock_guard<std::mutex> lock(write_mu_);
            writing_ = false;
        }
        write_cv_.notify_one();
    }

    struct Pending {
        bool done = false;
        json message;
    };
    mutable std::mutex mu_;  // guards everything below
    std::condition_variable cv_;
    std::map<int64_t, Pending*> pending_;  // the waiting requests by id (owned by their callers)
    int64_t next_id_ = 1;
    bool dead_ = false;
    std::atomic<bool> dead_flag_{false};
    std::string dead_reason_;
    bool reaped_ = false;
    std::string stderr_tail_;
    int malformed_ = 0;  // (reader thread only)
};

std::shared_ptr<Session> Session::spawn(const McpServerConfig& cfg, SessionOptions opt,
                                        std::string* err) {
    // The working directory checked here, not by the spawned child: how a failed chdir in
    // posix_spawn is reported differs (under qemu's user mode it is only a closed pipe).
    if (!cfg.cwd.empty()) {
        struct stat st {};
        if (::stat(cfg.cwd.c_str(), &st) != 0) {
            *err = "cannot start in " + cfg.cwd + ": " + std::strerror(errno);
            return nullptr;
        }
        if (!S_ISDIR(st.st_mode)) {
            *err = "cannot start in " + cfg.cwd + ": not a directory";
            return nullptr;
        }
    }
    std::string exe = resolve_command(cfg, err);
    if (exe.empty()) return nullptr;

    sys::SpawnSpec spec;
    spec.argv = {cfg.command};
    spec.argv.insert(spec.argv.end(), cfg.args.begin(), cfg.args.end());
    spec.exe = exe;
    spec.env = sys::environment_with(cfg.env);  // ours with the config's variables over it
    spec.cwd = cfg.cwd;
    spec.in = sys::SpawnSpec::Stdin::Pipe;
    spec.err = opt.capture_stderr ? sys::SpawnSpec::Stderr::Pipe : sys::SpawnSpec::Stderr::Null;
    // Its own process group (so stopping it reaches its children too, and a Ctrl-C on our
    // terminal does not), and the signals we may ignore (SIGPIPE: the server does) back to
    // their defaults.
    spec.default_signals = {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT,
                            SIGCHLD, SIGUSR1, SIGUSR2, SIGALRM};
    const sys::Spawned started = sys::spawn(spec);
    if (started.pipe_error) {
        *err = "cannot create pipes: " + errno_text(started.error);
        return nullptr;
    }
    if (!started.ok()) {
        *err = "cannot start '" + exe + "'" + (cfg.cwd.empty() ? "" : " in " + cfg.cwd) + ": " +
               errno_text(started.error);
        return nullptr;
    }

    auto s = std::shared_ptr<Session>(new Session(std::move(opt)));
    s->pid_ = started.child.pid;
    s->in_fd_ = started.child.in;
    s->out_fd_ = started.child.out;
    s->err_fd_ = started.child.err;
    s->reader_ = std::thread([p = s.get()] { p->read_loop(); });
    return s;
}

Session::Sent Session::send_line(const std::string& line, Clock::time_point deadline,
                                 const StopFlags* stop) {
    if (!take_write_token(deadline)) return Sent::No;
    struct Give {
        Session* s;
        bool held = true;
        void now() {
            if (held) s->give_write_token();
            held = false;
        }
        ~Give() { now(); }
    } give{this};
    if (in_fd_ < 0 || stopping_) return Sent::No;
    SigpipeBlock guard;
    size_t off = 0;
    while (off < line.size()) {
        ssize_t n = ::write(in_fd_, line.data() + off, line.size() - off);
        if (n > 0) {
            off += size_t(n);
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            // The pipe is full: the server is not reading (yet).
            if (stopping_ || (stop && stop->raised()) || Clock::now() >= deadline)
                return off ? Sent::Partial : Sent::No;
            pollfd pfd{in_fd_, POLLOUT, 0};
            if (::poll(&pfd, 1, kPollMs) < 0 && errno != EINTR)
                return off ? Sent::Partial : Sent::No;
            continue;
        }
        int e = n < 0 ? errno : EIO;
        if (e == EPIPE) guard.got_epipe = true;
        give.now();
        mark_dead(e == EPIPE ? "closed its stdin"
                             : "writing to its stdin failed: " + errno_text(e));
        return off ? Sent::Partial : Sent::No;
    }
    return Sent::Yes;
}

RpcOutcome Session::request(const std::string& method, const json& params,
                            Clock::time_point deadline, const StopFlags& stop) {
    RpcOutcome out;
    Pending p;
    int64_t id;
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (dead_) {
            out.error = dead_reason_;
            return out;  // NotSent
        }
        id = next_id_++;
        pending_[id] = &p;  // before sending: the answer may come before write() returns
    }
    json msg = {{"jsonrpc", "2.0"}, {"id", id}, {"method", method}};
    if (!params.is_null()) msg["params"] = params;
    Sent sent =
        send_line(msg.dump(-1, ' ', false, json::error_handler_t::replace) + "\n", deadline, &stop);

    std::unique_lock<std::mutex> lock(mu_);
    if (sent != Sent::Yes) {
        pending_.erase(id);
        if (sent == Sent::Partial) {
            out.kind = RpcOutcome::Lost;
            out.error = dead_ ? dead_reason_ : "the request was cut off while writing";
            lock.unlock();
            mark_dead(out.error);  // the stream is broken for every later line
        } else if (dead_) {
            out.error = dead_reason_;  // NotSent
        } else if (stopping_) {
            out.error = "was being stopped";  // NotSent
        } else {
            out.kind = stop.raised() ? RpcOutcome::Cancelled : RpcOutcome::TimedOut;
        }
        return out;
    }
    for (;;) {
        if (p.done) {
            pending_.erase(id);
            out.kind = RpcOutcome::Answered;
            out.message = std::move(p.message);
            return out;
        }
        if (dead_) {
            pending_.erase(id);
            out.kind = RpcOutcome::Lost;
            out.error = dead_reason_;
            return out;
        }
        const auto now = Clock::now();
        if (stop.raised() || now >= deadline) {
            pending_.erase(id);
            out.kind = stop.raised() ? RpcOutcome::Cancelled : RpcOutcome::TimedOut;
            lock.unlock();
            // MCP: the client tells the server it no longer waits (its late answer is dropped).
            notify("notifications/cancelled",
                   {{"requestId", id},
                    {"reason", out.kind == RpcOutcome::Cancelled ? "cancelled" : "timed out"}},
                   Clock::now() + milliseconds(kNoticeWriteMs));
            return out;
        }
        cv_.wait_until(lock, std::min(deadline, now + milliseconds(kPollMs)));
    }
}

bool Session::notify(const std::string& method, const json& params, Clock::time_point deadline) {
    json msg = {{"jsonrpc", "2.0"}, {"method", method}};
    if (!params.is_null()) msg["params"] = params;
    Sent sent = send_line(msg.dump(-1, ' ', false, json::error_handler_t::replace) + "\n", deadline,
                          nullptr);
    if (sent == Sent::Partial) mark_dead("a notification was cut off while writing");
    return sent == Sent::Yes;
}

bool Session::initialize(Clock::time_point deadline, const StopFlags& stop, std::string* err) {
    json params = {{"protocolVersion", kProtocolVersion},
                   {"capabilities", json::object()},
                   {"clientInfo", {{"name", "edgellm"}, {"version", EDGELLM_VERSION}}}};
    RpcOutcome r = request("initialize", params, deadline, stop);
    switch (r.kind) {
        case RpcOutcome::Answered:
            break;
        case RpcOutcome::TimedOut:
            *err = "no answer to initialize in time";
            return false;
        case RpcOutcome::Cancelled:
            *err = "cancelled";
            return false;
        default:
            *err = "initialize: the server " + r.error;
            return false;
    }
    if (r.message.contains("error")) {
        *err = "initialize failed: " + rpc_error_message(r.message["error"]);
        return false;
    }
    if (!r.message.contains("result") || !r.message["result"].is_object()) {
        *err = "initialize: the reply has no result object";
        return false;
    }
    const json& result = r.message["result"];
    if (result.contains("serverInfo")) server_info_ = result["serverInfo"];
    // (any protocolVersion is accepted: tools/list and tools/call are the same in all)
    if (!notify("notifications/initialized", nullptr, deadline)) {
        *err = "cannot send notifications/initialized";
        return false;
    }
    return true;
}

template <typename OnLine, typename OnOversized>
bool Session::drain(int fd, LineSplitter& splitter, OnLine&& on_line, OnOversized&& on_oversized) {
    char chunk[16384];
    for (;;) {
        ssize_t n = ::read(fd, chunk, sizeof chunk);
        if (n > 0) {
            splitter.feed(chunk, size_t(n), on_line, on_oversized);
            if (stop_reader_) return true;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
        splitter.finish(on_line);  // EOF (or a read error, which ends the stream too)
        return false;
    }
}

void Session::read_loop() {
    LineSplitter out(opt_.max_line_bytes), err(kStderrLineBytes);
    auto out_line = [this](const std::string& l) { on_stdout_line(l); };
    auto out_big = [this](const std::string& head) { on_oversized(head); };
    auto err_line = [this](const std::string& l) { on_stderr_line(l); };
    auto err_big = [this](const std::string& head) { on_stderr_line(head + "..."); };
    bool out_open = true, err_open = err_fd_ >= 0;
    Clock::time_point out_closed_at{};
    while (!stop_reader_) {
        pollfd fds[2];
        int n = 0, i_out = -1, i_err = -1;
        if (out_open) fds[i_out = n++] = pollfd{out_fd_, POLLIN, 0};
        if (err_open) fds[i_err = n++] = pollfd{err_fd_, POLLIN, 0};
        int r = 0;
        if (n > 0) {
            r = ::poll(fds, nfds_t(n), kPollMs);
        } else {
            std::this_thread::sleep_for(milliseconds(kPollMs));  // (both closed: waiting for exit)
        }
        if (r < 0 && errno != EINTR) std::this_thread::sleep_for(milliseconds(kPollMs));
        if (r > 0 && i_out >= 0 && fds[i_out].revents) {
            out_open = drain(out_fd_, out, out_line, out_big);
            if (!out_open) out_closed_at = Clock::now();
        }
        // A server closing its stdout is usually exiting: its exit status says more, so the
        // session is declared dead by that, unless it keeps running.
        if (!out_open && alive() && Clock::now() - out_closed_at > milliseconds(kExitAfterEofMs))
            mark_dead("closed its stdout");
        if (r > 0 && i_err >= 0 && fds[i_err].revents)
            err_open = drain(err_fd_, err, err_line, err_big);
        if (child_exited()) {
            // What it wrote before exiting is all in the pipes by now.
            if (out_open) drain(out_fd_, out, out_line, out_big);
            if (err_open) drain(err_fd_, err, err_line, err_big);
            reap_exited_child();
            return;
        }
    }
}

void Session::on_stdout_line(const std::string& line) {
    json msg = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (msg.is_discarded() || !msg.is_object()) {
        if (++malformed_ <= kMalformedLogged) {
            log("ignored a line that is not a JSON-RPC message: " + printable(line, 200) +
                (malformed_ == kMalformedLogged ? " (further ones are not logged)" : ""));
        }
        return;
    }
    const bool has_id = msg.contains("id") && !msg["id"].is_null();
    if (msg.contains("method") && msg["method"].is_string()) {
        const std::string method = msg["method"].get<std::string>();
        if (!has_id) {
            // A notification (progress, log messages, list_changed): nothing to answer.
            if (method == "notifications/message" && opt_.capture_stderr && msg.contains("params"))
                log("message: " + printable(msg["params"].dump(), 1000));
            return;
        }
        // A request from the server. ping is answered; we offer no other client capability.
        json reply = {{"jsonrpc", "2.0"}, {"id", msg["id"]}};
        if (method == "ping") {
            reply["result"] = json::object();
        } else {
            reply["error"] = {{"code", -32601}, {"message", "Method not found: " + method}};
        }
        send_line(reply.dump(-1, ' ', false, json::error_handler_t::replace) + "\n",
                  Clock::now() + milliseconds(kReplyWriteMs), nullptr);
        return;
    }
    if (!has_id || !msg["id"].is_number_integer() ||
        (!msg.contains("result") && !msg.contains("error"))) {
        log("ignored a message that is neither a request, a notification nor a response: " +
            printable(line, 200));
        return;
    }
    const int64_t id = msg["id"].get<int64_t>();
    {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = pending_.find(id);
        if (it != pending_.end()) {
            it->second->message = std::move(msg);
            it->second->done = true;
            cv_.notify_all();
            return;
        }
    }
    log("dropped a response to request " + std::to_string(id) + " (no longer waited for)");
}

void Session::on_oversized(const std::string& head) {
    log("dropped a line longer than " + std::to_string(opt_.max_line_bytes) + " bytes");
    auto id = top_level_id(head);
    if (!id) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pending_.find(*id);
    if (it == pending_.end()) return;
    it->second->message = {
        {"jsonrpc", "2.0"},
        {"id", *id},
        {"error",
         {{"code", -32603},
          {"message", "reply larger than " + std::to_string(opt_.max_line_bytes) + " bytes"}}}};
    it->second->done = true;
    cv_.notify_all();
}

void Session::on_stderr_line(const std::string& line) {
    log("stderr: " + printable(line, kStderrLineBytes));
    std::lock_guard<std::mutex> lock(mu_);
    stderr_tail_ += line;
    stderr_tail_ += '\n';
    if (stderr_tail_.size() > kStderrTailBytes)
        stderr_tail_.erase(0, stderr_tail_.size() - kStderrTailBytes);
}

// The child has exited (it is a zombie, not reaped: its pid, and so its process group id,
// stay reserved until reap_exited_child()).
bool Session::child_exited() {
    return sys::exited_without_reaping(pid_, &zombie_);
}

void Session::reap_exited_child() {
    std::string reason;
    {
        std::lock_guard<std::mutex> lock(mu_);
        // What it left in its group (helpers it started) goes with it; safe while the
        // leader's zombie keeps the group id from being reused (not when it is gone already).
        if (zombie_) sys::kill_group(pid_, SIGKILL);
        reason = sys::exit_text(sys::wait_status(pid_));
        reaped_ = true;
        if (reason.empty()) reason = "exited";
        if (!stderr_tail_.empty()) {
            std::string tail = stderr_tail_;
            while (!tail.empty() && tail.back() == '\n') tail.pop_back();
            reason += " (stderr: " + printable(tail, kStderrTailBytes) + ")";
        }
        cv_.notify_all();
    }
    if (!stopping_) log("the server " + reason);
    mark_dead(reason);
}

void Session::mark_dead(const std::string& reason) {
    std::lock_guard<std::mutex> lock(mu_);
    if (dead_) return;
    dead_ = true;
    dead_flag_ = true;
    dead_reason_ = reason;
    cv_.notify_all();
}

bool Session::wait_reaped(int ms) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, milliseconds(ms), [this] { return reaped_; });
}

void Session::stop() {
    std::call_once(stop_once_, [this] {
        stopping_ = true;
        {
            // Writers see stopping_ within kPollMs; then EOF on the server's stdin, which is
            // how MCP asks a stdio server to exit.
            take_write_token(Clock::time_point::max());
            close_fd(&in_fd_);
            give_write_token();
        }
        // Signals go to the group only while the leader is unreaped (under mu_, which the
        // reaping holds), so they cannot reach a process that reused its pid.
        auto signal_group = [this](int sig) {
            std::lock_guard<std::mutex> lock(mu_);
            if (!reaped_) sys::kill_group(pid_, sig);
        };
        if (!wait_reaped(kCloseStdinWaitMs)) {
            signal_group(SIGTERM);
            if (!wait_reaped(opt_.term_grace_ms)) {
                log("did not exit on SIGTERM; killing it");
                signal_group(SIGKILL);
                wait_reaped(kKillWaitMs);
            }
        }
        // The reader leaves within kPollMs, even when a grandchild that left the group still
        // holds the other ends of the pipes (no EOF is waited for).
        stop_reader_ = true;
        if (reader_.joinable()) reader_.join();
        {
            std::lock_guard<std::mutex> lock(mu_);
            if (!reaped_) {
                int status;
                if (::waitpid(pid_, &status, WNOHANG) == pid_) {
                    reaped_ = true;
                } else {
                    opt_.log("mcp " + opt_.name + ": process " + std::to_string(pid_) +
                             " could not be reaped");
                }
            }
        }
        mark_dead("stopped");
        close_fd(&out_fd_);
        close_fd(&err_fd_);
    });
}

}  // namespace

// ---- configuration ------------------------------------------------------------------------

namespace {

Result<McpServerConfig> parse_server_entry(const std::string& name, const json& e) {
    using R = Result<McpServerConfig>;
    const std::string where = "mcpServers." + name;
    auto wrong = [&](const std::string& field, const char* expected, const json& v) {
        return R::fail("MCP config: " + where + field + ": expected " + expected + ", found " +
                       v.type_name());
    };
    // A field that, when given, must be a string.
    auto string_field = [&](const char* key, std::string* to) -> std::optional<R> {
        if (!e.contains(key)) return std::nullopt;
        if (!e[key].is_string()) return wrong(std::string(".") + key, "a string", e[key]);
        *to = e[key].get<std::string>();
        return std::nullopt;
    };
    if (!e.is_object()) return wrong("", "an object", e);
    McpServerConfig c;
    c.name = name;
    if (auto bad = string_field("command", &c.command)) return *bad;
    if (e.contains("args")) {
        const json& a = e["args"];
        if (!a.is_array()) return wrong(".args", "an array of strings", a);
        for (size_t i = 0; i < a.size(); ++i) {
            if (!a[i].is_string())
                return wrong(".args[" + std::to_string(i) + "]", "a string", a[i]);
            c.args.push_back(a[i].get<std::string>());
        }
    }
    if (e.contains("env")) {
        const json& env = e["env"];
        if (!env.is_object()) return wrong(".env", "an object of strings", env);
        for (const auto& [k, v] : env.items()) {
            if (!v.is_string()) return wrong(".env." + k, "a string", v);
            if (k.empty() || k.find('=') != std::string::npos)
                return R::fail("MCP config: " + where + ".env: invalid variable name '" + k + "'");
            c.env[k] = v.get<std::string>();
        }
    }
    if (auto bad = string_field("cwd", &c.cwd)) return *bad;
    if (e.contains("timeout_ms")) {
        const json& t = e["timeout_ms"];
        if (!t.is_number()) return wrong(".timeout_ms", "a number", t);
        double ms = t.get<double>();
        if (!(ms >= 1 && ms <= 24.0 * 3600 * 1000))
            return R::fail("MCP config: " + where +
                           ".timeout_ms: must be between 1 and 86400000, is " + t.dump());
        c.timeout_ms = int(ms);
    }
    return c;
}

}  // namespace

Result<std::vector<McpServerConfig>> parse_mcp_config(const std::string& json_text,
                                                      std::vector<std::string>* warnings) {
    using R = Result<std::vector<McpServerConfig>>;
    auto warn = [&](const std::string& w) {
        if (warnings) warnings->push_back(w);
    };
    json j;
    try {
        j = json::parse(json_text);
    } catch (const std::exception& e) {
        return R::fail(std::string("failed to parse MCP config JSON: ") + e.what());
    }
    std::vector<McpServerConfig> out;
    if (!j.is_object() || !j.contains("mcpServers") || !j["mcpServers"].is_object()) {
        warn("MCP config: no \"mcpServers\" object, no servers");
        return out;
    }
    for (const auto& [name, entry] : j["mcpServers"].items()) {
        if (name.empty()) return R::fail("MCP config: mcpServers: a server has an empty name");
        auto c = parse_server_entry(name, entry);
        if (!c) return R::fail(c.error());
        if (c->command.empty()) {
            warn("MCP server '" + name + "' has no command" +
                 (entry.contains("url") ? " (only stdio servers are supported)" : "") +
                 ", skipping");
            continue;
        }
        out.push_back(std::move(*c));
    }
    if (out.empty()) warn("MCP config: no servers found in JSON");
    return out;
}

Result<std::vector<McpServerConfig>> load_mcp_config(const std::string& config_path,
                                                     const std::string& inline_json,
                                                     std::vector<std::string>* warnings) {
    using R = Result<std::vector<McpServerConfig>>;
    std::vector<McpServerConfig> all;
    auto append = [&](const std::string& text) -> std::optional<std::string> {
        auto parsed = parse_mcp_config(text, warnings);
        if (!parsed) return parsed.error();
        for (auto& c : *parsed) {
            bool taken = std::any_of(all.begin(), all.end(),
                                     [&](const McpServerConfig& o) { return o.name == c.name; });
            if (taken) {
                if (warnings)
                    warnings->push_back("MCP config: duplicate server name '" + c.name +
                                        "', skipping");
                continue;
            }
            all.push_back(std::move(c));
        }
        return std::nullopt;
    };
    if (!config_path.empty()) {
        std::ifstream f(config_path, std::ios::binary);
        if (!f) {
            return R::fail("failed to open MCP config file: " + config_path + " (" +
                           errno_text(errno ? errno : ENOENT) + ")");
        }
        std::stringstream ss;
        ss << f.rdbuf();
        if (auto e = append(ss.str())) return R::fail(*e + " (in " + config_path + ")");
    }
    if (!inline_json.empty()) {
        if (auto e = append(inline_json)) return R::fail(*e + " (in --mcp-servers-json)");
    }
    return all;
}

// ---- the clients ----------------------------------------------------------------------------

struct McpClients::Impl {
    McpOptions opt;
    Logger log;

    struct ToolDef {
        std::string name;  // the server's
        std::string description;
        json input_schema;
        bool read_only = false;  // declared so: annotations.readOnlyHint true
    };
    struct Server {
        McpServerConfig cfg;
        std::vector<ToolDef> tools;  // from warm-up
        mutable std::mutex mu;       // guards what follows
        std::condition_variable cv;
        std::shared_ptr<Session> session;
        bool starting = false;  // one caller starts it; the others wait for that
        Clock::time_point retry_after{};
        std::string error;
    };
    std::vector<std::unique_ptr<Server>> servers;

    struct Route {
        Server* server;
        std::string tool;
    };
    std::map<std::string, Route, std::less<>> routes;  // NAME_TOOL -> server and its tool
    json listing = json::array();                      // list()'s answer (fixed at warm-up)

    std::atomic<bool> stopping{false};
    std::mutex flight_mu;
    std::condition_variable flight_cv;
    int in_flight = 0;

    SessionOptions session_options(const Server& s) const {
        SessionOptions so;
        so.name = s.cfg.name;
        so.log = log;
        so.capture_stderr = opt.log_child_stderr;
        so.max_line_bytes = std::max<size_t>(opt.max_line_bytes, 1024);
        so.term_grace_ms = opt.term_grace_ms;
        return so;
    }

    // A live, initialized session of `s`, starting one (by one caller) when there is none.
    // *err: why not ("cancelled", or the start failure for `what` to say).
    std::shared_ptr<Session> acquire(Server& s, Clock::time_point deadline, const StopFlags& stop,
                                     bool log_failure, std::string* err) {
        std::unique_lock<std::mutex> lock(s.mu);
        for (;;) {
            if (stop.raised()) {
                *err = "cancelled";
                return nullptr;
            }
            if (s.session && s.session->alive()) return s.session;
            if (!s.starting) break;
            s.cv.wait_for(lock, milliseconds(kPollMs));
        }
        if (Clock::now() < s.retry_after) {
            *err = "MCP server unavailable: " + s.cfg.name + " (" + s.error + ")";
            return nullptr;
        }
        std::shared_ptr<Session> old = std::move(s.session);
        s.starting = true;
        lock.unlock();

        if (old) {
            log("mcp " + s.cfg.name + ": the server " + old->dead_reason() + "; starting it again");
            old->stop();  // (calls still holding it see it dead)
        }
        std::string why;
        auto fresh = Session::spawn(s.cfg, session_options(s), &why);
        if (fresh && !fresh->initialize(deadline, stop, &why)) {
            fresh->stop();
            fresh.reset();
        }

        lock.lock();
        s.starting = false;
        s.cv.notify_all();
        if (!fresh) {
            if (!stop.raised()) {
                s.retry_after = Clock::now() + milliseconds(opt.retry_after_ms);
                s.error = why;
                if (log_failure) log("mcp " + s.cfg.name + ": cannot start: " + why);
                *err = "MCP server unavailable: " + s.cfg.name + " (" + why + ")";
            } else {
                *err = "cancelled";
            }
            return nullptr;
        }
        s.error.clear();
        s.session = fresh;
        return fresh;
    }

    // Start s, initialize it and list its tools; false (logged, s.error set) when it fails.
    bool warm_up(Server& s) {
        const auto deadline = Clock::now() + milliseconds(opt.start_timeout_ms);
        const StopFlags stop{nullptr, &stopping};
        std::string err;
        auto session = acquire(s, deadline, stop, /*log_failure=*/false, &err);
        if (!session) err = s.error.empty() ? err : s.error;
        std::vector<ToolDef> tools;
        std::string cursor;
        for (int page = 0; session && page < kMaxToolPages; ++page) {
            json params = json::object();
            if (!cursor.empty()) params["cursor"] = cursor;
            RpcOutcome r = session->request("tools/list", params, deadline, stop);
            if (r.kind != RpcOutcome::Answered) {
                err = r.kind == RpcOutcome::TimedOut ? "no answer to tools/list in time"
                                                     : "tools/list: the server " + r.error;
                break;
            }
            if (r.message.contains("error")) {
                err = "tools/list failed: " + rpc_error_message(r.message["error"]);
                break;
            }
            const json result = r.message.value("result", json());
            if (!result.is_object() || !result.contains("tools") || !result["tools"].is_array()) {
                err = "tools/list: the reply has no tools array";
                break;
            }
            for (const auto& t : result["tools"]) {
                if (!t.is_object() || !t.contains("name") || !t["name"].is_string() ||
                    t["name"].get<std::string>().empty()) {
                    log("mcp " + s.cfg.name +
                        ": ignored a tool without a name: " + printable(t.dump(), 200));
                    continue;
                }
                ToolDef d;
                d.name = t["name"].get<std::string>();
                if (t.contains("description") && t["description"].is_string())
                    d.description = t["description"].get<std::string>();
                if (t.contains("inputSchema") && t["inputSchema"].is_object()) {
                    d.input_schema = t["inputSchema"];
                } else {
                    d.input_schema = {{"type", "object"}, {"properties", json::object()}};
                }
                const json hints = t.value("annotations", json::object());
                d.read_only = hints.is_object() && hints.value("readOnlyHint", json()) == true;
                tools.push_back(std::move(d));
            }
            cursor = result.contains("nextCursor") && result["nextCursor"].is_string()
                         ? result["nextCursor"].get<std::string>()
                         : "";
            if (cursor.empty()) {
                s.tools = std::move(tools);
                std::string info;
                if (session->server_info().is_object())
                    info = " (" + session->server_info().value("name", std::string("?")) + " " +
                           session->server_info().value("version", std::string("?")) + ")";
                log("mcp " + s.cfg.name + ": ready with " + std::to_string(s.tools.size()) +
                    " tools, pid " + std::to_string(session->pid()) + info);
                return true;
            }
        }
        if (err.empty()) err = "tools/list: more than " + std::to_string(kMaxToolPages) + " pages";
        log("mcp " + s.cfg.name + ": left out: " + err);
        std::shared_ptr<Session> gone;
        {
            std::lock_guard<std::mutex> lock(s.mu);
            s.error = err;
            gone = std::move(s.session);
        }
        if (gone) gone->stop();
        return false;
    }
};

McpClients::McpClients(std::vector<McpServerConfig> servers, McpOptions options)
    : impl_(std::make_unique<Impl>()) {
    Impl& d = *impl_;
    d.opt = std::move(options);
    d.log = d.opt.log ? d.opt.log : Logger(log_to_stderr);
    for (auto& c : servers) {
        auto s = std::make_unique<Impl::Server>();
        s->cfg = std::move(c);
        d.servers.push_back(std::move(s));
    }
    // Warm-up, every server at once: start-up waits for the slowest, not for the sum.
    std::vector<std::thread> warming;
    for (auto& s : d.servers) warming.emplace_back([&d, p = s.get()] { d.warm_up(*p); });
    for (auto& t : warming) t.join();

    for (auto& s : d.servers) {
        for (const auto& t : s->tools) {
            std::string full = s->cfg.name + "_" + t.name;
            if (d.routes.count(full)) {
                d.log("mcp " + s->cfg.name + ": tool " + full +
                      " collides with one already listed, skipping");
                continue;
            }
            d.routes.emplace(full, Impl::Route{s.get(), t.name});
            d.listing.push_back({{"display_name", full},
                                 {"tool", full},
                                 {"type", "mcp"},
                                 {"permissions", {{"write", !t.read_only}}},
                                 {"uses_cwd", false},
                                 {"definition",
                                  {{"type", "function"},
                                   {"function",
                                    {{"name", full},
                                     {"description", t.description},
                                     {"parameters", t.input_schema}}}}}});
        }
    }
}

McpClients::~McpClients() {
    Impl& d = *impl_;
    shutdown();
    {
        std::unique_lock<std::mutex> lock(d.flight_mu);
        d.flight_cv.wait(lock, [&] { return d.in_flight == 0; });
    }
    // Stopped in parallel: the grace periods overlap.
    std::vector<std::shared_ptr<Session>> sessions;
    for (auto& s : d.servers) {
        std::lock_guard<std::mutex> lock(s->mu);
        if (s->session) sessions.push_back(std::move(s->session));
    }
    std::vector<std::thread> stoppers;
    for (auto& session : sessions) stoppers.emplace_back([p = session.get()] { p->stop(); });
    for (auto& t : stoppers) t.join();
}

json McpClients::list() const {
    return impl_->listing;
}

std::vector<std::string> McpClients::writers() const {
    std::vector<std::string> names;
    for (const json& t : impl_->listing)
        if (t["permissions"]["write"] == true) names.push_back(t["tool"]);
    return names;
}

bool McpClients::has(std::string_view tool) const {
    return impl_->routes.find(tool) != impl_->routes.end();
}

bool McpClients::empty() const {
    return impl_->routes.empty();
}

void McpClients::shutdown() {
    impl_->stopping = true;
}

std::optional<ApiError> McpClients::call(const std::string& tool, const json& params, json* result,
                                         const std::atomic<bool>* cancel) {
    Impl& d = *impl_;
    auto it = d.routes.find(tool);
    if (it == d.routes.end()) {
        ApiError e;
        e.status = 404;
        e.message = "unknown tool \"" + tool + "\"";
        return e;
    }
    if (!params.is_null() && !params.is_object()) return bad_request("params: expected an object");
    const json arguments = params.is_null() ? json::object() : params;

    {
        std::lock_guard<std::mutex> lock(d.flight_mu);
        ++d.in_flight;
    }
    struct Leave {
        Impl& d;
        ~Leave() {
            std::lock_guard<std::mutex> lock(d.flight_mu);
            if (--d.in_flight == 0) d.flight_cv.notify_all();
        }
    } leave{d};

    Impl::Server& s = *it->second.server;
    const StopFlags stop{cancel, &d.stopping};
    // Twice at most: when the request never reached the server (it had just died), a fresh
    // one gets it. A request that did reach it is not repeated (a tool may have effects).
    for (int attempt = 0;; ++attempt) {
        std::string err;
        auto session = d.acquire(s, Clock::now() + milliseconds(d.opt.start_timeout_ms), stop,
                                 /*log_failure=*/true, &err);
        if (!session) {
            *result = {{"error", err}};
            return std::nullopt;
        }
        RpcOutcome r =
            session->request("tools/call", {{"name", it->second.tool}, {"arguments", arguments}},
                             Clock::now() + milliseconds(s.cfg.timeout_ms), stop);
        switch (r.kind) {
            case RpcOutcome::Answered:
                *result = tool_response(r.message);
                return std::nullopt;
            case RpcOutcome::TimedOut:
                *result = {{"error",
                            "request timed out after " + std::to_string(s.cfg.timeout_ms) + " ms"}};
                return std::nullopt;
            case RpcOutcome::Cancelled:
                *result = {{"error", "cancelled"}};
                return std::nullopt;
            case RpcOutcome::NotSent:
                if (attempt == 0) continue;
                [[fallthrough]];
            case RpcOutcome::Lost:
                *result = {
                    {"error", "MCP server " + s.cfg.name + " " + r.error + " before answering"}};
                return std::nullopt;
        }
    }
}

std::vector<McpServerStatus> McpClients::servers() const {
    std::vector<McpServerStatus> out;
    for (const auto& s : impl_->servers) {
        McpServerStatus st;
        st.name = s->cfg.name;
        st.n_tools = s->tools.size();
        std::lock_guard<std::mutex> lock(s->mu);
        st.error = s->error;
        if (s->session) {
            st.running = s->session->alive();
            st.pid = s->session->pid();
        }
        out.push_back(std::move(st));
    }
    return out;
}

}  // namespace edgellm::agent
