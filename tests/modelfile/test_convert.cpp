// edgellm convert against llama.cpp's converter: the tiny checkpoints of every family in
// tests/data/convert (scripts/convert-fixtures.py made them and ran llama.cpp's
// convert_hf_to_gguf.py on each: llama.cpp.json) convert to the same metadata and the same
// tensors, byte for byte; the BPE pre-tokenizer of llama.cpp's own vocabularies is named as
// llama.cpp names it; bad checkpoints are refused with what is wrong and nothing written; the
// result quantizes, loads and runs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "edgellm/arch.h"
#include "edgellm/convert.h"
#include "edgellm/model.h"
#include "edgellm/quantize.h"
#include "edgellm/session.h"
#include "modelfile/convert/general.h"
#include "modelfile/convert/model_card.h"
#include "modelfile/convert/pre_tokenizer.h"
#include "modelfile/convert/sha256.h"
#include "test_paths.h"

using namespace edgellm;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const fs::path kData = fs::path(EDGELLM_TEST_DATA) / "convert";
const char* const kFixtures[] = {"llama", "llama-spm", "qwen2", "qwen3", "gemma3", "phi3", "smollm3", "gemma4"};

struct TempDir {
    fs::path path;
    TempDir() {
        char tmpl[] = "/tmp/edgellm-convert-XXXXXX";
        path = mkdtemp(tmpl);
    }
    ~TempDir() { fs::remove_all(path); }
};

json load_json(const fs::path& p) {
    std::ifstream in(p);
    return json::parse(in);
}

void save_json(const fs::path& p, const json& j) {
    std::ofstream(p) << j.dump(2);
}

std::string sha256(const void* p, size_t n) {
    convert::Sha256 h;
    h.add(p, n);
    return h.hex();
}

// A metadata value as the manifest writes it (arrays: count and the sha256 of the elements'
// GGUF encoding).
json manifest_value(const GgufValue& v) {
    if (const GgufArray* a = v.as_array()) {
        std::string bytes;
        if (a->elem_type == GgufType::STRING) {
            for (const std::string& s : a->strings) {
                const uint64_t n = s.size();
                bytes.append((const char*)&n, 8).append(s);
            }
        } else {
            bytes.assign((const char*)a->bytes.data(), a->bytes.size());
        }
        return {{"type", "array"}, {"elem", gguf_type_name(a->elem_type)}, {"count", a->count},
                {"sha256", sha256(bytes.data(), bytes.size())}};
    }
    json out = {{"type", gguf_type_name(v.type())}};
    if (const std::string* s = v.as_string())
        out["value"] = *s;
    else if (v.type() == GgufType::BOOL)
        out["value"] = std::get<bool>(v.v);
    else if (v.type() == GgufType::FLOAT32)
        out["value"] = (double)std::get<float>(v.v);
    else
        out["value"] = *v.as_int();
    return out;
}

Result<ConvertStats> convert_to(const fs::path& dir, const fs::path& out, OutType t) {
    ConvertOptions o;
    o.outtype = t;
    o.outfile = out.string();
    o.n_threads = 2;
    return convert_hf(dir.string(), o);
}

// A one-file checkpoint with its tensors renamed (an empty name: left out) and `more` (4 x 8
// BF16 zeros) added.
void rewrite_checkpoint(const fs::path& file, const std::function<std::string(const std::string&)>& rename,
                        const std::vector<std::string>& more = {}) {
    std::ifstream in(file, std::ios::binary);
    uint64_t n = 0;
    in.read((char*)&n, 8);
    std::string head(n, '\0');
    in.read(head.data(), (std::streamsize)n);
    const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    in.close();
    const json h_in = json::parse(head);
    json h_out = json::object();
    std::string out_data;
    for (const auto& [name, t] : h_in.items()) {
        const std::string renamed = name == "__metadata__" ? "" : rename(name);
        if (renamed.empty()) continue;
        const auto b = t["data_offsets"][0].get<size_t>(), e = t["data_offsets"][1].get<size_t>();
        h_out[renamed] = {{"dtype", t["dtype"]}, {"shape", t["shape"]}, {"data_offsets", {out_data.size(), out_data.size() + e - b}}};
        out_data += data.substr(b, e - b);
    }
    for (const std::string& v : more) {
        h_out[v] = {{"dtype", "BF16"}, {"shape", {4, 8}}, {"data_offsets", {out_data.size(), out_data.size() + 64}}};
        out_data += std::string(64, '\0');
    }
    const std::string h = h_out.dump();
    std::ofstream f(file, std::ios::binary);
    const uint64_t hn = h.size();
    f.write((const char*)&hn, 8);
    f << h << out_data;
}

}  // namespace

class ConvertFixture : public ::testing::TestWithParam<const char*> {};

// The file at `out` has llama.cpp's keys (types and values) and tensors (order, types,
// shapes, bytes) for one outtype of a manifest.
static void expect_matches(const fs::path& out, const json& manifest, const std::string& outtype) {
    const json& expected = manifest["outtypes"][outtype];
    auto f = GgufFile::open(out.string());
    ASSERT_TRUE(f.ok()) << f.error();
    json want = manifest["metadata"];
    want["general.file_type"] = {{"type", "uint32"}, {"value", expected["general.file_type"]}};
    size_t n_keys = 0;
    for (const auto& [key, value] : (*f)->metadata()) {
        json got = manifest_value(value);
        if (want.contains(key) && want[key].contains("head")) got["head"] = want[key]["head"];
        EXPECT_EQ(got, want.value(key, json())) << key << " (ours, then llama.cpp's)";
        ++n_keys;
    }
    EXPECT_EQ(n_keys, want.size()) << "a key llama.cpp writes is missing";
    const auto& tensors = (*f)->tensors();
    ASSERT_EQ(tensors.size(), expected["tensors"].size());
    for (size_t i = 0; i < tensors.size(); ++i) {
        const GgufTensorInfo& t = tensors[i];
        const json& e = expected["tensors"][i];
        EXPECT_EQ(t.name, e["name"].get<std::string>()) << "tensor " << i;
        std::string type = tensor_type_name(t.type);
        for (char& c : type) c = (char)std::toupper((unsigned char)c);
        EXPECT_EQ(type, e["type"].get<std::string>()) << t.name;
        EXPECT_EQ(json(std::vector<int64_t>(t.ne, t.ne + t.n_dims)), e["shape"]) << t.name;
        EXPECT_EQ(sha256(t.data, t.n_bytes), e["sha256"].get<std::string>()) << t.name << ": other bytes";
    }
}

static std::string file_sha256(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return sha256(bytes.data(), bytes.size());
}

// Every outtype: the same keys with the same types and values, the same tensors in the same
// order with the same types, shapes and bytes as llama.cpp's converter wrote; the keys in
// its order too: the same file, byte for byte.
TEST_P(ConvertFixture, MatchesLlamaCppConverter) {
    const fs::path dir = kData / GetParam();
    const json manifest = load_json(dir / "llama.cpp.json");
    TempDir tmp;
    for (const auto& [outtype, expected] : manifest["outtypes"].items()) {
        SCOPED_TRACE(outtype);
        const fs::path out = tmp.path / (outtype + ".gguf");
        auto r = convert_to(dir, out, *out_type_from_name(outtype));
        ASSERT_TRUE(r.ok()) << r.error();
        EXPECT_EQ(r->path, out.string());
        expect_matches(out, manifest, outtype);
        EXPECT_EQ(file_sha256(out), expected["file_sha256"].get<std::string>()) << "not the same file";
    }
}

// --outtype auto picks what llama.cpp's does (bf16 for a bf16 checkpoint, else f16).
TEST_P(ConvertFixture, AutoPicksLlamaCppsType) {
    const fs::path dir = kData / GetParam();
    const json manifest = load_json(dir / "llama.cpp.json");
    TempDir tmp;
    auto r = convert_to(dir, tmp.path / "auto.gguf", OutType::Auto);
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ((int)r->file_type, manifest["auto_file_type"].get<int>());
}

// The converted model loads and evaluates (finite logits for a few tokens), and quantizes as
// a llama.cpp file does, the result loading too.
TEST_P(ConvertFixture, LoadsRunsAndQuantizes) {
    TempDir tmp;
    const fs::path f32 = tmp.path / "f32.gguf", q = tmp.path / "q4_0.gguf";
    auto r = convert_to(kData / GetParam(), f32, OutType::F32);
    ASSERT_TRUE(r.ok()) << r.error();
    for (const fs::path& path : {f32, q}) {
        if (path == q) {
            QuantizeRunOptions qo;
            qo.opts.ftype = FileType::Q4_0;
            qo.n_threads = 2;
            auto qr = quantize_file(f32.string(), q.string(), qo);
            ASSERT_TRUE(qr.ok()) << qr.error();
            EXPECT_GT(qr->n_quantized, 0u);
        }
        auto m = Model::load(path.string());
        ASSERT_TRUE(m.ok()) << m.error();
        ContextParams p;
        p.n_ctx = 32;
        p.n_batch = 4;
        p.n_outputs = 4;
        p.n_threads = 2;
        auto c = Context::create(**m, p);
        ASSERT_TRUE(c.ok()) << c.error();
        const std::vector<int32_t> tokens = {1, 5, 9, 12};
        auto logits = (*c)->eval(tokens, true);
        ASSERT_TRUE(logits.ok()) << logits.error();
        ASSERT_EQ((int64_t)logits->size(), 4 * (*m)->hparams().n_vocab);
        for (float x : *logits) ASSERT_TRUE(std::isfinite(x)) << path;
    }
}

INSTANTIATE_TEST_SUITE_P(Families, ConvertFixture, ::testing::ValuesIn(kFixtures),
                         [](const auto& info) {
                             std::string n = info.param;
                             for (char& c : n)
                                 if (c == '-') c = '_';
                             return n;
                         });

// llama.cpp's own vocabularies (its models/ggml-vocab-*.gguf, scripts/fetch-vocabs.sh) get
// the pre-tokenizer name they carry, by the hash of the fixed text's token ids computed with
// edgellm's tokenizer: the identification a real checkpoint's tokenizer.json goes through.
TEST(ConvertPreTokenizer, NamesReleasedVocabulariesByTheirHash) {
    // name, whether the released tokenizer adds BOS (its post-processor)
    const std::pair<const char*, bool> cases[] = {
        {"llama-bpe", true}, {"qwen2", false}, {"gpt-2", false}, {"starcoder", false},
        {"refact", false}, {"falcon", false}, {"deepseek-llm", true}, {"deepseek-coder", true},
        {"command-r", true}};
    int checked = 0;
    for (const auto& [name, bos] : cases) {
        const fs::path path = test::vocab_file(std::string("ggml-vocab-") + name + ".gguf");
        if (path.empty()) continue;
        auto f = GgufFile::open(path.string());
        ASSERT_TRUE(f.ok()) << f.error();
        convert::Kv kv;
        for (const auto& [k, v] : (*f)->metadata())
            if (k.starts_with("tokenizer.ggml.") && k != "tokenizer.ggml.pre") kv.emplace_back(k, v);
        kv.emplace_back("tokenizer.ggml.add_bos_token", gguf_value(bos));
        const auto pre = convert::name_pre_tokenizer(kv, json::object(), "");
        EXPECT_EQ(pre.name, name);
        EXPECT_TRUE(pre.how.starts_with("chkhsh ")) << name << ": " << pre.how;
        ++checked;
    }
    if (checked == 0) GTEST_SKIP() << "no llama.cpp vocabularies in " << test::vocab_dir() << " (scripts/fetch-vocabs.sh)";
    // (the text hashed is llama.cpp's, byte for byte)
    EXPECT_EQ(convert::sha256_hex(convert::kChkTxt),
              "a36179c1e2b1cfcfbfad1dc779addad2ffc778201e4cf0d538bddeafa2c526da");
}

// A config.json that leaves out what transformers' config class fills in (the KV heads, the
// head dimension, RoPE's base, the norms' epsilon: older checkpoints do) converts as the
// complete one: llama.cpp's converter reads the config through transformers.
TEST(Convert, FieldsTransformersFillsIn) {
    for (const auto& [fixture, fields] :
         {std::pair<const char*, std::vector<const char*>>{
              "llama-spm", {"num_key_value_heads", "head_dim", "rope_theta", "rms_norm_eps"}},
          {"phi3", {"rms_norm_eps"}}}) {
        SCOPED_TRACE(fixture);
        TempDir tmp;
        const fs::path dir = tmp.path / fixture;
        fs::copy(kData / fixture, dir);
        json c = load_json(dir / "config.json");
        for (const char* f : fields) ASSERT_EQ(c.erase(f), 1u) << f;
        save_json(dir / "config.json", c);
        auto r = convert_to(dir, tmp.path / "out.gguf", OutType::F16);
        ASSERT_TRUE(r.ok()) << r.error();
        expect_matches(tmp.path / "out.gguf", load_json(kData / fixture / "llama.cpp.json"), "f16");
    }
}

// Gemma 3's multimodal checkpoints (Gemma3ForConditionalGeneration: the text model's fields in
// text_config, its tensors under model.language_model., a vision tower beside) convert to
// the text model: what llama.cpp's converter wrote for the text checkpoint (it writes the
// same for this variant of it: checked when this test was written).
TEST(Convert, Gemma3MultimodalCheckpointGivesTheTextModel) {
    TempDir tmp;
    const fs::path dir = tmp.path / "gemma3";  // (the name: general.name)
    fs::copy(kData / "gemma3", dir);
    json text = load_json(dir / "config.json");
    text["model_type"] = "gemma3_text";
    text.erase("architectures");
    save_json(dir / "config.json", {{"architectures", {"Gemma3ForConditionalGeneration"}},
                                    {"model_type", "gemma3"},
                                    {"text_config", text},
                                    {"vision_config", {{"model_type", "siglip_vision_model"}, {"hidden_size", 32}}}});
    // the tensors renamed, and two of the vision side
    rewrite_checkpoint(dir / "model.safetensors",
                       [](const std::string& n) { return n.starts_with("model.") ? "model.language_model." + n.substr(6) : n; },
                       {"model.vision_tower.vision_model.embeddings.patch_embedding.weight",
                        "model.multi_modal_projector.mm_input_projection_weight"});

    auto r = convert_to(dir, tmp.path / "out.gguf", OutType::BF16);
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r->hf_arch, "Gemma3ForConditionalGeneration");
    expect_matches(tmp.path / "out.gguf", load_json(kData / "gemma3" / "llama.cpp.json"), "bf16");
}

// Gemma 4's text checkpoints (Gemma4ForCausalLM: the text model's fields at config.json's
// top, its tensors under model., no encoders) convert to what llama.cpp wrote for the
// multimodal one (it writes the same file for this variant: checked when this test was written).
TEST(Convert, Gemma4TextCheckpointGivesTheSameFile) {
    TempDir tmp;
    const fs::path dir = tmp.path / "gemma4";  // (the name: general.name)
    fs::copy(kData / "gemma4", dir);
    json text = load_json(dir / "config.json")["text_config"];
    text["architectures"] = {"Gemma4ForCausalLM"};
    save_json(dir / "config.json", text);
    rewrite_checkpoint(dir / "model.safetensors", [](const std::string& n) {
        const std::string lm = "model.language_model.";
        return n.starts_with(lm) ? "model." + n.substr(lm.size()) : "";
    });
    auto r = convert_to(dir, tmp.path / "out.gguf", OutType::BF16);
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r->hf_arch, "Gemma4ForCausalLM");
    const json manifest = load_json(kData / "gemma4" / "llama.cpp.json");
    expect_matches(tmp.path / "out.gguf", manifest, "bf16");
    EXPECT_EQ(file_sha256(tmp.path / "out.gguf"), manifest["outtypes"]["bf16"]["file_sha256"].get<std::string>());
}

// Gemma 4's tokenizer_config.json as transformers 5 writes it (the released checkpoints': the
// named special tokens only at its top level, the unnamed ones a list in
// extra_special_tokens; transformers 4.57, llama.cpp's converter's, cannot read that list) has
// the special tokens of the form transformers 4 writes (the fixture's): the same file.
TEST(Convert, Gemma4TokenizerConfigOfTransformers5) {
    TempDir tmp;
    const fs::path dir = tmp.path / "gemma4";
    fs::copy(kData / "gemma4", dir);
    json tc = load_json(dir / "tokenizer_config.json");
    json unnamed = json::array();
    for (const auto& [name, text] : tc["extra_special_tokens"].items())
        if (!tc.contains(name)) unnamed.push_back(text);
    ASSERT_EQ(unnamed, json({"<|extra_control|>", "<|video|>"}));
    tc["extra_special_tokens"] = unnamed;
    save_json(dir / "tokenizer_config.json", tc);
    auto r = convert_to(dir, tmp.path / "out.gguf", OutType::BF16);
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(file_sha256(tmp.path / "out.gguf"),
              load_json(kData / "gemma4" / "llama.cpp.json")["outtypes"]["bf16"]["file_sha256"].get<std::string>());
}

// Llama 3.1's and 3.2's rope_scaling: the llama family's convert hook writes the
// rope_freqs.weight llama.cpp's converter computes with torch (the sha256 of its bytes for
// the real models' parameters; the same bits here: the frequencies are powers rounded once,
// then float32 operations in torch's order).
TEST(Convert, Llama3RopeFreqsAreTorchs) {
    // (what the hook reads: config.json's fields and the rope parameters)
    struct Config final : HfConvert {
        json root, rope;
        std::vector<float> freqs;
        const json* at(std::string_view f) const {
            const json& j = f.starts_with("rope.") ? rope : root;
            const std::string k(f.starts_with("rope.") ? f.substr(5) : f);
            return j.contains(k) ? &j[k] : nullptr;
        }
        std::optional<double> number(std::string_view f) const override {
            return at(f) ? std::optional<double>(at(f)->get<double>()) : std::nullopt;
        }
        std::optional<int64_t> integer(std::string_view f) const override {
            return at(f) ? std::optional<int64_t>(at(f)->get<int64_t>()) : std::nullopt;
        }
        std::optional<std::string> string(std::string_view f) const override {
            return at(f) ? std::optional<std::string>(at(f)->get<std::string>()) : std::nullopt;
        }
        std::optional<std::vector<double>> numbers(std::string_view) const override { return std::nullopt; }
        std::optional<std::vector<std::string>> strings(std::string_view) const override { return std::nullopt; }
        std::optional<bool> flag(std::string_view) const override { return std::nullopt; }
        bool has(std::string_view f) const override { return at(f) != nullptr; }
        bool has_file(std::string_view) const override { return false; }
        int64_t json_entries(std::string_view, std::string_view) const override { return 0; }
        std::optional<bool> file_flag(std::string_view, std::string_view) const override { return std::nullopt; }
        std::optional<std::string> file_string(std::string_view, std::string_view) const override {
            return std::nullopt;
        }
        void set_u32(const std::string&, uint32_t) override {}
        void set_f32(const std::string&, float) override {}
        void set_bool(const std::string&, bool) override {}
        void set_string(const std::string&, const std::string&) override {}
        void set_i32_array(const std::string&, const std::vector<int32_t>&) override {}
        void set_bool_array(const std::string&, const std::vector<bool>&) override {}
        void remove(const std::string&) override {}
        void move_to_end(const std::string&) override {}
        void set_f32_early(const std::string&, float) override {}
        void add_tensor(const std::string& name, std::vector<float> v) override {
            EXPECT_EQ(name, "rope_freqs.weight");
            freqs = std::move(v);
        }
        void keep_rows(const std::string&, int64_t) override {}
        bool vocab_sentencepiece(SpmAdded) override { return false; }
        void vocab_bpe() override {}
        void vocab_llama_hf(const std::string&, const std::vector<std::string>&) override {}
        int64_t n_tokens() const override { return 0; }
    };
    struct Case {
        int64_t head_dim;
        double factor;
        const char* sha256;
    };
    const Case cases[] = {
        {64, 32.0, "d25a6d176d9313062b8f86440c88649f9e568d573ea66bfa4e85e2424cf35633"},   // Llama 3.2 1B
        {128, 32.0, "af00a6286e9cba87733f6e5dd6b09a2bffd7326e6ac33d346f83f7c2f4857828"},  // Llama 3.2 3B
        {128, 8.0, "8b516af9cb5db26ed32831eb6f493dd620843d1cd69ca7bbad760c76061cd565"},   // Llama 3.1 8B
    };
    for (const Case& c : cases) {
        Config cfg;
        cfg.root = {{"vocab_size", 128256}, {"head_dim", c.head_dim}};
        cfg.rope = {{"rope_type", "llama3"}, {"rope_theta", 500000.0}, {"factor", c.factor},
                    {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                    {"original_max_position_embeddings", 8192}};
        find_arch("llama")->convert(cfg);
        ASSERT_EQ(cfg.freqs.size(), (size_t)c.head_dim / 2);
        EXPECT_EQ(sha256(cfg.freqs.data(), cfg.freqs.size() * 4), c.sha256) << c.head_dim << " " << c.factor;
    }
}

// A vocabulary of no released model whose pre_tokenizer is none edgellm knows is refused with
// the hash and what its pre_tokenizer is.
TEST(ConvertPreTokenizer, RefusesAnUnknownOne) {
    TempDir tmp;
    fs::copy(kData / "qwen2", tmp.path / "qwen2");
    json tj = load_json(tmp.path / "qwen2" / "tokenizer.json");
    tj["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\p{L}+|\\p{N}+";
    save_json(tmp.path / "qwen2" / "tokenizer.json", tj);
    auto r = convert_to(tmp.path / "qwen2", tmp.path / "out.gguf", OutType::F16);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().find("chkhsh"), std::string::npos) << r.error();
    EXPECT_NE(r.error().find("\\\\p{L}+|\\\\p{N}+"), std::string::npos) << r.error();
    EXPECT_FALSE(fs::exists(tmp.path / "out.gguf"));
}

// Bad checkpoints: refused with what is wrong and where, nothing written.
class ConvertRefusal : public ::testing::Test {
  protected:
    TempDir tmp;
    fs::path dir;
    fs::path out() const { return tmp.path / "out.gguf"; }
    void copy(const char* fixture) {
        dir = tmp.path / fixture;
        fs::copy(kData / fixture, dir);
    }
    std::string refusal() {
        auto r = convert_to(dir, out(), OutType::F16);
        EXPECT_FALSE(r.ok());
        EXPECT_FALSE(fs::exists(out())) << "a refused conversion wrote its output";
        for (const auto& e : fs::directory_iterator(tmp.path))
            EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
        return r.ok() ? "" : r.error();
    }
    // The refusal with one of the checkpoint's JSON files replaced by `j`.
    std::string refusal_with(const char* file, const json& j) {
        save_json(dir / file, j);
        return refusal();
    }
};

TEST_F(ConvertRefusal, UnknownArchitectureByName) {
    copy("qwen3");
    json c = load_json(dir / "config.json");
    c["architectures"] = {"MistralForCausalLM"};
    save_json(dir / "config.json", c);
    const std::string e = refusal();
    EXPECT_NE(e.find("\"MistralForCausalLM\" is not one edgellm runs"), std::string::npos) << e;
    EXPECT_NE(e.find("Qwen3ForCausalLM (qwen3)"), std::string::npos) << e;
}

// Gemma 4 26B-A4B's mixture of experts: refused by the config.json key that says it, before
// anything is read.
TEST_F(ConvertRefusal, Gemma4MixtureOfExpertsByName) {
    copy("gemma4");
    json c = load_json(dir / "config.json");
    c["text_config"].update({{"enable_moe_block", true}, {"num_experts", 8}, {"top_k_experts", 2},
                             {"moe_intermediate_size", 16}});
    std::string e = refusal_with("config.json", c);
    EXPECT_NE(e.find("\"enable_moe_block\" is true: a mixture of experts (Gemma 4 26B-A4B)"), std::string::npos) << e;
    c["text_config"]["enable_moe_block"] = false;
    e = refusal_with("config.json", c);
    EXPECT_NE(e.find("\"num_experts\" is 8: a mixture of experts"), std::string::npos) << e;
}

// What else Gemma 4's converter cannot take: refused by name.
TEST_F(ConvertRefusal, Gemma4ByName) {
    copy("gemma4");
    const json config = load_json(dir / "config.json"), tc = load_json(dir / "tokenizer_config.json");
    json c = config;
    c["text_config"]["rope_parameters"]["full_attention"]["rope_type"] = "linear";
    std::string e = refusal_with("config.json", c);
    EXPECT_NE(e.find("rope_type is \"linear\", not \"proportional\""), std::string::npos) << e;
    c = config;
    c["text_config"].erase("layer_types");
    e = refusal_with("config.json", c);
    EXPECT_NE(e.find("\"layer_types\" missing"), std::string::npos) << e;
    save_json(dir / "config.json", config);

    json t = tc;
    t["sot_token"] = "<|start_of_turn|>";
    e = refusal_with("tokenizer_config.json", t);
    EXPECT_NE(e.find("special token \"<|start_of_turn|>\" is not in tokenizer.json's vocabulary"), std::string::npos) << e;
    t = tc;
    t["tokenizer_class"] = "LlamaTokenizer";
    e = refusal_with("tokenizer_config.json", t);
    EXPECT_NE(e.find("tokenizer_class \"LlamaTokenizer\""), std::string::npos) << e;
    save_json(dir / "tokenizer_config.json", tc);

    json j = load_json(dir / "tokenizer.json");
    j["model"]["byte_fallback"] = false;
    e = refusal_with("tokenizer.json", j);
    EXPECT_NE(e.find("tokenizer.json: not a SentencePiece-style BPE"), std::string::npos) << e;
}

TEST_F(ConvertRefusal, MissingShardByFile) {
    copy("llama");
    fs::remove(dir / "model-00002-of-00004.safetensors");
    const std::string e = refusal();
    EXPECT_NE(e.find("model-00002-of-00004.safetensors is missing"), std::string::npos) << e;
}

TEST_F(ConvertRefusal, TruncatedShardByFileAndOffset) {
    copy("llama");
    const fs::path shard = dir / "model-00003-of-00004.safetensors";
    const auto size = fs::file_size(shard);
    fs::resize_file(shard, size - 100);
    const std::string e = refusal();
    EXPECT_NE(e.find("model-00003-of-00004.safetensors: tensor"), std::string::npos) << e;
    EXPECT_NE(e.find("runs past the end of the file at " + std::to_string(size - 100)), std::string::npos) << e;
    // a header cut short too
    fs::resize_file(shard, 20);
    const std::string e2 = refusal();
    EXPECT_NE(e2.find("model-00003-of-00004.safetensors: the header"), std::string::npos) << e2;
    EXPECT_NE(e2.find("end of the file at 20"), std::string::npos) << e2;
}

TEST_F(ConvertRefusal, ShardMissingATensorTheIndexLists) {
    copy("llama");
    json idx = load_json(dir / "model.safetensors.index.json");
    idx["weight_map"]["model.layers.0.mlp.extra.weight"] = "model-00001-of-00004.safetensors";
    save_json(dir / "model.safetensors.index.json", idx);
    const std::string e = refusal();
    EXPECT_NE(e.find("model.layers.0.mlp.extra.weight\" is missing"), std::string::npos) << e;
}

TEST_F(ConvertRefusal, BadConfigFieldByName) {
    copy("qwen2");
    json c = load_json(dir / "config.json");
    c["hidden_size"] = "64";
    save_json(dir / "config.json", c);
    std::string e = refusal();
    EXPECT_NE(e.find("\"hidden_size\" is \"64\", not an integer"), std::string::npos) << e;

    c["hidden_size"] = 64;
    c.erase("num_attention_heads");
    save_json(dir / "config.json", c);
    e = refusal();
    EXPECT_NE(e.find("\"num_attention_heads\" missing"), std::string::npos) << e;

    c["num_attention_heads"] = 4;
    c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
    save_json(dir / "config.json", c);
    e = refusal();
    EXPECT_NE(e.find("original_max_position_embeddings"), std::string::npos) << e;

    std::ofstream(dir / "config.json") << "{ not json";
    e = refusal();
    EXPECT_NE(e.find("config.json: not JSON"), std::string::npos) << e;
}

// A config that does not match the weights: the result would not load, so nothing is written.
TEST_F(ConvertRefusal, ShapesThatDoNotMatchTheConfig) {
    copy("qwen3");
    json c = load_json(dir / "config.json");
    c["intermediate_size"] = 96;
    save_json(dir / "config.json", c);
    const std::string e = refusal();
    EXPECT_NE(e.find("edgellm would not load the result"), std::string::npos) << e;
    EXPECT_NE(e.find("ffn_"), std::string::npos) << e;
}

TEST_F(ConvertRefusal, TensorOfNoPlaceByName) {
    copy("qwen3");
    // a second file with one tensor the family does not have
    const std::string header = R"({"model.layers.0.mlp.extra.weight":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
    std::ofstream f(dir / "model-extra.safetensors", std::ios::binary);
    const uint64_t n = header.size();
    f.write((const char*)&n, 8);
    f << header;
    const float data[2] = {1, 2};
    f.write((const char*)data, 8);
    f.close();
    const std::string e = refusal();
    EXPECT_NE(e.find("tensor \"model.layers.0.mlp.extra.weight\" has no place in a qwen3 model"),
              std::string::npos)
        << e;
}

TEST_F(ConvertRefusal, OutputOverTheCheckpoint) {
    copy("qwen3");
    const auto size = fs::file_size(dir / "model.safetensors");
    auto r = convert_to(dir, dir / "model.safetensors", OutType::F16);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().find("is one of the checkpoint's shards"), std::string::npos) << r.error();
    EXPECT_EQ(fs::file_size(dir / "model.safetensors"), size);
}

TEST_F(ConvertRefusal, NoTokenizer) {
    copy("qwen3");
    fs::remove(dir / "tokenizer.json");
    const std::string e = refusal();
    EXPECT_NE(e.find("tokenizer.json missing"), std::string::npos) << e;
}

// The default name, llama.cpp's: Basename-SizeLabel-Finetune-TYPE.gguf in the checkpoint's
// directory, the name's parts as gguf-py's heuristics take them from the directory's name.
TEST(Convert, DefaultOutputNameIsLlamaCpps) {
    TempDir tmp;
    fs::copy(kData / "qwen3", tmp.path / "Qwen3-Tiny-Instruct");
    ConvertOptions o;
    o.outtype = OutType::Q8_0;
    o.n_threads = 2;
    auto r = convert_hf((tmp.path / "Qwen3-Tiny-Instruct").string(), o);
    ASSERT_TRUE(r.ok()) << r.error();
    auto f = GgufFile::open(r->path);
    ASSERT_TRUE(f.ok());
    const std::string size = (*f)->get_string("general.size_label").value_or("?");
    EXPECT_EQ(size, convert::size_label(r->n_params));
    EXPECT_EQ(fs::path(r->path), tmp.path / "Qwen3-Tiny-Instruct" / ("Qwen3-Tiny-" + size + "-Instruct-Q8_0.gguf"));
    EXPECT_EQ((*f)->get_string("general.name").value_or(""), "Qwen3 Tiny Instruct");
    EXPECT_EQ((*f)->get_string("general.finetune").value_or(""), "Instruct");
    EXPECT_EQ((*f)->get_string("general.basename").value_or(""), "Qwen3-Tiny");
}

// The model card's front matter as PyYAML reads it (what it gave for this text), as far as
// llama.cpp's converter uses it: scalars of YAML 1.1's types, quoted strings, block and flow
// lists, lists of mappings, block scalars.
TEST(Convert, ModelCardFrontMatterAsPyYaml) {
    const std::string yaml = R"(license: other
license_name: "tongyi-qianwen"
license_link: 'https://example.com/it''s'
version: 1.5
count: 12
gated: yes
off_flag: off
nothing: ~
language: [en, "zh", 'fr']
tags:
  - chat   # a comment
  - 'code'
base_model:
- org/Model-7B-Instruct-v0.2
- https://huggingface.co/other/thing
datasets:
  - name: foo
    url: http://x
widget:
  - text: "hi"
description: |
  line one
  line two
summary: >-
  folded one
  folded two
colon_in_value: 'a: b'
empty:
after: 3
)";
    const json want = json::parse(R"({"after": 3, "base_model": ["org/Model-7B-Instruct-v0.2",
        "https://huggingface.co/other/thing"], "colon_in_value": "a: b", "count": 12, "datasets":
        [{"name": "foo", "url": "http://x"}], "description": "line one\nline two\n", "empty": null,
        "gated": true, "language": ["en", "zh", "fr"], "license": "other", "license_link":
        "https://example.com/it's", "license_name": "tongyi-qianwen", "nothing": null, "off_flag": false,
        "summary": "folded one folded two", "tags": ["chat", "code"], "version": 1.5, "widget":
        [{"text": "hi"}]})");
    EXPECT_EQ(convert::parse_front_matter(yaml), want);
}

// gguf-py's name heuristics and size labels (the values its functions return for these).
TEST(Convert, NameHeuristicsAreGgufPys) {
    struct Case {
        const char* id;
        int64_t params;
        const char *title, *basename, *finetune, *version, *size;
    };
    const Case cases[] = {
        {"Llama-3.2-1B-Instruct", 147456, "Llama 3.2 1B Instruct", "Llama-3.2", "1b-Instruct", "", ""},
        {"Llama-3.2-1B-Instruct", 1235814400, "Llama 3.2 1B Instruct", "Llama-3.2", "Instruct", "", "1B"},
        {"SmolLM2-135M-Instruct", 1235814400, "SmolLM2 135M Instruct", "SmolLM2", "135m-Instruct", "", ""},
        {"Phi-4-mini-instruct", 147456, "Phi 4 Mini Instruct", "Phi-4", "instruct", "", "mini"},
        {"gemma-3-270m-it", 1235814400, "Gemma 3 270m It", "gemma-3", "it", "", "270M"},
        {"Qwen2.5-0.5B-Instruct", 1235814400, "Qwen2.5 0.5B Instruct", "Qwen2.5", "Instruct", "", "0.5B"},
        {"mistral-7b-v0.1", 147456, "Mistral 7b v0.1", "mistral", "7b", "v0.1", ""},
        {"bloom-7b1", 147456, "Bloom 7b1", "bloom", "7.1b", "", ""},
        {"TinyLlama-1.1B-Chat-v1.0", 1235814400, "TinyLlama 1.1B Chat v1.0", "TinyLlama", "Chat", "v1.0", "1.1B"},
    };
    for (const Case& c : cases) {
        const convert::ModelId m = convert::model_id_components(c.id, c.params);
        EXPECT_EQ(convert::id_to_title(m.name.value_or("")), c.title) << c.id;
        EXPECT_EQ(m.basename.value_or(""), c.basename) << c.id;
        EXPECT_EQ(m.finetune.value_or(""), c.finetune) << c.id;
        EXPECT_EQ(m.version.value_or(""), c.version) << c.id;
        EXPECT_EQ(m.size_label.value_or(""), c.size) << c.id;
    }
    EXPECT_EQ(convert::size_label(147456), "147K");
    EXPECT_EQ(convert::size_label(1235814400), "1.2B");
    EXPECT_EQ(convert::size_label(999), "1.0K");
    EXPECT_EQ(convert::size_label(99950), "100K");
    EXPECT_EQ(convert::size_label(1500000), "1.5M");
}
