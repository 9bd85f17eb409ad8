// edgellm accept: seed 000's acceptance table, measured. Starts `edgellm serve` with the
// given flags (so start-up is timed) or talks to a running server (--url), sends the
// warm-up request of deploy/warmup.sh, then a car-assistant conversation through the client
// SDK (include/edgellm/client.h) as an application would, and prints each row's target,
// measured value and pass / fail (and JSON with --json). Exit 0 only when every measured
// row passes; 1 when one fails or the server cannot be reached; 2 for bad usage.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "edgellm/client.h"

extern char** environ;

namespace edgellm::cli {

std::filesystem::path models_dir();

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace ec = edgellm::client;

double ms_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// seed 000, Step 5: the system prompt and the first utterance; then a conversation that
// stays on the topic (so the prefix cache carries it, as in a car).
const char* const kSystem = "你是车载助手，回答简短口语化。";
const char* const kTurns[] = {
    "今晚吃什么好",
    "有没有清淡一点的？",
    "附近有什么好的粤菜馆？",
    "那家店一般几点关门？",
    "帮我想一句给朋友的生日祝福。",
    "再短一点。",
    "谢谢，顺便说说明天的天气适合出门吗？",
    "好的，就这样吧。",
};
static_assert(AcceptSettings::kMaxTurns == (int)(sizeof kTurns / sizeof kTurns[0]),
              "--turns goes up to the turns there are");

struct Row {
    std::string key, name;
    std::string op;  // ">=", "<", "<="
    double target = 0;
    std::string unit;
    std::optional<double> value;
    std::string detail;   // how it was measured, or why not
    bool pass() const {
        if (!value) return true;
        if (op == ">=") return *value >= target;
        if (op == "<") return *value < target;
        return *value <= target;
    }
    std::string result() const { return !value ? "n/a" : pass() ? "pass" : "FAIL"; }
};

std::string fmt(double v, const std::string& unit) {
    char b[64];
    if (unit == "ms" || unit == "MiB") std::snprintf(b, sizeof b, "%.0f %s", v, unit.c_str());
    else if (unit.empty()) std::snprintf(b, sizeof b, "%.2f", v);
    else std::snprintf(b, sizeof b, "%.1f %s", v, unit.c_str());
    return b;
}

// The process listening on a local TCP port (from /proc/net/tcp{,6} and the processes'
// sockets), or -1.
pid_t pid_listening_on(int port) {
    std::set<std::string> inodes;
    for (const char* f : {"/proc/net/tcp", "/proc/net/tcp6"}) {
        std::ifstream in(f);
        std::string line;
        std::getline(in, line);
        while (std::getline(in, line)) {
            std::istringstream ls(line);
            std::string sl, local, remote, st, q, tr, retr, uid, timeout, inode;
            ls >> sl >> local >> remote >> st >> q >> tr >> retr >> uid >> timeout >> inode;
            const size_t colon = local.rfind(':');
            if (colon == std::string::npos || st != "0A") continue;  // 0A: LISTEN
            if (std::stoi(local.substr(colon + 1), nullptr, 16) == port) inodes.insert(inode);
        }
    }
    if (inodes.empty()) return -1;
    std::error_code ec;
    for (const auto& p : std::filesystem::directory_iterator("/proc", ec)) {
        const std::string name = p.path().filename();
        if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
        std::error_code ec2;
        for (const auto& fd : std::filesystem::directory_iterator(p.path() / "fd", ec2)) {
            std::error_code ec3;
            const std::string target = std::filesystem::read_symlink(fd.path(), ec3).string();
            if (target.rfind("socket:[", 0) == 0 &&
                inodes.count(target.substr(8, target.size() - 9)))
                return (pid_t)std::stoi(name);
        }
    }
    return -1;
}

// VmRSS / VmHWM of a process in MiB.
bool process_memory(pid_t pid, double* rss, double* peak) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    bool got = false;
    while (std::getline(in, line)) {
        if (line.rfind("VmRSS:", 0) == 0) *rss = std::atof(line.c_str() + 6) / 1024.0, got = true;
        if (line.rfind("VmHWM:", 0) == 0) *peak = std::atof(line.c_str() + 6) / 1024.0;
    }
    return got;
}

// The memory use and limit of the process's cgroup: cgroup v2 (memory.current /
// memory.max), else v1's memory controller (memory.usage_in_bytes / limit_in_bytes); false
// with why when it has none of its own (the root cgroup).
bool cgroup_memory(pid_t pid, double* current, std::string* limit, std::string* path, std::string* why) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/cgroup");
    std::string line, v2, v1;
    while (std::getline(in, line)) {
        if (line.rfind("0::", 0) == 0) v2 = line.substr(3);
        const size_t m = line.find(":memory:");
        if (m != std::string::npos) v1 = line.substr(m + 8);
    }
    auto read_number = [](const std::string& file, long long* out) {
        std::ifstream f(file);
        return (bool)(f >> *out);
    };
    constexpr double kMiB = 1024.0 * 1024.0;
    // Only a cgroup of the server's own says something about it (a service unit's): one
    // shared with other processes (a login session, a sandbox) counts their memory too.
    auto own = [&](const std::string& dir) {
        std::ifstream procs(dir + "/cgroup.procs");
        int others = 0;
        for (long p; procs >> p;) others += p != pid;
        if (others == 0) return true;
        *why = "its cgroup " + dir + " holds " + std::to_string(others) +
               " other processes too (not the server's own: run it as a service)";
        return false;
    };
    if (!v2.empty() && v2 != "/") {
        const std::string dir = "/sys/fs/cgroup" + v2;
        long long bytes = -1;
        if (!own(dir)) return false;
        if (read_number(dir + "/memory.current", &bytes)) {
            *current = (double)bytes / kMiB;
            std::ifstream mx(dir + "/memory.max");
            std::string m;
            *limit = (mx >> m) ? (m == "max" ? "no limit" : fmt(std::atof(m.c_str()) / kMiB, "MiB")) : "?";
            *path = "cgroup " + v2 + ": memory.current";
            return true;
        }
    }
    if (!v1.empty() && v1 != "/") {
        const std::string dir = "/sys/fs/cgroup/memory" + v1;
        long long bytes = -1, lim = -1;
        if (!own(dir)) return false;
        if (read_number(dir + "/memory.usage_in_bytes", &bytes)) {
            *current = (double)bytes / kMiB;
            // (v1 says "no limit" with a number near 2^63)
            *limit = read_number(dir + "/memory.limit_in_bytes", &lim) && lim < (1LL << 60)
                         ? fmt((double)lim / kMiB, "MiB")
                         : "no limit";
            *path = "memory cgroup (v1) " + v1 + ": memory.usage_in_bytes, page cache included";
            return true;
        }
    }
    *why = v2.empty() && v1.empty() ? "no cgroup entry in /proc/" + std::to_string(pid) + "/cgroup"
                                    : "the process is in the root cgroup (no limit of its own; "
                                      "systemd's unit sets one)";
    return false;
}

int free_port() {
    for (int p = 18000 + (int)(getpid() % 2000); p < 65000; p += 7) {
        if (pid_listening_on(p) < 0) {
            ec::HttpResult r = ec::http_request({"http://127.0.0.1:" + std::to_string(p)}, "GET", "/",
                                                "", ec::Timeouts{200, 200, 200});
            if (r.failure == ec::Failure::connect) return p;
        }
    }
    return 8899;
}

}  // namespace

int cmd_accept(const std::vector<std::string>& all_args) {
    // accept's own options, then `--` and serve's.
    std::vector<std::string> args, serve_args;
    bool after = false;
    for (const std::string& a : all_args) {
        if (!after && a == "--") {
            after = true;
            continue;
        }
        (after ? serve_args : args).push_back(a);
    }
    Settings s;
    if (auto rc = parse_options("accept", args, &s)) return *rc;
    if (!s.positional.empty()) return fail("accept", "unexpected argument '" + s.positional[0] + "' (serve's options go after --)", 2);
    if (s.has("--url") && !serve_args.empty())
        return fail("accept", "give --url or serve options after --, not both", 2);
    const AcceptSettings& opt = s.accept;
    const int64_t turns = opt.turns, max_tokens = opt.max_tokens, startup_timeout = opt.startup_timeout,
                  pid_opt = opt.pid;
    const float t_decode = opt.target_decode, t_ttft = opt.target_first_token,
                t_turn = opt.target_first_token_turn, t_accept = opt.target_accept, t_mem = opt.target_memory,
                t_start = opt.target_startup;

    // ---- the server ----
    std::string url = opt.url;
    pid_t child = -1;
    std::optional<double> startup_ms;
    std::string startup_detail = "not measured: the server was already running (--url)";
    std::filesystem::path log_path;
    auto stop_child = [&] {  // SIGTERM, then SIGKILL after 15 s
        if (child <= 0) return;
        ::kill(child, SIGTERM);
        int st;
        const Clock::time_point t0 = Clock::now();
        while (waitpid(child, &st, WNOHANG) == 0) {
            if (ms_since(t0) > 15000) {
                std::fprintf(stderr, "accept: edgellm serve did not stop within 15 s of SIGTERM: killed\n");
                ::kill(child, SIGKILL);
                waitpid(child, &st, 0);
                break;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        child = -1;
    };
    if (url.empty()) {
        if (serve_args.empty()) {  // seed 000's start script, on the default model
            Result<std::string> m = default_model_path();
            if (!m) return fail("accept", m.error(), 1);
            serve_args = {"-m", *m, "--host", "127.0.0.1", "--parallel", "1", "--no-cont-batching",
                          "--threads", "2", "--threads-batch", "2", "--ctx-size", "1024",
                          "--flash-attn", "on", "--cache-type-k", "q8_0", "--cache-type-v", "q8_0",
                          "--mlock", "--temp", "0.7", "--top-p", "0.8", "--repeat-penalty", "1.05",
                          "-n", "256"};
            const auto draft = models_dir() / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";
            if (std::filesystem::exists(draft) && draft.string() != *m)
                serve_args.insert(serve_args.end(), {"-md", draft.string(), "--draft-max", "4",
                                                     "--draft-min", "2", "--draft-p-min", "0.6", "-ngld", "99"});
        }
        std::string host = "127.0.0.1", port;
        for (size_t i = 0; i < serve_args.size(); ++i) {
            const std::string& a = serve_args[i];
            if ((a == "--port") && i + 1 < serve_args.size()) port = serve_args[i + 1];
            if (a.rfind("--port=", 0) == 0) port = a.substr(7);
            if ((a == "--host") && i + 1 < serve_args.size()) host = serve_args[i + 1];
            if (a.rfind("--host=", 0) == 0) host = a.substr(7);
        }
        if (port.empty()) {
            port = std::to_string(free_port());
            serve_args.insert(serve_args.end(), {"--port", port});
        } else if (std::all_of(port.begin(), port.end(), ::isdigit) && port.size() < 6 &&
                   pid_listening_on(std::stoi(port)) > 0) {
            // (else /health could answer from that other server)
            return fail("accept", "port " + port + " is already in use (pid " +
                                      std::to_string(pid_listening_on(std::stoi(port))) +
                                      "): stop that server or measure it with --url", 1);
        }
        if (host == "0.0.0.0" || host.empty()) host = "127.0.0.1";
        if (host == "::") host = "::1";
        url = "http://" + (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + port;
        log_path = std::filesystem::temp_directory_path() / ("edgellm-accept-" + std::to_string(getpid()) + ".log");
        std::vector<std::string> argv_s = {"/proc/self/exe", "serve"};
        argv_s.insert(argv_s.end(), serve_args.begin(), serve_args.end());
        argv_s.insert(argv_s.end(), {"--log-file", log_path.string()});
        std::vector<char*> argv;
        for (auto& a : argv_s) argv.push_back(a.data());
        argv.push_back(nullptr);
        std::string shown;
        for (const auto& a : serve_args) shown += " " + a;
        std::fprintf(stderr, "accept: starting edgellm serve%s\n", shown.c_str());
        const Clock::time_point t0 = Clock::now();
        if (posix_spawn(&child, "/proc/self/exe", nullptr, nullptr, argv.data(), environ) != 0)
            return fail("accept", "cannot start edgellm serve", 1);
        for (;;) {
            ec::HttpResult h = ec::http_request({url}, "GET", "/health", "", ec::Timeouts{200, 1000, 1000});
            if (h.status == 200) break;
            int st;
            if (waitpid(child, &st, WNOHANG) == child) {
                child = -1;
                std::ifstream lf(log_path);
                std::string log((std::istreambuf_iterator<char>(lf)), {});
                std::filesystem::remove(log_path);
                std::fprintf(stderr, "%s", log.c_str());
                return fail("accept", "edgellm serve exited before it was healthy (its log is above)", 1);
            }
            if (ms_since(t0) > (double)startup_timeout * 1000) {
                stop_child();
                std::filesystem::remove(log_path);
                return fail("accept", "edgellm serve was not healthy within " + std::to_string(startup_timeout) + " s", 1);
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        startup_ms = ms_since(t0);
        startup_detail = "process start -> GET /health 200";
    } else {
        ec::HttpResult h = ec::http_request({url}, "GET", "/health", "", ec::Timeouts{2000, 5000, 5000});
        if (h.failure != ec::Failure::none || h.status != 200)
            return fail("accept", url + "/health: " + (h.failure != ec::Failure::none ? h.error : "HTTP " + std::to_string(h.status)), 1);
    }
    struct ChildGuard {
        std::function<void()> f;
        ~ChildGuard() { f(); }
    } guard{[&] {
        stop_child();
        if (!log_path.empty()) std::filesystem::remove(log_path);
    }};

    // ---- warm-up (deploy/warmup.sh: one token through the whole path) ----
    {
        ec::ClientOptions wo;
        wo.primary.url = url;
        wo.max_tokens = 1;
        wo.history_token_budget = 0;
        wo.timeouts = ec::Timeouts{2000, 60000, 120000};
        ec::Client w(wo);
        ec::Reply r = w.complete({{"user", "hi"}});
        if (!r.ok()) return fail("accept", "the warm-up request failed: " + r.error, 1);
    }

    // ---- the conversation, as the car client runs it ----
    ec::ClientOptions co;
    co.primary.url = url;
    co.system_prompt = kSystem;
    co.max_tokens = (int)max_tokens;
    co.timeouts = ec::Timeouts{2000, 60000, 120000};  // measured, not enforced here
    ec::Client client(co);
    struct Turn {
        double ttft = -1, total = 0;  // measured here, from the call
        ec::Reply r;                  // the server's figures
    };
    std::vector<Turn> done;
    for (int i = 0; i < turns; ++i) {
        const Clock::time_point t0 = Clock::now();
        double first = -1;
        ec::Reply r = client.chat(kTurns[i], [&](std::string_view) {
            if (first < 0) first = ms_since(t0);
        });
        if (r.source != ec::Source::llm)
            return fail("accept", "turn " + std::to_string(i + 1) + " failed: " +
                                      ec::failure_name(r.failure) + ": " + r.error, 1);
        Turn t;
        t.ttft = first;
        t.total = ms_since(t0);
        t.r = r;
        std::fprintf(stderr, "accept: turn %d/%d: first token %.0f ms, %d prompt tokens (%d cached), %d tokens at %.1f t/s%s%s\n",
                     i + 1, (int)turns, t.ttft, t.r.prompt_tokens, t.r.cached_tokens, t.r.completion_tokens, t.r.decode_tokens_per_second,
                     t.r.draft_tokens > 0 ? (", draft " + std::to_string(t.r.draft_accepted) + "/" + std::to_string(t.r.draft_tokens)).c_str() : "",
                     t.r.turns_summarized ? (", " + std::to_string(t.r.turns_summarized) + " older turns summarized first").c_str() : "");
        done.push_back(t);
    }

    // ---- the rows ----
    std::vector<Row> rows;
    {
        double n = 0, ms = 0;
        for (const Turn& t : done)
            if (t.r.decode_tokens_per_second > 0 && t.r.completion_tokens > 1) n += t.r.completion_tokens, ms += 1000.0 * t.r.completion_tokens / t.r.decode_tokens_per_second;
        Row r{"decode_tps", "decode speed", ">=", t_decode, "tok/s", std::nullopt, ""};
        bool draft = std::any_of(done.begin(), done.end(), [](const Turn& t) { return t.r.draft_tokens > 0; });
        if (ms > 0) {
            r.value = 1000.0 * n / ms;
            r.detail = std::string("the server's timings over ") + std::to_string(done.size()) + " turns" +
                       (draft ? ", with the draft model" : ", no draft model");
        } else {
            r.detail = "no turn generated more than one token";
        }
        rows.push_back(r);
    }
    {
        Row r{"first_token_cold_ms", "first token, first turn", "<", t_ttft, "ms", done[0].ttft, ""};
        r.detail = "first real request after the warm-up, " + std::to_string(done[0].r.prompt_tokens) + " prompt tokens";
        if (done[0].ttft < 0) r.value.reset(), r.detail = "the first turn streamed no text";
        rows.push_back(r);
    }
    {
        std::vector<double> v;
        for (size_t i = 2; i < done.size(); ++i)
            if (done[i].ttft >= 0) v.push_back(done[i].ttft);
        Row r{"first_token_turn3_ms", "first token, turn 3 on", "<", t_turn, "ms", std::nullopt, ""};
        if (!v.empty()) {
            std::sort(v.begin(), v.end());
            r.value = v[v.size() / 2];
            r.detail = "median of turns 3.." + std::to_string(done.size()) + " (max " + fmt(v.back(), "ms") + ")";
        } else {
            r.detail = "no text streamed from turn 3 on";
        }
        rows.push_back(r);
    }
    {
        long long dn = 0, da = 0;
        for (const Turn& t : done)
            if (t.r.draft_tokens > 0) dn += t.r.draft_tokens, da += t.r.draft_accepted;
        Row r{"draft_accept_rate", "draft accept rate", ">=", t_accept, "", std::nullopt, ""};
        if (dn > 0) {
            r.value = (double)da / (double)dn;
            r.detail = std::to_string(da) + " of " + std::to_string(dn) + " drafted tokens accepted";
            if (dn < 20) r.detail += " (few drafts: a noisy rate; more --turns give more)";
        } else {
            r.detail = "no draft model configured (-md)";
        }
        rows.push_back(r);
    }
    pid_t pid = child > 0 ? child : (pid_t)pid_opt;
    if (pid <= 0 && (url.find("127.0.0.1") != std::string::npos || url.find("localhost") != std::string::npos ||
                     url.find("[::1]") != std::string::npos)) {
        const size_t colon = url.rfind(':');
        pid = pid_listening_on(std::atoi(url.c_str() + colon + 1));
    }
    {
        Row r{"resident_mib", "resident memory (peak)", "<=", t_mem, "MiB", std::nullopt, ""};
        double rss = 0, peak = 0;
        if (pid > 0 && process_memory(pid, &rss, &peak)) {
            r.value = peak;
            r.detail = "VmHWM of pid " + std::to_string(pid) + " after the conversation (VmRSS now " + fmt(rss, "MiB") + ")";
        } else {
            r.detail = "no local process to read (give --pid)";
        }
        rows.push_back(r);
    }
    {
        Row r{"cgroup_mib", "cgroup memory", "<=", t_mem, "MiB", std::nullopt, ""};
        double cur = 0;
        std::string limit, path, why;
        if (pid > 0 && cgroup_memory(pid, &cur, &limit, &path, &why)) {
            r.value = cur;
            r.detail = path + " (limit: " + limit + ")";
        } else {
            r.detail = pid > 0 ? why : "no local process to read (give --pid)";
        }
        rows.push_back(r);
    }
    rows.push_back(Row{"startup_ms", "start-up to healthy", "<", t_start, "ms", startup_ms, startup_detail});

    // ---- output ----
    bool all = true;
    int measured = 0;
    std::printf("edgellm accept: seed 000's acceptance table, %s%s\n\n", url.c_str(),
                child > 0 ? " (started here)" : "");
    std::printf("%-26s %-14s %-12s %-6s %s\n", "row", "target", "measured", "result", "how");
    for (const Row& r : rows) {
        std::string target = r.op + " " + (r.unit.empty() ? fmt(r.target, "") : fmt(r.target, r.unit));
        std::printf("%-26s %-14s %-12s %-6s %s\n", r.name.c_str(), target.c_str(),
                    r.value ? fmt(*r.value, r.unit).c_str() : "-", r.result().c_str(), r.detail.c_str());
        all = all && r.pass();
        measured += r.value.has_value();
    }
    std::printf("\n%s: %d of %zu rows measured, %s\n", all ? "PASS" : "FAIL", measured, rows.size(),
                all ? "every measured row meets its target" : "a row misses its target");
    if (const auto& out = opt.json) {
        json j = {{"url", url}, {"started_here", child > 0}, {"passed", all}};
        for (const Row& r : rows)
            j["rows"].push_back({{"key", r.key}, {"name", r.name}, {"op", r.op}, {"target", r.target},
                                 {"unit", r.unit}, {"value", r.value ? json(*r.value) : json(nullptr)},
                                 {"result", r.result()}, {"detail", r.detail}});
        for (const Turn& t : done)
            j["turns"].push_back({{"first_token_ms", t.ttft}, {"total_ms", t.total}, {"prompt_tokens", t.r.prompt_tokens},
                                  {"cached_tokens", t.r.cached_tokens}, {"completion_tokens", t.r.completion_tokens},
                                  {"decode_tps", t.r.decode_tokens_per_second}, {"draft_n", t.r.draft_tokens}, {"draft_accepted", t.r.draft_accepted},
                                  {"turns_summarized", t.r.turns_summarized}});
        if (!serve_args.empty()) j["serve_args"] = serve_args;
        const std::string text = j.dump(2) + "\n";
        if (*out == "-") {
            std::fputs(text.c_str(), stdout);
        } else {
            const std::string tmp = *out + ".tmp";
            {
                std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
                f << text;
                if (!f) return fail("accept", "cannot write " + tmp, 1);
            }
            std::error_code e;
            std::filesystem::rename(tmp, *out, e);
            if (e) return fail("accept", "cannot write " + *out + ": " + e.message(), 1);
        }
    }
    return all ? 0 : 1;
}

}  // namespace edgellm::cli
