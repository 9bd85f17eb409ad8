// Model tooling: the quantization plan against llama.cpp's own files, quantize round trips
// against the golden logits, and synthetic models' shapes and sizes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <fstream>

#include "edgellm/arch.h"
#include "edgellm/model.h"
#include "edgellm/quantize.h"
#include "edgellm/synth.h"
#include "kernels/kernels.h"
#include "model/kv_cache.h"
#include "edgellm/session.h"
#include "edgellm/tokenizer.h"
#include "test_paths.h"

using namespace edgellm;
namespace fs = std::filesystem;

namespace {

const fs::path kGolden = test::golden_dir();

std::vector<float> logits_of(const fs::path& model, const std::vector<int32_t>& tokens) {
    auto m = Model::load(model.string());
    EXPECT_TRUE(m.ok()) << m.error();
    if (!m.ok()) return {};
    ContextParams p;
    p.n_ctx = 64;
    p.n_batch = (int64_t)tokens.size();
    p.n_outputs = (int64_t)tokens.size();
    p.n_threads = 2;
    auto c = Context::create(**m, p);
    auto l = (*c)->eval(tokens, true);
    EXPECT_TRUE(l.ok());
    return std::vector<float>(l->begin(), l->end());
}

double nrmse(const std::vector<float>& a, const std::vector<float>& b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        num += (double)(a[i] - b[i]) * (a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return std::sqrt(num / den);
}

const std::vector<int32_t> kTokens = {1936, 2094, 3090, 3890, 142,  590,  3368, 3882,
                                      1020, 1276, 3556, 1732, 1118, 3387, 1051, 1674,
                                      2635, 2249, 350,  112,  3542, 3084};

}  // namespace

// For every quantized golden file llama.cpp wrote from the f32 model, our plan for the same
// file type gives every tensor the type llama.cpp gave it.
TEST(QuantizePlan, MatchesLlamaCppFiles) {
    int files = 0;
    for (const char* arch : {"qwen2", "llama"}) {
        const fs::path src = kGolden / (std::string("tiny-") + arch + "-f32.gguf");
        if (!fs::exists(src)) GTEST_SKIP() << "no golden models at " << kGolden;
        auto f32 = GgufFile::open(src.string());
        ASSERT_TRUE(f32.ok());
        for (const auto& e : fs::directory_iterator(kGolden)) {
            const std::string name = e.path().filename().string();
            if (name.rfind(std::string("tiny-") + arch + "-", 0) != 0 ||
                e.path().extension() != ".gguf")
                continue;
            auto q = GgufFile::open(e.path().string());
            ASSERT_TRUE(q.ok());
            const auto ft_id = (*q)->get_int("general.file_type");
            ASSERT_TRUE(ft_id.has_value()) << name;
            std::optional<FileType> ft;
            for (FileType t : all_file_types())
                if ((int64_t)t == *ft_id) ft = t;
            ASSERT_TRUE(ft.has_value()) << name << " file type " << *ft_id;
            QuantizeOptions o;
            o.ftype = *ft;
            const auto plan = plan_tensor_types(tensor_specs(**f32), 4, o);
            ASSERT_EQ(plan.size(), (*q)->tensors().size());
            for (size_t i = 0; i < plan.size(); ++i) {
                const GgufTensorInfo* want = (*q)->tensor((*f32)->tensors()[i].name);
                ASSERT_NE(want, nullptr);
                EXPECT_EQ(tensor_type_name(plan[i]), std::string(tensor_type_name(want->type)))
                    << name << ": " << want->name;
            }
            ++files;
        }
    }
    EXPECT_GE(files, 15);
}

namespace {

// Our Q4_K_M plan for a synth shape's f32 file: each tensor's type by name (empty when the
// file could not be made).
std::map<std::string, std::string> q4_k_m_plan(const char* shape, const char* arch, int64_t n_gqa) {
    SynthOptions so;
    so.shape = shape;
    so.type = FileType::F32;
    test::TempDir tmp;
    const std::string path = (tmp.path / "model.gguf").string();
    std::map<std::string, std::string> type;
    if (!synth_model(path, so).ok()) return type;
    auto f = GgufFile::open(path);
    if (!f.ok()) return type;
    QuantizeOptions o;
    o.ftype = FileType::Q4_K_M;
    o.arch = arch;
    const auto specs = tensor_specs(**f);
    const auto plan = plan_tensor_types(specs, n_gqa, o);
    for (size_t i = 0; i < specs.size(); ++i) type[specs[i].name] = tensor_type_name(plan[i]);
    return type;
}

}  // namespace

// Phi-3's fused q/k/v matrix takes llama.cpp's rules for attn_v (its quantizer counts them
// as attn_v-like: more bits in the first and last eighth and every third layer between) —
// the plan its table role gives; llama-quantize's Q4_K_M of the tiny Phi-3 has these types
// (and the same bytes, checked by hand with scripts/reference.sh's llama-quantize).
TEST(Quantize, FusedQkvTakesTheValueMatrixRules) {
    auto type = q4_k_m_plan("tiny-longrope", "phi3", 4);
    EXPECT_EQ(type["blk.0.attn_qkv.weight"], "q4_K");
    EXPECT_EQ(type["blk.2.attn_qkv.weight"], "q6_K");
    EXPECT_EQ(type["blk.0.ffn_up.weight"], "q4_K");  // gate and up fused: a plain matrix
    EXPECT_EQ(type["rope_factors_long.weight"], "f32");
    EXPECT_EQ(type["token_embd.weight"], "q6_K");  // tied: the output's bits
}

// Gemma 4's tensors take llama.cpp's rules: the per-layer token table is a token embedding
// (tied: the output's bits, Q8_0 when its row is no multiple of 256), the embedding's
// projection is never quantized, the per-layer gate and projection are plain matrices (a
// 32-wide row: Q4_K's fallback). llama-quantize's Q4_K_M of tiny-gemma4 (F32) has these
// types, and ours every tensor's type in Q4_K_M, Q8_0, Q2_K, Q3_K_M and Q5_K_M (checked by
// hand with scripts/reference.sh's llama-quantize).
TEST(Quantize, Gemma4TakesLlamaQuantizesTypes) {
    auto type = q4_k_m_plan("tiny-gemma4", "gemma4", 2);
    EXPECT_EQ(type["per_layer_token_embd.weight"], "q8_0");
    EXPECT_EQ(type["token_embd.weight"], "q6_K");
    EXPECT_EQ(type["per_layer_model_proj.weight"], "f32");
    EXPECT_EQ(type["blk.0.inp_gate.weight"], "q4_K");
    EXPECT_EQ(type["blk.0.proj.weight"], "q5_0");
    EXPECT_EQ(type["blk.0.attn_v.weight"], "q4_K");
    EXPECT_EQ(type["blk.0.ffn_down.weight"], "q6_K");
    EXPECT_EQ(type["blk.1.ffn_down.weight"], "q4_K");
    EXPECT_EQ(type["blk.7.ffn_down.weight"], "q6_K");
    EXPECT_EQ(type["blk.7.layer_output_scale.weight"], "f32");
}

// The published sizes: Qwen2.5-0.5B Q4_K_M 373.7 MiB, 1.5B 934.7 MiB
// (../shared/reference/peers.md).
TEST(Synth, QwenShapesHaveThePublishedSizes) {
    SynthOptions o;
    o.arch = "qwen2";
    o.type = FileType::Q4_K_M;
    o.shape = "qwen2.5-0.5b";
    auto s05 = synth_size(o);
    ASSERT_TRUE(s05.ok()) << s05.error();
    EXPECT_NEAR((double)s05->bytes / (1 << 20), 373.7, 1.5);
    EXPECT_NEAR((double)s05->n_params / 1e9, 0.494, 0.01);
    o.shape = "qwen2.5-1.5b";
    auto s15 = synth_size(o);
    ASSERT_TRUE(s15.ok());
    EXPECT_NEAR((double)s15->bytes / (1 << 20), 934.7, 3.0);
    o.shape = "no-such-shape";
    EXPECT_FALSE(synth_size(o).ok());
}

// Every family of the table has a real model's shape to synthesize (benchmarks without
// the weights), which synth lays out (its size, without writing gigabytes).
TEST(Synth, EveryFamilyHasARealShape) {
    for (const ArchInfo* a : architectures()) {
        const ModelShape* real = nullptr;
        for (const ModelShape& s : model_shapes())
            if (a->name == std::string(s.arch) && std::string(s.name).find("tiny") == std::string::npos)
                real = &s;
        ASSERT_NE(real, nullptr) << a->name << " has no shape of a real model";
        SynthOptions o;
        o.shape = real->name;
        o.type = FileType::Q4_K_M;
        auto size = synth_size(o);
        ASSERT_TRUE(size.ok()) << a->name << ": " << size.error();
        EXPECT_GT(size->n_params, 100'000'000) << real->name;
    }
}

TEST(Synth, TinyModelLoadsRunsAndIsReproducible) {
    const fs::path a = fs::temp_directory_path() / "edgellm_synth_a.gguf";
    const fs::path b = fs::temp_directory_path() / "edgellm_synth_b.gguf";
    SynthOptions o;
    o.arch = "llama";
    o.shape = "tiny";
    o.type = FileType::Q4_K_M;
    o.seed = 7;
    ASSERT_TRUE(synth_model(a.string(), o).ok());
    o.n_threads = 1;
    ASSERT_TRUE(synth_model(b.string(), o).ok());
    std::ifstream fa(a, std::ios::binary), fb(b, std::ios::binary);
    const std::string ba((std::istreambuf_iterator<char>(fa)), {}),
        bb((std::istreambuf_iterator<char>(fb)), {});
    EXPECT_EQ(ba, bb) << "same seed, different bytes";
    auto m = Model::load(a.string());
    ASSERT_TRUE(m.ok()) << m.error();
    EXPECT_EQ((*m)->hparams().arch, "llama");
    EXPECT_EQ((*m)->hparams().n_vocab, 4096);
    EXPECT_EQ((*m)->hparams().n_layer, 4);
    EXPECT_EQ((*m)->main_weight_type(), "q4_K");
    const auto l = logits_of(a, {1, 2, 3, 4});
    ASSERT_EQ(l.size(), 4u * 4096);
    for (float x : l) ASSERT_TRUE(std::isfinite(x));
    fs::remove(a);
    fs::remove(b);
}

// The newer families, synthetic: Qwen3 (q/k norms, no biases) and Gemma 3 (q/k norms,
// post-norms, GELU, scaled embeddings, sliding windows of 8 positions in the tiny shape,
// crossed by these 40 tokens) load and give the reference kernels' logits with every
// kernel set, in a batch and token by token, within the golden bounds.
TEST(Synth, Qwen3AndGemma3RunThroughEveryKernelSet) {
    std::vector<int32_t> tokens;
    for (int i = 0; i < 40; ++i) tokens.push_back((i * 131 + 7) % 4000);
    for (const char* arch : {"qwen3", "gemma3"}) {
        const fs::path f = fs::temp_directory_path() / (std::string("edgellm_synth_") + arch + ".gguf");
        SynthOptions o;
        o.arch = arch;
        o.shape = "tiny";
        o.type = FileType::Q4_K_M;
        ASSERT_TRUE(synth_model(f.string(), o).ok()) << arch;
        std::vector<float> want;
        for (const std::string& set : available_kernel_sets()) {
            ASSERT_TRUE(select_kernel_set(set));
            auto m = Model::load(f.string());
            ASSERT_TRUE(m.ok()) << m.error();
            EXPECT_EQ((*m)->hparams().arch, arch);
            EXPECT_TRUE((*m)->hparams().qk_norm);
            EXPECT_EQ((*m)->hparams().post_norms, std::string(arch) == "gemma3");
            ContextParams p;
            p.n_ctx = 64;
            p.n_batch = 64;
            p.n_outputs = 64;
            p.n_threads = 2;
            auto batch = Context::create(**m, p);
            auto steps = Context::create(**m, p);
            ASSERT_TRUE(batch.ok() && steps.ok());
            auto l = (*batch)->eval(tokens, true);
            ASSERT_TRUE(l.ok()) << l.error();
            const std::vector<float> got(l->begin(), l->end());
            for (float x : got) ASSERT_TRUE(std::isfinite(x)) << arch << " " << set;
            std::vector<float> one;
            for (int32_t t : tokens) {
                auto s = (*steps)->eval(std::span<const int32_t>(&t, 1), false);
                ASSERT_TRUE(s.ok());
                one.insert(one.end(), s->begin(), s->end());
            }
            EXPECT_LE(nrmse(one, got), 3e-2) << arch << " " << set << ": token by token";
            if (want.empty())
                want = got;  // "ref" comes first
            else
                EXPECT_LE(nrmse(got, want), 3e-2) << arch << " " << set << " against ref";
        }
        select_kernel_set(default_kernel_set());
        fs::remove(f);
    }
}

// A sliding-window layer's ring: positions land in cell pos % ring, truncating keeps the
// window before the kept end or, when the ring has moved past it, everything goes.
TEST(KvCache, RingKeepsTheWindowAndRefusesToRewindPastIt) {
    KvLayout l;
    l.n_layer = 2;
    l.n_ctx = 64;
    l.n_embd_kv = 32;
    l.ring = {true, false};
    l.window = 8;
    l.ring_cells = 12;
    KvCache kv(l);
    EXPECT_EQ(kv.total_bytes(), 2 * (12 + 64) * row_size(TensorType::F16, 32));
    EXPECT_TRUE(kv.is_ring(0));
    EXPECT_FALSE(kv.is_ring(1));
    ASSERT_TRUE(kv.append(30));
    EXPECT_EQ(kv.cell_of(0, 29), 29 % 12);
    EXPECT_EQ(kv.cell_pos(0)[29 % 12], 29);
    EXPECT_EQ(kv.n_cells_used(0), 12);
    EXPECT_EQ(kv.n_cells_used(1), 30);
    // The ring holds 18..29: keeping 28 needs 20..27, there.
    EXPECT_EQ(kv.truncate(28), 28);
    EXPECT_EQ(kv.cell_pos(0)[28 % 12], -1);
    EXPECT_EQ(kv.cell_pos(0)[27 % 12], 27);
    // Now 16..27 (16, 17 were overwritten by 28, 29 and are gone): keeping 20 needs 12..19.
    EXPECT_EQ(kv.truncate(20), 0);
    EXPECT_EQ(kv.n_used(), 0);
    for (int c = 0; c < 12; ++c) EXPECT_EQ(kv.cell_pos(0)[c], -1);
}

// Gemma 3's ring cache gives the logits of the whole-context cache (--swa-full), and a
// session reuses the previous turn through it.
TEST(Synth, Gemma3RingCacheMatchesTheFullOneAndReusesPrefixes) {
    const fs::path f = fs::temp_directory_path() / "edgellm_synth_gemma3_ring.gguf";
    SynthOptions o;
    o.arch = "gemma3";
    o.shape = "tiny";  // window 8
    o.type = FileType::Q8_0;
    ASSERT_TRUE(synth_model(f.string(), o).ok());
    auto m = Model::load(f.string());
    ASSERT_TRUE(m.ok()) << m.error();
    std::vector<int32_t> tokens;
    for (int i = 0; i < 40; ++i) tokens.push_back((i * 97 + 11) % 4000);
    std::vector<float> logits[2];
    for (int full = 0; full < 2; ++full) {
        ContextParams p;
        p.n_ctx = 64;
        p.n_batch = 4;  // ring of 12 cells
        p.n_outputs = 1;
        p.n_threads = 2;
        p.swa_full = full == 1;
        auto bill = Context::memory_bill(**m, p);
        ASSERT_TRUE(bill.ok());
        EXPECT_EQ(bill->kv_ring_layers, full ? 0 : 4);
        auto c = Context::create(**m, p);
        ASSERT_TRUE(c.ok());
        for (int32_t t : tokens) {
            auto s = (*c)->eval(std::span<const int32_t>(&t, 1), false);
            ASSERT_TRUE(s.ok()) << s.error();
            logits[full].insert(logits[full].end(), s->begin(), s->end());
        }
    }
    EXPECT_LE(nrmse(logits[0], logits[1]), 1e-3);

    // Prefix reuse: a second turn that extends the first keeps it in the ring.
    auto tok = Tokenizer::load((*m)->file());
    ASSERT_TRUE(tok.ok());
    ContextParams p;
    p.n_ctx = 64;
    p.n_batch = 4;
    p.n_threads = 2;
    auto c = Context::create(**m, p);
    ASSERT_TRUE(c.ok());
    Session s(**m, **tok, **c);
    GenerateParams g;
    g.n_predict = 4;
    g.ignore_eos = true;
    g.sampling.temperature = 0.0f;
    std::vector<int32_t> turn(tokens.begin(), tokens.begin() + 20);
    auto r1 = s.generate(turn, g, nullptr);
    ASSERT_TRUE(r1.ok()) << r1.error();
    turn.insert(turn.end(), r1->tokens.begin(), r1->tokens.end());
    turn.insert(turn.end(), tokens.begin() + 20, tokens.begin() + 26);
    auto r2 = s.generate(turn, g, nullptr);
    ASSERT_TRUE(r2.ok()) << r2.error();
    EXPECT_GE(r2->n_cached, 20) << "the first turn was not reused";
    // The same turn in a fresh session gives the same tokens.
    auto c2 = Context::create(**m, p);
    ASSERT_TRUE(c2.ok());
    Session fresh(**m, **tok, **c2);
    auto r3 = fresh.generate(turn, g, nullptr);
    ASSERT_TRUE(r3.ok());
    EXPECT_EQ(r2->tokens, r3->tokens);
    fs::remove(f);
}

// Quantizing the f32 golden model with our quantizer lands as far from the f32 logits as
// llama.cpp's file of the same type does.
TEST(Quantize, RoundTripsMatchLlamaCppDistances) {
    const fs::path src = kGolden / "tiny-qwen2-f32.gguf";
    if (!fs::exists(src)) GTEST_SKIP() << "no golden models at " << kGolden;
    const auto ours_f32 = logits_of(src, kTokens);
    struct Case {
        FileType ft;
        const char* golden;
    };
    for (const Case& c :
         {Case{FileType::F16, "tiny-qwen2-f16.gguf"}, Case{FileType::Q8_0, "tiny-qwen2-q8_0.gguf"},
          Case{FileType::Q6_K, "tiny-qwen2-q6_k.gguf"},
          Case{FileType::Q5_K_M, "tiny-qwen2-q5_k_m.gguf"},
          Case{FileType::Q5_0, "tiny-qwen2-q5_0.gguf"},
          Case{FileType::Q4_K_M, "tiny-qwen2-q4_k_m.gguf"},
          Case{FileType::Q4_0, "tiny-qwen2-q4_0.gguf"},
          Case{FileType::Q4_1, "tiny-qwen2-q4_1.gguf"},
          Case{FileType::Q3_K_M, "tiny-qwen2-q3_k_m.gguf"},
          Case{FileType::Q2_K, "tiny-qwen2-q2_k.gguf"}}) {
        const fs::path out = fs::temp_directory_path() /
                             (std::string("edgellm_q_") + file_type_name(c.ft) + ".gguf");
        QuantizeRunOptions ro;
        ro.opts.ftype = c.ft;
        ro.n_threads = 2;
        auto r = quantize_file(src.string(), out.string(), ro);
        ASSERT_TRUE(r.ok()) << r.error();
        auto theirs = GgufFile::open((kGolden / c.golden).string());
        auto ours = GgufFile::open(out.string());
        ASSERT_TRUE(ours.ok() && theirs.ok());
        EXPECT_EQ((*ours)->tensor_bytes(), (*theirs)->tensor_bytes()) << file_type_name(c.ft);
        EXPECT_EQ((*ours)->get_int("general.file_type"), (int64_t)c.ft);
        // Our quantizer writes the same bytes as llama.cpp's, tensor by tensor.
        size_t same = 0;
        for (const auto& t : (*ours)->tensors()) {
            const GgufTensorInfo* u = (*theirs)->tensor(t.name);
            ASSERT_NE(u, nullptr) << t.name;
            ASSERT_EQ(t.type, u->type) << t.name;
            same += t.n_bytes == u->n_bytes && std::memcmp(t.data, u->data, t.n_bytes) == 0;
        }
        EXPECT_EQ(same, (*ours)->tensors().size())
            << file_type_name(c.ft) << ": tensors with other bytes";
        const double d_ours = nrmse(logits_of(out, kTokens), ours_f32);
        const double d_theirs = nrmse(logits_of(kGolden / c.golden, kTokens), ours_f32);
        std::printf("%-7s ours %.4f  llama.cpp's %.4f\n", file_type_name(c.ft), d_ours, d_theirs);
        EXPECT_LT(std::fabs(d_ours - d_theirs), 0.1 * d_theirs + 2e-3) << file_type_name(c.ft);
        fs::remove(out);
    }
}

TEST(Quantize, RefusesToOverwriteItsInputAndToRequantize) {
    const fs::path src = kGolden / "tiny-qwen2-q4_0.gguf";
    if (!fs::exists(src)) GTEST_SKIP() << "no golden models at " << kGolden;
    const fs::path copy = fs::temp_directory_path() / "edgellm_q_in.gguf";
    fs::copy_file(src, copy, fs::copy_options::overwrite_existing);
    QuantizeRunOptions ro;
    ro.opts.ftype = FileType::Q8_0;
    auto r = quantize_file(copy.string(), copy.string(), ro);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().find("overwrite"), std::string::npos) << r.error();
    const fs::path out = fs::temp_directory_path() / "edgellm_q_out.gguf";
    r = quantize_file(copy.string(), out.string(), ro);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().find("--allow-requantize"), std::string::npos) << r.error();
    EXPECT_FALSE(fs::exists(out));
    ro.allow_requantize = true;
    r = quantize_file(copy.string(), out.string(), ro);
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_TRUE(Model::load(out.string()).ok());
    fs::remove(copy);
    fs::remove(out);
}

// A context shift: the rows after the dropped positions move down (in a ring, to the cells
// of their new positions), every moved key row is turned back once, and the positions are
// numbered again from the kept ones.
TEST(KvCache, ShiftMovesRowsAndRenumbersPositions) {
    KvLayout l;
    l.n_layer = 2;
    l.n_ctx = 64;
    l.n_embd_kv = 32;
    l.n_head_kv = 1;
    l.type_k = l.type_v = TensorType::F32;
    l.ring = {true, false};
    l.window = 8;
    l.ring_cells = 12;
    KvCache kv(l);
    ASSERT_TRUE(kv.append(30));
    // Tag each row with its layer, K/V and position.
    auto tag = [](int64_t layer, int kv_index, int32_t pos) { return (float)(layer * 1000 + kv_index * 100 + pos); };
    for (int64_t layer = 0; layer < 2; ++layer)
        for (int b = 0; b < 2; ++b)
            for (int64_t c = 0; c < kv.n_cells(layer); ++c) {
                const int32_t pos = kv.cell_pos(layer)[c];
                auto* row = reinterpret_cast<float*>((b ? kv.v_rows(layer) : kv.k_rows(layer)) + c * kv.k_row_bytes());
                for (int i = 0; i < 32; ++i) row[i] = pos < 0 ? -1.0f : tag(layer, b, pos);
            }
    int rotated[2] = {0, 0};
    kv.shift(4, 10, [&](int64_t layer, uint8_t* k) {
        ++rotated[layer];
        reinterpret_cast<float*>(k)[0] += 0.5f;  // marks the row as turned
    });
    EXPECT_EQ(kv.n_used(), 20);
    EXPECT_EQ(rotated[1], 16) << "positions 14..29 moved in the global layer";
    // Global layer: cells 0..3 kept, 4..19 hold old positions 14..29.
    for (int64_t c = 0; c < 20; ++c) {
        const int32_t old = c < 4 ? (int32_t)c : (int32_t)c + 10;
        const auto* k = reinterpret_cast<const float*>(kv.k_rows(1) + c * kv.k_row_bytes());
        const auto* v = reinterpret_cast<const float*>(kv.v_rows(1) + c * kv.k_row_bytes());
        EXPECT_EQ(k[1], tag(1, 0, old)) << c;
        EXPECT_EQ(k[0], tag(1, 0, old) + (c < 4 ? 0.0f : 0.5f)) << c;
        EXPECT_EQ(v[0], tag(1, 1, old)) << c;
        EXPECT_EQ(kv.cell_pos(1)[c], c);
    }
    EXPECT_EQ(kv.cell_pos(1)[20], -1);
    // The ring held 18..29; they are now 8..19, each in cell pos % 12.
    EXPECT_EQ(rotated[0], 12);
    for (int32_t np = 8; np < 20; ++np) {
        const int64_t c = np % 12;
        EXPECT_EQ(kv.cell_pos(0)[c], np);
        const auto* k = reinterpret_cast<const float*>(kv.k_rows(0) + c * kv.k_row_bytes());
        const auto* v = reinterpret_cast<const float*>(kv.v_rows(0) + c * kv.k_row_bytes());
        EXPECT_EQ(k[1], tag(0, 0, np + 10)) << np;
        EXPECT_EQ(k[0], tag(0, 0, np + 10) + 0.5f) << np;
        EXPECT_EQ(v[5], tag(0, 1, np + 10)) << np;
    }
    // New positions append after the shifted ones.
    ASSERT_TRUE(kv.append(1));
    EXPECT_EQ(kv.cell_pos(0)[20 % 12], 20);
}

namespace {

// The K/V rows of the first layer in a snapshot of a cache without rings (f16): they come
// first after the header, so they are found from the end.
std::vector<float> first_layer(const std::vector<uint8_t>& blob, const HParams& h, int64_t n_used, bool keys) {
    const size_t row = (size_t)h.n_embd_kv() * 2, layer = 2 * row * (size_t)n_used;
    const size_t at = blob.size() - layer * (size_t)h.n_layer + (keys ? 0 : row * (size_t)n_used);
    std::vector<float> out((size_t)h.n_embd_kv() * (size_t)n_used);
    type_kernels(TensorType::F16).to_float(blob.data() + at, out.data(), (int64_t)out.size());
    return out;
}

}  // namespace

// The first layer's keys depend only on the token and its position: after a shift they are
// the keys a fresh evaluation computes at the new positions (to f16 rounding), and the
// values are the same rows moved.
TEST(ContextShift, KeysAreTurnedToTheirNewPositions) {
    const fs::path f = test::golden_dir() / "tiny-qwen2-q8_0.gguf";
    if (!fs::exists(f)) GTEST_SKIP() << "no golden models at " << test::golden_dir();
    auto m = Model::load(f.string());
    ASSERT_TRUE(m.ok()) << m.error();
    std::vector<int32_t> all;
    for (int i = 0; i < 40; ++i) all.push_back((i * 131 + 7) % 4000);
    std::vector<int32_t> kept(all.begin(), all.begin() + 5);
    kept.insert(kept.end(), all.begin() + 17, all.end());
    ContextParams p;
    p.n_ctx = 64;
    p.n_threads = 2;
    auto a = Context::create(**m, p);
    auto b = Context::create(**m, p);
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_TRUE((*a)->eval(all, false).ok());
    EXPECT_EQ((*a)->shift(5, 12), 12);
    EXPECT_EQ((*a)->n_past(), 28);
    ASSERT_TRUE((*b)->eval(kept, false).ok());
    const auto sa = (*a)->snapshot(), sb = (*b)->snapshot();
    ASSERT_EQ(sa.size(), sb.size());
    const HParams& h = (*m)->hparams();
    EXPECT_EQ(first_layer(sa, h, 28, false), first_layer(sb, h, 28, false));
    const auto ka = first_layer(sa, h, 28, true), kb = first_layer(sb, h, 28, true);
    EXPECT_LE(nrmse(ka, kb), 2e-3);
    EXPECT_GT(nrmse(ka, kb), 0.0) << "(turned keys are rounded again; a bit-equal result would "
                                     "mean the shifted rows were never turned)";
}

// Gemma 3's ring layers and the whole-context cache shift alike: the logits after a shift
// and a few more tokens agree.
TEST(ContextShift, RingAndFullCachesShiftAlike) {
    const fs::path f = fs::temp_directory_path() / "edgellm_synth_gemma3_shift.gguf";
    SynthOptions o;
    o.arch = "gemma3";
    o.shape = "tiny";  // window 8
    o.type = FileType::Q8_0;
    ASSERT_TRUE(synth_model(f.string(), o).ok());
    auto m = Model::load(f.string());
    ASSERT_TRUE(m.ok()) << m.error();
    std::vector<int32_t> tokens, more;
    for (int i = 0; i < 40; ++i) tokens.push_back((i * 97 + 11) % 4000);
    for (int i = 0; i < 6; ++i) more.push_back((i * 53 + 5) % 4000);
    std::vector<float> logits[2];
    for (int full = 0; full < 2; ++full) {
        ContextParams p;
        p.n_ctx = 48;
        p.n_batch = 4;  // ring of 12 cells
        p.n_threads = 2;
        p.swa_full = full == 1;
        auto c = Context::create(**m, p);
        ASSERT_TRUE(c.ok());
        for (size_t i = 0; i < tokens.size(); i += 4)
            ASSERT_TRUE((*c)->eval(std::span(tokens).subspan(i, 4), false).ok());
        EXPECT_EQ((*c)->shift(3, 18), 18);
        for (int32_t t : more) {
            auto s = (*c)->eval(std::span<const int32_t>(&t, 1), false);
            ASSERT_TRUE(s.ok()) << s.error();
            logits[full].insert(logits[full].end(), s->begin(), s->end());
        }
    }
    EXPECT_LE(nrmse(logits[0], logits[1]), 1e-3);
    fs::remove(f);
}

// Generation past a full context: ends the reply without a shift, goes on with one.
TEST(ContextShift, GenerationGoesOnPastAFullContext) {
    const fs::path f = test::golden_dir() / "tiny-qwen2-q8_0.gguf";
    if (!fs::exists(f)) GTEST_SKIP() << "no golden models at " << test::golden_dir();
    auto m = Model::load(f.string());
    ASSERT_TRUE(m.ok()) << m.error();
    auto tok = Tokenizer::load((*m)->file());
    ASSERT_TRUE(tok.ok());
    ContextParams p;
    p.n_ctx = 32;
    p.n_threads = 2;
    auto c = Context::create(**m, p);
    ASSERT_TRUE(c.ok());
    Session s(**m, **tok, **c);
    const std::vector<int32_t> prompt = {1936, 2094, 3090, 3890, 142, 590, 3368, 3882};
    GenerateParams g;
    g.n_predict = 80;
    g.ignore_eos = true;
    g.sampling.temperature = 0.0f;
    auto r = s.generate(prompt, g, nullptr);
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r->stop, StopReason::ContextFull);
    EXPECT_EQ(r->n_generated, 32 - 8 + 1);
    EXPECT_EQ(r->n_shifts, 0);
    g.context_shift = true;
    g.n_keep = 4;
    s.clear();
    auto shifted = s.generate(prompt, g, nullptr);
    ASSERT_TRUE(shifted.ok()) << shifted.error();
    EXPECT_EQ(shifted->stop, StopReason::Length);
    EXPECT_EQ(shifted->n_generated, 80);
    EXPECT_GE(shifted->n_shifts, 2);
    EXPECT_EQ(shifted->n_kept, 4);
    // The reply is the same up to the first shift.
    EXPECT_TRUE(std::equal(r->tokens.begin(), r->tokens.end() - 1, shifted->tokens.begin()));
    // What the cache holds: the kept start, then the latest tokens.
    const auto& held = s.cached_tokens();
    EXPECT_LE((int64_t)held.size(), 32);
    EXPECT_TRUE(std::equal(prompt.begin(), prompt.begin() + 4, held.begin()));
    EXPECT_EQ(held.back(), shifted->tokens[shifted->tokens.size() - 2]);
}
