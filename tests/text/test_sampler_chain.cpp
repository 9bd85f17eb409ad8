// The sampler chain's newer stages and its state: clone() continues exactly as the
// original would; logit bias; the `samplers` order; typical, XTC, top-n-sigma and mirostat
// against what they promise; the grammar as a stage (check first, mask on a miss; lazy
// triggers); token_logprobs against a direct log-softmax.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "edgellm/grammar.h"
#include "edgellm/sampler.h"

using namespace edgellm;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> random_logits(size_t n, uint32_t seed, float scale = 3.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
}

SamplerParams plain(uint64_t seed = 7) {
    SamplerParams p;
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = seed;
    return p;
}

// A vocabulary of the 256 bytes plus a few multi-byte pieces and an end token (id 259).
std::shared_ptr<const GrammarVocab> byte_vocab() {
    std::vector<std::string> pieces;
    for (int i = 0; i < 256; ++i) pieces.push_back(std::string(1, (char)i));
    pieces.push_back("yes");  // 256
    pieces.push_back("no");   // 257
    pieces.push_back("<call>");  // 258
    pieces.push_back("");     // 259: end
    return GrammarVocab::from_pieces(pieces, {259});
}

std::string text_of(const std::vector<int32_t>& ids, const GrammarVocab& v) {
    std::string s;
    for (int32_t t : ids) s += v.piece(t);
    return s;
}

}  // namespace

TEST(SamplerChain, CloneContinuesTheSameStream) {
    for (int mirostat : {0, 1, 2}) {
        SamplerParams p;
        p.seed = 42;
        p.repeat_penalty = 1.2f;
        p.mirostat = mirostat;
        p.typical_p = mirostat == 0 ? 0.9f : 1.0f;
        Sampler a(p, 500);
        for (int i = 0; i < 5; ++i) a.accept(a.sample(random_logits(500, (uint32_t)i)));
        Sampler b = a.clone();
        for (int i = 5; i < 40; ++i) {
            const auto l = random_logits(500, (uint32_t)i);
            const int32_t ta = a.sample(l), tb = b.sample(l);
            ASSERT_EQ(ta, tb) << "mirostat " << mirostat << " step " << i;
            a.accept(ta);
            b.accept(tb);
        }
    }
}

TEST(SamplerChain, CloneIsIndependent) {
    Sampler a(plain(3), 100);
    Sampler b = a.clone();
    const auto l = random_logits(100, 1, 0.1f);  // nearly flat: draws differ
    std::vector<int32_t> from_a, from_b;
    for (int i = 0; i < 20; ++i) from_a.push_back(a.sample(l));  // a moves on alone
    Sampler c(plain(3), 100);
    for (int i = 0; i < 20; ++i) from_b.push_back(b.sample(l));
    std::vector<int32_t> from_c;
    for (int i = 0; i < 20; ++i) from_c.push_back(c.sample(l));
    EXPECT_EQ(from_b, from_c) << "the clone did not start where the original was";
    EXPECT_EQ(from_a, from_c);
}

TEST(SamplerChain, LogitBiasBansAndFavours) {
    std::vector<float> l(50, 0.0f);
    l[7] = 5.0f;
    SamplerParams g = plain();
    g.temperature = 0.0f;
    EXPECT_EQ(Sampler(g, 50).sample(l), 7);
    g.logit_bias = {{7, -kInf}};
    EXPECT_NE(Sampler(g, 50).sample(l), 7);
    g.logit_bias = {{7, -kInf}, {20, 10.0f}};
    EXPECT_EQ(Sampler(g, 50).sample(l), 20);
    SamplerParams r = plain();
    r.logit_bias = {{7, -kInf}};
    Sampler s(r, 50);
    for (int i = 0; i < 200; ++i) EXPECT_NE(s.sample(l), 7);
    g.logit_bias = {{-3, 1.0f}, {50, 1.0f}};  // outside the vocabulary: ignored
    EXPECT_EQ(Sampler(g, 50).sample(l), 7);
}

TEST(SamplerChain, OrderIsTheSamplersList) {
    SamplerParams p;
    p.seed = 1;
    p.top_k = 5;
    p.temperature = 0.7f;
    p.order = {SamplerStageKind::Temperature, SamplerStageKind::TopK};
    EXPECT_EQ(Sampler(p, 100).describe(), "logits -> temp 0.700 -> top-k 5 -> dist (seed 1)");
    p.order = {SamplerStageKind::TopK};  // left out: no temperature, no top-p, no min-p
    EXPECT_EQ(Sampler(p, 100).describe(), "logits -> top-k 5 -> dist (seed 1)");
    // top-k alone keeps exactly the 5 best.
    const auto l = random_logits(100, 9);
    std::vector<int32_t> idx(100);
    for (int i = 0; i < 100; ++i) idx[(size_t)i] = i;
    std::sort(idx.begin(), idx.end(), [&](int a, int b) { return l[(size_t)a] > l[(size_t)b]; });
    const std::set<int32_t> best(idx.begin(), idx.begin() + 5);
    Sampler s(p, 100);
    std::set<int32_t> seen;
    for (int i = 0; i < 2000; ++i) seen.insert(s.sample(l));
    EXPECT_EQ(seen, best);
    EXPECT_EQ(sampler_stage_from_name("typ_p"), SamplerStageKind::TypicalP);
    EXPECT_EQ(sampler_stage_from_letter('k'), SamplerStageKind::TopK);
    EXPECT_FALSE(sampler_stage_from_name("bogus"));
}

TEST(SamplerChain, TypicalKeepsTokensNearTheEntropy) {
    // One dominant token and many equal small ones: the entropy is low, so the surprise of
    // the dominant token is closest to it and a small typical_p keeps only it... and a token
    // far less likely than the rest is dropped first.
    std::vector<float> l(20, 0.0f);
    l[3] = 6.0f;
    SamplerParams p = plain();
    p.typical_p = 0.2f;
    Sampler s(p, 20);
    for (int i = 0; i < 100; ++i) EXPECT_EQ(s.sample(l), 3);
}

TEST(SamplerChain, XtcDropsTheTopChoices) {
    // Two tokens above the threshold: with probability 1 the more likely one goes.
    std::vector<float> l(10, -10.0f);
    l[0] = 2.0f;
    l[1] = 1.5f;
    SamplerParams p = plain();
    p.xtc_probability = 1.0f;
    p.xtc_threshold = 0.1f;
    Sampler s(p, 10);
    for (int i = 0; i < 100; ++i) EXPECT_NE(s.sample(l), 0);
    p.xtc_probability = 0.0f;  // off: token 0 comes up
    Sampler off(p, 10);
    bool zero = false;
    for (int i = 0; i < 100; ++i) zero |= off.sample(l) == 0;
    EXPECT_TRUE(zero);
}

TEST(SamplerChain, TopNSigmaKeepsTheBand) {
    std::vector<float> l(100, 0.0f);
    l[5] = 10.0f;
    l[6] = 9.9f;
    SamplerParams p = plain();
    p.top_n_sigma = 1.0f;
    Sampler s(p, 100);
    std::set<int32_t> seen;
    for (int i = 0; i < 500; ++i) seen.insert(s.sample(l));
    EXPECT_EQ(seen, (std::set<int32_t>{5, 6}));
}

TEST(SamplerChain, MirostatMovesMuTowardsTheTarget) {
    // Both versions only draw tokens, deterministic for a seed, and never a -inf one.
    for (int v : {1, 2}) {
        SamplerParams p = plain(11);
        p.mirostat = v;
        Sampler a(p, 300), b(p, 300);
        for (int i = 0; i < 50; ++i) {
            auto l = random_logits(300, (uint32_t)(100 + i));
            l[0] = -kInf;
            const int32_t t = a.sample(l);
            EXPECT_EQ(t, b.sample(l));
            EXPECT_NE(t, 0);
            a.accept(t);
            b.accept(t);
        }
    }
}

TEST(SamplerChain, GrammarConstrainsAndCanEnd) {
    auto vocab = byte_vocab();
    auto g = Grammar::parse(R"(root ::= "yes" | "no")");
    ASSERT_TRUE(g);
    for (float temp : {0.0f, 1.0f}) {
        SamplerParams p = plain(5);
        p.temperature = temp;
        p.grammar = *g;
        p.grammar_vocab = vocab;
        Sampler s(p, vocab->n_vocab());
        std::vector<int32_t> out;
        for (int i = 0; i < 10; ++i) {
            const auto l = random_logits((size_t)vocab->n_vocab(), (uint32_t)(i + 1));
            const int32_t t = s.sample(l);
            out.push_back(t);
            if (t == 259) break;
            s.accept(t);
        }
        ASSERT_FALSE(out.empty());
        EXPECT_EQ(out.back(), 259) << "the reply must end once the grammar is complete";
        out.pop_back();
        const std::string text = text_of(out, *vocab);
        EXPECT_TRUE(text == "yes" || text == "no") << text;
    }
}

TEST(SamplerChain, GrammarDoesNotChangeAGreedyChoiceThatFits) {
    auto vocab = byte_vocab();
    auto g = Grammar::parse(R"(root ::= [a-z]+)");
    SamplerParams p = plain();
    p.temperature = 0.0f;
    Sampler free(p, vocab->n_vocab());
    p.grammar = *g;
    p.grammar_vocab = vocab;
    Sampler con(p, vocab->n_vocab());
    std::vector<float> l((size_t)vocab->n_vocab(), 0.0f);
    l['q'] = 3.0f;
    EXPECT_EQ(free.sample(l), con.sample(l));
    l['Q'] = 5.0f;  // the best no longer fits: the grammar's best is taken
    EXPECT_EQ(free.sample(l), 'Q');
    EXPECT_EQ(con.sample(l), 'q');
}

TEST(SamplerChain, LazyGrammarStartsAtItsTrigger) {
    auto vocab = byte_vocab();
    auto g = Grammar::parse(R"(root ::= "<call>" [0-9]+)");
    SamplerParams p = plain();
    p.temperature = 0.0f;
    p.grammar = *g;
    p.grammar_vocab = vocab;
    p.grammar_triggers = {{"<call>", false}};
    Sampler s(p, vocab->n_vocab());
    std::vector<float> l((size_t)vocab->n_vocab(), 0.0f);
    l['x'] = 5.0f;  // before the trigger anything goes
    EXPECT_FALSE(s.grammar_active());
    EXPECT_EQ(s.sample(l), 'x');
    s.accept('x');
    s.accept(258);  // "<call>"
    EXPECT_TRUE(s.grammar_active());
    EXPECT_NE(s.sample(l), 'x');  // now only digits fit
    l['7'] = 1.0f;
    EXPECT_EQ(s.sample(l), '7');
    Sampler c = s.clone();
    EXPECT_TRUE(c.grammar_active());
}

TEST(SamplerChain, TokenLogprobsAreTheLogSoftmax) {
    const auto l = random_logits(1000, 77);
    double z = 0.0;
    for (float x : l) z += std::exp((double)x);
    std::vector<TokenLogprob> top;
    const float lp = token_logprobs(l, 10, 5, &top);
    EXPECT_NEAR(lp, l[10] - std::log(z), 1e-4);
    ASSERT_EQ(top.size(), 5u);
    for (size_t i = 1; i < top.size(); ++i) EXPECT_GE(top[i - 1].logprob, top[i].logprob);
    const int32_t best = (int32_t)(std::max_element(l.begin(), l.end()) - l.begin());
    EXPECT_EQ(top[0].id, best);
    EXPECT_NEAR(top[0].logprob, l[(size_t)best] - std::log(z), 1e-4);
}
