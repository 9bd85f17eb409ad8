// HTTP/1.1 transport under `edgellm serve`: a small blocking server with one thread per
// connection, on POSIX sockets and the C++ standard library only. It owns the framing
// (Content-Length and chunked bodies both ways, keep-alive, pipelining, 100-continue), the
// limits (body and header size, connection count; header, body, idle, read and write
// timeouts; each refusal told to Options::on_refusal) and noticing a client that went away
// while the handler is still computing (Response::peer_gone).
// Routes, JSON, SSE payloads and CORS belong to the layer above.
//
// Why not cpp-httplib: it cannot tell a handler that the client disconnected before the
// first byte is written (prefill), and its limits and SSE framing are not exact enough.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "edgellm/error.h"
#include "edgellm/http.h"

namespace edgellm::http {

using HeaderList = std::vector<std::pair<std::string, std::string>>;

struct Request {
    std::string method;                        // "GET", "POST", "DELETE", "OPTIONS", "HEAD" ...
    std::string target;                        // as sent, e.g. "/slots/0?action=save"
    std::string path;                          // percent-decoded, without the query: "/slots/0"
    std::map<std::string, std::string> query;  // decoded query parameters (first of duplicates)
    HeaderList headers;                        // names lower-cased, values trimmed, in order
    std::string body;                          // decoded (Content-Length or chunked request body)
    std::string remote_addr;                   // "127.0.0.1", "::1"
    std::string local_addr;                    // the server's address it reached ("192.168.1.5")
    int version_minor = 1;                     // HTTP/1.<version_minor>: 0 or 1

    // The first header with this (lower-case) name, or nullptr.
    const std::string* header(std::string_view lower_name) const;
};

namespace detail {
struct ServerState;
class Connection;
}  // namespace detail

// One per request, used from the handler's thread only. Either send() once, or
// begin_stream(), write() any number of times and end_stream(). The transport owns the
// framing headers: Content-Length, Transfer-Encoding and Connection among the extra
// headers are dropped ("Connection: close" is honoured), as are headers with CR, LF or NUL.
class Response {
  public:
    // A whole response with Content-Length (none for 1xx/204/304). HEAD: headers only.
    // A second call, or one after begin_stream(), is ignored.
    void send(int status, std::string_view content_type, std::string_view body,
              const HeaderList& headers = {});

    // A streamed response: Transfer-Encoding: chunked, each write() one chunk, sent at once.
    // HTTP/1.0 clients get the raw bytes and the connection closes at the end. Returns false
    // if the headers could not be written (peer gone) or a response was already started.
    bool begin_stream(int status, std::string_view content_type, const HeaderList& headers = {});
    // False once the peer is gone or a write stayed blocked for Options::write_timeout_ms (or
    // the server is stopping and the write would block). An empty write sends nothing.
    bool write(std::string_view data);
    // The terminating 0-length chunk. Called by the transport if the handler did not.
    void end_stream();

    // True once the client has closed or reset its side of the connection, once a write
    // failed, or once the server is stopping (so a handler that polls this also ends on
    // shutdown). Non-blocking: one poll(POLLRDHUP) of the socket, a few microseconds; bytes
    // the client already pipelined (its next request) do not count as gone. Sticky.
    // A client that half-closes (shutdown(SHUT_WR)) and still waits counts as gone.
    bool peer_gone();  // also safe from another thread while this one writes

    Response(const Response&) = delete;
    Response& operator=(const Response&) = delete;

    // A header every answer to this request carries (send, begin_stream, and the errors the
    // handler sends), unless that call's own headers name it too: e.g. CORS, decided once
    // per request. Before the response starts.
    void add_header(std::string name, std::string value) {
        always_.emplace_back(std::move(name), std::move(value));
    }

    bool started() const { return started_; }  // headers sent (or attempted)
    int status() const { return status_; }     // 0 until started

  private:
    friend class detail::Connection;
    friend class Server;  // its 503 answer
    Response(int fd, const detail::ServerState* server, bool head, bool http10, bool keep_alive)
        : fd_(fd), server_(server), head_(head), http10_(http10), keep_alive_(keep_alive) {}

    // Status line and headers; `framing` is the Content-Length or Transfer-Encoding line.
    std::string head(int status, std::string_view content_type, const HeaderList& headers,
                     const std::string& framing);
    bool write_raw(std::string_view bytes);

    int fd_;
    const detail::ServerState* server_;
    bool head_;        // a HEAD request: no body bytes
    bool http10_;      // an HTTP/1.0 request: no chunked encoding
    bool keep_alive_;  // what the Connection header says (and does) after this response
    bool started_ = false;
    bool streaming_ = false;
    bool chunked_ = false;  // the stream uses chunked encoding
    bool ended_ = false;
    std::atomic<bool> broken_{false};  // a write failed: the connection is unusable
    std::atomic<bool> gone_{false};
    int status_ = 0;
    HeaderList always_;
};


// OpenAI's error shape, as llama-server sends it:
// {"error":{"code":413,"message":"...","type":"invalid_request_error"}}
std::pair<std::string, std::string> default_error_body(int status, const std::string& message);

// "Not Found" for 404; "Unknown" for codes it does not know.
const char* reason_phrase(int status);

class Server {
  public:
    using Handler = std::function<void(const Request&, Response&)>;

    Server(Options opts, Handler handler);
    ~Server();  // stop(), then waits for run() (on whatever thread) to return
    Server(const Server&) = delete;
    Server& operator=(const Server&) = delete;

    // Binds and listens. Returns the bound port, or the error with host:port
    // ("http: cannot listen on 127.0.0.1:8080: address already in use").
    Result<int> listen();
    // The accept loop on the calling thread, one thread per connection, until stop(). Returns
    // after every connection thread has been joined. Returns at once without listen().
    void run();
    // Async-signal-safe (an atomic store and a write() to a self-pipe): callable from a
    // SIGINT/SIGTERM handler or any thread. Idle connections close at once, running handlers
    // see peer_gone(); run() returns when they have ended. Sticky: the server does not restart.
    void stop();
    int active_connections() const;

  private:
    Result<int> listen_on(const std::string& host, int port);
    std::unique_ptr<detail::ServerState> s_;
    bool multi_host_ = false;  // Options::host lists several addresses
};

// ---- the parser, exposed for tests and fuzzing --------------------------------------------

// What the head says about the body and the connection, besides the Request fields.
struct RequestFraming {
    bool keep_alive = true;
    bool chunked = false;
    size_t content_length = 0;
    bool expect_continue = false;  // "Expect: 100-continue" from an HTTP/1.1 client
};

// Parses a request head: the request line and header lines, each ending in CRLF (a bare LF
// is accepted), up to and including the blank line. Fills method, target, path, query,
// headers and version_minor. Returns 0, or the status to answer with (400, 431, 501, 505)
// and a message in *error.
int parse_request_head(std::string_view head, const Options& opts, Request* req,
                       RequestFraming* framing, std::string* error);

// %XX decoding (malformed escapes stay as they are); '+' is a space if plus_is_space.
std::string percent_decode(std::string_view s, bool plus_is_space);

}  // namespace edgellm::http
