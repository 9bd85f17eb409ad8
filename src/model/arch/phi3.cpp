// Phi-3 / Phi-3.5 / Phi-4-mini: q, k and v in one matrix, gate and up in one, partial
// rotary dimensions (NEOX), LongRoPE: per-frequency factors, the short ones up to the
// original context and the long ones beyond it, and every rotation scaled by attn_factor.
#include <cctype>
#include <cmath>

#include "model/arch/dense.h"
#include "model/arch/families.h"

namespace edgellm::arch {

namespace {

std::string finish(HParams& hp, const GgufFile&) {
    // llama.cpp turns Phi's sliding window off (its converters write it wrongly): so do we,
    // to compute what it computes. The models' windows (2047 for the 4k Phi-3-mini, none
    // for Phi-4-mini) matter only past them.
    hp.n_swa = 0;
    hp.swa_period = 0;
    if (hp.n_embd_q() != hp.n_embd) return "phi3 needs head_count * key_length = embedding_length";
    return {};
}

// llama.cpp's Phi3MiniModel converter, which writes its own keys (none of the generic RoPE
// scaling ones, no key length): the rotary dimensions of partial_rotary_factor, the
// original context, the window (0: none, Phi-4's), and LongRoPE's factors with the scale
// of every rotation when the config has them.
void convert(HfConvert& c) {
    const int64_t n_embd = c.need_integer("hidden_size");
    const int64_t n_head = c.need_integer("num_attention_heads");
    const auto positions = c.integer("n_positions");
    const int64_t n_ctx = positions ? *positions : c.need_integer("max_position_embeddings");
    const auto orig = c.integer("rope.original_max_position_embeddings");
    if (!orig) c.fail("config.json: \"original_max_position_embeddings\" missing (Phi-3's RoPE needs it)");
    const int64_t rot = (int64_t)(c.number("rope.partial_rotary_factor").value_or(1.0) * (double)n_embd) / n_head;
    // (its keys alone, in its order: none of the table's that it does not write, none of the
    // generic RoPE scaling ones)
    for (const ArchKey& k : phi3().keys) c.remove(k.key);
    for (const char* k : {"rope.scaling.type", "rope.scaling.factor", "rope.scaling.yarn_ext_factor",
                          "rope.scaling.yarn_attn_factor", "rope.scaling.yarn_beta_fast",
                          "rope.scaling.yarn_beta_slow"})
        c.remove(k);
    c.set_u32("context_length", (uint32_t)n_ctx);
    c.set_u32("rope.scaling.original_context_length", (uint32_t)*orig);
    c.set_u32("embedding_length", (uint32_t)n_embd);
    c.set_u32("feed_forward_length", (uint32_t)c.need_integer("intermediate_size"));
    c.set_u32("block_count", (uint32_t)c.need_integer("num_hidden_layers"));
    c.set_u32("attention.head_count", (uint32_t)n_head);
    c.set_u32("attention.head_count_kv", (uint32_t)c.need_integer("num_key_value_heads"));
    c.set_f32("attention.layer_norm_rms_epsilon", (float)c.need_number("rms_norm_eps"));
    c.set_u32("rope.dimension_count", (uint32_t)rot);
    c.set_f32("rope.freq_base", (float)c.need_number("rope.rope_theta"));
    c.move_to_end("general.file_type");
    c.set_u32("attention.sliding_window", (uint32_t)c.integer("sliding_window").value_or(0));

    const auto longf = c.numbers("rope.long_factor");
    if (!longf || longf->empty()) return;
    const double scale = (double)n_ctx / (double)*orig;
    auto type = c.string("rope.rope_type").value_or("");
    for (char& ch : type) ch = (char)std::tolower((unsigned char)ch);
    double attn = 1.0;
    if (type.empty())
        c.fail("config.json: rope_scaling's \"type\" missing");
    else if (type == "su" || type == "longrope")
        attn = scale > 1.0 ? std::sqrt(1.0 + std::log(scale) / std::log((double)*orig)) : 1.0;
    else if (type == "yarn")
        attn = scale > 1.0 ? 0.1 * std::log(scale) + 1.0 : 1.0;
    else
        c.fail("config.json: rope_scaling type \"" + type + "\" is not Phi-3's (longrope, su, yarn)");
    c.set_f32_early("rope.scaling.attn_factor", (float)attn);
    const auto shortf = c.numbers("rope.short_factor");
    if (!shortf) c.fail("config.json: rope_scaling's \"short_factor\" missing");
    if (shortf->size() != longf->size() || (int64_t)longf->size() * 2 != rot)
        c.fail("config.json: rope_scaling's long_factor and short_factor need " + std::to_string(rot / 2) +
               " values each (rope dimensions / 2), not " + std::to_string(longf->size()) + " and " +
               std::to_string(shortf->size()));
    auto to_f32 = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
    c.add_tensor("rope_factors_long.weight", to_f32(*longf));
    c.add_tensor("rope_factors_short.weight", to_f32(*shortf));
}

// Its set_vocab: tokenizer.json's BPE for a GPT2Tokenizer (Phi-4), else tokenizer.model
// with the added tokens of added_tokens.json, tokenizer_config.json and tokenizer.json.
void convert_vocab(HfConvert& c) {
    if (c.has_file("tokenizer_config.json")) {
        const auto cls = c.file_string("tokenizer_config.json", "tokenizer_class");
        if (!cls) c.fail("tokenizer_config.json: \"tokenizer_class\" missing");
        if (*cls == "GPT2Tokenizer") return c.vocab_bpe();
    }
    if (!c.vocab_sentencepiece(HfConvert::SpmAdded::Phi3)) c.fail("tokenizer.model missing");
}

}  // namespace

const ArchInfo& phi3() {
    static const ArchInfo a = [] {
        using S = Slot;
        using D = Dim;
        using Q = QuantRole;
        ArchInfo a;
        a.name = "phi3";
        a.hf_archs = {"Phi3ForCausalLM"};
        a.keys = dense_keys();
        a.keys.push_back({"rope.scaling.original_context_length", nullptr, Field::RopeCtxOrig, false, false});
        a.keys.push_back({"rope.scaling.attn_factor", nullptr, Field::RopeAttnFactor, true, false, 1.0});
        a.tensors = dense_tensors({});
        // q/k/v fused (as Phi's checkpoints are), or apart
        for (const char* n : {"attn_q.weight", "attn_k.weight", "attn_v.weight"}) {
            ArchTensor& t = tensor(a.tensors, n);
            t.required = false;
            t.instead = "attn_qkv.weight";
            t.hf = nullptr;
        }
        a.tensors.insert(a.tensors.begin() + 2,
                         {"attn_qkv.weight", "model.layers.%d.self_attn.qkv_proj.weight", S::Wqkv, D::Embd, D::Qkv,
                          true, false, "attn_q.weight", Q::AttnQkv, HfMap::Copy});
        // gate and up fused: silu(first half) * second half
        std::erase_if(a.tensors, [](const ArchTensor& t) { return t.slot == S::Gate; });
        ArchTensor& up = tensor(a.tensors, "ffn_up.weight");
        up.ne1 = D::FfPair;
        up.hf = "model.layers.%d.mlp.gate_up_proj.weight";
        a.tensors.push_back({"rope_factors_long.weight", nullptr, S::RopeLong, D::RotHalf, D::One, false, false, nullptr, Q::Keep, HfMap::Copy});
        a.tensors.push_back({"rope_factors_short.weight", nullptr, S::RopeShort, D::RotHalf, D::One, false, false, nullptr, Q::Keep, HfMap::Copy});
        a.rope_neox = true;
        a.longrope = true;
        a.finish = finish;
        a.convert = convert;
        a.convert_vocab = convert_vocab;
        // (transformers' Phi3Config)
        a.hf_defaults = {{"num_key_value_heads", 0, "num_attention_heads"}, {"rope_theta", 10000.0},
                         {"rms_norm_eps", 1e-5}, {"max_position_embeddings", 4096},
                         {"original_max_position_embeddings", 4096}, {"partial_rotary_factor", 1.0}};
        return a;
    }();
    return a;
}

}  // namespace edgellm::arch
