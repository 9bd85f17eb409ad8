// LFM2 on the tiny synthetic model (tiny-lfm2: short convolutions on layers 0, 1, 3 and 4,
// attention on 2 and 5), what its golden logits (test_family_golden) do not show by
// themselves: the layer pattern read from the KV head array, the memory bill of the two
// kinds of state, decode token by token giving prefill's logits, a sequence's recurrent state
// carried from eval to eval and never cut back (a roll-back empties the sequence, after
// which it computes what a fresh one does), checkpoints and snapshots that bring the state
// back, an interrupted step that starts the sequence again, no context shift, and the
// variants edgellm does not run refused by name.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "edgellm/gguf.h"
#include "edgellm/model.h"
#include "synth_file.h"
#include "test_paths.h"

using namespace edgellm;
namespace fs = std::filesystem;

namespace {

fs::path tiny(const test::TempDir& dir, FileType type = FileType::F32) {
    return test::synth_file(dir, "tiny-lfm2", type);
}

using test::nrmse;
using test::some_tokens;

std::vector<float> copy(Result<std::span<const float>> r) {
    EXPECT_TRUE(r.ok()) << r.error();
    return r.ok() ? std::vector<float>(r->begin(), r->end()) : std::vector<float>{};
}

std::unique_ptr<Context> context(const Model& m, int n_seq = 1, int64_t n_batch = 64) {
    ContextParams cp;
    cp.n_ctx = 128;
    cp.n_batch = n_batch;
    cp.n_outputs = 64;
    cp.n_threads = 2;
    cp.n_seq = n_seq;
    auto c = Context::create(m, cp);
    EXPECT_TRUE(c.ok()) << c.error();
    return c.ok() ? std::move(*c) : nullptr;
}

}  // namespace

TEST(Lfm2, LayersWithoutKvHeadsAreShortConvolutionsWithAStateOfTheirOwn) {
    test::TempDir dir("edgellm-lfm2");
    auto m = Model::load(tiny(dir).string());
    ASSERT_TRUE(m.ok()) << m.error();
    const HParams& h = (*m)->hparams();
    EXPECT_EQ(h.recurrent_layers, (std::vector<uint8_t>{1, 1, 0, 1, 1, 0}));
    EXPECT_EQ(h.n_head_kv, 2);
    EXPECT_EQ(h.n_head_kv_at(0), 0);
    EXPECT_EQ(h.n_head_kv_at(2), 2);
    EXPECT_EQ(h.conv_kernel, 3);
    EXPECT_EQ(h.conv_channels, 256);
    EXPECT_TRUE(h.rope_neox);
    ContextParams cp;
    cp.n_ctx = 512;
    cp.n_seq = 3;
    auto bill = Context::memory_bill(**m, cp);
    ASSERT_TRUE(bill.ok()) << bill.error();
    // two attention layers' K and V (f16, 2 heads of 32) for 512 positions, 3 sequences
    EXPECT_EQ(bill->kv_layers, 2);
    EXPECT_EQ(bill->kv_cache, 3u * 2 * 512 * 2 * (2 * 32 * 2));
    // four convolution layers' windows (2 past inputs of 256 channels), whatever the context
    EXPECT_EQ(bill->recurrent_layers, 4);
    EXPECT_EQ(bill->recurrent, 3u * 4 * 2 * 256 * sizeof(float));
    EXPECT_EQ(bill->total(), bill->weights + bill->kv_cache + bill->recurrent + bill->scratch);
    cp.n_ctx = 2048;
    EXPECT_EQ(Context::memory_bill(**m, cp)->recurrent, bill->recurrent);
    auto ctx = context(**m);
    EXPECT_EQ(ctx->recurrent_state_bytes(), 4u * 2 * 256 * sizeof(float));
}

// A prompt in one step and the same tokens one at a time (and in uneven pieces) give the same
// logits: the convolution's window carries the state from step to step.
TEST(Lfm2, TokenByTokenDecodeGivesThePromptsLogits) {
    test::TempDir dir("edgellm-lfm2");
    for (FileType type : {FileType::F32, FileType::Q8_0}) {
        SCOPED_TRACE(file_type_name(type));
        auto m = Model::load(tiny(dir, type).string());
        ASSERT_TRUE(m.ok()) << m.error();
        const std::vector<int32_t> tokens = some_tokens(24);
        auto a = context(**m);
        const std::vector<float> whole = copy(a->eval(tokens, true));
        const int64_t n_vocab = a->n_vocab();
        auto b = context(**m);
        std::vector<float> one;
        for (int32_t t : tokens) {
            const std::vector<float> r = copy(b->eval(std::span<const int32_t>(&t, 1), false));
            one.insert(one.end(), r.begin(), r.end());
        }
        ASSERT_EQ(one.size(), whole.size());
        EXPECT_LT(nrmse(one, whole), type == FileType::F32 ? 1e-5 : 1e-2);
        for (size_t r = 0; r < tokens.size(); ++r) {  // the answer of every position
            const float* x = whole.data() + r * n_vocab;
            const float* y = one.data() + r * n_vocab;
            EXPECT_EQ(std::max_element(x, x + n_vocab) - x, std::max_element(y, y + n_vocab) - y) << r;
        }
        auto c = context(**m);
        std::vector<float> pieces;
        for (auto [at, len] : {std::pair{0, 7}, {7, 1}, {8, 16}}) {
            const std::vector<float> r = copy(c->eval(std::span(tokens).subspan(at, len), true));
            pieces.insert(pieces.end(), r.begin(), r.end());
        }
        EXPECT_LT(nrmse(pieces, whole), type == FileType::F32 ? 1e-5 : 1e-2);
        EXPECT_EQ(c->n_past(), 24);
    }
}

// The state is the sequence's: two sequences of one context evaluated in one step keep theirs
// apart, each as it would alone; and a token's logits depend on what came before it.
TEST(Lfm2, EachSequenceCarriesItsOwnState) {
    test::TempDir dir("edgellm-lfm2");
    auto m = Model::load(tiny(dir).string());
    ASSERT_TRUE(m.ok()) << m.error();
    const std::vector<int32_t> p0 = some_tokens(9, 0), p1 = some_tokens(5, 1);
    const int32_t next = 123;
    auto alone = context(**m);
    (void)copy(alone->eval(p0, false));
    const std::vector<float> want0 = copy(alone->eval(std::span<const int32_t>(&next, 1), false));
    alone->truncate(0);
    (void)copy(alone->eval(p1, false));
    const std::vector<float> want1 = copy(alone->eval(std::span<const int32_t>(&next, 1), false));
    EXPECT_GT(nrmse(want0, want1), 1e-2);  // (the same token after other tokens)

    auto two = context(**m, 2);
    (void)copy(two->eval(p0, false, 0));
    (void)copy(two->eval(p1, false, 1));
    const Context::SeqTokens parts[2] = {{0, std::span<const int32_t>(&next, 1)},
                                         {1, std::span<const int32_t>(&next, 1)}};
    const std::vector<float> both = copy(two->eval_batch(parts));
    const size_t n_vocab = (size_t)two->n_vocab();
    ASSERT_EQ(both.size(), 2 * n_vocab);
    EXPECT_LT(nrmse(std::span(both).first(n_vocab), want0), 1e-5);
    EXPECT_LT(nrmse(std::span(both).last(n_vocab), want1), 1e-5);
}

// A recurrent state cannot be cut back: truncating to fewer positions than held empties the
// sequence, and what it then computes is what a fresh one computes.
TEST(Lfm2, ARollBackStartsTheSequenceAgain) {
    test::TempDir dir("edgellm-lfm2");
    auto m = Model::load(tiny(dir).string());
    ASSERT_TRUE(m.ok()) << m.error();
    const std::vector<int32_t> tokens = some_tokens(20);
    auto fresh = context(**m);
    const std::vector<float> want = copy(fresh->eval(tokens, true));
    auto ctx = context(**m);
    (void)copy(ctx->eval(some_tokens(13, 5), false));
    EXPECT_EQ(ctx->truncate(13), 13);  // (all it holds: nothing to cut)
    EXPECT_EQ(ctx->n_past(), 13);
    EXPECT_EQ(ctx->truncate(6), 0);
    EXPECT_EQ(ctx->n_past(), 0);
    EXPECT_EQ(copy(ctx->eval(tokens, true)), want);
    EXPECT_EQ(ctx->truncate(0), 0);
    EXPECT_EQ(copy(ctx->eval(tokens, true)), want);
    // no context shift either, and the reason names the model
    ASSERT_NE(ctx->recurrent_reason(), nullptr);
    EXPECT_NE(std::string(ctx->recurrent_reason()).find("lfm2"), std::string::npos);
    EXPECT_EQ(ctx->shift(4, 8), 0);
    EXPECT_EQ(ctx->n_past(), 20);
}

// A checkpoint (a copy of the recurrent state at a position) brings the sequence back to that
// position: what follows is computed as the first time.
TEST(Lfm2, ACheckpointBringsTheStateBack) {
    test::TempDir dir("edgellm-lfm2");
    auto m = Model::load(tiny(dir).string());
    ASSERT_TRUE(m.ok()) << m.error();
    auto ctx = context(**m);
    (void)copy(ctx->eval(some_tokens(10), false));
    Context::RecurrentCheckpoint cp;
    ctx->save_recurrent(&cp);
    EXPECT_EQ(cp.n_past, 10);
    EXPECT_EQ(cp.state.size() * sizeof(float), ctx->recurrent_state_bytes());
    const std::vector<int32_t> more = some_tokens(6, 3), other = some_tokens(4, 9);
    const std::vector<float> first = copy(ctx->eval(more, true));
    auto back = ctx->restore_recurrent(cp);
    ASSERT_TRUE(back.ok()) << back.error();
    EXPECT_EQ(*back, 10);
    EXPECT_EQ(ctx->n_past(), 10);
    EXPECT_EQ(copy(ctx->eval(more, true)), first);
    // and again after another continuation
    ASSERT_TRUE(ctx->restore_recurrent(cp).ok());
    (void)copy(ctx->eval(other, false));
    ASSERT_TRUE(ctx->restore_recurrent(cp).ok());
    EXPECT_EQ(copy(ctx->eval(more, true)), first);
    // a sequence holding fewer positions than the checkpoint cannot go back to it
    ctx->truncate(0);
    auto r = ctx->restore_recurrent(cp);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().find("fewer"), std::string::npos) << r.error();
    Context::RecurrentCheckpoint none;
    EXPECT_FALSE(ctx->restore_recurrent(none).ok());
}

// Context::snapshot holds the recurrent state with the KV cache: restored into another
// context, the next token's logits are those of the original.
TEST(Lfm2, ASnapshotCarriesTheRecurrentState) {
    test::TempDir dir("edgellm-lfm2");
    auto m = Model::load(tiny(dir).string());
    ASSERT_TRUE(m.ok()) << m.error();
    auto a = context(**m);
    (void)copy(a->eval(some_tokens(12), false));
    const std::vector<uint8_t> blob = a->snapshot();
    const int32_t next = 77;
    const std::vector<float> want = copy(a->eval(std::span<const int32_t>(&next, 1), false));
    auto b = context(**m);
    auto n = b->restore(blob);
    ASSERT_TRUE(n.ok()) << n.error();
    EXPECT_EQ(*n, 12);
    EXPECT_EQ(copy(b->eval(std::span<const int32_t>(&next, 1), false)), want);
    // damaged bytes are refused and leave the sequence empty
    std::vector<uint8_t> cut(blob.begin(), blob.end() - 8);
    EXPECT_FALSE(b->restore(cut).ok());
    EXPECT_EQ(b->n_past(), 0);
}

// An evaluation stopped between layers has folded part of its step into some layers' state:
// the sequence starts again, and then computes what a fresh one does.
TEST(Lfm2, AnInterruptedStepStartsTheSequenceAgain) {
    test::TempDir dir("edgellm-lfm2");
    auto m = Model::load(tiny(dir).string());
    ASSERT_TRUE(m.ok()) << m.error();
    const std::vector<int32_t> tokens = some_tokens(16);
    auto fresh = context(**m);
    const std::vector<float> want = copy(fresh->eval(tokens, true));
    auto ctx = context(**m);
    (void)copy(ctx->eval(some_tokens(5, 2), false));
    std::atomic<bool> stop{false};
    ctx->set_abort_flag(&stop);
    ctx->set_trace([&](const char* name, int layer, const float*, int64_t, int64_t) {
        if (layer == 1 && std::strcmp(name, "l_out") == 0) stop = true;  // (after two conv layers)
    });
    auto r = ctx->eval(some_tokens(7, 4), false);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error(), Context::kAborted);
    EXPECT_EQ(ctx->n_past(), 0);
    stop = false;
    ctx->set_trace(nullptr);
    EXPECT_EQ(copy(ctx->eval(tokens, true)), want);
}

// What edgellm does not run is named: LFM2's mixture of experts (another architecture, or
// its tensors), the image and audio encoders, the ColBERT / audio heads, LFM2.5-Audio's
// sliding-window detokenizer, a bidirectional (embedding) LFM2.
TEST(Lfm2, VariantsItDoesNotRunAreRefusedByName) {
    test::TempDir dir("edgellm-lfm2");
    auto src = GgufFile::open(tiny(dir).string());
    ASSERT_TRUE(src.ok());
    const GgufTensorInfo* norm = (*src)->tensor("blk.0.attn_norm.weight");
    struct Case {
        const char* tensor;  // an extra tensor (null: none)
        const char* key;     // a key set (null: none)
        GgufValue value;
        const char* names;   // what the refusal names
        const char* says;
    };
    const Case cases[] = {
        {nullptr, "general.architecture", gguf_value("lfm2moe"), "lfm2moe", "mixture of experts"},
        {nullptr, "lfm2.expert_count", gguf_value((uint32_t)32), "lfm2.expert_count", "mixture of experts"},
        {"blk.0.ffn_gate_exps.weight", nullptr, {}, "blk.0.ffn_gate_exps.weight", "mixture-of-experts"},
        {"v.blk.0.attn_q.weight", nullptr, {}, "v.blk.0.attn_q.weight", "image or audio encoder"},
        {"dense_2_out.weight", nullptr, {}, "dense_2_out.weight", "ColBERT"},
        {nullptr, "lfm2.attention.sliding_window", gguf_value((uint32_t)30), "lfm2.attention.sliding_window", "Audio"},
        {nullptr, "lfm2.attention.causal", gguf_value(false), "lfm2.attention.causal", "bidirectional"},
        {nullptr, "lfm2.shortconv.l_cache", gguf_value((uint32_t)1), "lfm2.shortconv.l_cache", "2 to 8"},
    };
    for (const Case& k : cases) {
        const fs::path f = dir.path / "refused.gguf";
        test::write_variant(f, **src, k.key, k.value, k.tensor, norm);
        auto m = Model::load(f.string());
        ASSERT_FALSE(m.ok()) << k.names;
        EXPECT_NE(m.error().find(k.names), std::string::npos) << m.error();
        EXPECT_NE(m.error().find(k.says), std::string::npos) << m.error();
    }
}
