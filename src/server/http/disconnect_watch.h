// A request's client watched while its thread is busy (generating, running a tool).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "server/http/transport.h"

namespace edgellm::server {

// Sets a flag when the client of a request goes away, polling its socket every few
// milliseconds on a thread of its own while the request's thread is busy generating.
class DisconnectWatch {
  public:
    // With a deadline: also raises the flag (and timed_out()) when `progress` is still 0
    // then (no token generated in time).
    // With `gone_when`: that says when to raise the flag instead of the client going away (a
    // resumable stream goes on without its client, until it is stopped).
    DisconnectWatch(http::Response& res, std::atomic<bool>& flag,
                    std::optional<std::chrono::steady_clock::time_point> deadline = std::nullopt,
                    const std::atomic<int64_t>* progress = nullptr, std::function<bool()> gone_when = {}) {
        thread_ = std::thread([this, &res, &flag, deadline, progress, gone_when] {
            std::unique_lock<std::mutex> lock(mu_);
            while (!done_) {
                if (gone_when ? gone_when() : res.peer_gone()) {
                    flag = true;
                    gone_ = true;
                    return;
                }
                if (deadline && progress && !timed_out_ && std::chrono::steady_clock::now() >= *deadline &&
                    progress->load() == 0) {
                    timed_out_ = true;
                    flag = true;
                }
                cv_.wait_for(lock, std::chrono::milliseconds(10));
            }
        });
    }
    bool timed_out() const { return timed_out_; }
    ~DisconnectWatch() {
        {
            std::lock_guard<std::mutex> lock(mu_);
            done_ = true;
        }
        cv_.notify_all();
        thread_.join();
    }
    bool gone() const { return gone_; }

  private:
    std::mutex mu_;
    std::condition_variable cv_;
    bool done_ = false;
    std::atomic<bool> gone_{false};
    std::atomic<bool> timed_out_{false};
    std::thread thread_;
};

}  // namespace edgellm::server
