// A thinking model's reasoning block followed token by token while a reply is sampled
// (edgellm/sampler.h, ThinkingParams): the sampler asks it which token to force, which
// tokens pass a grammar that does not admit them, and what each token it takes is to the
// grammar. The block is the one text/chat/reasoning.h splits off as reasoning_content,
// found by the same rules, so what is counted and cut here is what the client sees as
// reasoning.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "edgellm/grammar.h"
#include "edgellm/sampler.h"
#include "text/chat/reasoning.h"

namespace edgellm {

// The budget a chat reply's thinking blocks get, `budget` (-1: no limit) unless thinking is
// off for it: when the rendered prompt ends with a closed block (the template turned
// thinking off: Qwen 3 and 3.5, SmolLM3 also for /no_think in its system message, Gemma 4),
// or when the request asks for none (`enabled` false) and the template has no switch of its
// own (DeepSeek-R1's always opens the block). Off is 0: a block the model opens all the
// same is closed at once.
int32_t chat_thinking_budget(std::string_view prompt, bool template_has_switch, bool enabled,
                             int32_t budget);

class ThinkingBudget {
  public:
    // PRECONDITION: vocab is the model's (the tokens' text).
    ThinkingBudget(const ThinkingParams& p, std::shared_ptr<const GrammarVocab> vocab);

    // The token the reply must take next (the close being forced), or -1.
    int32_t forced() const;
    // Inside a block: its tokens are no grammar's business.
    bool inside() const { return mode_ != Mode::Free; }
    // Whether a grammar that does not admit `token` lets it by all the same: the token that
    // completes a block's opening at the reply's start (while thinking is allowed), and a
    // blank just after a block's close.
    bool passes_grammar(int32_t token) const;

    // What a token taken into the reply is to the grammar:
    enum class Step {
        Answer,   // the answer's: the grammar takes it
        MayOpen,  // the answer's so far, but it may be the start of a block's opening
        Opened,   // it opened a block: the grammar forgets the tokens since the first MayOpen
        Block,    // inside a block, or its close
        Blank,    // a blank just after a close (the grammar starts after them)
    };
    Step accept(int32_t token);

    // Tokens taken inside blocks (after an opening, before its close).
    int64_t tokens() const { return total_; }
    void reset();

  private:
    enum class Mode { Free, Counting, Forcing };
    void enter_block();
    void count(const std::string& piece);
    void start_forcing();

    ThinkingParams params_;
    std::shared_ptr<const GrammarVocab> vocab_;
    ReasoningStream stream_;
    Mode mode_ = Mode::Free;
    int64_t used_ = 0;   // tokens of the open block
    int64_t total_ = 0;  // of every block
    int utf8_need_ = 0;  // continuation bytes the block's text still waits for
    size_t force_ = 0;  // the close being forced (in params_.closes)
    size_t force_at_ = 0;
    int blanks_left_ = 0;  // blanks that may still pass after a close
    std::string scratch_;  // (the stream's output, not kept)
};

}  // namespace edgellm
