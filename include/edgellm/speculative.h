// Speculative decoding: drafters that propose the tokens likely to come next, and the
// controller that decides, per sequence, how many to propose. Session::generate checks the
// drafts (SpeculativeParams in session.h): the model evaluates the step's token and the
// drafts in one batched step, and the sampler keeps each draft it would have chosen itself.
//
// Two drafters:
//   ModelDrafter  a small model with the main model's vocabulary (llama.cpp's -md), greedy,
//                 drafting while its probability of the next token stays above p_min;
//   NgramDrafter  prompt lookup (llama.cpp's --spec-type ngram-*): the tokens that followed
//                 the last occurrence of the sequence's last n tokens, from the prompt and
//                 the text generated so far. Free to run, and strong on code edits, JSON and
//                 quoted text.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "edgellm/grammar.h"
#include "edgellm/session.h"

namespace edgellm {

// What one draft cost, for the controller.
struct DraftCost {
    double ms = 0.0;          // drafting (the draft model's steps for these tokens)
    double catch_up_ms = 0.0;  // bringing the draft model's cache up to the sequence (a new
                               // prompt: a one-time cost per request, not per token)
};

class Drafter {
  public:
    virtual ~Drafter() = default;
    virtual const char* name() const = 0;
    // Up to max tokens likely to follow `history` (the whole sequence: what the cache holds
    // and the token about to be evaluated), appended to *out. With a grammar (a copy of the
    // sampler's position, which the drafter may advance), only tokens that fit it. Stops
    // early when *cancel is raised.
    virtual Result<DraftCost> draft(std::span<const int32_t> history, int max,
                                    GrammarMatcher* grammar, const std::atomic<bool>* cancel,
                                    std::vector<int32_t>* out) = 0;
    // After every decode step: it evaluated step_tokens tokens in step_ms, n_drafted of them
    // this drafter's drafts (0: a plain step, or another drafter's), n_kept of those kept.
    virtual void observe(int step_tokens, double step_ms, int n_drafted, int n_kept) {
        (void)step_tokens, (void)step_ms, (void)n_drafted, (void)n_kept;
    }
    // The speed-up it expects from its drafts (relative to plain decoding); a negative
    // value when it has not measured enough to say.
    virtual double expected_gain() const { return -1.0; }
    // A new request starts (its text may draft better or worse than the last one's).
    virtual void begin_request() {}
};

// Why a draft model cannot draft for a main model ("" when it can): the tokenizer kinds,
// BOS/EOS and the text of every token from id 5 must match (llama.cpp's rule, which lets a
// draft's vocabulary be a compatible superset: the sizes may differ by at most 128). The
// reason names the first token that differs.
std::string draft_vocab_mismatch(const Tokenizer& main, const Tokenizer& draft);

class ModelDrafter final : public Drafter {
  public:
    // Drafts with `model` on sequence `seq` of ctx (one sequence per main sequence; several
    // drafters share a context through `batcher`). Tokens at or above main_n_vocab are never
    // proposed.
    ModelDrafter(const Model& model, Context& ctx, int seq, float p_min, int64_t main_n_vocab,
                 StepBatcher* batcher = nullptr);
    // At most this many per step, whatever the step allows (0: no cap of its own).
    void set_max_draft(int n) { max_draft_ = n; }
    const char* name() const override { return "draft model"; }
    Result<DraftCost> draft(std::span<const int32_t> history, int max, GrammarMatcher* grammar,
                            const std::atomic<bool>* cancel, std::vector<int32_t>* out) override;
    // The draft model's cache of this sequence (its prefix is kept across requests).
    const KvSequence& cache() const { return cache_; }
    void clear() { cache_.clear(); }
    void set_p_min(float p) { p_min_ = p; }
    float p_min() const { return p_min_; }

  private:
    Context& ctx_;
    KvSequence cache_;
    float p_min_;
    int64_t main_n_vocab_;
    StepBatcher* batcher_;
    int max_draft_ = 0;
    std::vector<float> row_;  // a row masked by the grammar
};

class NgramDrafter final : public Drafter {
  public:
    // The lookup lengths tried by default (shorter matches draft too much that is not kept).
    static constexpr int kMinLookup = 3, kMaxLookup = 5;
    // Looks up the last n tokens, n from n_max down to n_min, and drafts what followed their
    // latest earlier occurrence, at most max_draft tokens per step (0: what the step allows).
    explicit NgramDrafter(int n_min = kMinLookup, int n_max = kMaxLookup, int max_draft = 0)
        : n_min_(n_min), n_max_(n_max), max_draft_(max_draft) {}
    const char* name() const override { return "ngram"; }
    Result<DraftCost> draft(std::span<const int32_t> history, int max, GrammarMatcher* grammar,
                            const std::atomic<bool>* cancel, std::vector<int32_t>* out) override;

  private:
    int n_min_, n_max_, max_draft_;
};

// Several drafters in turn (e.g. prompt lookup, which is free, before a draft model): the
// first that proposes anything drafts the step (an adaptive one proposes nothing while its
// drafts do not pay), and what the step showed of its drafts goes back to it (the step's
// cost to every one). (Ordering them by the gain each expects did worse here: the
// estimates are noisy and lookup's is for the steps where it finds a match.)
class ChainDrafter final : public Drafter {
  public:
    explicit ChainDrafter(std::vector<Drafter*> drafters) : d_(std::move(drafters)) {}
    const char* name() const override { return "chain"; }
    Result<DraftCost> draft(std::span<const int32_t> history, int max, GrammarMatcher* grammar,
                            const std::atomic<bool>* cancel, std::vector<int32_t>* out) override;
    void observe(int step_tokens, double step_ms, int n_drafted, int n_kept) override;
    void begin_request() override {
        for (Drafter* d : d_) d->begin_request();
    }

  private:
    std::vector<Drafter*> d_;
    int used_ = -1;  // which one drafted the last step
};

// Per sequence: the acceptance rate and the measured cost of drafting and of checking
// k drafts, and from them the draft length that gives the most tokens per second. With
// per-token acceptance a, a step with k drafts yields (1 - a^(k+1)) / (1 - a) tokens for
// k * (draft cost per token) + (cost of a step of k + 1 tokens); k = 0 is plain decoding.
// When plain decoding wins, speculation is off and is tried again after a while (a probe),
// less and less often while it keeps losing.
class SpecController {
  public:
    SpecController(int n_max, int n_min);
    // The most drafts for the next step (0: decode without drafting).
    int choose();
    void observe_draft(int n_drafted, double ms);
    void observe_step(int n_tokens, double ms);
    void observe_accept(int n_drafted, int n_kept);
    // A new request. For a drafter whose drafts are nearly free (lookup), what was learnt of
    // the acceptance counts half and, if off, it probes again soon; a costly one (a draft
    // model) that is off probes once at the start of a later request (never mid-reply,
    // where it would first have to catch up with the whole text). Costs are kept.
    void new_request();

    double accept_rate() const;  // per drafted token, over the recent steps
    // Expected speed of k drafts per step relative to plain decoding (1: the same), from
    // what has been measured; 0 when not measured yet.
    double expected_gain(int k) const;
    int n_max() const { return n_max_; }
    int64_t drafted() const { return drafted_; }
    int64_t accepted() const { return accepted_; }

  private:
    double step_ms(int n) const;  // a step of n tokens: measured, else interpolated
    bool could_pay() const;       // some draft length beats plain decoding if all are kept
    bool costly() const;          // a draft token costs more than 5 % of a step (a model)
    double tokens_per_ms(int k) const;
    int n_max_, n_min_;
    std::vector<double> step_ms_;  // EMA per step size (index n; 0: not measured)
    double draft_ms_ = -1.0;       // per drafted token (EMA)
    double empty_ms_ = -1.0;       // an attempt that drafted nothing (EMA)
    double empty_share_ = 0.0;     // how often attempts draft nothing (EMA)
    double trials_ = 0.0, hits_ = 0.0;  // decayed: positions tried, drafts kept
    int64_t drafted_ = 0, accepted_ = 0;
    int n_observed_ = 0;  // steps whose drafts were checked
    bool probe_pending_ = false;           // a costly drafter's probe at this request's start
    int probe_requests_ = 1, requests_off_ = 0;  // requests between its probes, since the last
    int plain_steps_ = 0;    // since speculation was switched off
    int probe_every_ = 16;   // plain steps between probes (doubles while they lose)
    bool off_ = false;
};

// A drafter with its own controller: it drafts as many tokens as the controller says pay
// (none when drafting loses), and learns from every step. Per sequence, kept across
// requests (the server keeps one per slot and drafter).
class AdaptiveDrafter final : public Drafter {
  public:
    AdaptiveDrafter(Drafter& inner, int n_max, int n_min) : inner_(inner), ctl_(n_max, n_min) {}
    const char* name() const override { return inner_.name(); }
    Result<DraftCost> draft(std::span<const int32_t> history, int max, GrammarMatcher* grammar,
                            const std::atomic<bool>* cancel, std::vector<int32_t>* out) override;
    void observe(int step_tokens, double step_ms, int n_drafted, int n_kept) override;
    double expected_gain() const override;
    void begin_request() override { ctl_.new_request(); }
    const SpecController& controller() const { return ctl_; }

  private:
    Drafter& inner_;
    SpecController ctl_;
};

}  // namespace edgellm
