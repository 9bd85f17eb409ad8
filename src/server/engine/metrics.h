// The counters behind GET /metrics (the Prometheus text is src/server/api/admin/metrics.cpp).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

namespace edgellm::server {

struct Metrics {
    std::atomic<uint64_t> requests{0};          // generation requests finished
    std::atomic<uint64_t> requests_failed{0};   // answered with an error status
    std::atomic<uint64_t> cancelled{0};         // the client went away
    std::atomic<uint64_t> prompt_tokens{0};     // prompt tokens of finished requests
    std::atomic<uint64_t> cached_tokens{0};     // of those, reused from the KV cache
    std::atomic<uint64_t> generated_tokens{0};
    std::atomic<uint64_t> prompt_us{0};         // time spent evaluating prompts
    std::atomic<uint64_t> generate_us{0};       // time spent decoding
    std::atomic<uint64_t> drafted_tokens{0};    // speculative decoding: tokens drafted
    std::atomic<uint64_t> accepted_tokens{0};   // of those, kept
    std::atomic<uint64_t> draft_steps{0};       // steps that checked drafts
    // llama-server's throughput gauges are over the window since the previous scrape.
    std::mutex window_mu;
    uint64_t window_prompt = 0, window_prompt_us = 0, window_gen = 0, window_gen_us = 0;
    std::atomic<int> processing{0};
    // Time to first token, cumulative buckets (seconds).
    static constexpr double kBuckets[] = {0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0};
    static constexpr size_t kNumBuckets = sizeof(kBuckets) / sizeof(kBuckets[0]);
    std::atomic<uint64_t> ttft_bucket[kNumBuckets + 1] = {};
    std::atomic<uint64_t> ttft_count{0};
    std::atomic<uint64_t> ttft_sum_us{0};

    void observe_ttft(double seconds) {
        size_t b = 0;
        while (b < kNumBuckets && seconds > kBuckets[b]) ++b;
        for (size_t i = b; i <= kNumBuckets; ++i) ttft_bucket[i]++;
        ttft_count++;
        ttft_sum_us += (uint64_t)(seconds * 1e6);
    }
};

}  // namespace edgellm::server
