// How `edgellm serve` (and its router) listen and whom they answer: the HTTP listener's
// options and the CORS policy, as the command line sets them (apps/edgellm/options/).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <utility>

namespace edgellm::http {

// A limit of Options that refused a request or a connection (the flag that sets it in
// brackets).
enum class Limit {
    HeaderBytes,  // max_header_bytes (--max-header-bytes): 431
    HeaderCount,  // max_header_count (--max-header-count): 431
    BodyBytes,    // max_body_bytes (--max-body-bytes): 413
    HeaderTime,   // header_timeout_ms (--header-timeout): 408
    BodyTime,     // body_timeout_ms (--body-timeout): 408
    ReadTime,     // read_timeout_ms (--timeout): 408
    Connections,  // max_connections (--max-connections): 503 with Retry-After
    Threads,      // the system gave no thread for a connection: 503 with Retry-After
};

// What Options::on_refusal is told: who was refused, by which limit, and the message the
// client got.
struct Refusal {
    std::string peer;  // "10.0.0.5", "::1"
    int status = 0;    // 408, 413, 431 or 503
    Limit limit = Limit::HeaderBytes;
    std::string message;  // "request head larger than 32768 bytes"
};

// The defaults are `edgellm serve`'s (docs/commands.md, "Limits", says why each).
struct Options {
    std::string host = "127.0.0.1";      // IPv4 dotted, "0.0.0.0", "localhost", IPv6 ("::", "::1"),
                                         // or several, comma-separated ("127.0.0.1,::1")
    int port = 8080;                     // 0: pick a free port (listen() reports it)
    size_t max_body_bytes = 8 << 20;     // larger declared or chunked body: 413
    size_t max_header_bytes = 32 << 10;  // request line + headers (and chunk trailers): 431
    int max_header_count = 100;          // more header lines: 431
    int max_connections = 64;            // the next concurrent connection: 503, Retry-After, closed
    // Deadlines, each from a fixed point (bytes trickled one at a time do not extend them):
    int header_timeout_ms = 10000;  // the whole head, from the connection's opening (its first
                                    // request) or the request's first byte: else 408, closed
    int body_timeout_ms = 60000;    // the whole body, from the end of the head: else 408, closed
    int idle_timeout_ms = 30000;    // a kept-alive connection waits this long for the next request
    // llama-server's -to: the longest any one wait of a request's read (408, closed) or of a
    // write (closed; the client stopped reading) may take. Within the deadlines above: the
    // first to run out ends the request.
    int read_timeout_ms = 600000;
    int write_timeout_ms = 600000;
    // Body of the errors the transport answers by itself (400, 408, 413, 431, 500, 501, 503,
    // 505): (status, message) -> (content_type, body). Empty: default_error_body.
    std::function<std::pair<std::string, std::string>(int status, const std::string& message)>
        error_body;
    // Told of every request or connection refused by a limit (408, 413, 431, 503), once, on
    // the connection's thread or the accept loop: for the log. Empty: nobody is told.
    std::function<void(const Refusal&)> on_refusal;
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
