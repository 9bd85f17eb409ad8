// --context-policy summarize's pieces: which turns may be condensed, where the summary
// goes, and the summaries kept by the messages they condense.
#include <gtest/gtest.h>

#include "server/engine/context_policy.h"

using namespace edgellm;
using namespace edgellm::server;

namespace {

std::vector<ChatMessage> chat() {
    return {ChatMessage("system", "Be brief."), ChatMessage("user", "u1"), ChatMessage("assistant", "a1"),
            ChatMessage("user", "u2"), ChatMessage("assistant", "a2"), ChatMessage("user", "u3")};
}

}  // namespace

TEST(ContextPolicy, CondensesWholeTurnsAndKeepsTheSystemPromptAndTheLastMessage) {
    const auto m = chat();
    EXPECT_EQ(pinned_messages(m), 1u);
    // The kept part starts at a user turn: after u1+a1 (2) or after u1..a2 (4); never all.
    EXPECT_EQ(condense_points(m, 1), (std::vector<size_t>{2, 4}));
    const auto out = with_summary(m, 1, 2, "Lin is going to Hangzhou.");
    ASSERT_EQ(out.size(), 4u);
    EXPECT_EQ(out[0].role, "system");
    EXPECT_EQ(out[0].content, "Be brief.\n\nSummary of the earlier conversation:\nLin is going to Hangzhou.");
    EXPECT_EQ(out[1].content, "u2");
    EXPECT_EQ(out[3].content, "u3");
    // No system prompt: the summary becomes one.
    std::vector<ChatMessage> bare(m.begin() + 1, m.end());
    EXPECT_EQ(pinned_messages(bare), 0u);
    const auto out2 = with_summary(bare, 0, 2, "S");
    EXPECT_EQ(out2[0].role, "system");
    EXPECT_EQ(out2[1].content, "u2");
    // A single message has nothing to condense.
    EXPECT_TRUE(condense_points(std::vector<ChatMessage>{ChatMessage("user", "x")}, 0).empty());
}

TEST(ContextPolicy, SummaryRequestCarriesTheTurnsAndTheEarlierSummary) {
    const auto m = chat();
    const auto r = summary_request(std::span(m).subspan(1, 2), "earlier facts");
    ASSERT_EQ(r.size(), 2u);
    EXPECT_EQ(r[0].role, "system");
    EXPECT_NE(r[1].content.find("User: u1"), std::string::npos);
    EXPECT_NE(r[1].content.find("Assistant: a1"), std::string::npos);
    EXPECT_NE(r[1].content.find("earlier facts"), std::string::npos);
    EXPECT_EQ(r[1].content.find("u2"), std::string::npos);
}

TEST(ContextPolicy, SummariesAreKeptByTheExactMessages) {
    const auto m = chat();
    SummaryCache c(2);
    const uint64_t k1 = SummaryCache::key(std::span(m).subspan(1, 2));
    const uint64_t k2 = SummaryCache::key(std::span(m).subspan(1, 4));
    EXPECT_NE(k1, k2);
    auto edited = m;
    edited[2].content = "a1!";
    EXPECT_NE(SummaryCache::key(std::span(edited).subspan(1, 2)), k1);
    EXPECT_FALSE(c.get(k1));
    c.put(k1, "one");
    c.put(k2, "two");
    EXPECT_EQ(*c.get(k1), "one");  // now the most recent
    c.put(3, "three");             // over capacity: k2, the least recent, goes
    EXPECT_FALSE(c.get(k2));
    EXPECT_EQ(*c.get(k1), "one");
    EXPECT_EQ(*c.get(3), "three");
}
