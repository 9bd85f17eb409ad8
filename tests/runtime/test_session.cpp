// The generation loop on a tiny golden model: length limits, stop strings held back and
// cut, cancellation, reproducible sampling, and KV prefix reuse across requests.
#include <gtest/gtest.h>

#include "edgellm/session.h"
#include "test_paths.h"

using namespace edgellm;
namespace fs = std::filesystem;

namespace {

struct Fixture {
    std::unique_ptr<Model> model;
    std::unique_ptr<Tokenizer> tok;
    std::unique_ptr<Context> ctx;
};

bool load(Fixture* f, int64_t n_ctx = 256) {
    const fs::path p = test::golden_dir() / "tiny-qwen2-q8_0.gguf";
    if (!fs::exists(p)) return false;
    auto m = Model::load(p.string());
    EXPECT_TRUE(m.ok()) << m.error();
    f->model = std::move(*m);
    auto t = Tokenizer::load(f->model->file());
    EXPECT_TRUE(t.ok()) << t.error();
    f->tok = std::move(*t);
    ContextParams cp;
    cp.n_ctx = n_ctx;
    cp.n_threads = 2;
    auto c = Context::create(*f->model, cp);
    EXPECT_TRUE(c.ok()) << c.error();
    f->ctx = std::move(*c);
    return true;
}

const std::vector<int32_t> kPrompt = {1936, 2094, 3090, 3890, 142, 590, 3368, 3882};

GenerateParams greedy(int n) {
    GenerateParams p;
    p.n_predict = n;
    p.sampling.temperature = 0.0f;
    p.ignore_eos = true;
    return p;
}

}  // namespace

TEST(Session, StopsAtNPredictAndStreamsWhatItReturns) {
    Fixture f;
    if (!load(&f)) GTEST_SKIP() << "no golden models at " << test::golden_dir();
    Session s(*f.model, *f.tok, *f.ctx);
    std::string streamed;
    auto r = s.generate(kPrompt, greedy(12), [&](std::string_view t) {
        streamed += t;
        return true;
    });
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r->n_generated, 12);
    EXPECT_EQ(r->tokens.size(), 12u);
    EXPECT_EQ(r->stop, StopReason::Length);
    EXPECT_EQ(streamed, r->text);
    EXPECT_EQ(r->text, f.tok->detokenize(r->tokens, false));
    EXPECT_EQ(r->n_prompt, 8);
    EXPECT_EQ(r->n_cached, 0);
}

TEST(Session, StopStringIsCutAndNeverStreamed) {
    Fixture f;
    if (!load(&f)) GTEST_SKIP() << "no golden models at " << test::golden_dir();
    Session s(*f.model, *f.tok, *f.ctx);
    auto full = s.generate(kPrompt, greedy(16), nullptr);
    ASSERT_TRUE(full.ok());
    // Use the text of generated tokens 5..6 as a stop string.
    const std::string before = f.tok->detokenize(std::span(full->tokens).subspan(0, 5), false);
    const std::string stop = f.tok->detokenize(std::span(full->tokens).subspan(5, 2), false);
    ASSERT_FALSE(stop.empty());
    ASSERT_EQ(before.find(stop), std::string::npos) << "pick a stop string that appears later";
    GenerateParams p = greedy(16);
    p.stop = {stop, "a string that never appears"};
    std::string streamed;
    auto r = s.generate(kPrompt, p, [&](std::string_view t) {
        streamed += t;
        return true;
    });
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->stop, StopReason::StopString);
    EXPECT_EQ(r->stop_string, stop);
    EXPECT_EQ(r->text, before);
    EXPECT_EQ(streamed, before);
    EXPECT_EQ(streamed.find(stop), std::string::npos);
}

TEST(Session, CallbackCancels) {
    Fixture f;
    if (!load(&f)) GTEST_SKIP() << "no golden models at " << test::golden_dir();
    Session s(*f.model, *f.tok, *f.ctx);
    int calls = 0;
    auto r = s.generate(kPrompt, greedy(50), [&](std::string_view) { return ++calls < 3; });
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->stop, StopReason::Cancelled);
    EXPECT_EQ(calls, 3);
    EXPECT_LT(r->n_generated, 50);
}

TEST(Session, ReusesTheCachedPrefix) {
    Fixture f;
    if (!load(&f)) GTEST_SKIP() << "no golden models at " << test::golden_dir();
    Session s(*f.model, *f.tok, *f.ctx);
    auto first = s.generate(kPrompt, greedy(4), nullptr);
    ASSERT_TRUE(first.ok());
    // The next turn: the old prompt, the reply, and new tokens.
    std::vector<int32_t> next = kPrompt;
    next.insert(next.end(), first->tokens.begin(), first->tokens.end());
    next.push_back(77);
    next.push_back(78);
    auto second = s.generate(next, greedy(4), nullptr);
    ASSERT_TRUE(second.ok());
    // The prompt and the first three replies were evaluated (the last sampled one was not).
    EXPECT_EQ(second->n_cached, 8 + 3);

    // The same request from a fresh session gives the same tokens.
    Fixture g;
    ASSERT_TRUE(load(&g));
    Session fresh(*g.model, *g.tok, *g.ctx);
    auto cold = fresh.generate(next, greedy(4), nullptr);
    ASSERT_TRUE(cold.ok());
    EXPECT_EQ(cold->n_cached, 0);
    EXPECT_EQ(cold->tokens, second->tokens);
}

TEST(Session, SameSeedSameText) {
    Fixture f;
    if (!load(&f)) GTEST_SKIP() << "no golden models at " << test::golden_dir();
    Session s(*f.model, *f.tok, *f.ctx);
    GenerateParams p = greedy(20);
    p.sampling.temperature = 1.0f;
    p.sampling.seed = 42;
    auto a = s.generate(kPrompt, p, nullptr);
    auto b = s.generate(kPrompt, p, nullptr);
    p.sampling.seed = 43;
    auto c = s.generate(kPrompt, p, nullptr);
    ASSERT_TRUE(a.ok() && b.ok() && c.ok());
    EXPECT_EQ(a->tokens, b->tokens);
    EXPECT_NE(a->tokens, c->tokens);
}

TEST(Session, RefusesAPromptLargerThanTheContext) {
    Fixture f;
    if (!load(&f, 16)) GTEST_SKIP() << "no golden models at " << test::golden_dir();
    Session s(*f.model, *f.tok, *f.ctx);
    std::vector<int32_t> big(40, 5);
    auto r = s.generate(big, greedy(4), nullptr);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().find("does not fit the context"), std::string::npos) << r.error();
    // Generation that runs into the end of the context stops cleanly.
    auto full = s.generate(kPrompt, greedy(100), nullptr);
    ASSERT_TRUE(full.ok()) << full.error();
    EXPECT_EQ(full->stop, StopReason::ContextFull);
    EXPECT_EQ(full->n_generated, 16 - 8 + 1);
}
