// How `edgellm serve` (and its router) listen and whom they answer: the HTTP listener's
// options and the CORS policy, as the command line sets them (apps/edgellm/options/).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <utility>

namespace edgellm::http {

struct Options {
    std::string host = "127.0.0.1";      // IPv4 dotted, "0.0.0.0", "localhost", IPv6 ("::", "::1"),
                                         // or several, comma-separated ("127.0.0.1,::1")
    int port = 8080;                     // 0: pick a free port (listen() reports it)
    size_t max_body_bytes = 8 << 20;     // larger declared or chunked body: 413
    size_t max_header_bytes = 64 << 10;  // request line + headers (and chunk trailers): 431
    int max_header_count = 256;          // more header lines: 431
    int max_connections = 64;            // the next concurrent connection gets 503 and closes
    int idle_timeout_ms = 30000;         // keep-alive connection with no new request byte: closed
    int read_timeout_ms = 30000;   // a started request must arrive completely: else 408, closed
    int write_timeout_ms = 30000;  // a write blocked this long (client not reading): closed
    // Body of the errors the transport answers by itself (400, 408, 413, 431, 500, 501, 503,
    // 505): (status, message) -> (content_type, body). Empty: default_error_body.
    std::function<std::pair<std::string, std::string>(int status, const std::string& message)>
        error_body;
};

}  // namespace edgellm::http

namespace edgellm::server {

// Cross-origin requests from browsers, as llama-server answers them (--cors-origins,
// --cors-methods, --cors-headers, --cors-credentials).
struct CorsPolicy {
    // "*": any origin (echoed back when credentials are allowed, as a browser requires);
    // "localhost": only http(s)://localhost, 127.0.0.1 or [::1] with any port, echoed;
    // else a comma-separated list of origins, the request's echoed when it is listed.
    std::string origins = "*";
    std::string methods = "GET, POST, DELETE, OPTIONS";
    std::string headers = "*";
    bool credentials = true;
};

}  // namespace edgellm::server
