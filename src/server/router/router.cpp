#include "server/router/router.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "edgellm/client.h"
#include "server/http/front.h"
#include "server/http/respond.h"
#include "server/api/webui.h"
#include "sys/strings.h"
#include "sys/subprocess.h"

namespace edgellm::server {

namespace fs = std::filesystem;
// (json: nlohmann::json, from api.h)
using Clock = std::chrono::steady_clock;

namespace {

using sys::lower;
using sys::trim;

// "name.gguf" and "name" are the same model.
std::string bare_id(const std::string& id) { return lower(id).ends_with(".gguf") ? id.substr(0, id.size() - 5) : id; }

bool is_gguf(const fs::path& p) { return lower(p.extension().string()) == ".gguf"; }
bool is_projector(const fs::path& p) { return lower(p.filename().string()).rfind("mmproj", 0) == 0; }

// A split model's later shards ("-00002-of-00003.gguf") are not models of their own.
bool is_later_shard(const std::string& name) {
    static const std::regex shard(R"(-(\d{5})-of-\d{5}\.gguf$)", std::regex::icase);
    std::smatch m;
    return std::regex_search(name, m, shard) && m[1].str() != "00001";
}
std::string without_shard_suffix(const std::string& stem) {
    static const std::regex shard(R"(-00001-of-\d{5}$)");
    return std::regex_replace(stem, shard, "");
}

int64_t now_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch()).count();
}

// Preset keys that are the router's, not serve flags.
bool router_key(const std::string& k) {
    return k == "model" || k == "m" || k == "load-on-startup" || k == "dedup-cache-models" ||
           k == "hf-repo" || k == "hf" || k == "hfr" || k == "hf-file" || k == "hff" ||
           k == "hf-repo-draft" || k == "hfd" || k == "spec-draft-hf" || k == "model-url" || k == "mu";
}

bool truthy(const std::string& v) {
    const std::string l = lower(v);
    return l == "1" || l == "true" || l == "on" || l == "yes";
}
bool falsy(const std::string& v) {
    const std::string l = lower(v);
    return l == "0" || l == "false" || l == "off" || l == "no";
}

// `key = value` as serve flags: "--key value"; a flag that takes no value: "--key" when the
// value is true (1, on, yes), left out when false. Empty: fine; else why not.
std::string preset_flags(const std::vector<std::pair<std::string, std::string>>& keys,
                         const std::function<int(const std::string&)>& kind, std::vector<std::string>* out) {
    for (const auto& [k, v] : keys) {
        if (router_key(k)) continue;
        std::string flag = "--" + k;
        int what = kind ? kind(flag) : -2;
        if (what == -1 && kind && kind("-" + k) != -1) {
            flag = "-" + k;  // (a short name: t, c, ngl)
            what = kind(flag);
        }
        if (what == -1) return "its preset key `" + k + "` is not a serve flag";
        const bool no_value = what == 0 || (what == -2 && (truthy(v) || falsy(v)));
        if (no_value) {
            if (truthy(v)) out->push_back(flag);
            else if (!falsy(v)) return "its preset key `" + k + "` takes no value (true or false), got \"" + v + "\"";
            continue;
        }
        out->push_back(flag);
        out->push_back(v);
    }
    return "";
}

const std::string* find_key(const std::vector<std::pair<std::string, std::string>>& keys, const std::string& k) {
    const std::string* found = nullptr;
    for (const auto& kv : keys)
        if (kv.first == k) found = &kv.second;
    return found;
}


// ---- llama.cpp's (Hugging Face's) model cache, read only -----------------------------------

// Where llama.cpp keeps what `-hf` downloaded: $LLAMA_CACHE, $HF_HUB_CACHE,
// $HUGGINGFACE_HUB_CACHE, $HF_HOME/hub, $XDG_CACHE_HOME/huggingface/hub, ~/.cache/huggingface/hub.
fs::path hf_cache_dir() {
    auto env = [](const char* n) -> std::string {
        const char* v = std::getenv(n);
        return v && *v ? v : "";
    };
    if (auto v = env("LLAMA_CACHE"); !v.empty()) return v;
    if (auto v = env("HF_HUB_CACHE"); !v.empty()) return v;
    if (auto v = env("HUGGINGFACE_HUB_CACHE"); !v.empty()) return v;
    if (auto v = env("HF_HOME"); !v.empty()) return fs::path(v) / "hub";
    if (auto v = env("XDG_CACHE_HOME"); !v.empty()) return fs::path(v) / "huggingface" / "hub";
    return fs::path(env("HOME").empty() ? "/root" : env("HOME")) / ".cache" / "huggingface" / "hub";
}

// "name-Q4_K_M.gguf" -> "Q4_K_M" (upper case); "" when the name has none.
std::string quant_tag(const std::string& file) {
    std::string stem = file;
    if (!lower(stem).ends_with(".gguf")) return "";
    stem.resize(stem.size() - 5);
    static const std::regex split(R"(^(.+)-(\d{5})-of-(\d{5})$)", std::regex::icase);
    static const std::regex tag(R"([-.]([A-Z0-9_]+)$)", std::regex::icase);
    std::smatch m;
    if (std::regex_match(stem, m, split)) stem = m[1].str();
    if (!std::regex_search(stem, m, tag)) return "";
    std::string t = m[1].str();
    for (char& c : t) c = (char)std::toupper((unsigned char)c);
    return t;
}

struct CachedModel {
    std::string repo, tag, path;  // id: repo:tag
};

// Every model in the cache: models--ORG--NAME/snapshots/<refs/main or the first>/*.gguf.
std::vector<CachedModel> scan_hf_cache() {
    std::vector<CachedModel> out;
    const fs::path dir = hf_cache_dir();
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) return out;
    std::vector<fs::path> repos;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
        if (it->is_directory() && it->path().filename().string().rfind("models--", 0) == 0) repos.push_back(it->path());
    std::sort(repos.begin(), repos.end());
    for (const fs::path& r : repos) {
        std::string repo = r.filename().string().substr(8);
        for (size_t at; (at = repo.find("--")) != std::string::npos;) repo.replace(at, 2, "/");
        std::string commit;
        if (std::ifstream ref(r / "refs" / "main"); ref) std::getline(ref, commit);
        commit = trim(commit);
        if (commit.empty() || !fs::is_directory(r / "snapshots" / commit, ec)) {
            commit.clear();
            for (fs::directory_iterator it(r / "snapshots", ec), end; !ec && it != end; it.increment(ec))
                if (it->is_directory()) {
                    commit = it->path().filename().string();
                    break;
                }
        }
        if (commit.empty()) continue;
        const fs::path snap = r / "snapshots" / commit;
        std::vector<fs::path> files;
        for (fs::recursive_directory_iterator it(snap, ec), end; !ec && it != end; it.increment(ec))
            if (is_gguf(it->path()) && !is_projector(it->path()) && !is_later_shard(it->path().filename().string()))
                files.push_back(it->path());
        std::sort(files.begin(), files.end());
        std::set<std::string> tags;
        for (const fs::path& f : files) {
            const std::string t = quant_tag(f.filename().string());
            if (t.empty() || !tags.insert(t).second) continue;
            out.push_back({repo, t, f.string()});
        }
    }
    return out;
}

// "org/name[:TAG]" in the cache: the file with that tag, else (no tag) Q4_K_M, else the first.
std::string resolve_hf(const std::vector<CachedModel>& cache, const std::string& repo_tag) {
    const size_t colon = repo_tag.find(':');
    const std::string repo = repo_tag.substr(0, colon);
    std::string tag = colon == std::string::npos ? "" : repo_tag.substr(colon + 1);
    for (char& c : tag) c = (char)std::toupper((unsigned char)c);
    const CachedModel* first = nullptr;
    for (const CachedModel& c : cache) {
        if (c.repo != repo) continue;
        if (!tag.empty() && c.tag == tag) return c.path;
        if (tag.empty() && c.tag == "Q4_K_M") return c.path;
        if (!first) first = &c;
    }
    return tag.empty() && first ? first->path : "";
}

}  // namespace

std::string hf_cache_directory() { return hf_cache_dir().string(); }

std::string find_cached_hf_model(const std::string& repo_tag, const std::string& file) {
    const std::vector<CachedModel> cache = scan_hf_cache();
    if (file.empty()) return resolve_hf(cache, repo_tag);
    const std::string repo = repo_tag.substr(0, repo_tag.find(':'));
    for (const CachedModel& c : cache)
        if (c.repo == repo && fs::path(c.path).filename() == fs::path(file).filename()) return c.path;
    return "";
}

Result<std::vector<PresetSection>> parse_preset_ini(const std::string& text) {
    std::vector<PresetSection> out;
    PresetSection global{"*", {}};
    PresetSection* cur = &global;
    std::istringstream in(text);
    std::string line;
    int n = 0;
    std::vector<PresetSection> sections;
    std::vector<std::string> order;
    while (std::getline(in, line)) {
        ++n;
        line = trim(line);
        if (line.empty() || line[0] == ';' || line[0] == '#') continue;
        if (line.front() == '[') {
            if (line.back() != ']' || line.size() < 3)
                return Result<std::vector<PresetSection>>::fail("line " + std::to_string(n) + ": a section is [NAME]: " + line);
            const std::string name = trim(line.substr(1, line.size() - 2));
            if (name == "*") {
                cur = &global;
                continue;
            }
            auto it = std::find_if(sections.begin(), sections.end(), [&](const PresetSection& s) { return s.name == name; });
            if (it == sections.end()) {
                sections.push_back({name, {}});
                it = sections.end() - 1;
            }
            cur = &*it;
            continue;
        }
        const size_t eq = line.find('=');
        if (eq == std::string::npos)
            return Result<std::vector<PresetSection>>::fail("line " + std::to_string(n) + ": not `key = value`: " + line);
        std::string key = trim(line.substr(0, eq));
        while (!key.empty() && key[0] == '-') key.erase(key.begin());
        std::string value = trim(line.substr(eq + 1));
        if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') && value.back() == value.front())
            value = value.substr(1, value.size() - 2);
        if (key.empty()) return Result<std::vector<PresetSection>>::fail("line " + std::to_string(n) + ": no key: " + line);
        cur->keys.emplace_back(key, value);
    }
    out.push_back(global);
    for (auto& s : sections) out.push_back(std::move(s));
    return out;
}

std::vector<RouterModel> scan_router_models(const RouterConfig& cfg, std::vector<std::string>* warnings) {
    std::vector<RouterModel> models;
    std::set<std::string> ids;
    auto add = [&](RouterModel m) {
        if (!ids.insert(bare_id(m.id)).second) return;
        models.push_back(std::move(m));
    };
    bool dedup = false;
    std::set<std::string> preset_paths;
    const std::vector<CachedModel> hf = scan_hf_cache();
    // 1. the preset (its names win)
    if (!cfg.models_preset.empty()) {
        std::ifstream f(cfg.models_preset);
        std::stringstream ss;
        ss << f.rdbuf();
        if (!f) {
            warnings->push_back("cannot read the preset " + cfg.models_preset);
        } else if (auto sections = parse_preset_ini(ss.str()); !sections) {
            warnings->push_back("the preset " + cfg.models_preset + ": " + sections.error());
        } else {
            const PresetSection& global = (*sections)[0];
            if (const std::string* v = find_key(global.keys, "dedup-cache-models")) dedup = truthy(*v);
            const fs::path base = fs::path(cfg.models_preset).parent_path();
            for (size_t i = 1; i < sections->size(); ++i) {
                const PresetSection& s = (*sections)[i];
                auto keys = global.keys;
                keys.insert(keys.end(), s.keys.begin(), s.keys.end());
                RouterModel m;
                m.id = s.name;
                m.source = "preset";
                const std::string* path = find_key(s.keys, "model");
                if (!path) path = find_key(s.keys, "m");
                if (path) {
                    fs::path p(*path);
                    if (p.is_relative()) p = base / p;
                    m.path = p.lexically_normal().string();
                    preset_paths.insert(m.path);
                } else if (const std::string* repo = find_key(keys, "hf-repo") ? find_key(keys, "hf-repo") : find_key(keys, "hf")) {
                    // a repository llama.cpp has downloaded: its file in the cache (never a download)
                    m.path = resolve_hf(hf, *repo);
                    if (m.path.empty())
                        m.why = "its preset names the Hugging Face repository " + *repo + ", which is not in " +
                                hf_cache_dir().string() + " (edgellm never downloads; give `model = FILE`)";
                    else
                        preset_paths.insert(m.path);
                } else {
                    m.why = "its preset section has no `model = FILE`";
                }
                const std::string* draft = find_key(keys, "spec-draft-hf");
                if (!draft) draft = find_key(keys, "hf-repo-draft");
                if (!draft) draft = find_key(keys, "hfd");
                if (draft) {
                    const std::string dp = resolve_hf(hf, *draft);
                    if (dp.empty() && m.why.empty())
                        m.why = "its draft model " + *draft + " is not in " + hf_cache_dir().string() +
                                " (edgellm never downloads; give `model-draft = FILE`)";
                    if (!dp.empty()) {
                        m.args.push_back("-md");
                        m.args.push_back(dp);
                        preset_paths.insert(dp);
                    }
                }
                if (const std::string* v = find_key(keys, "load-on-startup")) m.load_on_startup = truthy(*v);
                if (const std::string* v = find_key(s.keys, "dedup-cache-models"); v && truthy(*v)) dedup = true;
                if (std::string bad = preset_flags(keys, cfg.flag_kind, &m.args); !bad.empty() && m.why.empty()) {
                    m.why = bad;
                    m.path.clear();
                }
                add(std::move(m));
            }
        }
    }
    // 2. --models-dir: each GGUF, and each subdirectory holding one
    if (!cfg.models_dir.empty()) {
        std::error_code ec;
        std::vector<fs::directory_entry> entries;
        for (fs::directory_iterator it(cfg.models_dir, ec), end; !ec && it != end; it.increment(ec)) entries.push_back(*it);
        if (ec) warnings->push_back("cannot list --models-dir " + cfg.models_dir + ": " + ec.message());
        std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.path() < b.path(); });
        for (const auto& e : entries) {
            const std::string name = e.path().filename().string();
            if (e.is_regular_file(ec) && is_gguf(e.path()) && !is_projector(e.path()) && !is_later_shard(name)) {
                add({without_shard_suffix(e.path().stem().string()), e.path().string(), "", {}, "dir"});
            } else if (e.is_directory(ec)) {
                std::vector<fs::path> files;
                for (fs::directory_iterator it(e.path(), ec), end; !ec && it != end; it.increment(ec))
                    if (it->is_regular_file() && is_gguf(it->path()) && !is_projector(it->path()) &&
                        !is_later_shard(it->path().filename().string()))
                        files.push_back(it->path());
                std::sort(files.begin(), files.end());
                if (!files.empty()) add({name, files[0].string(), "", {}, "dir"});
            }
        }
    }
    // 3. edgellm's model directory and $EDGELLM_MODEL (ids: the file names, as -m names them)
    for (const std::string& f : cfg.cache_files) {
        RouterModel m{fs::path(f).filename().string(), f, "", {}, "cache"};
        m.hidden = dedup && preset_paths.count(fs::path(f).lexically_normal().string());
        add(std::move(m));
    }
    // 4. what llama.cpp downloaded (ids as llama-server names them: ORG/NAME:TAG)
    for (const CachedModel& c : hf) {
        RouterModel m{c.repo + ":" + c.tag, c.path, "", {}, "cache"};
        m.hidden = dedup && preset_paths.count(c.path);
        add(std::move(m));
    }
    return models;
}

// ---- the router ---------------------------------------------------------------------------

struct Router::Impl {
    RouterConfig cfg;
    std::unique_ptr<Front> front;
    std::unique_ptr<http::Server> http;
    std::unique_ptr<agent::ToolService> tools;

    enum class State { Unloaded, Loading, Loaded, Unloading, Failed };
    static const char* state_name(State s) {
        switch (s) {
            case State::Unloaded: return "unloaded";
            case State::Loading: return "loading";
            case State::Loaded: return "loaded";
            case State::Unloading: return "unloading";
            case State::Failed: return "failed";
        }
        return "?";
    }
    struct Instance {
        State state = State::Unloaded;
        pid_t pid = -1;
        int port = 0;
        int busy = 0;            // requests being forwarded to it
        int64_t last_used = 0;
        int64_t started_ms = 0;  // the load began
        double load_ms = 0;
        std::vector<std::string> argv;
        std::string error;       // why the last load failed, or how the child ended
        int fail_seq = 0;        // counts failures: a waiter tells its own load's from an old one
        bool asked = false;      // a request or /models/load wanted it (not only the start-up)
        std::deque<std::string> tail;  // its last log lines (for the error when it dies)
    };

    std::mutex mu;
    std::condition_variable cv;
    std::vector<RouterModel> models;
    std::map<std::string, Instance> inst;  // by id
    std::deque<std::string> queue;         // models waiting for room, one entry per model, FIFO
    std::map<std::string, int> waiting;    // requests waiting per model
    std::set<std::string> making_room;     // models one of whose waiters is evicting for them
    // Resumable streams: the model each X-Conversation-Id's request went to, with a ticket a
    // DELETE /v1/stream withdraws (cancelling the request while its model loads).
    struct Conv {
        std::string model;
        uint64_t ticket = 0;
    };
    std::map<std::string, Conv> convs;
    uint64_t next_ticket = 0;
    int threads_alive = 0;                 // detached helper threads (log readers, health polls)
    bool stopping = false;

    // fork() from one long-lived thread: a child's PR_SET_PDEATHSIG fires when the thread
    // that forked it ends, so a request's thread must not be its parent.
    std::mutex spawn_mu;
    std::condition_variable spawn_cv;
    struct SpawnJob {
        std::vector<std::string> argv;
        int out_fd = -1;
        pid_t pid = -1;
        int err = 0;
        bool done = false;
    };
    std::deque<SpawnJob*> spawn_jobs;
    std::thread spawner;
    bool spawner_stop = false;

    // LLAMA_SERVER_DEBUG_FAKE_TIMING (a test hook of llama-server's router that its test suite
    // sets): each load and each forwarded request first waits 2 s, so the suite's
    // scheduling tests (busy models, queued requests) see the same races on any machine.
    const bool fake_timing = [] {
        const char* v = std::getenv("LLAMA_SERVER_DEBUG_FAKE_TIMING");
        return v && *v;
    }();

    explicit Impl(RouterConfig c) : cfg(std::move(c)) {
        std::vector<std::string> warnings;
        models = scan_router_models(cfg, &warnings);
        for (const std::string& w : warnings) log("warning: %s", w.c_str());
        spawner = std::thread([this] { spawn_loop(); });
    }

    ~Impl() {
        std::vector<std::string> ids;
        {
            std::lock_guard<std::mutex> lk(mu);
            stopping = true;
            for (auto& [id, in] : inst)
                if (in.pid > 0) ids.push_back(id);
        }
        cv.notify_all();
        for (const std::string& id : ids) stop_child(id, "the router stopped");
        {
            std::unique_lock<std::mutex> lk(mu);
            cv.wait_for(lk, std::chrono::seconds(15), [&] { return threads_alive == 0; });
        }
        {
            std::lock_guard<std::mutex> lk(spawn_mu);
            spawner_stop = true;
        }
        spawn_cv.notify_all();
        spawner.join();
    }

    void log(const char* fmt, ...) __attribute__((format(printf, 2, 3))) {
        if (!cfg.log) return;
        char buf[2048];
        va_list ap;
        va_start(ap, fmt);
        std::vsnprintf(buf, sizeof buf, fmt, ap);
        va_end(ap);
        std::fprintf(stderr, "edgellm router: %s\n", buf);
    }

    const RouterModel* find_model(const std::string& name) {
        const std::string want = bare_id(name);
        for (const RouterModel& m : models)
            if (bare_id(m.id) == want) return &m;
        return nullptr;
    }
    const RouterModel* default_model() {
        if (cfg.default_model.empty()) return nullptr;
        for (const RouterModel& m : models)
            if (m.path == cfg.default_model) return &m;
        return nullptr;
    }
    std::string known_ids() {
        std::string s;
        for (const RouterModel& m : models)
            if (!m.hidden) s += (s.empty() ? "" : ", ") + m.id;
        return s.empty() ? "none: put GGUF files in --models-dir or name them in --models-preset" : s;
    }

    // ---- children ----

    void spawn_loop() {
        std::unique_lock<std::mutex> lk(spawn_mu);
        for (;;) {
            spawn_cv.wait(lk, [&] { return spawner_stop || !spawn_jobs.empty(); });
            if (spawn_jobs.empty() && spawner_stop) return;
            SpawnJob* job = spawn_jobs.front();
            spawn_jobs.pop_front();
            do_spawn(job);
            job->done = true;
            spawn_cv.notify_all();
        }
    }

    // The child: stdin /dev/null, stdout and stderr into one pipe (read by reader()), in our
    // process group, SIGTERM when the router ends; a failed exec is in its log, status 127.
    static void do_spawn(SpawnJob* job) {
        sys::SpawnSpec s;
        s.argv = std::move(job->argv);
        s.exe = s.argv[0];  // (no PATH lookup)
        s.own_group = false;
        s.nonblocking = false;
        s.default_signals = {SIGPIPE};
        s.death_signal = SIGTERM;
        const sys::Spawned started = sys::spawn(s);
        if (!started.ok()) {
            job->err = started.error;
            return;
        }
        job->pid = started.child.pid;
        job->out_fd = started.child.out;
    }

    pid_t spawn(std::vector<std::string> argv, int* out_fd, std::string* why) {
        SpawnJob job;
        job.argv = std::move(argv);
        std::unique_lock<std::mutex> lk(spawn_mu);
        spawn_jobs.push_back(&job);
        spawn_cv.notify_all();
        spawn_cv.wait(lk, [&] { return job.done; });
        if (job.pid < 0) *why = std::string("cannot start a child: ") + std::strerror(job.err);
        *out_fd = job.out_fd;
        return job.pid;
    }

    // Reads a child's log: each line to our stderr as "[ID] line", the port from its
    // "listening on" line; at the end reaps it.
    void reader(std::string id, pid_t pid, int fd) {
        std::string buf;
        char chunk[4096];
        static const std::regex listening(R"(listening on http://\S+:(\d+))");
        for (;;) {
            const ssize_t n = ::read(fd, chunk, sizeof chunk);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break;
            buf.append(chunk, (size_t)n);
            size_t nl;
            while ((nl = buf.find('\n')) != std::string::npos) {
                const std::string line = buf.substr(0, nl);
                buf.erase(0, nl + 1);
                if (cfg.log) std::fprintf(stderr, "[%s] %s\n", id.c_str(), line.c_str());
                std::smatch m;
                std::lock_guard<std::mutex> lk(mu);
                Instance& in = inst[id];
                if (in.pid != pid) continue;
                in.tail.push_back(line);
                if (in.tail.size() > 8) in.tail.pop_front();
                if (in.port == 0 && std::regex_search(line, m, listening)) {
                    in.port = std::atoi(m[1].str().c_str());
                    cv.notify_all();
                }
            }
        }
        ::close(fd);
        // (no such child: as status 0)
        std::string how = sys::exit_text(std::max(sys::wait_status(pid), 0));
        if (how.empty()) how = "ended";
        {
            std::lock_guard<std::mutex> lk(mu);
            Instance& in = inst[id];
            if (in.pid == pid) {
                in.pid = -1;
                in.port = 0;
                if (in.state == State::Loading || in.state == State::Loaded) {
                    std::string last;
                    for (const std::string& l : in.tail) last += (last.empty() ? "" : " | ") + l;
                    in.error = "its server " + how + (last.empty() ? "" : ": " + last);
                    in.state = State::Failed;
                    ++in.fail_seq;
                    log("model %s: %s", id.c_str(), in.error.c_str());
                } else if (in.state == State::Unloading) {
                    in.state = State::Unloaded;
                }
                in.asked = false;
            }
            --threads_alive;
        }
        cv.notify_all();
    }

    // Starts the child (the caller has made room and holds `lk`); the load goes on in the
    // background and ends in Loaded or Failed.
    void start_load(std::unique_lock<std::mutex>& lk, const RouterModel& m) {
        Instance& in = inst[m.id];
        in.state = State::Loading;
        in.error.clear();
        in.port = 0;
        in.tail.clear();
        in.started_ms = now_ms();
        std::vector<std::string> argv = {cfg.self_exe, "serve"};
        argv.insert(argv.end(), cfg.child_args.begin(), cfg.child_args.end());
        argv.insert(argv.end(), m.args.begin(), m.args.end());
        argv.insert(argv.end(), {"-m", m.path, "--alias", m.id, "--host", "127.0.0.1", "--port", "0", "--no-webui"});
        in.argv = argv;
        const std::string id = m.id;
        lk.unlock();
        std::string why;
        int fd = -1;
        const pid_t pid = spawn(argv, &fd, &why);
        lk.lock();
        Instance& again = inst[id];
        if (pid < 0) {
            again.state = State::Failed;
            again.error = why;
            ++again.fail_seq;
            cv.notify_all();
            return;
        }
        again.pid = pid;
        if (stopping) ::kill(pid, SIGTERM);  // (the router began to stop meanwhile)
        threads_alive += 2;
        log("model %s: loading (pid %d)", id.c_str(), (int)pid);
        std::thread([this, id, pid, fd] { reader(id, pid, fd); }).detach();
        std::thread([this, id, pid] { await_health(id, pid); }).detach();
    }

    // Polls the child's /health until it answers 200 (Loaded), it dies, or the load times out.
    void await_health(std::string id, pid_t pid) {
        struct Done {
            Impl* d;
            ~Done() {
                std::lock_guard<std::mutex> lk(d->mu);
                --d->threads_alive;
                d->cv.notify_all();
            }
        } done{this};
        const int64_t deadline = now_ms() + (int64_t)cfg.load_timeout_s * 1000;
        for (;;) {
            int port = 0;
            {
                std::unique_lock<std::mutex> lk(mu);
                cv.wait_for(lk, std::chrono::milliseconds(50));
                Instance& in = inst[id];
                if (stopping || in.pid != pid || in.state != State::Loading) return;
                port = in.port;
                if (now_ms() > deadline) {
                    in.error = "not ready within " + std::to_string(cfg.load_timeout_s) + " s";
                    lk.unlock();
                    stop_child(id, "the load timed out");
                    lk.lock();
                    Instance& i2 = inst[id];
                    i2.state = State::Failed;
                    ++i2.fail_seq;
                    cv.notify_all();
                    return;
                }
            }
            if (port == 0) continue;
            client::Timeouts t;
            t.connect_ms = 1000;
            t.total_ms = 2000;
            client::HttpResult r = client::http_request(client::Endpoint("http://127.0.0.1:" + std::to_string(port)),
                                                        "GET", "/health", "", t);
            if (r.status == 200) {
                std::lock_guard<std::mutex> lk(mu);
                Instance& in = inst[id];
                if (in.pid != pid || in.state != State::Loading) return;
                in.state = State::Loaded;
                in.last_used = now_ms();
                in.load_ms = (double)(now_ms() - in.started_ms);
                log("model %s: loaded in %.0f ms (port %d)", id.c_str(), in.load_ms, port);
                cv.notify_all();
                return;
            }
        }
    }

    // SIGTERM (SIGKILL for a child still loading: it has nothing to finish), then SIGKILL
    // after 10 s; returns once the child is reaped (or 20 s passed).
    void stop_child(const std::string& id, const char* why, bool loading = false) {
        pid_t pid;
        {
            std::lock_guard<std::mutex> lk(mu);
            Instance& in = inst[id];
            pid = in.pid;
            if (pid <= 0) {
                if (in.state != State::Failed) in.state = State::Unloaded;
                return;
            }
            loading = loading || in.state == State::Loading;
            in.state = State::Unloading;
        }
        log("model %s: unloading (%s)", id.c_str(), why);
        ::kill(pid, loading ? SIGKILL : SIGTERM);
        std::unique_lock<std::mutex> lk(mu);
        auto gone = [&] { return inst[id].pid != pid; };
        if (!cv.wait_for(lk, std::chrono::seconds(10), gone)) {
            ::kill(pid, SIGKILL);
            cv.wait_for(lk, std::chrono::seconds(10), gone);
        }
        if (gone() && inst[id].state == State::Unloading) inst[id].state = State::Unloaded;
        cv.notify_all();
    }

    int running_count() {
        int n = 0;
        for (auto& [id, in] : inst)
            if (in.state == State::Loading || in.state == State::Loaded || in.state == State::Unloading) ++n;
        return n;
    }

    // What gives up its place: a model started at start-up that nobody has asked for yet (even
    // while it loads), else the least recently used loaded model nobody is using (not
    // `except`), else "".
    std::string idle_victim(const std::string& except) {
        // (a model requests are waiting for is theirs once it is up: not a victim)
        auto claimed = [&](const std::string& id) { return waiting.count(id) > 0; };
        for (auto& [id, in] : inst)
            if (id != except && !in.asked && in.busy == 0 && !claimed(id) &&
                (in.state == State::Loaded || in.state == State::Loading))
                return id;
        std::string best;
        int64_t oldest = INT64_MAX;
        for (auto& [id, in] : inst)
            if (id != except && in.state == State::Loaded && in.busy == 0 && !claimed(id) && in.last_used < oldest) {
                oldest = in.last_used;
                best = id;
            }
        return best;
    }

    // Makes `m` loaded (or loading, when !wait_loaded): waits in the FIFO queue for room,
    // evicting an idle model when --models-max are running. On success with wait_loaded the
    // instance's busy count is raised (the caller lowers it) and its port returned.
    // `abandoned` (called under mu): the wait ends without the model (a stopped stream).
    Result<int> acquire(const RouterModel& m, bool wait_loaded, http::Response* res, bool asked = true,
                        const std::function<bool()>& abandoned = {}) {
        std::unique_lock<std::mutex> lk(mu);
        const std::string id = m.id;
        if (asked) inst[id].asked = true;
        const int seq0 = inst[id].fail_seq;
        if (fake_timing && inst[id].state != State::Loaded && inst[id].state != State::Loading) {
            lk.unlock();
            std::this_thread::sleep_for(std::chrono::seconds(2));
            lk.lock();
            if (res && res->peer_gone()) return Result<int>::fail("the client went away");
            if (abandoned && abandoned()) return Result<int>::fail("cancelled by a stop while the model was loading");
        }
        bool queued = false;
        auto leave = [&] {
            if (!queued) return;
            queued = false;
            if (--waiting[id] == 0) {
                waiting.erase(id);
                auto it = std::find(queue.begin(), queue.end(), id);
                if (it != queue.end()) queue.erase(it);
            }
            cv.notify_all();
        };
        for (;;) {
            if (stopping) {
                leave();
                return Result<int>::fail("the router is stopping");
            }
            Instance& in = inst[id];
            if (in.state == State::Loaded || (!wait_loaded && in.state == State::Loading)) {
                leave();
                if (wait_loaded) {
                    ++in.busy;
                    in.last_used = now_ms();
                }
                return in.port;
            }
            if (in.state == State::Failed && in.fail_seq != seq0) {
                leave();
                return Result<int>::fail("model " + id + " could not be loaded: " + in.error);
            }
            if (in.state == State::Unloaded || in.state == State::Failed) {
                if (!queued) {
                    queued = true;
                    if (waiting[id]++ == 0) queue.push_back(id);
                }
                if (!queue.empty() && queue.front() == id && !making_room.count(id)) {
                    if (cfg.models_max <= 0 || running_count() < cfg.models_max) {
                        queue.pop_front();
                        start_load(lk, m);
                        cv.notify_all();
                        continue;
                    }
                    if (const std::string victim = idle_victim(id); !victim.empty()) {
                        const bool loading = inst[victim].state == State::Loading;
                        inst[victim].state = State::Unloading;  // (nobody takes it meanwhile)
                        making_room.insert(id);  // (one eviction per model, however many wait)
                        lk.unlock();
                        stop_child(victim, ("room for " + id).c_str(), loading);
                        lk.lock();
                        making_room.erase(id);
                        continue;
                    }
                }
            }
            cv.wait_for(lk, std::chrono::milliseconds(50));
            if (res && res->peer_gone()) {
                leave();
                return Result<int>::fail("the client went away");
            }
            if (abandoned && abandoned()) {
                leave();
                return Result<int>::fail("request cancelled by a stop while the model was loading");
            }
        }
    }

    void release(const std::string& id) {
        {
            std::lock_guard<std::mutex> lk(mu);
            Instance& in = inst[id];
            if (in.busy > 0) --in.busy;
            in.last_used = now_ms();
        }
        cv.notify_all();
    }

    // ---- HTTP ----

    static void send_json(http::Response& res, int status, const json& j) { respond_json(res, status, j); }
    static void send_error(http::Response& res, const ApiError& e) { respond_error(res, e); }

    json model_json(const RouterModel& m) {
        const Instance& in = inst[m.id];
        json status = {{"value", state_name(in.state)}};
        if (in.state == State::Loaded || in.state == State::Loading) status["args"] = in.argv;
        if (in.state == State::Failed) {
            status["failed"] = true;
            status["error"] = in.error;
        }
        json j = {{"id", m.id}, {"object", "model"}, {"owned_by", "edgellm"}, {"created", 0},
                  {"path", m.path}, {"source", m.source}, {"in_cache", m.source == "cache"},
                  {"status", status}};
        if (!m.why.empty()) j["unavailable"] = m.why;
        return j;
    }

    void list_models(http::Response& res) {
        json data = json::array();
        std::lock_guard<std::mutex> lk(mu);
        // the default model first (a client that takes the first id gets it)
        const RouterModel* def = default_model();
        if (def && !def->hidden) data.push_back(model_json(*def));
        for (const RouterModel& m : models)
            if (!m.hidden && &m != def) data.push_back(model_json(m));
        send_json(res, 200, {{"object", "list"}, {"data", data}});
    }

    void reload_models() {
        std::vector<std::string> warnings;
        std::vector<RouterModel> fresh = scan_router_models(cfg, &warnings);
        for (const std::string& w : warnings) log("warning: %s", w.c_str());
        std::vector<std::string> gone;
        {
            std::lock_guard<std::mutex> lk(mu);
            for (auto& [id, in] : inst) {
                const bool still = std::any_of(fresh.begin(), fresh.end(), [&](const RouterModel& m) { return m.id == id; });
                if (!still && in.pid > 0) gone.push_back(id);
            }
        }
        for (const std::string& id : gone) stop_child(id, "no longer in the model list");
        std::lock_guard<std::mutex> lk(mu);
        models = std::move(fresh);
        log("models reloaded: %zu", models.size());
    }

    // The model a request names: the body's "model" (POST) or ?model= (GET); none: the default.
    const RouterModel* requested(const http::Request& req, ApiError* err) {
        std::string name;
        if (auto it = req.query.find("model"); it != req.query.end()) name = it->second;
        if (name.empty() && req.method == "POST") {
            const json body = json::parse(req.body, nullptr, false);
            if (body.is_object() && body.contains("model")) {
                if (!body["model"].is_string() && !body["model"].is_null()) {
                    *err = bad_request("\"model\" must be a string");
                    return nullptr;
                }
                if (body["model"].is_string()) name = body["model"].get<std::string>();
            }
        }
        std::lock_guard<std::mutex> lk(mu);
        if (name.empty()) {
            if (const RouterModel* d = default_model()) return d;
            *err = bad_request("name the model (\"model\" in the body, or ?model=): one of " + known_ids());
            return nullptr;
        }
        if (const RouterModel* m = find_model(name)) {
            if (m->path.empty()) {
                *err = bad_request("model " + m->id + " cannot be loaded: " + m->why);
                return nullptr;
            }
            return m;
        }
        *err = {404, "not_found_error", "model \"" + name + "\" not found; the models: " + known_ids(), {}};
        return nullptr;
    }

    void models_load_unload(bool load, const http::Request& req, http::Response& res, std::string* extra) {
        const json body = json::parse(req.body, nullptr, false);
        if (!body.is_object() || !body.contains("model") || !body["model"].is_string())
            return send_error(res, bad_request("give {\"model\": ID}"));
        const std::string name = body["model"];
        const RouterModel* m;
        {
            std::lock_guard<std::mutex> lk(mu);
            m = find_model(name);
        }
        if (!m) return send_error(res, {404, "not_found_error", "model \"" + name + "\" not found; the models: " + known_ids(), {}});
        if (m->path.empty()) return send_error(res, bad_request("model " + m->id + " cannot be loaded: " + m->why));
        const RouterModel copy = *m;
        *extra = " | model " + copy.id;
        if (load) {
            auto port = acquire(copy, false, &res);
            if (!port) return send_error(res, {503, "unavailable_error", port.error(), {}});
            return send_json(res, 200, {{"success", true}});
        }
        {
            std::lock_guard<std::mutex> lk(mu);
            const State s = inst[copy.id].state;
            if (s != State::Loaded && s != State::Loading)
                return send_error(res, bad_request("model " + copy.id + " is not loaded"));
        }
        stop_child(copy.id, "POST /models/unload");
        send_json(res, 200, {{"success", true}});
    }

    // The request as it came, to the child on `port`; its answer back as it arrives.
    // detached (a resumable stream): the child's answer is read to its end even when the
    // client has gone, so its session gets the whole reply.
    void forward(const http::Request& req, const std::string& target, http::Response& res, int port,
                 const std::string& model_id, std::string* extra, bool detached = false) {
        client::Timeouts t;
        t.connect_ms = 5000;
        t.first_token_ms = 24 * 3600 * 1000;
        t.total_ms = 24 * 3600 * 1000;
        std::vector<std::pair<std::string, std::string>> headers;
        std::string content_type = "application/json";
        for (const auto& [name, value] : req.headers) {
            if (name == "host" || name == "content-length" || name == "transfer-encoding" || name == "connection" ||
                name == "expect" || name == "keep-alive" || name == "upgrade" || name == "te" || name == "accept")
                continue;
            if (name == "content-type") {
                content_type = value;
                continue;
            }
            headers.emplace_back(name, value);
        }
        if (const std::string* a = req.header("accept")) headers.emplace_back("accept", *a);
        std::atomic<bool> cancel{false};
        std::atomic<bool> done{false};
        std::thread watcher([&] {
            while (!done.load() && !detached) {
                if (res.peer_gone()) {
                    cancel = true;
                    return;
                }
                std::this_thread::sleep_for(std::chrono::milliseconds(50));
            }
        });
        client::StreamControl ctl;
        ctl.cancel = &cancel;
        bool streaming = false;
        std::string collected;
        auto on_body = [&](std::string_view bytes, client::StreamControl& c) {
            c.progress = true;
            if (!c.chunked) {
                collected.append(bytes);
                return true;
            }
            if (!streaming) {
                streaming = true;
                std::string type = "text/event-stream";
                http::HeaderList hs;
                for (const auto& [k, v] : c.headers) {
                    if (k == "content-type") type = v;
                    else if (k != "transfer-encoding" && k != "content-length" && k != "connection" &&
                             k.rfind("access-control-", 0) != 0)
                        hs.emplace_back(k, v);
                }
                if (!res.begin_stream(c.status, type, hs)) return detached;
            }
            return res.write(bytes) || detached;
        };
        // the model by the id it goes by (the reply names it so)
        std::string body = req.body;
        if (req.method == "POST") {
            json j = json::parse(req.body, nullptr, false);
            if (j.is_object() && j.contains("model") && j["model"].is_string() && j["model"] != model_id) {
                j["model"] = model_id;
                body = j.dump(-1, ' ', false, json::error_handler_t::replace);
            }
        }
        client::HttpResult r = client::http_request(client::Endpoint("http://127.0.0.1:" + std::to_string(port)),
                                                    req.method, target, body, t, on_body, &ctl, content_type, headers);
        done = true;
        watcher.join();
        if (streaming) {
            res.end_stream();
        } else if (r.status == 0) {
            if (!cancel.load())
                send_error(res, {502, "proxy_error", "the model's server did not answer: " + r.error, {}});
        } else {
            std::string type = "application/json";
            http::HeaderList hs;
            for (const auto& [k, v] : r.headers) {
                if (k == "content-type") type = v;
                else if (k != "transfer-encoding" && k != "content-length" && k != "connection" &&
                         k.rfind("access-control-", 0) != 0)
                    hs.emplace_back(k, v);
            }
            res.send(r.status, type, collected.empty() ? r.body : collected, hs);
        }
        *extra += " -> " + std::to_string(r.status);
    }

    // The resumable stream routes, to the model each conversation went to.
    void stream_route(const http::Request& req, const std::string& target, http::Response& res, std::string* extra) {
        if (req.path == "/v1/streams/lookup") {
            const json body = json::parse(req.body, nullptr, false);
            std::map<int, json> per_port;  // the ids each running model owns
            if (body.is_object() && body.contains("conversation_ids") && body["conversation_ids"].is_array()) {
                std::lock_guard<std::mutex> lk(mu);
                for (const json& v : body["conversation_ids"]) {
                    if (!v.is_string()) continue;
                    auto it = convs.find(v.get<std::string>());
                    if (it == convs.end()) continue;
                    const Instance& in = inst[it->second.model];
                    if (in.state == State::Loaded) per_port[in.port].push_back(it->first);
                }
            }
            json all = json::array();
            for (auto& [port, ids] : per_port) {
                client::Timeouts t;
                t.connect_ms = 2000;
                t.total_ms = 5000;
                auto r = client::http_request(client::Endpoint("http://127.0.0.1:" + std::to_string(port)), "POST",
                                              "/v1/streams/lookup", json{{"conversation_ids", ids}}.dump(), t);
                const json a = json::parse(r.body, nullptr, false);
                if (r.status == 200 && a.is_array())
                    for (const json& e : a) all.push_back(e);
            }
            return send_json(res, 200, all);
        }
        const auto q = req.query.find("conv_id");
        if (q == req.query.end() || q->second.empty()) return send_error(res, bad_request("give ?conv_id=ID"));
        const std::string conv = q->second;
        int port = 0;
        bool loading = false;
        {
            std::lock_guard<std::mutex> lk(mu);
            auto it = convs.find(conv);
            if (it != convs.end()) {
                const Instance& in = inst[it->second.model];
                if (in.state == State::Loaded) port = in.port;
                else loading = in.state == State::Loading || waiting.count(it->second.model);
                *extra = " | model " + it->second.model;
            }
            if (req.method == "DELETE") convs.erase(conv);  // (a request still waiting for its model ends)
        }
        cv.notify_all();
        if (req.method == "DELETE") {
            if (port) {
                client::Timeouts t;
                t.connect_ms = 2000;
                t.total_ms = 5000;
                (void)client::http_request(client::Endpoint("http://127.0.0.1:" + std::to_string(port)), "DELETE", target,
                                           "", t);
            }
            return res.send(204, "application/json", "");
        }
        if (req.method != "GET" && req.method != "HEAD") return send_error(res, {405, "invalid_request_error", "use GET or DELETE", {}});
        if (port) return forward(req, target, res, port, "", extra);
        if (loading) return send_error(res, {503, "unavailable_error", "Stream owner model is loading, retry later", {}});
        send_error(res, {404, "not_found_error", "Stream not found or expired", {}});
    }

    void props(http::Response& res) {
        std::lock_guard<std::mutex> lk(mu);
        const RouterModel* d = default_model();
        send_json(res, 200, {{"role", "router"},
                             {"max_instances", cfg.models_max},
                             {"models_autoload", cfg.autoload},
                             {"default_model", d ? json(d->id) : json(nullptr)},
                             {"build_info", build_info()}});
    }

    // The router's route table (its own routes; anything else goes to a model: forward_call).
    std::vector<Route> routes() {
        std::vector<Route> t;
        auto add = [&t](const char* method, std::initializer_list<std::string> paths, unsigned flags,
                        const Handler& h) {
            for (const std::string& p : paths) t.push_back({method, p, flags, Needs::Nothing, h});
        };
        add("*", {"/health", "/v1/health"}, kPublic | kQuiet, [](Call& c) { send_json(c.res, 200, {{"status", "ok"}}); });
        add("GET", {"/", "/index.html"}, kPublic, [this](Call& c) {
            if (!cfg.webui) return send_error(c.res, {404, "not_found_error", "the chat page is off (--no-webui)", {}});
            c.res.send(200, "text/html; charset=utf-8", webui_html());
        });
        add("GET", {"/models", "/v1/models"}, kPublic | kQuiet, [this](Call& c) {
            if (auto it = c.req.query.find("reload"); it != c.req.query.end() && truthy(it->second)) reload_models();
            list_models(c.res);
        });
        add("POST", {"/models", "/v1/models"}, kNone, [](Call& c) {
            send_error(c.res, bad_request("edgellm never downloads models: put the GGUF file in "
                                          "--models-dir or name it in --models-preset, then GET /models?reload=1"));
        });
        add("DELETE", {"/models", "/v1/models"}, kNone, [](Call& c) {
            send_error(c.res, bad_request("edgellm does not delete model files: remove the file "
                                          "yourself, then GET /models?reload=1"));
        });
        add("*", {"/models", "/v1/models"}, kNone,
            [](Call& c) { send_error(c.res, {405, "invalid_request_error", "use GET", {}}); });
        add("POST", {"/models/load"}, kNone, [this](Call& c) { models_load_unload(true, c.req, c.res, c.log_extra); });
        add("POST", {"/models/unload"}, kNone, [this](Call& c) { models_load_unload(false, c.req, c.res, c.log_extra); });
        add("POST", {"/models/reload"}, kNone, [this](Call& c) {
            reload_models();
            send_json(c.res, 200, {{"success", true}});
        });
        add("GET", {"/props"}, kNone, [this](Call& c) {
            if (c.req.query.count("model")) return forward_call(c);  // that model's own /props
            props(c.res);
        });
        add("*", {"/tools"}, kNone,
            [this](Call& c) { agent::ToolService::route(tools.get(), c.req, c.res, c.log_extra); });
        add("*", {"/v1/stream", "/v1/streams/lookup"}, kNone,
            [this](Call& c) { stream_route(c.req, c.target, c.res, c.log_extra); });
        add("*", {"/cors-proxy"}, kNone, [this](Call& c) {
            if (!cfg.ui_mcp_proxy)
                return send_error(c.res, {403, "permission_error", "the CORS proxy is off (--ui-mcp-proxy turns it on)", {}});
            agent::forward_cors_proxy(c.req, c.res, c.log_extra);
        });
        return t;
    }

    // Any other request: to the model it names (started first when autoload allows).
    void forward_call(Call& c) {
        const http::Request& req = c.req;
        http::Response& res = c.res;
        const std::string& target = c.target;
        std::string* extra = c.log_extra;
        const std::string& m = req.method;
        const bool get = is_get(req);
        ApiError err;
        const RouterModel* named = requested(req, &err);
        if (!named) return send_error(res, err);
        const RouterModel model = *named;
        *extra = " | model " + model.id;
        {
            std::lock_guard<std::mutex> lk(mu);
            const State s = inst[model.id].state;
            // reading a model's state does not load it; nor does a request when autoload is off
            if (s != State::Loaded && (get || !cfg.autoload))
                return send_error(res, bad_request("model " + model.id + " is not loaded" +
                                                   (cfg.autoload ? "" : " (--no-models-autoload): POST /models/load first")));
        }
        // X-Conversation-Id on a POST: remembered (the stream routes find its model), and the
        // request no longer ends with its client, only with DELETE /v1/stream.
        std::string conv;
        uint64_t ticket = 0;
        if (const std::string* c = req.header("x-conversation-id"); c && !c->empty() && m == "POST") {
            conv = *c;
            std::lock_guard<std::mutex> lk(mu);
            ticket = ++next_ticket;
            convs[conv] = {model.id, ticket};
        }
        auto conv_alive = [&] {  // (under mu)
            auto it = convs.find(conv);
            return it != convs.end() && it->second.ticket == ticket;
        };
        const std::function<bool()> abandoned = [&] { return !conv_alive(); };
        auto port = ticket ? acquire(model, true, nullptr, true, abandoned) : acquire(model, true, &res);
        if (!port) {
            if (res.peer_gone() && !ticket) return;
            return send_error(res, {ticket && port.error().find("cancelled") != std::string::npos ? 400 : 503,
                                    ticket && port.error().find("cancelled") != std::string::npos
                                        ? "invalid_request_error" : "unavailable_error",
                                    port.error(), {}});
        }
        if (fake_timing) std::this_thread::sleep_for(std::chrono::seconds(2));  // (busy meanwhile)
        if (ticket) {
            bool alive;
            {
                std::lock_guard<std::mutex> lk(mu);
                alive = conv_alive();
            }
            if (!alive) {
                release(model.id);
                return send_error(res, bad_request("request cancelled by a stop while the model was loading"));
            }
        }
        forward(req, target, res, *port, model.id, extra, ticket != 0);
        release(model.id);
    }

    // The default model (and the preset's load-on-startup ones) start loading at once.
    void preload() {
        std::vector<RouterModel> start;
        {
            std::lock_guard<std::mutex> lk(mu);
            const RouterModel* d = default_model();
            if (cfg.autoload && d) start.push_back(*d);
            for (const RouterModel& m : models)
                if (m.load_on_startup && !m.path.empty() && (!d || m.id != d->id)) start.push_back(m);
            ++threads_alive;
        }
        std::thread([this, start] {
            for (const RouterModel& m : start) (void)acquire(m, false, nullptr, false);
            std::unique_lock<std::mutex> lk(mu);
            if (!start.empty())  // ready once the first (the default) model answers
                cv.wait(lk, [&] {
                    const State s = inst[start[0].id].state;
                    return stopping || s == State::Loaded || s == State::Failed;
                });
            if (!stopping && cfg.on_ready) cfg.on_ready();
            --threads_alive;
            cv.notify_all();
        }).detach();
    }
};

Router::Router(RouterConfig cfg) : d_(std::make_unique<Impl>(std::move(cfg))) {
    FrontOptions fo;
    fo.cors = d_->cfg.cors;
    fo.api_keys = d_->cfg.api_keys;
    fo.api_prefix = d_->cfg.api_prefix;
    fo.log = [d = d_.get()](const std::string& line) { d->log("%s", line.c_str()); };
    d_->front = std::make_unique<Front>(std::move(fo), d_->routes(), [d = d_.get()](Call& c) { d->forward_call(c); });
    d_->http = std::make_unique<http::Server>(
        d_->cfg.http, [d = d_.get()](const http::Request& q, http::Response& r) { d->front->handle(q, r); });
}

Router::~Router() {
    d_->http.reset();
}

Result<int> Router::listen() {
    auto t = agent::ToolService::create(d_->cfg.tools, [this](const std::string& line) { d_->log("%s", line.c_str()); });
    if (!t) return Result<int>::fail(t.error());
    d_->tools = std::move(*t);
    auto port = d_->http->listen();
    if (!port) return port;
    {
        std::lock_guard<std::mutex> lk(d_->mu);
        std::string ids;
        for (const RouterModel& m : d_->models)
            if (!m.hidden) ids += (ids.empty() ? "" : ", ") + m.id;
        d_->log("%zu model(s): %s; at most %d running%s", d_->models.size(), ids.empty() ? "(none)" : ids.c_str(),
                d_->cfg.models_max, d_->cfg.autoload ? "" : "; loaded only by POST /models/load");
    }
    return port;
}

int Router::run() {
    d_->preload();
    d_->http->run();
    return 0;
}

void Router::stop() {
    if (d_->tools) d_->tools->stop();
    d_->http->stop();
}

}  // namespace edgellm::server
