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
    // last one to out (n_vocab floats), or of every token when all_logits (n x n_vocab).
    // A step that runs alone stops at the next layer when *cancel is raised (fails with
    // Context::kAborted).
    Result<std::monostate> eval(int seq, std::span<const int32_t> tokens, std::span<float> out,
                                const std::atomic<bool>* cancel, bool all_logits = false);
    // Run fn with the context to itself (no pass runs meanwhile): for evaluations that are
    // not a step of logits, such as embeddings.
    void exclusive(const std::function<void()>& fn);
    // A session generating now (its steps are waited for).
    void enter();
    void leave();
    // enter() for as long as it lives (a null batcher: nothing).
    class Generating {
      public:
        explicit Generating(StepBatcher* b) : b_(b) {
            if (b_) b_->enter();
        }
        ~Generating() {
            if (b_) b_->leave();
        }
        Generating(const Generating&) = delete;
        Generating& operator=(const Generating&) = delete;

      private:
        StepBatcher* b_;
    };
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

// What one sequence of a context holds: the tokens whose K/V its cache has (and, for a
// hybrid model, whose recurrent state it has folded in), in order. The only code that
// changes the sequence's cache, so the tokens and the cache never disagree: every
// evaluation appends through it, and every roll-back (a new prompt that shares only a
// prefix, a rejected draft) goes through rollback() or rollback_to(). Not thread-safe,
// except size().
class KvSequence {
  public:
    // Sequence `seq` of ctx (which must outlive this); it starts empty.
    KvSequence(Context& ctx, int seq);

    Context& context() const { return ctx_; }
    int seq() const { return seq_; }
    const std::vector<int32_t>& tokens() const { return tokens_; }
    // How many tokens the cache holds; safe to read from another thread while it evaluates.
    int64_t size() const { return n_.load(std::memory_order_relaxed); }

    // Evaluate tokens after those held (through the batcher when one is given, with the
    // steps of the context's other sequences) and hold them. Returns the logits of every
    // token ([n][n_vocab]) when all_logits, else of the last; valid until this sequence's
    // next eval. A raised cancel flag stops the evaluation at the next layer (fails with
    // Context::kAborted); what the cache kept is what the sequence then holds.
    Result<std::span<const float>> eval(std::span<const int32_t> tokens, bool all_logits,
                                        const std::atomic<bool>* cancel = nullptr,
                                        StepBatcher* batcher = nullptr);
    // Embed tokens from position 0 (Context::embed; what the sequence held is replaced by
    // them). With a batcher it runs between passes, the context to itself.
    Result<std::vector<float>> embed(std::span<const int32_t> tokens, Context::Pooling pooling,
                                     const std::atomic<bool>* cancel = nullptr,
                                     StepBatcher* batcher = nullptr);
    // Forget every token from position n_keep on. Returns how many are held: n_keep (or
    // fewer when fewer were held), or 0 when a sliding-window ring could not go back so far
    // or the model keeps a recurrent state (can_rollback) and n_keep < size().
    int64_t rollback(int64_t n_keep);
    // Whether rollback keeps any shorter prefix: false for a hybrid model, whose recurrent
    // state goes back only to a checkpoint (Context::recurrent_reason says why).
    bool can_rollback() const { return ctx_.recurrent_reason() == nullptr; }
    // A checkpoint of what the sequence holds now (its length, a digest of its tokens and,
    // for a hybrid, a copy of the recurrent state: Context::save_recurrent, a fixed size),
    // and the sequence back to one: the tokens after it dropped, the state restored. Taking
    // one into a checkpoint of the same model allocates nothing.
    struct Checkpoint {
        int64_t n = -1;  // tokens held when taken (-1: none)
        uint64_t digest = 0;
        Context::RecurrentCheckpoint state;
    };
    void save_checkpoint(Checkpoint* into) const;
    // Returns the tokens held (cp.n). Errors, nothing changed: a checkpoint never taken or of
    // another model, fewer tokens held than it, tokens that are no longer its own.
    Result<int64_t> rollback_to(const Checkpoint& cp);
    // Keep the longest common prefix with `tokens`, at most max_keep of it; returns its length.
    int64_t keep_prefix(std::span<const int32_t> tokens, int64_t max_keep);
    // What keep_prefix would keep, without doing it (for a hybrid model: all it holds when
    // `tokens` go on from it, else nothing).
    int64_t reusable_prefix(std::span<const int32_t> tokens, int64_t max_keep) const;
    // Drop tokens [n_keep, n_keep + n_discard) and move the later ones down (Context::shift).
    // Returns the tokens dropped (none for a hybrid model).
    int64_t shift(int64_t n_keep, int64_t n_discard);
    void clear() { rollback(0); }

    // Replace what the sequence holds with `tokens` and their K/V and recurrent state
    // (Context::snapshot bytes of the same layout; edgellm/prompt_cache.h keeps and files them). Returns the
    // positions restored; on failure (another layout, damaged bytes, tokens and cache that
    // disagree, an id outside the vocabulary) the sequence is left empty.
    Result<int64_t> restore(std::span<const int32_t> tokens, std::span<const uint8_t> kv);

  private:
    void sync();  // the tokens cut to what the cache holds (after a failed eval)
    Context& ctx_;
    int seq_;
    std::vector<int32_t> tokens_;
    std::atomic<int64_t> n_{0};
    std::vector<float> logits_;  // a batched step's logits, copied out for this sequence
};

class Drafter;

// Speculative decoding (edgellm/speculative.h): before each step a drafter proposes tokens
// to follow, the model evaluates the step's token and the drafts in one batched step, and
// the sampler, run on each position's logits in turn, keeps the drafts as long as it
// chooses them. The sampler sees the same logits and draws the same random numbers as
// without speculation, so the output is the same token for token (greedy or seeded).
struct SpeculativeParams {
    // null: no speculation. An AdaptiveDrafter chooses how many to draft per step from
    // what it measured; a bare drafter drafts up to n_max every step. None on a hybrid
    // model (KvSequence::can_rollback): its recurrent state cannot drop rejected drafts.
    Drafter* drafter = nullptr;
    int32_t n_max = 16;  // most tokens drafted per step (llama.cpp's --draft-max)
    int32_t n_min = 0;   // fewer drafted than this: evaluate the step alone (--draft-min)
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
    // When set: called before the prompt's first step and after each (on the generating
    // thread) with the prompt tokens processed so far (the reused prefix counts as
    // processed), all of them, the reused prefix, and the milliseconds since prefill began.
    std::function<void(int64_t processed, int64_t total, int64_t cached, double ms)>
        on_prompt_progress;
    // When set: one entry per generated token (end-of-generation tokens too), appended as it
    // is sampled, with the n_probs most likely tokens (n_probs may be 0: the token's own
    // logprob only).
    std::vector<TokenProbs>* probs = nullptr;
    int32_t n_probs = 0;
    // The probabilities after the sampler's filters and temperature instead of the model's
    // (llama.cpp's post_sampling_probs).
    bool post_sampling_probs = false;
    SpeculativeParams spec;
    // A context that fills up while generating ends the reply (StopReason::ContextFull),
    // or with context_shift drops the oldest tokens after the first n_keep (-1: the whole
    // prompt; a leading BOS is always kept) and goes on: n_discard of them (0: half of
    // those after n_keep), as llama-server's --context-shift does. Never on a hybrid model
    // (Context::recurrent_reason): the reply ends as without it.
    bool context_shift = false;
    int64_t n_keep = 0;
    int64_t n_discard = 0;
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
    int64_t n_reasoning = 0;  // of those, inside thinking blocks (SamplerParams::thinking)
    double prompt_ms = 0.0;    // evaluating the new prompt tokens
    double first_token_ms = 0.0;  // from the call to the first sampled token (0: none)
    double generate_ms = 0.0;  // from the first sampled token to the end
    int64_t n_drafted = 0;     // tokens drafted (speculative decoding)
    int64_t n_accepted = 0;    // of those, kept
    int64_t n_draft_steps = 0; // steps that checked drafts
    int64_t n_shifts = 0;      // context shifts (GenerateParams::context_shift)
    int64_t n_discarded = 0;   // tokens they dropped
    int64_t n_kept = 0;        // tokens at the start every shift kept
    // Tokens per second of generation: the n - 1 decode steps after the first token (which
    // comes from the prompt's step) over generate_ms; 0 when fewer than two tokens.
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

    // What the sequence's KV cache holds (its tokens, roll-back, save and restore).
    KvSequence& cache() { return cache_; }
    const KvSequence& cache() const { return cache_; }
    // Tokens whose K/V the context holds, in order.
    const std::vector<int32_t>& cached_tokens() const { return cache_.tokens(); }
    // How many tokens the cache holds; unlike cached_tokens(), safe to read from another
    // thread while the session generates (for reports).
    int64_t n_cached() const { return cache_.size(); }
    void clear() { cache_.clear(); }
    int seq() const { return cache_.seq(); }

  private:
    const Model& model_;
    const Tokenizer& tok_;
    Context& ctx_;
    KvSequence cache_;
};

}  // namespace edgellm
