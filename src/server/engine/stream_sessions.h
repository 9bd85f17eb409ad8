// Resumable streams (llama-server's X-Conversation-Id): a streamed reply whose request names
// a conversation keeps going when its client goes away (a page reload), into a buffer that
// GET /v1/stream?conv_id=ID&from=OFFSET replays and follows until the reply ends; DELETE
// /v1/stream?conv_id=ID stops it. One live session per conversation id; a finished one is
// kept 5 minutes; a buffer over 4 MiB drops its oldest bytes (an offset before them is lost).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace edgellm::server {

class StreamSession {
  public:
    explicit StreamSession(std::string id, size_t cap_bytes = 4u << 20);
    const std::string& id() const { return id_; }
    void append(std::string_view bytes);
    void finalize();  // the reply ended (idempotent)
    void cancel();    // DELETE: the reply stops at its next step
    bool cancelled() const { return cancelled_.load(); }
    // Bytes from `offset` on to sink as they come, until the reply ends, sink returns false,
    // or should_stop() (polled every 200 ms). False when `offset` fell before the kept bytes.
    bool read_from(size_t offset, const std::function<bool(std::string_view)>& sink,
                   const std::function<bool()>& should_stop);
    size_t dropped() const;
    size_t total() const;
    bool done() const;
    int64_t started_at() const { return started_; }
    int64_t completed_at() const;  // unix seconds, 0 while it runs

  private:
    std::string id_;
    size_t cap_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::string buf_;
    size_t dropped_ = 0;
    bool done_ = false;
    std::atomic<bool> cancelled_{false};
    int64_t started_ = 0, completed_ = 0;
};

class StreamSessions {
  public:
    // A new session for the id (one that ran is cancelled and replaced).
    std::shared_ptr<StreamSession> create(const std::string& id);
    std::shared_ptr<StreamSession> get(const std::string& id);
    void evict(const std::string& id, bool cancel);
    // The sessions whose id is one of these, or one of them followed by "::".
    std::vector<std::shared_ptr<StreamSession>> lookup(const std::vector<std::string>& ids);
    void finalize_all();  // the server stops: no reader waits on

  private:
    void expire_locked();
    std::mutex mu_;
    std::map<std::string, std::shared_ptr<StreamSession>> by_id_;
};

}  // namespace edgellm::server
