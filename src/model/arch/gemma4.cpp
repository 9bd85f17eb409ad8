// Gemma 4 (text; the dense E2B/E4B): Gemma 3's block with per-layer hyper-parameters —
// sliding layers named one by one, each kind with its own head size, rotated dimensions
// and RoPE base, the global layers' "proportional" RoPE a frequency factor of 1e30 on the
// dimensions left unrotated — V RMS-normed without a weight, attention scale 1, the last
// layers reading an earlier layer's K/V (shared_kv_layers), per-layer embeddings (a token
// table of their own, read row by row, and a projection of the embedding, gated into each
// layer's output), a scalar per layer on its output, and soft-capped logits. As llama.cpp's
// src/models/gemma4.cpp; its converter (conversion/gemma.py) writes the keys and tensors.
#include <algorithm>
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

// The global layers' value of a field that per_layer_config may give instead of a key of
// its own (transformers 5's config moves global_head_dim there): the first global layer's.
std::optional<int64_t> global_value(const HfConvert& c, const char* key, const char* per_layer,
                                    const std::vector<std::string>& types) {
    if (const auto v = c.integer(key)) return v;
    std::optional<int64_t> found;
    for (size_t il = 0; il < types.size(); ++il) {
        if (types[il] != "full_attention") continue;
        const auto v = c.integer("per_layer_config." + std::to_string(il) + "." + per_layer);
        if (v && found && *v != *found)
            c.fail("config.json: per_layer_config gives the global layers " + std::string(per_layer) + " " +
                   std::to_string(*found) + " and " + std::to_string(*v) + " (edgellm runs one)");
        if (v) found = v;
    }
    return found;
}

// llama.cpp's Gemma4Model converter, over Gemma3Model's: the shared-KV layers, the per-layer
// embeddings' width, each layer's kind, both kinds' head sizes and rotated dimensions, the
// FFN twice as wide on the shared layers (use_double_wide_mlp), the global layers' KV heads
// when they have their own; the global layers' "proportional" RoPE as frequency factors
// (1 on the rotated pairs, 1e30 on the others: those stay still). Its token embedding is cut
// as Gemma 3's.
void convert(HfConvert& c) {
    const char* moe = ": a mixture of experts (Gemma 4 26B-A4B), which edgellm does not run (it runs the dense "
                      "Gemma 4: E2B, E4B)";
    if (c.flag("enable_moe_block").value_or(false)) c.fail(std::string("config.json: \"enable_moe_block\" is true") + moe);
    if (const auto n = c.integer("num_experts"); n && *n > 0)
        c.fail("config.json: \"num_experts\" is " + std::to_string(*n) + moe);
    gemma3_convert_keys(c);

    const int64_t n_layer = c.need_integer("num_hidden_layers");
    const int64_t n_shared = c.need_integer("num_kv_shared_layers");
    c.set_u32("attention.shared_kv_layers", (uint32_t)n_shared);
    c.set_u32("embedding_length_per_layer_input", (uint32_t)c.integer("hidden_size_per_layer_input").value_or(0));
    const auto types = c.strings("layer_types");
    if (!types) c.fail("config.json: \"layer_types\" missing (Gemma 4 names each layer's kind)");
    std::vector<bool> swa;
    for (const std::string& t : *types) swa.push_back(t == "sliding_attention");
    c.set_bool_array("attention.sliding_window_pattern", swa);

    // (transformers' default when neither gives it)
    const int64_t head_dim_full = global_value(c, "global_head_dim", "head_dim", *types).value_or(512);
    const int64_t head_dim_swa = c.need_integer("head_dim");
    c.set_u32("attention.key_length", (uint32_t)head_dim_full);
    c.set_u32("attention.value_length", (uint32_t)head_dim_full);
    c.set_u32("attention.key_length_swa", (uint32_t)head_dim_swa);
    c.set_u32("attention.value_length_swa", (uint32_t)head_dim_swa);
    // (llama.cpp's find_hparam: the first of the two keys present, null included)
    const char* expert_ff = c.has("expert_intermediate_size") ? "expert_intermediate_size" : "moe_intermediate_size";
    if (const auto v = c.integer(expert_ff)) c.set_u32("expert_feed_forward_length", (uint32_t)*v);
    if (c.flag("use_double_wide_mlp").value_or(false)) {
        const int64_t n_ff = c.need_integer("intermediate_size");
        std::vector<int32_t> ff;
        for (int64_t il = 0; il < n_layer; ++il) ff.push_back((int32_t)(il < n_layer - n_shared ? n_ff : 2 * n_ff));
        c.set_i32_array("feed_forward_length", ff);
    }
    const auto kv_full = global_value(c, "num_global_key_value_heads", "num_key_value_heads", *types);
    if (const auto kv_swa = c.integer("num_key_value_heads"); kv_full && kv_swa) {
        std::vector<int32_t> kv;
        for (bool s : swa) kv.push_back((int32_t)(s ? *kv_swa : *kv_full));
        c.set_i32_array("attention.head_count_kv", kv);
    }
    // (the sliding layers' rotated part: rope_parameters' own partial_rotary_factor, outside
    // its full_attention and sliding_attention)
    const char* rope = c.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
    const double partial_swa = c.number(std::string(rope) + ".partial_rotary_factor").value_or(1.0);
    c.set_u32("rope.dimension_count", (uint32_t)head_dim_full);
    c.set_u32("rope.dimension_count_swa", (uint32_t)(int64_t)((double)head_dim_swa * partial_swa));

    const auto rope_type = c.string("rope_parameters.full_attention.rope_type");
    if (rope_type != "proportional")
        c.fail("config.json: rope_parameters.full_attention.rope_type is " +
               (rope_type ? "\"" + *rope_type + "\"" : std::string("missing")) +
               ", not \"proportional\" (Gemma 4's global layers)");
    const double partial = c.need_number("rope_parameters.full_attention.partial_rotary_factor");
    const auto n_rot = (int64_t)((double)head_dim_full * partial / 2.0);
    std::vector<float> factors((size_t)(head_dim_full / 2), 1e30f);
    std::fill_n(factors.begin(), std::min<int64_t>(n_rot, (int64_t)factors.size()), 1.0f);
    c.add_tensor("rope_freqs.weight", std::move(factors));

    // (Gemma3Model's cut: a tokenizer.model counts vocab_size_per_layer_input or vocab_size
    // tokens, tokenizer.json its vocabulary and added tokens)
    int64_t rows = c.json_entries("tokenizer.json", "model.vocab") + c.json_entries("tokenizer.json", "added_tokens");
    if (c.has_file("tokenizer.model")) {
        const int64_t per_layer = c.integer("vocab_size_per_layer_input").value_or(0);
        rows = per_layer > 0 ? per_layer : c.need_integer("vocab_size");
    }
    c.keep_rows("token_embd.weight", rows);
}

// Its set_vocab: tokenizer.json through transformers (LlamaHfVocab), the channel, tool-call
// and string-quote markers typed as text the chat parser sees; BOS added, no space prefix.
void convert_vocab(HfConvert& c) {
    c.vocab_llama_hf("gemma4", {"<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", "<|tool_response>",
                                "<tool_response|>", "<|\"|>"});
    c.set_bool("tokenizer.ggml.add_space_prefix", false);
    c.set_bool("tokenizer.ggml.add_bos_token", true);
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
        a.hf_archs = {"Gemma4ForConditionalGeneration", "Gemma4ForCausalLM"};
        a.rope_neox = true;
        a.qk_norm = true;
        a.gemma = true;  // (and what finish sets)
        // (convert writes TextModel's keys from config.json, where `hf` names a field, in this
        // order; the others are the convert hook's, in llama.cpp's order)
        a.keys = dense_keys();
        for (ArchKey& k : a.keys)
            if (k.field == F::Ff || k.field == F::HeadsKv) k.form = KeyForm::Either;
        a.keys.insert(std::find_if(a.keys.begin(), a.keys.end(), [](const ArchKey& k) { return k.field == F::RopeBase; }) + 1,
                      {.key = "rope.freq_base_swa", .hf = "rope_swa.rope_theta", .field = F::RopeBaseSwa, .is_float = true, .required = false, .def = 10000.0});
        a.keys.push_back({.key = "attention.sliding_window", .hf = nullptr, .field = F::Swa, .is_float = false, .required = true});
        a.keys.push_back({.key = "attention.sliding_window_pattern", .hf = nullptr, .field = F::SwaPattern, .is_float = false, .required = true, .form = KeyForm::PerLayer});
        a.keys.push_back({.key = "attention.key_length_swa", .hf = nullptr, .field = F::KeyLengthSwa, .is_float = false, .required = true});
        a.keys.push_back({.key = "attention.value_length_swa", .hf = nullptr, .field = F::ValueLengthSwa, .is_float = false, .required = true});
        a.keys.push_back({.key = "rope.dimension_count_swa", .hf = nullptr, .field = F::RotSwa, .is_float = false, .required = false});
        a.keys.push_back({.key = "attention.shared_kv_layers", .hf = nullptr, .field = F::SharedKvLayers, .is_float = false, .required = false, .def = 0});
        a.keys.push_back({.key = "embedding_length_per_layer_input", .hf = nullptr, .field = F::EmbdPerLayer, .is_float = false, .required = false, .def = 0});
        a.keys.push_back({.key = "final_logit_softcapping", .hf = nullptr, .field = F::FinalSoftcap, .is_float = true, .required = false, .def = 0.0});

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
        a.convert = convert;
        a.convert_vocab = convert_vocab;
        // (transformers' Gemma4TextConfig: what llama.cpp's converter reads, through
        // transformers 5, when config.json leaves it out)
        a.hf_defaults = {{"vocab_size", 262144}, {"head_dim", 256}, {"sliding_window", 512},
                         {"num_kv_shared_layers", 0}};
        return a;
    }();
    return a;
}

}  // namespace edgellm::arch
