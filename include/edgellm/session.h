// A generation session: one sequence in a context, with the tokens its KV cache holds, so
// a new request that shares a prefix with the last one only evaluates what is new.
#pragma once

#include <atomic>
#include <chrono>
#include <variant>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "edgellm/model.h"
#include "edgellm/sampler.h"
#include "edgellm/tokenizer.h"

namespace edgellm {

// Sessions that share one context (its threads and scratch) evaluate their steps together:
// each session submits its step (a prompt chunk or the one token it decoded) and one
// forward pass evaluates every pending step, reading the weights once for all of them.
// A step waits at most `gather` for the other generating sessions' steps to arrive.
class StepBatcher {
  public:
    explicit StepBatcher(Context& ctx,
                         std::chrono::microseconds gather = std::chrono::microseconds(2000));
    // Evaluate tokens for sequence seq in the next forward pass and copy the logits of the
    // last one to out (n_vocab floats). A step that runs alone stops at the next layer
    // when *cancel is raised (fails with Context::kAborted).
    Result<std::monostate> eval(int seq, std::span<const int32_t> tokens, std::span<float> out,
                                const std::atomic<bool>* cancel);
    // A session generating now (its steps are waited for).
    void enter();
    void leave();
    int active() const;
    int64_t n_batch() const;
    uint64_t passes() const;  // forward passes run
    uint64_t steps() const;   // steps evaluated (more than passes when steps were batched)

  private:
    struct Request;
    Context& ctx_;
    const std::chrono::microseconds gather_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::vector<Request*> pending_;  // in arrival order; reserved once (no allocation per step)
    bool running_ = false;
    int active_ = 0;
    uint64_t passes_ = 0, steps_ = 0;
};

// A generated token's log-probability and the most likely alternatives (logprobs, n_probs).
struct TokenProbs {
    int32_t id = 0;
    float logprob = 0.0f;
    std::vector<TokenLogprob> top;
};

struct GenerateParams {
    int32_t n_predict = -1;         // most tokens to generate; -1: until EOS or context full
    std::vector<std::string> stop;  // stop strings (not emitted)
    bool ignore_eos = false;
    SamplerParams sampling;
    // Raised from another thread (a client went away): generation stops before the next
    // step, prefill at the next layer; the KV cache keeps what was fully evaluated.
    const std::atomic<bool>* cancel = nullptr;
    // Set when the context is shared with other sessions: steps are evaluated together.
    StepBatcher* batcher = nullptr;
    // When set, counts the tokens generated so far (for progress reports from other threads).
    std::atomic<int64_t>* progress = nullptr;
    // When set: one entry per generated token (end-of-generation tokens too), appended as it
    // is sampled, with the n_probs most likely tokens (n_probs may be 0: the token's own
    // logprob only).
    std::vector<TokenProbs>* probs = nullptr;
    int32_t n_probs = 0;
};

enum class StopReason { Eos, StopString, Length, ContextFull, Cancelled };
// (Eos also when a grammar has ended and end-of-generation tokens are ignored.)
const char* stop_reason_name(StopReason r);

struct GenerateResult {
    std::string text;             // everything emitted
    std::vector<int32_t> tokens;  // generated ids (including a final EOS, if any)
    StopReason stop = StopReason::Length;
    std::string stop_string;  // which stop string matched
    int64_t n_prompt = 0;     // prompt tokens
    int64_t n_cached = 0;     // prompt tokens reused from the KV cache
    int64_t n_generated = 0;
    double prompt_ms = 0.0;    // evaluating the new prompt tokens
    double first_token_ms = 0.0;  // from the call to the first sampled token (0: none)
    double generate_ms = 0.0;  // from the first sampled token to the end
    // Tokens per second of generation; 0 when fewer than two tokens were generated (the
    // first comes from the prompt's step, so there was no decode step to time).
    double prompt_per_second() const;
    double generate_per_second() const;
};

class Session {
  public:
    // The model, tokenizer and context must outlive the session, which uses the context's
    // sequence `seq` (one session per sequence).
    Session(const Model& model, const Tokenizer& tok, Context& ctx, int seq = 0);

    // Evaluate the prompt (reusing the cached common prefix) and generate. on_text gets
    // each piece of text as it becomes final (whole UTF-8 characters, stop strings held
    // back until they can no longer match); returning false cancels. A cancelled
    // generation (on_text or p.cancel) is a result with StopReason::Cancelled, also when
    // it was cancelled during the prompt.
    Result<GenerateResult> generate(std::span<const int32_t> prompt, const GenerateParams& p,
                                    const std::function<bool(std::string_view)>& on_text);

    // Tokens whose K/V the context holds, in order.
    const std::vector<int32_t>& cached_tokens() const { return cached_; }
    // How many tokens the cache holds; unlike cached_tokens(), safe to read from another
    // thread while the session generates (for reports).
    int64_t n_cached() const { return n_cached_.load(std::memory_order_relaxed); }
    void clear();
    int seq() const { return seq_; }
    // Save the cached tokens and their KV cache to a file (atomically); bytes written.
    Result<size_t> save(const std::string& path) const;
    // Load what save() wrote; returns the positions restored. On failure the session is
    // empty.
    Result<int64_t> restore(const std::string& path);

  private:
    const Model& model_;
    const Tokenizer& tok_;
    Context& ctx_;
    int seq_ = 0;
    std::vector<int32_t> cached_;
    std::atomic<int64_t> n_cached_{0};
};

}  // namespace edgellm
