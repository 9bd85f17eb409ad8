#include "server/engine/slot_pool.h"

#include <algorithm>

namespace edgellm::server {

SlotPool::SlotPool(int n_slots, int max_queue)
    : slots_((size_t)std::max(1, n_slots)), max_queue_(std::max(0, max_queue)) {}

SlotPool::Acquired SlotPool::acquire(int want, const std::function<int64_t(int)>& score,
                                     const std::function<bool()>& should_stop) {
    Acquired out;
    std::unique_lock<std::mutex> lock(mu_);
    bool idle = false;  // a slot this request can take now, with nobody ahead of it
    for (size_t i = 0; i < slots_.size(); ++i) idle |= !slots_[i].busy && (want < 0 || (int)i == want);
    if (!(idle && waiting_.empty()) && (int)waiting_.size() >= max_queue_) {
        out.outcome = Outcome::QueueFull;
        out.queued_ahead = (int)waiting_.size();
        return out;
    }
    const uint64_t ticket = next_ticket_++;
    waiting_.push_back(ticket);
    for (;;) {
        if (waiting_.front() == ticket) {
            int best = -1;
            int64_t best_score = 0;
            for (int i = 0; i < (int)slots_.size(); ++i) {
                if (slots_[(size_t)i].busy || (want >= 0 && i != want)) continue;
                const int64_t s = score ? score(i) : 0;
                if (best < 0 || s > best_score ||
                    (s == best_score && slots_[(size_t)i].last_used < slots_[(size_t)best].last_used)) {
                    best = i;
                    best_score = s;
                }
            }
            if (best >= 0) {
                waiting_.pop_front();
                slots_[(size_t)best].busy = true;
                slots_[(size_t)best].last_used = ++use_counter_;
                lock.unlock();
                cv_.notify_all();
                out.outcome = Outcome::Acquired;
                out.slot = best;
                return out;
            }
        }
        if (should_stop && should_stop()) break;
        cv_.wait_for(lock, std::chrono::milliseconds(20));
        if (should_stop && should_stop()) break;
    }
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), ticket));
    lock.unlock();
    cv_.notify_all();
    out.outcome = Outcome::Stopped;
    return out;
}

void SlotPool::release(int slot) {
    {
        std::lock_guard<std::mutex> lock(mu_);
        slots_[(size_t)slot].busy = false;
    }
    cv_.notify_all();
}

bool SlotPool::hold(int slot, std::chrono::milliseconds timeout,
                    const std::function<void()>& on_busy) {
    std::unique_lock<std::mutex> lock(mu_);
    if (slots_[(size_t)slot].busy && on_busy) on_busy();
    if (!cv_.wait_for(lock, timeout, [&] { return !slots_[(size_t)slot].busy; })) return false;
    slots_[(size_t)slot].busy = true;
    return true;
}

bool SlotPool::busy(int slot) const {
    std::lock_guard<std::mutex> lock(mu_);
    return slots_[(size_t)slot].busy;
}

int SlotPool::queued() const {
    std::lock_guard<std::mutex> lock(mu_);
    return (int)waiting_.size();
}

void SlotPool::wake() {
    cv_.notify_all();
}

}  // namespace edgellm::server
