// Who may call: the names the server answers to (the Host check against DNS rebinding),
// cross-origin requests from browsers (CORS, as llama-server answers them) and the API key.
// Pure functions of the request's headers (unit-tested).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "edgellm/http.h"

namespace edgellm::server {

// The CORS headers for a request with this Origin header (nullptr: none sent); a
// preflight (OPTIONS) also gets the allowed credentials, methods and headers.
std::vector<std::pair<std::string, std::string>> cors_headers(const CorsPolicy& p,
                                                             const std::string* origin,
                                                             bool preflight);
bool origin_is_localhost(std::string_view origin);

// The names a request's Host may give (DNS rebinding: a web page that points its own name at
// this machine is same-origin to the browser and passes every CORS rule, but its requests
// still carry its own name in Host).
struct HostPolicy {
    bool any = false;                // --allowed-hosts * (the operator's explicit opt-out)
    std::vector<std::string> names;  // lower-case, without port or brackets
};
// From --host (comma-separated; wildcards such as 0.0.0.0 name nothing) and --allowed-hosts
// (comma-separated names or addresses, "*" for any; a port or brackets are ignored).
HostPolicy host_policy(const std::string& listen_hosts, const std::string& allowed_hosts);

// The host of a Host header or URL authority: lower-case, without the port, an IPv6 literal
// without its brackets, a trailing dot dropped. Empty when it is not one (a bad port, a
// bracket left open, a character no host name has).
std::string authority_host(std::string_view authority);

// True when `host_header` names this server: a loopback name or address (localhost,
// 127.0.0.0/8, ::1), one of the policy's names, or the address the connection reached
// (`local_addr`: an address literal cannot be rebound). A request without Host (HTTP/1.0, not
// a browser) passes. *why: the reason of a refusal.
bool host_allowed(const HostPolicy& p, const std::string* host_header, const std::string& local_addr,
                  std::string* why);

// True when a browser's Origin may act here: no Origin (not a browser, or a same-origin GET),
// the page's own origin (its host and port are the request's Host), or one the CORS policy
// allows. A page of another origin can still send a "simple" POST that CORS never stops
// (cross-site request forgery): the routes that act on the machine refuse it with this.
// `admin`: a route that acts on the machine or on what is served, where "*" (the default,
// any page may chat) stands for localhost pages only: another site administers nothing
// unless --cors-origins names it.
bool origin_allowed(const CorsPolicy& p, const std::string* origin, const std::string* host_header,
                    bool admin);

// --api-key: true when `keys` is empty or the request's "Authorization: Bearer KEY" (else
// its x-api-key header) is one of them, compared in full (the time taken does not tell how
// much of a key matched).
bool api_key_matches(const std::vector<std::string>& keys, const std::string* authorization,
                     const std::string* x_api_key);

}  // namespace edgellm::server
