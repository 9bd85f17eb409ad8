// Which request runs on which slot, knowing nothing of HTTP: requests wait in arrival order
// (a bounded FIFO) for an idle slot, and the first in line takes the idle slot that scores
// highest for it (the server scores by the common prefix of the slot's cache and the prompt;
// ties go to the least recently used). A waiter gives up when its should_stop callback says
// so (the client went away, the server is stopping).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace edgellm::server {

class SlotPool {
  public:
    SlotPool(int n_slots, int max_queue);

    enum class Outcome { Acquired, QueueFull, Stopped };
    struct Acquired {
        Outcome outcome = Outcome::Stopped;
        int slot = -1;
        int queued_ahead = 0;  // with QueueFull: requests already waiting
    };
    // Wait for an idle slot: `want` (>= 0) or any (-1). score(slot) ranks the idle slots.
    // should_stop is asked every few milliseconds while waiting.
    Acquired acquire(int want, const std::function<int64_t(int)>& score,
                     const std::function<bool()>& should_stop);
    void release(int slot);

    // Take an idle slot for maintenance (erase, save, restore) ahead of the queue, waiting
    // at most `timeout` for the request on it to finish; on_busy is called once if it is
    // busy (to cancel that request). False when it stayed busy; else release() it after.
    bool hold(int slot, std::chrono::milliseconds timeout, const std::function<void()>& on_busy);

    bool busy(int slot) const;
    int queued() const;
    int size() const { return (int)slots_.size(); }
    // Every waiter's next check of should_stop comes now.
    void wake();

  private:
    struct State {
        bool busy = false;
        uint64_t last_used = 0;
    };
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::vector<State> slots_;
    std::deque<uint64_t> waiting_;
    int max_queue_;
    uint64_t next_ticket_ = 0, use_counter_ = 0;
};

}  // namespace edgellm::server
