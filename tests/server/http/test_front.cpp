// The HTTP front over real TCP: a route table behind http::Server, called with the client
// SDK's HTTP exchange. The API key but for public rows (per method), the fallback for a path
// no row has, OPTIONS, --api-prefix, HEAD as GET, prefix rows, and the access log (quiet
// rows left out), and the Host and Origin checks (DNS rebinding, cross-site requests) with
// raw requests that carry the Host a browser would send.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "edgellm/client.h"
#include "server/http/access.h"
#include "server/http/front.h"

using namespace edgellm;
using namespace edgellm::server;

namespace {

struct FrontServer {
    std::vector<std::string> log;
    std::mutex log_mu;
    std::unique_ptr<Front> front;
    std::unique_ptr<http::Server> http;
    std::thread thread;
    int port = 0;

    FrontServer(FrontOptions o, std::vector<Route> routes, Handler fallback = nullptr) {
        o.log = [this](const std::string& line) {
            std::lock_guard<std::mutex> lk(log_mu);
            log.push_back(line);
        };
        front = std::make_unique<Front>(std::move(o), std::move(routes), std::move(fallback));
        http::Options ho;
        ho.port = 0;
        http = std::make_unique<http::Server>(ho, [this](const http::Request& q, http::Response& r) { front->handle(q, r); });
        auto p = http->listen();
        EXPECT_TRUE(p.ok()) << p.error();
        port = p.ok() ? *p : 0;
        thread = std::thread([this] { http->run(); });
    }
    ~FrontServer() {
        http->stop();
        thread.join();
    }
    client::HttpResult call(const std::string& method, const std::string& path, const std::string& key = "",
                            std::vector<std::pair<std::string, std::string>> headers = {}) {
        client::Timeouts t;
        t.connect_ms = 2000;
        t.total_ms = 5000;
        if (!key.empty()) headers.emplace_back("Authorization", "Bearer " + key);
        return client::http_request(client::Endpoint("http://127.0.0.1:" + std::to_string(port)), method, path,
                                    method == "GET" || method == "HEAD" ? "" : "{}", t, {}, nullptr,
                                    "application/json", headers);
    }
    // One request with exactly these header lines (Host included or not), over a fresh
    // connection: the status and the body.
    std::pair<int, std::string> raw(const std::string& method, const std::string& path, const std::string& head_lines) {
        const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons((uint16_t)port);
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (::connect(fd, (sockaddr*)&a, sizeof a) != 0) {
            ::close(fd);
            return {0, ""};
        }
        const std::string req = method + " " + path + " HTTP/1.1\r\n" + head_lines +
                                "Content-Length: 2\r\nConnection: close\r\n\r\n{}";
        (void)!::write(fd, req.data(), req.size());
        std::string got;
        char buf[4096];
        for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) got.append(buf, (size_t)n);
        ::close(fd);
        if (got.size() < 12) return {0, got};
        const size_t body = got.find("\r\n\r\n");
        return {std::atoi(got.c_str() + 9), body == std::string::npos ? "" : got.substr(body + 4)};
    }
    std::vector<std::string> lines() {
        std::lock_guard<std::mutex> lk(log_mu);
        return log;
    }
};

std::atomic<int> tools_ran{0};  // the kAdmin row's handler ran

Handler answer(const std::string& text) {
    return [text](Call& c) { c.res.send(200, "text/plain", text); };
}

std::vector<Route> table() {
    return {
        {"*", "/health", kPublic | kQuiet, Needs::Nothing, answer("health")},
        {"GET", "/models", kPublic | kQuiet, Needs::Nothing, answer("list")},
        {"POST", "/models", kNone, Needs::Nothing, answer("post models")},
        {"POST", "/tokenize", kNone, Needs::Nothing, [](Call& c) {
             *c.log_extra = " | 3 tokens";
             c.res.send(200, "text/plain", "tokens");
         }},
        {"POST", "/slots/*", kNone, Needs::Nothing, [](Call& c) { c.res.send(200, "text/plain", c.req.path); }},
        {"POST", "/tools", kAdmin, Needs::Nothing, [](Call& c) {
             ++tools_ran;
             c.res.send(200, "text/plain", "ran");
         }},
    };
}

std::string header(const client::HttpResult& r, const std::string& name) {
    for (const auto& [k, v] : r.headers)
        if (k == name) return v;
    return "";
}

TEST(Front, PublicRowsSkipTheKeyOnlyForTheirMethod) {
    FrontOptions o;
    o.api_keys = {"sekrit"};
    FrontServer s(o, table());
    EXPECT_EQ(s.call("GET", "/models").status, 200);
    EXPECT_EQ(s.call("HEAD", "/models").status, 200);  // (HEAD answers as GET)
    EXPECT_EQ(s.call("GET", "/health").status, 200);
    EXPECT_EQ(s.call("POST", "/health").status, 200);  // (a "*" row is public for every method)
    // the same path with another method is not public: the model list's POST needs the key
    EXPECT_EQ(s.call("POST", "/models").status, 401);
    EXPECT_EQ(s.call("POST", "/models", "wrong").status, 401);
    auto r = s.call("POST", "/models", "sekrit");
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body, "post models");
    EXPECT_EQ(s.call("POST", "/tokenize").status, 401);
    EXPECT_EQ(s.call("POST", "/tokenize", "sekrit").status, 200);
}

TEST(Front, AnUnknownPathNeedsTheKeyBeforeItIsNotFound) {
    FrontOptions o;
    o.api_keys = {"sekrit"};
    FrontServer s(o, table());
    EXPECT_EQ(s.call("GET", "/nothing-here").status, 401);  // tells a caller without the key nothing
    auto r = s.call("GET", "/nothing-here", "sekrit");
    EXPECT_EQ(r.status, 404);
    EXPECT_NE(r.body.find("File Not Found"), std::string::npos) << r.body;
    // a method no row has for a known path: not found either
    EXPECT_EQ(s.call("DELETE", "/tokenize", "sekrit").status, 404);
}

TEST(Front, TheFallbackAnswersWhatNoRowHas) {
    FrontServer s(FrontOptions{}, table(), [](Call& c) { c.res.send(200, "text/plain", "forwarded " + c.target); });
    auto r = s.call("POST", "/v1/chat/completions?x=1");
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body, "forwarded /v1/chat/completions?x=1");
    EXPECT_EQ(s.call("POST", "/tokenize").body, "tokens");
}

TEST(Front, PrefixRowsAndOptions) {
    FrontOptions o;
    o.api_keys = {"sekrit"};
    o.cors.origins = "*";
    FrontServer s(o, table());
    auto r = s.call("POST", "/slots/3?action=save", "sekrit");
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body, "/slots/3");
    EXPECT_EQ(s.call("POST", "/slotsX", "sekrit").status, 404);
    // a CORS preflight needs no key, for any path, and carries the CORS headers
    auto p = s.call("OPTIONS", "/v1/chat/completions", "", {{"Origin", "http://localhost:3000"}});
    EXPECT_EQ(p.status, 200);
    EXPECT_EQ(header(p, "access-control-allow-origin"), "http://localhost:3000");
    EXPECT_FALSE(header(p, "access-control-allow-methods").empty());
}

TEST(Front, ApiPrefix) {
    FrontOptions o;
    o.api_prefix = "/llm";
    FrontServer s(o, table(), [](Call& c) { c.res.send(200, "text/plain", "fallback " + c.target); });
    EXPECT_EQ(s.call("POST", "/llm/tokenize").body, "tokens");
    EXPECT_EQ(s.call("POST", "/tokenize").status, 404);
    EXPECT_EQ(s.call("POST", "/llmtokenize").status, 404);
    auto r = s.call("GET", "/llm");
    EXPECT_EQ(r.status, 308);
    EXPECT_EQ(header(r, "location"), "/llm/");
    // the target a fallback forwards has the prefix taken off, the query kept
    EXPECT_EQ(s.call("POST", "/llm/v1/x?y=2").body, "fallback /v1/x?y=2");
}

TEST(Front, TheAccessLogLeavesOutQuietRows) {
    FrontServer s(FrontOptions{}, table());
    s.call("GET", "/health");
    s.call("GET", "/models");
    s.call("POST", "/models");
    s.call("POST", "/tokenize");
    s.call("GET", "/nothing-here");
    // (a line is written once its answer is sent: the last may come a moment after it)
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    while (s.lines().size() < 3 && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // (and no fourth)
    auto lines = s.lines();
    std::sort(lines.begin(), lines.end());
    ASSERT_EQ(lines.size(), 3u) << ::testing::PrintToString(lines);
    EXPECT_EQ(lines[0].rfind("GET /nothing-here 404 | ", 0), 0u) << lines[0];
    EXPECT_EQ(lines[1].rfind("POST /models 200 | ", 0), 0u) << lines[1];
    EXPECT_EQ(lines[2].rfind("POST /tokenize 200 | 3 tokens | ", 0), 0u) << lines[2];
    EXPECT_NE(lines[2].find(" ms"), std::string::npos) << lines[2];
}

TEST(Front, AroundRunsAroundEveryRowButNotTheFallback) {
    FrontServer s(FrontOptions{}, table(), [](Call& c) { c.res.send(200, "text/plain", "fallback"); });
    std::atomic<int> around{0};
    s.front->set_around([&](const Route&, Call& c, const Handler& run) {
        ++around;
        run(c);
    });
    EXPECT_EQ(s.call("POST", "/tokenize").body, "tokens");
    EXPECT_EQ(s.call("GET", "/models").body, "list");
    EXPECT_EQ(s.call("GET", "/other").body, "fallback");
    EXPECT_EQ(around.load(), 2);
}

TEST(Access, AuthorityHost) {
    EXPECT_EQ(authority_host("Example.COM:8080"), "example.com");
    EXPECT_EQ(authority_host("example.com."), "example.com");
    EXPECT_EQ(authority_host("127.0.0.1"), "127.0.0.1");
    EXPECT_EQ(authority_host("[::1]:18111"), "::1");
    EXPECT_EQ(authority_host("[::ffff:127.0.0.1]"), "::ffff:127.0.0.1");
    EXPECT_EQ(authority_host("::1"), "::1");  // (a bare literal, as some clients write it)
    EXPECT_EQ(authority_host("[::1"), "");
    EXPECT_EQ(authority_host("[nothost]:80"), "");
    EXPECT_EQ(authority_host("a.b:80x"), "");
    EXPECT_EQ(authority_host("a.b:123456"), "");
    EXPECT_EQ(authority_host("evil.example@127.0.0.1"), "");
    EXPECT_EQ(authority_host("a b"), "");
}

TEST(Access, HostAllowed) {
    const HostPolicy p = host_policy("0.0.0.0,pi5.local", "llm.home, [fd00::5]:8080");
    EXPECT_FALSE(p.any);
    std::string why;
    auto ok = [&](const char* host, const std::string& local = "127.0.0.1") {
        const std::string h = host;
        return host_allowed(p, &h, local, &why);
    };
    for (const char* good : {"localhost:8080", "LOCALHOST", "127.0.0.1:8080", "127.5.6.7", "[::1]:8080",
                             "[::ffff:127.0.0.1]:1", "pi5.local:8080", "llm.home", "[fd00::5]"})
        EXPECT_TRUE(ok(good)) << good;
    // the address the connection reached names the server (a literal cannot be rebound)
    EXPECT_TRUE(ok("192.168.1.5:8080", "192.168.1.5"));
    EXPECT_TRUE(ok("[::ffff:192.168.1.5]", "192.168.1.5"));
    EXPECT_FALSE(ok("192.168.1.6:8080", "192.168.1.5"));
    for (const char* bad : {"evil.example:18111", "localhost.evil.example", "0.0.0.0:8080", "127.0.0.1.evil.example",
                            "pi5.local.evil", "sub.llm.home", "[::1"}) {
        EXPECT_FALSE(ok(bad)) << bad;
        EXPECT_FALSE(why.empty());
    }
    EXPECT_NE((ok("evil.example:1"), why).find("--allowed-hosts evil.example"), std::string::npos) << why;
    EXPECT_TRUE(host_allowed(p, nullptr, "", &why));  // (no Host: not a browser)
    const std::string evil = "evil.example";
    EXPECT_TRUE(host_allowed(host_policy("127.0.0.1", "*"), &evil, "127.0.0.1", &why));
}

TEST(Access, OriginAllowed) {
    CorsPolicy local;
    local.origins = "localhost";
    const std::string host = "192.168.1.5:8080";
    auto ok = [&](const CorsPolicy& p, const std::string& origin, const std::string& h) {
        return origin_allowed(p, &origin, &h, false);
    };
    EXPECT_TRUE(origin_allowed(local, nullptr, &host, true));
    EXPECT_TRUE(ok(local, "http://192.168.1.5:8080", host));  // the server's own page
    EXPECT_TRUE(ok(local, "http://localhost:3000", host));    // the policy's
    EXPECT_FALSE(ok(local, "http://192.168.1.5:8081", host));
    EXPECT_FALSE(ok(local, "http://evil.example", host));
    EXPECT_FALSE(ok(local, "null", host));
    CorsPolicy list;
    list.origins = "https://app.example, http://x.example";
    EXPECT_TRUE(ok(list, "https://app.example", host));
    EXPECT_FALSE(ok(list, "https://evil.example", host));
    EXPECT_TRUE(ok(CorsPolicy{}, "https://evil.example", host));  // "*": any page may chat
    // but not administer: there "*" stands for localhost pages (and the server's own)
    const std::string evil = "https://evil.example", dev = "http://localhost:5173", own = "http://" + host;
    EXPECT_FALSE(origin_allowed(CorsPolicy{}, &evil, &host, true));
    EXPECT_TRUE(origin_allowed(CorsPolicy{}, &dev, &host, true));
    EXPECT_TRUE(origin_allowed(CorsPolicy{}, &own, &host, true));
    EXPECT_TRUE(origin_allowed(list, &evil, &host, true) == false);
    const std::string app = "https://app.example";
    EXPECT_TRUE(origin_allowed(list, &app, &host, true));  // a listed origin may
}

TEST(Front, TheDnsRebindingRequestIsRefusedAndRunsNothing) {
    FrontOptions o;
    o.hosts = host_policy("127.0.0.1", "");
    o.cors.origins = "localhost";
    FrontServer s(o, table());
    const int before = tools_ran.load();
    const std::string hp = std::to_string(s.port);
    // what a browser sends after a page pointed its own name at 127.0.0.1
    auto [status, body] = s.raw("POST", "/tools", "Host: evil.example:" + hp + "\r\nOrigin: http://evil.example:" + hp + "\r\n");
    EXPECT_EQ(status, 403) << body;
    EXPECT_NE(body.find("evil.example"), std::string::npos) << body;
    EXPECT_NE(body.find("permission_error"), std::string::npos) << body;
    // a page of another origin posting to the right name (cross-site request forgery)
    EXPECT_EQ(s.raw("POST", "/tools", "Host: 127.0.0.1:" + hp + "\r\nOrigin: http://evil.example\r\n").first, 403);
    // an absolute-form target's authority is the Host (and two Hosts are refused)
    EXPECT_EQ(s.raw("POST", "http://evil.example/tools", "Host: 127.0.0.1\r\n").first, 403);
    EXPECT_EQ(s.raw("POST", "/tools", "Host: 127.0.0.1\r\nHost: evil.example\r\n").first, 400);
    EXPECT_EQ(tools_ran.load(), before);
    // the names of this server still work, with or without the page's own origin
    for (const std::string& h : {"127.0.0.1:" + hp, "localhost:" + hp, "[::1]:" + hp, std::string("localhost")})
        EXPECT_EQ(s.raw("POST", "/tools", "Host: " + h + "\r\n").first, 200) << h;
    EXPECT_EQ(s.raw("POST", "/tools", "Host: localhost:" + hp + "\r\nOrigin: http://localhost:" + hp + "\r\n").first, 200);
    EXPECT_EQ(s.raw("POST", "/tools", "").first, 200);  // no Host (HTTP/1.0 style): not a browser
    // a route that does not act on the machine answers any name while tools are off
    EXPECT_EQ(s.raw("POST", "/tokenize", "Host: evil.example\r\n").first, 200);
    // each refused name is logged once, however often it comes back
    EXPECT_EQ(s.raw("POST", "/tools", "Host: evil.example:" + hp + "\r\n").first, 403);
    const auto lines = s.lines();
    EXPECT_EQ(std::count_if(lines.begin(), lines.end(),
                            [](const std::string& l) { return l.rfind("refused Host evil.example", 0) == 0; }),
              1)
        << ::testing::PrintToString(lines);
}

TEST(Front, WithToolsOnEveryRouteChecksTheHost) {
    FrontOptions o;
    o.hosts = host_policy("127.0.0.1", "llm.home");
    o.guard_all = true;
    FrontServer s(o, table());
    EXPECT_EQ(s.raw("POST", "/tokenize", "Host: evil.example\r\n").first, 403);
    EXPECT_EQ(s.raw("GET", "/health", "Host: evil.example\r\n").first, 403);
    EXPECT_EQ(s.raw("POST", "/tokenize", "Host: llm.home:8080\r\n").first, 200);
    EXPECT_EQ(s.raw("OPTIONS", "/tokenize", "Host: evil.example\r\n").first, 200);  // (a preflight runs nothing)
    // --allowed-hosts *: the operator's explicit opt-out
    o.hosts = host_policy("127.0.0.1", "*");
    FrontServer any(o, table());
    EXPECT_EQ(any.raw("POST", "/tools", "Host: evil.example\r\n").first, 200);
}

}  // namespace
