// A generation session: one sequence in a context, with the tokens its KV cache holds, so
// a new request that shares a prefix with the last one only evaluates what is new.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "edgellm/model.h"
#include "edgellm/sampler.h"
#include "edgellm/tokenizer.h"

namespace edgellm {

struct GenerateParams {
    int32_t n_predict = -1;         // most tokens to generate; -1: until EOS or context full
    std::vector<std::string> stop;  // stop strings (not emitted)
    bool ignore_eos = false;
    SamplerParams sampling;
};

enum class StopReason { Eos, StopString, Length, ContextFull, Cancelled };
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
    double generate_ms = 0.0;  // from the first sampled token to the end
    double prompt_per_second() const;
    double generate_per_second() const;
};

class Session {
  public:
    // The model, tokenizer and context must outlive the session.
    Session(const Model& model, const Tokenizer& tok, Context& ctx);

    // Evaluate the prompt (reusing the cached common prefix) and generate. on_text gets
    // each piece of text as it becomes final (whole UTF-8 characters, stop strings held
    // back until they can no longer match); returning false cancels.
    Result<GenerateResult> generate(std::span<const int32_t> prompt, const GenerateParams& p,
                                    const std::function<bool(std::string_view)>& on_text);

    // Tokens whose K/V the context holds, in order.
    const std::vector<int32_t>& cached_tokens() const { return cached_; }
    void clear();

  private:
    const Model& model_;
    const Tokenizer& tok_;
    Context& ctx_;
    std::vector<int32_t> cached_;
};

}  // namespace edgellm
