// --context-policy summarize: a chat whose history no longer fits the context (with room
// for the reply) has its oldest turns condensed by the model itself into a summary, which
// joins the system prompt; the system prompt and the tools stay as they are, and the
// latest turns stay word for word. Summaries are kept by the messages they condense, so
// the next turn of the same conversation renders the same prefix and finds it in the KV
// cache instead of summarizing again.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "edgellm/chat.h"

namespace edgellm::server {

// Leading system (and developer) messages: never condensed.
size_t pinned_messages(std::span<const ChatMessage> messages);

// Where the condensed part may end: k such that messages[pinned + k] is a user turn (the
// rest then starts as a conversation does), k >= 1, and at least the last message stays.
std::vector<size_t> condense_points(std::span<const ChatMessage> messages, size_t pinned);

// The messages with the first n_condensed after the pinned ones replaced by the summary,
// appended to the first system message (or a new one at the start).
std::vector<ChatMessage> with_summary(std::span<const ChatMessage> messages, size_t pinned,
                                      size_t n_condensed, const std::string& summary);

// The conversation asking the model for a summary of `turns` (after an earlier summary of
// what came before them, when there is one).
std::vector<ChatMessage> summary_request(std::span<const ChatMessage> turns,
                                         const std::string& earlier);

// Summaries by the exact messages they condense (role and content), most recent kept.
class SummaryCache {
  public:
    explicit SummaryCache(size_t capacity = 64) : capacity_(capacity) {}
    static uint64_t key(std::span<const ChatMessage> condensed);
    std::optional<std::string> get(uint64_t key);
    void put(uint64_t key, std::string summary);

  private:
    std::mutex mu_;
    size_t capacity_;
    std::vector<std::pair<uint64_t, std::string>> items_;  // most recent last
};

}  // namespace edgellm::server
