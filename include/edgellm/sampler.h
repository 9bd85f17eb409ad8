// The sampler: turns one row of logits into the next token through a chain of small stages
// (src/text/sampler_chain.h has the stage interface). The default order is llama.cpp's
// (common/sampling.cpp); `order` (llama.cpp's `samplers`) changes it:
//
//   logits -> logit bias -> penalties -> top-n-sigma -> top-k -> typical -> top-p -> min-p
//          -> xtc -> temperature -> dist
//   logits -> logit bias -> penalties -> temperature -> mirostat (1 or 2)   (mirostat on)
//   logits -> logit bias -> penalties -> argmax                     (temperature <= 0: greedy)
//
// Disabled stages are left out of the chain. The filters (top-k, top-p, min-p) and their
// probabilities work on the logits before temperature, as in llama.cpp; temperature only
// reshapes the distribution the final draw is made from.
//
// A grammar (GBNF or a JSON schema's) is one more stage, run the way llama.cpp's
// common_sampler runs it: the chain first chooses a token without it; only when the
// grammar rejects that token are the logits masked by the grammar and the chain run again.
// A lazy grammar waits for one of its triggers in the generated text (a tool call's opening)
// and constrains from there on. A thinking block (ThinkingParams) is counted, cut at its
// budget, and kept out of the grammar.
//
// Bad numbers never crash it: a NaN logit counts as -inf (never chosen); a +inf logit wins
// over every finite one; if every logit is NaN or -inf the result is token 0 (with a grammar:
// an end-of-generation token).
//
// Not thread-safe: one Sampler per sequence. clone() copies the whole state (history,
// random stream, grammar position, mirostat's mu), so a draft can sample ahead on a copy.
// sample() does not allocate without a grammar.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "edgellm/grammar.h"

namespace edgellm {

// The stages whose order `SamplerParams::order` sets (llama.cpp's `samplers` names).
enum class SamplerStageKind { Penalties, Dry, TopNSigma, TopK, TypicalP, TopP, MinP, Xtc, Temperature };
// "top_k", "typ_p" / "typical_p", "top_p", "min_p", "xtc", "temperature" / "temp",
// "penalties", "dry", "top_n_sigma"; nullopt for anything else.
std::optional<SamplerStageKind> sampler_stage_from_name(std::string_view name);
// llama.cpp's one-letter codes (--sampling-seq "edkypmxt"): e penalties, d dry, s
// top_n_sigma, k top_k, y typ_p, p top_p, m min_p, x xtc, t temperature.
std::optional<SamplerStageKind> sampler_stage_from_letter(char c);
const char* sampler_stage_name(SamplerStageKind k);

// Where a lazy grammar starts constraining: the first occurrence of `word` in the generated
// text (from its first byte), or, with at_start, the word at the very start of the reply
// (after white space).
struct GrammarTrigger {
    std::string word;
    bool at_start = false;
};

// A thinking model's reasoning block in the reply (<think> ... </think>, Gemma 4's thought
// channel: the blocks text/chat/reasoning.h splits off) and how many tokens it may take, as
// llama.cpp's --reasoning-budget. The block's tokens are those after its opening and before
// its close; once `budget` of them are taken (and its text ends on a whole UTF-8
// character) the sampler forces the close and the answer follows. A grammar constrains the
// answer only: it waits while a block is open and starts after its close (the blank lines
// after it let by), and the token that opens a block at the reply's start passes it while
// thinking is allowed. The tokens' text comes from SamplerParams::grammar_vocab.
struct ThinkingParams {
    bool on = false;      // follow the reply's blocks (a chat reply)
    bool opened = false;  // the prompt opened a block: the reply starts inside it
    int32_t budget = -1;  // tokens a block may take; -1: no limit; 0: none (closed at once)
    // Each close's text and tokens (the model's tokenization of "</think>", "<channel|>"),
    // forced past the budget; a block whose close is not here is not cut.
    std::vector<std::pair<std::string, std::vector<int32_t>>> closes;
};

// SamplerParams::seed value that asks for a random seed (llama.cpp's LLAMA_DEFAULT_SEED).
inline constexpr uint64_t kRandomSeed = 0xFFFFFFFF;

// The user's knobs, with llama.cpp's defaults and meanings. Out-of-range values are
// normalised by the Sampler (see Sampler::params()): a non-finite float switches its stage
// off (a NaN temperature means greedy), repeat_penalty <= 0 is off, min_p > 1 acts as 1,
// repeat_last_n above 2^20 acts as 2^20.
struct SamplerParams {
    float temperature = 0.8f;  // <= 0: greedy (argmax after penalties)
    int32_t top_k = 40;        // keep the k most likely; <= 0: off
    float top_p = 0.95f;       // keep the smallest set with cumulative probability >= p; >= 1: off
    float min_p = 0.05f;       // drop tokens with probability < min_p * max probability; <= 0: off
    // For a token seen in the last repeat_last_n accepted tokens (CTRL rule, as llama.cpp):
    //   logit = logit > 0 ? logit / repeat_penalty : logit * repeat_penalty
    //   logit -= count * frequency_penalty + presence_penalty
    float repeat_penalty = 1.0f;     // 1: off
    float presence_penalty = 0.0f;   // subtracted once if the token is in the window
    float frequency_penalty = 0.0f;  // subtracted once per occurrence in the window
    int32_t repeat_last_n = 64;      // window in tokens; 0: penalties off; -1 (any < 0): all
    uint64_t seed = kRandomSeed;     // kRandomSeed: draw a random seed (see seed_used())
    // Locally typical sampling (Meister et al. 2022): keep the tokens whose surprise is
    // closest to the entropy, up to this mass; >= 1: off.
    float typical_p = 1.0f;
    // XTC (exclude top choices): with this probability per token, drop every token whose
    // probability is >= xtc_threshold except the least likely of them; 0: off; a threshold
    // above 0.5 never finds two such tokens (off).
    float xtc_probability = 0.0f;
    float xtc_threshold = 0.1f;
    // top-n-sigma (Tang et al. 2024): keep logits >= max - n * standard deviation; <= 0: off.
    float top_n_sigma = -1.0f;
    // Mirostat (Basu et al. 2021): 1 or 2 replaces top-k .. min-p with a surprise target tau
    // and learning rate eta; 0: off.
    int32_t mirostat = 0;
    float mirostat_tau = 5.0f;
    float mirostat_eta = 0.1f;
    // Added to a token's logit before every stage; -inf: never chosen.
    std::vector<std::pair<int32_t, float>> logit_bias;
    // The filter stages in the order to run them (llama.cpp's `samplers`); empty: the default
    // order above. A stage left out of a non-empty order does not run.
    std::vector<SamplerStageKind> order;
    // Constrain the output to this grammar (null: none). grammar_vocab must be the model's.
    std::shared_ptr<const Grammar> grammar;
    std::shared_ptr<const GrammarVocab> grammar_vocab;
    // Non-empty: the grammar is lazy and starts at the first of these triggers.
    std::vector<GrammarTrigger> grammar_triggers;
    // The reply's thinking blocks and their budget (needs grammar_vocab).
    ThinkingParams thinking;
};

struct TokenLogprob;

class Sampler {
  public:
    // PRECONDITION: n_vocab > 0. Allocates every buffer sample() needs (O(n_vocab)).
    Sampler(const SamplerParams& params, int32_t n_vocab);
    ~Sampler();
    Sampler(Sampler&&) noexcept;
    Sampler& operator=(Sampler&&) noexcept;
    // An independent copy of the whole state (allocates like the constructor).
    Sampler clone() const;

    // Choose the next token from logits[n_vocab] (read only). Uses the history given by
    // accept(); does not record the chosen token (call accept() with it).
    // PRECONDITION: logits.size() == n_vocab.
    int32_t sample(std::span<const float> logits);
    // The same, also reporting the distribution the token was drawn from (llama.cpp's
    // post_sampling_probs): in *top the n_probs most likely tokens after the filters and the
    // temperature (probabilities above 0 only, as log-probabilities), in *chosen_logprob the
    // drawn token's (-inf when a grammar overrode the chain).
    int32_t sample(std::span<const float> logits, size_t n_probs, std::vector<TokenLogprob>* top,
                   float* chosen_logprob);

    // Record a generated token: the penalties' history, the grammar's position, mirostat's
    // surprise target. Ids outside [0, n_vocab) are ignored.
    void accept(int32_t token);
    // Record a prompt token: the penalties' history only.
    void accept_prompt(int32_t token);

    // A grammar is set and constraining now (a lazy one only after its trigger).
    bool grammar_active() const;
    // A copy of the grammar's position while it constrains (nullopt otherwise), e.g. for a
    // draft that must fit the grammar too.
    std::optional<GrammarMatcher> grammar_matcher() const;
    // The grammar is set and has nothing more to admit but the end of generation.
    bool grammar_done() const;
    // Tokens taken inside thinking blocks so far (ThinkingParams; their closes not counted).
    int64_t thinking_tokens() const;

    // Forget the history, keep the params, restart the random stream: a fixed seed repeats
    // the same stream; kRandomSeed draws a fresh random seed (as llama.cpp's reset does).
    void reset();

    // The params in effect, after normalisation.
    const SamplerParams& params() const;
    // The seed of the current random stream (the drawn one when params().seed is
    // kRandomSeed; never kRandomSeed itself, so it can be passed back to replay a run).
    uint64_t seed_used() const;
    int32_t n_vocab() const;
    // The chain in effect, e.g. "penalties -> top-k 40 -> top-p 0.95 -> min-p 0.05 -> temp 0.8
    // -> dist" (for logs).
    std::string describe() const;

    struct Impl;

  private:
    explicit Sampler(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

// One token's log-probability under the model (log-softmax of the raw logits, before any
// sampling stage), as OpenAI's logprobs and llama.cpp's n_probs report it.
struct TokenLogprob {
    int32_t id;
    float logprob;
};
// The log-probability of `chosen` and, in *top, the n most likely tokens (most likely
// first, lower id on ties). NaN logits count as -inf. O(n_vocab).
float token_logprobs(std::span<const float> logits, int32_t chosen, size_t n,
                     std::vector<TokenLogprob>* top);

}  // namespace edgellm
