#include "agent/tool_service.h"

#include <nlohmann/json.hpp>

#include "edgellm/client.h"
#include "server/http/errors.h"
#include "server/http/disconnect_watch.h"
#include "server/http/respond.h"

namespace edgellm::agent {

using server::DisconnectWatch;
using server::respond_error;
using server::respond_json;

namespace {

void send_json(http::Response& res, int status, const json& j) { respond_json(res, status, j); }
void send_error(http::Response& res, const ApiError& e) { respond_error(res, e); }

}  // namespace

Result<std::unique_ptr<ToolService>> ToolService::create(const ToolConfig& cfg,
                                                         std::function<void(const std::string&)> log) {
    using R = Result<std::unique_ptr<ToolService>>;
    std::unique_ptr<ToolService> s(new ToolService);
    if (!cfg.tools.empty() || !cfg.runtime.empty()) {
        auto t = BuiltinTools::create(cfg.tools, cfg.runtime);
        if (!t) return R::fail(t.error());
        if (!(*t)->empty()) s->builtin_ = std::move(*t);
    }
    if (!cfg.mcp_config_path.empty() || !cfg.mcp_json.empty()) {
        std::vector<std::string> warnings;
        auto servers = load_mcp_config(cfg.mcp_config_path, cfg.mcp_json, &warnings);
        if (!servers) return R::fail(servers.error());
        for (const std::string& w : warnings) log("MCP: " + w);
        McpOptions o;
        o.log = log;
        s->mcp_ = std::make_unique<McpClients>(std::move(*servers), o);
        for (const McpServerStatus& st : s->mcp_->servers())
            log("MCP server " + st.name + ": " + (st.error.empty() ? std::to_string(st.n_tools) + " tools" : st.error));
    }
    if (!s->builtin_ && !s->mcp_) return std::unique_ptr<ToolService>();
    log("tools: " + std::to_string(s->builtin_ ? s->builtin_->list().size() : 0) + " built-in" +
        (cfg.runtime.empty() ? "" : " (runtime " + cfg.runtime + ")") + ", " +
        std::to_string(s->mcp_ ? s->mcp_->list().size() : 0) + " from MCP servers; CORS origins " + cfg.cors_origins);
    return s;
}

ToolService::~ToolService() { stop(); }

void ToolService::stop() {
    if (mcp_) mcp_->shutdown();
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    for (std::atomic<bool>* f : in_flight_) f->store(true);
}

void ToolService::route(ToolService* tools, const http::Request& req, http::Response& res, std::string* log_extra) {
    if (!tools)
        return send_error(res, {403, "permission_error", "no tools: start the server with --tools or MCP servers", {}});
    if (req.method == "GET" || req.method == "HEAD") return tools->get(res);
    if (req.method == "POST") return tools->post(req, res, log_extra);
    send_error(res, {405, "invalid_request_error", "use GET or POST", {}});
}

void ToolService::get(http::Response& res) {
    json all = builtin_ ? builtin_->list() : json::array();
    if (mcp_)
        for (const json& t : mcp_->list()) all.push_back(t);
    send_json(res, 200, all);
}

void ToolService::post(const http::Request& req, http::Response& res, std::string* log_extra) {
    const json body = json::parse(req.body, nullptr, false);
    if (!body.is_object()) return send_error(res, bad_request("the request body must be a JSON object"));
    if (!body.contains("tool") || !body["tool"].is_string())
        return send_error(res, bad_request("\"tool\" must be a string: the name of a tool from GET /tools"));
    const std::string name = body["tool"];
    const json params = body.contains("params") ? body["params"] : json::object();
    if (body.contains("stream") && !body["stream"].is_boolean())
        return send_error(res, bad_request("stream must be true or false"));
    const bool stream = body.value("stream", false);
    *log_extra = " | tool " + name;
    std::atomic<bool> cancel{false};
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) return send_error(res, {503, "unavailable_error", "the server is stopping", {}});
        in_flight_.insert(&cancel);
    }
    struct Unregister {
        ToolService* s;
        std::atomic<bool>* f;
        ~Unregister() {
            std::lock_guard<std::mutex> lock(s->mu_);
            s->in_flight_.erase(f);
        }
    } unregister{this, &cancel};
    DisconnectWatch watch(res, cancel);
    json result;
    std::optional<ApiError> err;
    if (builtin_ && builtin_->has(name)) {
        BuiltinToolCall c;
        c.name = name;
        c.params = params;
        auto header = [&](const char* h) { const std::string* v = req.header(h); return v ? *v : std::string(); };
        c.cwd = header("x-tool-cwd");
        c.runtime = header("x-tool-runtime");
        c.resp_type = header("x-resp-type");
        c.cancel = &cancel;
        bool started = false;
        std::function<bool(const json&)> on_event;
        if (stream)
            on_event = [&](const json& ev) {
                if (!started) {
                    started = true;
                    if (!res.begin_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}})) return false;
                }
                return res.write("data: " + ev.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n");
            };
        err = builtin_->call(c, &result, on_event);
        if (started) {
            res.end_stream();
            return;
        }
    } else if (mcp_ && mcp_->has(name)) {
        if (stream) return send_error(res, {404, "not_found_error", "tool \"" + name + "\" does not support stream = true", {}});
        err = mcp_->call(name, params, &result, &cancel);
    } else {
        return send_error(res, {404, "not_found_error", "unknown tool \"" + name + "\" (GET /tools lists them)", {}});
    }
    if (err) return send_error(res, *err);
    if (result.is_object() && result.contains("error")) *log_extra += " | error";
    send_json(res, 200, result);
}

void forward_cors_proxy(const http::Request& req, http::Response& res, std::string* log_extra) {
    const auto it = req.query.find("url");
    if (it == req.query.end() || it->second.empty())
        return send_error(res, bad_request("give ?url=http://HOST[:PORT]/PATH"));
    const std::string& url = it->second;
    if (url.rfind("https://", 0) == 0)
        return send_error(res, bad_request("the proxy speaks plain HTTP only (no TLS here): " + url));
    if (url.rfind("http://", 0) != 0) return send_error(res, bad_request("not an http:// URL: " + url));
    const size_t slash = url.find('/', 7);
    const std::string base = slash == std::string::npos ? url : url.substr(0, slash);
    const std::string path = slash == std::string::npos ? "/" : url.substr(slash);
    std::vector<std::pair<std::string, std::string>> headers;
    const std::string prefix = "x-llama-server-proxy-header-";
    std::string content_type = "application/json";
    for (const auto& [name, value] : req.headers) {
        if (name.rfind(prefix, 0) == 0 && name.size() > prefix.size())
            headers.emplace_back(name.substr(prefix.size()), value);
        if (name == "content-type") content_type = value;
    }
    client::Timeouts t;
    t.connect_ms = 5000;
    t.total_ms = 60000;
    client::HttpResult r = client::http_request(client::Endpoint(base), req.method, path, req.body, t, {},
                                                nullptr, content_type, headers);
    *log_extra = " | " + req.method + " " + url + " -> " + std::to_string(r.status);
    if (r.status == 0)
        return send_error(res, {502, "proxy_error", "the proxy could not reach " + url + ": " + r.error, {}});
    std::string type;
    for (const auto& [name, value] : r.headers)
        if (name == "content-type") type = value;
    res.send(r.status, type, r.body);
}

}  // namespace edgellm::agent
