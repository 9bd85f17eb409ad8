// Thinking models (Qwen3, DeepSeek-R1) write their reasoning between <think> and </think>
// before the answer. As llama-server does with --reasoning-format deepseek (its default,
// "auto"), the chat API sends it as `reasoning_content` and the answer as `content`.
#pragma once

#include <string>
#include <string_view>

namespace edgellm {

struct ReasoningSplit {
    std::string reasoning;
    std::string content;
};

// Whether the rendered prompt already opened the thinking block (a template that ends its
// generation prompt with "<think>"), so the reply starts inside it.
bool prompt_opens_thinking(std::string_view prompt);

// A whole reply: reasoning is what stands between a leading <think> (or the reply's start,
// when the prompt opened the block) and </think>, all of the reply when it ended before
// </think>; content is the rest, without the blank lines after </think>. A reply that does
// not start with <think> is all content.
ReasoningSplit split_reasoning(std::string_view reply, bool opened_in_prompt);

// The same while streaming: each push says which new text can go out as reasoning and
// which as content; a tag cut across pieces is held back until it is whole.
class ReasoningStream {
  public:
    explicit ReasoningStream(bool opened_in_prompt);
    void push(std::string_view piece, std::string* reasoning, std::string* content);
    // The reply ended: whatever was held back.
    void finish(std::string* reasoning, std::string* content);

  private:
    enum class State { Start, Thinking, Answer };
    void advance(std::string* reasoning, std::string* content);
    State state_;
    bool skip_blank_ = false;  // just after </think>: blank lines before the answer
    std::string held_;
};

}  // namespace edgellm
