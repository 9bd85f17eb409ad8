#include "edgellm/synth.h"

#include <atomic>
#include <cmath>
#include <thread>

#include "kernels/quantize.h"
#include "text/unicode.h"

namespace edgellm {

namespace {

// name, n_embd, n_ff, n_layer, n_head, n_head_kv, n_vocab, n_ctx, head_dim, tied, rope, eps
const std::vector<ModelShape> kShapes = {
    {"tiny", 256, 768, 4, 8, 2, 4096, 2048, 0, false, 1e6f, 1e-6f},
    {"qwen2.5-0.5b", 896, 4864, 24, 14, 2, 151936, 32768, 0, true, 1e6f, 1e-6f},
    {"qwen2.5-1.5b", 1536, 8960, 28, 12, 2, 151936, 32768, 0, true, 1e6f, 1e-6f},
    {"qwen2.5-7b", 3584, 18944, 28, 28, 4, 152064, 32768, 0, false, 1e6f, 1e-6f},
    {"llama-3.2-1b", 2048, 8192, 16, 32, 8, 128256, 131072, 64, true, 5e5f, 1e-5f},
    {"qwen3-0.6b", 1024, 3072, 28, 16, 8, 151936, 40960, 128, true, 1e6f, 1e-6f},
    {"gemma3-270m", 640, 2048, 18, 4, 1, 262144, 32768, 256, true, 1e6f, 1e-6f},
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
};

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

// Lays out the model and, when path is given, writes it.
Result<SynthStats> synth_write(const std::string* path, const SynthOptions& o) {
    using R = Result<SynthStats>;
    const ModelShape* sh = find_model_shape(o.shape);
    if (!sh) {
        std::string names;
        for (const auto& s : kShapes) names += std::string(names.empty() ? "" : ", ") + s.name;
        return R::fail("unknown shape \"" + o.shape + "\" (known: " + names + ")");
    }
    if (o.arch != "llama" && o.arch != "qwen2" && o.arch != "qwen3" && o.arch != "gemma3")
        return R::fail("unknown architecture \"" + o.arch +
                       "\" (synth writes llama, qwen2, qwen3 or gemma3)");
    const bool qwen = o.arch == "qwen2" || o.arch == "qwen3";
    const bool bias = o.arch == "qwen2";
    const bool qk_norm = o.arch == "qwen3" || o.arch == "gemma3";
    const bool gemma = o.arch == "gemma3";
    const int64_t hd = sh->head_dim ? sh->head_dim : sh->n_embd / sh->n_head;
    const int64_t nq = sh->n_head * hd, nkv = sh->n_head_kv * hd;

    // Tensors in the order convert scripts write them: embeddings, blocks, output.
    std::vector<TensorDef> defs;
    auto w = [&](std::string name, int64_t in, int64_t out) {
        defs.push_back({std::move(name), {in, out}, 1.0f / std::sqrt((float)in), 0.0f});
    };
    auto v = [&](std::string name, int64_t n, float stddev, float offset) {
        defs.push_back({std::move(name), {n}, stddev, offset});
    };
    w("token_embd.weight", sh->n_embd, sh->n_vocab);
    for (int64_t l = 0; l < sh->n_layer; ++l) {
        const std::string p = "blk." + std::to_string(l) + ".";
        v(p + "attn_norm.weight", sh->n_embd, 0.05f, 1.0f);
        w(p + "attn_q.weight", sh->n_embd, nq);
        w(p + "attn_k.weight", sh->n_embd, nkv);
        w(p + "attn_v.weight", sh->n_embd, nkv);
        if (qk_norm) {
            v(p + "attn_q_norm.weight", hd, 0.05f, 1.0f);
            v(p + "attn_k_norm.weight", hd, 0.05f, 1.0f);
        }
        if (bias) {
            v(p + "attn_q.bias", nq, 0.02f, 0.0f);
            v(p + "attn_k.bias", nkv, 0.02f, 0.0f);
            v(p + "attn_v.bias", nkv, 0.02f, 0.0f);
        }
        w(p + "attn_output.weight", nq, sh->n_embd);
        if (gemma) v(p + "post_attention_norm.weight", sh->n_embd, 0.05f, 1.0f);
        v(p + "ffn_norm.weight", sh->n_embd, 0.05f, 1.0f);
        w(p + "ffn_gate.weight", sh->n_embd, sh->n_ff);
        w(p + "ffn_up.weight", sh->n_embd, sh->n_ff);
        w(p + "ffn_down.weight", sh->n_ff, sh->n_embd);
        if (gemma) v(p + "post_ffw_norm.weight", sh->n_embd, 0.05f, 1.0f);
    }
    v("output_norm.weight", sh->n_embd, 0.05f, 1.0f);
    if (!sh->tied_output) w("output.weight", sh->n_embd, sh->n_vocab);

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
    const std::vector<TensorType> plan = plan_tensor_types(specs, sh->n_head / sh->n_head_kv, qo);
    for (TensorType t : plan)
        if (!can_quantize(t))
            return R::fail(std::string("cannot write tensors of type ") + tensor_type_name(t));

    GgufWriter gw;
    const std::string a = o.arch + ".";
    gw.set("general.architecture", gguf_value(o.arch));
    gw.set("general.name", gguf_value("synthetic " + std::string(sh->name) + " (random weights)"));
    gw.set("general.file_type", gguf_value((uint32_t)o.type));
    gw.set("general.quantization_version", gguf_value((uint32_t)2));
    gw.set(a + "context_length", gguf_value((uint32_t)sh->n_ctx_train));
    gw.set(a + "embedding_length", gguf_value((uint32_t)sh->n_embd));
    gw.set(a + "block_count", gguf_value((uint32_t)sh->n_layer));
    gw.set(a + "feed_forward_length", gguf_value((uint32_t)sh->n_ff));
    gw.set(a + "attention.head_count", gguf_value((uint32_t)sh->n_head));
    gw.set(a + "attention.head_count_kv", gguf_value((uint32_t)sh->n_head_kv));
    if (sh->head_dim) {
        gw.set(a + "attention.key_length", gguf_value((uint32_t)hd));
        gw.set(a + "attention.value_length", gguf_value((uint32_t)hd));
    }
    gw.set(a + "rope.freq_base", gguf_value(sh->rope_base));
    gw.set(a + "attention.layer_norm_rms_epsilon", gguf_value(sh->rms_eps));
    // (the tiny shape's window is short, so a few dozen tokens already cross it)
    if (gemma)
        gw.set(a + "attention.sliding_window",
               gguf_value((uint32_t)(std::string(sh->name) == "tiny" ? 8 : 512)));

    // A byte-level vocabulary of the right size: the 256 byte characters, then distinct
    // two- or three-character strings, then the chat format's control tokens.
    const std::vector<std::string> specials =
        qwen    ? std::vector<std::string>{"<|endoftext|>", "<|im_start|>", "<|im_end|>"}
        : gemma ? std::vector<std::string>{"<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"}
                : std::vector<std::string>{"<|begin_of_text|>", "<|end_of_text|>",
                                           "<|start_header_id|>", "<|end_header_id|>",
                                           "<|eot_id|>"};
    std::vector<std::string> tokens;
    std::vector<int32_t> types;
    tokens.reserve((size_t)sh->n_vocab);
    auto byte_char = [](int b) { return unicode::byte_to_text((uint8_t)b); };
    const int64_t n_plain = sh->n_vocab - (int64_t)specials.size();
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
    gw.set("tokenizer.ggml.pre", gguf_value(qwen ? "qwen2" : "llama-bpe"));
    gw.set("tokenizer.ggml.tokens", gguf_value(gguf_string_array(std::move(tokens))));
    gw.set("tokenizer.ggml.token_type", gguf_value(gguf_int32_array(types)));
    gw.set("tokenizer.ggml.merges", gguf_value(gguf_string_array({})));
    gw.set("tokenizer.ggml.bos_token_id", gguf_value((uint32_t)n_plain));
    gw.set("tokenizer.ggml.eos_token_id", gguf_value((uint32_t)(qwen ? n_plain + 2 : n_plain + 1)));
    gw.set("tokenizer.ggml.add_bos_token", gguf_value(!qwen));

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
