// MCP clients against real child processes: our fixture server (tests/data/mcp, Python) in
// its modes, and llama.cpp's own fixture servers when the llama-server suite is downloaded.
// Listing, calls, concurrent calls, timeouts, cancel, crash and respawn, notifications and
// junk mid-call, bad commands, oversized lines, empty lists, shutdown with a grandchild
// holding the pipes, and no fd or zombie left behind.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "agent/mcp.h"
#include "test_paths.h"

using namespace edgellm::agent;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

fs::path fixture_script() {
    // (absolute: some cases give the server another cwd)
    return fs::absolute(fs::path(__FILE__).parent_path().parent_path() / "data" / "mcp" /
                        "mcp_fixture.py");
}

std::string find_python() {
    const char* path = std::getenv("PATH");
    std::string p = path ? path : "";
    size_t start = 0;
    while (start <= p.size()) {
        size_t end = p.find(':', start);
        if (end == std::string::npos) end = p.size();
        fs::path candidate = fs::path(p.substr(start, end - start)) / "python3";
        if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
        start = end + 1;
    }
    return "";
}

#define NEED_PYTHON()                                                    \
    do {                                                                 \
        if (find_python().empty()) GTEST_SKIP() << "no python3 in PATH"; \
        ASSERT_TRUE(fs::exists(fixture_script())) << fixture_script();   \
    } while (0)

McpServerConfig fixture(const std::string& name, std::vector<std::string> flags = {}) {
    McpServerConfig c;
    c.name = name;
    c.command = find_python();
    c.args = {fixture_script().string()};
    c.args.insert(c.args.end(), flags.begin(), flags.end());
    return c;
}

// Collects the log lines.
struct Log {
    std::mutex mu;
    std::vector<std::string> lines;
    bool has(const std::string& part) {
        std::lock_guard<std::mutex> lock(mu);
        for (auto& l : lines)
            if (l.find(part) != std::string::npos) return true;
        return false;
    }
    std::string all() {
        std::lock_guard<std::mutex> lock(mu);
        std::string s;
        for (auto& l : lines) s += l + "\n";
        return s;
    }
};

McpOptions options(Log& log) {
    McpOptions o;
    o.log = [&log](const std::string& l) {
        std::lock_guard<std::mutex> lock(log.mu);
        log.lines.push_back(l);
    };
    return o;
}

json call(McpClients& m, const std::string& tool, const json& params = json::object(),
          const std::atomic<bool>* cancel = nullptr) {
    json r;
    auto err = m.call(tool, params, &r, cancel);
    EXPECT_FALSE(err) << tool << ": " << (err ? err->message : "");
    return r;
}

std::string text_of(const json& r) {
    EXPECT_TRUE(r.contains("plain_text_response")) << r.dump();
    return r.value("plain_text_response", std::string());
}

double seconds_since(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
}

double slow() {
    return edgellm::test::emulation_slowdown();
}

int count_open_fds() {
    int n = 0;
    for (auto& e : fs::directory_iterator("/proc/self/fd")) (void)e, ++n;
    return n;
}

// True when pid no longer runs (gone, or a zombie whose new parent has not reaped it yet).
bool process_gone(pid_t pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    if (!f) return true;
    std::string line;
    std::getline(f, line);
    auto close = line.rfind(')');
    return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z';
}

bool wait_until(const std::function<bool()>& cond, double seconds) {
    auto end = Clock::now() + std::chrono::duration<double>(seconds);
    while (Clock::now() < end) {
        if (cond()) return true;
        std::this_thread::sleep_for(20ms);
    }
    return cond();
}

}  // namespace

// ---- configuration ---------------------------------------------------------------------------

TEST(McpConfig, ParsesTheMcpServersFormat) {
    std::vector<std::string> warnings;
    auto r = parse_mcp_config(R"({"mcpServers": {
        "echo": {"command": "python3", "args": ["a.py", "--x"], "env": {"K": "V"},
                 "cwd": "/tmp", "timeout_ms": 500},
        "plain": {"command": "/bin/true"},
        "remote": {"url": "http://localhost:1234/mcp"},
        "nocmd": {"args": []}}})",
                              &warnings);
    ASSERT_TRUE(r) << r.error();
    ASSERT_EQ(r->size(), 2u);
    const McpServerConfig& e = (*r)[0];
    EXPECT_EQ(e.name, "echo");
    EXPECT_EQ(e.command, "python3");
    EXPECT_EQ(e.args, (std::vector<std::string>{"a.py", "--x"}));
    EXPECT_EQ(e.env.at("K"), "V");
    EXPECT_EQ(e.cwd, "/tmp");
    EXPECT_EQ(e.timeout_ms, 500);
    EXPECT_EQ((*r)[1].name, "plain");
    EXPECT_EQ((*r)[1].timeout_ms, 30000);  // llama-server's default
    EXPECT_TRUE((*r)[1].args.empty());
    // The entries without a command are skipped, each with a warning.
    ASSERT_EQ(warnings.size(), 2u);
    EXPECT_NE(warnings[0].find("'remote'"), std::string::npos);
    EXPECT_NE(warnings[0].find("only stdio"), std::string::npos);
    EXPECT_NE(warnings[1].find("'nocmd'"), std::string::npos);
}

TEST(McpConfig, NoServersIsAWarningNotAnError) {
    for (const char* text : {"{}", R"({"mcpServers": []})", R"({"mcpServers": {}})", "[]"}) {
        std::vector<std::string> warnings;
        auto r = parse_mcp_config(text, &warnings);
        ASSERT_TRUE(r) << text << ": " << r.error();
        EXPECT_TRUE(r->empty());
        EXPECT_FALSE(warnings.empty()) << text;
    }
}

TEST(McpConfig, ErrorsNameTheProblem) {
    auto bad_json = parse_mcp_config("not valid json");
    ASSERT_FALSE(bad_json);
    EXPECT_NE(bad_json.error().find("failed to parse MCP config JSON"), std::string::npos);

    struct Case {
        const char* text;
        const char* expect;
    } cases[] = {
        {R"({"mcpServers": {"a": "python3"}})", "mcpServers.a: expected an object, found string"},
        {R"({"mcpServers": {"a": {"command": 3}}})", "mcpServers.a.command: expected a string"},
        {R"({"mcpServers": {"a": {"command": "x", "args": "y"}}})",
         "mcpServers.a.args: expected an array"},
        {R"({"mcpServers": {"a": {"command": "x", "args": ["y", 2]}}})",
         "mcpServers.a.args[1]: expected a string, found number"},
        {R"({"mcpServers": {"a": {"command": "x", "env": {"PORT": 8080}}}})",
         "mcpServers.a.env.PORT: expected a string"},
        {R"({"mcpServers": {"a": {"command": "x", "timeout_ms": "5"}}})",
         "mcpServers.a.timeout_ms: expected a number"},
        {R"({"mcpServers": {"a": {"command": "x", "timeout_ms": 0}}})",
         "mcpServers.a.timeout_ms: must be between"},
    };
    for (const auto& c : cases) {
        auto r = parse_mcp_config(c.text);
        ASSERT_FALSE(r) << c.text;
        EXPECT_NE(r.error().find(c.expect), std::string::npos) << r.error();
    }
}

TEST(McpConfig, LoadsTheFileThenTheInlineJsonAndSkipsTakenNames) {
    auto missing = load_mcp_config("/nonexistent/path.json", "");
    ASSERT_FALSE(missing);
    EXPECT_NE(missing.error().find("failed to open MCP config file: /nonexistent/path.json"),
              std::string::npos)
        << missing.error();

    fs::path path = fs::temp_directory_path() / ("test_mcp_" + std::to_string(getpid()) + ".json");
    {
        std::ofstream f(path);
        f << R"({"mcpServers": {"a": {"command": "one"}, "b": {"command": "two"}}})";
    }
    std::vector<std::string> warnings;
    auto r = load_mcp_config(
        path, R"({"mcpServers": {"b": {"command": "three"}, "c": {"command": "four"}}})",
        &warnings);
    ASSERT_TRUE(r) << r.error();
    ASSERT_EQ(r->size(), 3u);
    EXPECT_EQ((*r)[1].command, "two");  // the file's b; the inline one is skipped
    EXPECT_EQ((*r)[2].name, "c");
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_NE(warnings[0].find("duplicate server name 'b'"), std::string::npos);

    {
        std::ofstream f(path);
        f << "{ broken";
    }
    auto broken = load_mcp_config(path, "");
    ASSERT_FALSE(broken);
    EXPECT_NE(broken.error().find("failed to parse MCP config JSON"), std::string::npos);
    EXPECT_NE(broken.error().find(path.string()), std::string::npos);
    fs::remove(path);
}

// ---- listing and calling ---------------------------------------------------------------------

TEST(McpClients, ListsToolsAsLlamaServerDoes) {
    NEED_PYTHON();
    Log log;
    McpClients m({fixture("echo"), fixture("echo2")}, options(log));
    json tools = m.list();
    ASSERT_TRUE(tools.is_array());
    ASSERT_EQ(tools.size(), 24u) << tools.dump();  // 12 tools from each server
    EXPECT_EQ(tools[0], json::parse(R"({
        "display_name": "echo_echo", "tool": "echo_echo", "type": "mcp",
        "permissions": {"write": true}, "uses_cwd": false,
        "definition": {"type": "function", "function": {
            "name": "echo_echo", "description": "Echo back the message",
            "parameters": {"type": "object", "properties": {"message": {"type": "string"}}}}}})"));
    EXPECT_EQ(tools[1]["tool"], "echo_add");
    EXPECT_EQ(tools[12]["tool"], "echo2_echo");
    EXPECT_TRUE(m.has("echo_add"));
    EXPECT_TRUE(m.has("echo2_pid"));
    EXPECT_FALSE(m.has("echo"));
    EXPECT_FALSE(m.has("echo_nope"));
    EXPECT_FALSE(m.empty());
    auto st = m.servers();
    ASSERT_EQ(st.size(), 2u);
    EXPECT_TRUE(st[0].running);
    EXPECT_GT(st[0].pid, 0);
    EXPECT_EQ(st[0].n_tools, 12u);
    EXPECT_TRUE(st[0].error.empty());
    EXPECT_TRUE(log.has("mcp echo: ready with 12 tools")) << log.all();
}

TEST(McpClients, FollowsToolListPages) {
    NEED_PYTHON();
    Log log;
    McpClients m({fixture("p", {"--paged"})}, options(log));
    EXPECT_EQ(m.list().size(), 12u);
    EXPECT_TRUE(m.has("p_grandchild"));  // on the last page
}

TEST(McpClients, CallsReturnWhatLlamaServerReturns) {
    NEED_PYTHON();
    Log log;
    McpClients m({fixture("echo")}, options(log));
    EXPECT_EQ(call(m, "echo_echo", {{"message", "hello world"}}),
              json({{"plain_text_response", "echo: hello world"}}));
    EXPECT_EQ(text_of(call(m, "echo_add", {{"a", 3}, {"b", 5}})), "8");
    EXPECT_EQ(text_of(call(m, "echo_echo", nullptr)), "echo: ");  // null params: {}
    // An isError result and a JSON-RPC error: {"error": ...}, status 200 (no ApiError).
    EXPECT_EQ(call(m, "echo_fail"), json({{"error", "it failed"}}));
    EXPECT_EQ(call(m, "echo_rpc_error"), json({{"error", "transient error"}}));

    json r = {{"untouched", true}};
    auto unknown = m.call("echo_nope", json::object(), &r, nullptr);
    ASSERT_TRUE(unknown);
    EXPECT_EQ(unknown->status, 404);
    EXPECT_EQ(unknown->message, "unknown tool \"echo_nope\"");
    auto not_object = m.call("echo_echo", json::array({1}), &r, nullptr);
    ASSERT_TRUE(not_object);
    EXPECT_EQ(not_object->status, 400);
    EXPECT_EQ(r, json({{"untouched", true}}));

    // Rapid succession: every id answered in turn.
    for (int i = 0; i < 20; ++i)
        EXPECT_EQ(text_of(call(m, "echo_echo", {{"message", "msg" + std::to_string(i)}})),
                  "echo: msg" + std::to_string(i));
}

TEST(McpClients, PassesEnvAndCwd) {
    NEED_PYTHON();
    Log log;
    auto c = fixture("e");
    c.env["MCP_TEST_VAR"] = "v1";
    c.cwd = "/";
    McpClients m({c}, options(log));
    EXPECT_EQ(text_of(call(m, "e_env", {{"name", "MCP_TEST_VAR"}})), "v1|/");
}

TEST(McpClients, ConcurrentCallsToOneServerEachGetTheirOwnAnswer) {
    NEED_PYTHON();
    Log log;
    McpClients m({fixture("echo")}, options(log));
    const auto start = Clock::now();
    std::vector<std::thread> threads;
    std::vector<std::string> answers(16);
    for (int i = 0; i < 16; ++i) {
        threads.emplace_back([&, i] {
            if (i < 4) {
                answers[i] = text_of(call(m, "echo_sleep", {{"seconds", 1}}));
            } else {
                answers[i] = text_of(call(m, "echo_echo", {{"message", "m" + std::to_string(i)}}));
            }
        });
    }
    for (auto& t : threads) t.join();
    for (int i = 0; i < 4; ++i) EXPECT_EQ(answers[i], "slept 1");
    for (int i = 4; i < 16; ++i) EXPECT_EQ(answers[i], "echo: m" + std::to_string(i));
    // The four sleeps overlapped (one at a time would take 4 s).
    EXPECT_LT(seconds_since(start), 3.0 * slow());

    // A quick call is answered while a slow one is still running: out of order, by id.
    std::atomic<bool> slow_done{false};
    std::thread slow_call([&] {
        EXPECT_EQ(text_of(call(m, "echo_sleep", {{"seconds", 0.8}})), "slept 0.8");
        slow_done = true;
    });
    std::this_thread::sleep_for(100ms);
    EXPECT_EQ(text_of(call(m, "echo_echo", {{"message", "fast"}})), "echo: fast");
    EXPECT_FALSE(slow_done.load());
    slow_call.join();
}

TEST(McpClients, ASlowCallTimesOutAndItsLateAnswerIsDropped) {
    NEED_PYTHON();
    Log log;
    auto c = fixture("slow");
    c.timeout_ms = 300;
    McpClients m({c}, options(log));
    auto start = Clock::now();
    EXPECT_EQ(call(m, "slow_sleep", {{"seconds", 0.7}}),
              json({{"error", "request timed out after 300 ms"}}));
    double took = seconds_since(start);
    EXPECT_GE(took, 0.25);
    EXPECT_LT(took, 1.0 * slow());
    // The server still works, and its answer to the abandoned request is dropped.
    EXPECT_EQ(text_of(call(m, "slow_echo", {{"message", "x"}})), "echo: x");
    EXPECT_TRUE(wait_until([&] { return log.has("dropped a response to request"); }, 2.0 * slow()))
        << log.all();
    EXPECT_EQ(text_of(call(m, "slow_echo", {{"message", "y"}})), "echo: y");
}

TEST(McpClients, ACallIsCancelledByItsFlag) {
    NEED_PYTHON();
    Log log;
    McpClients m({fixture("s")}, options(log));
    std::atomic<bool> cancel{false};
    std::thread raiser([&] {
        std::this_thread::sleep_for(200ms);
        cancel = true;
    });
    auto start = Clock::now();
    EXPECT_EQ(call(m, "s_sleep", {{"seconds", 5}}, &cancel), json({{"error", "cancelled"}}));
    EXPECT_LT(seconds_since(start), 1.0 * slow());
    raiser.join();
    std::atomic<bool> no{false};
    EXPECT_EQ(text_of(call(m, "s_echo", {{"message", "after"}}, &no)), "echo: after");
}

TEST(McpClients, ACrashedServerIsStartedAgainForTheNextCall) {
    NEED_PYTHON();
    Log log;
    McpClients m({fixture("crash")}, options(log));
    const std::string pid1 = text_of(call(m, "crash_pid"));
    // It answers, then exits.
    EXPECT_EQ(text_of(call(m, "crash_crash")), "crashing...");
    ASSERT_TRUE(wait_until([&] { return !m.servers()[0].running; }, 2.0 * slow()));
    const std::string pid2 = text_of(call(m, "crash_pid"));
    EXPECT_NE(pid1, pid2);
    EXPECT_TRUE(m.servers()[0].running);
    EXPECT_TRUE(log.has("starting it again")) << log.all();

    // It exits without answering: the call fails at once (not after the timeout) and says
    // how, with its last stderr; the next call gets a fresh server.
    auto start = Clock::now();
    json r = call(m, "crash_die");
    ASSERT_TRUE(r.contains("error")) << r.dump();
    const std::string e = r["error"];
    EXPECT_NE(e.find("exited with status 3"), std::string::npos) << e;
    EXPECT_NE(e.find("dying on purpose"), std::string::npos) << e;
    EXPECT_LT(seconds_since(start), 2.0 * slow());
    const std::string pid3 = text_of(call(m, "crash_pid"));
    EXPECT_NE(pid3, pid2);
    // The dead ones were reaped (they are no children of ours any more).
    for (const std::string& p : {pid1, pid2}) {
        int status;
        EXPECT_EQ(::waitpid(std::stoi(p), &status, WNOHANG), -1) << p;
    }
}

TEST(McpClients, NotificationsJunkAndPingsDuringACallAreHandled) {
    NEED_PYTHON();
    Log log;
    McpClients m({fixture("noisy", {"--noisy"})}, options(log));
    EXPECT_EQ(text_of(call(m, "noisy_echo", {{"message", "hi"}})), "echo: hi");
    // Its ping was answered (before the next request reached it).
    EXPECT_EQ(text_of(call(m, "noisy_pinged")), "yes");
    EXPECT_TRUE(log.has("ignored a line that is not a JSON-RPC message: THIS IS NOT JSON"))
        << log.all();
    EXPECT_TRUE(log.has("dropped a response to request 99999")) << log.all();
    // Concurrent calls through the noise.
    std::vector<std::thread> threads;
    for (int i = 0; i < 8; ++i)
        threads.emplace_back([&, i] {
            EXPECT_EQ(text_of(call(m, "noisy_echo", {{"message", std::to_string(i)}})),
                      "echo: " + std::to_string(i));
        });
    for (auto& t : threads) t.join();
}

TEST(McpClients, ABadCommandIsLeftOutAndTheOthersWork) {
    NEED_PYTHON();
    Log log;
    McpServerConfig missing{"nonexistent", "this_executable_does_not_exist_12345", {}, {}, "",
                            30000};
    McpServerConfig bad_path{"badpath", "/nonexistent/bin/server", {}, {}, "", 30000};
    auto bad_cwd = fixture("badcwd");
    bad_cwd.cwd = "/nonexistent/dir";
    McpServerConfig not_mcp{"notmcp", "/bin/true", {}, {}, "", 30000};  // exits at once
    auto start = Clock::now();
    McpClients m({missing, fixture("good"), bad_path, bad_cwd, not_mcp}, options(log));
    EXPECT_LT(seconds_since(start), 3.0 * slow());
    json tools = m.list();
    ASSERT_EQ(tools.size(), 12u);
    for (const auto& t : tools) EXPECT_EQ(t["tool"].get<std::string>().rfind("good_", 0), 0u);
    EXPECT_EQ(text_of(call(m, "good_echo", {{"message", "still here"}})), "echo: still here");

    auto st = m.servers();
    ASSERT_EQ(st.size(), 5u);
    EXPECT_NE(st[0].error.find("command not found in PATH"), std::string::npos) << st[0].error;
    EXPECT_NE(st[2].error.find("cannot run '/nonexistent/bin/server'"), std::string::npos)
        << st[2].error;
    EXPECT_NE(st[3].error.find("/nonexistent/dir"), std::string::npos) << st[3].error;
    EXPECT_FALSE(st[4].error.empty());
    for (int i : {0, 2, 3, 4}) {
        EXPECT_FALSE(st[i].running);
        EXPECT_EQ(st[i].n_tools, 0u);
    }
    EXPECT_TRUE(log.has("mcp nonexistent: left out: command not found")) << log.all();
    EXPECT_TRUE(log.has("mcp notmcp: left out:")) << log.all();
}

TEST(McpClients, AServerThatNeverInitializesIsLeftOutInTime) {
    NEED_PYTHON();
    Log log;
    McpOptions o = options(log);
    o.start_timeout_ms = 1000;  // (the healthy one has to start within it too)
    auto start = Clock::now();
    McpClients m({fixture("mute", {"--no-init"}), fixture("ok")}, o);
    EXPECT_GE(seconds_since(start), 0.9);
    EXPECT_LT(seconds_since(start), 3.0 * slow());
    EXPECT_EQ(m.list().size(), 12u);
    EXPECT_NE(m.servers()[0].error.find("no answer to initialize"), std::string::npos);
}

TEST(McpClients, AnEmptyToolListGivesNoTools) {
    NEED_PYTHON();
    Log log;
    McpClients m({fixture("empty", {"--no-tools"})}, options(log));
    EXPECT_EQ(m.list(), json::array());
    EXPECT_TRUE(m.empty());
    EXPECT_TRUE(m.servers()[0].running);
    EXPECT_TRUE(log.has("ready with 0 tools")) << log.all();
}

TEST(McpClients, AnOversizedLineFailsItsCallAndTheStreamRecovers) {
    NEED_PYTHON();
    Log log;
    McpOptions o = options(log);
    o.max_line_bytes = 64 * 1024;
    McpClients m({fixture("b")}, o);
    EXPECT_EQ(text_of(call(m, "b_big", {{"n", 1000}})), std::string(1000, 'x'));
    auto start = Clock::now();
    EXPECT_EQ(call(m, "b_big", {{"n", 300000}}),
              json({{"error", "reply larger than 65536 bytes"}}));
    EXPECT_LT(seconds_since(start), 2.0 * slow());  // not the 30 s timeout
    EXPECT_EQ(text_of(call(m, "b_echo", {{"message", "next"}})), "echo: next");
    EXPECT_TRUE(log.has("dropped a line longer than 65536 bytes")) << log.all();
}

TEST(McpClients, ChildStderrGoesToTheLogOrNowhere) {
    NEED_PYTHON();
    {
        Log log;
        McpClients m({fixture("loud", {"--stderr"})}, options(log));
        EXPECT_TRUE(wait_until([&] { return log.has("mcp loud: stderr: fixture starting"); }, 2.0))
            << log.all();
    }
    {
        Log log;
        McpOptions o = options(log);
        o.log_child_stderr = false;
        McpClients m({fixture("quiet", {"--stderr"})}, o);
        EXPECT_EQ(text_of(call(m, "quiet_echo", {{"message", "a"}})), "echo: a");
        EXPECT_FALSE(log.has("stderr")) << log.all();
    }
}

// ---- shutdown --------------------------------------------------------------------------------

TEST(McpClients, ShutdownIsPromptWithAGrandchildHoldingThePipes) {
    NEED_PYTHON();
    Log log;
    auto m = std::make_unique<McpClients>(
        std::vector<McpServerConfig>{fixture("gc", {"--grandchild"}),
                                     fixture("gs", {"--grandchild-setsid"})},
        options(log));
    EXPECT_EQ(text_of(call(*m, "gc_echo", {{"message", "hello"}})), "echo: hello");
    EXPECT_EQ(text_of(call(*m, "gs_echo", {{"message", "hello"}})), "echo: hello");
    const pid_t in_group = std::stoi(text_of(call(*m, "gc_grandchild")));
    const pid_t escaped = std::stoi(text_of(call(*m, "gs_grandchild")));
    const pid_t server = m->servers()[0].pid;
    auto start = Clock::now();
    m.reset();
    EXPECT_LT(seconds_since(start), 3.0 * slow());
    int status;
    EXPECT_EQ(::waitpid(server, &status, WNOHANG), -1);  // reaped
    // The grandchild in the server's process group went with it.
    EXPECT_TRUE(wait_until([&] { return process_gone(in_group); }, 2.0)) << in_group;
    // The one that left the group still runs (and holds the pipes); ours are closed anyway.
    EXPECT_FALSE(process_gone(escaped));
    ::kill(escaped, SIGKILL);
}

TEST(McpClients, ShutdownDuringASlowCallCancelsIt) {
    NEED_PYTHON();
    Log log;
    auto m =
        std::make_unique<McpClients>(std::vector<McpServerConfig>{fixture("slow")}, options(log));
    json r;
    McpClients* clients = m.get();
    std::thread caller([&] { clients->call("slow_sleep", {{"seconds", 10}}, &r, nullptr); });
    std::this_thread::sleep_for(300ms);  // (the call has begun: it waits for the server)
    auto start = Clock::now();
    m.reset();  // waits for the call, which returns at once
    EXPECT_LT(seconds_since(start), 3.0 * slow());
    caller.join();
    EXPECT_EQ(r, json({{"error", "cancelled"}}));
}

TEST(McpClients, AfterShutdownCallsAreRefused) {
    NEED_PYTHON();
    Log log;
    McpClients m({fixture("x")}, options(log));
    m.shutdown();
    EXPECT_EQ(call(m, "x_echo", {{"message", "late"}}), json({{"error", "cancelled"}}));
}

TEST(McpClients, LeavesNoDescriptorOrChildBehind) {
    NEED_PYTHON();
    const int before = count_open_fds();
    std::vector<pid_t> pids;
    {
        Log log;
        McpClients m({fixture("a"), fixture("b", {"--stderr"})}, options(log));
        EXPECT_EQ(text_of(call(m, "a_echo", {{"message", "1"}})), "echo: 1");
        call(m, "b_die");
        EXPECT_EQ(text_of(call(m, "b_echo", {{"message", "2"}})), "echo: 2");
        for (auto& s : m.servers()) pids.push_back(s.pid);
    }
    EXPECT_EQ(count_open_fds(), before);
    for (pid_t p : pids) {
        int status;
        EXPECT_EQ(::waitpid(p, &status, WNOHANG), -1) << p;
        EXPECT_EQ(errno, ECHILD);
    }
}

// ---- llama.cpp's fixture servers --------------------------------------------------------------

TEST(McpClients, LlamaCppFixtureServers) {
    NEED_PYTHON();
    fs::path dir;
    const char* home = std::getenv("HOME");
    fs::path suite = fs::path(home ? home : "/root") / ".cache" / "edgellm" / "llama-server-suite";
    std::error_code ec;
    if (fs::is_directory(suite, ec)) {
        for (auto& e : fs::directory_iterator(suite, ec)) {
            fs::path d = e.path() / "vendor/llama.cpp/tools/server/tests/fixtures";
            if (fs::exists(d / "mcp_echo_server.py")) dir = d;
        }
    }
    if (dir.empty()) GTEST_SKIP() << "llama.cpp's MCP fixtures are not under " << suite;
    auto server = [&](const std::string& name, const std::string& script,
                      std::vector<std::string> extra = {}) {
        McpServerConfig c{name, find_python(), {(dir / script).string()}, {}, "", 30000};
        c.args.insert(c.args.end(), extra.begin(), extra.end());
        return c;
    };
    Log log;
    auto slow_cfg = server("slow", "mcp_slow_server.py", {"--delay", "5"});
    slow_cfg.timeout_ms = 500;
    auto m = std::make_unique<McpClients>(
        std::vector<McpServerConfig>{
            server("echo", "mcp_echo_server.py"), server("notifying", "mcp_malformed_server.py"),
            server("burst", "mcp_burst_server.py"), server("crash", "mcp_crash_server.py"),
            server("gc", "mcp_grandchild_server.py"), slow_cfg},
        options(log));
    for (const char* t : {"echo_echo", "echo_add", "echo_fail_once", "notifying_echo", "burst_echo",
                          "crash_echo", "crash_crash", "gc_echo", "slow_sleep"})
        EXPECT_TRUE(m->has(t)) << t;
    for (const char* s : {"echo", "notifying", "burst", "crash", "gc"})
        EXPECT_EQ(text_of(call(*m, std::string(s) + "_echo", {{"message", "hi"}})), "echo: hi")
            << s;
    EXPECT_EQ(text_of(call(*m, "echo_add", {{"a", 3}, {"b", 5}})), "8");
    EXPECT_EQ(call(*m, "echo_fail_once"), json({{"error", "transient error"}}));
    EXPECT_EQ(text_of(call(*m, "echo_fail_once")), "ok");
    EXPECT_EQ(call(*m, "slow_sleep", {{"seconds", 5}}),
              json({{"error", "request timed out after 500 ms"}}));
    EXPECT_EQ(text_of(call(*m, "crash_crash")), "crashing...");
    ASSERT_TRUE(wait_until([&] { return !m->servers()[3].running; }, 2.0 * slow()));
    EXPECT_EQ(text_of(call(*m, "crash_echo", {{"message", "hi2"}})), "echo: hi2");
    auto start = Clock::now();
    m.reset();
    EXPECT_LT(seconds_since(start), 3.0 * slow());
}
