// Speculative decoding on the tiny golden models: a Q2_K copy of tiny-qwen2 drafts for its
// Q8_0 copy (the same vocabulary; they agree often but not always), and prompt lookup.
// What a user would notice: the same text with and without speculation (greedy and
// seeded), the same distribution of sampled text, a cache that holds exactly the reply
// after drafts were rejected, cancellation while drafting, two sequences speculating at
// once, and a draft model with another vocabulary refused by name.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <map>
#include <thread>

#include "int8_batches.h"
#include "edgellm/speculative.h"
#include "edgellm/synth.h"

#include <unistd.h>
#include "test_paths.h"
#include "greedy.h"

using namespace edgellm;
namespace fs = std::filesystem;

namespace {

struct Loaded {
    std::unique_ptr<Model> model;
    std::unique_ptr<Tokenizer> tok;
};

bool load_model(const char* file, Loaded* out) {
    const fs::path p = test::golden_dir() / file;
    if (!fs::exists(p)) return false;
    auto m = Model::load(p.string());
    EXPECT_TRUE(m.ok()) << m.error();
    if (!m) return false;
    out->model = std::move(*m);
    auto t = Tokenizer::load(out->model->file());
    EXPECT_TRUE(t.ok()) << t.error();
    if (!t) return false;
    out->tok = std::move(*t);
    return true;
}

std::unique_ptr<Context> make_ctx(const Model& m, int n_seq = 1, int64_t n_outputs = 17) {
    ContextParams cp;
    cp.n_ctx = 512;
    cp.n_threads = 1;
    cp.n_seq = n_seq;
    cp.n_outputs = n_outputs * n_seq;
    auto c = Context::create(m, cp);
    EXPECT_TRUE(c.ok()) << c.error();
    return c ? std::move(*c) : nullptr;
}

struct Pair {
    Loaded main, draft;
    std::unique_ptr<Context> main_ctx, draft_ctx;
};

bool load_pair(Pair* p) {
    if (!load_model("tiny-qwen2-q8_0.gguf", &p->main) || !load_model("tiny-qwen2-q2_k.gguf", &p->draft))
        return false;
    p->main_ctx = make_ctx(*p->main.model);
    p->draft_ctx = make_ctx(*p->draft.model);
    return p->main_ctx && p->draft_ctx;
}

const std::vector<int32_t> kPrompt = {1936, 2094, 3090, 3890, 142, 590, 3368, 3882};

using test::greedy;

// A prompt that repeats itself, so prompt lookup has something to find.
std::vector<int32_t> repeating_prompt() {
    std::vector<int32_t> p;
    for (int r = 0; r < 4; ++r)
        for (int i = 0; i < 12; ++i) p.push_back(100 + 37 * i);
    return p;
}

// gp's generation of kPrompt by a fresh session of the main model with the pair's draft model
// drafting up to n_max tokens a step.
auto generate_with_draft(Pair& p, GenerateParams gp, int n_max) {
    auto ctx = make_ctx(*p.main.model);
    Session spec(*p.main.model, *p.main.tok, *ctx);
    ModelDrafter drafter(*p.draft.model, *p.draft_ctx, 0, 0.0f, p.main.model->hparams().n_vocab);
    gp.spec.drafter = &drafter;
    gp.spec.n_max = n_max;
    return spec.generate(kPrompt, gp, nullptr);
}

}  // namespace

TEST(Speculative, GreedyOutputIsTheSameWithADraftModel) {
    Pair p;
    if (!load_pair(&p)) GTEST_SKIP() << "no golden models at " << test::golden_dir();
    Session plain(*p.main.model, *p.main.tok, *p.main_ctx);
    auto want = plain.generate(kPrompt, greedy(48), nullptr);
    ASSERT_TRUE(want.ok()) << want.error();

    auto ctx = make_ctx(*p.main.model);
    Session spec(*p.main.model, *p.main.tok, *ctx);
    ModelDrafter drafter(*p.draft.model, *p.draft_ctx, 0, 0.0f, p.main.model->hparams().n_vocab);
    for (int n_max : {1, 3, 8}) {
        spec.clear();
        GenerateParams gp = greedy(48);
        gp.spec.drafter = &drafter;
        gp.spec.n_max = n_max;
        std::string streamed;
        auto got = spec.generate(kPrompt, gp, [&](std::string_view t) {
            streamed += t;
            return true;
        });
        ASSERT_TRUE(got.ok()) << got.error();
        EXPECT_EQ(got->tokens, want->tokens) << "n_max " << n_max;
        EXPECT_EQ(got->text, want->text);
        EXPECT_EQ(streamed, want->text);
        // The drafts were checked, some kept and some not (a rejection inside a step).
        EXPECT_GT(got->n_drafted, 0);
        EXPECT_GT(got->n_accepted, 0) << "n_max " << n_max;
        EXPECT_LT(got->n_accepted, got->n_drafted) << "n_max " << n_max;
        // The cache holds the prompt and the reply, except the last token (not evaluated).
        std::vector<int32_t> held = kPrompt;
        held.insert(held.end(), want->tokens.begin(), want->tokens.end() - 1);
        EXPECT_EQ(spec.cached_tokens(), held);
        EXPECT_EQ(ctx->n_past(0), (int64_t)held.size());
    }
    // A cap of its own (--draft-max) holds whatever the step allows.
    std::vector<int32_t> out;
    drafter.set_max_draft(2);
    ASSERT_TRUE(drafter.draft(kPrompt, 8, nullptr, nullptr, &out).ok());
    EXPECT_LE(out.size(), 2u);
    EXPECT_FALSE(out.empty()) << "p_min 0: it drafts as many as it may";
}

// A thinking budget forces the same close at the same place with drafts as without: the
// forced tokens are the sampler's choice, and a draft is kept only when it is that choice.
TEST(Speculative, AThinkingBudgetCutsAtTheSamePlaceWithADraftModel) {
    Pair p;
    if (!load_pair(&p)) GTEST_SKIP() << "no golden models at " << test::golden_dir();
    GenerateParams gp = greedy(32);
    ThinkingParams& t = gp.sampling.thinking;
    t.on = true;
    t.opened = true;
    t.budget = 10;
    t.closes = {{"</think>", p.main.tok->tokenize("</think>", false, true)}};
    gp.sampling.grammar_vocab = GrammarVocab::build(*p.main.tok);
    Session plain(*p.main.model, *p.main.tok, *p.main_ctx);
    auto want = plain.generate(kPrompt, gp, nullptr);
    ASSERT_TRUE(want.ok()) << want.error();
    EXPECT_EQ(want->n_reasoning, 10);
    const size_t close = want->text.find("</think>");
    ASSERT_NE(close, std::string::npos) << want->text;
    // the close right after the budget's ten tokens
    const std::vector<int32_t> thought(want->tokens.begin(), want->tokens.begin() + 10);
    EXPECT_EQ(p.main.tok->detokenize(thought, false), want->text.substr(0, close));

    auto got = generate_with_draft(p, gp, 4);
    ASSERT_TRUE(got.ok()) << got.error();
    EXPECT_EQ(got->tokens, want->tokens);
    EXPECT_EQ(got->n_reasoning, 10);
    EXPECT_GT(got->n_drafted, 0);
}

// After rejected drafts were rolled back, the cache's K/V are those of the reply: the next
// turn reuses them and gives what a fresh context gives.
TEST(Speculative, RollBackLeavesTheCacheAsPlainDecodingWould) {
    Pair p;
    if (!load_pair(&p)) GTEST_SKIP() << "no golden models at " << test::golden_dir();
    Session spec(*p.main.model, *p.main.tok, *p.main_ctx);
    ModelDrafter drafter(*p.draft.model, *p.draft_ctx, 0, 0.0f, p.main.model->hparams().n_vocab);
    GenerateParams gp = greedy(30);
    gp.spec.drafter = &drafter;
    gp.spec.n_max = 6;
    auto first = spec.generate(kPrompt, gp, nullptr);
    ASSERT_TRUE(first.ok()) << first.error();
    ASSERT_LT(first->n_accepted, first->n_drafted) << "no draft was rejected";
    std::vector<int32_t> next = kPrompt;
    next.insert(next.end(), first->tokens.begin(), first->tokens.end());
    next.push_back(77);
    auto second = spec.generate(next, greedy(20), nullptr);
    ASSERT_TRUE(second.ok());
    EXPECT_EQ(second->n_cached, (int64_t)(kPrompt.size() + first->tokens.size() - 1));

    auto ctx = make_ctx(*p.main.model);
    Session fresh(*p.main.model, *p.main.tok, *ctx);
    auto cold = fresh.generate(next, greedy(20), nullptr);
    ASSERT_TRUE(cold.ok());
    EXPECT_EQ(cold->tokens, second->tokens);
    // The draft model's own cache kept its prefix too (it only evaluates what is new).
    EXPECT_GE(drafter.cache().size(), (int64_t)kPrompt.size());
}

TEST(Speculative, SeededSamplingIsTheSameTokenForToken) {
    Pair p;
    if (!load_pair(&p)) GTEST_SKIP() << "no golden models at " << test::golden_dir();
    Session plain(*p.main.model, *p.main.tok, *p.main_ctx);
    auto ctx = make_ctx(*p.main.model);
    Session spec(*p.main.model, *p.main.tok, *ctx);
    ModelDrafter drafter(*p.draft.model, *p.draft_ctx, 0, 0.0f, p.main.model->hparams().n_vocab);
    int64_t drafted = 0, kept = 0;
    for (uint64_t seed = 1; seed <= 12; ++seed) {
        GenerateParams gp = greedy(24);
        gp.sampling.temperature = 0.7f;
        gp.sampling.repeat_penalty = 1.1f;
        gp.sampling.seed = seed;
        auto want = plain.generate(kPrompt, gp, nullptr);
        gp.spec.drafter = &drafter;
        gp.spec.n_max = 4;
        auto got = spec.generate(kPrompt, gp, nullptr);
        ASSERT_TRUE(want.ok() && got.ok());
        EXPECT_EQ(got->tokens, want->tokens) << "seed " << seed;
        drafted += got->n_drafted;
        kept += got->n_accepted;
    }
    EXPECT_GT(kept, 0);
    EXPECT_LT(kept, drafted);
}

// The distribution of sampled text: the first two generated tokens (the second is where
// the first drafts are checked) over many random seeds,
// with and without speculation (different seeds on each side), by a chi-square test of
// the two histograms. A speculative sampler that favoured the draft's choices would fail.
TEST(Speculative, SampledTokensKeepTheModelsDistribution) {
    Pair p;
    if (!load_pair(&p)) GTEST_SKIP() << "no golden models at " << test::golden_dir();
    Session plain(*p.main.model, *p.main.tok, *p.main_ctx);
    auto ctx = make_ctx(*p.main.model);
    Session spec(*p.main.model, *p.main.tok, *ctx);
    ModelDrafter drafter(*p.draft.model, *p.draft_ctx, 0, 0.0f, p.main.model->hparams().n_vocab);
    constexpr int kRuns = 400;
    std::map<int64_t, int> h_plain, h_spec;
    int64_t drafted = 0, kept = 0;
    for (int i = 0; i < kRuns; ++i) {
        GenerateParams gp = greedy(3);  // (a draft is checked only if a token may follow it)
        gp.sampling.temperature = 0.3f;  // (the tiny model's distributions are peaked)
        gp.sampling.top_k = 0;
        gp.sampling.top_p = 1.0f;
        gp.sampling.min_p = 0.0f;
        gp.sampling.seed = 1000 + (uint64_t)i;
        auto a = plain.generate(kPrompt, gp, nullptr);
        gp.sampling.seed = 5000 + (uint64_t)i;
        gp.spec.drafter = &drafter;
        gp.spec.n_max = 2;
        auto b = spec.generate(kPrompt, gp, nullptr);
        ASSERT_TRUE(a.ok() && b.ok());
        ASSERT_EQ(a->tokens.size(), 3u);
        ASSERT_EQ(b->tokens.size(), 3u);
        h_plain[(int64_t)a->tokens[0] * 65536 + a->tokens[1]]++;
        h_spec[(int64_t)b->tokens[0] * 65536 + b->tokens[1]]++;
        drafted += b->n_drafted;
        kept += b->n_accepted;
    }
    ASSERT_GT(drafted, 0);
    ASSERT_GT(kept, 0) << "no draft was ever kept: the test would not show anything";
    // Bins with at least 10 expected in both; the rest pooled.
    std::map<int64_t, int> all;
    for (auto& [t, c] : h_plain) all[t] += c;
    for (auto& [t, c] : h_spec) all[t] += c;
    double chi2 = 0.0;
    int bins = 0, pool_a = 0, pool_b = 0;
    for (auto& [t, c] : all) {
        const int a = h_plain[t], b = h_spec[t];
        if (a + b < 20) {
            pool_a += a;
            pool_b += b;
            continue;
        }
        chi2 += (double)(a - b) * (a - b) / (a + b);
        ++bins;
    }
    if (pool_a + pool_b > 0) {
        chi2 += (double)(pool_a - pool_b) * (pool_a - pool_b) / (pool_a + pool_b);
        ++bins;
    }
    ASSERT_GE(bins, 3) << "the distribution is too peaked to test";
    // Critical value of chi-square at p = 0.001 (Wilson-Hilferty approximation), bins - 1
    // degrees of freedom.
    const double k = bins - 1;
    const double z = 3.09;
    const double crit = k * std::pow(1.0 - 2.0 / (9.0 * k) + z * std::sqrt(2.0 / (9.0 * k)), 3);
    EXPECT_LT(chi2, crit) << bins << " bins"; std::printf("chi2 %.1f crit %.1f bins %d kept %lld/%lld\n", chi2, crit, bins, (long long)kept, (long long)drafted);
}

TEST(Speculative, PromptLookupDraftsFromTheHistory) {
    test::Int8Batches int8;  // (the tiny model's continuation repeats itself there)
    Loaded m;
    if (!load_model("tiny-qwen2-q8_0.gguf", &m)) GTEST_SKIP() << "no golden models";
    auto c1 = make_ctx(*m.model), c2 = make_ctx(*m.model);
    Session plain(*m.model, *m.tok, *c1), spec(*m.model, *m.tok, *c2);
    const auto prompt = repeating_prompt();
    auto want = plain.generate(prompt, greedy(40), nullptr);
    NgramDrafter ngram;
    GenerateParams gp = greedy(40);
    gp.spec.drafter = &ngram;
    gp.spec.n_max = 6;
    auto got = spec.generate(prompt, gp, nullptr);
    ASSERT_TRUE(want.ok() && got.ok());
    EXPECT_EQ(got->tokens, want->tokens);
    EXPECT_GT(got->n_drafted, 0);

    // The lookup itself: the tokens after the latest earlier occurrence of the last n.
    std::vector<int32_t> out;
    const std::vector<int32_t> h = {1, 2, 3, 9, 9, 1, 2, 3, 7, 8, 5, 1, 2, 3};
    ASSERT_TRUE(ngram.draft(h, 3, nullptr, nullptr, &out).ok());
    EXPECT_EQ(out, (std::vector<int32_t>{7, 8, 5}));
    // Its own cap per step (--spec-ngram-simple-size-m) holds whatever the step allows.
    out.clear();
    NgramDrafter capped(3, 5, 2);
    ASSERT_TRUE(capped.draft(h, 8, nullptr, nullptr, &out).ok());
    EXPECT_EQ(out, (std::vector<int32_t>{7, 8}));
    out.clear();
    const std::vector<int32_t> none = {1, 2, 3, 4, 5};
    ASSERT_TRUE(ngram.draft(none, 3, nullptr, nullptr, &out).ok());
    EXPECT_TRUE(out.empty());
}

// A grammar constrains the drafts (on a copy of its position) as it constrains the output.
TEST(Speculative, DraftsFollowTheGrammar) {
    Pair p;
    if (!load_pair(&p)) GTEST_SKIP() << "no golden models at " << test::golden_dir();
    auto grammar = Grammar::parse("root ::= [a-m ]+");
    ASSERT_TRUE(grammar.ok()) << grammar.error();
    GenerateParams gp = greedy(30);
    gp.sampling.grammar = *grammar;
    gp.sampling.grammar_vocab = GrammarVocab::build(*p.main.tok);
    Session plain(*p.main.model, *p.main.tok, *p.main_ctx);
    auto want = plain.generate(kPrompt, gp, nullptr);
    ASSERT_TRUE(want.ok());
    auto got = generate_with_draft(p, gp, 4);
    ASSERT_TRUE(got.ok()) << got.error();
    EXPECT_EQ(got->tokens, want->tokens);
    for (char ch : got->text) EXPECT_TRUE((ch >= 'a' && ch <= 'm') || ch == ' ') << got->text;
    EXPECT_GT(got->n_drafted, 0);
}

namespace {
// Raises the cancel flag on its second draft, as a client that goes away while drafting.
class CancellingDrafter final : public Drafter {
  public:
    CancellingDrafter(Drafter& inner, std::atomic<bool>& flag) : inner_(inner), flag_(flag) {}
    const char* name() const override { return "cancelling"; }
    Result<DraftCost> draft(std::span<const int32_t> h, int max, GrammarMatcher* g,
                            const std::atomic<bool>* cancel, std::vector<int32_t>* out) override {
        if (++calls_ == 2) flag_ = true;
        return inner_.draft(h, max, g, cancel, out);
    }
    int calls_ = 0;

  private:
    Drafter& inner_;
    std::atomic<bool>& flag_;
};
}  // namespace

TEST(Speculative, CancelWhileDraftingStopsAndKeepsTheCacheConsistent) {
    Pair p;
    if (!load_pair(&p)) GTEST_SKIP() << "no golden models at " << test::golden_dir();
    Session spec(*p.main.model, *p.main.tok, *p.main_ctx);
    ModelDrafter drafter(*p.draft.model, *p.draft_ctx, 0, 0.0f, p.main.model->hparams().n_vocab);
    std::atomic<bool> cancel{false};
    CancellingDrafter cd(drafter, cancel);
    GenerateParams gp = greedy(100);
    gp.cancel = &cancel;
    gp.spec.drafter = &cd;
    gp.spec.n_max = 4;
    auto r = spec.generate(kPrompt, gp, nullptr);
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r->stop, StopReason::Cancelled);
    EXPECT_EQ(cd.calls_, 2);
    EXPECT_LT(r->n_generated, 12);
    EXPECT_EQ(p.main_ctx->n_past(0), (int64_t)spec.cached_tokens().size());
    // The cache holds the prompt and what was generated before the cancel.
    ASSERT_GE(spec.cached_tokens().size(), kPrompt.size());
    EXPECT_TRUE(std::equal(kPrompt.begin(), kPrompt.end(), spec.cached_tokens().begin()));
    EXPECT_TRUE(std::equal(spec.cached_tokens().begin() + (long)kPrompt.size(),
                           spec.cached_tokens().end(), r->tokens.begin()));
}

// Two sequences speculate at once on shared contexts (the main model's and the draft's),
// their steps batched: each gives the text it gives alone.
TEST(Speculative, TwoSequencesSpeculateAtOnce) {
    Pair p;
    if (!load_pair(&p)) GTEST_SKIP() << "no golden models at " << test::golden_dir();
    const std::vector<int32_t> other = {590, 3368, 3882, 1936, 2094, 142};
    Session alone(*p.main.model, *p.main.tok, *p.main_ctx);
    auto a_ref = alone.generate(kPrompt, greedy(30), nullptr);
    auto b_ref = alone.generate(other, greedy(30), nullptr);
    ASSERT_TRUE(a_ref.ok() && b_ref.ok());

    auto main_ctx = make_ctx(*p.main.model, 2, 9);
    auto draft_ctx = make_ctx(*p.draft.model, 2, 1);
    StepBatcher main_batcher(*main_ctx, std::chrono::milliseconds(5));
    StepBatcher draft_batcher(*draft_ctx, std::chrono::milliseconds(5));
    const int64_t nv = p.main.model->hparams().n_vocab;
    ModelDrafter da(*p.draft.model, *draft_ctx, 0, 0.0f, nv, &draft_batcher);
    ModelDrafter db(*p.draft.model, *draft_ctx, 1, 0.0f, nv, &draft_batcher);
    Session a(*p.main.model, *p.main.tok, *main_ctx, 0), b(*p.main.model, *p.main.tok, *main_ctx, 1);
    Result<GenerateResult> ra = Result<GenerateResult>::fail("not run");
    Result<GenerateResult> rb = Result<GenerateResult>::fail("not run");
    auto run = [&](Session* s, ModelDrafter* d, const std::vector<int32_t>* prompt,
                   Result<GenerateResult>* out) {
        GenerateParams gp = greedy(30);
        gp.batcher = &main_batcher;
        gp.spec.drafter = d;
        gp.spec.n_max = 4;
        *out = s->generate(*prompt, gp, nullptr);
    };
    std::thread ta(run, &a, &da, &kPrompt, &ra);
    std::thread tb(run, &b, &db, &other, &rb);
    ta.join();
    tb.join();
    ASSERT_TRUE(ra.ok()) << ra.error();
    ASSERT_TRUE(rb.ok()) << rb.error();
    EXPECT_EQ(ra->tokens, a_ref->tokens);
    EXPECT_EQ(rb->tokens, b_ref->tokens);
    EXPECT_GT(ra->n_drafted, 0);
    EXPECT_GT(rb->n_drafted, 0);
    EXPECT_EQ(main_batcher.active(), 0);
    EXPECT_EQ(draft_batcher.active(), 0);
}

TEST(Speculative, ADraftWithAnotherVocabularyIsRefusedByName) {
    Loaded q, q2;
    if (!load_model("tiny-qwen2-q8_0.gguf", &q) || !load_model("tiny-qwen2-q2_k.gguf", &q2))
        GTEST_SKIP() << "no golden models";
    EXPECT_EQ(draft_vocab_mismatch(*q.tok, *q2.tok), "");
    // A synthetic model's vocabulary differs from the golden models' from some token on.
    const fs::path dir = fs::temp_directory_path() / ("edgellm-spec-" + std::to_string(getpid()));
    fs::create_directories(dir);
    SynthOptions so;
    so.shape = "tiny";
    auto st = synth_model((dir / "synth.gguf").string(), so);
    ASSERT_TRUE(st.ok()) << st.error();
    Loaded s;
    {
        auto m = Model::load((dir / "synth.gguf").string());
        ASSERT_TRUE(m.ok()) << m.error();
        s.model = std::move(*m);
        auto t = Tokenizer::load(s.model->file());
        ASSERT_TRUE(t.ok()) << t.error();
        s.tok = std::move(*t);
    }
    fs::remove_all(dir);
    const std::string why = draft_vocab_mismatch(*q.tok, *s.tok);
    EXPECT_NE(why.find("token"), std::string::npos) << why;
    std::printf("refused: %s\n", why.c_str());
    // Real models, when fetched: Qwen2.5 0.5B drafts for 1.5B; Gemma 3 cannot.
    const auto qwen = test::real_model({"qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"});
    const auto gemma = test::real_model({"gemma-3-270m-q4_k_m.gguf", "gemma-3-270m-it-q4_k_m.gguf"});
    if (qwen.empty() || gemma.empty()) {
        std::printf("(real models not fetched: the Qwen/Gemma vocabulary check is skipped)\n");
        return;
    }
    auto mq = Model::load(qwen.string()), mg = Model::load(gemma.string());
    ASSERT_TRUE(mq.ok() && mg.ok());
    auto tq = Tokenizer::load((*mq)->file()), tg = Tokenizer::load((*mg)->file());
    ASSERT_TRUE(tq.ok() && tg.ok());
    const std::string w = draft_vocab_mismatch(**tq, **tg);
    EXPECT_NE(w, "");
}

TEST(SpecController, TurnsOffWhenDraftsDoNotPayAndProbesLater) {
    // Lookup: drafts that cost nothing but are never kept.
    SpecController c(4, 0);
    EXPECT_EQ(c.choose(), 4) << "drafts the most until it has measured";
    for (int i = 0; i < 5; ++i) {
        c.observe_draft(4, 0.01);
        c.observe_step(5, 40.0);
        c.observe_accept(4, 0);
    }
    EXPECT_EQ(c.choose(), 0) << "a plain step, to measure it";
    c.observe_step(1, 20.0);
    int probes = 0, plain = 0;
    for (int i = 0; i < 200; ++i) {
        const int k = c.choose();
        if (k == 0) {
            ++plain;
            c.observe_step(1, 20.0);
        } else {
            ++probes;
            c.observe_draft(k, 0.01);
            c.observe_step(k + 1, 20.0 + 10.0 * k);
            c.observe_accept(k, 0);
        }
    }
    EXPECT_GT(plain, 190);
    EXPECT_GE(probes, 2) << "it tries again now and then";
    EXPECT_LE(probes, 6) << "and less often while drafts keep losing";
    EXPECT_LT(c.expected_gain(2), 1.0);
}

// Lookup that finds something to draft only now and then (and then drafts well) stays a
// free drafter: its many attempts that draft nothing must not make its drafts look costly
// (then it would stop drafting for the rest of the request).
TEST(SpecController, AttemptsThatDraftNothingDoNotMakeAFreeDrafterCostly) {
    SpecController c(4, 0);
    c.choose();
    for (int i = 0; i < 5; ++i) {
        c.observe_draft(4, 0.02);
        c.observe_step(5, 25.0);
        c.observe_accept(4, 2);
    }
    c.observe_step(1, 20.0);
    int asked = 0, steps_with_drafts = 0;
    for (int i = 0; i < 600; ++i) {
        const int k = c.choose();
        if (k == 0) {
            c.observe_step(1, 20.0);
            continue;
        }
        ++asked;
        if (i % 30 == 0) {  // a match: half the drafts kept
            ++steps_with_drafts;
            c.observe_draft(k, 0.02);
            c.observe_step(k + 1, 25.0);
            c.observe_accept(k, k / 2);
        } else {  // no match: a lookup over a long history, nothing drafted
            c.observe_draft(0, 0.3);
            c.observe_step(1, 20.0);
        }
    }
    EXPECT_GT(asked, 500) << "it stopped asking as if every lookup cost a step";
    EXPECT_GE(steps_with_drafts, 15);
}

TEST(SpecController, ACostlyDrafterThatIsOffProbesOnlyAtARequestsStart) {
    // A draft model: a draft token costs half a step, and none is kept.
    SpecController c(4, 0);
    c.choose();
    for (int i = 0; i < 5; ++i) {
        c.observe_draft(4, 40.0);
        c.observe_step(5, 40.0);
        c.observe_accept(4, 0);
    }
    c.observe_step(1, 20.0);
    int in_request = 0;
    for (int i = 0; i < 300; ++i) in_request += c.choose() > 0;
    EXPECT_EQ(in_request, 0) << "no probe mid-reply (it would first catch up with the text)";
    // Over the next requests: probes at the start of some of them, fewer and fewer.
    int probes = 0;
    for (int r = 0; r < 24; ++r) {
        c.new_request();
        for (int i = 0; i < 50; ++i) {
            const int k = c.choose();
            if (k > 0) {
                ++probes;
                c.observe_draft(k, 10.0 * k);
                c.observe_step(k + 1, 20.0 + 10.0 * k);
                c.observe_accept(k, 0);
            } else {
                c.observe_step(1, 20.0);
            }
        }
    }
    EXPECT_GE(probes, 3);
    EXPECT_LE(probes, 7);
}

TEST(SpecController, DraftsLongerWhenDraftsAreCheapAndKept) {
    SpecController c(8, 0);
    c.observe_step(1, 20.0);
    for (int i = 0; i < 10; ++i) {
        c.observe_draft(8, 0.1);  // prompt lookup: nearly free
        c.observe_step(9, 30.0);
        c.observe_accept(8, 7);
    }
    EXPECT_GE(c.choose(), 6);
    EXPECT_GT(c.expected_gain(8), 2.0);
    // The same acceptance with drafts as costly as the step itself: shorter or none.
    SpecController d(8, 0);
    d.observe_step(1, 20.0);
    for (int i = 0; i < 10; ++i) {
        d.observe_draft(8, 8 * 20.0);
        d.observe_step(9, 30.0);
        d.observe_accept(8, 7);
    }
    EXPECT_LT(d.choose(), c.choose());
}

namespace {
// Drafts tokens the model never chooses (costly ones: it sleeps as a slow draft model would).
class WrongDrafter final : public Drafter {
  public:
    const char* name() const override { return "wrong"; }
    Result<DraftCost> draft(std::span<const int32_t> h, int max, GrammarMatcher*,
                            const std::atomic<bool>*, std::vector<int32_t>* out) override {
        const auto t0 = std::chrono::steady_clock::now();
        std::this_thread::sleep_for(std::chrono::microseconds(300 * max));
        for (int i = 0; i < max; ++i) out->push_back((h.back() + 1 + i) % 4000 == 0 ? 1 : 0);
        ++calls;
        drafted += max;
        DraftCost c;
        c.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        return c;
    }
    int calls = 0, drafted = 0;
};
}  // namespace

// An adaptive drafter whose drafts are never kept stops drafting after a few steps and
// tries again only now and then; the output stays the model's.
TEST(Speculative, AnAdaptiveDrafterStopsDraftingWhatIsNeverKept) {
    Loaded m;
    if (!load_model("tiny-qwen2-q8_0.gguf", &m)) GTEST_SKIP() << "no golden models";
    auto c1 = make_ctx(*m.model), c2 = make_ctx(*m.model);
    Session plain(*m.model, *m.tok, *c1), spec(*m.model, *m.tok, *c2);
    auto want = plain.generate(kPrompt, greedy(200), nullptr);
    WrongDrafter wrong;
    AdaptiveDrafter adaptive(wrong, 4, 0);
    GenerateParams gp = greedy(200);
    gp.spec.drafter = &adaptive;
    gp.spec.n_max = 4;
    auto got = spec.generate(kPrompt, gp, nullptr);
    ASSERT_TRUE(want.ok() && got.ok());
    EXPECT_EQ(got->tokens, want->tokens);
    EXPECT_GT(wrong.calls, 0);
    EXPECT_LT(wrong.calls, 20) << "it kept drafting what was never kept";
    EXPECT_EQ(adaptive.controller().accepted(), 0);
}
