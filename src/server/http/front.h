// The HTTP front: what every request goes through before its handler, the same for the
// single-model server and the router. CORS headers on every answer, --api-prefix, the Host
// and Origin checks (DNS rebinding, cross-site requests), the API key (but for the public
// routes), the route table, and one access-log line per request with its time.
//
// Adding an endpoint is one row in a table of Routes (src/server/routes.cpp for the server,
// src/server/router/routes.cpp for the router) and its handler:
//
//     {"POST", "/tokenize", kNone, Needs::AwakeModel, [this](Call& c) { tokenize(c); }},
//
// A request is matched to the first row whose method and path fit; a path that fits no row
// is answered by the table's fallback (a 404, or the router's forwarding to a model), after
// the API key, so an unknown path does not tell a caller without the key what exists.
#pragma once

#include <chrono>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "server/http/access.h"
#include "server/http/errors.h"
#include "server/http/transport.h"

namespace edgellm::server {

// One request on its way through the front.
struct Call {
    const http::Request& req;  // its path without --api-prefix
    http::Response& res;
    // The request target as the client sent it (query included) without --api-prefix: what
    // the router forwards.
    const std::string& target;
    std::string* log_extra;  // appended to the request's access-log line
};

using Handler = std::function<void(Call&)>;

// Flags of a route.
enum RouteFlags : unsigned {
    kNone = 0,
    kPublic = 1u << 0,  // answered without the API key (health, the chat page, the model list)
    kQuiet = 1u << 1,   // left out of the access log (polled by monitors and pages)
    // Acts on the machine or on what the server serves (slots, loading models, LoRA, the
    // tools, the CORS proxy): its Host must name the server and a browser's Origin be its
    // own page's, a localhost page's, or one --cors-origins lists (else 403), whatever else
    // is on.
    kAdmin = 1u << 2,
};

// What a route needs of the model the server hosts (the router's rows need nothing: its
// models run in other processes).
enum class Needs {
    Nothing,     // answered while the model loads, sleeps or is swapped
    Model,       // 503 while the model loads; while it sleeps, answered from what was there
    AwakeModel,  // 503 while the model loads; a sleeping model is loaded again first
    ModelSwap,   // like AwakeModel, but runs outside the request gate (it swaps the model)
};

struct Route {
    // "GET" (HEAD too), "POST", "DELETE", or "*" for any method (the handler answers the
    // methods it does not take, e.g. 405).
    std::string method;
    // An exact path, or a prefix ending in '*' ("/slots/*").
    std::string path;
    unsigned flags = kNone;
    Needs needs = Needs::Nothing;
    Handler handler;

    bool matches(const std::string& method, const std::string& path) const;
};

struct FrontOptions {
    CorsPolicy cors;
    std::vector<std::string> api_keys;
    std::string api_prefix;  // --api-prefix ("/llm"): every route lives under it
    HostPolicy hosts;        // --host, --allowed-hosts
    // Every route is checked as a kAdmin one (tools, MCP or the CORS proxy are on: a page
    // that reaches any route can reach them); else only the kAdmin rows.
    bool guard_all = false;
    // The access log: one line per request but the quiet ones ("POST /tokenize 200 | 1.2 ms").
    // Null: none.
    std::function<void(const std::string& line)> log;
};

class Front {
  public:
    // `fallback` answers a path that fits no row (null: 404 "File Not Found").
    Front(FrontOptions opt, std::vector<Route> routes, Handler fallback = nullptr);

    // Runs around every handler (null: the handler alone): the server's request gate
    // (readiness, sleep, the requests in flight a model swap waits for).
    using Around = std::function<void(const Route& route, Call& call, const Handler& run)>;
    void set_around(Around around) { around_ = std::move(around); }

    // The transport's handler.
    void handle(const http::Request& req, http::Response& res) const;

    const std::vector<Route>& routes() const { return routes_; }
    // The first row for this method and path (null: none).
    const Route* find(const std::string& method, const std::string& path) const;
    bool authorized(const http::Request& req) const;
    // The Host and Origin checks of a guarded request (admin: a kAdmin row's): the refusal's
    // message, or empty.
    std::string refusal(const http::Request& req, bool admin) const;

  private:
    FrontOptions opt_;
    std::vector<Route> routes_;
    Handler fallback_;
    Around around_;
    mutable std::mutex refused_mu_;
    mutable std::set<std::string> refused_;  // the Hosts and Origins refused and logged once
};

// A tiny helper for handlers: the request's method is GET or HEAD.
inline bool is_get(const http::Request& req) { return req.method == "GET" || req.method == "HEAD"; }

}  // namespace edgellm::server
