// The log of the transport's refusals (http::Options::on_refusal): one line per refused
// request or connection, with the peer, what was refused, the status and the flag that sets
// the limit:
//
//     refused 10.0.0.5: request head larger than 32768 bytes (431, --max-header-bytes)
//
// A client that keeps running into the same limit does not flood the log: after a line, the
// same peer refused by the same limit within the next minute is only counted, and the first
// line after that minute says how many were left out. The server and the router share it.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "edgellm/http.h"

namespace edgellm::server {

// The flag that sets the limit ("--max-header-bytes"); "" when no flag does.
const char* limit_flag(http::Limit limit);

class RefusalLog {
  public:
    using Clock = std::chrono::steady_clock;
    // `log` takes each line; `now` is the clock (a test's own).
    explicit RefusalLog(std::function<void(const std::string& line)> log,
                        std::chrono::seconds quiet = std::chrono::seconds(60),
                        std::function<Clock::time_point()> now = Clock::now);

    // Thread-safe: the connections' threads and the accept loop call it.
    void operator()(const http::Refusal& r);

  private:
    struct Seen {
        Clock::time_point logged;  // when its last line was written
        size_t left_out = 0;       // refusals since then, not logged
    };
    std::function<void(const std::string&)> log_;
    std::chrono::seconds quiet_;
    std::function<Clock::time_point()> now_;
    std::mutex mu_;
    std::map<std::pair<std::string, http::Limit>, Seen> seen_;
};

// Options::on_refusal for a server or router whose log lines go to `log`.
std::function<void(const http::Refusal&)> refusal_logger(
    std::function<void(const std::string& line)> log);

}  // namespace edgellm::server
