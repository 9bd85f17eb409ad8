// One HTTP/1.1 exchange for the client SDK: a fresh connection per call (the server is
// local; a kept-alive connection would only hide a server that restarted), deadlines on
// every wait, chunked and Content-Length bodies, a body callback for streams.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "edgellm/client.h"

namespace edgellm::client {

const char* failure_name(Failure f) {
    switch (f) {
        case Failure::none: return "none";
        case Failure::busy: return "busy";
        case Failure::bad_endpoint: return "bad_endpoint";
        case Failure::connect: return "connect";
        case Failure::first_token_timeout: return "first_token_timeout";
        case Failure::total_timeout: return "total_timeout";
        case Failure::broken_stream: return "broken_stream";
        case Failure::http_status: return "http_status";
        case Failure::server_error: return "server_error";
        case Failure::bad_response: return "bad_response";
        case Failure::cancelled: return "cancelled";
    }
    return "?";
}

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

struct Url {
    std::string host;
    std::string port = "80";
    std::string prefix;  // path before the API's, without a trailing '/'
};

bool parse_url(const std::string& url, Url* out, std::string* why) {
    std::string_view u = url;
    if (u.rfind("https://", 0) == 0) {
        *why = "https is not supported by this client (plain HTTP only): " + url;
        return false;
    }
    if (u.rfind("http://", 0) != 0) {
        *why = "the endpoint URL must start with http://: '" + url + "'";
        return false;
    }
    u.remove_prefix(7);
    const size_t slash = u.find('/');
    std::string_view hostport = u.substr(0, slash);
    if (slash != std::string_view::npos) {
        out->prefix = std::string(u.substr(slash));
        while (!out->prefix.empty() && out->prefix.back() == '/') out->prefix.pop_back();
    }
    if (!hostport.empty() && hostport.front() == '[') {  // [::1]:8080
        const size_t close = hostport.find(']');
        if (close == std::string_view::npos) {
            *why = "bad IPv6 address in '" + url + "'";
            return false;
        }
        out->host = std::string(hostport.substr(1, close - 1));
        hostport.remove_prefix(close + 1);
        if (!hostport.empty()) {
            if (hostport.front() != ':') {
                *why = "bad address in '" + url + "'";
                return false;
            }
            out->port = std::string(hostport.substr(1));
        }
    } else {
        const size_t colon = hostport.rfind(':');
        out->host = std::string(hostport.substr(0, colon));
        if (colon != std::string_view::npos) out->port = std::string(hostport.substr(colon + 1));
    }
    if (out->host.empty()) {
        *why = "no host in '" + url + "'";
        return false;
    }
    if (out->port.empty() || out->port.size() > 5 ||
        !std::all_of(out->port.begin(), out->port.end(), ::isdigit) || std::stoi(out->port) == 0 ||
        std::stoi(out->port) > 65535) {
        *why = "bad port in '" + url + "'";
        return false;
    }
    return true;
}

// "10.0.0.5" or "::1"; "" for another family.
std::string numeric_address(const sockaddr* sa) {
    char text[INET6_ADDRSTRLEN] = "";
    if (sa->sa_family == AF_INET)
        ::inet_ntop(AF_INET, &((const sockaddr_in*)sa)->sin_addr, text, sizeof text);
    else if (sa->sa_family == AF_INET6)
        ::inet_ntop(AF_INET6, &((const sockaddr_in6*)sa)->sin6_addr, text, sizeof text);
    return text;
}

class Socket {
  public:
    ~Socket() {
        if (fd_ >= 0) ::close(fd_);
    }
    int fd() const { return fd_; }

    // Non-blocking connect to the first address that answers within the deadline (and that
    // vet, when set, lets through).
    bool connect(const Url& u, Clock::time_point deadline, const StreamControl& ctl,
                 std::string* why) {
        const std::atomic<bool>* cancel = ctl.cancel;
        addrinfo hints{};
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        addrinfo* res = nullptr;
        if (int rc = ::getaddrinfo(u.host.c_str(), u.port.c_str(), &hints, &res); rc != 0) {
            *why = "cannot resolve " + u.host + ": " + gai_strerror(rc);
            return false;
        }
        std::string last = "no address";
        for (addrinfo* a = res; a; a = a->ai_next) {
            if (ctl.vet_address) {
                const std::string refused =
                    ctl.vet_address(numeric_address(a->ai_addr), std::stoi(u.port));
                if (!refused.empty()) {
                    last = refused;
                    continue;
                }
            }
            int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                              a->ai_protocol);
            if (fd < 0) continue;
            int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
            if (rc != 0 && errno == EINPROGRESS) {
                bool done = false;
                while (!done) {
                    const double left =
                        std::chrono::duration<double, std::milli>(deadline - Clock::now()).count();
                    if (left <= 0) {
                        last = "connect timed out";
                        break;
                    }
                    if (cancel && cancel->load()) {
                        last = "cancelled";
                        break;
                    }
                    pollfd p{fd, POLLOUT, 0};
                    int n = ::poll(&p, 1, (int)std::min(50.0, left + 1));
                    if (n > 0) {
                        int err = 0;
                        socklen_t len = sizeof err;
                        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
                        if (err == 0) rc = 0;
                        else last = std::strerror(err);
                        done = true;
                    } else if (n < 0 && errno != EINTR) {
                        last = std::strerror(errno);
                        done = true;
                    }
                }
            } else if (rc != 0) {
                last = std::strerror(errno);
            }
            if (rc == 0) {
                int one = 1;
                ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                fd_ = fd;
                ::freeaddrinfo(res);
                return true;
            }
            ::close(fd);
            if (last == "connect timed out" || last == "cancelled") break;
        }
        ::freeaddrinfo(res);
        *why = "cannot connect to " + u.host + ":" + u.port + ": " + last;
        return false;
    }

    enum class Io { ok, closed, timeout, cancelled, error };

    Io send_all(std::string_view data, Clock::time_point deadline, const std::atomic<bool>* cancel) {
        while (!data.empty()) {
            ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
            if (n > 0) {
                data.remove_prefix((size_t)n);
                continue;
            }
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                if (Io w = wait(POLLOUT, deadline, cancel); w != Io::ok) return w;
                continue;
            }
            return Io::closed;
        }
        return Io::ok;
    }

    // Some bytes into buf (appended), waiting until the deadline.
    Io recv_some(std::string* buf, Clock::time_point deadline, const std::atomic<bool>* cancel) {
        char tmp[16384];
        for (;;) {
            // (checked before every read: a peer that never pauses still meets both)
            if (cancel && cancel->load()) return Io::cancelled;
            if (Clock::now() >= deadline) return Io::timeout;
            ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
            if (n > 0) {
                buf->append(tmp, (size_t)n);
                return Io::ok;
            }
            if (n == 0) return Io::closed;
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                if (Io w = wait(POLLIN, deadline, cancel); w != Io::ok) return w;
                continue;
            }
            return errno == ECONNRESET ? Io::closed : Io::error;
        }
    }

  private:
    Io wait(short events, Clock::time_point deadline, const std::atomic<bool>* cancel) {
        for (;;) {
            if (cancel && cancel->load()) return Io::cancelled;
            const double left =
                std::chrono::duration<double, std::milli>(deadline - Clock::now()).count();
            if (left <= 0) return Io::timeout;
            pollfd p{fd_, events, 0};
            int n = ::poll(&p, 1, (int)std::min(50.0, left + 1));
            if (n > 0) return Io::ok;  // readable, writable, or an error the next call sees
            if (n < 0 && errno != EINTR) return Io::error;
        }
    }

    int fd_ = -1;
};

std::string lower(std::string s) {
    for (char& c : s) c = (char)std::tolower((unsigned char)c);
    return s;
}

std::string trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
    return std::string(s);
}

}  // namespace

HttpResult http_request(const Endpoint& ep, std::string_view method, std::string_view path,
                        std::string_view body, const Timeouts& t, const BodyCallback& on_body,
                        StreamControl* ctl_in, std::string_view content_type,
                        const std::vector<std::pair<std::string, std::string>>& headers) {
    HttpResult r;
    const Clock::time_point t0 = Clock::now();
    StreamControl own;
    StreamControl& ctl = ctl_in ? *ctl_in : own;
    auto finish = [&](Failure f, std::string why) {
        r.failure = f;
        r.error = std::move(why);
        r.total_ms = ms_since(t0);
        return r;
    };
    Url u;
    std::string why;
    if (!parse_url(ep.url, &u, &why)) return finish(Failure::bad_endpoint, why);

    Socket s;
    if (!s.connect(u, t0 + std::chrono::milliseconds(t.connect_ms), ctl, &why))
        return finish(ctl.cancel && ctl.cancel->load() ? Failure::cancelled : Failure::connect, why);

    const Clock::time_point sent_from = Clock::now();
    const Clock::time_point total_deadline = sent_from + std::chrono::milliseconds(t.total_ms);
    const Clock::time_point first_deadline =
        std::min(total_deadline, sent_from + std::chrono::milliseconds(t.first_token_ms));
    const bool streaming = (bool)on_body;
    auto deadline = [&] { return streaming && !ctl.progress ? first_deadline : total_deadline; };
    auto timed_out = [&] {
        return streaming && !ctl.progress && first_deadline < total_deadline
                   ? finish(Failure::first_token_timeout,
                            "no output within " + std::to_string(t.first_token_ms) + " ms")
                   : finish(Failure::total_timeout,
                            "the reply did not end within " + std::to_string(t.total_ms) + " ms");
    };

    std::string req;
    req.reserve(256 + body.size());
    req.append(method).append(" ").append(u.prefix).append(path).append(" HTTP/1.1\r\n");
    const bool v6 = u.host.find(':') != std::string::npos;
    req.append("Host: ").append(v6 ? "[" + u.host + "]" : u.host).append(":").append(u.port).append("\r\n");
    req.append("Connection: close\r\n");
    if (streaming) req.append("Accept: text/event-stream\r\n");
    if (!ep.api_key.empty()) req.append("Authorization: Bearer ").append(ep.api_key).append("\r\n");
    for (const auto& [name, value] : headers)
        if ((name + value).find_first_of("\r\n") == std::string::npos && !name.empty())
            req.append(name).append(": ").append(value).append("\r\n");
    if (!body.empty() || method == "POST") {
        req.append("Content-Type: ").append(content_type).append("\r\n");
        req.append("Content-Length: ").append(std::to_string(body.size())).append("\r\n");
    }
    req.append("\r\n").append(body);

    using Io = Socket::Io;
    auto io_failure = [&](Io io, const char* what) {
        switch (io) {
            case Io::timeout: return timed_out();
            case Io::cancelled: return finish(Failure::cancelled, "cancelled");
            case Io::closed:
                return finish(Failure::broken_stream, std::string("the connection closed ") + what);
            default: return finish(Failure::broken_stream, std::string("connection error ") + what);
        }
    };
    if (Io io = s.send_all(req, deadline(), ctl.cancel); io != Io::ok)
        return io_failure(io, "while sending the request");

    // Status line and headers.
    std::string buf;
    size_t head_end;
    for (;;) {
        head_end = buf.find("\r\n\r\n");
        if (head_end != std::string::npos) break;
        if (buf.size() > 65536) return finish(Failure::bad_response, "response headers too large");
        if (Io io = s.recv_some(&buf, deadline(), ctl.cancel); io != Io::ok)
            return io_failure(io, "before the response headers");
    }
    {
        std::string_view head(buf.data(), head_end);
        const size_t eol = head.find("\r\n");
        std::string_view status_line = head.substr(0, eol);
        if (status_line.rfind("HTTP/1.", 0) != 0 || status_line.size() < 12)
            return finish(Failure::bad_response, "not an HTTP response: " + std::string(status_line.substr(0, 60)));
        r.status = std::atoi(std::string(status_line.substr(9, 3)).c_str());
        if (r.status < 100 || r.status > 599)
            return finish(Failure::bad_response, "bad HTTP status line: " + std::string(status_line.substr(0, 60)));
        size_t pos = eol == std::string_view::npos ? head.size() : eol + 2;
        while (pos < head.size()) {
            size_t e = head.find("\r\n", pos);
            if (e == std::string_view::npos) e = head.size();
            std::string_view line = head.substr(pos, e - pos);
            const size_t colon = line.find(':');
            if (colon != std::string_view::npos)
                r.headers.emplace_back(lower(std::string(line.substr(0, colon))), trim(line.substr(colon + 1)));
            pos = e + 2;
        }
    }
    buf.erase(0, head_end + 4);

    bool chunked = false;
    long long length = -1;
    for (auto& [k, v] : r.headers) {
        if (k == "transfer-encoding" && lower(v).find("chunked") != std::string::npos) chunked = true;
        if (k == "content-length") length = std::atoll(v.c_str());
    }
    if (r.status == 204 || r.status == 304 || method == "HEAD") length = 0;
    // Error statuses are collected whole (the caller reads the error JSON) even when a
    // callback was given.
    const bool deliver = streaming && r.status < 400;
    ctl.status = r.status;
    ctl.headers = r.headers;
    ctl.chunked = chunked;
    bool stopped = false;
    auto emit = [&](std::string_view bytes) {
        if (bytes.empty() || stopped) return;
        if (r.first_byte_ms < 0) r.first_byte_ms = ms_since(sent_from);
        if (deliver) {
            if (!on_body(bytes, ctl) || ctl.stop) stopped = true;
        } else {
            r.body.append(bytes);
        }
    };

    if (chunked) {
        // State: reading a size line, or `left` bytes of a chunk (+ its CRLF).
        long long left = -1;
        for (;;) {
            bool progressed = true;
            while (progressed && !stopped) {
                progressed = false;
                if (left == -1) {
                    const size_t e = buf.find("\r\n");
                    if (e == std::string::npos) break;
                    char* end = nullptr;
                    const std::string size_line = buf.substr(0, e);
                    left = std::strtoll(size_line.c_str(), &end, 16);
                    if (end == size_line.c_str() || left < 0) return finish(Failure::bad_response, "bad chunk size");
                    buf.erase(0, e + 2);
                    if (left == 0) {
                        r.total_ms = ms_since(t0);
                        return r;  // (trailers ignored)
                    }
                    progressed = true;
                } else if (left > 0) {
                    const size_t n = (size_t)std::min<long long>(left, (long long)buf.size());
                    if (n == 0) break;
                    emit(std::string_view(buf.data(), n));
                    buf.erase(0, n);
                    left -= (long long)n;
                    progressed = true;
                    if (left == 0) left = -2;  // its CRLF next
                } else {  // -2: the CRLF after a chunk
                    if (buf.size() < 2) break;
                    if (buf[0] != '\r' || buf[1] != '\n')
                        return finish(Failure::bad_response, "bad chunked framing (no CRLF after a chunk)");
                    buf.erase(0, 2);
                    left = -1;
                    progressed = true;
                }
            }
            if (stopped) break;
            if (Io io = s.recv_some(&buf, deadline(), ctl.cancel); io != Io::ok)
                return io_failure(io, "in the middle of the response");
        }
    } else {
        long long got = 0;
        for (;;) {
            if (length >= 0 && got + (long long)buf.size() >= length) {
                emit(std::string_view(buf.data(), (size_t)(length - got)));
                break;
            }
            got += (long long)buf.size();
            emit(buf);
            buf.clear();
            if (stopped) break;
            Io io = s.recv_some(&buf, deadline(), ctl.cancel);
            if (io == Io::closed && length < 0) break;  // body to the end of the connection
            if (io != Io::ok) return io_failure(io, "in the middle of the response");
        }
    }
    r.total_ms = ms_since(t0);
    return r;
}

bool SseParser::feed(std::string_view bytes,
                     const std::function<bool(const std::string& data)>& on_event) {
    for (char c : bytes) {
        if (c != '\n') {
            line_.push_back(c);
            continue;
        }
        if (!line_.empty() && line_.back() == '\r') line_.pop_back();
        if (line_.empty()) {  // end of an event
            if (has_data_) {
                std::string data = std::move(data_);
                data_.clear();
                has_data_ = false;
                if (!on_event(data)) return false;
            }
        } else if (line_.rfind("data:", 0) == 0) {
            std::string_view v(line_);
            v.remove_prefix(5);
            if (!v.empty() && v.front() == ' ') v.remove_prefix(1);
            if (has_data_) data_.push_back('\n');
            data_.append(v);
            has_data_ = true;
        }  // (comments ":" and event:/id:/retry: fields are ignored)
        line_.clear();
    }
    return true;
}

}  // namespace edgellm::client
