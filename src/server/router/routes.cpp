// The router's HTTP side: its route table, and every other request forwarded to the model
// it names (streams pass through as they come); the resumable stream routes, the model list,
// load / unload / reload, props.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "edgellm/client.h"
#include "server/api/webui.h"
#include "server/router/router_impl.h"

namespace edgellm::server {

using router_detail::bare_id;
using router_detail::truthy;

namespace {

// A model server's answer headers as the router passes them on: its content type into
// *type, and neither its framing (ours frames the answer anew) nor its CORS headers (our
// front answers CORS).
http::HeaderList passed_on(const http::HeaderList& headers, std::string* type) {
    http::HeaderList hs;
    for (const auto& [k, v] : headers) {
        if (k == "content-type") *type = v;
        else if (k != "transfer-encoding" && k != "content-length" && k != "connection" &&
                 k.rfind("access-control-", 0) != 0)
            hs.emplace_back(k, v);
    }
    return hs;
}

}  // namespace

const char* Router::Impl::state_name(State s) {
    switch (s) {
        case State::Unloaded: return "unloaded";
        case State::Loading: return "loading";
        case State::Loaded: return "loaded";
        case State::Unloading: return "unloading";
        case State::Failed: return "failed";
    }
    return "?";
}

const RouterModel* Router::Impl::find_model(const std::string& name) {
    const std::string want = bare_id(name);
    for (const RouterModel& m : models)
        if (bare_id(m.id) == want) return &m;
    return nullptr;
}

const RouterModel* Router::Impl::default_model() {
    if (cfg.default_model.empty()) return nullptr;
    for (const RouterModel& m : models)
        if (m.path == cfg.default_model) return &m;
    return nullptr;
}

std::string Router::Impl::known_ids() {
    std::string s;
    for (const RouterModel& m : models)
        if (!m.hidden) s += (s.empty() ? "" : ", ") + m.id;
    return s.empty() ? "none: put GGUF files in --models-dir or name them in --models-preset" : s;
}

json Router::Impl::model_json(const RouterModel& m) {
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

void Router::Impl::list_models(http::Response& res) {
    json data = json::array();
    std::lock_guard<std::mutex> lk(mu);
    // the default model first (a client that takes the first id gets it)
    const RouterModel* def = default_model();
    if (def && !def->hidden) data.push_back(model_json(*def));
    for (const RouterModel& m : models)
        if (!m.hidden && &m != def) data.push_back(model_json(m));
    send_json(res, 200, {{"object", "list"}, {"data", data}});
}

void Router::Impl::reload_models() {
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

const RouterModel* Router::Impl::requested(const http::Request& req, ApiError* err) {
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

void Router::Impl::models_load_unload(bool load, const http::Request& req, http::Response& res, std::string* extra) {
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

void Router::Impl::forward(const http::Request& req, const std::string& target, http::Response& res, int port,
                           const std::string& model_id, std::string* extra, bool detached) {
    client::Timeouts t;
    t.connect_ms = 5000;
    t.first_token_ms = 24 * 3600 * 1000;
    t.total_ms = 24 * 3600 * 1000;
    std::vector<std::pair<std::string, std::string>> headers;
    std::string content_type = "application/json";
    for (const auto& [name, value] : req.headers) {
        // (the client's key was the router's to check: the child takes the router's own)
        if (name == "host" || name == "content-length" || name == "transfer-encoding" || name == "connection" ||
            name == "expect" || name == "keep-alive" || name == "upgrade" || name == "te" || name == "accept" ||
            name == "authorization" || name == "x-api-key")
            continue;
        if (name == "content-type") {
            content_type = value;
            continue;
        }
        headers.emplace_back(name, value);
    }
    if (const std::string* a = req.header("accept")) headers.emplace_back("accept", *a);
    for (auto& h : child_auth()) headers.push_back(std::move(h));
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
            const http::HeaderList hs = passed_on(c.headers, &type);
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
        const http::HeaderList hs = passed_on(r.headers, &type);
        res.send(r.status, type, collected.empty() ? r.body : collected, hs);
    }
    *extra += " -> " + std::to_string(r.status);
}

void Router::Impl::stream_route(const http::Request& req, const std::string& target, http::Response& res, std::string* extra) {
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
                                          "/v1/streams/lookup", json{{"conversation_ids", ids}}.dump(), t, {},
                                          nullptr, "application/json", child_auth());
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
                                       "", t, {}, nullptr, "application/json", child_auth());
        }
        return res.send(204, "application/json", "");
    }
    if (req.method != "GET" && req.method != "HEAD") return send_error(res, {405, "invalid_request_error", "use GET or DELETE", {}});
    if (port) return forward(req, target, res, port, "", extra);
    if (loading) return send_error(res, {503, "unavailable_error", "Stream owner model is loading, retry later", {}});
    send_error(res, {404, "not_found_error", "Stream not found or expired", {}});
}

void Router::Impl::props(http::Response& res) {
    std::lock_guard<std::mutex> lk(mu);
    const RouterModel* d = default_model();
    send_json(res, 200, {{"role", "router"},
                         {"max_instances", cfg.models_max},
                         {"models_autoload", cfg.autoload},
                         {"default_model", d ? json(d->id) : json(nullptr)},
                         {"build_info", build_info()}});
}

std::vector<Route> Router::Impl::routes() {
    std::vector<Route> t;
    auto add = [&t](const char* method, std::initializer_list<std::string> paths, unsigned flags,
                    const Handler& h) {
        for (const std::string& p : paths) t.push_back({method, p, flags, Needs::Nothing, h});
    };
    add("*", {"/health", "/v1/health"}, kPublic | kQuiet, [](Call& c) {
        // (as the server answers it: GET only)
        if (!is_get(c.req)) return send_error(c.res, {405, "invalid_request_error", "use GET", {}});
        send_json(c.res, 200, {{"status", "ok"}});
    });
    add("GET", {"/", "/index.html"}, kPublic, webui_handler(cfg.webui));
    add("GET", {"/models", "/v1/models"}, kQuiet, [this](Call& c) {
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
    add("POST", {"/models/load"}, kAdmin, [this](Call& c) { models_load_unload(true, c.req, c.res, c.log_extra); });
    add("POST", {"/models/unload"}, kAdmin, [this](Call& c) { models_load_unload(false, c.req, c.res, c.log_extra); });
    add("POST", {"/models/reload"}, kAdmin, [this](Call& c) {
        reload_models();
        send_json(c.res, 200, {{"success", true}});
    });
    add("GET", {"/props"}, kNone, [this](Call& c) {
        if (c.req.query.count("model")) return forward_call(c);  // that model's own /props
        props(c.res);
    });
    add("*", {"/tools"}, kAdmin,
        [this](Call& c) { agent::ToolService::route(tools.get(), c.req, c.res, c.log_extra); });
    add("*", {"/v1/stream", "/v1/streams/lookup"}, kNone,
        [this](Call& c) { stream_route(c.req, c.target, c.res, c.log_extra); });
    add("*", {"/cors-proxy"}, kAdmin, [this](Call& c) {
        if (!cfg.ui_mcp_proxy)
            return send_error(c.res, {403, "permission_error", "the CORS proxy is off (--ui-mcp-proxy turns it on)", {}});
        agent::forward_cors_proxy(c.req, c.res, c.log_extra, port);
    });
    // a model's own admin routes, forwarded as any other path but checked as admin here (the
    // model's server sees the router's loopback Host)
    add("*", {"/slots", "/slots/*", "/lora-adapters"}, kAdmin, [this](Call& c) { forward_call(c); });
    return t;
}

void Router::Impl::forward_call(Call& c) {
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

}  // namespace edgellm::server
