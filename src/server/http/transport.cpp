#include "server/http/transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <list>
#include <mutex>
#include <optional>
#include <thread>

#include "server/http/http_text.h"

namespace edgellm::http {

using namespace text;

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kRecvChunk = 64 << 10;       // bytes per recv()
constexpr int kLingerMs = 500;                // drain after an error before close()
constexpr size_t kLingerMaxBytes = 16 << 20;  // ... at most this much
constexpr size_t kMaxChunkLine = 4096;        // "1a2b;ext=...\r\n"
constexpr size_t kMaxRejected = 128;          // 503'd sockets drained by the accept loop
constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
// A connection refused for the connection limit may try again this soon: connections end
// all the time (a request answered, a keep-alive timed out, a slow head cut).
constexpr const char* kRetryConnectSeconds = "1";

// Milliseconds left until `deadline` for poll(): 0 when past, rounded up otherwise.
int ms_until(Clock::time_point deadline) {
    const auto left = deadline - Clock::now();
    if (left <= Clock::duration::zero()) return 0;
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
    return (int)std::min<int64_t>(ms, 1 << 30);
}

Clock::time_point after_ms(int ms) {
    return Clock::now() + std::chrono::milliseconds(ms);
}

// "10 s", "1.5 s": a timeout as its flag gives it.
std::string seconds_text(int ms) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g s", ms / 1000.0);
    return buf;
}

bool set_nonblocking(int fd) {
    const int flags = fcntl(fd, F_GETFL, 0);
    return flags >= 0 && fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

// "127.0.0.1" or "::1"; a v4-mapped IPv6 peer prints as its IPv4 address.
std::string address_text(const sockaddr_storage& ss) {
    char buf[INET6_ADDRSTRLEN] = "";
    if (ss.ss_family == AF_INET) {
        inet_ntop(AF_INET, &((const sockaddr_in*)&ss)->sin_addr, buf, sizeof buf);
    } else if (ss.ss_family == AF_INET6) {
        const auto* a6 = &((const sockaddr_in6*)&ss)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(a6))
            inet_ntop(AF_INET, &a6->s6_addr[12], buf, sizeof buf);
        else
            inet_ntop(AF_INET6, a6, buf, sizeof buf);
    }
    return buf;
}

// Sends all of `bytes` on the non-blocking socket `fd`. Waits for room at most
// `timeout_ms`; gives up early if the peer is gone or `wake_fd` (the stop pipe) is readable
// while the socket is full. MSG_NOSIGNAL: a closed peer is an error return, never SIGPIPE.
bool send_all(int fd, int wake_fd, std::string_view bytes, int timeout_ms) {
    const auto deadline = after_ms(timeout_ms);
    while (!bytes.empty()) {
        const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            bytes.remove_prefix((size_t)n);
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return false;
        pollfd p[2] = {{fd, POLLOUT, 0}, {wake_fd, POLLIN, 0}};
        const int r = ::poll(p, 2, ms_until(deadline));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;  // write timeout (or poll failure)
        if (p[0].revents & (POLLERR | POLLHUP | POLLNVAL)) return false;
        if (!(p[0].revents & POLLOUT) && p[1].revents) return false;  // stopping while full
    }
    return true;
}

}  // namespace

// ---- shared server state ------------------------------------------------------------------

namespace detail {

struct ServerState {
    Options opts;
    Server::Handler handler;
    std::vector<int> listen_fds;  // one per address of Options::host
    int wake_rd = -1;  // the self-pipe: stop() writes a byte, it stays readable for good
    int wake_wr = -1;
    std::atomic<bool> stopping{false};
    std::atomic<int> active{0};  // connections being served (not counting 503'd ones)
    std::mutex run_mu;           // guards running, for the destructor to wait on run()
    std::condition_variable run_cv;
    bool running = false;

    std::pair<std::string, std::string> error_body(int status, const std::string& msg) const {
        return opts.error_body ? opts.error_body(status, msg) : default_error_body(status, msg);
    }
    void refused(const std::string& peer, int status, Limit limit, const std::string& msg) const {
        if (opts.on_refusal) opts.on_refusal({peer, status, limit, msg});
    }
};

}  // namespace detail

// ---- Response -----------------------------------------------------------------------------

std::string Response::head(int status, std::string_view content_type, const HeaderList& headers,
                           const std::string& framing) {
    // Extra headers: the transport owns the framing ones; "Connection: close" is honoured.
    std::string extra;
    bool own_server = false;  // the caller's Server header replaces ours
    HeaderList all = headers;
    for (const auto& [name, value] : always_)
        if (std::none_of(headers.begin(), headers.end(),
                         [&](const auto& h) { return iequals(h.first, name); }))
            all.emplace_back(name, value);
    for (const auto& [name, value] : all) {
        if (!is_token(name) ||
            value.find_first_of(std::string_view("\r\n\0", 3)) != std::string::npos)
            continue;  // would split the response
        if (iequals(name, "connection")) {
            if (has_token(value, "close")) keep_alive_ = false;
            continue;
        }
        if (iequals(name, "content-length") || iequals(name, "transfer-encoding")) continue;
        if (!content_type.empty() && iequals(name, "content-type")) continue;
        own_server = own_server || iequals(name, "server");
        extra += name + ": " + value + "\r\n";
    }
    if (server_->stopping.load()) keep_alive_ = false;

    std::string h = "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) + "\r\n";
    if (!own_server) h += "Server: edgellm\r\n";
    if (!content_type.empty() && content_type.find_first_of("\r\n") == std::string_view::npos)
        h += "Content-Type: " + std::string(content_type) + "\r\n";
    h += framing;
    h += keep_alive_ ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
    h += extra;
    h += "\r\n";
    return h;
}

bool Response::write_raw(std::string_view bytes) {
    if (broken_) return false;
    if (!send_all(fd_, server_->wake_rd, bytes, server_->opts.write_timeout_ms)) broken_ = true;
    return !broken_;
}

void Response::send(int status, std::string_view content_type, std::string_view body,
                    const HeaderList& headers) {
    if (started_) return;
    started_ = true;
    status_ = status;
    // RFC 9110 8.6: no Content-Length (and no body) for 1xx, 204 and 304.
    const bool bodiless = status < 200 || status == 204 || status == 304;
    const std::string framing =
        bodiless ? "" : "Content-Length: " + std::to_string(body.size()) + "\r\n";
    std::string out = head(status, content_type, headers, framing);
    if (!head_ && !bodiless) out += body;  // one send: headers and body in one segment
    write_raw(out);
}

bool Response::begin_stream(int status, std::string_view content_type, const HeaderList& headers) {
    if (started_) return false;
    started_ = streaming_ = true;
    status_ = status;
    chunked_ = !http10_;
    // HTTP/1.0 has no chunked encoding: the end of the body is the end of the connection.
    if (!chunked_) keep_alive_ = false;
    return write_raw(
        head(status, content_type, headers, chunked_ ? "Transfer-Encoding: chunked\r\n" : ""));
}

bool Response::write(std::string_view data) {
    if (!streaming_ || ended_ || broken_) return false;
    if (data.empty() || head_) return true;
    if (!chunked_) return write_raw(data);
    char size_line[24];
    const int n = std::snprintf(size_line, sizeof size_line, "%zx\r\n", data.size());
    std::string chunk;
    chunk.reserve((size_t)n + data.size() + 2);
    chunk.append(size_line, (size_t)n).append(data).append("\r\n");
    return write_raw(chunk);
}

void Response::end_stream() {
    if (!streaming_ || ended_) return;
    ended_ = true;
    if (chunked_ && !head_) write_raw("0\r\n\r\n");
}

bool Response::peer_gone() {
    if (gone_) return true;
    if (broken_ || server_->stopping.load()) {
        gone_ = true;
        return true;
    }
    // POLLRDHUP: the peer sent FIN (even with unread bytes queued); POLLHUP/POLLERR: reset.
    // Plain POLLIN (a pipelined next request) is not a disconnect.
    pollfd p = {fd_, POLLIN | POLLRDHUP, 0};
    int r;
    do r = ::poll(&p, 1, 0);
    while (r < 0 && errno == EINTR);
    if (r > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))) gone_ = true;
    return gone_.load();
}

// ---- one connection -----------------------------------------------------------------------

namespace detail {

// Serves the requests of one accepted socket in order, on its own thread, then closes it.
class Connection {
  public:
    Connection(const ServerState& s, int fd, std::string remote_addr)
        : s_(s), fd_(fd), remote_addr_(std::move(remote_addr)), opened_(Clock::now()) {
        sockaddr_storage ss{};
        socklen_t len = sizeof ss;
        if (::getsockname(fd, (sockaddr*)&ss, &len) == 0) local_addr_ = address_text(ss);
    }
    void serve();

  private:
    enum class Got { kData, kEof, kTimeout, kStopped };
    // What the connection waits for, until deadline_.
    enum class Phase { kIdle, kHead, kBody };

    // Reads what arrives before deadline_ (reading a request: and before the read timeout).
    Got fill();
    bool serve_one();  // one request; false: the connection is done (and answered if needed)
    // The error answer of the transport itself; the connection closes after it. A limit's
    // refusal is reported to Options::on_refusal.
    bool fail(int status, const std::string& message, std::optional<Limit> limit = {});
    // Why reading stopped short: 408 on timeout (naming the deadline that ran out); silence
    // on EOF or stop.
    bool fail_read(Got why);
    // Ensures the request bytes [pos_, pos_ + n) are buffered.
    Got need(size_t n);
    // The next line (without CR LF) from pos_ into *line, at most max_len bytes.
    Got read_line(size_t max_len, std::string* line, bool* too_long);
    // Offset just past the empty line that ends the head starting at pos_, or npos if it
    // has not arrived yet. *scan: where the search resumes next time.
    size_t find_head_end(size_t* scan) const;
    bool read_chunked_body(std::string* body);
    void close_gracefully();

    const ServerState& s_;
    int fd_;
    std::string remote_addr_;
    std::string local_addr_;  // the address the client connected to (the Host check's)
    Clock::time_point opened_;
    std::string buf_;  // received bytes; [pos_, size) not consumed yet
    size_t pos_ = 0;
    bool linger_ = false;  // an answer was sent before closing: drain before close()
    bool first_ = true;    // the next request is the connection's first
    Phase phase_ = Phase::kHead;
    Clock::time_point deadline_;
    bool stalled_ = false;  // the last fill() timed out on the read timeout, not on deadline_
};

Connection::Got Connection::fill() {
    for (;;) {
        // While a request arrives, each wait for its next bytes is bounded too (--timeout).
        Clock::time_point until = deadline_;
        stalled_ = false;
        if (phase_ != Phase::kIdle) {
            const auto stall = after_ms(s_.opts.read_timeout_ms);
            stalled_ = stall < until;
            until = std::min(until, stall);
        }
        pollfd p[2] = {{fd_, POLLIN, 0}, {s_.wake_rd, POLLIN, 0}};
        const int r = ::poll(p, 2, ms_until(until));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return Got::kEof;
        if (r == 0) return Got::kTimeout;
        if (p[1].revents) return Got::kStopped;
        const size_t old = buf_.size();
        buf_.resize(old + kRecvChunk);
        const ssize_t n = ::recv(fd_, buf_.data() + old, kRecvChunk, 0);
        buf_.resize(old + (n > 0 ? (size_t)n : 0));
        if (n > 0) return Got::kData;
        if (n == 0) return Got::kEof;
        if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) return Got::kEof;
    }
}

Connection::Got Connection::need(size_t n) {
    while (buf_.size() - pos_ < n) {
        const Got g = fill();
        if (g != Got::kData) return g;
    }
    return Got::kData;
}

Connection::Got Connection::read_line(size_t max_len, std::string* line, bool* too_long) {
    size_t scanned = pos_;
    for (;;) {
        const size_t nl = buf_.find('\n', scanned);
        if (nl != std::string::npos) {
            size_t end = nl;
            if (end > pos_ && buf_[end - 1] == '\r') --end;
            *too_long = end - pos_ > max_len;
            line->assign(buf_, pos_, end - pos_);
            pos_ = nl + 1;
            return Got::kData;
        }
        if (buf_.size() - pos_ > max_len + 1) {
            *too_long = true;
            return Got::kData;
        }
        scanned = buf_.size();
        const Got g = fill();
        if (g != Got::kData) return g;
    }
}

size_t Connection::find_head_end(size_t* scan) const {
    const size_t n = buf_.size();
    for (size_t i = std::max(*scan, pos_); i < n; ++i) {
        if (buf_[i] != '\n') continue;
        if (i + 1 < n && buf_[i + 1] == '\n') return i + 2;
        if (i + 2 < n && buf_[i + 1] == '\r' && buf_[i + 2] == '\n') return i + 3;
        if (i + 2 >= n) {  // undecided until the next bytes arrive
            *scan = i;
            return std::string::npos;
        }
    }
    *scan = n;
    return std::string::npos;
}

bool Connection::fail(int status, const std::string& message, std::optional<Limit> limit) {
    if (limit) s_.refused(remote_addr_, status, *limit, message);
    linger_ = true;
    Response res(fd_, &s_, false, false, false);
    auto [type, body] = s_.error_body(status, message);
    res.send(status, type, body);
    return false;
}

bool Connection::fail_read(Got why) {
    if (why != Got::kTimeout) return false;
    if (stalled_)
        return fail(408, "no request bytes for " + seconds_text(s_.opts.read_timeout_ms),
                    Limit::ReadTime);
    if (phase_ == Phase::kBody)
        return fail(408, "request body not received within " +
                             seconds_text(s_.opts.body_timeout_ms) + " of its head",
                    Limit::BodyTime);
    return fail(408, "request head not received within " + seconds_text(s_.opts.header_timeout_ms),
                Limit::HeaderTime);
}

// chunked-body = *chunk last-chunk trailer-section CRLF; chunk = chunk-size [ext] CRLF data CRLF
bool Connection::read_chunked_body(std::string* body) {
    std::string line;
    bool too_long = false;
    for (;;) {
        if (Got g = read_line(kMaxChunkLine, &line, &too_long); g != Got::kData)
            return fail_read(g);
        if (too_long) return fail(400, "chunk size line too long");
        size_t i = 0;
        uint64_t size = 0;
        for (; i < line.size() && hex_value(line[i]) >= 0; ++i) {
            if (i >= 15) return fail(400, "chunk size overflow");  // 15 hex digits: < 2^60
            size = size * 16 + (uint64_t)hex_value(line[i]);
        }
        const std::string_view rest = trim_ows(std::string_view(line).substr(i));
        if (i == 0 || (!rest.empty() && rest.front() != ';'))
            return fail(400, "malformed chunk size");
        if (size == 0) break;
        if (size > s_.opts.max_body_bytes - body->size())
            return fail(413, "request body larger than " + std::to_string(s_.opts.max_body_bytes) +
                                 " bytes",
                        Limit::BodyBytes);
        // The data, then CR LF (or a bare LF).
        if (Got g = need((size_t)size + 1); g != Got::kData) return fail_read(g);
        if (buf_[pos_ + size] == '\r') {
            if (Got g = need((size_t)size + 2); g != Got::kData) return fail_read(g);
            if (buf_[pos_ + size + 1] != '\n') return fail(400, "chunk data not followed by CRLF");
        } else if (buf_[pos_ + size] != '\n') {
            return fail(400, "chunk data not followed by CRLF");
        }
        body->append(buf_, pos_, (size_t)size);
        pos_ += (size_t)size + (buf_[pos_ + size] == '\r' ? 2 : 1);
    }
    // Trailer fields: read and ignored, within the header budget.
    size_t trailer_bytes = 0;
    for (;;) {
        if (Got g = read_line(s_.opts.max_header_bytes, &line, &too_long); g != Got::kData)
            return fail_read(g);
        trailer_bytes += line.size() + 2;
        if (too_long || trailer_bytes > s_.opts.max_header_bytes)
            return fail(431, "chunked trailer larger than " +
                                 std::to_string(s_.opts.max_header_bytes) + " bytes",
                        Limit::HeaderBytes);
        if (line.empty()) return true;
    }
}

bool Connection::serve_one() {
    // Drop what the previous request consumed; keep the pipelined bytes.
    buf_.erase(0, pos_);
    pos_ = 0;
    // The whole head must arrive within the header timeout: for the connection's first
    // request from its opening (a client that connects and says nothing holds it no longer
    // than a slow head), for a later one from its first byte, which a kept-alive connection
    // waits for at most the idle timeout. Closed in silence if nothing came.
    phase_ = Phase::kHead;
    if (first_) {
        first_ = false;
        deadline_ = opened_ + std::chrono::milliseconds(s_.opts.header_timeout_ms);
    } else {
        if (buf_.empty()) {
            phase_ = Phase::kIdle;
            deadline_ = after_ms(s_.opts.idle_timeout_ms);
            if (fill() != Got::kData) return false;
            phase_ = Phase::kHead;
        }
        deadline_ = after_ms(s_.opts.header_timeout_ms);
    }
    const size_t max_head = s_.opts.max_header_bytes;
    const auto head_too_large = [&] {
        return fail(431, "request head larger than " + std::to_string(max_head) + " bytes",
                    Limit::HeaderBytes);
    };

    // The head ends at the first empty line. A few empty lines before the request line are
    // skipped (RFC 9112 2.2). `scan` remembers how far the search got, so a head trickled
    // byte by byte is not searched again from the start each time; `checked` likewise for
    // the request line, whose control bytes get a 400 at once instead of a 408 later.
    size_t head_end = std::string::npos, scan = 0, checked = 0, skipped = 0;
    for (;;) {
        for (; pos_ < buf_.size() && (buf_[pos_] == '\r' || buf_[pos_] == '\n'); ++pos_)
            if (++skipped > 64) return fail(400, "empty lines instead of a request line");
        for (checked = std::max(checked, pos_); checked < buf_.size() && buf_[checked] != '\n';
             ++checked) {
            const unsigned char c = (unsigned char)buf_[checked];
            if ((c < 0x20 && c != '\r') || c == 0x7f) return fail(400, "malformed request line");
        }
        head_end = find_head_end(&scan);
        if (head_end != std::string::npos) break;
        if (buf_.size() - pos_ > max_head) return head_too_large();
        if (Got g = fill(); g != Got::kData) {
            if (pos_ < buf_.size()) fail_read(g);  // a partial request: 408 on timeout
            return false;
        }
    }
    if (head_end - pos_ > max_head) return head_too_large();

    Request req;
    RequestFraming framing;
    std::string error;
    const std::string_view head_text(buf_.data() + pos_, head_end - pos_);
    if (int status = parse_request_head(head_text, s_.opts, &req, &framing, &error))
        return status == 431 ? fail(status, error, Limit::HeaderCount) : fail(status, error);
    pos_ = head_end;
    req.remote_addr = remote_addr_;
    req.local_addr = local_addr_;

    // The body, refused before it is read if it is declared too large; from here on the
    // body timeout runs.
    if (framing.content_length > s_.opts.max_body_bytes)
        return fail(413,
                    "request body of " + std::to_string(framing.content_length) +
                        " bytes is larger than " + std::to_string(s_.opts.max_body_bytes),
                    Limit::BodyBytes);
    phase_ = Phase::kBody;
    deadline_ = after_ms(s_.opts.body_timeout_ms);
    const bool has_body = framing.chunked || framing.content_length > 0;
    if (framing.expect_continue && has_body && buf_.size() == pos_) {
        if (!send_all(fd_, s_.wake_rd, kContinue, s_.opts.write_timeout_ms)) return false;
    }
    if (framing.chunked) {
        if (!read_chunked_body(&req.body)) return false;
    } else if (framing.content_length > 0) {
        buf_.reserve(pos_ + framing.content_length + kRecvChunk);
        if (Got g = need(framing.content_length); g != Got::kData) return fail_read(g);
        req.body.assign(buf_, pos_, framing.content_length);
        pos_ += framing.content_length;
    }

    // The handler; then whatever it left undone.
    Response res(fd_, &s_, req.method == "HEAD", req.version_minor == 0, framing.keep_alive);
    bool threw = false;
    std::string what;
    try {
        s_.handler(req, res);
    } catch (const std::exception& e) {
        threw = true;
        what = e.what();
    } catch (...) {
        threw = true;
        what = "unknown exception";
    }
    if (!res.started_) {
        auto [type, body] =
            s_.error_body(500, threw ? "handler failed: " + what : "handler sent no response");
        res.send(500, type, body);
    } else if (res.streaming_ && !res.ended_) {
        // A handler that threw mid-stream gets no terminating chunk: the client must see
        // a truncated response, not a complete one.
        if (threw)
            res.keep_alive_ = false;
        else
            res.end_stream();
    }
    const bool keep = res.keep_alive_ && !res.broken_ && !s_.stopping.load();
    linger_ = !keep && !res.broken_;
    return keep;
}

// Half-close, then (after an answer) read and discard what the client still sends, such as
// the rest of a refused body or pipelined requests, for a short while: close() with unread
// bytes sends a reset, which can destroy the answer before the client has read it.
void Connection::close_gracefully() {
    ::shutdown(fd_, SHUT_WR);
    if (linger_ && !s_.stopping.load()) {
        const auto deadline = after_ms(std::min(kLingerMs, std::max(s_.opts.read_timeout_ms, 1)));
        size_t drained = 0;
        char sink[16 << 10];
        while (drained < kLingerMaxBytes) {
            pollfd p[2] = {{fd_, POLLIN, 0}, {s_.wake_rd, POLLIN, 0}};
            const int r = ::poll(p, 2, ms_until(deadline));
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0 || p[1].revents) break;
            const ssize_t n = ::recv(fd_, sink, sizeof sink, 0);
            if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
            if (n <= 0) break;
            drained += (size_t)n;
        }
    }
    ::close(fd_);
}

void Connection::serve() {
    try {
        while (serve_one()) {
        }
    } catch (const std::exception&) {
        // bad_alloc from a huge buffer: drop this connection, keep the server.
    }
    close_gracefully();
}

}  // namespace detail

// ---- Server -------------------------------------------------------------------------------

Server::Server(Options opts, Handler handler) : s_(std::make_unique<detail::ServerState>()) {
    s_->opts = std::move(opts);
    s_->handler = std::move(handler);
    int p[2];
    if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) == 0) {
        s_->wake_rd = p[0];
        s_->wake_wr = p[1];
    }
}

Server::~Server() {
    stop();
    {
        std::unique_lock<std::mutex> lock(s_->run_mu);
        s_->run_cv.wait(lock, [&] { return !s_->running; });
    }
    for (int fd : s_->listen_fds) ::close(fd);
    if (s_->wake_rd >= 0) ::close(s_->wake_rd);
    if (s_->wake_wr >= 0) ::close(s_->wake_wr);
}

Result<int> Server::listen() {
    const Options& o = s_->opts;
    // Several addresses, comma-separated ("127.0.0.1,::1"): one listening socket each, on
    // the same port (with port 0: the one the first was given).
    std::vector<std::string> hosts;
    for (size_t at = 0; at <= o.host.size();) {
        const size_t comma = std::min(o.host.find(',', at), o.host.size());
        std::string h = o.host.substr(at, comma - at);
        while (!h.empty() && h.front() == ' ') h.erase(h.begin());
        while (!h.empty() && h.back() == ' ') h.pop_back();
        if (h.empty() && o.host.find(',') != std::string::npos)
            return Result<int>::fail("http: an empty address in the list '" + o.host + "'");
        if (std::find(hosts.begin(), hosts.end(), h) != hosts.end())
            return Result<int>::fail("http: the address " + h + " is listed twice in '" + o.host + "'");
        hosts.push_back(h);
        at = comma + 1;
    }
    multi_host_ = hosts.size() > 1;
    if (!s_->listen_fds.empty()) return Result<int>::fail("http: already listening");
    if (s_->wake_rd < 0) return Result<int>::fail("http: cannot create the stop pipe");
    int port = o.port;
    for (const std::string& host : hosts) {
        auto r = listen_on(host, port);
        if (!r) {
            for (int fd : s_->listen_fds) ::close(fd);
            s_->listen_fds.clear();
            return r;
        }
        port = *r;
    }
    return port;
}

Result<int> Server::listen_on(const std::string& host, int port_number) {
    const std::string where =
        (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
        std::to_string(port_number);
    if (port_number < 0 || port_number > 65535) return Result<int>::fail("http: invalid port in " + where);

    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* found = nullptr;
    const std::string port = std::to_string(port_number);
    if (int rc =
            ::getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found))
        return Result<int>::fail("http: cannot resolve '" + host + "': " + gai_strerror(rc));
    // IPv4 first: "localhost" then means 127.0.0.1, which every client tries.
    std::vector<const addrinfo*> candidates;
    for (const addrinfo* a = found; a; a = a->ai_next) candidates.push_back(a);
    std::stable_sort(candidates.begin(), candidates.end(), [](auto* a, auto* b) {
        return a->ai_family == AF_INET && b->ai_family != AF_INET;
    });

    int err = EADDRNOTAVAIL;
    int bound = -1;
    for (const addrinfo* a : candidates) {
        const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            err = errno;
            continue;
        }
        const int one = 1, zero = 0;
        ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        // "::" alone also takes IPv4 clients; beside other addresses every IPv6 socket is
        // IPv6 only (else "::" and "0.0.0.0" would collide).
        if (a->ai_family == AF_INET6)
            ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, multi_host_ ? &one : &zero, sizeof zero);
        if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0 &&
            set_nonblocking(fd)) {
            bound = fd;
            break;
        }
        err = errno;
        ::close(fd);
    }
    ::freeaddrinfo(found);
    if (bound < 0) {
        std::string why = std::strerror(err);
        if (!why.empty()) why[0] = ascii_lower(why[0]);
        return Result<int>::fail("http: cannot listen on " + where + ": " + why);
    }
    s_->listen_fds.push_back(bound);
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    ::getsockname(bound, (sockaddr*)&ss, &len);
    return ss.ss_family == AF_INET6 ? (int)ntohs(((sockaddr_in6*)&ss)->sin6_port)
                                    : (int)ntohs(((sockaddr_in*)&ss)->sin_port);
}

void Server::stop() {
    const int saved_errno = errno;  // stop() may run inside a signal handler
    s_->stopping.store(true);
    if (s_->wake_wr >= 0) {
        const char byte = 1;
        [[maybe_unused]] ssize_t n = ::write(s_->wake_wr, &byte, 1);  // full pipe: already set
    }
    errno = saved_errno;
}

int Server::active_connections() const {
    return s_->active.load();
}

void Server::run() {
    detail::ServerState& s = *s_;
    {
        std::lock_guard<std::mutex> lock(s.run_mu);
        if (s.listen_fds.empty() || s.running) return;
        s.running = true;
    }
    // A connection thread; `done` is its last act, so the accept loop can join it at once.
    struct Worker {
        std::thread thread;
        std::atomic<bool> done{false};
    };
    std::list<Worker> workers;
    // Sockets answered 503: half-closed and drained here until the peer closes or the
    // deadline, so the client reads the 503 instead of a reset.
    struct Rejected {
        int fd;
        Clock::time_point deadline;
    };
    std::vector<Rejected> rejected;
    auto reject = [&](int fd, const std::string& peer, Limit why) {
        const std::string message =
            why == Limit::Connections
                ? "too many connections: at most " + std::to_string(s.opts.max_connections) +
                      " are served at once"
                : "no thread could be started for the connection";
        s.refused(peer, 503, why, message);
        auto [type, body] = s.error_body(503, message);
        Response res(fd, &s, false, false, false);
        const std::string out =
            res.head(503, type, {{"Retry-After", kRetryConnectSeconds}},
                     "Content-Length: " + std::to_string(body.size()) + "\r\n") +
            body;
        [[maybe_unused]] ssize_t n =
            ::send(fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        ::shutdown(fd, SHUT_WR);
        if (rejected.size() < kMaxRejected)
            rejected.push_back({fd, after_ms(kLingerMs)});
        else
            ::close(fd);
    };

    while (!s.stopping.load()) {
        workers.remove_if([](Worker& w) {
            if (!w.done.load()) return false;
            w.thread.join();
            return true;
        });
        std::vector<pollfd> fds = {{s.wake_rd, POLLIN, 0}};
        for (int fd : s.listen_fds) fds.push_back({fd, POLLIN, 0});
        const size_t first_rejected = fds.size();
        auto wake_at = after_ms(1000);  // also reaps finished threads once a second
        for (const Rejected& r : rejected) {
            fds.push_back({r.fd, POLLIN, 0});
            wake_at = std::min(wake_at, r.deadline);
        }
        const int rc = ::poll(fds.data(), fds.size(), ms_until(wake_at));
        if (rc < 0 && errno != EINTR) break;
        if (rc < 0 || fds[0].revents) continue;  // the loop condition sees the stop

        // Drain rejected sockets; close the ones that ended or ran out of time.
        const auto now = Clock::now();
        for (size_t i = rejected.size(); i-- > 0;) {
            bool done = now >= rejected[i].deadline;
            if (fds[first_rejected + i].revents) {
                char sink[4096];
                const ssize_t n = ::recv(rejected[i].fd, sink, sizeof sink, 0);
                done = done || n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR);
            }
            if (done) {
                ::close(rejected[i].fd);
                rejected.erase(rejected.begin() + (ptrdiff_t)i);
            }
        }
        for (size_t li = 0; li < s.listen_fds.size(); ++li) {
        if (!(fds[1 + li].revents & POLLIN)) continue;

        // Accept everything pending.
        for (;;) {
            sockaddr_storage ss{};
            socklen_t len = sizeof ss;
            const int fd =
                ::accept4(s.listen_fds[li], (sockaddr*)&ss, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd < 0) {
                if (errno == EINTR || errno == ECONNABORTED) continue;
                if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                    // Out of descriptors: back off instead of spinning on a readable listener.
                    pollfd p = {s.wake_rd, POLLIN, 0};
                    ::poll(&p, 1, 50);
                }
                break;  // EAGAIN: nothing more pending
            }
            const int one = 1;
            ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            std::string peer = address_text(ss);
            if (s.active.load() >= s.opts.max_connections) {
                reject(fd, peer, Limit::Connections);
                continue;
            }
            s.active.fetch_add(1);
            Worker& w = workers.emplace_back();
            try {
                w.thread = std::thread([&s, &w, fd, addr = peer]() mutable {
                    detail::Connection(s, fd, std::move(addr)).serve();
                    s.active.fetch_sub(1);
                    w.done.store(true);
                });
            } catch (const std::system_error&) {  // no more threads: refuse this one
                workers.pop_back();
                s.active.fetch_sub(1);
                reject(fd, peer, Limit::Threads);
            }
        }
        }
    }

    // Shut down: refuse new connections, let the connection threads see the stop and end.
    for (int fd : s.listen_fds) ::close(fd);
    s.listen_fds.clear();
    for (const Rejected& r : rejected) ::close(r.fd);
    for (Worker& w : workers) w.thread.join();
    {
        std::lock_guard<std::mutex> lock(s.run_mu);
        s.running = false;
    }
    s.run_cv.notify_all();
}

}  // namespace edgellm::http
