#include "server/http/front.h"

#include <cstdio>
#include <optional>

#include "server/http/respond.h"

namespace edgellm::server {

bool Route::matches(const std::string& m, const std::string& p) const {
    const bool method_ok = method == "*" || method == m || (method == "GET" && m == "HEAD");
    if (!method_ok) return false;
    if (!path.empty() && path.back() == '*') return p.compare(0, path.size() - 1, path, 0, path.size() - 1) == 0;
    return p == path;
}

Front::Front(FrontOptions opt, std::vector<Route> routes, Handler fallback)
    : opt_(std::move(opt)), routes_(std::move(routes)), fallback_(std::move(fallback)) {}

const Route* Front::find(const std::string& method, const std::string& path) const {
    for (const Route& r : routes_)
        if (r.matches(method, path)) return &r;
    return nullptr;
}

bool Front::authorized(const http::Request& req) const {
    return api_key_matches(opt_.api_keys, req.header("authorization"), req.header("x-api-key"));
}

std::string Front::refusal(const http::Request& req, bool admin) const {
    const std::string* host = req.header("host");
    std::string why, what, key;
    if (!host_allowed(opt_.hosts, host, req.local_addr, &why)) {
        what = "Host " + *host;
        const std::string name = authority_host(*host);
        key = "Host " + (name.empty() ? *host : name);  // (any port: one line)
    } else if (const std::string* origin = req.header("origin"); !origin_allowed(opt_.cors, origin, host, admin)) {
        what = key = "Origin " + *origin;
        why = "a page of origin " + *origin + " may not act on this server (--cors-origins)";
    } else {
        return "";
    }
    if (opt_.log) {  // once per name: a page may retry in a loop
        std::lock_guard<std::mutex> lk(refused_mu_);
        if (refused_.size() < 256 && refused_.insert(key).second)
            opt_.log("refused " + what + " from " + req.remote_addr + ": " + why);
    }
    return why;
}

void Front::handle(const http::Request& req_in, http::Response& res) const {
    const auto t0 = std::chrono::steady_clock::now();
    // CORS, decided once for every answer to this request (a preflight needs no key).
    for (auto& [name, value] : cors_headers(opt_.cors, req_in.header("origin"), req_in.method == "OPTIONS"))
        res.add_header(name, value);
    // --api-prefix: every route lives under it; anything else is not found.
    std::string target = req_in.target;
    std::optional<http::Request> stripped;
    if (!opt_.api_prefix.empty()) {
        const std::string& pre = opt_.api_prefix;
        if (req_in.path.rfind(pre, 0) != 0 || (req_in.path.size() > pre.size() && req_in.path[pre.size()] != '/'))
            return respond_error(res, {404, "not_found_error", "File Not Found (the routes are under " + pre + ")", {}});
        if (req_in.path.size() == pre.size() && is_get(req_in))
            // PREFIX -> PREFIX/: the chat page's relative URLs then resolve under the prefix
            return res.send(308, "text/plain", "", {{"Location", pre + "/"}});
        stripped = req_in;
        stripped->path = req_in.path.size() == pre.size() ? "/" : req_in.path.substr(pre.size());
        target = target.size() > pre.size() ? target.substr(pre.size()) : "/";
        if (target.empty() || target[0] != '/') target = "/" + target;
    }
    const http::Request& req = stripped ? *stripped : req_in;
    std::string extra;
    Call call{req, res, target, &extra};
    const Route* route = req.method == "OPTIONS" ? nullptr : find(req.method, req.path);
    std::string refused;
    const bool admin = route && (route->flags & kAdmin);
    if (req.method != "OPTIONS" && (opt_.guard_all || admin)) refused = refusal(req, admin);
    if (req.method == "OPTIONS") {
        res.send(200, "text/html", "");  // a CORS preflight: its headers are on already
    } else if (!refused.empty()) {
        respond_error(res, {403, "permission_error", refused, {}});
    } else if ((!route || !(route->flags & kPublic)) && !authorized(req)) {
        respond_error(res, {401, "authentication_error", "Invalid API Key", {}});
    } else if (!route) {
        if (fallback_)
            fallback_(call);
        else
            respond_error(res, {404, "not_found_error", "File Not Found", {}});
    } else if (around_) {
        around_(*route, call, route->handler);
    } else {
        route->handler(call);
    }
    if (!opt_.log || (route && (route->flags & kQuiet))) return;
    const std::string status = res.status() ? std::to_string(res.status()) : "(no answer)";
    char ms[32];
    std::snprintf(ms, sizeof ms, " | %.1f ms",
                  std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    opt_.log(req.method + " " + req.path + " " + status + extra + ms);
}

}  // namespace edgellm::server
