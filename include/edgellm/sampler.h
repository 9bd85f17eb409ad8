// The sampler: turns one row of logits into the next token through a chain of small stages,
// in llama.cpp's default order (common/sampling.cpp):
//
//   logits -> penalties -> top-k -> top-p -> min-p -> temperature -> draw
//   logits -> penalties -> argmax                         (temperature <= 0: greedy)
//
// Disabled stages are left out of the chain. The filters (top-k, top-p, min-p) and their
// probabilities work on the logits before temperature, as in llama.cpp; temperature only
// reshapes the distribution the final draw is made from.
//
// Bad numbers never crash it: a NaN logit counts as -inf (never chosen); a +inf logit wins
// over every finite one; if every logit is NaN or -inf the result is token 0.
//
// Not thread-safe: one Sampler per sequence. sample() does not allocate.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace edgellm {

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
};

class Sampler {
  public:
    // PRECONDITION: n_vocab > 0. Allocates every buffer sample() needs (O(n_vocab)).
    Sampler(const SamplerParams& params, int32_t n_vocab);
    ~Sampler();
    Sampler(Sampler&&) noexcept;
    Sampler& operator=(Sampler&&) noexcept;

    // Choose the next token from logits[n_vocab] (read only). Uses the history given by
    // accept(); does not record the chosen token (call accept() with it).
    // PRECONDITION: logits.size() == n_vocab.
    int32_t sample(std::span<const float> logits);

    // Record a token of the sequence (prompt tokens too) for the penalties. Ids outside
    // [0, n_vocab) are ignored.
    void accept(int32_t token);

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

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace edgellm
