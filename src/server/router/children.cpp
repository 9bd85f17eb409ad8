// The router's children, one `edgellm serve` per loaded model: started from the spawner
// thread, their logs read, their health polled until they are up, stopped, evicted for
// room; acquire() and release() around every forwarded request.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <regex>

#include "edgellm/client.h"
#include "server/router/router_impl.h"
#include "sys/subprocess.h"

namespace edgellm::server {

using Clock = std::chrono::steady_clock;

namespace {

int64_t now_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch()).count();
}

}  // namespace

std::string Router::Impl::random_child_key() {
    std::random_device rd;  // (getrandom)
    std::string key = "edgellm-router-";
    for (int i = 0; i < 8; ++i) {
        char hex[9];
        std::snprintf(hex, sizeof hex, "%08x", (unsigned)rd());
        key += hex;
    }
    return key;
}

void Router::Impl::spawn_loop() {
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

void Router::Impl::do_spawn(SpawnJob* job) {
    sys::SpawnSpec s;
    s.argv = std::move(job->argv);
    s.env = std::move(job->env);
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

pid_t Router::Impl::spawn(std::vector<std::string> argv, int* out_fd, std::string* why) {
    SpawnJob job;
    job.argv = std::move(argv);
    job.env = sys::environment_with({{"EDGELLM_API_KEY", child_key}});
    std::unique_lock<std::mutex> lk(spawn_mu);
    spawn_jobs.push_back(&job);
    spawn_cv.notify_all();
    spawn_cv.wait(lk, [&] { return job.done; });
    if (job.pid < 0) *why = std::string("cannot start a child: ") + std::strerror(job.err);
    *out_fd = job.out_fd;
    return job.pid;
}

void Router::Impl::reader(std::string id, pid_t pid, int fd) {
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

void Router::Impl::start_load(std::unique_lock<std::mutex>& lk, const RouterModel& m) {
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

void Router::Impl::await_health(std::string id, pid_t pid) {
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

void Router::Impl::stop_child(const std::string& id, const char* why, bool loading) {
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

int Router::Impl::running_count() {
    int n = 0;
    for (auto& [id, in] : inst)
        if (in.state == State::Loading || in.state == State::Loaded || in.state == State::Unloading) ++n;
    return n;
}

std::string Router::Impl::idle_victim(const std::string& except) {
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

Result<int> Router::Impl::acquire(const RouterModel& m, bool wait_loaded, http::Response* res, bool asked,
                                  const std::function<bool()>& abandoned) {
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

void Router::Impl::release(const std::string& id) {
    {
        std::lock_guard<std::mutex> lk(mu);
        Instance& in = inst[id];
        if (in.busy > 0) --in.busy;
        in.last_used = now_ms();
    }
    cv.notify_all();
}

void Router::Impl::preload() {
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

}  // namespace edgellm::server
