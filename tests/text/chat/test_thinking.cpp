// The thinking budget where it acts, in the sampler (ThinkingParams): a model double (the
// logits it would give at each step) over a small vocabulary, so each test knows which token
// the model wants and checks what the sampler makes of it: the close forced after exactly
// the budget's tokens and the answer after it, a budget of 0 that closes at once what the
// model opens (off means off), a natural close before the budget, a close of several
// tokens, a character never cut, the grammar that waits for the answer, Gemma 4's thought
// channel, clone(); Gemma 4's real vocabulary, whose <channel|> is one token; and which
// prompts (the published templates rendered by jinja2, tests/data/templates) turn it off.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "edgellm/gguf.h"
#include "edgellm/grammar.h"
#include "edgellm/sampler.h"
#include "edgellm/tokenizer.h"
#include "test_paths.h"
#include "text/chat/reasoning.h"
#include "text/chat/thinking.h"

using namespace edgellm;

namespace {

enum : int32_t {
    kA, kB, kOpen, kClose, kBlank, kLBrace, kRBrace, kLt, kThink, kGt, kE1, kE2,
    kChannel, kThought, kChannelEnd, kX, kEnd, kVocab
};

std::shared_ptr<const GrammarVocab> vocab() {
    // in the order of the ids above: "</think>" also in three tokens (as a vocabulary
    // without the token writes it), "é" in two byte tokens, Gemma 4's channel tokens
    return GrammarVocab::from_pieces({"a", "b", "<think>", "</think>", "\n\n", "{", "}", "</", "think",
                                      ">", "\xC3", "\xA9", "<|channel>", "thought", "<channel|>", "x", ""},
                                     {kEnd});
}

// A reply that starts inside the block (the prompt opened it), with this budget.
ThinkingParams inside(int32_t budget) {
    ThinkingParams t;
    t.opened = true;
    t.budget = budget;
    return t;
}

SamplerParams greedy(ThinkingParams t) {
    SamplerParams p;
    p.temperature = 0.0f;
    p.repeat_penalty = 1.0f;
    p.grammar_vocab = vocab();
    if (t.closes.empty())
        t.closes = {{"</think>", {kClose}}, {"<channel|>", {kChannelEnd}}};
    t.on = true;
    p.thinking = std::move(t);
    return p;
}

// A budget only (the reply starts outside any block).
ThinkingParams outside(int32_t budget) {
    ThinkingParams t;
    t.budget = budget;
    return t;
}

// Greedy with a grammar (GBNF) and thinking blocks.
Sampler constrained(const char* gbnf, const ThinkingParams& t) {
    auto g = Grammar::parse(gbnf);
    EXPECT_TRUE(g.ok()) << g.error();
    SamplerParams p = greedy(t);
    p.grammar = *g;
    return Sampler(p, kVocab);
}

// The model double: at step i it wants wants(i) (logit 10), then `second` (logit 5).
std::vector<float> logits(int32_t want, int32_t second = kA) {
    std::vector<float> l(kVocab, 0.0f);
    l[(size_t)second] = 5.0f;
    l[(size_t)want] = 10.0f;
    return l;
}

// Sample and take n tokens (or until the end token) with the model double.
std::vector<int32_t> run(Sampler& s, const std::function<int32_t(size_t)>& wants, size_t n) {
    std::vector<int32_t> out;
    for (size_t i = 0; i < n; ++i) {
        const int32_t t = s.sample(logits(wants(i)));
        out.push_back(t);
        if (t == kEnd) break;
        s.accept(t);
    }
    return out;
}

std::string text_of(const std::vector<int32_t>& ids) {
    const auto v = vocab();
    std::string s;
    for (int32_t t : ids) s += v->piece(t);
    return s;
}

std::vector<int32_t> repeat(int32_t t, size_t n) {
    return std::vector<int32_t>(n, t);
}

std::vector<int32_t> cat(std::initializer_list<std::vector<int32_t>> parts) {
    std::vector<int32_t> out;
    for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
}

}  // namespace

TEST(ThinkingBudget, ForcesTheCloseAfterExactlyTheBudgetAndTheAnswerFollows) {
    for (int budget : {1, 5, 12}) {
        const ThinkingParams t = inside(budget);  // Qwen 3.5: the prompt ends with "<think>\n"
        Sampler s(greedy(t), kVocab);
        // The model would think forever: it always wants "a".
        const auto out = run(s, [](size_t) { return kA; }, (size_t)budget + 4);
        EXPECT_EQ(out, cat({repeat(kA, (size_t)budget), {kClose}, repeat(kA, 3)})) << budget;
        EXPECT_EQ(s.thinking_tokens(), budget);
        const ReasoningSplit split = split_reasoning(text_of(out), true);
        EXPECT_EQ(split.reasoning, std::string((size_t)budget, 'a'));
        EXPECT_EQ(split.content, "aaa");
    }
}

TEST(ThinkingBudget, NoBudgetLetsTheModelThinkOnAndANaturalCloseIsNotForced) {
    ThinkingParams t = inside(-1);
    Sampler unlimited(greedy(t), kVocab);
    EXPECT_EQ(run(unlimited, [](size_t) { return kA; }, 40), repeat(kA, 40));
    EXPECT_EQ(unlimited.thinking_tokens(), 40);

    t.budget = 10;
    Sampler s(greedy(t), kVocab);
    // closes by itself after 3 tokens, then answers "b"
    const auto out = run(s, [](size_t i) { return i < 3 ? kA : i == 3 ? kClose : kB; }, 14);
    EXPECT_EQ(out, cat({repeat(kA, 3), {kClose}, repeat(kB, 10)}));
    EXPECT_EQ(s.thinking_tokens(), 3);
}

TEST(ThinkingBudget, ABlockTheModelOpensIsCountedFromItsOpening) {
    ThinkingParams t;  // Qwen 3: the model writes <think> itself
    t.budget = 3;
    Sampler s(greedy(t), kVocab);
    const auto out = run(s, [](size_t i) { return i == 0 ? kOpen : kA; }, 7);
    EXPECT_EQ(out, cat({{kOpen}, repeat(kA, 3), {kClose}, repeat(kA, 2)}));
    EXPECT_EQ(s.thinking_tokens(), 3);
}

TEST(ThinkingBudget, OffClosesWhatTheModelOpensAtOnce) {
    // Off (enable_thinking false, reasoning_effort none, budget 0): the template rendered
    // the empty block, and a model that opens one all the same gets its close next.
    ThinkingParams t;
    t.budget = 0;
    Sampler s(greedy(t), kVocab);
    const auto out = run(s, [](size_t i) { return i == 0 ? kOpen : kB; }, 4);
    EXPECT_EQ(out, (std::vector<int32_t>{kOpen, kClose, kB, kB}));
    EXPECT_EQ(s.thinking_tokens(), 0);
    const ReasoningSplit split = split_reasoning(text_of(out), false);
    EXPECT_EQ(split.reasoning, "");
    EXPECT_EQ(split.content, "bb");

    t.opened = true;  // a template that always opens the block (DeepSeek-R1)
    Sampler r(greedy(t), kVocab);
    EXPECT_EQ(run(r, [](size_t) { return kA; }, 3), (std::vector<int32_t>{kClose, kA, kA}));

    t.opened = false;  // a <think> later in the answer is the answer's text, not a block
    Sampler later(greedy(t), kVocab);
    EXPECT_EQ(run(later, [](size_t i) { return i == 1 ? kOpen : kB; }, 4),
              (std::vector<int32_t>{kB, kOpen, kB, kB}));
}

TEST(ThinkingBudget, ACloseOfSeveralTokensIsForcedInOrder) {
    ThinkingParams t = inside(2);
    t.closes = {{"</think>", {kLt, kThink, kGt}}};
    Sampler s(greedy(t), kVocab);
    const auto out = run(s, [](size_t) { return kA; }, 7);
    EXPECT_EQ(out, (std::vector<int32_t>{kA, kA, kLt, kThink, kGt, kA, kA}));
    EXPECT_EQ(split_reasoning(text_of(out), true).content, "aa");

    // Tokens that do not write the close are never forced (the block runs its course).
    t.closes = {{"</think>", {kLt, kThink}}};
    Sampler wrong(greedy(t), kVocab);
    EXPECT_EQ(run(wrong, [](size_t) { return kA; }, 5), repeat(kA, 5));
}

TEST(ThinkingBudget, ACharacterIsNeverCut) {
    ThinkingParams t = inside(2);
    Sampler s(greedy(t), kVocab);
    // a, then "é" in two tokens: the budget ends after its first byte, the close waits
    const auto out = run(s, [](size_t i) { return i == 0 ? kA : i == 1 ? kE1 : i == 2 ? kE2 : kB; }, 5);
    EXPECT_EQ(out, (std::vector<int32_t>{kA, kE1, kE2, kClose, kB}));
    EXPECT_EQ(s.thinking_tokens(), 3);
}

TEST(ThinkingBudget, AModelWritingItsCloseIsNotInterrupted) {
    ThinkingParams t = inside(2);
    t.closes = {{"</think>", {kClose}}};
    // "</" at the budget: the model may be closing; it is ("think", ">"): nothing forced
    Sampler s(greedy(t), kVocab);
    auto out = run(s, [](size_t i) { return std::vector<int32_t>{kA, kLt, kThink, kGt, kB, kB}[std::min<size_t>(i, 5)]; }, 6);
    EXPECT_EQ(out, (std::vector<int32_t>{kA, kLt, kThink, kGt, kB, kB}));
    EXPECT_EQ(split_reasoning(text_of(out), true).reasoning, "a");
    // it was not ("</" then "b"): the close is forced after the "b"
    Sampler n(greedy(t), kVocab);
    out = run(n, [](size_t i) { return i == 0 ? kA : i == 1 ? kLt : kB; }, 5);
    EXPECT_EQ(out, (std::vector<int32_t>{kA, kLt, kB, kClose, kB}));
    EXPECT_EQ(n.thinking_tokens(), 3);
}

TEST(ThinkingBudget, AGrammarConstrainsTheAnswerOnly) {
    const char* braces = R"(root ::= "{" "}")";
    Sampler s = constrained(braces, inside(3));
    // The model wants "a" in its thinking (no grammar admits it), a blank line after the
    // close, then "a" again: the grammar takes over for the answer.
    const auto out = run(s, [](size_t i) { return i == 4 ? kBlank : kA; }, 10);
    EXPECT_EQ(out, cat({repeat(kA, 3), {kClose, kBlank, kLBrace, kRBrace, kEnd}}));
    const ReasoningSplit split = split_reasoning(text_of(out), true);
    EXPECT_EQ(split.reasoning, "aaa");
    EXPECT_EQ(split.content, "{}");

    // Without a block (the prompt did not open one, the model does not): as before.
    Sampler plain = constrained(braces, outside(3));
    EXPECT_EQ(run(plain, [](size_t) { return kA; }, 5), (std::vector<int32_t>{kLBrace, kRBrace, kEnd}));
}

TEST(ThinkingBudget, AModelMayOpenTheBlockBeforeWhatTheGrammarAdmits) {
    const char* braces = R"(root ::= "{" "}")";
    Sampler s = constrained(braces, outside(2));
    EXPECT_TRUE(s.grammar_active());
    const auto out = run(s, [](size_t i) { return i == 0 ? kOpen : kA; }, 8);
    EXPECT_EQ(out, (std::vector<int32_t>{kOpen, kA, kA, kClose, kLBrace, kRBrace, kEnd}));

    // Thinking off: the opening is the grammar's to refuse.
    Sampler off = constrained(braces, outside(0));
    EXPECT_EQ(run(off, [](size_t i) { return i == 0 ? kOpen : kA; }, 4), (std::vector<int32_t>{kLBrace, kRBrace, kEnd}));
}

TEST(ThinkingBudget, WhileThinkingTheGrammarIsNotActive) {
    Sampler s = constrained(R"(root ::= "{" "}")", inside(-1));
    EXPECT_FALSE(s.grammar_active());  // a draft is not held to it either
    EXPECT_FALSE(s.grammar_matcher().has_value());
    s.accept(kA);
    s.accept(kClose);
    EXPECT_TRUE(s.grammar_active());
}

TEST(ThinkingBudget, GemmaThoughtChannelIsCutAtItsClose) {
    // The grammar allows Gemma 4's channel token at the start (its tool grammar does); the
    // opening it took part in is forgotten once "thought" makes it a thought block.
    Sampler s = constrained(R"(root ::= "<|channel>" "x" | "{" "}")", outside(2));
    const auto out = run(s, [](size_t i) { return i == 0 ? kChannel : i == 1 ? kThought : kA; }, 9);
    EXPECT_EQ(out, (std::vector<int32_t>{kChannel, kThought, kA, kA, kChannelEnd, kLBrace, kRBrace, kEnd}));
    EXPECT_EQ(s.thinking_tokens(), 2);
    const ReasoningSplit split = split_reasoning(text_of(out), false);
    EXPECT_EQ(split.reasoning, "aa");
    EXPECT_EQ(split.content, "{}");
}

TEST(ThinkingBudget, CloneForcesTheSameClose) {
    ThinkingParams t = inside(2);
    t.closes = {{"</think>", {kLt, kThink, kGt}}};
    Sampler s(greedy(t), kVocab);
    s.accept(s.sample(logits(kA)));
    s.accept(s.sample(logits(kA)));
    EXPECT_EQ(s.sample(logits(kA)), kLt);
    s.accept(kLt);
    Sampler c = s.clone();
    EXPECT_EQ(c.sample(logits(kA)), kThink);
    c.accept(kThink);
    EXPECT_EQ(c.sample(logits(kA)), kGt);
    EXPECT_EQ(s.sample(logits(kA)), kThink);  // the original is where it was
    s.reset();  // and starts over
    EXPECT_EQ(s.thinking_tokens(), 0);
    EXPECT_EQ(s.sample(logits(kB)), kB);
}

TEST(ThinkingBudget, ForcedTokensHaveCertainProbability) {
    ThinkingParams t = inside(0);
    SamplerParams p = greedy(t);
    p.temperature = 0.7f;
    Sampler s(p, kVocab);
    std::vector<TokenLogprob> top;
    float lp = -1.0f;
    EXPECT_EQ(s.sample(logits(kA), 3, &top, &lp), kClose);
    EXPECT_EQ(lp, 0.0f);
    ASSERT_EQ(top.size(), 1u);
    EXPECT_EQ(top[0].id, kClose);
}

TEST(ThinkingBudget, Gemma4VocabularyClosesItsThoughtChannelWithOneToken) {
    const auto path = test::vocab_file("ggml-vocab-gemma-4.gguf");
    if (path.empty()) GTEST_SKIP() << "no ggml-vocab-gemma-4.gguf (scripts/fetch-vocabs.sh fetches it)";
    auto f = GgufFile::open(path.string());
    ASSERT_TRUE(f.ok()) << f.error();
    auto tok = Tokenizer::load(**f);
    ASSERT_TRUE(tok.ok()) << tok.error();
    // The server's closes, tokenized as it does: <channel|> is one token of this vocabulary.
    ThinkingParams t;
    t.on = true;
    t.budget = 2;
    for (std::string_view close : thinking_closes())
        t.closes.push_back({std::string(close), (*tok)->tokenize(std::string(close), false, true)});
    ASSERT_EQ(t.closes[1].second.size(), 1u);
    const auto ids = (*tok)->tokenize("<|channel>thought\nhi", false, true);
    ASSERT_EQ(ids.size(), 4u);  // <|channel> thought \n hi
    SamplerParams p;
    p.temperature = 0.0f;
    p.grammar_vocab = GrammarVocab::build(**tok);
    p.thinking = t;
    const int32_t n_vocab = (*tok)->n_vocab();
    Sampler s(p, n_vocab);
    std::vector<int32_t> out;
    for (size_t i = 0; i < 6; ++i) {
        std::vector<float> l((size_t)n_vocab, 0.0f);
        l[(size_t)ids[std::min<size_t>(i, 3)]] = 10.0f;  // the model would think "hi" forever
        out.push_back(s.sample(l));
        s.accept(out.back());
    }
    EXPECT_EQ(out, (std::vector<int32_t>{ids[0], ids[1], ids[2], ids[3], t.closes[1].second[0], ids[3]}));
    EXPECT_EQ(s.thinking_tokens(), 2);
    const ReasoningSplit split = split_reasoning((*tok)->detokenize(out, false), false);
    EXPECT_EQ(split.reasoning, "hi");
    EXPECT_EQ(split.content, "hi");
}

// Off means off, as each template turns it off: the prompts jinja2 renders from the
// published templates with thinking off end with a closed block, and get a budget of 0;
// with thinking on they keep the budget asked for.
TEST(ThinkingBudget, TheTemplatesSwitchDecides) {
    auto rendered = [](const std::string& name) {
        std::ifstream in(std::string(EDGELLM_TEST_DATA) + "/templates/" + name + ".txt", std::ios::binary);
        EXPECT_TRUE(in) << name;
        std::stringstream ss;
        ss << in.rdbuf();
        return ss.str();
    };
    for (const char* off : {"qwen3.thinking_off", "qwen35.thinking_off", "smollm3.thinking_off",
                            "smollm3.no_think_in_system", "gemma4.thinking_off"}) {
        // (off even when the request asked for thinking: SmolLM3's /no_think wins in its template)
        EXPECT_EQ(chat_thinking_budget(rendered(off), true, true, 100), 0) << off;
        EXPECT_EQ(chat_thinking_budget(rendered(off), true, false, -1), 0) << off;
    }
    for (const char* on : {"qwen3.thinking_on", "qwen35.system_user", "smollm3.system_user", "gemma4.thinking_on"}) {
        EXPECT_EQ(chat_thinking_budget(rendered(on), true, true, 100), 100) << on;
        EXPECT_EQ(chat_thinking_budget(rendered(on), true, true, -1), -1) << on;
    }
    EXPECT_TRUE(prompt_opens_thinking(rendered("qwen35.system_user")));
    // A template without the switch (DeepSeek-R1's opens the block in every prompt): the
    // request's "off" is the budget's to keep.
    const std::string r1 = "<|User|>hi<|Assistant|><think>\n";
    EXPECT_EQ(chat_thinking_budget(r1, false, false, -1), 0);
    EXPECT_EQ(chat_thinking_budget(r1, false, true, -1), -1);
    EXPECT_EQ(chat_thinking_budget(r1, false, true, 0), 0);
}
