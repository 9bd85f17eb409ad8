#include "compute/thread_pool.h"

#include <pthread.h>
#include <sched.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define EDGELLM_PAUSE() _mm_pause()
#elif defined(__aarch64__)
#define EDGELLM_PAUSE() __asm__ volatile("yield")
#else
#define EDGELLM_PAUSE() ((void)0)
#endif

namespace edgellm {

namespace {
// About 50-100 microseconds of spinning before a worker goes to sleep.
constexpr int kSpinIterations = 20000;
}  // namespace

ThreadPool::ThreadPool(int n_threads, std::vector<int> cpus)
    : n_threads_(n_threads < 1 ? 1 : n_threads), cpus_(std::move(cpus)) {
    pin(0);
    for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
    // Wait until every worker has pinned itself, so affinity_ok() is final.
    while (started_.load() != n_threads_ - 1) std::this_thread::yield();
}

void ThreadPool::pin(int ith) {
    if (cpus_.empty()) return;
    const int cpu = cpus_[(size_t)ith % cpus_.size()];
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    bool ok = pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
    // Read it back: the call can succeed without effect.
    cpu_set_t got;
    CPU_ZERO(&got);
    ok = ok && pthread_getaffinity_np(pthread_self(), sizeof got, &got) == 0 &&
         CPU_EQUAL(&set, &got);
    if (!ok) affinity_ok_.store(false);
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_.store(true);
        generation_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
}

void ThreadPool::worker(int ith) {
    pin(ith);
    started_.fetch_add(1);
    uint64_t seen = 0;
    for (;;) {
        uint64_t g = generation_.load(std::memory_order_acquire);
        for (int spin = 0; g == seen; ++spin) {
            if (spin < kSpinIterations) {
                EDGELLM_PAUSE();
            } else {
                std::unique_lock<std::mutex> lock(mu_);
                sleeping_.fetch_add(1);
                cv_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
                sleeping_.fetch_sub(1);
            }
            g = generation_.load(std::memory_order_acquire);
        }
        seen = g;
        if (stop_.load()) return;
        invoke_(job_, ith, n_threads_);
        pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
}

void ThreadPool::run_erased(void* fn, Invoke invoke) {
    if (n_threads_ == 1) {
        invoke(fn, 0, 1);
        return;
    }
    job_ = fn;
    invoke_ = invoke;
    pending_.store(n_threads_ - 1, std::memory_order_relaxed);
    {
        std::lock_guard<std::mutex> lock(mu_);
        generation_.fetch_add(1, std::memory_order_release);
    }
    if (sleeping_.load() > 0) cv_.notify_all();
    invoke(fn, 0, n_threads_);
    while (pending_.load(std::memory_order_acquire) != 0) EDGELLM_PAUSE();
}

}  // namespace edgellm
