// Golden tests: for every case of reference/golden/cases.json and every kernel set this
// machine supports, our logits against llama.cpp's, as normalized RMSE over all positions.
#include <gtest/gtest.h>

#include "test_paths.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "compute/matmul.h"
#include "edgellm/model.h"
#include "kernels/kernels.h"
#include "kernels/panel.h"

using namespace edgellm;
namespace fs = std::filesystem;

namespace {

const fs::path kGolden = edgellm::test::golden_dir();

struct Case {
    std::string model, kv_type, logits;
    int64_t n_tokens, n_vocab;
};

struct Cases {
    std::vector<int32_t> tokens;
    std::vector<Case> cases;
};

Cases load_cases() {
    Cases c;
    std::ifstream in(kGolden / "cases.json");
    if (!in) return c;
    const auto j = nlohmann::json::parse(in);
    for (const auto& t : j.at("tokens")) c.tokens.push_back(t.get<int32_t>());
    for (const auto& e : j.at("cases"))
        c.cases.push_back(
            {e.at("model"), e.at("kv_type"), e.at("logits"), e.at("n_tokens"), e.at("n_vocab")});
    return c;
}

std::vector<float> read_f32(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::vector<float> v(fs::file_size(p) / sizeof(float));
    in.read((char*)v.data(), (std::streamsize)(v.size() * sizeof(float)));
    return v;
}

struct Distance {
    double nrmse;
    double top1;
};

Distance distance(std::span<const float> ours, const std::vector<float>& gold, int64_t n_vocab) {
    double num = 0, den = 0;
    int agree = 0;
    const int64_t rows = (int64_t)gold.size() / n_vocab;
    for (int64_t r = 0; r < rows; ++r) {
        int64_t a = 0, b = 0;
        for (int64_t i = 0; i < n_vocab; ++i) {
            const double o = ours[r * n_vocab + i], g = gold[r * n_vocab + i];
            num += (o - g) * (o - g);
            den += g * g;
            if (o > ours[r * n_vocab + a]) a = i;
            if (g > gold[r * n_vocab + b]) b = i;
        }
        agree += a == b;
    }
    return {std::sqrt(num / den), (double)agree / rows};
}

class GoldenTest : public ::testing::TestWithParam<std::string> {
  protected:
    void SetUp() override { ASSERT_TRUE(select_kernel_set(GetParam())); }
    void TearDown() override { select_kernel_set(default_kernel_set()); }
};

}  // namespace

TEST_P(GoldenTest, EveryCaseWithin3e2) {
    const Cases c = load_cases();
    if (c.cases.empty()) GTEST_SKIP() << "no golden cases at " << kGolden;
    for (const Case& k : c.cases) {
        auto model = Model::load((kGolden / k.model).string());
        ASSERT_TRUE(model.ok()) << model.error();
        ContextParams p;
        p.n_ctx = 64;
        p.n_batch = k.n_tokens;
        p.n_outputs = k.n_tokens;
        p.type_k = p.type_v = k.kv_type == "q8_0" ? TensorType::Q8_0 : TensorType::F16;
        p.n_threads = 2;
        auto ctx = Context::create(**model, p);
        ASSERT_TRUE(ctx.ok()) << ctx.error();
        auto logits = (*ctx)->eval(c.tokens, true);
        ASSERT_TRUE(logits.ok()) << logits.error();
        const auto gold = read_f32(kGolden / k.logits);
        ASSERT_EQ(logits->size(), gold.size()) << k.model;
        const Distance d = distance(*logits, gold, k.n_vocab);
        std::printf("[%s] %-28s kv %-4s nrmse %.2e top1 %.3f\n", GetParam().c_str(),
                    k.model.c_str(), k.kv_type.c_str(), d.nrmse, d.top1);
        EXPECT_LE(d.nrmse, 3e-2) << k.model << " kv " << k.kv_type;
        EXPECT_GE(d.top1, 0.85) << k.model << " kv " << k.kv_type;
    }
}

INSTANTIATE_TEST_SUITE_P(KernelSets, GoldenTest, ::testing::ValuesIn(available_kernel_sets()),
                         [](const auto& info) {
                             std::string n = info.param;  // (amx-bf16: no '-' in a test name)
                             for (char& ch : n)
                                 if (ch == '-') ch = '_';
                             return n;
                         });

// Evaluating the sequence in pieces (prefill, then one token at a time through the KV
// cache) gives the same logits as one batch: the cache and positions are right. Batches
// of kPanelMinTokens and more take the panel GEMM, whose float sums run in another order
// than the per-row dot products; in these random-weight models that shows as ~1e-2, so
// the big batch is held to the golden bound, and a batch that stays on the per-row path
// (the pieces' path) to 2e-3.
TEST(Context, IncrementalEvalMatchesOneBatch) {
    const Cases c = load_cases();
    if (c.cases.empty()) GTEST_SKIP() << "no golden cases at " << kGolden;
    auto model = Model::load((kGolden / "tiny-qwen2-q4_k_m.gguf").string());
    ASSERT_TRUE(model.ok()) << model.error();
    const int64_t n_vocab = (*model)->hparams().n_vocab;
    ContextParams p;
    p.n_ctx = 64;
    p.n_batch = 32;
    p.n_outputs = 32;
    p.n_threads = 2;
    auto whole = Context::create(**model, p);
    ASSERT_TRUE(whole.ok());
    auto all = (*whole)->eval(c.tokens, true);
    ASSERT_TRUE(all.ok());
    const std::vector<float> big_batch(all->begin(), all->end());

    p.n_batch = kPanelMinTokens - 1;
    auto small = Context::create(**model, p);
    ASSERT_TRUE(small.ok());
    auto all_small = (*small)->eval(c.tokens, true);
    ASSERT_TRUE(all_small.ok());
    std::vector<float> expected(all_small->begin(), all_small->end());
    const Distance between = distance(expected, big_batch, n_vocab);
    EXPECT_LE(between.nrmse, 3e-2);
    EXPECT_GE(between.top1, 0.85);

    p.n_batch = 5;  // forces several forward steps inside one eval
    auto pieces = Context::create(**model, p);
    ASSERT_TRUE(pieces.ok());
    auto first = (*pieces)->eval(std::span<const int32_t>(c.tokens.data(), 12), false);
    ASSERT_TRUE(first.ok());
    for (int64_t i = 0; i < n_vocab; ++i)
        EXPECT_NEAR((*first)[i], expected[11 * n_vocab + i], 2e-3);
    for (size_t t = 12; t < c.tokens.size(); ++t) {
        auto step = (*pieces)->eval(std::span<const int32_t>(&c.tokens[t], 1), false);
        ASSERT_TRUE(step.ok());
        double err = 0;
        for (int64_t i = 0; i < n_vocab; ++i)
            err = std::max(err, (double)std::fabs((*step)[i] - expected[t * n_vocab + i]));
        EXPECT_LT(err, 2e-3) << "position " << t;
    }
    EXPECT_EQ((*pieces)->n_past(), 32);

    // Rolling back and re-evaluating the tail reproduces it.
    (*pieces)->truncate(20);
    auto again = (*pieces)->eval(std::span<const int32_t>(&c.tokens[20], 12), true);
    ASSERT_TRUE(again.ok());
    for (int64_t i = 0; i < n_vocab; ++i)
        EXPECT_NEAR((*again)[11 * n_vocab + i], expected[31 * n_vocab + i], 2e-3);
}

TEST(Context, RefusesBadInput) {
    auto model = Model::load((kGolden / "tiny-llama-q8_0.gguf").string());
    if (!model.ok()) GTEST_SKIP() << model.error();
    ContextParams p;
    p.n_ctx = 8;
    p.n_threads = 1;
    auto ctx = Context::create(**model, p);
    ASSERT_TRUE(ctx.ok());
    std::vector<int32_t> bad = {1, 4096};
    auto r = (*ctx)->eval(bad, false);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().find("outside the vocabulary"), std::string::npos) << r.error();
    std::vector<int32_t> many(9, 1);
    r = (*ctx)->eval(many, false);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().find("context full"), std::string::npos) << r.error();
    EXPECT_EQ((*ctx)->n_past(), 0);
    r = (*ctx)->eval({}, false);
    EXPECT_FALSE(r.ok());
    p.type_k = TensorType::Q4_K;
    EXPECT_FALSE(Context::create(**model, p).ok());
    p.type_k = TensorType::F16;
    p.type_v = TensorType::Q2_K;
    EXPECT_FALSE(Context::create(**model, p).ok());
}

// A context's scratch fits the kernel set it was made under (the panel GEMM's buffers): if
// the set changes afterwards, evaluation is refused with a message instead of overrunning
// the scratch, and works again once the set is back.
TEST(Context, RefusesToRunAfterTheKernelSetChanged) {
    auto model = Model::load((kGolden / "tiny-qwen2-q4_k_m.gguf").string());
    if (!model.ok()) GTEST_SKIP() << model.error();
    const std::string best = default_kernel_set();
    ASSERT_TRUE(select_kernel_set(best));
    if (panel_kernel().rows == 0)
        GTEST_SKIP() << "kernel set " << best << " has no panel GEMM: its scratch is the ref set's";
    ContextParams p;
    p.n_ctx = 32;
    p.n_batch = 16;
    p.n_threads = 2;
    auto ctx = Context::create(**model, p);
    ASSERT_TRUE(ctx.ok());
    const std::vector<int32_t> tokens(12, 3);  // a batch that takes the panel GEMM
    ASSERT_TRUE(select_kernel_set("ref"));
    auto r = (*ctx)->eval(tokens, false);
    ASSERT_TRUE(select_kernel_set(best));
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().find("kernel set changed"), std::string::npos) << r.error();
    EXPECT_EQ((*ctx)->n_past(), 0);
    EXPECT_TRUE((*ctx)->eval(tokens, false).ok());
    // amx and amx-bf16 have panels of the same rows but lay the scratch out differently
    const auto sets = available_kernel_sets();
    if (std::find(sets.begin(), sets.end(), "amx-bf16") != sets.end()) {
        ASSERT_TRUE(select_kernel_set("amx"));
        auto c8 = Context::create(**model, p);
        ASSERT_TRUE(c8.ok());
        ASSERT_TRUE(select_kernel_set("amx-bf16"));
        auto rb = (*c8)->eval(tokens, false);
        ASSERT_TRUE(select_kernel_set(best));
        ASSERT_FALSE(rb.ok()) << "amx -> amx-bf16 must be refused";
        EXPECT_NE(rb.error().find("kernel set changed"), std::string::npos) << rb.error();
    } else {
        std::printf("(no amx-bf16 set here: the amx -> amx-bf16 switch is not tried)\n");
    }
}

// The memory bill adds up: weights are the file's tensor bytes, the KV cache is
// 2 x layers x context x row size, and a context allocates what the bill says.
TEST(Context, MemoryBillAddsUp) {
    auto model = Model::load((kGolden / "tiny-qwen2-f16.gguf").string());
    if (!model.ok()) GTEST_SKIP() << model.error();
    const HParams& h = (*model)->hparams();
    for (TensorType kv : {TensorType::F16, TensorType::Q8_0}) {
        ContextParams p;
        p.n_ctx = 1024;
        p.n_threads = 2;
        p.type_k = p.type_v = kv;
        auto bill = Context::memory_bill(**model, p);
        ASSERT_TRUE(bill.ok());
        EXPECT_EQ(bill->weights, (*model)->file().tensor_bytes());
        EXPECT_EQ(bill->kv_cache, 2u * h.n_layer * 1024 * row_size(kv, h.n_embd_kv()));
        EXPECT_EQ(bill->total(), bill->weights + bill->kv_cache + bill->scratch);
        EXPECT_GT(bill->scratch, 0u);
    }
}

// Weights repacked at load for decode (kernels/x16.h): a batch (the panel GEMM reading the
// rows back) gives the file layout's logits bit for bit; one token at a time (the GEMV)
// gives the batch's logits bit for bit where every matrix is of a 32-element type (the
// GEMV and the panel GEMM add the same terms in the same order), to float rounding where
// only the output matrix is a K-quant, and within the golden bound where every matrix is
// (these tiny random models turn a last-bit difference into another rounding of an 8-bit
// activation, layer after layer, as the file layout's per-row dot products do too). The
// memory bill says how much was repacked, and warming up still works.
TEST(Model, RepackedWeightsGiveTheFileLayoutsLogits) {
    const Cases c = load_cases();
    if (c.cases.empty()) GTEST_SKIP() << "no golden cases at " << kGolden;
    int repacked_models = 0;
    enum Match { kExact, kRounding, kGoldenBound };
    // the kernel set has the exact x16 GEMM (AMX): batches over repacked q4_K / q6_K
    // weights give each token its GEMV bits
    const bool exact_batches = type_kernels(TensorType::Q2_K).x16_tiles.gemm != nullptr &&
                               type_kernels(TensorType::Q4_K).x16_tiles.gemm != nullptr &&
                               type_kernels(TensorType::Q6_K).x16_tiles.gemm != nullptr;
    for (const auto& [name, match] :
         std::vector<std::pair<const char*, Match>>{{"tiny-llama-q8_0.gguf", kExact},
                                                    {"tiny-qwen2-q4_0.gguf", kRounding},
                                                    {"tiny-qwen2-q5_0.gguf", kRounding},
                                                    {"tiny-qwen2-q4_k_m.gguf", kGoldenBound},
                                                    {"tiny-llama-q6_k.gguf", kGoldenBound}}) {
        const std::string path = (kGolden / name).string();
        ::setenv("EDGELLM_REPACK", "0", 1);
        auto plain = Model::load(path);
        ::unsetenv("EDGELLM_REPACK");
        auto packed = Model::load(path);
        ASSERT_TRUE(plain.ok() && packed.ok()) << name;
        EXPECT_EQ((*plain)->repacked_bytes(), 0u);
        if ((*packed)->repacked_bytes() == 0) {
            std::printf("%s: nothing repacked (no SIMD GEMV for its types in kernel set %s)\n",
                        name, active_kernel_set().c_str());
            continue;
        }
        ++repacked_models;
        (*packed)->warm_up();
        // A batch longer than the GEMV takes goes through the panel GEMM, which reads the
        // repacked rows back into the file's layout: the same panels, the same bits.
        // (longer than every type's GEMV bound: the k-quants' may be the larger)
        int64_t gemv_max = 0;
        for (TensorType t : {TensorType::Q4_0, TensorType::Q5_0, TensorType::Q8_0,
                             TensorType::Q2_K, TensorType::Q4_K, TensorType::Q6_K})
            gemv_max = std::max(gemv_max, x16_gemv_max_tokens(t));
        std::vector<int32_t> longer;
        while ((int64_t)longer.size() <= gemv_max)
            longer.insert(longer.end(), c.tokens.begin(), c.tokens.end());
        ContextParams p;
        p.n_ctx = (int64_t)longer.size();
        p.n_batch = (int64_t)longer.size();
        p.n_outputs = (int64_t)longer.size();
        p.n_threads = 2;
        auto bill = Context::memory_bill(**packed, p);
        ASSERT_TRUE(bill.ok());
        EXPECT_EQ(bill->weights_repacked, (*packed)->repacked_bytes());
        EXPECT_LE(bill->weights_repacked, bill->weights);
        auto a = Context::create(**plain, p);
        auto b = Context::create(**packed, p);
        auto steps = Context::create(**packed, p);
        ASSERT_TRUE(a.ok() && b.ok() && steps.ok());
        auto ra = (*a)->eval(longer, true);
        auto rb = (*b)->eval(longer, true);
        ASSERT_TRUE(ra.ok() && rb.ok());
        if (exact_batches) {
            // repacked q4_K / q6_K batches take the GEMV's integer sums, the file layout's
            // the panel's float ones: they differ as one token and a batch did before
            // (the order of additions, grown through the random models' layers)
            const std::vector<float> fa(ra->begin(), ra->end());
            const Distance dp = distance(*rb, fa, (*packed)->hparams().n_vocab);
            EXPECT_LE(dp.nrmse, match == kGoldenBound ? 3e-2 : 1e-5)
                << name << ": a batch against the file layout's";
            EXPECT_GE(dp.top1, match == kGoldenBound ? 0.8 : 1.0)
                << name << ": a batch against the file layout's";
        } else {
            EXPECT_TRUE(std::equal(ra->begin(), ra->end(), rb->begin(), rb->end()))
                << name << ": a batch differs from the file layout's";
        }
        // (the first positions of the longer batch are the golden sequence's)
        const std::vector<float> batch(rb->begin(),
                                       rb->begin() + (long)(c.tokens.size() * (size_t)(*packed)->hparams().n_vocab));
        std::vector<float> one;
        for (const int32_t t : c.tokens) {
            auto s = (*steps)->eval(std::span<const int32_t>(&t, 1), false);
            ASSERT_TRUE(s.ok());
            one.insert(one.end(), s->begin(), s->end());
        }
        const Distance d = distance(one, batch, (*packed)->hparams().n_vocab);
        if (match == kExact || exact_batches) {
            // (with the exact x16 GEMM every repacked weight's batch is its GEMV's bits)
            EXPECT_EQ(one, batch) << name << ": one token at a time differs from the batch";
        } else if (match == kRounding) {
            EXPECT_LE(d.nrmse, 1e-5) << name;
            EXPECT_EQ(d.top1, 1.0) << name;
        } else {
            EXPECT_LE(d.nrmse, 3e-2) << name;
            EXPECT_GE(d.top1, 0.8) << name;
        }
    }
    if (default_kernel_set() == "avx512" || default_kernel_set() == "amx") {
        EXPECT_GT(repacked_models, 0);
    }
}

// LoadOptions::repack_later (the server, to be healthy without waiting for the repack):
// the model serves in the file's layout first, a context made then keeps working after the
// switch, each step reads one layout whole, and the switch gives the eagerly repacked
// model's bits: one token at a time (the GEMV, where the layouts differ) before it as the
// file layout's, after it as the repacked weights'. finish_repack waits while pause() says
// so, and a model freed while it repacks in the background stops it.
TEST(Model, RepackLeftForLaterSwitchesToTheRepackedBits) {
    const Cases c = load_cases();
    if (c.cases.empty()) GTEST_SKIP() << "no golden cases at " << kGolden;
    const std::string path = (kGolden / "tiny-qwen2-q4_0.gguf").string();
    auto eager = Model::load(path);
    ASSERT_TRUE(eager.ok());
    if ((*eager)->repacked_bytes() == 0)
        GTEST_SKIP() << "nothing repacked (no SIMD GEMV in kernel set " << active_kernel_set() << ")";
    ::setenv("EDGELLM_REPACK", "0", 1);
    auto plain = Model::load(path);
    ::unsetenv("EDGELLM_REPACK");
    LoadOptions o;
    o.repack_later = true;
    auto later = Model::load(path, o);
    ASSERT_TRUE(plain.ok() && later.ok());
    EXPECT_TRUE((*later)->repack_pending());
    EXPECT_FALSE((*eager)->repack_pending());
    EXPECT_EQ((*later)->repacked_bytes(), 0u);
    EXPECT_NE((*later)->repack_note().find("left for after start-up"), std::string::npos)
        << (*later)->repack_note();

    ContextParams p;
    p.n_ctx = 64;
    p.n_threads = 2;
    auto one_at_a_time = [&](Context& ctx) {
        ctx.truncate(0, 0);
        std::vector<float> all;
        for (const int32_t t : c.tokens) {
            auto l = ctx.eval(std::span<const int32_t>(&t, 1), false);
            EXPECT_TRUE(l.ok());
            if (l.ok()) all.insert(all.end(), l->begin(), l->end());
        }
        return all;
    };
    auto cp = Context::create(**plain, p);
    auto ce = Context::create(**eager, p);
    auto cl = Context::create(**later, p);  // made before the switch, used after it too
    ASSERT_TRUE(cp.ok() && ce.ok() && cl.ok());
    const std::vector<float> file_bits = one_at_a_time(**cp);
    const std::vector<float> repacked_bits = one_at_a_time(**ce);
    ASSERT_NE(file_bits, repacked_bits) << "the layouts' GEMVs add alike: this test shows nothing";
    EXPECT_EQ(one_at_a_time(**cl), file_bits) << "before the repack: the file's layout";

    int asked = 0;
    const std::string note = (*later)->finish_repack([&] { return ++asked <= 3; });
    EXPECT_GT(asked, 3) << "pause() was not asked, or not until it let go";
    EXPECT_NE(note.find("after start-up"), std::string::npos) << note;
    EXPECT_FALSE((*later)->repack_pending());
    EXPECT_EQ((*later)->repacked_bytes(), (*eager)->repacked_bytes());
    EXPECT_EQ((*later)->finish_repack(), "") << "repacked twice";
    EXPECT_EQ(one_at_a_time(**cl), repacked_bits) << "after the repack: the repacked weights' bits";
    auto bill = Context::memory_bill(**later, p);
    ASSERT_TRUE(bill.ok());
    EXPECT_EQ(bill->weights_repacked, (*eager)->repacked_bytes());

    // Freed while the background thread waits for a pause that never ends: no hang, and
    // the model that was never switched still answers in the file's layout until then.
    {
        auto bg = Model::load(path, o);
        ASSERT_TRUE(bg.ok());
        auto cb = Context::create(**bg, p);
        ASSERT_TRUE(cb.ok());
        (*bg)->finish_in_background([](const std::string&) {}, [] { return true; });
        EXPECT_EQ(one_at_a_time(**cb), file_bits);
        EXPECT_TRUE((*bg)->repack_pending());
    }
}

TEST(Model, RefusesUnsupportedOrBrokenModels) {
    const fs::path dir = fs::temp_directory_path();
    const fs::path text = dir / "edgellm_not_a_model.gguf";
    std::ofstream(text) << "this is not a model\n";
    auto r = Model::load(text.string());
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().find("magic"), std::string::npos) << r.error();

    // A valid GGUF of an architecture we do not run, and one missing a tensor.
    GgufWriter w;
    w.set("general.architecture", gguf_value("mamba"));
    const fs::path mamba = dir / "edgellm_mamba.gguf";
    ASSERT_TRUE(w.write(mamba.string()).ok());
    r = Model::load(mamba.string());
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().find("not supported"), std::string::npos) << r.error();

    GgufWriter l;
    l.set("general.architecture", gguf_value("llama"));
    l.set("llama.embedding_length", gguf_value((uint32_t)64));
    l.set("llama.block_count", gguf_value((uint32_t)1));
    l.set("llama.feed_forward_length", gguf_value((uint32_t)128));
    l.set("llama.attention.head_count", gguf_value((uint32_t)2));
    std::vector<float> embd(64 * 10, 0.0f);
    l.add_tensor("token_embd.weight", TensorType::F32, {64, 10}, embd.data());
    const fs::path partial = dir / "edgellm_partial.gguf";
    ASSERT_TRUE(l.write(partial.string()).ok());
    r = Model::load(partial.string());
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().find("missing tensor \"output_norm.weight\""), std::string::npos)
        << r.error();

    // Wrong shape: a 1-D tensor where a matrix belongs.
    std::vector<float> norm(64, 1.0f);
    l.add_tensor("output_norm.weight", TensorType::F32, {64}, norm.data());
    l.add_tensor("blk.0.attn_norm.weight", TensorType::F32, {64}, norm.data());
    l.add_tensor("blk.0.attn_q.weight", TensorType::F32, {64}, norm.data());
    ASSERT_TRUE(l.write(partial.string()).ok());
    r = Model::load(partial.string());
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().find("blk.0.attn_q.weight\" has shape [64], expected [64, 64]"),
              std::string::npos)
        << r.error();
    fs::remove(text);
    fs::remove(mamba);
    fs::remove(partial);
}

// Every KV cache type (keys and values alike, and mixed) keeps the logits near the f16
// cache's; the further from f16, the larger the bound (a random-weight model's logits
// are flat, so even f32 moves its top-1 now and then; the real models' KL divergence per
// type is measured in tests/apps/test_kv_quality.cpp). Quantized keys and values are
// turned by the Hadamard matrix first (this model's heads are 64 wide).
TEST(Context, EveryKvCacheTypeStaysNearF16) {
    const Cases c = load_cases();
    if (c.cases.empty()) GTEST_SKIP() << "no golden cases at " << kGolden;
    auto model = Model::load((kGolden / "tiny-qwen2-q8_0.gguf").string());
    ASSERT_TRUE(model.ok()) << model.error();
    const int64_t n_vocab = (*model)->hparams().n_vocab;
    auto logits_with = [&](TensorType k, TensorType v) {
        ContextParams p;
        p.n_ctx = 64;
        p.n_batch = (int64_t)c.tokens.size();
        p.n_outputs = (int64_t)c.tokens.size();
        p.type_k = k;
        p.type_v = v;
        p.n_threads = 2;
        auto ctx = Context::create(**model, p);
        EXPECT_TRUE(ctx.ok()) << ctx.error();
        auto l = (*ctx)->eval(c.tokens, true);
        EXPECT_TRUE(l.ok());
        return std::vector<float>(l->begin(), l->end());
    };
    const auto base = logits_with(TensorType::F16, TensorType::F16);
    using T = TensorType;
    const std::vector<std::tuple<T, T, double>> cases = {
        {T::F32, T::F32, 3e-2},    {T::BF16, T::BF16, 3e-2},     {T::Q8_0, T::Q8_0, 3e-2},
        {T::Q5_1, T::Q5_1, 8e-2},  {T::Q5_0, T::Q5_0, 8e-2},     {T::IQ4_NL, T::IQ4_NL, 1.5e-1},
        {T::Q4_1, T::Q4_1, 1.5e-1}, {T::Q4_0, T::Q4_0, 1.5e-1},  {T::Q8_0, T::F16, 3e-2},
        {T::F16, T::Q4_0, 1.5e-1}};
    for (const auto& [k, v, bound] : cases) {
        const Distance d = distance(logits_with(k, v), base, n_vocab);
        std::printf("K %-6s V %-6s nrmse vs f16 %.2e top1 %.3f\n", tensor_type_name(k),
                    tensor_type_name(v), d.nrmse, d.top1);
        EXPECT_LE(d.nrmse, bound) << tensor_type_name(k) << "/" << tensor_type_name(v);
        EXPECT_GE(d.top1, 0.7) << tensor_type_name(k) << "/" << tensor_type_name(v);
    }
}

// The repack cache (model/repack_cache.h): written once, mapped by the next load with the
// same logits; a damaged, truncated or foreign file is reported and repacked over, never
// trusted; a directory that cannot hold it leaves the model as it would be without one.
TEST(Model, RepackCacheSurvivesARestartAndRefusesDamage) {
    const fs::path model = kGolden / "tiny-qwen2-q4_k_m.gguf";
    if (!fs::exists(model)) GTEST_SKIP() << "no model at " << model;
    const fs::path dir = fs::temp_directory_path() / ("edgellm-repack-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    LoadOptions o;
    o.repack_cache_dir = dir.string();
    const std::vector<int32_t> tokens = {1, 17, 301, 42, 5, 99, 7, 260, 3, 11};
    auto logits = [&](const Model& m) {
        ContextParams p;
        p.n_ctx = 32;
        p.n_threads = 2;
        auto ctx = Context::create(m, p);
        EXPECT_TRUE(ctx.ok());
        std::vector<float> all;
        for (const int32_t t : tokens) {  // one token at a time: the repacked GEMV
            auto l = (*ctx)->eval(std::span<const int32_t>(&t, 1), false);
            EXPECT_TRUE(l.ok());
            all.insert(all.end(), l->begin(), l->end());
        }
        return all;
    };
    auto first = Model::load(model.string(), o);
    ASSERT_TRUE(first.ok()) << first.error();
    if ((*first)->repacked_bytes() == 0)
        GTEST_SKIP() << "nothing repacked (no SIMD GEMV in kernel set " << active_kernel_set() << ")";
    EXPECT_NE((*first)->repack_note().find("no repack cache yet"), std::string::npos)
        << (*first)->repack_note();
    EXPECT_EQ((*first)->repack_cache(), Model::RepackCache::Absent);
    const std::vector<float> want = logits(**first);
    const std::string saved = (*first)->save_repack_cache();
    EXPECT_NE(saved.find("kept in"), std::string::npos) << saved;
    EXPECT_EQ((*first)->save_repack_cache(), "") << "written twice";
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path());
    ASSERT_EQ(files.size(), 1u) << "one file, no temporary left";
    const fs::path file = files[0];

    auto expect_mapped = [&](const char* when) {
        auto m = Model::load(model.string(), o);
        ASSERT_TRUE(m.ok());
        EXPECT_NE((*m)->repack_note().find("mapped from"), std::string::npos)
            << when << ": " << (*m)->repack_note();
        EXPECT_EQ((*m)->repack_cache(), Model::RepackCache::Mapped) << when;
        (*m)->warm_up();
        EXPECT_EQ(logits(**m), want) << when;
    };
    expect_mapped("second start");

    // A killed writer's temporary file: removed by the next write once old, a live
    // writer's (young) kept.
    {
        const fs::path stale = file.string() + ".tmp.dead01", young = file.string() + ".tmp.live01";
        std::ofstream(stale) << "half a cache";
        std::ofstream(young) << "being written";
        fs::last_write_time(stale, fs::file_time_type::clock::now() - std::chrono::hours(2));
        fs::remove(file);
        auto m = Model::load(model.string(), o);
        ASSERT_TRUE(m.ok());
        EXPECT_NE((*m)->save_repack_cache().find("kept in"), std::string::npos);
        EXPECT_FALSE(fs::exists(stale)) << "a stale temporary file stayed";
        EXPECT_TRUE(fs::exists(young)) << "another writer's file was removed";
        fs::remove(young);
    }

    // Damage, each reported by load, repacked in memory (the same logits) and written again.
    auto damage = [&](const char* what, const std::function<void()>& harm, const char* reason) {
        harm();
        auto m = Model::load(model.string(), o);
        ASSERT_TRUE(m.ok()) << what;
        EXPECT_NE((*m)->repack_note().find(reason), std::string::npos)
            << what << ": " << (*m)->repack_note();
        EXPECT_EQ((*m)->repack_cache(), Model::RepackCache::Refused) << what;
        EXPECT_EQ(logits(**m), want) << what;
        const std::string note = (*m)->save_repack_cache();
        EXPECT_NE(note.find("kept in"), std::string::npos) << what << ": " << note;
        expect_mapped(what);
    };
    auto poke = [&](std::streamoff at) {
        std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
        f.seekg(at);
        const char c = (char)(f.get() ^ 0x5a);
        f.seekp(at);
        f.put(c);
    };
    damage("a truncated file", [&] { fs::resize_file(file, fs::file_size(file) - 4096); },
           "truncated");
    damage("a byte of the data", [&] { poke(4096); }, "damaged data");
    damage("a byte of the matrices' list", [&] { poke(100); }, "damaged header");
    damage("another file under its name", [&] { std::ofstream(file, std::ios::binary) << "GGUF not a cache"; },
           "not a repack cache file");
    damage("a cache of another format", [&] {
        std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(8);  // the format version, after the magic
        const uint32_t v = 999;
        f.write((const char*)&v, sizeof v);
    }, "another edgellm");

    // Another model copied over the first's path: the file is refused and replaced, one
    // file per path.
    {
        const fs::path copy = dir / "model.gguf";
        fs::copy_file(model, copy);
        auto a = Model::load(copy.string(), o);
        ASSERT_TRUE(a.ok());
        EXPECT_NE((*a)->save_repack_cache().find("kept in"), std::string::npos);
        fs::copy_file(kGolden / "tiny-qwen2-q4_0.gguf", copy, fs::copy_options::overwrite_existing);
        auto b = Model::load(copy.string(), o);
        ASSERT_TRUE(b.ok());
        EXPECT_NE((*b)->repack_note().find("another model file"), std::string::npos)
            << (*b)->repack_note();
        EXPECT_NE((*b)->save_repack_cache().find("kept in"), std::string::npos);
        int x16 = 0;
        for (const auto& e : fs::directory_iterator(dir)) x16 += e.path().extension() == ".x16";
        EXPECT_EQ(x16, 2) << "the golden path's and the copy's";
    }

    // Too small to be worth a file: no note, nothing written.
    fs::remove_all(dir);
    LoadOptions big = o;
    big.repack_cache_min_bytes = (size_t)1 << 40;
    auto small = Model::load(model.string(), big);
    ASSERT_TRUE(small.ok());
    EXPECT_EQ((*small)->repack_note(), "");
    EXPECT_EQ((*small)->repack_cache(), Model::RepackCache::None);
    EXPECT_EQ((*small)->save_repack_cache(), "");
    EXPECT_FALSE(fs::exists(dir));

    // A directory that cannot be made (a file stands in its place): the reason, no file,
    // and the model as it is without a cache.
    { std::ofstream(dir) << "in the way"; }
    LoadOptions blocked = o;
    blocked.repack_cache_dir = (dir / "sub").string();
    auto m = Model::load(model.string(), blocked);
    ASSERT_TRUE(m.ok());
    const std::string note = (*m)->save_repack_cache();
    EXPECT_NE(note.find("cannot keep the repacked weights"), std::string::npos) << note;
    EXPECT_EQ(logits(**m), want);
    fs::remove(dir);

    // A model freed while its file is written in the background stops the writer and
    // leaves no temporary file behind.
    {
        auto bg = Model::load(model.string(), o);
        ASSERT_TRUE(bg.ok());
        (*bg)->finish_in_background([](const std::string&) {});
    }
    if (fs::exists(dir)) {
        for (const auto& e : fs::directory_iterator(dir))
            EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
    }
    fs::remove_all(dir);
}
