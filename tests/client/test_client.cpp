// The client SDK against a real `edgellm serve` (Qwen2.5-Coder 0.5B, fetched by
// scripts/setup.sh): streaming, serial calls, history trimming through the server, and the
// fault cases — a server killed mid-stream, a stream cut by a proxy (the slot is reset), a
// server that accepts and never answers, a closed port.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "edgellm/client.h"
#include "test_paths.h"

extern char** environ;

namespace {

using namespace edgellm::client;
using namespace std::chrono_literals;

// A TCP socket bound to a free port on 127.0.0.1; the port in *port.
int bound_socket(int* port) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, (sockaddr*)&a, sizeof a);
    socklen_t len = sizeof a;
    ::getsockname(fd, (sockaddr*)&a, &len);
    *port = ntohs(a.sin_port);
    return fd;
}

int free_port() {
    int port;
    ::close(bound_socket(&port));
    return port;
}

std::string url_of(int port) { return "http://127.0.0.1:" + std::to_string(port); }

// A real server process on a free port.
struct ServerProcess {
    pid_t pid = -1;
    int port = 0;

    bool start(const std::filesystem::path& model, std::vector<std::string> extra = {}) {
        port = free_port();
        std::vector<std::string> args;
        {  // qemu for a cross-compiled binary (EDGELLM_TEST_WRAPPER), else nothing
            std::istringstream w(EDGELLM_TEST_WRAPPER);
            for (std::string part; w >> part;) args.push_back(part);
        }
        std::vector<std::string> serve = {std::string(EDGELLM_BIN_DIR) + "/edgellm", "serve", "-m",
                                         model.string(), "--port", std::to_string(port), "-c", "2048",
                                         "-np", "1", "-t", "2", "--log-file", "/dev/null"};
        serve.insert(serve.end(), extra.begin(), extra.end());
        args.insert(args.end(), serve.begin(), serve.end());
        std::vector<char*> argv;
        for (auto& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        if (posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) return false;
        for (int i = 0; i < 600; ++i) {  // up to 60 s
            HttpResult h = http_request({url_of(port)}, "GET", "/health", "", Timeouts{200, 1000, 1000});
            if (h.status == 200) return true;
            int st;
            if (waitpid(pid, &st, WNOHANG) == pid) {
                pid = -1;
                return false;
            }
            std::this_thread::sleep_for(100ms);
        }
        return false;
    }
    void kill_now() {
        if (pid > 0) {
            ::kill(pid, SIGKILL);
            waitpid(pid, nullptr, 0);
            pid = -1;
        }
    }
    ~ServerProcess() {
        if (pid > 0) {
            ::kill(pid, SIGTERM);
            waitpid(pid, nullptr, 0);
        }
    }
};

// A TCP listener run by a thread: accepts connections and hands each to `serve`.
struct FakeServer {
    int fd = -1;
    int port = 0;
    std::atomic<bool> stop{false};
    std::thread thread;
    std::vector<std::thread> conns;

    template <class F>
    void start(F serve) {
        fd = bound_socket(&port);
        ::listen(fd, 16);
        thread = std::thread([this, serve] {
            for (;;) {
                int c = ::accept(fd, nullptr, nullptr);
                if (c < 0 || stop) {
                    if (c >= 0) ::close(c);
                    return;
                }
                conns.emplace_back([serve, c, this] { serve(c, stop); ::close(c); });
            }
        });
    }
    ~FakeServer() {
        stop = true;
        ::shutdown(fd, SHUT_RDWR);
        ::close(fd);
        thread.join();
        for (auto& t : conns) t.join();
    }
};

// Reads one request (headers + Content-Length body) from a socket.
std::string read_request(int c) {
    std::string buf;
    char tmp[4096];
    for (;;) {
        size_t he = buf.find("\r\n\r\n");
        if (he != std::string::npos) {
            size_t cl = 0;
            auto p = buf.find("Content-Length: ");
            if (p != std::string::npos) cl = std::stoul(buf.substr(p + 16));
            if (buf.size() >= he + 4 + cl) return buf;
        }
        ssize_t n = ::recv(c, tmp, sizeof tmp, 0);
        if (n <= 0) return buf;
        buf.append(tmp, (size_t)n);
    }
}

class ClientTest : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        model_ = edgellm::test::real_model({"qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"});
        if (model_.empty()) return;
        server_ = new ServerProcess;
        if (!server_->start(model_)) {
            delete server_;
            server_ = nullptr;
        }
    }
    static void TearDownTestSuite() {
        delete server_;
        server_ = nullptr;
    }
    void SetUp() override {
        if (model_.empty())
            GTEST_SKIP() << "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf not in "
                         << edgellm::test::models_dir() << " (scripts/fetch-models.sh fetches it)";
        ASSERT_NE(server_, nullptr) << "edgellm serve did not start with " << model_;
    }
    static ClientOptions opts() {
        ClientOptions o;
        o.primary.url = url_of(server_->port);
        o.temperature = 0;
        o.max_tokens = 24;
        o.timeouts = Timeouts{2000, 20000, 60000};  // (CI machines are slow; the defaults are tested below)
        return o;
    }
    static inline std::filesystem::path model_;
    static inline ServerProcess* server_ = nullptr;
};

TEST(ClientDefaults, SeedTimeoutsAndBudget) {
    ClientOptions o;
    EXPECT_EQ(o.timeouts.connect_ms, 2000);
    EXPECT_EQ(o.timeouts.first_token_ms, 3000);
    EXPECT_EQ(o.timeouts.total_ms, 30000);
    EXPECT_EQ(o.history_token_budget, 700);
    EXPECT_EQ(o.slot, 0);
}

TEST(ClientSse, EventsAcrossArbitrarySplits) {
    const std::string stream =
        ": comment\r\ndata: {\"a\":1}\r\n\r\ndata: line1\ndata: line2\n\nevent: x\ndata: [DONE]\n\n";
    for (size_t step : {1u, 2u, 3u, 7u, 1000u}) {
        SseParser p;
        std::vector<std::string> got;
        for (size_t i = 0; i < stream.size(); i += step)
            p.feed(std::string_view(stream).substr(i, step), [&](const std::string& d) {
                got.push_back(d);
                return true;
            });
        ASSERT_EQ(got.size(), 3u) << "step " << step;
        EXPECT_EQ(got[0], "{\"a\":1}");
        EXPECT_EQ(got[1], "line1\nline2");
        EXPECT_EQ(got[2], "[DONE]");
    }
}

TEST(ClientEndpoint, HttpsAndBadUrlsAreRefusedByName) {
    HttpResult r = http_request({"https://api.example.com"}, "GET", "/", "", {});
    EXPECT_EQ(r.failure, Failure::bad_endpoint);
    EXPECT_NE(r.error.find("https"), std::string::npos) << r.error;
    r = http_request({"http://127.0.0.1:99999"}, "GET", "/", "", {});
    EXPECT_EQ(r.failure, Failure::bad_endpoint);
    EXPECT_NE(r.error.find("port"), std::string::npos) << r.error;
}

TEST(ClientFaults, ClosedPortFallsToCannedReply) {
    ClientOptions o;
    o.primary.url = url_of(free_port());  // nothing listens there
    o.canned_reply = "Sorry, I cannot answer right now.";
    o.history_token_budget = 0;
    Client c(o);
    std::string streamed;
    Reply r = c.chat("hello", [&](std::string_view p) { streamed += p; });
    EXPECT_EQ(r.source, Source::canned_reply);
    EXPECT_EQ(r.failure, Failure::connect) << r.error;
    EXPECT_EQ(r.text, o.canned_reply);
    EXPECT_EQ(streamed, o.canned_reply);
    EXPECT_FALSE(r.slot_reset);  // the request never reached a server: nothing to reset
    EXPECT_TRUE(c.history().empty());
}

TEST(ClientFaults, NoCannedReplyMeansTheCallFails) {
    ClientOptions o;
    o.primary.url = url_of(free_port());
    o.history_token_budget = 0;
    Client c(o);
    Reply r = c.chat("hello");
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.source, Source::none);
    EXPECT_EQ(r.failure, Failure::connect);
}

TEST(ClientFaults, ServerThatNeverAnswersHitsTheFirstTokenTimeout) {
    FakeServer silent;
    silent.start([](int c, std::atomic<bool>& stop) {
        read_request(c);
        while (!stop) std::this_thread::sleep_for(10ms);  // holds the connection, says nothing
    });
    ClientOptions o;
    o.primary.url = url_of(silent.port);
    o.timeouts = Timeouts{2000, 400, 30000};
    o.canned_reply = "canned";
    o.history_token_budget = 0;
    Client c(o);
    const auto t0 = std::chrono::steady_clock::now();
    Reply r = c.chat("hello");
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(r.failure, Failure::first_token_timeout) << r.error;
    EXPECT_EQ(r.source, Source::canned_reply);
    EXPECT_GE(ms, 390);
    EXPECT_LT(ms, 400 + 1500);
    // no response headers came: the server never started on it, so its slot is not reset
    // (it may be another client's reply that holds the slot)
    EXPECT_FALSE(r.slot_reset);
    EXPECT_NE(r.slot_reset_error.find("not reset"), std::string::npos) << r.slot_reset_error;
}

TEST(ClientFaults, RouterAnswersWithoutTheLlm) {
    ClientOptions o;
    o.primary.url = url_of(free_port());  // would fail if called
    o.router = [](std::string_view u) -> std::optional<std::string> {
        if (u.find("空调") != std::string_view::npos) return std::string("好的，已为您打开空调。");
        return std::nullopt;
    };
    o.history_token_budget = 0;
    Client c(o);
    Reply r = c.chat("打开空调");
    EXPECT_EQ(r.source, Source::router);
    EXPECT_EQ(r.text, "好的，已为您打开空调。");
    EXPECT_EQ(r.failure, Failure::none);
    EXPECT_TRUE(c.history().empty());
    r = c.chat("讲个笑话");  // not routed: goes to the (absent) LLM
    EXPECT_EQ(r.failure, Failure::connect);
}

TEST_F(ClientTest, StreamsAReplyAndKeepsTheConversation) {
    ClientOptions o = opts();
    o.system_prompt = "You are a helpful assistant. Answer briefly.";
    Client c(o);
    std::vector<std::string> pieces;
    Reply r = c.chat("What is the capital of France?", [&](std::string_view p) { pieces.emplace_back(p); });
    ASSERT_EQ(r.source, Source::llm) << failure_name(r.failure) << ": " << r.error;
    EXPECT_GT(pieces.size(), 1u);  // streamed, not one piece at the end
    std::string joined;
    for (auto& p : pieces) joined += p;
    EXPECT_EQ(joined, r.text);
    EXPECT_NE(r.text.find("Paris"), std::string::npos) << r.text;
    EXPECT_GT(r.completion_tokens, 0);
    EXPECT_GT(r.prompt_tokens, 10);
    EXPECT_GE(r.first_token_ms, 0);
    EXPECT_GT(r.decode_tokens_per_second, 0);
    EXPECT_GT(r.history_tokens, 10);  // counted through /apply-template + /tokenize
    ASSERT_EQ(c.history().size(), 2u);
    EXPECT_EQ(c.history()[1].content, r.text);

    // The second turn sends the whole history and reuses the slot's cache.
    Reply r2 = c.chat("And of Germany?");
    ASSERT_EQ(r2.source, Source::llm) << r2.error;
    EXPECT_NE(r2.text.find("Berlin"), std::string::npos) << r2.text;
    EXPECT_GT(r2.cached_tokens, r.prompt_tokens / 2);
    EXPECT_EQ(c.history().size(), 4u);
}

TEST_F(ClientTest, CountsTokensAsTheServerDoes) {
    Client c(opts());
    std::string why;
    std::optional<int> n1 = c.count_tokens({{"user", "hi"}}, &why);
    ASSERT_TRUE(n1) << why;
    std::optional<int> n2 = c.count_tokens({{"user", "hi"}, {"assistant", "hello there"}, {"user", "bye"}}, &why);
    ASSERT_TRUE(n2) << why;
    EXPECT_GT(*n2, *n1 + 4);
}

TEST_F(ClientTest, HistoryOverTheBudgetIsSummarizedByTheServer) {
    ClientOptions o = opts();
    o.system_prompt = "You are a car assistant. Answer in one short sentence.";
    o.history_token_budget = 120;
    o.keep_turns = 1;
    o.max_tokens = 20;
    o.summary_max_tokens = 32;
    Client c(o);
    const char* turns[] = {"My name is Alice and my car is a red Tesla.",
                           "I am driving from Berlin to Munich today.",
                           "I need to arrive before 6 pm for a meeting.",
                           "Remind me what my name is."};
    int summarized = 0;
    for (const char* t : turns) {
        Reply r = c.chat(t);
        ASSERT_EQ(r.source, Source::llm) << r.error;
        EXPECT_TRUE(r.trim_error.empty()) << r.trim_error;
        EXPECT_LE(r.history_tokens, o.history_token_budget);
        if (r.turns_summarized > 0) {  // what is left: the kept turns and this one
            EXPECT_LE(c.history().size(), 2u * (size_t)o.keep_turns + 2);
        }
        summarized += r.turns_summarized;
    }
    EXPECT_GT(summarized, 0);
    EXPECT_FALSE(c.summary().empty());
    // The summary was written by the model about this conversation.
    const std::string s = c.summary();
    EXPECT_TRUE(s.find("Alice") != std::string::npos || s.find("Tesla") != std::string::npos ||
                s.find("Berlin") != std::string::npos || s.find("Munich") != std::string::npos)
        << s;
}

// A server that streams a slow reply (five pieces, 40 ms apart) and records how many
// requests it had at once.
struct SlowStreamServer {
    std::atomic<int> now{0}, most{0}, served{0};
    FakeServer fake;
    void start() {
        fake.start([this](int c, std::atomic<bool>&) {
            read_request(c);
            const int n = ++now;
            for (int m = most; n > m && !most.compare_exchange_weak(m, n);) {}
            std::string head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                               "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
            ::send(c, head.data(), head.size(), MSG_NOSIGNAL);
            auto chunk = [&](const std::string& data) {
                char size[16];
                std::snprintf(size, sizeof size, "%zx\r\n", data.size());
                const std::string out = size + data + "\r\n";
                ::send(c, out.data(), out.size(), MSG_NOSIGNAL);
            };
            for (int i = 0; i < 5; ++i) {
                chunk("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"w" + std::to_string(i) +
                      " \"},\"finish_reason\":null}]}\n\n");
                std::this_thread::sleep_for(40ms);
            }
            chunk("data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n");
            --now;  // (before [DONE]: the client returns on it and may be on its next call at once)
            ++served;
            chunk("data: [DONE]\n\n");
            chunk("");
        });
    }
};

TEST(ClientSerial, SecondConcurrentCallWaitsOrIsRefused) {
    for (auto mode : {ClientOptions::Concurrency::wait, ClientOptions::Concurrency::refuse}) {
        SlowStreamServer srv;
        srv.start();
        ClientOptions o;
        o.primary.url = url_of(srv.fake.port);
        o.concurrency = mode;
        o.history_token_budget = 0;
        Client c(o);
        std::atomic<bool> streaming{false}, a_done{false};
        Reply a, b;
        std::thread ta([&] {
            a = c.complete({{"user", "first"}}, [&](std::string_view) { streaming = true; });
            a_done = true;
        });
        while (!streaming && !a_done) std::this_thread::sleep_for(1ms);
        ASSERT_TRUE(streaming.load()) << a.error;
        b = c.complete({{"user", "second"}});
        ta.join();
        EXPECT_EQ(a.source, Source::llm) << a.error;
        EXPECT_EQ(a.text, "w0 w1 w2 w3 w4 ");
        if (mode == ClientOptions::Concurrency::wait) {
            EXPECT_EQ(b.source, Source::llm) << b.error;
            EXPECT_EQ(srv.served.load(), 2);
            EXPECT_EQ(srv.most.load(), 1);  // the second request went out after the first ended
        } else {
            EXPECT_EQ(b.failure, Failure::busy);
            EXPECT_FALSE(b.ok());
            EXPECT_EQ(srv.served.load(), 1);
        }
    }
}

// The fallback endpoint gets the key and model it was given (an OpenAI-compatible cloud
// endpoint), and no id_slot (a field of llama-server's only).
TEST(ClientFallback, SendsTheKeyAndModelButNoSlot) {
    std::string seen;
    std::mutex mu;
    FakeServer cloud;
    cloud.start([&](int c, std::atomic<bool>&) {
        std::string req = read_request(c);
        {
            std::lock_guard lk(mu);
            seen = req;
        }
        const std::string body =
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"cloud\"},\"finish_reason\":\"stop\"}]}\n\n"
            "data: [DONE]\n\n";
        const std::string out = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: " +
                                std::to_string(body.size()) + "\r\n\r\n" + body;
        ::send(c, out.data(), out.size(), MSG_NOSIGNAL);
    });
    ClientOptions o;
    o.primary.url = url_of(free_port());  // nothing there
    o.fallback = Endpoint(url_of(cloud.port), "sk-test", "gpt-4o-mini");
    o.history_token_budget = 0;
    Client c(o);
    Reply r = c.chat("hello");
    ASSERT_EQ(r.source, Source::fallback_endpoint) << r.fallback_error;
    EXPECT_EQ(r.text, "cloud");
    std::lock_guard lk(mu);
    EXPECT_NE(seen.find("Authorization: Bearer sk-test\r\n"), std::string::npos) << seen;
    EXPECT_NE(seen.find("Host: 127.0.0.1:" + std::to_string(cloud.port) + "\r\n"), std::string::npos) << seen;
    EXPECT_NE(seen.find("\"model\":\"gpt-4o-mini\""), std::string::npos) << seen;
    EXPECT_EQ(seen.find("id_slot"), std::string::npos) << seen;
}

// The HTTP layer's framing on bytes written one at a time: chunk extensions, CRLFs split
// across reads, trailers, Content-Length and close-delimited bodies, and a bad chunk.
TEST(ClientHttp, FramingByteByByte) {
    struct Case {
        std::string response, body;
        Failure failure;
    };
    const Case cases[] = {
        {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nX-Trailer: y\r\n\r\n",
         "abcde", Failure::none},
        {"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", "hello", Failure::none},
        {"HTTP/1.0 200 OK\r\n\r\nuntil the end", "until the end", Failure::none},
        {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXY", "", Failure::bad_response},
        {"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nshort", "", Failure::broken_stream},
        {"SSH-2.0-OpenSSH\r\n\r\n", "", Failure::bad_response},
    };
    for (const Case& k : cases) {
        FakeServer fake;
        fake.start([&k](int c, std::atomic<bool>&) {
            read_request(c);
            for (char ch : k.response) {
                ::send(c, &ch, 1, MSG_NOSIGNAL);
                std::this_thread::sleep_for(std::chrono::microseconds(200));
            }
        });
        HttpResult r = http_request(Endpoint(url_of(fake.port)), "GET", "/", "", Timeouts{2000, 5000, 5000});
        EXPECT_EQ(r.failure, k.failure) << k.response << ": " << r.error;
        if (k.failure == Failure::none) {
            EXPECT_EQ(r.status, 200);
            EXPECT_EQ(r.body, k.body);
        }
    }
}

TEST_F(ClientTest, StreamCutMidwayResetsTheSlot) {
    // A proxy in front of the real server that cuts the first streamed reply after a few
    // events and forwards everything else (the slot reset).
    const int upstream = server_->port;
    std::atomic<int> cut{0};
    std::atomic<int> deletes{0};
    FakeServer proxy;
    proxy.start([&](int c, std::atomic<bool>&) {
        std::string req = read_request(c);
        const bool stream = req.find("\"stream\":true") != std::string::npos;
        if (req.rfind("DELETE /slots/0", 0) == 0) deletes++;
        int u = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons((uint16_t)upstream);
        if (::connect(u, (sockaddr*)&a, sizeof a) != 0) return;
        ::send(u, req.data(), req.size(), MSG_NOSIGNAL);
        std::string seen;
        char tmp[4096];
        for (;;) {
            ssize_t n = ::recv(u, tmp, sizeof tmp, 0);
            if (n <= 0) break;
            seen.append(tmp, (size_t)n);
            ::send(c, tmp, (size_t)n, MSG_NOSIGNAL);
            size_t events = 0;
            for (size_t p = seen.find("data: "); p != std::string::npos; p = seen.find("data: ", p + 1)) events++;
            if (stream && cut == 0 && events >= 4) {
                cut++;
                ::shutdown(c, SHUT_RDWR);  // the stream breaks here
                break;
            }
        }
        ::close(u);
    });
    ClientOptions o = opts();
    o.primary.url = url_of(proxy.port);
    o.max_tokens = 64;
    o.extra_json = R"({"ignore_eos": true})";
    o.canned_reply = "canned";
    o.history_token_budget = 0;
    std::vector<Source> restarts;
    o.on_restart = [&](Source next) { restarts.push_back(next); };
    Client c(o);
    std::string heard;
    Reply r = c.chat("Write a long story about a dragon.", [&](std::string_view p) {
        if (!restarts.empty()) heard += p;  // what followed the restart
    });
    EXPECT_EQ(cut.load(), 1);
    EXPECT_EQ(r.failure, Failure::broken_stream) << r.error;
    EXPECT_FALSE(r.partial_text.empty());
    EXPECT_TRUE(r.slot_reset) << r.slot_reset_error;
    EXPECT_EQ(deletes.load(), 1);
    EXPECT_EQ(r.source, Source::canned_reply);
    ASSERT_EQ(restarts.size(), 1u);  // the app was told before the canned reply streamed
    EXPECT_EQ(restarts[0], Source::canned_reply);
    EXPECT_EQ(heard, "canned");
    EXPECT_TRUE(c.history().empty());
    // The slot is empty now: /slots says so, and the next call works.
    HttpResult slots = http_request(Endpoint(url_of(upstream)), "GET", "/slots", "", {});
    EXPECT_EQ(slots.status, 200);
    EXPECT_NE(slots.body.find("\"n_cached\":0"), std::string::npos) << slots.body;
    Reply next = c.chat("Say hi.");
    EXPECT_EQ(next.source, Source::llm) << next.error;
    EXPECT_EQ(next.cached_tokens, 0);
}

TEST_F(ClientTest, NeverAnsweringPrimaryFallsBackToTheSecondEndpoint) {
    FakeServer silent;
    silent.start([](int c, std::atomic<bool>& stop) {
        read_request(c);
        while (!stop) std::this_thread::sleep_for(10ms);
    });
    ClientOptions o = opts();
    o.primary.url = url_of(silent.port);
    o.timeouts = Timeouts{2000, 300, 30000};
    o.fallback = Endpoint{url_of(server_->port), "sk-local", "qwen"};
    o.fallback_timeouts = Timeouts{2000, 20000, 60000};
    o.history_token_budget = 0;
    Client c(o);
    std::string streamed;
    Reply r = c.chat("What is 2+2?", [&](std::string_view p) { streamed += p; });
    EXPECT_EQ(r.failure, Failure::first_token_timeout) << r.error;
    ASSERT_EQ(r.source, Source::fallback_endpoint) << r.fallback_error;
    EXPECT_EQ(streamed, r.text);
    EXPECT_FALSE(r.text.empty());
    EXPECT_EQ(c.history().size(), 2u);  // a reply from the fallback is part of the conversation
}

TEST_F(ClientTest, TotalTimeoutStopsALongReply) {
    ClientOptions o = opts();
    o.timeouts = Timeouts{2000, 20000, 700};
    o.max_tokens = 2000;
    o.extra_json = R"({"ignore_eos": true})";
    o.history_token_budget = 0;
    Client c(o);
    Reply r = c.chat("Tell me everything about the history of Rome.");
    EXPECT_EQ(r.failure, Failure::total_timeout) << r.error;
    EXPECT_TRUE(r.slot_reset) << r.slot_reset_error;
    EXPECT_LT(r.total_ms, 700 + 3000 + 3000);  // (+ the DELETE, at most 3 s)
}

TEST_F(ClientTest, CancelFromAnotherThreadStopsTheCall) {
    ClientOptions o = opts();
    o.max_tokens = 2000;
    o.extra_json = R"({"ignore_eos": true})";
    o.history_token_budget = 0;
    o.canned_reply = "canned";  // not used: a cancelled call does not fall back
    Client c(o);
    std::atomic<int> pieces{0};
    std::atomic<bool> done{false};
    std::thread stopper([&] {
        while (pieces < 3 && !done) std::this_thread::sleep_for(1ms);
        c.cancel();
    });
    Reply r = c.chat("Tell me a long story.", [&](std::string_view) { pieces++; });
    done = true;
    stopper.join();
    EXPECT_EQ(r.failure, Failure::cancelled);
    EXPECT_EQ(r.source, Source::none);
    EXPECT_FALSE(r.slot_reset);
    EXPECT_LT(pieces.load(), 200);
}

TEST_F(ClientTest, ServerKilledMidStream) {
    ServerProcess doomed;
    ASSERT_TRUE(doomed.start(model_));
    ClientOptions o = opts();
    o.primary.url = url_of(doomed.port);
    o.max_tokens = 256;
    o.extra_json = R"({"ignore_eos": true})";
    o.canned_reply = "The assistant is restarting.";
    o.history_token_budget = 0;
    Client c(o);
    int pieces = 0;
    Reply r = c.chat("Tell me a long story.", [&](std::string_view) {
        if (++pieces == 2) doomed.kill_now();
    });
    EXPECT_EQ(r.failure, Failure::broken_stream) << r.error;
    EXPECT_FALSE(r.partial_text.empty());
    EXPECT_FALSE(r.slot_reset);  // nobody there to reset
    EXPECT_NE(r.slot_reset_error.find("cannot connect"), std::string::npos) << r.slot_reset_error;
    EXPECT_EQ(r.source, Source::canned_reply);
    EXPECT_EQ(r.text, o.canned_reply);
}

}  // namespace
