// The router's public class: the front (CORS, the API key, the access log) over the HTTP
// transport, with the route table of routes.cpp; see edgellm/server.h for what the router does and
// router_impl.h for where each part lives.
#include <cstdarg>
#include <cstdio>

#include "server/http/refusal_log.h"
#include "server/router/router_impl.h"
#include "sys/strings.h"

namespace edgellm::server {

Router::Impl::Impl(RouterConfig c) : cfg(std::move(c)) {
    std::vector<std::string> warnings;
    models = scan_router_models(cfg, &warnings);
    for (const std::string& w : warnings) log("warning: %s", w.c_str());
    spawner = std::thread([this] { spawn_loop(); });
}

Router::Impl::~Impl() {
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

void Router::Impl::log(const char* fmt, ...) {
    if (!cfg.log) return;
    va_list ap;
    va_start(ap, fmt);
    const std::string line = sys::vformat(fmt, ap);
    va_end(ap);
    std::fprintf(stderr, "edgellm router: %s\n", line.c_str());
}

Router::Router(RouterConfig cfg) : d_(std::make_unique<Impl>(std::move(cfg))) {
    FrontOptions fo;
    fo.cors = d_->cfg.cors;
    fo.api_keys = d_->cfg.api_keys;
    fo.api_prefix = d_->cfg.api_prefix;
    fo.hosts = host_policy(d_->cfg.http.host, d_->cfg.allowed_hosts);
    const agent::ToolConfig& t = d_->cfg.tools;
    fo.guard_all = !t.tools.empty() || !t.mcp_config_path.empty() || !t.mcp_json.empty() || d_->cfg.ui_mcp_proxy;
    fo.log = [d = d_.get()](const std::string& line) { d->log("%s", line.c_str()); };
    d_->front = std::make_unique<Front>(std::move(fo), d_->routes(), [d = d_.get()](Call& c) { d->forward_call(c); });
    http::Options o = d_->cfg.http;
    o.on_refusal = refusal_logger([d = d_.get()](const std::string& line) { d->log("%s", line.c_str()); });
    d_->http = std::make_unique<http::Server>(
        o, [d = d_.get()](const http::Request& q, http::Response& r) { d->front->handle(q, r); });
}

Router::~Router() {
    d_->http.reset();
}

std::string Router::start_tools() {
    auto t = agent::ToolService::create(d_->cfg.tools, [this](const std::string& line) { d_->log("%s", line.c_str()); });
    if (!t) return t.error();
    d_->tools = std::move(*t);
    return "";
}

Result<int> Router::listen() {
    auto port = d_->http->listen();
    if (!port) return port;
    d_->port = *port;
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
