// Thinking models write their reasoning before the answer: Qwen3, DeepSeek-R1 and SmolLM3
// between <think> and </think>, Gemma 4 in its thought channel, <|channel>thought ...
// <channel|>. As llama-server does with --reasoning-format deepseek (its default, "auto"),
// the chat API sends it as `reasoning_content` and the answer as `content`.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace edgellm {

struct ReasoningSplit {
    std::string reasoning;
    std::string content;
};

// Whether the rendered prompt already opened the thinking block (a template that ends its
// generation prompt with "<think>"), so the reply starts inside it.
bool prompt_opens_thinking(std::string_view prompt);
// Whether it ends with a closed block (Qwen 3's and SmolLM3's "<think>\n\n</think>", Gemma
// 4's empty thought channel): the template turned thinking off.
bool prompt_closes_thinking(std::string_view prompt);
// The texts that close a block: the end-of-thinking markers a budget forces.
const std::vector<std::string_view>& thinking_closes();

// A whole reply: reasoning is what stands between a leading <think> (or the reply's start,
// when the prompt opened the block) and </think>, all of the reply when it ended before
// </think>; content is the rest, without the blank lines after </think>. A reply that does
// not start with <think> is all content. Gemma 4's thought channel counts the same way
// (the blanks after "<|channel>thought" are not reasoning), and as in llama.cpp a further
// thought block later in its answer is reasoning too and a stray <|channel> or <channel|>
// token is dropped.
ReasoningSplit split_reasoning(std::string_view reply, bool opened_in_prompt);

// The same while streaming: each push says which new text can go out as reasoning and
// which as content; a tag cut across pieces is held back until it is whole.
class ReasoningStream {
  public:
    explicit ReasoningStream(bool opened_in_prompt);
    void push(std::string_view piece, std::string* reasoning, std::string* content);
    // The reply ended: whatever was held back.
    void finish(std::string* reasoning, std::string* content);

    // Where the stream stands (for the sampler's thinking budget, text/chat/thinking.h):
    // inside a block, and the text that closes it;
    bool thinking() const { return state_ == State::Thinking; }
    std::string_view closing() const { return close_; }
    // whether the text held back may still become the opening of a block, or its close;
    bool may_open() const;
    bool may_close() const { return state_ == State::Thinking && !held_.empty(); }
    // whether `piece`, pushed next, would complete the opening of a block at the reply's
    // start.
    bool would_open(std::string_view piece) const;

  private:
    enum class State { Start, Thinking, Answer };
    void advance(std::string* reasoning, std::string* content);
    bool answer(std::string* content);  // false: wait for more text
    State state_;
    std::string_view close_;           // the tag that ends the block being read
    bool skip_blank_ = false;          // just after the block: blank lines before the answer
    bool skip_thought_blank_ = false;  // just after <|channel>thought: blanks before it
    std::string held_;
};

}  // namespace edgellm
