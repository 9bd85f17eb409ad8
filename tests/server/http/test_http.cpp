// The HTTP/1.1 transport over real TCP: a Server on an ephemeral port runs in a thread and
// a raw-socket client sends exactly the bytes each case needs. Framing, keep-alive and
// pipelining, 100-continue, limits and timeouts, handler failures, streaming, disconnect
// detection (peer_gone) and shutdown; plus the head parser on its own and on garbage, and
// the log of the limits' refusals.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "server/http/refusal_log.h"
#include "server/http/transport.h"

using namespace edgellm;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

int64_t ms_since(Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

// Polls `cond` every millisecond until it holds or `timeout` passes.
template <typename F>
bool wait_for(F cond, std::chrono::milliseconds timeout = 3000ms) {
    const auto until = Clock::now() + timeout;
    while (!cond()) {
        if (Clock::now() > until) return false;
        std::this_thread::sleep_for(1ms);
    }
    return true;
}

// A server on a free port, running on its own thread; stopped and joined at the end.
struct TestServer {
    http::Server server;
    std::thread thread;
    int port = 0;

    TestServer(http::Options o, http::Server::Handler h) : server(with_free_port(o), std::move(h)) {
        auto p = server.listen();
        EXPECT_TRUE(p.ok()) << p.error();
        port = p.ok() ? *p : 0;
        thread = std::thread([this] { server.run(); });
    }
    ~TestServer() { join(); }
    // Stops the server; the milliseconds run() took to return.
    int64_t join() {
        const auto t0 = Clock::now();
        server.stop();
        if (thread.joinable()) thread.join();
        return ms_since(t0);
    }
    static http::Options with_free_port(http::Options o) {
        o.port = 0;
        return o;
    }
};

struct Reply {
    int status = 0;                              // 0: no complete reply
    std::map<std::string, std::string> headers;  // lower-cased names
    std::string body;                            // de-chunked
    std::string raw_body;                        // as sent
    std::string header(const std::string& name) const {
        auto it = headers.find(name);
        return it == headers.end() ? "" : it->second;
    }
};

// A raw TCP client: the server gets exactly what send() is given.
class Client {
  public:
    explicit Client(int port, int rcvbuf = 0) {
        fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
        if (rcvbuf > 0) ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
        const timeval tv = {3, 0};  // a send never blocks a test for long
        ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons((uint16_t)port);
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        connected_ = ::connect(fd_, (sockaddr*)&a, sizeof a) == 0;
    }
    ~Client() { close(); }
    bool connected() const { return connected_; }

    bool send(std::string_view s) {
        while (!s.empty()) {
            const ssize_t n = ::send(fd_, s.data(), s.size(), MSG_NOSIGNAL);
            if (n <= 0) return false;
            s.remove_prefix((size_t)n);
        }
        return true;
    }
    void close() {
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
    }
    // close() with SO_LINGER 0: the server gets a reset instead of a FIN.
    void reset() {
        const linger l = {1, 0};
        ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &l, sizeof l);
        close();
    }
    // Bytes waiting to be read (without reading them)?
    bool readable() {
        pollfd p = {fd_, POLLIN, 0};
        return ::poll(&p, 1, 0) > 0;
    }

    // One response. head: the request was HEAD (no body follows).
    Reply read_reply(bool head = false, std::chrono::milliseconds timeout = 3000ms) {
        const auto deadline = Clock::now() + timeout;
        Reply r;
        size_t end;
        while ((end = buf_.find("\r\n\r\n")) == std::string::npos)
            if (!fill(deadline)) return r;
        const std::string head_text = buf_.substr(0, end + 2);
        buf_.erase(0, end + 4);
        size_t line_end = head_text.find("\r\n");
        const int status = std::atoi(head_text.substr(9, 3).c_str());
        while (line_end + 2 < head_text.size()) {
            const size_t next = head_text.find("\r\n", line_end + 2);
            const std::string line = head_text.substr(line_end + 2, next - line_end - 2);
            std::string name = line.substr(0, line.find(':'));
            for (char& c : name) c = (char)std::tolower((unsigned char)c);
            r.headers[name] = line.substr(line.find(':') + 2);
            line_end = next;
        }
        if (head || status < 200 || status == 204 || status == 304) {
        } else if (r.header("transfer-encoding") == "chunked") {
            for (;;) {
                size_t nl;
                while ((nl = buf_.find("\r\n")) == std::string::npos)
                    if (!fill(deadline)) return r;
                const size_t n = std::stoul(buf_.substr(0, nl), nullptr, 16);
                while (buf_.size() < nl + 2 + n + 2)
                    if (!fill(deadline)) return r;
                r.raw_body += buf_.substr(0, nl + 2 + n + 2);
                r.body += buf_.substr(nl + 2, n);
                buf_.erase(0, nl + 2 + n + 2);
                if (n == 0) break;
            }
        } else if (!r.header("content-length").empty()) {
            const size_t n = std::stoul(r.header("content-length"));
            while (buf_.size() < n)
                if (!fill(deadline)) return r;
            r.body = buf_.substr(0, n);
            buf_.erase(0, n);
        } else {
            while (fill(deadline)) {
            }
            r.body = std::move(buf_);
            buf_.clear();
        }
        if (r.raw_body.empty()) r.raw_body = r.body;
        r.status = status;
        return r;
    }

    // Waits for the server to close (EOF or reset): true if it did within `timeout`.
    // Unread response bytes are skipped.
    bool closed_within(std::chrono::milliseconds timeout) {
        const auto deadline = Clock::now() + timeout;
        while (fill(deadline)) {
        }
        return eof_;
    }

  private:
    // Reads what arrives before `deadline`; false on EOF, error or timeout.
    bool fill(Clock::time_point deadline) {
        if (eof_) return false;
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        pollfd p = {fd_, POLLIN, 0};
        if (left.count() <= 0 || ::poll(&p, 1, (int)left.count()) <= 0) return false;
        char tmp[65536];
        const ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
        if (n <= 0) {
            eof_ = true;
            return false;
        }
        buf_.append(tmp, (size_t)n);
        return true;
    }

    int fd_ = -1;
    bool connected_ = false;
    bool eof_ = false;
    std::string buf_;
};

// Answers "<method> <path> <body>" and remembers each request.
struct Recorder {
    std::mutex mu;
    std::vector<http::Request> requests;
    http::Server::Handler handler() {
        return [this](const http::Request& req, http::Response& res) {
            {
                std::lock_guard<std::mutex> lock(mu);
                requests.push_back(req);
            }
            res.send(200, "text/plain", req.method + " " + req.path + " " + req.body);
        };
    }
    http::Request last() {
        std::lock_guard<std::mutex> lock(mu);
        return requests.empty() ? http::Request{} : requests.back();
    }
};

http::Options small_limits() {
    http::Options o;
    o.max_body_bytes = 1000;
    o.max_header_bytes = 2000;
    o.idle_timeout_ms = 5000;
    o.header_timeout_ms = 2000;
    o.body_timeout_ms = 2000;
    o.read_timeout_ms = 2000;
    o.write_timeout_ms = 2000;
    return o;
}

// What Options::on_refusal is told. Outlives the server it is attached to.
struct Refusals {
    std::mutex mu;
    std::vector<http::Refusal> got;
    void attach(http::Options& o) {
        o.on_refusal = [this](const http::Refusal& r) {
            std::lock_guard<std::mutex> lock(mu);
            got.push_back(r);
        };
    }
    std::vector<http::Refusal> all() {
        std::lock_guard<std::mutex> lock(mu);
        return got;
    }
};

// A Recorder's server with these options, whose refusals are recorded.
struct RefusingServer {
    Refusals refusals;
    Recorder rec;
    std::unique_ptr<TestServer> ts;
    explicit RefusingServer(http::Options o) {
        refusals.attach(o);
        ts = std::make_unique<TestServer>(o, rec.handler());
    }
    int port() const { return ts->port; }
};

// The client got a 408 saying `message` between lo and hi ms after t0, and was closed.
void expect_408(Client& c, Clock::time_point t0, const std::string& message, int64_t lo,
                int64_t hi) {
    Reply r = c.read_reply();
    const int64_t ms = ms_since(t0);
    EXPECT_EQ(r.status, 408);
    EXPECT_NE(r.body.find(message), std::string::npos) << r.body;
    EXPECT_TRUE(c.closed_within(2000ms));
    EXPECT_GE(ms, lo);
    EXPECT_LT(ms, hi);
}

// The server reported one refusal, of this peer, with this status and limit.
void expect_refused_once(Refusals& refusals, int status, http::Limit limit) {
    const auto got = refusals.all();
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].status, status);
    EXPECT_EQ(got[0].limit, limit);
    EXPECT_EQ(got[0].peer, "127.0.0.1");
}

}  // namespace

// ---- framing and connections --------------------------------------------------------------

TEST(Http, RequestFieldsAndKeepAlive) {
    Recorder rec;
    TestServer ts(small_limits(), rec.handler());
    Client c(ts.port);
    ASSERT_TRUE(c.connected());
    ASSERT_TRUE(
        c.send("GET /slots/0%20a?action=save&x=a+b%21&flag HTTP/1.1\r\nHost: h\r\n"
               "X-Mixed-Case:   v 1 \t\r\n\r\n"));
    Reply r = c.read_reply();
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body, "GET /slots/0 a ");
    EXPECT_EQ(r.header("connection"), "keep-alive");
    EXPECT_EQ(r.header("content-length"), std::to_string(r.body.size()));
    EXPECT_EQ(r.header("server"), "edgellm");
    EXPECT_EQ(r.header("access-control-allow-origin"), "");  // no CORS unless asked for
    http::Request q = rec.last();
    EXPECT_EQ(q.target, "/slots/0%20a?action=save&x=a+b%21&flag");
    EXPECT_EQ(q.query.at("action"), "save");
    EXPECT_EQ(q.query.at("x"), "a b!");
    EXPECT_EQ(q.query.at("flag"), "");
    ASSERT_NE(q.header("x-mixed-case"), nullptr);
    EXPECT_EQ(*q.header("x-mixed-case"), "v 1");
    EXPECT_EQ(q.header("X-Mixed-Case"), nullptr);  // lookups take lower-case names
    EXPECT_EQ(q.remote_addr, "127.0.0.1");

    // The same connection serves the next request.
    ASSERT_TRUE(c.send("DELETE /x HTTP/1.1\r\n\r\n"));
    EXPECT_EQ(c.read_reply().body, "DELETE /x ");
    ASSERT_TRUE(c.send("GET /bye HTTP/1.1\r\nConnection: close\r\n\r\n"));
    r = c.read_reply();
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.header("connection"), "close");
    EXPECT_TRUE(c.closed_within(2000ms));
}

TEST(Http, Http10ClosesUnlessKeepAlive) {
    Recorder rec;
    TestServer ts(small_limits(), rec.handler());
    {
        Client c(ts.port);
        ASSERT_TRUE(c.send("GET /a HTTP/1.0\r\n\r\n"));
        Reply r = c.read_reply();
        EXPECT_EQ(r.status, 200);
        EXPECT_EQ(r.header("connection"), "close");
        EXPECT_TRUE(c.closed_within(2000ms));
    }
    Client c(ts.port);
    ASSERT_TRUE(c.send("GET /a HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"));
    EXPECT_EQ(c.read_reply().header("connection"), "keep-alive");
    ASSERT_TRUE(c.send("GET /b HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
    EXPECT_EQ(c.read_reply().body, "GET /b ");
}

TEST(Http, PipelinedRequestsAnsweredInOrder) {
    Recorder rec;
    TestServer ts(small_limits(), rec.handler());
    Client c(ts.port);
    ASSERT_TRUE(
        c.send("GET /1 HTTP/1.1\r\n\r\nPOST /2 HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"
               "\r\nPOST /3 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nz\r\n0\r\n\r\n"
               "GET /4 HTTP/1.1\r\nConnection: close\r\n\r\n"));
    EXPECT_EQ(c.read_reply().body, "GET /1 ");
    EXPECT_EQ(c.read_reply().body, "POST /2 abc");
    EXPECT_EQ(c.read_reply().body, "POST /3 z");  // the stray CRLF before it is skipped
    EXPECT_EQ(c.read_reply().body, "GET /4 ");
    EXPECT_TRUE(c.closed_within(2000ms));
}

TEST(Http, ChunkedAndContentLengthBodies) {
    Recorder rec;
    TestServer ts(small_limits(), rec.handler());
    Client c(ts.port);
    ASSERT_TRUE(
        c.send("POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
               "4\r\nWiki\r\n5;name=value\r\npedia\r\nA\r\n in\r\n\r\nchu\r\n"
               "0\r\nX-Trailer: t\r\n\r\n"));
    EXPECT_EQ(c.read_reply().body, "POST /c Wikipedia in\r\n\r\nchu");
    // Exactly the limit is accepted.
    const std::string full(1000, 'x');
    ASSERT_TRUE(c.send("POST /l HTTP/1.1\r\nContent-Length: 1000\r\n\r\n" + full));
    EXPECT_EQ(c.read_reply().body, "POST /l " + full);
    // Sent in pieces.
    ASSERT_TRUE(c.send("POST /p HTTP/1.1\r\nContent-Le"));
    std::this_thread::sleep_for(20ms);
    ASSERT_TRUE(c.send("ngth: 5\r\n\r\nhe"));
    std::this_thread::sleep_for(20ms);
    ASSERT_TRUE(c.send("llo"));
    EXPECT_EQ(c.read_reply().body, "POST /p hello");
}

TEST(Http, ExpectContinue) {
    Recorder rec;
    TestServer ts(small_limits(), rec.handler());
    Client c(ts.port);
    ASSERT_TRUE(c.send("POST /e HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n"));
    Reply r = c.read_reply();
    EXPECT_EQ(r.status, 100);
    ASSERT_TRUE(c.send("data"));
    EXPECT_EQ(c.read_reply().body, "POST /e data");
    // Too large: 413 at once, no 100.
    ASSERT_TRUE(c.send("POST /e HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 1001\r\n\r\n"));
    r = c.read_reply();
    EXPECT_EQ(r.status, 413);
    EXPECT_EQ(r.header("connection"), "close");
    EXPECT_TRUE(c.closed_within(2000ms));
}

// Each malformed request: the status, Connection: close, and the connection closed.
TEST(Http, MalformedRequestsAnswerAndClose) {
    Recorder rec;
    TestServer ts(small_limits(), rec.handler());
    const std::string many_headers = [] {
        std::string s = "GET / HTTP/1.1\r\n";
        for (int i = 0; i < 300; ++i) s += "a:b\r\n";
        return s + "\r\n";
    }();
    const std::pair<std::string, int> cases[] = {
        {"GET\r\n\r\n", 400},
        {"GET / HTTP/1.1 extra\r\n\r\n", 400},
        {"GET  / HTTP/1.1\r\n\r\n", 400},
        {"G(T / HTTP/1.1\r\n\r\n", 400},
        {"GET nopath HTTP/1.1\r\n\r\n", 400},
        {"GET / HTTP/1.1x\r\n\r\n", 400},
        {"GET / http/1.1\r\n\r\n", 400},
        {"GET / HTTP/2.0\r\n\r\n", 505},
        {"GET / HTTP/0.9\r\n\r\n", 505},
        {"GET / HTTP/1.1\r\nBad Name: x\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nName : x\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nno-colon\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nA: b\r\n folded\r\n\r\n", 400},
        {std::string("GET / HTTP/1.1\r\nA: b\0c\r\n\r\n", 27), 400},
        {"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nContent-Length: 18446744073709551616\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", 400},
        {"POST / HTTP/1.1\r\nContent-Length: 1001\r\n\r\n", 413},
        {"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
        {"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400},
        {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n", 400},
        {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcd\r\n", 400},
        {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3e9\r\n", 413},
        {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + std::string("200\r\n") +
             std::string(512, 'a') + "\r\n200\r\n" + std::string(512, 'b') + "\r\n",
         413},
        {"GET / HTTP/1.1\r\nX: " + std::string(3000, 'a') + "\r\n\r\n", 431},
        {"GET / HTTP/1.1\r\nX: " + std::string(3000, 'a'), 431},  // no end in sight
        {many_headers, 431},
    };
    for (const auto& [raw, status] : cases) {
        Client c(ts.port);
        ASSERT_TRUE(c.send(raw)) << raw;
        Reply r = c.read_reply();
        EXPECT_EQ(r.status, status) << raw;
        EXPECT_EQ(r.header("connection"), "close") << raw;
        EXPECT_NE(r.body.find("\"code\":" + std::to_string(status)), std::string::npos) << r.body;
        EXPECT_TRUE(c.closed_within(2000ms)) << raw;
    }
    EXPECT_TRUE(rec.requests.empty());  // none reached the handler
}

TEST(Http, HandlerFailuresBecome500) {
    http::Options o = small_limits();
    TestServer ts(o, [](const http::Request& req, http::Response& res) {
        if (req.path == "/throw") throw std::runtime_error("boom \"x\"");
        if (req.path == "/nothing") return;
        if (req.path == "/stream-forgot") {
            res.begin_stream(200, "text/event-stream");
            res.write("data: 1\n\n");
            return;  // no end_stream(): the transport ends it
        }
        if (req.path == "/stream-throw") {
            res.begin_stream(200, "text/event-stream");
            res.write("data: 1\n\n");
            throw std::runtime_error("mid-stream");
        }
        res.send(200, "text/plain", "fine");
    });
    Client c(ts.port);
    ASSERT_TRUE(c.send("GET /throw HTTP/1.1\r\n\r\n"));
    Reply r = c.read_reply();
    EXPECT_EQ(r.status, 500);
    EXPECT_EQ(r.header("content-type"), "application/json; charset=utf-8");
    EXPECT_EQ(
        r.body,
        R"({"error":{"code":500,"message":"handler failed: boom \"x\"","type":"server_error"}})");
    EXPECT_EQ(r.header("connection"), "keep-alive");  // framing intact: the connection lives
    ASSERT_TRUE(c.send("GET /nothing HTTP/1.1\r\n\r\n"));
    r = c.read_reply();
    EXPECT_EQ(r.status, 500);
    EXPECT_NE(r.body.find("handler sent no response"), std::string::npos);
    ASSERT_TRUE(c.send("GET /stream-forgot HTTP/1.1\r\n\r\n"));
    r = c.read_reply();
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.raw_body, "9\r\ndata: 1\n\n\r\n0\r\n\r\n");
    ASSERT_TRUE(c.send("GET /ok HTTP/1.1\r\n\r\n"));
    EXPECT_EQ(c.read_reply().body, "fine");
    // A stream that throws is cut off without the last chunk, and the connection closes.
    ASSERT_TRUE(c.send("GET /stream-throw HTTP/1.1\r\n\r\n"));
    r = c.read_reply();
    EXPECT_EQ(r.status, 0);
    EXPECT_TRUE(c.closed_within(2000ms));
}

TEST(Http, CustomErrorBody) {
    http::Options o = small_limits();
    o.error_body = [](int status, const std::string& message) {
        return std::pair<std::string, std::string>("text/plain",
                                                   std::to_string(status) + ": " + message);
    };
    Recorder rec;
    TestServer ts(o, rec.handler());
    Client c(ts.port);
    ASSERT_TRUE(c.send("POST / HTTP/1.1\r\nContent-Length: 5000\r\n\r\n"));
    Reply r = c.read_reply();
    EXPECT_EQ(r.status, 413);
    EXPECT_EQ(r.header("content-type"), "text/plain");
    EXPECT_EQ(r.body.rfind("413: request body of 5000 bytes", 0), 0u) << r.body;
}

TEST(Http, ResponseHeadersAndHead) {
    TestServer ts(small_limits(), [](const http::Request& req, http::Response& res) {
        if (req.path == "/204") return res.send(204, "", "ignored");
        if (req.path == "/close")
            return res.send(200, "text/plain", "x", {{"Connection", "close"}});
        res.send(200, "text/plain", "hello",
                 {{"Access-Control-Allow-Origin", "*"},
                  {"Content-Length", "999"},         // the transport's own: dropped
                  {"X-Evil", "a\r\nSet-Cookie: b"},  // would split the response: dropped
                  {"X-Fine", "yes"}});
    });
    Client c(ts.port);
    ASSERT_TRUE(c.send("GET / HTTP/1.1\r\n\r\n"));
    Reply r = c.read_reply();
    EXPECT_EQ(r.body, "hello");
    EXPECT_EQ(r.header("content-length"), "5");
    EXPECT_EQ(r.header("access-control-allow-origin"), "*");
    EXPECT_EQ(r.header("x-fine"), "yes");
    EXPECT_EQ(r.header("x-evil"), "");
    EXPECT_EQ(r.header("set-cookie"), "");
    // HEAD: the same headers, no body (the next reply would not parse otherwise).
    ASSERT_TRUE(c.send("HEAD / HTTP/1.1\r\n\r\n"));
    r = c.read_reply(/*head=*/true);
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.header("content-length"), "5");
    ASSERT_TRUE(c.send("GET /204 HTTP/1.1\r\n\r\n"));
    r = c.read_reply();
    EXPECT_EQ(r.status, 204);
    EXPECT_EQ(r.header("content-length"), "");
    ASSERT_TRUE(c.send("GET / HTTP/1.1\r\n\r\n"));
    EXPECT_EQ(c.read_reply().body, "hello");
    ASSERT_TRUE(c.send("GET /close HTTP/1.1\r\n\r\n"));
    r = c.read_reply();
    EXPECT_EQ(r.header("connection"), "close");
    EXPECT_TRUE(c.closed_within(2000ms));
}

// ---- streaming ----------------------------------------------------------------------------

TEST(Http, StreamIsByteExactChunked) {
    TestServer ts(small_limits(), [](const http::Request&, http::Response& res) {
        EXPECT_TRUE(res.begin_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}}));
        EXPECT_TRUE(res.started());
        EXPECT_TRUE(res.write("data: {\"a\":1}\n\n"));
        EXPECT_TRUE(res.write(""));  // nothing sent: a 0-length chunk would end the body
        EXPECT_TRUE(res.write(std::string(300, 'z')));
        res.end_stream();
        EXPECT_FALSE(res.write("late"));
    });
    Client c(ts.port);
    ASSERT_TRUE(c.send("POST /v1/chat/completions HTTP/1.1\r\n\r\n"));
    Reply r = c.read_reply();
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.header("transfer-encoding"), "chunked");
    EXPECT_EQ(r.header("content-length"), "");
    EXPECT_EQ(r.header("content-type"), "text/event-stream");
    EXPECT_EQ(r.header("cache-control"), "no-cache");
    EXPECT_EQ(r.header("connection"), "keep-alive");
    EXPECT_EQ(r.raw_body,
              "f\r\ndata: {\"a\":1}\n\n\r\n12c\r\n" + std::string(300, 'z') + "\r\n0\r\n\r\n");
    // HTTP/1.0: raw bytes, the end of the connection ends the body.
    Client c10(ts.port);
    ASSERT_TRUE(c10.send("GET / HTTP/1.0\r\n\r\n"));
    r = c10.read_reply();
    EXPECT_EQ(r.header("connection"), "close");
    EXPECT_EQ(r.body, "data: {\"a\":1}\n\n" + std::string(300, 'z'));
}

TEST(Http, WriteGivesUpWhenClientStopsReading) {
    http::Options o = small_limits();
    o.write_timeout_ms = 200;
    std::atomic<bool> gave_up{false};
    std::atomic<int64_t> blocked_ms{-1};
    TestServer ts(o, [&](const http::Request&, http::Response& res) {
        res.begin_stream(200, "text/plain");
        const std::string block(64 << 10, 'x');
        for (int i = 0; i < 2000; ++i) {  // at most 128 MiB: more than any socket buffers
            const auto t0 = Clock::now();
            if (!res.write(block)) {
                blocked_ms = ms_since(t0);
                gave_up = true;
                break;
            }
        }
        EXPECT_TRUE(res.peer_gone());  // a failed write means gone
    });
    Client c(ts.port, /*rcvbuf=*/4096);
    ASSERT_TRUE(c.send("GET / HTTP/1.1\r\n\r\n"));  // and never read
    ASSERT_TRUE(wait_for([&] { return gave_up.load(); }, 8000ms));
    EXPECT_GE(blocked_ms.load(), 150);
    EXPECT_LT(blocked_ms.load(), 2000);
}

// ---- peer_gone ----------------------------------------------------------------------------

// The handler polls peer_gone() every 2 ms like a prefill loop would; the client closes
// (or resets) at `close_at`. Returns how long detection took, or -1.
struct GoneProbe {
    std::atomic<bool> in_handler{false};
    std::atomic<bool> streamed{false};
    std::atomic<int64_t> detected_ns{0};
    std::atomic<int> write_after_gone{-1};  // 1: a write succeeded, 0: failed

    http::Server::Handler handler(bool stream) {
        return [this, stream](const http::Request& req, http::Response& res) {
            if (req.path == "/plain") return res.send(200, "text/plain", "plain");
            if (stream) {
                res.begin_stream(200, "text/event-stream");
                res.write("data: first\n\n");
                streamed = true;
            }
            in_handler = true;
            const auto until = Clock::now() + 5s;
            while (!res.peer_gone() && Clock::now() < until) std::this_thread::sleep_for(2ms);
            if (res.peer_gone()) detected_ns = Clock::now().time_since_epoch().count();
            bool ok = true;
            for (int i = 0; i < 50 && ok; ++i) {  // the first write after a FIN may still land
                ok = res.write("data: more\n\n");
                std::this_thread::sleep_for(1ms);
            }
            write_after_gone = ok ? 1 : 0;
            res.send(200, "text/plain", "too late");  // no crash, no SIGPIPE
        };
    }
    int64_t detection_ms(Clock::time_point closed_at) {
        if (!wait_for([&] { return detected_ns.load() != 0; })) return -1;
        return (detected_ns.load() - closed_at.time_since_epoch().count()) / 1000000;
    }
};

TEST(Http, PeerGoneBeforeAnythingWritten) {
    GoneProbe probe;
    TestServer ts(small_limits(), probe.handler(/*stream=*/false));
    Client c(ts.port);
    ASSERT_TRUE(c.send("POST /completion HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"));
    ASSERT_TRUE(wait_for([&] { return probe.in_handler.load(); }));
    std::this_thread::sleep_for(30ms);
    EXPECT_EQ(probe.detected_ns.load(), 0);  // still there
    const auto closed_at = Clock::now();
    c.close();
    const int64_t ms = probe.detection_ms(closed_at);
    EXPECT_GE(ms, 0);
    EXPECT_LT(ms, 500);  // typically 2-3 ms
}

TEST(Http, PeerGoneMidStreamAndWriteFails) {
    GoneProbe probe;
    TestServer ts(small_limits(), probe.handler(/*stream=*/true));
    Client c(ts.port);
    ASSERT_TRUE(c.send("POST /completion HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"));
    ASSERT_TRUE(wait_for([&] { return probe.in_handler.load() && c.readable(); }));
    const auto closed_at = Clock::now();
    c.close();
    const int64_t ms = probe.detection_ms(closed_at);
    EXPECT_GE(ms, 0);
    EXPECT_LT(ms, 500);
    ASSERT_TRUE(wait_for([&] { return probe.write_after_gone.load() >= 0; }));
    EXPECT_EQ(probe.write_after_gone.load(), 0);
}

TEST(Http, PeerResetMidStream) {
    GoneProbe probe;
    TestServer ts(small_limits(), probe.handler(/*stream=*/true));
    Client c(ts.port);
    ASSERT_TRUE(c.send("GET /stream HTTP/1.1\r\n\r\n"));
    ASSERT_TRUE(wait_for([&] { return probe.in_handler.load() && c.readable(); }));
    const auto closed_at = Clock::now();
    c.reset();
    const int64_t ms = probe.detection_ms(closed_at);
    EXPECT_GE(ms, 0);
    EXPECT_LT(ms, 500);
    ASSERT_TRUE(wait_for([&] { return probe.write_after_gone.load() >= 0; }));
    EXPECT_EQ(probe.write_after_gone.load(), 0);
    // The server is fine afterwards.
    Client d(ts.port);
    ASSERT_TRUE(d.send("GET /plain HTTP/1.1\r\n\r\n"));
    EXPECT_EQ(d.read_reply().status, 200);
}

TEST(Http, PipelinedRequestIsNotGone) {
    std::atomic<bool> ever_gone{false};
    TestServer ts(small_limits(), [&](const http::Request& req, http::Response& res) {
        if (req.path == "/slow") {
            const auto until = Clock::now() + 300ms;
            while (Clock::now() < until) {
                if (res.peer_gone()) ever_gone = true;
                std::this_thread::sleep_for(2ms);
            }
        }
        res.send(200, "text/plain", req.path);
    });
    Client c(ts.port);
    // The second request may arrive in the same segment or while /slow computes.
    ASSERT_TRUE(c.send("GET /slow HTTP/1.1\r\n\r\nGET /next HTTP/1.1\r\n\r\n"));
    std::this_thread::sleep_for(100ms);
    ASSERT_TRUE(c.send("GET /third HTTP/1.1\r\n\r\n"));
    EXPECT_EQ(c.read_reply().body, "/slow");
    EXPECT_EQ(c.read_reply().body, "/next");
    EXPECT_EQ(c.read_reply().body, "/third");
    EXPECT_FALSE(ever_gone.load());
}

// ---- limits and timeouts ------------------------------------------------------------------

TEST(Http, MaxConnections) {
    http::Options o = small_limits();
    o.max_connections = 2;
    RefusingServer rs(o);
    TestServer& ts = *rs.ts;
    auto c1 = std::make_unique<Client>(ts.port);
    Client c2(ts.port);
    for (Client* c : {c1.get(), &c2}) {  // both served, so both hold a slot
        ASSERT_TRUE(c->send("GET / HTTP/1.1\r\n\r\n"));
        ASSERT_EQ(c->read_reply().status, 200);
    }
    EXPECT_EQ(ts.server.active_connections(), 2);
    {
        Client c3(ts.port);
        c3.send("GET / HTTP/1.1\r\n\r\n");
        Reply r = c3.read_reply();
        EXPECT_EQ(r.status, 503);
        EXPECT_EQ(r.header("connection"), "close");
        EXPECT_EQ(r.header("retry-after"), "1");
        EXPECT_NE(r.body.find("unavailable_error"), std::string::npos);
        EXPECT_NE(r.body.find("too many connections: at most 2 are served at once"),
                  std::string::npos)
            << r.body;
        EXPECT_TRUE(c3.closed_within(2000ms));
        expect_refused_once(rs.refusals, 503, http::Limit::Connections);
    }
    c1.reset();  // frees a slot
    ASSERT_TRUE(wait_for([&] { return ts.server.active_connections() == 1; }));
    Client c4(ts.port);
    ASSERT_TRUE(c4.send("GET /again HTTP/1.1\r\n\r\n"));
    EXPECT_EQ(c4.read_reply().body, "GET /again ");
    ASSERT_TRUE(c2.send("GET /still HTTP/1.1\r\n\r\n"));
    EXPECT_EQ(c2.read_reply().body, "GET /still ");
}

TEST(Http, IdleTimeoutClosesKeepAlive) {
    http::Options o = small_limits();
    o.idle_timeout_ms = 200;
    o.header_timeout_ms = 1500;
    RefusingServer rs(o);
    TestServer& ts = *rs.ts;
    Client c(ts.port);
    ASSERT_TRUE(c.send("GET / HTTP/1.1\r\n\r\n"));
    ASSERT_EQ(c.read_reply().status, 200);
    auto t0 = Clock::now();
    EXPECT_TRUE(c.closed_within(3000ms));
    EXPECT_GE(ms_since(t0), 150);
    EXPECT_LT(ms_since(t0), 1200);  // the idle timeout, not the header timeout
    // A connection that never sends anything waits no longer than a slow head: the header
    // timeout, from its opening.
    Client silent(ts.port);
    t0 = Clock::now();
    EXPECT_TRUE(silent.closed_within(3000ms));
    EXPECT_GE(ms_since(t0), 1300);
    EXPECT_TRUE(wait_for([&] { return ts.server.active_connections() == 0; }));
    EXPECT_TRUE(rs.refusals.all().empty());  // nothing was asked, nothing refused
}

TEST(Http, EachLimitAnswersItsStatusAndIsReportedOnce) {
    http::Options o = small_limits();  // 2000 bytes of head, 1000 of body
    o.max_header_count = 10;
    RefusingServer rs(o);
    std::string many_headers = "GET / HTTP/1.1\r\n";
    for (int i = 0; i < 20; ++i) many_headers += "h" + std::to_string(i) + ": v\r\n";
    many_headers += "\r\n";
    const std::string chunked = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
    struct Case {
        std::string raw;
        int status;
        http::Limit limit;
    };
    const Case cases[] = {
        {"GET / HTTP/1.1\r\nX: " + std::string(3000, 'a') + "\r\n\r\n", 431,
         http::Limit::HeaderBytes},
        {"GET / HTTP/1.1\r\nX: " + std::string(3000, 'a'), 431, http::Limit::HeaderBytes},
        {many_headers, 431, http::Limit::HeaderCount},
        {"POST / HTTP/1.1\r\nContent-Length: 1001\r\n\r\n", 413, http::Limit::BodyBytes},
        {chunked + "200\r\n" + std::string(512, 'a') + "\r\n200\r\n" + std::string(512, 'b') +
             "\r\n",
         413, http::Limit::BodyBytes},
        {chunked + "0\r\nX-Trailer: " + std::string(3000, 't') + "\r\n\r\n", 431,
         http::Limit::HeaderBytes},
    };
    size_t n = 0;
    for (const Case& k : cases) {
        Client c(rs.port());
        ASSERT_TRUE(c.send(k.raw));
        Reply r = c.read_reply();
        EXPECT_EQ(r.status, k.status) << k.raw.substr(0, 60);
        EXPECT_EQ(r.header("connection"), "close");
        EXPECT_TRUE(c.closed_within(2000ms));
        const auto got = rs.refusals.all();  // told before the answer went out
        ASSERT_EQ(got.size(), ++n) << k.raw.substr(0, 60);
        EXPECT_EQ(got.back().status, k.status);
        EXPECT_EQ(got.back().limit, k.limit) << k.raw.substr(0, 60);
        EXPECT_EQ(got.back().peer, "127.0.0.1");
        EXPECT_NE(r.body.find(got.back().message), std::string::npos) << r.body;
    }
    // A malformed request is no limit's: a 400, and nobody is told.
    Client c(rs.port());
    ASSERT_TRUE(c.send("GET nopath HTTP/1.1\r\n\r\n"));
    EXPECT_EQ(c.read_reply().status, 400);
    EXPECT_EQ(rs.refusals.all().size(), n);
    EXPECT_TRUE(rs.rec.requests.empty());  // none reached the handler
}

TEST(Http, SlowHeadGets408AtTheHeaderDeadlineWhileOthersAreServed) {
    http::Options o = small_limits();
    o.header_timeout_ms = 1000;
    o.read_timeout_ms = 600000;  // each byte comes well within any per-read timeout
    RefusingServer rs(o);
    Client slow(rs.port());
    const auto t0 = Clock::now();
    ASSERT_TRUE(slow.send("GET / HTTP/1.1\r\nX-Slow: "));
    // One header byte every 200 ms until the server answers; on the way, another client
    // is served at once.
    bool other_served_meanwhile = false;
    for (int i = 0; i < 25 && !slow.readable(); ++i) {
        slow.send("x");
        if (i == 1) {
            Client other(rs.port());
            ASSERT_TRUE(other.send("GET /health HTTP/1.1\r\n\r\n"));
            EXPECT_EQ(other.read_reply().body, "GET /health ");
            other_served_meanwhile = !slow.readable();
        }
        std::this_thread::sleep_for(200ms);
    }
    // At the deadline, which the trickle did not push back.
    expect_408(slow, t0, "request head not received within 1 s", 900, 2500);
    EXPECT_TRUE(other_served_meanwhile);
    expect_refused_once(rs.refusals, 408, http::Limit::HeaderTime);
}

TEST(Http, SlowBodyGets408AtTheBodyDeadline) {
    http::Options o = small_limits();
    o.header_timeout_ms = 1000;
    o.body_timeout_ms = 1500;
    o.read_timeout_ms = 600000;
    RefusingServer rs(o);
    Client c(rs.port());
    ASSERT_TRUE(c.send("POST / HTTP/1.1\r\nContent-Length: 900\r\n\r\n"));
    const auto t0 = Clock::now();
    for (int i = 0; i < 40 && !c.readable(); ++i) {  // a body byte every 100 ms
        c.send("b");
        std::this_thread::sleep_for(100ms);
    }
    // The body's own deadline, past the head's.
    expect_408(c, t0, "request body not received within 1.5 s", 1400, 3000);
    expect_refused_once(rs.refusals, 408, http::Limit::BodyTime);
    EXPECT_TRUE(rs.rec.requests.empty());
}

TEST(Http, ReadTimeoutBoundsEachWait) {
    http::Options o = small_limits();
    o.header_timeout_ms = 10000;
    o.read_timeout_ms = 300;  // --timeout: a request that stops arriving
    RefusingServer rs(o);
    Client c(rs.port());
    const auto t0 = Clock::now();
    ASSERT_TRUE(c.send("GET / HTTP/1.1\r\n"));
    expect_408(c, t0, "no request bytes for 0.3 s", 250, 2500);  // long before the header timeout
    expect_refused_once(rs.refusals, 408, http::Limit::ReadTime);
}

TEST(RefusalLog, OneLinePerPeerAndLimitAMinute) {
    std::vector<std::string> lines;
    Clock::time_point t{};
    server::RefusalLog log([&](const std::string& l) { lines.push_back(l); }, 60s,
                           [&] { return t; });
    const http::Refusal big{"10.0.0.5", 431, http::Limit::HeaderBytes,
                            "request head larger than 32768 bytes"};
    log(big);
    log(big);
    log(big);
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_EQ(lines[0],
              "refused 10.0.0.5: request head larger than 32768 bytes (431, --max-header-bytes)");
    log({"10.0.0.6", 431, http::Limit::HeaderBytes, "request head larger than 32768 bytes"});
    log({"10.0.0.5", 408, http::Limit::HeaderTime, "request head not received within 10 s"});
    ASSERT_EQ(lines.size(), 3u);  // another peer, another limit: lines of their own
    EXPECT_EQ(lines[2],
              "refused 10.0.0.5: request head not received within 10 s (408, --header-timeout)");
    t += 59s;
    log(big);
    EXPECT_EQ(lines.size(), 3u);
    t += 2s;
    log(big);
    ASSERT_EQ(lines.size(), 4u);
    EXPECT_EQ(lines[3],
              "refused 10.0.0.5: request head larger than 32768 bytes (431, --max-header-bytes; "
              "3 more like it since the last line)");
    EXPECT_EQ(server::limit_flag(http::Limit::Connections), std::string("--max-connections"));
    EXPECT_EQ(server::limit_flag(http::Limit::ReadTime), std::string("--timeout"));
}

TEST(RefusalLog, ManyPeersShareOneLineAMinute) {
    std::vector<std::string> lines;
    server::RefusalLog log([&](const std::string& l) { lines.push_back(l); }, 60s,
                           [] { return Clock::time_point{}; });
    for (int i = 0; i < 3000; ++i)
        log({"10.1." + std::to_string(i / 256) + "." + std::to_string(i % 256), 503,
             http::Limit::Connections, "too many connections"});
    EXPECT_EQ(lines.size(), 1025u);  // 1024 peers remembered, then one line for the rest
    EXPECT_EQ(lines.back().rfind("refused 10.1.4.0: ", 0), 0u) << lines.back();
}

// ---- stop ---------------------------------------------------------------------------------

TEST(Http, StopWithIdleConnection) {
    Recorder rec;
    TestServer ts(small_limits(), rec.handler());
    Client c(ts.port);
    ASSERT_TRUE(c.send("GET / HTTP/1.1\r\n\r\n"));
    ASSERT_EQ(c.read_reply().status, 200);
    Client half(ts.port);
    ASSERT_TRUE(half.send("GET / HT"));  // a request half received
    std::this_thread::sleep_for(20ms);
    EXPECT_LT(ts.join(), 1000);
    EXPECT_TRUE(c.closed_within(1000ms));
    EXPECT_TRUE(half.closed_within(1000ms));
    EXPECT_EQ(ts.server.active_connections(), 0);
}

TEST(Http, StopWhileHandlerRuns) {
    GoneProbe probe;
    TestServer ts(small_limits(), probe.handler(/*stream=*/true));
    Client c(ts.port);
    ASSERT_TRUE(c.send("GET / HTTP/1.1\r\n\r\n"));
    ASSERT_TRUE(wait_for([&] { return probe.in_handler.load(); }));
    EXPECT_LT(ts.join(), 1000);  // the handler saw peer_gone() and returned
    EXPECT_NE(probe.detected_ns.load(), 0);
    EXPECT_TRUE(c.closed_within(1000ms));
}

http::Server* g_signal_server = nullptr;
void stop_on_signal(int) {
    g_signal_server->stop();
}

TEST(Http, StopFromSignalHandler) {
    Recorder rec;
    TestServer ts(small_limits(), rec.handler());
    g_signal_server = &ts.server;
    struct sigaction sa = {}, old = {};
    sa.sa_handler = stop_on_signal;
    sigaction(SIGUSR1, &sa, &old);
    std::raise(SIGUSR1);
    const auto t0 = Clock::now();
    ts.thread.join();
    EXPECT_LT(ms_since(t0), 1000);
    sigaction(SIGUSR1, &old, nullptr);
}

// ---- listen -------------------------------------------------------------------------------

TEST(Http, ListenErrorsAndHosts) {
    Recorder rec;
    TestServer ts(small_limits(), rec.handler());
    http::Options o;
    o.port = ts.port;
    http::Server second(o, rec.handler());
    auto p = second.listen();
    ASSERT_FALSE(p.ok());
    EXPECT_NE(p.error().find("address already in use"), std::string::npos) << p.error();
    EXPECT_NE(p.error().find("127.0.0.1:" + std::to_string(ts.port)), std::string::npos);
    second.run();  // not listening: returns at once

    for (const char* host : {"localhost", "0.0.0.0", "::"}) {
        http::Options h = small_limits();
        h.host = host;
        http::Server s(h, rec.handler());
        auto port = s.listen();
        if (!port.ok() && std::string(host) == "::") continue;  // no IPv6 here
        ASSERT_TRUE(port.ok()) << host << ": " << port.error();
        std::thread t([&] { s.run(); });
        Client c(*port);  // 127.0.0.1 reaches all three ("::" is dual-stack)
        ASSERT_TRUE(c.send("GET /h HTTP/1.1\r\n\r\n"));
        EXPECT_EQ(c.read_reply().body, "GET /h ") << host;
        s.stop();
        t.join();
    }
    {  // several addresses: one socket each, on one port
        http::Options h = small_limits();
        h.host = "127.0.0.1,::1";
        h.port = 0;
        http::Server s(h, rec.handler());
        auto port = s.listen();
        if (port.ok()) {
            std::thread t([&] { s.run(); });
            Client c(*port);
            ASSERT_TRUE(c.send("GET /v4 HTTP/1.1\r\n\r\n"));
            EXPECT_EQ(c.read_reply().body, "GET /v4 ");
            const int fd = ::socket(AF_INET6, SOCK_STREAM, 0);
            sockaddr_in6 a6{};
            a6.sin6_family = AF_INET6;
            a6.sin6_port = htons((uint16_t)*port);
            a6.sin6_addr = in6addr_loopback;
            ASSERT_EQ(::connect(fd, (sockaddr*)&a6, sizeof a6), 0) << "::1 is listened on too";
            const std::string req = "GET /v6 HTTP/1.1\r\nConnection: close\r\n\r\n";
            ASSERT_EQ(::send(fd, req.data(), req.size(), 0), (ssize_t)req.size());
            std::string got;
            char buf[4096];
            for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) got.append(buf, (size_t)n);
            ::close(fd);
            EXPECT_NE(got.find("GET /v6 "), std::string::npos) << got;
            s.stop();
            t.join();
        } else {
            EXPECT_NE(port.error().find("::1"), std::string::npos) << port.error();  // no IPv6 here
        }
        http::Options half = small_limits();
        half.host = "127.0.0.1,no.such.host.invalid";
        EXPECT_FALSE(http::Server(half, rec.handler()).listen().ok());  // all or nothing
        for (const char* list : {"127.0.0.1,", "127.0.0.1,127.0.0.1", ",::1"}) {
            http::Options l = small_limits();
            l.host = list;
            l.port = 0;
            auto r = http::Server(l, rec.handler()).listen();
            EXPECT_FALSE(r.ok()) << list << ": an empty or repeated address (an empty one would mean every interface)";
        }
    }
    http::Options bad;
    bad.host = "no.such.host.invalid";
    EXPECT_FALSE(http::Server(bad, rec.handler()).listen().ok());
}

// ---- robustness ---------------------------------------------------------------------------

TEST(Http, GarbageNeverCrashesOrHangs) {
    Recorder rec;
    http::Options o;  // the default limits: 32 KiB of head
    o.read_timeout_ms = 500;
    TestServer ts(o, rec.handler());
    std::mt19937 rng(42);
    std::vector<std::string> inputs;
    for (int i = 0; i < 6; ++i) {
        std::string s(1 + rng() % 8192, '\0');
        for (char& ch : s) ch = (char)(rng() % 256);
        inputs.push_back(s + "\r\n\r\n");
    }
    inputs.push_back(std::string(5000, '\0'));
    inputs.push_back("GET / HTTP/1.1\r\nX: " + std::string(1 << 20, 'a') + "\r\n\r\n");
    inputs.push_back("GET / HTTP/1.1\r\n" + [] {
        std::string s;
        for (int i = 0; i < 10000; ++i) s += "h" + std::to_string(i) + ": v\r\n";
        return s + "\r\n";
    }());
    inputs.push_back("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" +
                     std::string(10000, 'f') + "\r\n");
    inputs.push_back("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab");  // cut
    inputs.push_back(std::string(100000, '\n'));
    inputs.push_back("GET /\x01 HTTP/1.1");  // unfinished, but already wrong: 400 at once
    for (const std::string& in : inputs) {
        const auto t0 = Clock::now();
        Client c(ts.port);
        c.send(in);
        Reply r = c.read_reply();
        if (r.status != 0) {
            EXPECT_GE(r.status, 400);
            EXPECT_EQ(r.header("connection"), "close");
        }
        // Whatever it was, the server ends the connection (at worst on the read timeout).
        EXPECT_TRUE(c.closed_within(3000ms)) << in.substr(0, 40);
        EXPECT_LT(ms_since(t0), 2500);
    }
    // Still serving.
    Client c(ts.port);
    ASSERT_TRUE(c.send("GET /alive HTTP/1.1\r\n\r\n"));
    EXPECT_EQ(c.read_reply().body, "GET /alive ");
    EXPECT_TRUE(rec.requests.size() == 1);
}

TEST(HttpParser, HeadFields) {
    http::Options o;
    http::Request req;
    http::RequestFraming f;
    std::string err;
    ASSERT_EQ(http::parse_request_head("POST http://host:8080/a%2Fb?q=%E2%82%AC&q=2 HTTP/1.1\n"
                                       "Content-Length: 12\nConnection: upgrade, CLOSE\n"
                                       "Expect: 100-Continue\n\n",
                                       o, &req, &f, &err),
              0)
        << err;
    EXPECT_EQ(req.path, "/a/b");
    EXPECT_EQ(req.query.at("q"), "\xE2\x82\xAC");  // the first of duplicates
    EXPECT_EQ(f.content_length, 12u);
    EXPECT_FALSE(f.keep_alive);
    EXPECT_TRUE(f.expect_continue);
    EXPECT_EQ(http::percent_decode("%zz%4", false), "%zz%4");
    EXPECT_EQ(http::percent_decode("a+b%2b", true), "a b+");
    EXPECT_EQ(http::percent_decode("a+b", false), "a+b");
    http::Request star;
    EXPECT_EQ(http::parse_request_head("OPTIONS * HTTP/1.1\r\n\r\n", o, &star, &f, &err), 0);
    EXPECT_EQ(star.path, "*");
}

TEST(HttpParser, RandomHeadsNeverCrash) {
    // Mutations of a valid head: every result is 0 or an error status, nothing else.
    const std::string base =
        "POST /v1/completions?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n"
        "Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n";
    std::mt19937 rng(7);
    http::Options o;
    for (int i = 0; i < 20000; ++i) {
        std::string s = base;
        for (int m = 0; m < 1 + (int)(rng() % 4); ++m) s[rng() % s.size()] = (char)(rng() % 256);
        http::Request req;
        http::RequestFraming f;
        std::string err;
        const int status = http::parse_request_head(s, o, &req, &f, &err);
        EXPECT_TRUE(status == 0 || status == 400 || status == 431 || status == 501 || status == 505)
            << status;
    }
}
