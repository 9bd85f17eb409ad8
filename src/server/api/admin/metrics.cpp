// GET /metrics: Prometheus text (llama.cpp's names, then edgellm's).
#include "server/server_impl.h"

#include <algorithm>
#include <cstdio>

namespace edgellm::server {

void Server::Impl::metrics_get(http::Response& res) {
    std::string out;
    // One sample: its name, type (counter or gauge), help and value.
    struct Row {
        const char* name;
        const char* type;
        const char* help;
        double value;
    };
    auto metric = [&](const Row& r) {
        char line[512];
        std::snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", r.name, r.help,
                      r.name, r.type, r.name, r.value);
        out += line;
    };
    const double prompt_s = (double)metrics.prompt_us / 1e6;
    const double gen_s = (double)metrics.generate_us / 1e6;
    const uint64_t prompt_seen = metrics.prompt_tokens, cached_seen = metrics.cached_tokens;
    const double new_prompt =
        prompt_seen >= cached_seen ? (double)(prompt_seen - cached_seen) : 0.0;
    // (asleep: no model, no context; the counters go on from what they had)
    const bool awake = live.ctx != nullptr;
    int64_t kv_tokens = 0;
    for (const auto& s : live.slots) kv_tokens += s->session->n_cached();
    const auto bill = awake ? Context::memory_bill(*live.model, live.ctx->params())
                            : Result<MemoryBill>::fail("asleep");
    const double kv_total = bill ? (double)bill->kv_cache : 0.0;
    const double kv_capacity = awake ? (double)n_ctx_slot() * (double)live.slots.size() : 0.0;
    const uint64_t n_steps = steps_before + (awake ? live.ctx->n_steps() : 0);
    const int64_t most_tokens =
        std::max(most_tokens_before, awake ? live.ctx->most_tokens_per_step() : 0);
    // llama.cpp's names, so its dashboards work, then ours. Its throughput gauges cover the
    // window since the previous scrape.
    double window_prompt_rate = 0.0, window_gen_rate = 0.0;
    {
        std::lock_guard<std::mutex> lock(metrics.window_mu);
        const uint64_t prompt_all = metrics.prompt_tokens, cached = metrics.cached_tokens;
        const uint64_t np = prompt_all >= cached ? prompt_all - cached : 0, pu = metrics.prompt_us,
                       ng = metrics.generated_tokens, gu = metrics.generate_us;
        // (the counters are bumped one after the other without a lock: never a negative delta)
        if (pu > metrics.window_prompt_us && np >= metrics.window_prompt)
            window_prompt_rate = (double)(np - metrics.window_prompt) * 1e6 /
                                 (double)(pu - metrics.window_prompt_us);
        if (gu > metrics.window_gen_us && ng >= metrics.window_gen)
            window_gen_rate =
                (double)(ng - metrics.window_gen) * 1e6 / (double)(gu - metrics.window_gen_us);
        metrics.window_prompt = np;
        metrics.window_prompt_us = pu;
        metrics.window_gen = ng;
        metrics.window_gen_us = gu;
    }
    const uint64_t passes = live.batcher ? live.batcher->passes() : 0,
                   steps = live.batcher ? live.batcher->steps() : 0;
    for (const Row& r : {
             Row{"llamacpp:prompt_tokens_total", "counter", "Number of prompt tokens processed.",
                 new_prompt},
             Row{"llamacpp:prompt_tokens_cached_total", "counter",
                 "Number of prompt tokens reused from the KV cache.",
                 (double)metrics.cached_tokens},
             Row{"llamacpp:prompt_seconds_total", "counter", "Prompt process time", prompt_s},
             Row{"llamacpp:tokens_predicted_total", "counter",
                 "Number of generation tokens processed.", (double)metrics.generated_tokens},
             Row{"llamacpp:tokens_predicted_seconds_total", "counter", "Predict process time",
                 gen_s},
             Row{"llamacpp:n_decode_total", "counter", "Total number of forward steps.",
                 (double)n_steps},
             Row{"llamacpp:n_tokens_max", "counter", "Largest number of tokens one step evaluated.",
                 (double)most_tokens},
             Row{"llamacpp:spec_decode_num_draft_tokens_total", "counter", "Tokens drafted.",
                 (double)metrics.drafted_tokens},
             Row{"llamacpp:spec_decode_num_accepted_tokens_total", "counter",
                 "Drafted tokens accepted.", (double)metrics.accepted_tokens},
             Row{"llamacpp:spec_decode_num_drafts_total", "counter", "Steps that checked drafts.",
                 (double)metrics.draft_steps},
             Row{"llamacpp:prompt_tokens_seconds", "gauge",
                 "Prompt throughput in tokens/s since the previous scrape.", window_prompt_rate},
             Row{"llamacpp:predicted_tokens_seconds", "gauge",
                 "Generation throughput in tokens/s since the previous scrape.", window_gen_rate},
             Row{"llamacpp:kv_cache_usage_ratio", "gauge",
                 "KV-cache usage. 1 means 100 percent usage.",
                 kv_capacity > 0 ? (double)kv_tokens / kv_capacity : 0.0},
             Row{"llamacpp:kv_cache_tokens", "gauge", "KV-cache tokens.", (double)kv_tokens},
             Row{"llamacpp:requests_processing", "gauge", "Number of requests processing.",
                 (double)metrics.processing},
             Row{"llamacpp:requests_deferred", "gauge", "Number of requests deferred.",
                 awake ? (double)live.pool->queued() : 0.0},
             Row{"llamacpp:n_busy_slots_per_decode", "gauge",
                 "Average slots stepping per forward pass.",
                 passes > 0 ? (double)steps / (double)passes : (n_steps > 0 ? 1.0 : 0.0)},
             Row{"edgellm_requests_total", "counter", "Generation requests answered.",
                 (double)metrics.requests},
             Row{"edgellm_requests_failed_total", "counter",
                 "Generation requests refused with an error.", (double)metrics.requests_failed},
             Row{"edgellm_requests_cancelled_total", "counter",
                 "Generations stopped because the client went away.", (double)metrics.cancelled},
             Row{"edgellm_prompt_tokens_total", "counter", "Prompt tokens of answered requests.",
                 (double)metrics.prompt_tokens},
             Row{"edgellm_prompt_tokens_cached_total", "counter",
                 "Prompt tokens reused from the KV cache instead of evaluated.",
                 (double)metrics.cached_tokens},
             Row{"edgellm_generated_tokens_total", "counter", "Tokens generated.",
                 (double)metrics.generated_tokens},
             Row{"edgellm_draft_tokens_total", "counter", "Tokens drafted by speculative decoding.",
                 (double)metrics.drafted_tokens},
             Row{"edgellm_draft_tokens_accepted_total", "counter",
                 "Drafted tokens the model kept (speculative decoding).",
                 (double)metrics.accepted_tokens},
             Row{"edgellm_prefill_tokens_per_second", "gauge", "Prompt evaluation speed so far.",
                 prompt_s > 0 ? new_prompt / prompt_s : 0.0},
             Row{"edgellm_decode_tokens_per_second", "gauge", "Decode speed so far.",
                 gen_s > 0 ? (double)metrics.generated_tokens / gen_s : 0.0},
             Row{"edgellm_queue_depth", "gauge", "Requests waiting for a slot.",
                 awake ? (double)live.pool->queued() : 0.0},
             Row{"edgellm_requests_processing", "gauge", "Requests generating.",
                 (double)metrics.processing},
             Row{"edgellm_resident_memory_bytes", "gauge", "Resident memory of the process.",
                 (double)resident_bytes()},
             Row{"edgellm_kv_cache_bytes", "gauge", "Bytes of KV cache allocated.", kv_total},
             Row{"edgellm_kv_cache_used_bytes", "gauge", "Bytes of KV cache holding tokens.",
                 kv_capacity > 0 ? kv_total * (double)kv_tokens / kv_capacity : 0.0},
         })
        metric(r);
    if (live.prompt_cache) {
        const auto st = live.prompt_cache->stats();
        for (const Row& r : {
                 Row{"edgellm_prompt_cache_ram_bytes", "gauge",
                     "Bytes of earlier prompts' KV kept in RAM (--cache-ram).",
                     (double)st.ram_bytes},
                 Row{"edgellm_prompt_cache_disk_bytes", "gauge",
                     "Bytes of KV files in --prompt-cache.", (double)st.disk_bytes},
                 Row{"edgellm_prompt_cache_entries", "gauge", "Cached prefixes (RAM or disk).",
                     (double)st.entries},
                 Row{"edgellm_prompt_cache_hits_total", "counter",
                     "Cached prefixes restored into a slot.", (double)st.hits},
                 Row{"edgellm_prompt_cache_restored_tokens_total", "counter",
                     "Prompt tokens restored from the prompt cache.", (double)st.restored_tokens},
                 Row{"edgellm_prompt_cache_write_errors_total", "counter",
                     "KV files that could not be written.", (double)st.write_errors},
             })
            metric(r);
    }
    out +=
        "# HELP edgellm_time_to_first_token_seconds Time from request to first token.\n"
        "# TYPE edgellm_time_to_first_token_seconds histogram\n";
    char line[160];
    for (size_t i = 0; i <= Metrics::kNumBuckets; ++i) {
        if (i < Metrics::kNumBuckets)
            std::snprintf(line, sizeof line,
                          "edgellm_time_to_first_token_seconds_bucket{le=\"%g\"} %llu\n",
                          Metrics::kBuckets[i], (unsigned long long)metrics.ttft_bucket[i]);
        else
            std::snprintf(line, sizeof line,
                          "edgellm_time_to_first_token_seconds_bucket{le=\"+Inf\"} %llu\n",
                          (unsigned long long)metrics.ttft_bucket[i]);
        out += line;
    }
    std::snprintf(line, sizeof line, "edgellm_time_to_first_token_seconds_sum %.6f\n",
                  (double)metrics.ttft_sum_us / 1e6);
    out += line;
    std::snprintf(line, sizeof line, "edgellm_time_to_first_token_seconds_count %llu\n",
                  (unsigned long long)metrics.ttft_count);
    out += line;
    res.send(200, "text/plain; version=0.0.4; charset=utf-8", out,
             {{"Process-Start-Time-Unix", std::to_string(process_start_unix)}});
}

}  // namespace edgellm::server
