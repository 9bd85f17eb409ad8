// The HTTP front over real TCP: a route table behind http::Server, called with the client
// SDK's HTTP exchange. The API key but for public rows (per method), the fallback for a path
// no row has, OPTIONS, --api-prefix, HEAD as GET, prefix rows, and the access log (quiet
// rows left out).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>

#include "edgellm/client.h"
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
    std::vector<std::string> lines() {
        std::lock_guard<std::mutex> lk(log_mu);
        return log;
    }
};

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

}  // namespace
