#include "server/engine/context_policy.h"

#include <algorithm>

#include "model/digest.h"

namespace edgellm::server {

size_t pinned_messages(std::span<const ChatMessage> messages) {
    size_t n = 0;
    while (n < messages.size() && (messages[n].role == "system" || messages[n].role == "developer")) ++n;
    return n;
}

std::vector<size_t> condense_points(std::span<const ChatMessage> messages, size_t pinned) {
    std::vector<size_t> out;
    for (size_t i = pinned + 1; i < messages.size(); ++i)
        if (messages[i].role == "user") out.push_back(i - pinned);
    return out;
}

std::vector<ChatMessage> with_summary(std::span<const ChatMessage> messages, size_t pinned,
                                      size_t n_condensed, const std::string& summary) {
    std::vector<ChatMessage> out(messages.begin(), messages.begin() + (ptrdiff_t)pinned);
    const std::string note = "Summary of the earlier conversation:\n" + summary;
    if (out.empty())
        out.emplace_back("system", note);
    else
        out[0].content += (out[0].content.empty() ? "" : "\n\n") + note;
    out.insert(out.end(), messages.begin() + (ptrdiff_t)(pinned + n_condensed), messages.end());
    return out;
}

std::vector<ChatMessage> summary_request(std::span<const ChatMessage> turns,
                                         const std::string& earlier) {
    std::string text = "Conversation:\n";
    if (!earlier.empty()) text += "(Summary of what came before: " + earlier + ")\n";
    for (const ChatMessage& m : turns) {
        const std::string who = m.role == "user" ? "User" : m.role == "assistant" ? "Assistant"
                                                                                  : m.role;
        text += who + ": " + m.content + "\n";
    }
    text += "\nWrite down, as short bullet points in the conversation's language, every fact "
            "and request the user stated (names, numbers, places, times, preferences, "
            "decisions) and any question still open. Write nothing else.";
    return {ChatMessage("system", "You keep the memory of an assistant: you condense "
                                  "conversations into the facts that must not be lost."),
            ChatMessage("user", text)};
}

uint64_t SummaryCache::key(std::span<const ChatMessage> condensed) {
    Digest d;
    for (const ChatMessage& m : condensed) {
        const uint64_t sizes[3] = {m.role.size(), m.content.size(), m.extra_json.size()};
        d.add(sizes, sizeof sizes);
        d.add(m.role.data(), m.role.size());
        d.add(m.content.data(), m.content.size());
        d.add(m.extra_json.data(), m.extra_json.size());
    }
    return d.value();
}

std::optional<std::string> SummaryCache::get(uint64_t key) {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = items_.size(); i-- > 0;)
        if (items_[i].first == key) {
            auto item = std::move(items_[i]);
            items_.erase(items_.begin() + (ptrdiff_t)i);
            items_.push_back(std::move(item));
            return items_.back().second;
        }
    return std::nullopt;
}

void SummaryCache::put(uint64_t key, std::string summary) {
    std::lock_guard<std::mutex> lock(mu_);
    std::erase_if(items_, [&](const auto& it) { return it.first == key; });
    items_.emplace_back(key, std::move(summary));
    if (items_.size() > capacity_) items_.erase(items_.begin());
}

}  // namespace edgellm::server
