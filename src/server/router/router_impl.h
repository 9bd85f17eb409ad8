// The router's inside: its state, and its member functions grouped by the file that
// defines them. Nothing outside src/server/router/ includes this.
//
//   catalogue.cpp  the models it can start: the model directory, --models-dir, a
//                  --models-preset file, llama.cpp's Hugging Face cache (scan_router_models)
//   children.cpp   the model servers: spawning them (from one long-lived thread), their log
//                  readers and health polls, eviction, acquire / release, the preload
//   routes.cpp     the route table, forwarding to a model's server, the resumable stream
//                  routes, list / load / unload / reload of models, props
//   router.cpp     the public class: the front over the transport, listen, run, stop
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "server/http/front.h"
#include "server/http/respond.h"
#include "agent/cors_proxy.h"
#include "agent/tool_service.h"
#include "edgellm/server.h"
#include "server/api/api.h"
#include "server/http/access.h"
#include "server/http/transport.h"

namespace edgellm::server {

namespace router_detail {

// "name.gguf" and "name" are the same model.
std::string bare_id(const std::string& id);
// A preset value (or ?reload=) that means yes: 1, true, on, yes, in any case.
bool truthy(const std::string& v);

}  // namespace router_detail

struct Router::Impl {
    RouterConfig cfg;
    std::unique_ptr<Front> front;
    std::unique_ptr<http::Server> http;
    std::atomic<int> port{0};  // the port listened on (the CORS proxy never reaches it)
    std::unique_ptr<agent::ToolService> tools;

    enum class State { Unloaded, Loading, Loaded, Unloading, Failed };
    static const char* state_name(State s);  // (routes.cpp)
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
        std::vector<std::string> env;
        int out_fd = -1;
        pid_t pid = -1;
        int err = 0;
        bool done = false;
    };
    std::deque<SpawnJob*> spawn_jobs;
    // The key every child requires (given in its environment, $EDGELLM_API_KEY, not in `ps`),
    // fresh for each router: the router's front answers for the client's key, and a page or
    // a process that finds a child's loopback port cannot use it past the router.
    const std::string child_key = random_child_key();
    std::vector<std::pair<std::string, std::string>> child_auth() const {
        return {{"authorization", "Bearer " + child_key}};
    }
    static std::string random_child_key();
    std::thread spawner;
    bool spawner_stop = false;

    // LLAMA_SERVER_DEBUG_FAKE_TIMING (a test hook of llama-server's router that its test suite
    // sets): each load and each forwarded request first waits 2 s, so the suite's
    // scheduling tests (busy models, queued requests) see the same races on any machine.
    const bool fake_timing = [] {
        const char* v = std::getenv("LLAMA_SERVER_DEBUG_FAKE_TIMING");
        return v && *v;
    }();

    // ---- router.cpp ----

    explicit Impl(RouterConfig c);  // scans the models, starts the spawner thread
    ~Impl();                        // stops every child, then the spawner
    void log(const char* fmt, ...) __attribute__((format(printf, 2, 3)));

    // ---- children.cpp: the children ----

    void spawn_loop();

    // The child: stdin /dev/null, stdout and stderr into one pipe (read by reader()), in our
    // process group, SIGTERM when the router ends; a failed exec is in its log, status 127.
    static void do_spawn(SpawnJob* job);

    pid_t spawn(std::vector<std::string> argv, int* out_fd, std::string* why);

    // Reads a child's log: each line to our stderr as "[ID] line", the port from its
    // "listening on" line; at the end reaps it.
    void reader(std::string id, pid_t pid, int fd);

    // Starts the child (the caller has made room and holds `lk`); the load goes on in the
    // background and ends in Loaded or Failed.
    void start_load(std::unique_lock<std::mutex>& lk, const RouterModel& m);

    // Polls the child's /health until it answers 200 (Loaded), it dies, or the load times out.
    void await_health(std::string id, pid_t pid);

    // SIGTERM (SIGKILL for a child still loading: it has nothing to finish), then SIGKILL
    // after 10 s; returns once the child is reaped (or 20 s passed).
    void stop_child(const std::string& id, const char* why, bool loading = false);

    int running_count();

    // What gives up its place: a model started at start-up that nobody has asked for yet (even
    // while it loads), else the least recently used loaded model nobody is using (not
    // `except`), else "".
    std::string idle_victim(const std::string& except);

    // Makes `m` loaded (or loading, when !wait_loaded): waits in the FIFO queue for room,
    // evicting an idle model when --models-max are running. On success with wait_loaded the
    // instance's busy count is raised (the caller lowers it) and its port returned.
    // `abandoned` (called under mu): the wait ends without the model (a stopped stream).
    Result<int> acquire(const RouterModel& m, bool wait_loaded, http::Response* res, bool asked = true,
                        const std::function<bool()>& abandoned = {});
    void release(const std::string& id);

    // The default model (and the preset's load-on-startup ones) start loading at once.
    void preload();

    // ---- routes.cpp: HTTP ----

    static void send_json(http::Response& res, int status, const json& j) { respond_json(res, status, j); }
    static void send_error(http::Response& res, const ApiError& e) { respond_error(res, e); }

    const RouterModel* find_model(const std::string& name);
    const RouterModel* default_model();
    std::string known_ids();
    json model_json(const RouterModel& m);
    void list_models(http::Response& res);
    void reload_models();

    // The model a request names: the body's "model" (POST) or ?model= (GET); none: the default.
    const RouterModel* requested(const http::Request& req, ApiError* err);

    void models_load_unload(bool load, const http::Request& req, http::Response& res, std::string* extra);

    // The request as it came, to the child on `port`; its answer back as it arrives.
    // detached (a resumable stream): the child's answer is read to its end even when the
    // client has gone, so its session gets the whole reply.
    void forward(const http::Request& req, const std::string& target, http::Response& res, int port,
                 const std::string& model_id, std::string* extra, bool detached = false);

    // The resumable stream routes, to the model each conversation went to.
    void stream_route(const http::Request& req, const std::string& target, http::Response& res, std::string* extra);

    void props(http::Response& res);

    // The router's route table (its own routes; anything else goes to a model: forward_call).
    std::vector<Route> routes();

    // Any other request: to the model it names (started first when autoload allows).
    void forward_call(Call& c);
};

}  // namespace edgellm::server
