#include "text/chat/reasoning.h"

#include "text/chat/text_scan.h"

namespace edgellm {

namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

}  // namespace

bool prompt_opens_thinking(std::string_view prompt) {
    while (!prompt.empty() && is_blank(prompt.back())) prompt.remove_suffix(1);
    return prompt.size() >= kOpen.size() && prompt.substr(prompt.size() - kOpen.size()) == kOpen;
}

ReasoningSplit split_reasoning(std::string_view reply, bool opened_in_prompt) {
    ReasoningSplit out;
    std::string_view rest = reply;
    if (!opened_in_prompt) {
        const std::string_view lead = trim_left(rest);
        if (lead.substr(0, kOpen.size()) != kOpen) {
            out.content = std::string(reply);
            return out;
        }
        rest = lead.substr(kOpen.size());
    }
    const size_t close = rest.find(kClose);
    if (close == std::string_view::npos) {
        out.reasoning = std::string(rest);
        return out;
    }
    out.reasoning = std::string(rest.substr(0, close));
    out.content = std::string(trim_left(rest.substr(close + kClose.size())));
    return out;
}

ReasoningStream::ReasoningStream(bool opened_in_prompt)
    : state_(opened_in_prompt ? State::Thinking : State::Start) {}

void ReasoningStream::push(std::string_view piece, std::string* reasoning, std::string* content) {
    held_.append(piece);
    advance(reasoning, content);
}

void ReasoningStream::advance(std::string* reasoning, std::string* content) {
    for (;;) {
        if (state_ == State::Start) {
            const std::string_view lead = trim_left(held_);
            if (lead.size() < kOpen.size() && kOpen.substr(0, lead.size()) == lead)
                return;  // blanks, or "<thi": may still open the block
            if (lead.substr(0, kOpen.size()) == kOpen) {
                held_ = std::string(lead.substr(kOpen.size()));
                state_ = State::Thinking;
                continue;
            }
            state_ = State::Answer;
            continue;
        }
        if (state_ == State::Thinking) {
            const size_t close = held_.find(kClose);
            if (close == std::string::npos) {
                const size_t keep = partial_suffix(held_, kClose);
                reasoning->append(held_, 0, held_.size() - keep);
                held_.erase(0, held_.size() - keep);
                return;
            }
            reasoning->append(held_, 0, close);
            held_.erase(0, close + kClose.size());
            state_ = State::Answer;
            skip_blank_ = true;
            continue;
        }
        // Answer
        if (skip_blank_) {
            size_t i = 0;
            while (i < held_.size() && is_blank(held_[i])) ++i;
            held_.erase(0, i);
            if (held_.empty()) return;
            skip_blank_ = false;
        }
        content->append(held_);
        held_.clear();
        return;
    }
}

void ReasoningStream::finish(std::string* reasoning, std::string* content) {
    if (state_ == State::Thinking)
        reasoning->append(held_);
    else if (!skip_blank_)
        content->append(held_);
    held_.clear();
}

}  // namespace edgellm
