#include "edgellm/synth.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>

#include "edgellm/arch.h"
#include "kernels/quantize.h"
#include "text/unicode.h"

namespace edgellm {

namespace {

// Real models' shapes (their config.json), and tiny ones for the golden tests.
const std::vector<ModelShape> kShapes = {
    {.name = "tiny", .arch = "qwen2", .n_embd = 256, .n_ff = 768, .n_layer = 4, .n_head = 8,
     .n_head_kv = 2, .n_vocab = 4096, .n_ctx_train = 2048, .rope_base = 1e6f},
    // tiny Phi-3 (a name without "phi3": llama.cpp then expects Phi-3's own tokens): partial
    // rotary dimensions, LongRoPE's long factors for contexts past 512
    {.name = "tiny-longrope", .arch = "phi3", .n_embd = 256, .n_ff = 768, .n_layer = 4, .n_head = 8,
     .n_head_kv = 2, .n_vocab = 4096, .n_ctx_train = 2048, .tied_output = true,
     .rope_base = 1e4f, .rms_eps = 1e-5f, .n_rot = 24, .n_ctx_orig = 512},
    {.name = "qwen2.5-0.5b", .arch = "qwen2", .n_embd = 896, .n_ff = 4864, .n_layer = 24,
     .n_head = 14, .n_head_kv = 2, .n_vocab = 151936, .n_ctx_train = 32768, .tied_output = true,
     .rope_base = 1e6f},
    {.name = "qwen2.5-1.5b", .arch = "qwen2", .n_embd = 1536, .n_ff = 8960, .n_layer = 28,
     .n_head = 12, .n_head_kv = 2, .n_vocab = 151936, .n_ctx_train = 32768, .tied_output = true,
     .rope_base = 1e6f},
    {.name = "qwen2.5-7b", .arch = "qwen2", .n_embd = 3584, .n_ff = 18944, .n_layer = 28,
     .n_head = 28, .n_head_kv = 4, .n_vocab = 152064, .n_ctx_train = 32768, .rope_base = 1e6f},
    {.name = "llama-3.2-1b", .arch = "llama", .n_embd = 2048, .n_ff = 8192, .n_layer = 16,
     .n_head = 32, .n_head_kv = 8, .n_vocab = 128256, .n_ctx_train = 131072, .head_dim = 64,
     .tied_output = true, .rope_base = 5e5f, .rms_eps = 1e-5f},
    {.name = "llama-3.2-3b", .arch = "llama", .n_embd = 3072, .n_ff = 8192, .n_layer = 28,
     .n_head = 24, .n_head_kv = 8, .n_vocab = 128256, .n_ctx_train = 131072, .head_dim = 128,
     .tied_output = true, .rope_base = 5e5f, .rms_eps = 1e-5f},
    {.name = "smollm2-135m", .arch = "llama", .n_embd = 576, .n_ff = 1536, .n_layer = 30,
     .n_head = 9, .n_head_kv = 3, .n_vocab = 49152, .n_ctx_train = 8192, .tied_output = true,
     .rope_base = 1e5f, .rms_eps = 1e-5f},
    {.name = "smollm3-3b", .arch = "smollm3", .n_embd = 2048, .n_ff = 11008, .n_layer = 36,
     .n_head = 16, .n_head_kv = 4, .n_vocab = 128256, .n_ctx_train = 65536, .tied_output = true,
     .rope_base = 5e6f},
    {.name = "phi-4-mini", .arch = "phi3", .n_embd = 3072, .n_ff = 8192, .n_layer = 32,
     .n_head = 24, .n_head_kv = 8, .n_vocab = 200064, .n_ctx_train = 131072, .tied_output = true,
     .rope_base = 1e4f, .rms_eps = 1e-5f, .n_rot = 96, .n_ctx_orig = 4096},
    {.name = "qwen3-0.6b", .arch = "qwen3", .n_embd = 1024, .n_ff = 3072, .n_layer = 28,
     .n_head = 16, .n_head_kv = 8, .n_vocab = 151936, .n_ctx_train = 40960, .head_dim = 128,
     .tied_output = true, .rope_base = 1e6f},
    {.name = "gemma3-270m", .arch = "gemma3", .n_embd = 640, .n_ff = 2048, .n_layer = 18,
     .n_head = 4, .n_head_kv = 1, .n_vocab = 262144, .n_ctx_train = 32768, .head_dim = 256,
     .tied_output = true, .rope_base = 1e6f},
    // tiny Gemma 4: layers 2, 5, 8 global (heads of 64, one KV head, a quarter of their
    // dimensions rotated), the others sliding over 8 positions (heads of 32, two KV heads);
    // layers 6-8 read the caches of layers 4 (sliding) and 5 (global), with FFNs twice as
    // wide; per-layer embeddings of 32
    {.name = "tiny-gemma4", .arch = "gemma4", .n_embd = 256, .n_ff = 512, .n_layer = 9,
     .n_head = 4, .n_head_kv = 2, .n_vocab = 4096, .n_ctx_train = 2048, .head_dim = 64,
     .tied_output = true, .rope_base = 1e6f, .swa_period = 3, .n_swa = 8, .head_dim_swa = 32,
     .n_head_kv_global = 1, .n_embd_per_layer = 32, .n_kv_shared = 3,
     .double_wide_shared = true, .rope_partial = 0.25f, .final_softcap = 30.0f},
    // Gemma 4 E2B (google/gemma-4-E2B's text_config; see docs/architectures.md for where
    // each value comes from)
    {.name = "gemma4-e2b", .arch = "gemma4", .n_embd = 1536, .n_ff = 6144, .n_layer = 35,
     .n_head = 8, .n_head_kv = 1, .n_vocab = 262144, .n_ctx_train = 131072, .head_dim = 512,
     .tied_output = true, .rope_base = 1e6f, .swa_period = 5, .n_swa = 512,
     .head_dim_swa = 256, .n_embd_per_layer = 256, .n_kv_shared = 20,
     .double_wide_shared = true, .rope_partial = 0.25f, .final_softcap = 30.0f},
    // tiny LFM2: short convolutions of 3 taps on layers 0, 1, 3 and 4, attention on 2 and 5
    {.name = "tiny-lfm2", .arch = "lfm2", .n_embd = 256, .n_ff = 768, .n_layer = 6, .n_head = 8,
     .n_head_kv = 2, .n_vocab = 4096, .n_ctx_train = 2048, .tied_output = true,
     .rope_base = 1e6f, .rms_eps = 1e-5f, .attn_layers = (1u << 2) | (1u << 5), .conv_kernel = 3},
    // LFM2-350M and LFM2-1.2B (LiquidAI's config.json: attention on layers 2, 5, 8, 10, 12
    // and 14 of 16, conv_L_cache 3, block_ff_dim 6656 / 12288 auto-adjusted to 4608 / 8192 as
    // llama.cpp's converter does; see docs/architectures.md)
    {.name = "lfm2-350m", .arch = "lfm2", .n_embd = 1024, .n_ff = 4608, .n_layer = 16,
     .n_head = 16, .n_head_kv = 8, .n_vocab = 65536, .n_ctx_train = 128000, .tied_output = true,
     .rope_base = 1e6f, .rms_eps = 1e-5f,
     .attn_layers = (1u << 2) | (1u << 5) | (1u << 8) | (1u << 10) | (1u << 12) | (1u << 14),
     .conv_kernel = 3},
    {.name = "lfm2-1.2b", .arch = "lfm2", .n_embd = 2048, .n_ff = 8192, .n_layer = 16,
     .n_head = 32, .n_head_kv = 8, .n_vocab = 65536, .n_ctx_train = 128000, .tied_output = true,
     .rope_base = 1e6f, .rms_eps = 1e-5f,
     .attn_layers = (1u << 2) | (1u << 5) | (1u << 8) | (1u << 10) | (1u << 12) | (1u << 14),
     .conv_kernel = 3},
};

uint64_t splitmix64(uint64_t* s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// Uniform in [-a, a) with a = sqrt(3) * stddev: the variance of the usual init.
void fill_uniform(float* x, int64_t n, float stddev, float offset, uint64_t seed) {
    const float a = std::sqrt(3.0f) * stddev;
    uint64_t s = seed;
    for (int64_t i = 0; i < n; ++i) {
        const double u = (double)(splitmix64(&s) >> 11) * (1.0 / 9007199254740992.0);
        x[i] = offset + (float)((2.0 * u - 1.0) * a);
    }
}

struct TensorDef {
    std::string name;
    std::vector<int64_t> ne;
    float stddev, offset;  // weights: 1/sqrt(fan_in), 0; norms: small, 1
    std::vector<float> values = {};  // these instead of random ones (a single row)
    bool f32 = false;  // a matrix the converter writes in f32 whatever the type (LFM2's taps)
};

// Gemma 4's global layers' frequency factors, as its converter makes them: 1 for the
// rotated pairs (partial of the head), 1e30 (not turning) for the others.
std::vector<float> proportional_rope(int64_t head_dim, float partial) {
    const int64_t rotated = (int64_t)((float)head_dim * partial / 2.0f);
    std::vector<float> v((size_t)(head_dim / 2), 1e30f);
    std::fill(v.begin(), v.begin() + rotated, 1.0f);
    return v;
}

Result<SynthStats> synth_write(const std::string* path, const SynthOptions& o);

}  // namespace

const std::vector<ModelShape>& model_shapes() {
    return kShapes;
}

const ModelShape* find_model_shape(const std::string& name) {
    for (const auto& s : kShapes)
        if (name == s.name) return &s;
    return nullptr;
}

Result<SynthStats> synth_size(const SynthOptions& o) {
    return synth_write(nullptr, o);
}

Result<SynthStats> synth_model(const std::string& path, const SynthOptions& o) {
    return synth_write(&path, o);
}

namespace {

// A byte-level vocabulary of the right size: the 256 byte characters, then distinct
// two- or three-character strings, then the chat format's control tokens (LFM2's ChatML
// ones: <|im_end|> ends a turn).
void synthetic_vocabulary(GgufWriter& gw, int64_t n_vocab, bool qwen, bool gemma, bool lfm2) {
    const std::vector<std::string> specials =
        qwen    ? std::vector<std::string>{"<|endoftext|>", "<|im_start|>", "<|im_end|>"}
        : gemma ? std::vector<std::string>{"<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"}
        : lfm2  ? std::vector<std::string>{"<|startoftext|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"}
                : std::vector<std::string>{"<|begin_of_text|>", "<|end_of_text|>",
                                           "<|start_header_id|>", "<|end_header_id|>",
                                           "<|eot_id|>"};
    std::vector<std::string> tokens;
    std::vector<int32_t> types;
    tokens.reserve((size_t)n_vocab);
    auto byte_char = [](int b) { return unicode::byte_to_text((uint8_t)b); };
    const int64_t n_plain = n_vocab - (int64_t)specials.size();
    for (int64_t id = 0; id < n_plain; ++id) {
        if (id < 256)
            tokens.push_back(byte_char((int)id));
        else {
            std::string t;
            for (int64_t x = id; x > 0; x /= 256) t += byte_char((int)(x % 256));
            tokens.push_back(t);
        }
        types.push_back(1);
    }
    for (const auto& s : specials) {
        tokens.push_back(s);
        types.push_back(3);
    }
    gw.set("tokenizer.ggml.model", gguf_value("gpt2"));
    gw.set("tokenizer.ggml.pre", gguf_value(qwen ? "qwen2" : lfm2 ? "lfm2" : "llama-bpe"));  // (a byte-level BPE)
    gw.set("tokenizer.ggml.tokens", gguf_value(gguf_string_array(std::move(tokens))));
    gw.set("tokenizer.ggml.token_type", gguf_value(gguf_int32_array(types)));
    gw.set("tokenizer.ggml.merges", gguf_value(gguf_string_array({})));
    gw.set("tokenizer.ggml.bos_token_id", gguf_value((uint32_t)n_plain));
    gw.set("tokenizer.ggml.eos_token_id",
           gguf_value((uint32_t)(qwen ? n_plain + 2 : lfm2 ? n_plain + 3 : n_plain + 1)));
    gw.set("tokenizer.ggml.add_bos_token", gguf_value(!qwen));
}

// Lays out the model and, when path is given, writes it.
Result<SynthStats> synth_write(const std::string* path, const SynthOptions& o) {
    using R = Result<SynthStats>;
    const ModelShape* sh = find_model_shape(o.shape);
    if (!sh) {
        std::string names;
        for (const auto& s : kShapes) names += std::string(names.empty() ? "" : ", ") + s.name;
        return R::fail("unknown shape \"" + o.shape + "\" (known: " + names + ")");
    }
    const std::string arch_name = o.arch.empty() ? sh->arch : o.arch;
    const ArchInfo* arch = find_arch(arch_name);
    if (!arch)
        return R::fail("unknown architecture \"" + arch_name + "\" (synth writes " + arch_names() +
                       ")");
    const bool qwen = arch_name == "qwen2" || arch_name == "qwen3";
    const bool gemma = arch->gemma;
    HParams hp;
    hp.n_embd = sh->n_embd;
    hp.n_ff = sh->n_ff;
    hp.n_layer = sh->n_layer;
    hp.n_head = sh->n_head;
    hp.n_head_kv = sh->n_head_kv;
    hp.head_dim = sh->head_dim ? sh->head_dim : sh->n_embd / sh->n_head;
    hp.n_rot = sh->n_rot ? sh->n_rot : hp.head_dim;
    hp.n_vocab = sh->n_vocab;
    // A real vocabulary (a GGUF's tokenizer.* keys, e.g. llama.cpp's vocabulary-only files):
    // the embedding and output get its size.
    std::unique_ptr<GgufFile> vocab;
    if (!o.vocab.empty()) {
        auto v = GgufFile::open(o.vocab);
        if (!v) return R::fail(v.error());
        vocab = std::move(*v);
        const GgufValue* toks = vocab->find("tokenizer.ggml.tokens");
        if (!toks || !toks->as_array() || toks->as_array()->count == 0)
            return R::fail(o.vocab + ": no tokenizer.ggml.tokens");
        hp.n_vocab = (int64_t)toks->as_array()->count;
    }
    if (arch_name == "phi3" && hp.n_embd_q() != hp.n_embd)
        return R::fail("phi3 needs heads x head dimension = embedding width; shape " +
                       std::string(sh->name) + " has not");
    const bool gemma4 = arch_name == "gemma4";
    if (gemma4) {
        if (sh->swa_period <= 0)
            return R::fail("shape " + std::string(sh->name) + " has no Gemma 4 layout (sliding " +
                           "and global layers): use tiny-gemma4 or gemma4-e2b");
        hp.n_swa = sh->n_swa;
        hp.head_dim_swa = hp.n_rot_swa = sh->head_dim_swa;
        for (int64_t il = 0; il < sh->n_layer; ++il)
            hp.swa_layers.push_back(il % sh->swa_period != sh->swa_period - 1);
        hp.n_kv_shared = sh->n_kv_shared;
        hp.n_embd_per_layer = sh->n_embd_per_layer;
        for (int64_t il = 0; il < sh->n_layer; ++il) {
            if (sh->n_head_kv_global)
                hp.n_head_kv_arr.push_back(hp.is_swa(il) ? sh->n_head_kv : sh->n_head_kv_global);
            if (sh->double_wide_shared) hp.n_ff_arr.push_back(hp.has_kv(il) ? sh->n_ff : 2 * sh->n_ff);
        }
    }
    const bool lfm2 = arch->recurrent_without_kv_heads;
    if (lfm2) {
        if (sh->conv_kernel <= 0)
            return R::fail("shape " + std::string(sh->name) + " has no LFM2 layout (attention and " +
                           "short convolution layers): use tiny-lfm2, lfm2-350m or lfm2-1.2b");
        hp.conv_kernel = sh->conv_kernel;
        hp.conv_channels = hp.n_embd;
        for (int64_t il = 0; il < sh->n_layer; ++il) {
            const bool attn = (sh->attn_layers >> il) & 1;
            hp.recurrent_layers.push_back(attn ? 0 : 1);
            hp.n_head_kv_arr.push_back(attn ? sh->n_head_kv : 0);
        }
    }

    // Tensors in the order convert scripts write them: embeddings, blocks, the rest; of two
    // forms the checkpoint's (fused q/k/v for Phi-3); frequency factors of the family too.
    std::vector<TensorDef> defs;
    auto add = [&](const ArchTensor& t, int64_t il) {
        if (t.instead && !t.hf) return;
        if (t.slot == Slot::Output && sh->tied_output) return;
        if (!tensor_present(t, hp, il)) return;
        const std::string name = tensor_name(t, il);
        const int64_t ne0 = dim_length(t.ne0, hp, il), ne1 = dim_length(t.ne1, hp, il);
        if (t.ne1 != Dim::One) {
            defs.push_back({name, {ne0, ne1}, 1.0f / std::sqrt((float)ne0), 0.0f, {},
                            t.slot == Slot::ConvKernel});
            return;
        }
        switch (t.slot) {
            case Slot::Bq: case Slot::Bk: case Slot::Bv:
                defs.push_back({name, {ne0}, 0.02f, 0.0f});
                break;
            case Slot::RopeFreqs:
                if (gemma4) {
                    defs.push_back({name, {ne0}, 0.0f, 0.0f, proportional_rope(hp.head_dim, sh->rope_partial)});
                    break;
                }
                [[fallthrough]];
            case Slot::RopeLong: case Slot::RopeShort:
                // (factors >= 1, as real ones: low frequencies slowed down)
                defs.push_back({name, {ne0}, 0.5f, t.slot == Slot::RopeShort ? 1.2f : 2.0f});
                break;
            case Slot::QNorm: case Slot::KNorm:
                if (gemma4) {
                    // Gemma 4 scales no scores by 1/sqrt(head_dim): trained q and k norms
                    // carry it, about head_dim^-1/4 each (with norms of 1 the scores' spread
                    // is sqrt(head_dim) times a real model's, and a nearly hard softmax makes
                    // any rounding a different answer)
                    const float w = std::pow((float)ne0, -0.25f);
                    defs.push_back({name, {ne0}, 0.05f * w, w});
                    break;
                }
                [[fallthrough]];
            default:  // norms
                defs.push_back({name, {ne0}, 0.05f, 1.0f});
        }
    };
    auto first = [](const ArchTensor& t) { return t.slot == Slot::TokEmbd; };
    for (const ArchTensor& t : arch->tensors)
        if (!t.per_layer && first(t)) add(t, -1);
    for (int64_t l = 0; l < sh->n_layer; ++l)
        for (const ArchTensor& t : arch->tensors)
            if (t.per_layer) add(t, l);
    for (const ArchTensor& t : arch->tensors)
        if (!t.per_layer && !first(t)) {
            if ((t.slot == Slot::RopeLong || t.slot == Slot::RopeShort) && sh->n_ctx_orig == 0) continue;
            add(t, -1);
        }

    std::vector<TensorSpec> specs;
    for (const auto& d : defs) {
        TensorSpec s;
        s.name = d.name;
        s.n_dims = (int)d.ne.size();
        for (size_t k = 0; k < d.ne.size(); ++k) s.ne[k] = d.ne[k];
        s.type = TensorType::F32;
        specs.push_back(s);
    }
    QuantizeOptions qo;
    qo.ftype = o.type;
    qo.arch = arch_name;
    // (llama.cpp's n_gqa() is the first layer's: 0 for a recurrent one)
    const int64_t n_gqa = hp.n_head_kv_at(0) > 0 ? sh->n_head / hp.n_head_kv_at(0) : 0;
    std::vector<TensorType> plan = plan_tensor_types(specs, n_gqa, qo);
    // A matrix the quantizer keeps (Gemma 4's per_layer_model_proj) stays as the converter
    // wrote it: in 16 bits but in an f32 file.
    for (size_t i = 0; i < plan.size(); ++i)
        if (specs[i].n_dims == 2 && plan[i] == TensorType::F32 && o.type != FileType::F32 && !defs[i].f32)
            plan[i] = o.type == FileType::BF16 ? TensorType::BF16 : TensorType::F16;
    for (TensorType t : plan)
        if (!can_quantize(t))
            return R::fail(std::string("cannot write tensors of type ") + tensor_type_name(t));

    GgufWriter gw;
    const std::string a = arch_name + ".";
    gw.set("general.architecture", gguf_value(arch_name));
    gw.set("general.name", gguf_value("synthetic " + std::string(sh->name) + " (random weights)"));
    gw.set("general.file_type", gguf_value((uint32_t)o.type));
    gw.set("general.quantization_version", gguf_value((uint32_t)2));
    gw.set(a + "context_length", gguf_value((uint32_t)sh->n_ctx_train));
    gw.set(a + "embedding_length", gguf_value((uint32_t)sh->n_embd));
    gw.set(a + "block_count", gguf_value((uint32_t)sh->n_layer));
    // (per layer, as Gemma 4's converter writes them, where the layers differ)
    auto per_layer = [&](const std::vector<int64_t>& v, int64_t scalar) {
        if (v.empty()) return gguf_value((uint32_t)scalar);
        return gguf_value(gguf_int32_array(std::vector<int32_t>(v.begin(), v.end())));
    };
    gw.set(a + "feed_forward_length", per_layer(hp.n_ff_arr, sh->n_ff));
    gw.set(a + "attention.head_count", gguf_value((uint32_t)sh->n_head));
    gw.set(a + "attention.head_count_kv", per_layer(hp.n_head_kv_arr, sh->n_head_kv));
    if (sh->head_dim) {
        gw.set(a + "attention.key_length", gguf_value((uint32_t)hp.head_dim));
        gw.set(a + "attention.value_length", gguf_value((uint32_t)hp.head_dim));
    }
    if (sh->n_rot) gw.set(a + "rope.dimension_count", gguf_value((uint32_t)sh->n_rot));
    gw.set(a + "rope.freq_base", gguf_value(sh->rope_base));
    gw.set(a + "attention.layer_norm_rms_epsilon", gguf_value(sh->rms_eps));
    if (sh->n_ctx_orig) {
        // as convert writes Phi-3's LongRoPE: the original context and the rotations' scale
        const double scale = (double)sh->n_ctx_train / (double)sh->n_ctx_orig;
        gw.set(a + "rope.scaling.original_context_length", gguf_value((uint32_t)sh->n_ctx_orig));
        gw.set(a + "rope.scaling.attn_factor",
               gguf_value((float)(scale > 1.0 ? std::sqrt(1.0 + std::log(scale) / std::log((double)sh->n_ctx_orig))
                                              : 1.0)));
    }
    // (the tiny shapes' windows are short, so a few dozen tokens already cross them)
    if (gemma) {
        const int64_t window = sh->n_swa ? sh->n_swa : std::string(sh->name) == "tiny" ? 8 : 512;
        gw.set(a + "attention.sliding_window", gguf_value((uint32_t)window));
    }
    if (lfm2) gw.set(a + "shortconv.l_cache", gguf_value((uint32_t)sh->conv_kernel));
    if (gemma4) {
        // as conversion/gemma.py's Gemma4Model: the global layers rotate their whole head
        // (the factors leave part of it still), the sliding ones theirs
        std::vector<bool> pattern;
        for (int64_t il = 0; il < sh->n_layer; ++il) pattern.push_back(hp.is_swa(il));
        gw.set(a + "attention.sliding_window_pattern", gguf_value(gguf_bool_array(pattern)));
        gw.set(a + "attention.key_length_swa", gguf_value((uint32_t)sh->head_dim_swa));
        gw.set(a + "attention.value_length_swa", gguf_value((uint32_t)sh->head_dim_swa));
        gw.set(a + "rope.dimension_count", gguf_value((uint32_t)hp.head_dim));
        gw.set(a + "rope.dimension_count_swa", gguf_value((uint32_t)sh->head_dim_swa));
        gw.set(a + "rope.freq_base_swa", gguf_value(sh->rope_base_swa));
        gw.set(a + "attention.shared_kv_layers", gguf_value((uint32_t)sh->n_kv_shared));
        gw.set(a + "embedding_length_per_layer_input", gguf_value((uint32_t)sh->n_embd_per_layer));
        gw.set(a + "final_logit_softcapping", gguf_value(sh->final_softcap));
    }

    if (vocab) {
        for (const auto& [k, v] : vocab->metadata())
            if (k.starts_with("tokenizer.")) gw.set(k, v);
        gw.set(a + "vocab_size", gguf_value((uint32_t)hp.n_vocab));
    } else {
        synthetic_vocabulary(gw, sh->n_vocab, qwen, gemma, lfm2);
    }

    const int n_threads =
        o.n_threads > 0 ? o.n_threads : (int)std::max(1u, std::thread::hardware_concurrency());
    SynthStats st;
    for (size_t i = 0; i < defs.size(); ++i) {
        const TensorDef& d = defs[i];
        const TensorType to = plan[i];
        int64_t n = 1;
        for (int64_t x : d.ne) n *= x;
        st.n_params += n;
        st.bytes += row_size(to, d.ne[0]) * (size_t)(n / d.ne[0]);
        ++st.n_tensors;
        gw.add_tensor(d.name, to, d.ne, [&, i, to](uint8_t* dst, std::string* err) {
            const TensorDef& t = defs[i];
            const int64_t row = t.ne[0];
            const int64_t rows = t.ne.size() > 1 ? t.ne[1] : 1;
            const size_t out_row = row_size(to, row);
            std::atomic<int64_t> next{0};
            std::atomic<bool> ok{true};
            auto work = [&] {
                std::vector<float> buf((size_t)row);
                for (int64_t r; (r = next.fetch_add(1)) < rows;) {
                    // Each row has its own seed: the bytes do not depend on the threads.
                    if (!t.values.empty())
                        std::copy(t.values.begin(), t.values.end(), buf.begin());
                    else
                        fill_uniform(
                            buf.data(), row, t.stddev, t.offset,
                            o.seed * 0x100000001B3ull + (uint64_t)i * 0x1000003ull + (uint64_t)r);
                    if (!quantize_row(to, buf.data(), dst + (size_t)r * out_row, row)) ok = false;
                }
            };
            std::vector<std::thread> pool;
            for (int k = 1; k < n_threads; ++k) pool.emplace_back(work);
            work();
            for (auto& th : pool) th.join();
            if (!ok) *err = std::string("quantizing to ") + tensor_type_name(to) + " failed";
            if (ok && o.progress) o.progress(i, defs.size(), t.name, to);
            return ok.load();
        });
    }
    if (!path) return st;
    auto written = gw.write(*path);
    if (!written) return R::fail(written.error());
    return st;
}

}  // namespace

}  // namespace edgellm
