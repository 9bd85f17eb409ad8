// The sampler's stages (include/edgellm/sampler.h has the chain they make up).
//
// A stage works on the tokens still in the running: first the dense row of every token's
// logit, then — once a stage has cut the set down — a list of candidates {id, logit, p}.
// Stages that only change logits (bias, penalties, the grammar's mask) work on either form;
// the first filter turns the row into a list (top-k straight into its k best, the others
// into every token). Buffers are sized at construction, so apply() does not allocate.
//
// The interface:
//   apply(work, rng)       change logits / drop candidates
//   accept(token, gen)     a token joined the sequence (gen: generated, not prompt)
//   reset()                back to the state after construction
//   clone()                an independent copy of the state
// A selector is the chain's last stage: it chooses one token (argmax, a draw, mirostat).
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>

namespace edgellm::sampling {

// One candidate token; `p` holds a weight for the stages that need one.
struct TokenData {
    int32_t id;
    float logit;
    float p;
};

// The set a stage works on. Row form: row[0, n_vocab) with every token. List form:
// cand[0, n) in no particular order. Logits are never NaN; they may be +-inf.
struct Work {
    float* row = nullptr;
    size_t n_vocab = 0;
    TokenData* cand = nullptr;  // capacity n_vocab
    size_t n = 0;
    bool is_list = false;

    // Turn the row into a list of every token (no-op in list form).
    void to_list();
};

using Rng = std::mt19937_64;

class Stage {
  public:
    virtual ~Stage() = default;
    virtual void apply(Work& w, Rng& rng) = 0;
    virtual void accept(int32_t token, bool generated) {
        (void)token;
        (void)generated;
    }
    virtual void reset() {}
    virtual std::unique_ptr<Stage> clone() const = 0;
    // " -> top-k 40" style, for Sampler::describe().
    virtual std::string describe() const = 0;
};

class Selector {
  public:
    virtual ~Selector() = default;
    virtual int32_t select(Work& w, Rng& rng) = 0;
    virtual void accept(int32_t token) { (void)token; }
    virtual void reset() {}
    virtual std::unique_ptr<Selector> clone() const = 0;
    virtual std::string describe() const = 0;
};

}  // namespace edgellm::sampling
