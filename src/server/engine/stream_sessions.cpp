#include "server/engine/stream_sessions.h"

#include <chrono>

namespace edgellm::server {

namespace {

constexpr int64_t kTtlSeconds = 300;

int64_t unix_now() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

StreamSession::StreamSession(std::string id, size_t cap_bytes) : id_(std::move(id)), cap_(cap_bytes), started_(unix_now()) {}

void StreamSession::append(std::string_view bytes) {
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (done_) return;
        buf_.append(bytes);
        if (buf_.size() > cap_) {
            const size_t drop = buf_.size() - cap_;
            buf_.erase(0, drop);
            dropped_ += drop;
        }
    }
    cv_.notify_all();
}

void StreamSession::finalize() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (done_) return;
        done_ = true;
        completed_ = unix_now();
    }
    cv_.notify_all();
}

void StreamSession::cancel() {
    cancelled_ = true;
    cv_.notify_all();
}

bool StreamSession::read_from(size_t offset, const std::function<bool(std::string_view)>& sink,
                              const std::function<bool()>& should_stop) {
    std::unique_lock<std::mutex> lk(mu_);
    if (offset < dropped_) return false;
    for (;;) {
        const size_t end = dropped_ + buf_.size();
        if (offset < dropped_) return true;  // (overtaken while waiting: what was sent stays sent)
        if (offset < end) {
            const std::string piece = buf_.substr(offset - dropped_);
            offset = end;
            lk.unlock();
            if (!sink(piece)) return true;
            lk.lock();
            continue;
        }
        if (done_) return true;
        cv_.wait_for(lk, std::chrono::milliseconds(200));
        if (should_stop && should_stop()) return true;
    }
}

size_t StreamSession::dropped() const {
    std::lock_guard<std::mutex> lk(mu_);
    return dropped_;
}
size_t StreamSession::total() const {
    std::lock_guard<std::mutex> lk(mu_);
    return dropped_ + buf_.size();
}
bool StreamSession::done() const {
    std::lock_guard<std::mutex> lk(mu_);
    return done_;
}
int64_t StreamSession::completed_at() const {
    std::lock_guard<std::mutex> lk(mu_);
    return completed_;
}

void StreamSessions::expire_locked() {
    const int64_t cutoff = unix_now() - kTtlSeconds;
    for (auto it = by_id_.begin(); it != by_id_.end();) {
        const int64_t c = it->second->completed_at();
        if (c != 0 && c <= cutoff) it = by_id_.erase(it);
        else ++it;
    }
}

std::shared_ptr<StreamSession> StreamSessions::create(const std::string& id) {
    auto s = std::make_shared<StreamSession>(id);
    std::shared_ptr<StreamSession> old;
    {
        std::lock_guard<std::mutex> lk(mu_);
        expire_locked();
        auto it = by_id_.find(id);
        if (it != by_id_.end()) old = it->second;
        by_id_[id] = s;
    }
    if (old) {
        old->cancel();
        old->finalize();
    }
    return s;
}

std::shared_ptr<StreamSession> StreamSessions::get(const std::string& id) {
    std::lock_guard<std::mutex> lk(mu_);
    expire_locked();
    auto it = by_id_.find(id);
    return it == by_id_.end() ? nullptr : it->second;
}

void StreamSessions::evict(const std::string& id, bool cancel) {
    std::shared_ptr<StreamSession> s;
    {
        std::lock_guard<std::mutex> lk(mu_);
        auto it = by_id_.find(id);
        if (it == by_id_.end()) return;
        s = it->second;
        by_id_.erase(it);
    }
    if (cancel) s->cancel();
    s->finalize();
}

std::vector<std::shared_ptr<StreamSession>> StreamSessions::lookup(const std::vector<std::string>& ids) {
    std::lock_guard<std::mutex> lk(mu_);
    expire_locked();
    std::vector<std::shared_ptr<StreamSession>> out;
    for (const std::string& want : ids)
        for (auto& [id, s] : by_id_)
            if (id == want || id.rfind(want + "::", 0) == 0) out.push_back(s);
    return out;
}

void StreamSessions::finalize_all() {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& [id, s] : by_id_) s->finalize();
}

}  // namespace edgellm::server
