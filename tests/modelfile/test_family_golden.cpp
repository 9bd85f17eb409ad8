// Golden logits of the families no package ships weights for: the tiny model of each that
// `edgellm synth` writes (tests/data/golden/families.json names the command and the file's
// sha256) against llama.cpp's logits on that same file (scripts/family-goldens.py made
// them), for every kernel set this machine has.
#include <gtest/gtest.h>

#include "test_paths.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "edgellm/gguf.h"
#include "edgellm/model.h"
#include "edgellm/synth.h"
#include "edgellm/tokenizer.h"
#include "kernels/fp16.h"
#include "kernels/kernels.h"
#include "edgellm/kernels.h"

using namespace edgellm;
namespace fs = std::filesystem;

namespace {

const fs::path kDir = fs::path(EDGELLM_TEST_DATA) / "golden";

// (coreutils' sha256sum: the script recorded Python's hashlib digest)
std::string sha256_of(const fs::path& p) {
    std::string out;
    if (FILE* f = popen(("sha256sum '" + p.string() + "'").c_str(), "r")) {
        char buf[128];
        if (std::fgets(buf, sizeof buf, f)) out = buf;
        pclose(f);
    }
    return out.substr(0, out.find(' '));
}

// The synth command's options as SynthOptions.
SynthOptions synth_options(const nlohmann::json& args) {
    SynthOptions o;
    for (size_t i = 1; i + 1 < args.size(); i += 2) {
        const std::string k = args[i], v = args[i + 1];
        if (k == "--shape") o.shape = v;
        if (k == "--arch") o.arch = v;
        if (k == "--seed") o.seed = std::stoull(v);
        if (k == "--type") o.type = *file_type_from_name(v);
    }
    return o;
}

std::vector<float> read_f32(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::vector<float> v(fs::file_size(p) / sizeof(float));
    in.read((char*)v.data(), (std::streamsize)(v.size() * sizeof(float)));
    return v;
}

class FamilyGolden : public ::testing::TestWithParam<std::string> {
  protected:
    void SetUp() override { ASSERT_TRUE(select_kernel_set(GetParam())); }
    void TearDown() override { select_kernel_set(default_kernel_set()); }
};

TEST_P(FamilyGolden, EveryFamilyMatchesLlamaCpp) {
    std::ifstream in(kDir / "families.json");
    ASSERT_TRUE(in) << "no " << kDir / "families.json";
    const auto j = nlohmann::json::parse(in);
    std::vector<int32_t> tokens = j.at("tokens").get<std::vector<int32_t>>();
    const int64_t rows = j.at("rows");
    test::TempDir tmp("edgellm-family");
    for (const auto& c : j.at("cases")) {
        const std::string name = c.at("name");
        SCOPED_TRACE(name);
        const fs::path model = tmp.path / (name + ".gguf");
        SynthOptions o = synth_options(c.at("synth"));
        o.n_threads = 2;
        ASSERT_TRUE(synth_model(model.string(), o).ok());
        // the file llama.cpp read, byte for byte
        ASSERT_EQ(sha256_of(model), c.at("sha256").get<std::string>())
            << "synth writes other bytes than the file the golden logits were made from: "
               "run scripts/family-goldens.py";
        auto m = Model::load(model.string());
        ASSERT_TRUE(m.ok()) << m.error();
        ContextParams cp;
        cp.n_ctx = c.at("ctx");
        const auto kv = tensor_type_from_name(c.at("kv_type").get<std::string>());
        ASSERT_TRUE(kv.has_value()) << c.at("kv_type");
        cp.type_k = cp.type_v = *kv;
        cp.n_batch = cp.n_outputs = (int64_t)tokens.size();
        cp.n_threads = 2;
        auto ctx = Context::create(**m, cp);
        ASSERT_TRUE(ctx.ok()) << ctx.error();
        auto logits = (*ctx)->eval(tokens, true);
        ASSERT_TRUE(logits.ok()) << logits.error();
        const std::vector<float> gold = read_f32(kDir / c.at("logits").get<std::string>());
        const int64_t n_vocab = c.at("n_vocab");
        ASSERT_EQ((int64_t)gold.size(), rows * n_vocab);
        const float* ours = logits->data() + ((int64_t)tokens.size() - rows) * n_vocab;
        double num = 0, den = 0;
        int agree = 0;
        for (int64_t r = 0; r < rows; ++r) {
            int64_t a = 0, b = 0;
            for (int64_t i = 0; i < n_vocab; ++i) {
                const double x = ours[r * n_vocab + i], g = gold[(size_t)(r * n_vocab + i)];
                num += (x - g) * (x - g);
                den += g * g;
                if (x > ours[r * n_vocab + a]) a = i;
                if (g > gold[(size_t)(r * n_vocab + b)]) b = i;
            }
            agree += a == b;
        }
        const double nrmse = std::sqrt(num / den);
        std::printf("%-12s %-8s nrmse %.2e top-1 %d/%lld\n", name.c_str(), GetParam().c_str(), nrmse,
                    agree, (long long)rows);
        // (f32 weights land near 1e-4, q8_0 near 1e-2; a wrong rotation or a fused matrix
        // split wrongly lands far above)
        EXPECT_LT(nrmse, 3e-2);
        EXPECT_GE(agree, rows - 1);
    }
}

// A case with a real vocabulary and llama.cpp's logits of its last rows as float16: the
// model's tokens of the text are llama.cpp's, and its logits close to them (normalized RMSE
// and the mean KL divergence of the softmaxes: llama.cpp's own Q4 files against F16 are
// 0.03-0.05 for small models, a faithful engine lands well below 0.01).
void check_with_vocabulary(const nlohmann::json& c, const fs::path& model, double max_nrmse) {
    auto f = GgufFile::open(model.string());
    ASSERT_TRUE(f.ok()) << f.error();
    auto tok = Tokenizer::load(**f);
    ASSERT_TRUE(tok.ok()) << tok.error();
    const std::vector<int32_t> tokens = c.at("tokens").get<std::vector<int32_t>>();
    EXPECT_EQ((*tok)->tokenize(c.at("text").get<std::string>(), true, true), tokens);
    auto m = Model::load(model.string());
    ASSERT_TRUE(m.ok()) << m.error();
    ContextParams cp;
    cp.n_ctx = c.at("ctx");
    cp.n_batch = cp.n_outputs = (int64_t)tokens.size();
    cp.n_threads = 2;
    auto ctx = Context::create(**m, cp);
    ASSERT_TRUE(ctx.ok()) << ctx.error();
    auto logits = (*ctx)->eval(tokens, true);
    ASSERT_TRUE(logits.ok()) << logits.error();
    const int64_t rows = c.at("rows"), n_vocab = c.at("n_vocab");
    std::ifstream lf(kDir / c.at("logits").get<std::string>(), std::ios::binary);
    std::vector<fp16_t> half((size_t)(rows * n_vocab));
    lf.read((char*)half.data(), (std::streamsize)(half.size() * sizeof(fp16_t)));
    ASSERT_TRUE(lf) << "short logits file";
    std::vector<float> gold(half.size());
    for (size_t i = 0; i < half.size(); ++i) gold[i] = fp16_to_f32(half[i]);
    const float* ours = logits->data() + ((int64_t)tokens.size() - rows) * n_vocab;
    double num = 0, den = 0, kl = 0;
    int agree = 0;
    for (int64_t r = 0; r < rows; ++r) {
        const float* o = ours + r * n_vocab;
        const float* g = gold.data() + r * n_vocab;
        const int64_t a = std::max_element(o, o + n_vocab) - o, b = std::max_element(g, g + n_vocab) - g;
        agree += a == b;
        double zo = 0, zg = 0;
        for (int64_t i = 0; i < n_vocab; ++i) {
            num += ((double)o[i] - g[i]) * ((double)o[i] - g[i]);
            den += (double)g[i] * g[i];
            zo += std::exp((double)o[i] - o[a]);
            zg += std::exp((double)g[i] - g[b]);
        }
        for (int64_t i = 0; i < n_vocab; ++i) {
            const double lg = g[i] - g[b] - std::log(zg), lo = o[i] - o[a] - std::log(zo);
            kl += std::exp(lg) * (lg - lo);
        }
    }
    kl /= (double)rows;
    const double nrmse = std::sqrt(num / den);
    std::printf("%s (%s): nrmse %.2e, mean KL %.2e, top-1 %d/%lld\n", c.at("name").get<std::string>().c_str(),
                model.filename().c_str(), nrmse, kl, agree, (long long)rows);
    EXPECT_LT(kl, 1e-2);
    EXPECT_LT(nrmse, max_nrmse);
    EXPECT_EQ(agree, rows);
}

// The real files the packages ship (families.json's "real").
TEST(FamilyGoldenReal, PackagedModelsMatchLlamaCpp) {
    std::ifstream in(kDir / "families.json");
    ASSERT_TRUE(in);
    const auto j = nlohmann::json::parse(in);
    int checked = 0;
    for (const auto& c : j.at("real")) {
        const std::string name = c.at("name");
        SCOPED_TRACE(name);
        const fs::path model = test::real_model({c.at("file").get<std::string>().c_str()});
        if (model.empty()) {
            std::printf("%s: not fetched (scripts/fetch-models.sh %s), skipped\n", name.c_str(), name.c_str());
            continue;
        }
        check_with_vocabulary(c, model, 0.1);  // (Q4 weights: activations rounded apart)
        ++checked;
    }
    if (checked == 0) GTEST_SKIP() << "none of the packaged models is fetched";
}

// Synthetic weights with a real vocabulary (families.json's "vocab_cases": llama.cpp's
// vocabulary-only files, scripts/fetch-vocabs.sh).
TEST(FamilyGoldenReal, RealVocabulariesMatchLlamaCpp) {
    std::ifstream in(kDir / "families.json");
    ASSERT_TRUE(in);
    const auto j = nlohmann::json::parse(in);
    int checked = 0;
    test::TempDir tmp("edgellm-family");
    for (const auto& c : j.at("vocab_cases")) {
        const std::string name = c.at("name");
        SCOPED_TRACE(name);
        const fs::path vocab = test::vocab_file(c.at("vocab").get<std::string>());
        if (!fs::exists(vocab)) {
            std::printf("%s: no %s (scripts/fetch-vocabs.sh), skipped\n", name.c_str(), vocab.c_str());
            continue;
        }
        const fs::path model = tmp.path / (name + ".gguf");
        SynthOptions o = synth_options(c.at("synth"));
        o.vocab = vocab.string();
        o.n_threads = 2;
        ASSERT_TRUE(synth_model(model.string(), o).ok());
        ASSERT_EQ(sha256_of(model), c.at("sha256").get<std::string>())
            << "synth writes other bytes than the file the golden logits were made from: "
               "run scripts/family-goldens.py";
        check_with_vocabulary(c, model, 3e-2);
        ++checked;
    }
    if (checked == 0) GTEST_SKIP() << "llama.cpp's vocabularies are not fetched (scripts/fetch-vocabs.sh)";
}

// A copy of a file's metadata and tensors, less `drop`, with `extra` tensors (copies of
// existing ones under new names) and metadata overrides.
void rewrite(const fs::path& from, const fs::path& to, const std::vector<std::string>& drop,
             const std::vector<std::pair<std::string, std::string>>& extra,
             const std::vector<std::pair<std::string, GgufValue>>& set = {}) {
    auto f = GgufFile::open(from.string());
    ASSERT_TRUE(f.ok());
    GgufWriter w;
    for (const auto& [k, v] : (*f)->metadata()) w.set(k, v);
    for (const auto& [k, v] : set) w.set(k, v);
    auto add = [&](const std::string& name, const GgufTensorInfo& t) {
        w.add_tensor(name, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims), t.data);
    };
    for (const auto& t : (*f)->tensors())
        if (std::find(drop.begin(), drop.end(), t.name) == drop.end()) add(t.name, t);
    for (const auto& [name, like] : extra) add(name, *(*f)->tensor(like));
    ASSERT_TRUE(w.write(to.string()).ok());
}

// What the table does not describe is refused by name, never run without it: a tensor the
// family does not have, fused and split q/k/v at once or neither, a RoPE scaling type
// without its factors, one edgellm does not compute.
TEST(ArchTable, RefusesWhatTheEntryDoesNotDescribe) {
    test::TempDir tmp("edgellm-arch");
    const fs::path llama = tmp.path / "llama.gguf", phi3 = tmp.path / "phi3.gguf",
                   bad = tmp.path / "bad.gguf";
    SynthOptions o;
    o.arch = "llama";
    o.type = FileType::F32;
    ASSERT_TRUE(synth_model(llama.string(), o).ok());
    o.arch = "";
    o.shape = "tiny-longrope";
    ASSERT_TRUE(synth_model(phi3.string(), o).ok());
    ASSERT_TRUE(Model::load(llama.string()).ok());
    ASSERT_TRUE(Model::load(phi3.string()).ok());
    auto refusal = [&](const std::string& want) {
        auto m = Model::load(bad.string());
        EXPECT_FALSE(m.ok());
        if (!m.ok()) {
            EXPECT_NE(m.error().find(want), std::string::npos) << m.error();
        }
    };
    rewrite(llama, bad, {}, {{"blk.0.ffn_gate_inp.weight", "blk.0.ffn_up.weight"}});
    refusal("tensor \"blk.0.ffn_gate_inp.weight\" is not part of a llama model");
    rewrite(llama, bad, {}, {{"blk.9.ffn_up.weight", "blk.0.ffn_up.weight"}});  // a 10th layer
    refusal("blk.9.ffn_up.weight");
    rewrite(phi3, bad, {}, {{"blk.0.attn_q.weight", "blk.0.attn_output.weight"}});
    refusal("a layer has both attn_qkv and attn_q/k/v");
    rewrite(phi3, bad, {"blk.1.attn_qkv.weight"}, {});
    refusal("missing tensor \"blk.1.attn_qkv.weight\" (or \"blk.1.attn_q.weight\")");
    rewrite(llama, bad, {"rope_freqs.weight"}, {}, {{"llama.rope.scaling.type", gguf_value("llama3")}});
    refusal("rope scaling type \"llama3\" without its frequency factor tensors");
    rewrite(llama, bad, {}, {}, {{"llama.rope.scaling.type", gguf_value("yarn")}});
    refusal("rope scaling type \"yarn\" is not supported");
    rewrite(phi3, bad, {}, {}, {{"phi3.rope.scaling.attn_factor", gguf_value(-1.0f)}});
    refusal("attn_factor must be positive");
}

INSTANTIATE_TEST_SUITE_P(KernelSets, FamilyGolden, ::testing::ValuesIn(available_kernel_sets()),
                         [](const auto& info) {
                             std::string n = info.param;  // (amx-bf16: no '-' in a test name)
                             for (char& ch : n)
                                 if (ch == '-') ch = '_';
                             return n;
                         });

}  // namespace
