// Context::embed on the golden tiny model: each pooling is the final norm's output of the
// right positions (checked against the trace of an ordinary evaluation), chunked prompts give
// the same vectors, the sequence holds the input afterwards, bad inputs fail with a reason,
// and an embedding run beside a generating session through the batcher is not disturbed.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "edgellm/session.h"
#include "test_paths.h"
#include "tiny_model.h"

using namespace edgellm;

namespace {

using test::Fixture;
using test::load;

const std::vector<int32_t> kInput = {1936, 2094, 3090, 3890, 142, 590, 3368, 3882, 17, 99, 4};

// Every position's output of the final norm, from an ordinary evaluation with all logits.
std::vector<std::vector<float>> traced_rows(Fixture& f, const std::vector<int32_t>& tokens) {
    std::vector<std::vector<float>> rows;
    f.ctx->set_trace([&](const char* name, int, const float* data, int64_t n, int64_t width) {
        if (std::string(name) != "result_norm") return;
        for (int64_t r = 0; r < n; ++r) rows.emplace_back(data + r * width, data + (r + 1) * width);
    });
    f.ctx->truncate(0);
    auto r = f.ctx->eval(tokens, true);
    EXPECT_TRUE(r.ok()) << r.error();
    f.ctx->set_trace(nullptr);
    f.ctx->truncate(0);
    return rows;
}

void expect_near(const std::vector<float>& a, const std::vector<float>& b, float tol = 1e-5f) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tol) << "at " << i;
}

}  // namespace

TEST(Embed, EachPoolingIsTheFinalNormOfItsPositions) {
    Fixture f;
    if (!load(&f)) GTEST_SKIP() << "no golden models at " << test::golden_dir();
    ContextParams cp = f.ctx->params();
    cp.n_outputs = 16;  // the traced evaluation's logits of every position
    auto c = Context::create(*f.model, cp);
    ASSERT_TRUE(c.ok()) << c.error();
    f.ctx = std::move(*c);
    const auto rows = traced_rows(f, kInput);
    ASSERT_EQ(rows.size(), kInput.size());
    const size_t n_embd = (size_t)f.model->hparams().n_embd;

    auto last = f.ctx->embed(kInput, Context::Pooling::Last);
    ASSERT_TRUE(last.ok()) << last.error();
    expect_near(*last, rows.back());
    auto cls = f.ctx->embed(kInput, Context::Pooling::Cls);
    ASSERT_TRUE(cls.ok());
    expect_near(*cls, rows.front());
    std::vector<float> mean(n_embd, 0.0f);
    for (const auto& r : rows)
        for (size_t i = 0; i < n_embd; ++i) mean[i] += r[i] / (float)rows.size();
    auto m = f.ctx->embed(kInput, Context::Pooling::Mean);
    ASSERT_TRUE(m.ok());
    expect_near(*m, mean);
    auto none = f.ctx->embed(kInput, Context::Pooling::None);
    ASSERT_TRUE(none.ok());
    ASSERT_EQ(none->size(), rows.size() * n_embd);
    for (size_t t = 0; t < rows.size(); ++t)
        expect_near(std::vector<float>(none->begin() + (long)(t * n_embd),
                                       none->begin() + (long)((t + 1) * n_embd)),
                    rows[t]);
    // The vectors differ between poolings (a test that cannot tell them apart proves nothing).
    EXPECT_GT(std::fabs((*last)[0] - (*cls)[0]) + std::fabs((*last)[1] - (*cls)[1]), 1e-4f);
}

TEST(Embed, ChunkedInputGivesTheSameVectors) {
    Fixture whole, chunked;
    if (!load(&whole)) GTEST_SKIP() << "no golden models at " << test::golden_dir();
    ASSERT_TRUE(load(&chunked));
    ContextParams cp = chunked.ctx->params();
    cp.n_batch = 3;  // 11 tokens in steps of 3, 3, 3, 2
    auto c = Context::create(*chunked.model, cp);
    ASSERT_TRUE(c.ok()) << c.error();
    chunked.ctx = std::move(*c);
    for (auto pooling : {Context::Pooling::Mean, Context::Pooling::Cls, Context::Pooling::Last}) {
        auto a = whole.ctx->embed(kInput, pooling);
        auto b = chunked.ctx->embed(kInput, pooling);
        ASSERT_TRUE(a.ok() && b.ok());
        expect_near(*a, *b, 2e-3f);  // other batch shapes round differently
    }
}

TEST(Embed, TheSequenceHoldsTheInputAfterwards) {
    Fixture f;
    if (!load(&f)) GTEST_SKIP() << "no golden models at " << test::golden_dir();
    KvSequence seq(*f.ctx, 0);
    ASSERT_TRUE(seq.eval(std::vector<int32_t>{5, 6, 7, 8, 9}, false).ok());
    auto e = seq.embed(kInput, Context::Pooling::Last);
    ASSERT_TRUE(e.ok()) << e.error();
    EXPECT_EQ(seq.tokens(), kInput);
    EXPECT_EQ(f.ctx->n_past(0), (int64_t)kInput.size());
    // Its K/V is the input's: the next token's logits are those of a fresh evaluation.
    auto next = seq.eval(std::vector<int32_t>{42}, false);
    ASSERT_TRUE(next.ok());
    const std::vector<float> after(next->begin(), next->end());
    seq.clear();
    std::vector<int32_t> all = kInput;
    all.push_back(42);
    auto fresh = seq.eval(all, false);
    ASSERT_TRUE(fresh.ok());
    expect_near(after, std::vector<float>(fresh->begin(), fresh->end()), 1e-3f);
}

TEST(Embed, BadInputsFailWithAReason) {
    Fixture f;
    if (!load(&f, 16)) GTEST_SKIP() << "no golden models at " << test::golden_dir();
    KvSequence seq(*f.ctx, 0);
    auto empty = seq.embed(std::vector<int32_t>{}, Context::Pooling::Mean);
    ASSERT_FALSE(empty.ok());
    EXPECT_NE(empty.error().find("no tokens"), std::string::npos);
    auto bad_id = seq.embed(std::vector<int32_t>{1, 1 << 30}, Context::Pooling::Mean);
    ASSERT_FALSE(bad_id.ok());
    EXPECT_NE(bad_id.error().find("outside the vocabulary"), std::string::npos);
    auto too_long = seq.embed(std::vector<int32_t>(17, 5), Context::Pooling::Mean);
    ASSERT_FALSE(too_long.ok());
    EXPECT_NE(too_long.error().find("larger than the context"), std::string::npos);
    EXPECT_TRUE(seq.tokens().empty());
    EXPECT_TRUE(seq.embed(std::vector<int32_t>(16, 5), Context::Pooling::Mean).ok());
}

TEST(Embed, BesideAGeneratingSessionThroughTheBatcher) {
    Fixture f;
    if (!test::load(&f)) GTEST_SKIP() << "no golden models at " << test::golden_dir();
    ContextParams cp = f.ctx->params();
    cp.n_seq = 2;
    auto c = Context::create(*f.model, cp);
    ASSERT_TRUE(c.ok());
    f.ctx = std::move(*c);
    auto alone = f.ctx->embed(kInput, Context::Pooling::Mean, 1);
    ASSERT_TRUE(alone.ok());
    StepBatcher batcher(*f.ctx);
    Session s(*f.model, *f.tok, *f.ctx, 0);
    GenerateParams gp;
    gp.n_predict = 48;
    gp.ignore_eos = true;
    gp.sampling.temperature = 0.0f;
    gp.batcher = &batcher;
    auto before = s.generate(kInput, gp, nullptr);
    ASSERT_TRUE(before.ok());
    s.clear();
    std::thread gen([&] {
        auto r = s.generate(kInput, gp, nullptr);
        ASSERT_TRUE(r.ok());
        EXPECT_EQ(r->tokens, before->tokens);  // the embeddings did not disturb it
    });
    KvSequence other(*f.ctx, 1);
    for (int i = 0; i < 20; ++i) {
        auto e = other.embed(kInput, Context::Pooling::Mean, nullptr, &batcher);
        ASSERT_TRUE(e.ok()) << e.error();
        expect_near(*e, *alone, 1e-4f);
    }
    gen.join();
}
