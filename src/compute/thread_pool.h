// A persistent pool of worker threads. `run` hands the same function to every thread
// (the caller is thread 0) and returns when all have finished. Idle workers spin for a
// short while before sleeping, so the many small parallel steps of one token do not pay
// a wake-up each.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace edgellm {

class ThreadPool {
  public:
    // With cpus given, thread i runs only on cpus[i % cpus.size()] (thread 0 is the caller,
    // pinned when the pool is made). affinity_ok() tells whether the OS applied it: some
    // Android kernels accept the call and ignore it.
    explicit ThreadPool(int n_threads, std::vector<int> cpus = {});
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return n_threads_; }
    const std::vector<int>& cpus() const { return cpus_; }
    bool affinity_ok() const { return affinity_ok_.load(); }

    // fn(ith, nth) on every thread; ith in [0, nth). Not reentrant. Takes any callable by
    // reference without copying it into a std::function, so a run allocates nothing (the
    // forward pass calls this hundreds of times per token).
    template <typename F>
    void run(F&& fn) {
        using Fn = std::remove_reference_t<F>;
        run_erased(&fn, [](void* f, int ith, int nth) { (*static_cast<Fn*>(f))(ith, nth); });
    }

    // Split [0, n) into contiguous chunks, one per thread.
    static void split(int64_t n, int ith, int nth, int64_t* begin, int64_t* end) {
        const int64_t per = (n + nth - 1) / nth;
        *begin = std::min<int64_t>(n, per * ith);
        *end = std::min<int64_t>(n, *begin + per);
    }

  private:
    void worker(int ith);

    void pin(int ith);

    int n_threads_;
    std::vector<int> cpus_;
    std::atomic<bool> affinity_ok_{true};
    std::atomic<int> started_{0};
    std::vector<std::thread> threads_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::atomic<uint64_t> generation_{0};
    std::atomic<int> pending_{0};
    std::atomic<int> sleeping_{0};
    std::atomic<bool> stop_{false};
    using Invoke = void (*)(void* fn, int ith, int nth);
    void run_erased(void* fn, Invoke invoke);
    void* job_ = nullptr;
    Invoke invoke_ = nullptr;
};

}  // namespace edgellm
