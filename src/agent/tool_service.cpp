#include "agent/tool_service.h"

#include <unistd.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "agent/confine.h"
#include "agent/shell_limits.h"

#include "server/http/errors.h"
#include "server/http/disconnect_watch.h"
#include "server/http/respond.h"

namespace edgellm::agent {

using server::DisconnectWatch;
using server::respond_error;
using server::respond_json;

namespace {

void send_json(http::Response& res, int status, const json& j) { respond_json(res, status, j); }
void send_error(http::Response& res, const ApiError& e) {
    // (429: a command slot frees within a command's timeout; most end within a second)
    if (e.status == 429)
        return res.send(429, "application/json; charset=utf-8", server::error_body(e), {{"Retry-After", "1"}});
    respond_error(res, e);
}

std::string joined(const std::vector<std::string>& names) {
    std::string out;
    for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
    return out;
}

// "run commands and write files" for the writing tools among names.
std::string writing_actions(const std::vector<std::string>& names) {
    const auto has = [&](const char* n) { return std::find(names.begin(), names.end(), n) != names.end(); };
    const bool run = has("exec_shell_command"), write = has("write_file") || has("edit_file");
    return run && write ? "run commands and write files" : run ? "run commands" : write ? "write files" : "";
}

}  // namespace

std::vector<std::string> writing_builtin_tools(const std::string& tools) {
    auto t = BuiltinTools::create(tools, "");
    return t ? (*t)->writers() : std::vector<std::string>();
}

std::string remote_tools_refusal(const std::vector<std::string>& builtin, const std::vector<std::string>& mcp,
                                 const std::string& runtime, const std::string& host) {
    std::string what, actions = writing_actions(builtin);
    if (!builtin.empty()) what = "--tools " + joined(builtin);
    if (!mcp.empty()) {
        what += (what.empty() ? "" : " and ") + std::string("MCP tools ") + joined(mcp) + " (not declared readOnlyHint)";
        actions += (actions.empty() ? "" : ", and ") + std::string("call tools that may change things");
    }
    return what + " on " + host + " without --api-key would let anyone who reaches the port " + actions + " " +
           (runtime.empty() ? std::string("as this user") : "in " + runtime) +
           "; add --api-key, listen on 127.0.0.1, or say --tools-allow-remote";
}

std::string builtin_tools_exposure(const std::string& tools, const std::string& runtime, const std::string& dir) {
    auto t = BuiltinTools::create(tools, "");
    if (!t || (*t)->empty()) return "";
    std::vector<std::string> names;
    for (const json& entry : (*t)->list()) names.push_back(entry["tool"]);
    const std::string where = runtime.empty() ? " below " + dir : " in " + runtime;
    const std::string actions = writing_actions(names);
    return "read the files" + where + (actions.empty() ? "" : ", " + actions + (runtime.empty() ? " as this user" : "")) +
           " (" + joined(names) + ")";
}

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
    if (!cfg.exposed_on.empty()) {
        const std::vector<std::string> builtin = s->builtin_ ? s->builtin_->writers() : std::vector<std::string>();
        const std::vector<std::string> mcp = s->mcp_ ? s->mcp_->writers() : std::vector<std::string>();
        if (!builtin.empty() || !mcp.empty())
            return R::fail(remote_tools_refusal(builtin, mcp, cfg.runtime, cfg.exposed_on));
    }
    if (s->builtin_ && s->builtin_->runs_commands_here()) {
        // the commands run as our user: keep them out of our /proc/PID/environ and memory
        if (!hide_process_from_same_user())
            log("tools: warning: cannot make this process non-dumpable: exec_shell_command's commands can read its "
                "environment and memory");
        if (::geteuid() == 0)
            log("tools: warning: exec_shell_command runs its commands as root, for whom the kernel enforces no "
                "process limit");
    }
    log("tools: " + std::to_string(s->builtin_ ? s->builtin_->list().size() : 0) + " built-in" +
        (!s->builtin_ ? "" : cfg.runtime.empty() ? " (acting in " + server_dir() + ")" : " (runtime " + cfg.runtime + ")") +
        ", " +
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

}  // namespace edgellm::agent
