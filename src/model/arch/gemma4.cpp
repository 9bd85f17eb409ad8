// Gemma 4 (text; the dense E2B/E4B): Gemma 3's block with per-layer hyper-parameters —
// sliding layers named one by one, each kind with its own head size, rotated dimensions
// and RoPE base, the global layers' "proportional" RoPE a frequency factor of 1e30 on the
// dimensions left unrotated — V RMS-normed without a weight, attention scale 1, the last
// layers reading an earlier layer's K/V (shared_kv_layers), per-layer embeddings (a token
// table of their own, read row by row, and a projection of the embedding, gated into each
// layer's output), a scalar per layer on its output, and soft-capped logits. As llama.cpp's
// src/models/gemma4.cpp; its converter (conversion/gemma.py) writes the keys and tensors.
#include <cmath>

#include "model/arch/dense.h"
#include "model/arch/families.h"

namespace edgellm::arch {

namespace {

std::string finish(HParams& hp, const GgufFile& f) {
    const std::string p = hp.arch + ".";
    if (const auto experts = f.get_int(p + "expert_count"); experts && *experts > 0)
        return p + "expert_count = " + std::to_string(*experts) +
               ": a mixture of experts (Gemma 4 26B-A4B) is not supported; edgellm runs the "
               "dense Gemma 4 (E2B, E4B)";
    if (!f.find(p + "embedding_length_per_layer_input"))
        return "missing metadata " + p + "embedding_length_per_layer_input";
    if (hp.n_embd_per_layer < 0) return "negative " + p + "embedding_length_per_layer_input";
    if (hp.n_embd_per_layer == 0 && f.tensor("per_layer_token_embd.weight"))
        return "per-layer embedding tensors in a model whose " + p +
               "embedding_length_per_layer_input is 0";
    if (hp.n_swa <= 0) return p + "attention.sliding_window must be positive";
    // Both kinds of layer: keys and values of one size, an even head, no more rotated
    // dimensions than it has (absent, the sliding layers rotate as many as the global ones,
    // as llama.cpp reads it).
    const std::optional<int64_t> v_swa = f.get_int(p + "attention.value_length_swa");
    if (v_swa && *v_swa != hp.head_dim_swa)
        return p + "attention.key_length_swa " + std::to_string(hp.head_dim_swa) + " != value_length_swa " +
               std::to_string(*v_swa) + " (Gemma 4 needs them equal)";
    if (hp.n_rot_swa <= 0) hp.n_rot_swa = hp.n_rot;
    if (hp.head_dim_swa <= 0 || hp.head_dim_swa % 2 != 0)
        return "sliding layers' head dimension " + std::to_string(hp.head_dim_swa) + " is not even";
    if (hp.n_rot_swa % 2 != 0 || hp.n_rot_swa > hp.head_dim_swa)
        return p + "rope.dimension_count_swa = " + std::to_string(hp.n_rot_swa) +
               " must be even and at most the sliding layers' head dimension " +
               std::to_string(hp.head_dim_swa);
    // Shared layers read the last layer with a cache (a global layer) or the one before it
    // (sliding): llama.cpp's choice, which holds only when those two are of these kinds
    // (and then of the same heads).
    const std::string shared = p + "attention.shared_kv_layers = " + std::to_string(hp.n_kv_shared);
    if (hp.n_kv_shared < 0 || hp.n_layer - hp.n_kv_shared < 2)
        return shared + " leaves fewer than 2 of " + std::to_string(hp.n_layer) +
               " layers with a cache";
    for (int64_t il = hp.n_layer - hp.n_kv_shared; il < hp.n_layer; ++il) {
        const int64_t src = hp.kv_layer(il);
        if (hp.is_swa(src) != hp.is_swa(il) || hp.n_head_kv_at(src) != hp.n_head_kv_at(il))
            return shared + ": layer " + std::to_string(il) + " would read the cache of layer " +
                   std::to_string(src) + ", of the other kind (sliding/global) or other KV heads";
    }
    hp.post_norms = true;
    hp.gelu_ffn = true;
    hp.v_norm = true;
    hp.rope_factors_global = true;
    hp.embd_scale = std::sqrt((float)hp.n_embd);
    hp.q_scale = 1.0f;  // (self.scaling = 1: no 1/sqrt(head_dim) anywhere)
    return {};
}

}  // namespace

const ArchInfo& gemma4() {
    static const ArchInfo a = [] {
        using S = Slot;
        using D = Dim;
        using F = Field;
        using Q = QuantRole;
        ArchInfo a;
        a.name = "gemma4";
        // (no hf_archs yet: convert has no hook for Gemma 4's checkpoints and refuses them
        // by name until it does — Gemma4ForCausalLM, Gemma4ForConditionalGeneration)
        a.rope_neox = true;
        a.qk_norm = true;
        a.gemma = true;  // (and what finish sets)
        a.keys = dense_keys();
        for (ArchKey& k : a.keys) {
            if (k.field == F::Ff || k.field == F::HeadsKv) k.form = KeyForm::Either;
            if (k.field == F::KeyLength || k.field == F::ValueLength) k.hf = "global_head_dim";
        }
        a.keys.push_back({.key = "attention.sliding_window", .hf = "sliding_window", .field = F::Swa, .is_float = false, .required = true});
        a.keys.push_back({.key = "attention.sliding_window_pattern", .hf = nullptr, .field = F::SwaPattern, .is_float = false, .required = true, .form = KeyForm::PerLayer});
        a.keys.push_back({.key = "attention.key_length_swa", .hf = "head_dim", .field = F::KeyLengthSwa, .is_float = false, .required = true});
        a.keys.push_back({.key = "attention.value_length_swa", .hf = "head_dim", .field = F::ValueLengthSwa, .is_float = false, .required = true});
        a.keys.push_back({.key = "rope.dimension_count_swa", .hf = nullptr, .field = F::RotSwa, .is_float = false, .required = false});
        a.keys.push_back({.key = "rope.freq_base_swa", .hf = nullptr, .field = F::RopeBaseSwa, .is_float = true, .required = false, .def = 10000.0});
        a.keys.push_back({.key = "attention.shared_kv_layers", .hf = "num_kv_shared_layers", .field = F::SharedKvLayers, .is_float = false, .required = false, .def = 0});
        a.keys.push_back({.key = "embedding_length_per_layer_input", .hf = "hidden_size_per_layer_input", .field = F::EmbdPerLayer, .is_float = false, .required = false, .def = 0});
        a.keys.push_back({.key = "final_logit_softcapping", .hf = "final_logit_softcapping", .field = F::FinalSoftcap, .is_float = true, .required = false, .def = 0.0});

        a.tensors = dense_tensors({.qk_norm = true, .post_norms = true});
        // Layers that share an earlier layer's cache have no K (nor its norm) and no V; a
        // layer without V uses its K as V (llama.cpp's use_alternative_attention).
        tensor(a.tensors, "attn_k.weight").when = When::KvLayer;
        tensor(a.tensors, "attn_k_norm.weight").when = When::KvLayer;
        ArchTensor& v = tensor(a.tensors, "attn_v.weight");
        v.when = When::KvLayer;
        v.required = false;
        const std::vector<ArchTensor> more = {
            // per-layer embeddings: the table (llama.cpp's quantizer treats it as the token
            // embedding), the embedding's projection (never quantized), their norm, and each
            // layer's gate, projection and norm
            {"per_layer_token_embd.weight", "model.embed_tokens_per_layer.weight", S::PerLayerTokEmbd, D::PerLayerAll, D::Vocab, false, true, nullptr, Q::TokEmbd, HfMap::Copy, When::PerLayerEmbd, true},
            {"per_layer_model_proj.weight", "model.per_layer_model_projection.weight", S::PerLayerModelProj, D::Embd, D::PerLayerAll, false, true, nullptr, Q::Keep, HfMap::Copy, When::PerLayerEmbd},
            {"per_layer_proj_norm.weight", "model.per_layer_projection_norm.weight", S::PerLayerProjNorm, D::PerLayer, D::One, false, true, nullptr, Q::Keep, HfMap::Copy, When::PerLayerEmbd},
            {"inp_gate.weight", "model.layers.%d.per_layer_input_gate.weight", S::PerLayerGate, D::Embd, D::PerLayer, true, true, nullptr, Q::AttnQ, HfMap::Copy, When::PerLayerEmbd},
            {"proj.weight", "model.layers.%d.per_layer_projection.weight", S::PerLayerProj, D::PerLayer, D::Embd, true, true, nullptr, Q::AttnQ, HfMap::Copy, When::PerLayerEmbd},
            {"post_norm.weight", "model.layers.%d.post_per_layer_input_norm.weight", S::PerLayerPostNorm, D::Embd, D::One, true, true, nullptr, Q::Keep, HfMap::Copy, When::PerLayerEmbd},
            {"layer_output_scale.weight", "model.layers.%d.layer_scalar", S::OutScale, D::One, D::One, true, false, nullptr, Q::Keep, HfMap::Copy},
            // the global layers' frequency factors: 1 on the rotated dimensions, 1e30 on
            // the others (made by convert from partial_rotary_factor)
            {"rope_freqs.weight", nullptr, S::RopeFreqs, D::HeadHalf, D::One, false, true, nullptr, Q::Keep, HfMap::Copy},
        };
        a.tensors.insert(a.tensors.end(), more.begin(), more.end());
        const char* moe = "a mixture-of-experts tensor (Gemma 4 26B-A4B): edgellm runs the dense Gemma 4 (E2B, E4B)";
        a.refused = {
            {"v.", nullptr, "an image encoder's tensor: edgellm runs Gemma 4's text model only (use the text GGUF, without its mmproj)"},
            {"a.", nullptr, "an audio encoder's tensor: edgellm runs Gemma 4's text model only (use the text GGUF, without its mmproj)"},
            {"mm.", nullptr, "a multimodal projector's tensor: edgellm runs Gemma 4's text model only (use the text GGUF, without its mmproj)"},
            {nullptr, "_exps", moe},
            {nullptr, "ffn_gate_inp", moe},
            {nullptr, "ffn_pre_norm_2", moe},
            {nullptr, "ffn_post_norm_1", moe},
            {nullptr, "ffn_post_norm_2", moe},
        };
        a.finish = finish;
        return a;
    }();
    return a;
}

}  // namespace edgellm::arch
