// LoRA adapters: a context applying an adapter at scale s gives the logits of the model whose
// matrices are W + s * (alpha / rank) * B A (written out as a merged f32 model), per sequence
// in a batch of several; scale 0 is the base model; files that are not adapters of this
// model are refused with the reason.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "edgellm/gguf.h"
#include "edgellm/model.h"
#include "test_paths.h"

using namespace edgellm;
namespace fs = std::filesystem;

namespace {

const fs::path kBase = test::golden_dir() / "tiny-llama-f32.gguf";

struct Lora {
    std::string name;  // the base matrix, e.g. "blk.0.attn_q.weight"
    int64_t n_in, n_out, rank;
    std::vector<float> a, b;  // a [rank][n_in], b [n_out][rank]
};

fs::path temp_path(const std::string& name) {
    return fs::temp_directory_path() / ("edgellm-lora-" + std::to_string(::getpid()) + "-" + name);
}

// The adapter's matrices for the base's tensors named, random and small.
std::vector<Lora> make_loras(const GgufFile& base, const std::vector<std::string>& names, int64_t rank) {
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 0.05f);
    std::vector<Lora> out;
    for (const std::string& n : names) {
        const GgufTensorInfo* t = base.tensor(n);
        EXPECT_TRUE(t) << n;
        if (!t) continue;
        Lora l{n, t->ne[0], t->ne[1], rank, {}, {}};
        l.a.resize((size_t)(rank * l.n_in));
        l.b.resize((size_t)(l.n_out * rank));
        for (float& v : l.a) v = nd(rng);
        for (float& v : l.b) v = nd(rng);
        out.push_back(std::move(l));
    }
    return out;
}

void write_adapter(const fs::path& path, const std::vector<Lora>& loras, float alpha, const std::string& arch = "llama") {
    GgufWriter w;
    w.set("general.architecture", GgufValue{std::string(arch)});
    w.set("general.type", GgufValue{std::string("adapter")});
    w.set("adapter.type", GgufValue{std::string("lora")});
    w.set("adapter.lora.alpha", GgufValue{alpha});
    for (const Lora& l : loras) {
        w.add_tensor(l.name + ".lora_a", TensorType::F32, {l.n_in, l.rank}, l.a.data());
        w.add_tensor(l.name + ".lora_b", TensorType::F32, {l.rank, l.n_out}, l.b.data());
    }
    auto r = w.write(path.string());
    ASSERT_TRUE(r) << r.error();
}

// The base with W + s * (alpha / rank) * B A in place of each adapted matrix (all f32).
void write_merged(const GgufFile& base, const fs::path& path, const std::vector<Lora>& loras, float scale) {
    GgufWriter w;
    w.copy_metadata(base);
    std::vector<std::vector<float>> keep;
    for (const GgufTensorInfo& t : base.tensors()) {
        ASSERT_EQ(t.type, TensorType::F32) << t.name;
        std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
        const Lora* l = nullptr;
        for (const Lora& x : loras)
            if (x.name == t.name) l = &x;
        if (!l) {
            w.add_tensor(t.name, t.type, ne, t.data);
            continue;
        }
        std::vector<float> m((const float*)t.data, (const float*)t.data + t.n_elements());
        for (int64_t o = 0; o < l->n_out; ++o)
            for (int64_t i = 0; i < l->n_in; ++i) {
                double d = 0;
                for (int64_t k = 0; k < l->rank; ++k) d += (double)l->b[o * l->rank + k] * l->a[k * l->n_in + i];
                m[(size_t)(o * l->n_in + i)] += (float)(scale * d);
            }
        keep.push_back(std::move(m));
        w.add_tensor(t.name, t.type, ne, keep.back().data());
    }
    auto r = w.write(path.string());
    ASSERT_TRUE(r) << r.error();
}

std::vector<float> logits(Context& ctx, const std::vector<int32_t>& toks, int seq = 0) {
    auto r = ctx.eval(toks, true, seq);
    EXPECT_TRUE(r) << r.error();
    return r ? std::vector<float>(r->begin(), r->end()) : std::vector<float>{};
}

float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    float d = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
    return d;
}

struct LoraAdapters : ::testing::Test {
    std::unique_ptr<Model> base;
    std::vector<Lora> loras;
    fs::path adapter = temp_path("adapter.gguf"), merged = temp_path("merged.gguf");
    const std::vector<int32_t> toks{1, 15, 27, 300, 42, 7, 99, 5};
    void SetUp() override {
        if (!fs::exists(kBase)) GTEST_SKIP() << kBase << " is missing (the shared reference data)";
        auto m = Model::load(kBase.string());
        ASSERT_TRUE(m) << m.error();
        base = std::move(*m);
        const int64_t last = base->hparams().n_layer - 1;
        std::vector<std::string> names = {"blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight",
                                          "blk.0.attn_output.weight", "blk.0.ffn_gate.weight",
                                          "blk.0.ffn_up.weight", "blk." + std::to_string(last) + ".ffn_down.weight"};
        if (base->file().tensor("output.weight")) names.push_back("output.weight");
        loras = make_loras(base->file(), names, 4);
    }
    void TearDown() override {
        fs::remove(adapter);
        fs::remove(merged);
    }
};

}  // namespace

TEST_F(LoraAdapters, AppliedAtAScaleIsTheMergedModel) {
    const float alpha = 8.0f, scale = 0.75f;  // (alpha / rank = 2)
    write_adapter(adapter, loras, alpha);
    write_merged(base->file(), merged, loras, scale * alpha / 4);
    auto a = LoraAdapter::load(adapter.string(), *base);
    ASSERT_TRUE(a) << a.error();
    EXPECT_EQ((*a)->n_matrices(), (int64_t)loras.size());
    EXPECT_FLOAT_EQ((*a)->alpha(), alpha);

    ContextParams cp;
    cp.n_ctx = 64;
    cp.n_outputs = 16;
    cp.n_threads = 2;
    auto ctx = Context::create(*base, cp);
    ASSERT_TRUE(ctx) << ctx.error();
    const std::vector<float> plain = logits(**ctx, toks);
    ASSERT_TRUE((*ctx)->set_lora(0, {{*a, scale}}));
    (*ctx)->truncate(0);
    const std::vector<float> with = logits(**ctx, toks);

    auto mm = Model::load(merged.string());
    ASSERT_TRUE(mm) << mm.error();
    auto mctx = Context::create(**mm, cp);
    ASSERT_TRUE(mctx) << mctx.error();
    const std::vector<float> want = logits(**mctx, toks);

    EXPECT_GT(max_diff(plain, want), 1e-2f) << "the adapter must change the logits for this test to mean anything";
    EXPECT_LT(max_diff(with, want), 2e-3f);

    // scale 0: the base model again
    ASSERT_TRUE((*ctx)->set_lora(0, {{*a, 0.0f}}));
    (*ctx)->truncate(0);
    EXPECT_EQ(max_diff(logits(**ctx, toks), plain), 0.0f);
}

TEST_F(LoraAdapters, EachSequenceItsOwnAdaptersInOneStep) {
    write_adapter(adapter, loras, 0.0f);  // alpha 0: the scale alone
    write_merged(base->file(), merged, loras, 0.5f);
    auto a = LoraAdapter::load(adapter.string(), *base);
    ASSERT_TRUE(a) << a.error();
    ContextParams cp;
    cp.n_ctx = 64;
    cp.n_seq = 2;
    cp.n_outputs = 16;
    cp.n_threads = 2;
    auto ctx = Context::create(*base, cp);
    ASSERT_TRUE(ctx) << ctx.error();
    ASSERT_TRUE((*ctx)->set_lora(1, {{*a, 0.5f}}));
    const std::vector<Context::SeqTokens> parts = {{0, toks, true}, {1, toks, true}};
    auto r = (*ctx)->eval_batch(parts);
    ASSERT_TRUE(r) << r.error();
    const size_t nv = (size_t)(*ctx)->n_vocab(), n = toks.size();
    const std::vector<float> seq0(r->begin(), r->begin() + n * nv), seq1(r->begin() + n * nv, r->end());

    auto plain_ctx = Context::create(*base, cp);
    ASSERT_TRUE(plain_ctx);
    auto mm = Model::load(merged.string());
    ASSERT_TRUE(mm) << mm.error();
    auto mctx = Context::create(**mm, cp);
    ASSERT_TRUE(mctx);
    EXPECT_LT(max_diff(seq0, logits(**plain_ctx, toks)), 1e-4f);  // no adapter on sequence 0
    EXPECT_LT(max_diff(seq1, logits(**mctx, toks)), 2e-3f);
}

TEST_F(LoraAdapters, RefusesWhatIsNotAnAdapterOfThisModel) {
    auto refused = [&](const std::string& why_part) {
        auto a = LoraAdapter::load(adapter.string(), *base);
        ASSERT_FALSE(a);
        EXPECT_NE(a.error().find(why_part), std::string::npos) << a.error();
    };
    write_adapter(adapter, loras, 8.0f, "qwen2");
    refused("an adapter for qwen2");
    std::vector<Lora> bad = {loras[0]};
    bad[0].n_in -= 1;  // one column short
    bad[0].a.resize((size_t)(bad[0].rank * bad[0].n_in));
    write_adapter(adapter, bad, 8.0f);
    refused("do not fit");
    bad = {loras[0]};
    bad[0].name = "token_embd.weight";
    write_adapter(adapter, bad, 8.0f);
    refused("not a matrix edgellm applies adapters to");
    // the base model itself is not an adapter
    auto self = LoraAdapter::load(kBase.string(), *base);
    ASSERT_FALSE(self);
    EXPECT_NE(self.error().find("not a LoRA adapter"), std::string::npos) << self.error();
    auto missing = LoraAdapter::load("/nonexistent.gguf", *base);
    EXPECT_FALSE(missing);
}
