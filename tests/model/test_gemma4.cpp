// Gemma 4 on the tiny synthetic model (tiny-gemma4: layers 2, 5 and 8 global, the others
// sliding over 8 positions; layers 6-8 without K/V of their own): what its golden logits
// (test_family_golden) do not show by themselves. A shared layer attends over exactly its
// source layer's keys and values and keeps no cache; the per-layer token table is read in
// place from the file's mapping, the rows of the tokens seen only; a ring cache crosses the
// window as the whole-context one does; every kernel set agrees; an image, audio or
// mixture-of-experts file is refused by name.
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "edgellm/kernels.h"
#include "edgellm/model.h"
#include "edgellm/synth.h"
#include "compute/ops.h"
#include "kernels/kernels.h"
#include "model/model_impl.h"
#include "synth_file.h"
#include "test_paths.h"

using namespace edgellm;
namespace fs = std::filesystem;

namespace {

fs::path tiny(const test::TempDir& dir, FileType type = FileType::F32) {
    return test::synth_file(dir, "tiny-gemma4", type);
}

using test::nrmse;
using test::some_tokens;

// The traced rows of one step, by name and layer.
using Traces = std::map<std::pair<std::string, int>, std::vector<float>>;

// softmax(q . k_j) v_j over the positions j the last token sees (scale 1, as Gemma 4), for
// query head h of the last row, with the keys and values of a layer as traced:
// [rows][n_head_kv * head].
std::vector<float> attend(const std::vector<float>& q, const std::vector<float>& k,
                          const std::vector<float>& v, int64_t rows, int64_t n_head,
                          int64_t n_head_kv, int64_t head, int64_t window, int64_t h) {
    const int64_t t = rows - 1, kvh = h / (n_head / n_head_kv), nq = n_head * head, nkv = n_head_kv * head;
    std::vector<double> s;
    double mx = -1e300;
    const int64_t first = window > 0 ? std::max<int64_t>(0, t - window + 1) : 0;
    for (int64_t j = first; j <= t; ++j) {
        double d = 0;
        for (int64_t i = 0; i < head; ++i) d += (double)q[t * nq + h * head + i] * k[j * nkv + kvh * head + i];
        s.push_back(d);
        mx = std::max(mx, d);
    }
    double sum = 0;
    for (double& x : s) sum += (x = std::exp(x - mx));
    std::vector<float> out((size_t)head, 0.0f);
    for (int64_t j = first; j <= t; ++j)
        for (int64_t i = 0; i < head; ++i)
            out[(size_t)i] += (float)(s[(size_t)(j - first)] / sum * v[j * nkv + kvh * head + i]);
    return out;
}

}  // namespace

// Layers 6 and 7 (sliding) attend over layer 4's keys and values, layer 8 (global) over
// layer 5's: llama.cpp's choice (the last layer with a cache, or the one before it), not
// any other layer of their kind. They keep no cache of their own: a position takes the
// bytes of six layers, at each layer's own width.
TEST(Gemma4, SharedLayersReadTheirSourceLayersCacheAndKeepNone) {
    test::TempDir dir("edgellm-gemma4");
    auto m = Model::load(tiny(dir).string());
    ASSERT_TRUE(m.ok()) << m.error();
    const HParams& h = (*m)->hparams();
    ASSERT_EQ(h.n_layer, 9);
    EXPECT_EQ(h.kv_layer(6), 4);
    EXPECT_EQ(h.kv_layer(7), 4);
    EXPECT_EQ(h.kv_layer(8), 5);
    EXPECT_FALSE(h.has_kv(6));
    EXPECT_NE(h.head_dim_at(4), h.head_dim_at(5)) << "the shape should give both kinds their own heads";

    ContextParams p;
    p.n_ctx = 64;
    p.n_batch = p.n_outputs = 20;  // more than the window of 8
    p.n_threads = 2;
    p.type_k = p.type_v = TensorType::F32;  // (the cache holds what was traced)
    p.swa_full = true;                      // (no rings: a position takes a row of each layer)
    auto c = Context::create(**m, p);
    ASSERT_TRUE(c.ok()) << c.error();
    Traces tr;
    (*c)->set_trace([&](const char* name, int layer, const float* d, int64_t n, int64_t w) {
        tr[{name, layer}] = std::vector<float>(d, d + n * w);
    });
    const std::vector<int32_t> tokens = some_tokens(20);
    ASSERT_TRUE((*c)->eval(tokens, true).ok());
    (*c)->set_trace(nullptr);
    for (auto [shared, source, other] : {std::tuple{6, 4, 3}, std::tuple{7, 4, 1}, std::tuple{8, 5, 2}}) {
        SCOPED_TRACE("layer " + std::to_string(shared));
        EXPECT_EQ(tr.count({"k", shared}), 0u) << "a shared layer computed keys";
        const std::vector<float>& q = tr.at({"q", shared});
        const std::vector<float>& got = tr.at({"attn_out", shared});
        const int64_t head = h.head_dim_at(shared), n_kv = h.n_head_kv_at(shared);
        const int64_t window = h.is_swa(shared) ? h.n_swa : 0;
        double err_source = 0, err_other = 0;
        for (int64_t hh = 0; hh < h.n_head; ++hh) {
            const auto mine = std::span<const float>(got).subspan((size_t)(19 * h.n_head * head + hh * head), (size_t)head);
            const auto want = attend(q, tr.at({"k", source}), tr.at({"v", source}), 20, h.n_head, n_kv, head, window, hh);
            const auto wrong = attend(q, tr.at({"k", other}), tr.at({"v", other}), 20, h.n_head, n_kv, head, window, hh);
            err_source = std::max(err_source, nrmse(mine, want));
            err_other = std::max(err_other, nrmse(mine, wrong));
        }
        EXPECT_LT(err_source, 1e-4) << "not layer " << source << "'s cache";
        EXPECT_GT(err_other, 1e-2) << "layer " << other << "'s cache gives the same";
    }

    // Six layers' rows per position, each layer as wide as its heads.
    size_t row = 0;
    for (int64_t il = 0; il < 6; ++il) row += 2 * row_size(TensorType::F32, h.n_embd_kv_at(il));
    const size_t with20 = (*c)->snapshot().size();
    const int32_t one = 5;
    ASSERT_TRUE((*c)->eval(std::span<const int32_t>(&one, 1), false).ok());
    EXPECT_EQ((*c)->snapshot().size() - with20, row);
    auto bill = Context::memory_bill(**m, p);
    ASSERT_TRUE(bill.ok());
    EXPECT_EQ(bill->kv_layers, 6);
    EXPECT_EQ(bill->kv_cache, row * 64);
}

// The mapping in /proc/self/smaps that holds p: its flags and the kB of it locked ("" and
// -1: none found).
struct Vma {
    std::string flags;
    long locked_kb = -1;
};
Vma vma_of(const void* p) {
    std::ifstream in("/proc/self/smaps");
    std::string line;
    bool in_it = false;
    Vma v;
    while (std::getline(in, line)) {
        unsigned long lo, hi;
        if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find(' ')) {
            if (in_it) break;
            in_it = (uintptr_t)p >= lo && (uintptr_t)p < hi;
            continue;
        }
        if (!in_it) continue;
        if (line.rfind("Locked:", 0) == 0) v.locked_kb = std::atol(line.c_str() + 7);
        if (line.rfind("VmFlags:", 0) == 0) v.flags = line.substr(8);
    }
    return v;
}

// The table of per-layer token embeddings stays the file's: not copied nor repacked (its
// data is in the mapping, where the file has it) while the other matrices are, billed
// apart, its pages advised as read at random (a token's row faults in its own pages, not
// the kernel's read-around of up to a readahead window each way), never locked with the
// weights; a step reads its tokens' rows from there.
TEST(Gemma4, PerLayerTableIsReadInPlaceRowByRow) {
    test::TempDir dir("edgellm-gemma4");
    const std::string path = tiny(dir, FileType::Q8_0).string();
    // (under each kernel set: one without Q8_0's x16 kernels, AVX2's, repacks nothing)
    for (const std::string& set : available_kernel_sets()) {
        ASSERT_TRUE(select_kernel_set(set));
        auto m = Model::load(path);
        ASSERT_TRUE(m.ok()) << m.error();
        const GgufTensorInfo* t = (*m)->file().tensor("per_layer_token_embd.weight");
        ASSERT_NE(t, nullptr);
        const TensorView& table = (*m)->impl().pl_tok_embd;
        EXPECT_EQ(table.data, t->data) << set << ": the table was copied";
        EXPECT_FALSE(table.x16) << set << ": the table was repacked";
        const TypeKernels& k = type_kernels(TensorType::Q8_0);
        const bool x16 = k.gemv_x16 && std::string(k.gemv_x16_isa) != "ref";
        EXPECT_EQ((*m)->repacked_bytes() > 0, x16) << set << " (the other matrices are where it has x16)";
    }
    ASSERT_TRUE(select_kernel_set(default_kernel_set()));
    auto m = Model::load(path);
    ASSERT_TRUE(m.ok()) << m.error();
    const Model& model = **m;
    const GgufTensorInfo* t = model.file().tensor("per_layer_token_embd.weight");
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(model.lazy_bytes(), t->n_bytes);
    ContextParams p;
    p.n_ctx = 64;
    p.n_threads = 2;
    auto bill = Context::memory_bill(model, p);
    ASSERT_TRUE(bill.ok());
    EXPECT_EQ(bill->weights_lazy, t->n_bytes);
    EXPECT_EQ(bill->weights + bill->weights_lazy, model.weight_bytes());

    auto c = Context::create(model, p);
    ASSERT_TRUE(c.ok());
    const std::vector<int32_t> tokens = {1500, 2500};
    ASSERT_TRUE((*c)->eval(tokens, false).ok());
    if (test::emulation_slowdown() > 1)
        GTEST_SKIP() << "under an emulator (qemu user mode): madvise and mlock do not reach "
                        "the kernel, so the mapping's advice and locks are not checked";

    // (the advice splits the table's pages off into a mapping of their own)
    const char* mid = (const char*)t->data + t->n_bytes / 2;
    const Vma v = vma_of(mid);
    ASSERT_FALSE(v.flags.empty()) << "no /proc/self/smaps entry for the table";
    EXPECT_NE(v.flags.find(" rr"), std::string::npos) << "not advised random:" << v.flags;

    auto locked = model.lock_memory();
    if (!locked.ok()) GTEST_SKIP() << "cannot lock the weights here: " << locked.error();
    const GgufTensorInfo* other = model.file().tensor("blk.0.attn_norm.weight");  // (not repacked)
    EXPECT_GT(vma_of(other->data).locked_kb, 0) << "the weights were not locked";
    // (but for the pages it shares with the tensors beside it)
    const long page_kb = sysconf(_SC_PAGESIZE) / 1024;
    EXPECT_LE(vma_of(mid).locked_kb, 2 * page_kb) << "the table was locked";
}

// A ring of window + batch cells per sliding layer gives the whole-context cache's logits
// (--swa-full) past the window, token by token; a batch gives the same.
TEST(Gemma4, RingCacheCrossesTheWindowAsTheWholeContext) {
    test::TempDir dir("edgellm-gemma4");
    auto m = Model::load(tiny(dir).string());
    ASSERT_TRUE(m.ok()) << m.error();
    const std::vector<int32_t> tokens = some_tokens(30);
    std::vector<float> logits[3];
    for (int mode = 0; mode < 3; ++mode) {
        ContextParams p;
        p.n_ctx = 64;
        p.n_batch = mode == 2 ? 30 : 4;  // ring of 12 cells (8 + 4) in mode 0
        p.n_outputs = 30;
        p.n_threads = 2;
        p.swa_full = mode == 1;
        auto bill = Context::memory_bill(**m, p);
        ASSERT_TRUE(bill.ok());
        EXPECT_EQ(bill->kv_ring_layers, mode == 1 ? 0 : 4);  // sliding layers 0, 1, 3, 4
        auto c = Context::create(**m, p);
        ASSERT_TRUE(c.ok());
        if (mode == 2) {
            auto l = (*c)->eval(tokens, true);
            ASSERT_TRUE(l.ok()) << l.error();
            logits[mode].assign(l->begin(), l->end());
            continue;
        }
        for (int32_t t : tokens) {
            auto l = (*c)->eval(std::span<const int32_t>(&t, 1), false);
            ASSERT_TRUE(l.ok()) << l.error();
            logits[mode].insert(logits[mode].end(), l->begin(), l->end());
        }
    }
    // (the ring's cells hold the positions in another order: the sums' rounding differs)
    EXPECT_LT(nrmse(logits[0], logits[1]), 1e-3) << "ring against whole context";
    EXPECT_LT(nrmse(logits[0], logits[2]), 1e-3) << "token by token against one batch";
}

// Layer il's keys (or values) in a snapshot of an f32 cache without rings: the layers with a
// cache follow the header in order, each its keys then its values, as wide as its heads
// (head after head, each head's positions in order).
std::vector<float> cached(const std::vector<uint8_t>& blob, const HParams& h, int64_t n_used,
                          int64_t il, bool keys) {
    auto bytes = [&](int64_t l) { return 2 * sizeof(float) * (size_t)(h.n_embd_kv_at(l) * n_used); };
    size_t at = blob.size();
    for (int64_t l = 0; l < h.n_layer - h.n_kv_shared; ++l) at -= bytes(l);
    for (int64_t l = 0; l < il; ++l) at += bytes(l);
    if (!keys) at += bytes(il) / 2;
    std::vector<float> out((size_t)(h.n_embd_kv_at(il) * n_used));
    std::memcpy(out.data(), blob.data() + at, out.size() * sizeof(float));
    return out;
}

// A context shift turns each layer's kept keys back by the positions dropped with that
// layer's rotation: a sliding layer's 32 dimensions at base 1e4, a global layer's 64 at 1e6
// with its frequency factors (three quarters of them standing still).
TEST(Gemma4, ShiftTurnsEachLayersKeysWithItsOwnRotation) {
    test::TempDir dir("edgellm-gemma4");
    auto m = Model::load(tiny(dir).string());
    ASSERT_TRUE(m.ok()) << m.error();
    const HParams& h = (*m)->hparams();
    ContextParams p;
    p.n_ctx = 64;
    p.n_threads = 2;
    p.type_k = p.type_v = TensorType::F32;
    p.swa_full = true;
    auto c = Context::create(**m, p);
    ASSERT_TRUE(c.ok());
    ASSERT_TRUE((*c)->eval(some_tokens(40), false).ok());
    const std::vector<uint8_t> before = (*c)->snapshot();
    ASSERT_EQ((*c)->shift(5, 12), 12);
    const std::vector<uint8_t> after = (*c)->snapshot();
    const GgufTensorInfo* factors = (*m)->file().tensor("rope_freqs.weight");
    ASSERT_TRUE(factors && factors->type == TensorType::F32);
    for (int64_t il : {1, 2}) {
        SCOPED_TRACE("layer " + std::to_string(il));
        const int64_t head = h.head_dim_at(il), n_kv = h.n_head_kv_at(il);
        RopeParams rp;
        rp.n_rot = (int)h.n_rot_at(il);
        rp.neox = true;
        rp.freq_base = h.is_swa(il) ? 1e4f : 1e6f;
        rp.freq_factors = h.is_swa(il) ? nullptr : (const float*)factors->data;
        const std::vector<float> k0 = cached(before, h, 40, il, true), k1 = cached(after, h, 28, il, true);
        const std::vector<float> v0 = cached(before, h, 40, il, false), v1 = cached(after, h, 28, il, false);
        double worst = 0;
        for (int64_t hh = 0; hh < n_kv; ++hh)
            for (int64_t pos = 17; pos < 40; ++pos) {
                std::vector<float> want(k0.begin() + (hh * 40 + pos) * head, k0.begin() + (hh * 40 + pos + 1) * head);
                rope(want.data(), -12, rp);
                const auto got = std::span<const float>(k1).subspan((size_t)((hh * 28 + pos - 12) * head), (size_t)head);
                worst = std::max(worst, nrmse(got, want));
                EXPECT_EQ(std::memcmp(&v1[(size_t)((hh * 28 + pos - 12) * head)], &v0[(size_t)((hh * 40 + pos) * head)],
                                      (size_t)head * sizeof(float)), 0) << "values moved wrongly";
            }
        EXPECT_LT(worst, 1e-5);
    }
}

// Every kernel set this machine has gives the reference kernels' logits (quantized weights,
// a quantized cache with its Hadamard turns on the global layers' heads of 64).
TEST(Gemma4, EveryKernelSetAgrees) {
    test::TempDir dir("edgellm-gemma4");
    const fs::path f = tiny(dir, FileType::Q4_K_M);
    const std::vector<int32_t> tokens = some_tokens(24);
    std::vector<float> want;
    for (const std::string& set : available_kernel_sets()) {
        SCOPED_TRACE(set);
        ASSERT_TRUE(select_kernel_set(set));
        auto m = Model::load(f.string());
        ASSERT_TRUE(m.ok()) << m.error();
        ContextParams p;
        p.n_ctx = 64;
        p.n_batch = p.n_outputs = 24;
        p.n_threads = 2;
        p.type_k = p.type_v = TensorType::Q8_0;
        auto c = Context::create(**m, p);
        ASSERT_TRUE(c.ok()) << c.error();
        auto l = (*c)->eval(tokens, true);
        ASSERT_TRUE(l.ok()) << l.error();
        std::vector<float> got(l->begin(), l->end());
        for (float x : got) ASSERT_TRUE(std::isfinite(x));
        if (want.empty())
            want = got;  // "ref" comes first
        else
            EXPECT_LT(nrmse(got, want), 3e-2);
    }
    select_kernel_set(default_kernel_set());
}

// Tensors of the models edgellm does not run are named in the refusal: an image or audio
// encoder (a multimodal GGUF), a mixture of experts (26B-A4B); and shared layers that would
// read a layer of the other kind (llama.cpp's choice assumes the last layer with a cache is
// global and the one before it sliding; it aborts otherwise).
TEST(Gemma4, EncodersAndExpertsAreRefusedByName) {
    test::TempDir dir("edgellm-gemma4");
    auto src = GgufFile::open(tiny(dir).string());
    ASSERT_TRUE(src.ok());
    const GgufTensorInfo* norm = (*src)->tensor("blk.0.attn_norm.weight");
    struct Case {
        const char* tensor;  // an extra tensor (null: none)
        const char* key;     // a key set to value (null: none)
        uint32_t value;
        const char* says;
    };
    for (const Case& k : {Case{"v.blk.0.attn_q.weight", nullptr, 0, "image encoder"},
                          Case{"a.blk.0.attn_q.weight", nullptr, 0, "audio encoder"},
                          Case{"mm.input_projection.weight", nullptr, 0, "multimodal projector"},
                          Case{"blk.0.ffn_gate_exps.weight", nullptr, 0, "mixture-of-experts"},
                          Case{"blk.0.ffn_gate_inp.weight", nullptr, 0, "mixture-of-experts"},
                          Case{nullptr, "gemma4.expert_count", 128, "mixture of experts"},
                          // layers 5-8 shared: 5 would read 4, a sliding layer
                          Case{nullptr, "gemma4.attention.shared_kv_layers", 4, "of the other kind"}}) {
        const fs::path f = dir.path / "refused.gguf";
        test::write_variant(f, **src, k.key, gguf_value(k.value), k.tensor, norm);
        auto m = Model::load(f.string());
        ASSERT_FALSE(m.ok()) << (k.tensor ? k.tensor : k.key);
        EXPECT_NE(m.error().find(k.tensor ? k.tensor : k.key), std::string::npos) << m.error();
        EXPECT_NE(m.error().find(k.says), std::string::npos) << m.error();
    }
}
