#include "text/chat/reasoning.h"

#include "text/chat/text_scan.h"

namespace edgellm {

namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";
// Gemma 4: its thought channel, and its channel tokens on their own
constexpr std::string_view kChannel = "<|channel>";
constexpr std::string_view kThought = "<|channel>thought";
constexpr std::string_view kChannelEnd = "<channel|>";

bool starts_with(std::string_view s, std::string_view word) {
    return s.substr(0, word.size()) == word;
}

// s may still become word when more arrives (s is a proper prefix of it).
bool may_become(std::string_view s, std::string_view word) {
    return s.size() < word.size() && word.substr(0, s.size()) == s;
}

}  // namespace

bool prompt_opens_thinking(std::string_view prompt) {
    while (!prompt.empty() && is_blank(prompt.back())) prompt.remove_suffix(1);
    return prompt.size() >= kOpen.size() && prompt.substr(prompt.size() - kOpen.size()) == kOpen;
}

bool prompt_closes_thinking(std::string_view prompt) {
    while (!prompt.empty() && is_blank(prompt.back())) prompt.remove_suffix(1);
    for (std::string_view close : thinking_closes())
        if (prompt.size() >= close.size() && prompt.substr(prompt.size() - close.size()) == close)
            return true;
    return false;
}

const std::vector<std::string_view>& thinking_closes() {
    static const std::vector<std::string_view> closes = {kClose, kChannelEnd};
    return closes;
}

ReasoningSplit split_reasoning(std::string_view reply, bool opened_in_prompt) {
    // (the stream's own rules, so a streamed reply splits as the whole one does)
    ReasoningSplit out;
    ReasoningStream s(opened_in_prompt);
    s.push(reply, &out.reasoning, &out.content);
    s.finish(&out.reasoning, &out.content);
    return out;
}

ReasoningStream::ReasoningStream(bool opened_in_prompt)
    : state_(opened_in_prompt ? State::Thinking : State::Start), close_(kClose) {}

void ReasoningStream::push(std::string_view piece, std::string* reasoning, std::string* content) {
    held_.append(piece);
    advance(reasoning, content);
}

void ReasoningStream::advance(std::string* reasoning, std::string* content) {
    for (;;) {
        if (state_ == State::Start) {
            const std::string_view lead = trim_left(held_);
            if (may_become(lead, kOpen) || may_become(lead, kThought))
                return;  // blanks, or "<thi": may still open the block
            const std::string_view open = starts_with(lead, kOpen) ? kOpen : kThought;
            if (starts_with(lead, open)) {
                held_ = std::string(lead.substr(open.size()));
                state_ = State::Thinking;
                close_ = open == kOpen ? kClose : kChannelEnd;
                skip_thought_blank_ = open == kThought;
                continue;
            }
            state_ = State::Answer;
            continue;
        }
        if (state_ == State::Thinking) {
            if (skip_thought_blank_) {
                size_t i = 0;
                while (i < held_.size() && is_blank(held_[i])) ++i;
                held_.erase(0, i);
                if (held_.empty()) return;
                skip_thought_blank_ = false;
            }
            const size_t close = held_.find(close_);
            if (close == std::string::npos) {
                const size_t keep = partial_suffix(held_, close_);
                reasoning->append(held_, 0, held_.size() - keep);
                held_.erase(0, held_.size() - keep);
                return;
            }
            reasoning->append(held_, 0, close);
            held_.erase(0, close + close_.size());
            state_ = State::Answer;
            skip_blank_ = true;
            continue;
        }
        if (!answer(content)) return;
    }
}

bool ReasoningStream::answer(std::string* content) {
    if (skip_blank_) {
        size_t i = 0;
        while (i < held_.size() && is_blank(held_[i])) ++i;
        held_.erase(0, i);
        if (held_.empty()) return false;
        skip_blank_ = false;
    }
    // Gemma 4's channel tokens never belong to the answer: a thought block in it is
    // reasoning, a lone <|channel> or <channel|> is dropped.
    const size_t a = held_.find(kChannel), b = held_.find(kChannelEnd);
    const size_t at = std::min(a, b);
    if (at == std::string::npos) {
        const size_t keep = std::max(partial_suffix(held_, kChannel), partial_suffix(held_, kChannelEnd));
        content->append(held_, 0, held_.size() - keep);
        held_.erase(0, held_.size() - keep);
        return false;
    }
    content->append(held_, 0, at);
    held_.erase(0, at);
    if (starts_with(held_, kChannelEnd)) {
        held_.erase(0, kChannelEnd.size());
        return true;
    }
    if (may_become(held_, kThought)) return false;
    if (starts_with(held_, kThought)) {
        held_.erase(0, kThought.size());
        state_ = State::Thinking;
        close_ = kChannelEnd;
        skip_thought_blank_ = true;
        return true;
    }
    held_.erase(0, kChannel.size());
    return true;
}

bool ReasoningStream::may_open() const {
    if (state_ == State::Start) {
        const std::string_view lead = trim_left(held_);
        return !lead.empty() && (may_become(lead, kOpen) || may_become(lead, kThought));
    }
    return state_ == State::Answer && !held_.empty() && may_become(held_, kThought);
}

bool ReasoningStream::would_open(std::string_view piece) const {
    if (state_ != State::Start) return false;
    const std::string lead = std::string(trim_left(held_)) + std::string(piece);
    const std::string_view l = trim_left(lead);
    return starts_with(l, kOpen) || starts_with(l, kThought);
}

void ReasoningStream::finish(std::string* reasoning, std::string* content) {
    // (a channel token the reply ended on, perhaps a thought block's start: not the answer)
    if (state_ == State::Answer && starts_with(held_, kChannel)) held_.clear();
    if (state_ == State::Thinking)
        reasoning->append(held_);
    else if (!skip_blank_)
        content->append(held_);
    held_.clear();
}

}  // namespace edgellm
