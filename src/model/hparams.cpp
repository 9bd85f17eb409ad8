// Hyper-parameters of the supported architectures, from their GGUF metadata keys.
#include <cmath>

#include "model/model_impl.h"

namespace edgellm {

namespace {

// What differs between architectures served by the same forward pass.
struct ArchTraits {
    const char* name;
    bool rope_neox;   // Qwen2 uses NEOX pairing; LLaMA the original adjacent pairs
    bool qkv_bias;    // Qwen2 has q/k/v biases
    bool qk_norm;     // Qwen3, Gemma 3: RMSNorm per q and k head
    bool gemma;       // Gemma 3: post-norms, GELU, scaled embeddings, sliding windows
};

constexpr ArchTraits kArchs[] = {
    {"llama", false, false, false, false},
    {"qwen2", true, true, false, false},
    {"qwen3", true, false, true, false},
    {"gemma3", true, false, true, true},
};

}  // namespace

Result<HParams> read_hparams(const GgufFile& f) {
    using R = Result<HParams>;
    HParams hp;
    const auto arch = f.get_string("general.architecture");
    if (!arch) return R::fail(f.path() + ": missing general.architecture");
    const ArchTraits* traits = nullptr;
    for (const auto& a : kArchs)
        if (*arch == a.name) traits = &a;
    if (!traits)
        return R::fail(f.path() + ": architecture \"" + *arch +
                       "\" is not supported (supported: llama, qwen2, qwen3, gemma3)");
    hp.arch = *arch;
    const std::string p = hp.arch + ".";

    std::string missing;
    auto need_int = [&](const std::string& key, int64_t* out) {
        const auto v = f.get_int(p + key);
        if (!v || *v <= 0) {
            missing += (missing.empty() ? "" : ", ") + p + key;
            return;
        }
        *out = *v;
    };
    need_int("embedding_length", &hp.n_embd);
    need_int("block_count", &hp.n_layer);
    need_int("feed_forward_length", &hp.n_ff);
    need_int("attention.head_count", &hp.n_head);
    if (!missing.empty()) return R::fail(f.path() + ": missing or invalid metadata: " + missing);

    hp.n_ctx_train = f.get_int(p + "context_length").value_or(4096);
    hp.n_head_kv = f.get_int(p + "attention.head_count_kv").value_or(hp.n_head);
    if (hp.n_head_kv <= 0 || hp.n_head % hp.n_head_kv != 0)
        return R::fail(f.path() + ": " + p +
                       "attention.head_count_kv = " + std::to_string(hp.n_head_kv) +
                       " does not divide head_count " + std::to_string(hp.n_head));
    hp.head_dim = f.get_int(p + "attention.key_length").value_or(hp.n_embd / hp.n_head);
    const int64_t v_len = f.get_int(p + "attention.value_length").value_or(hp.head_dim);
    if (v_len != hp.head_dim)
        return R::fail(f.path() + ": key_length " + std::to_string(hp.head_dim) +
                       " != value_length " + std::to_string(v_len) + " is not supported");
    if (hp.head_dim <= 0 || hp.head_dim % 2 != 0)
        return R::fail(f.path() + ": head dimension " + std::to_string(hp.head_dim) +
                       " is not even");
    hp.rms_eps = (float)f.get_float(p + "attention.layer_norm_rms_epsilon").value_or(1e-5);
    hp.n_rot = f.get_int(p + "rope.dimension_count").value_or(hp.head_dim);
    if (hp.n_rot <= 0 || hp.n_rot > hp.head_dim || hp.n_rot % 2 != 0)
        return R::fail(f.path() + ": " + p + "rope.dimension_count = " + std::to_string(hp.n_rot) +
                       " must be even and at most the head dimension " +
                       std::to_string(hp.head_dim));
    hp.rope_freq_base = (float)f.get_float(p + "rope.freq_base").value_or(10000.0);

    // RoPE scaling: "none" or "linear" (positions divided by the factor). YaRN and friends
    // change the rotation itself; refuse them rather than compute wrong logits.
    const std::string scaling = f.get_string(p + "rope.scaling.type").value_or("none");
    double factor = f.get_float(p + "rope.scaling.factor").value_or(0.0);
    if (factor == 0.0) factor = f.get_float(p + "rope.scale_linear").value_or(1.0);
    if (scaling == "linear" ||
        (scaling == "none" && factor != 1.0 && f.find(p + "rope.scale_linear") != nullptr)) {
        if (!(factor > 0.0)) return R::fail(f.path() + ": rope scaling factor must be positive");
        hp.rope_freq_scale = (float)(1.0 / factor);
    } else if (scaling != "none") {
        return R::fail(f.path() + ": rope scaling type \"" + scaling + "\" is not supported yet");
    }
    hp.rope_neox = traits->rope_neox;
    hp.qkv_bias = traits->qkv_bias;
    hp.qk_norm = traits->qk_norm;
    if (traits->gemma) {
        // As llama.cpp's gemma3: every sixth layer global, the others a sliding window
        // with their own RoPE base (10000 unless the file says), queries scaled by
        // 1/sqrt(head_dim) (query_pre_attn_scalar), embeddings by sqrt(n_embd).
        hp.post_norms = true;
        hp.gelu_ffn = true;
        hp.embd_scale = std::sqrt((float)hp.n_embd);
        hp.q_scale = 1.0f / std::sqrt((float)hp.head_dim);
        hp.n_swa = f.get_int(p + "attention.sliding_window").value_or(0);
        hp.swa_period = f.get_int(p + "attention.sliding_window_pattern").value_or(6);
        hp.rope_freq_base_swa = (float)f.get_float(p + "rope.freq_base_swa").value_or(10000.0);
        hp.final_softcap = (float)f.get_float(p + "final_logit_softcapping").value_or(0.0);
        if (hp.n_swa < 0 || hp.swa_period < 0)
            return R::fail(f.path() + ": negative sliding window or pattern");
    }

    const GgufTensorInfo* embd = f.tensor("token_embd.weight");
    if (!embd) return R::fail(f.path() + ": missing tensor token_embd.weight");
    hp.n_vocab = embd->ne[1];
    hp.tied_output = f.tensor("output.weight") == nullptr;
    return hp;
}

}  // namespace edgellm
