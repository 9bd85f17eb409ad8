// Gemma 3 (text): norms after attention and FFN too, GELU FFN, embeddings scaled by
// sqrt(n_embd), sliding-window layers with their own RoPE base, q/k head norms.
#include <algorithm>
#include <cmath>

#include "model/arch/dense.h"
#include "model/arch/families.h"

namespace edgellm::arch {

namespace {

std::string finish(HParams& hp, const GgufFile&) {
    // As llama.cpp's gemma3: every sixth layer global (the pattern's default), the others
    // a sliding window; queries scaled by 1/sqrt(head_dim) (query_pre_attn_scalar),
    // embeddings by sqrt(n_embd).
    hp.post_norms = true;
    hp.gelu_ffn = true;
    hp.embd_scale = std::sqrt((float)hp.n_embd);
    hp.q_scale = 1.0f / std::sqrt((float)hp.head_dim);
    if (hp.n_swa < 0 || hp.swa_period < 0) return "negative sliding window or pattern";
    return {};
}

// llama.cpp's Gemma3Model converter: its keys, and the token embedding cut to the
// tokenizer's tokens (rows past them are never looked up).
void convert(HfConvert& c) {
    gemma3_convert_keys(c);
    c.keep_rows("token_embd.weight",
                c.has_file("tokenizer.model") ? c.n_tokens()
                                              : c.json_entries("tokenizer.json", "model.vocab") +
                                                    c.json_entries("tokenizer.json", "added_tokens"));
}

// Its set_vocab: SentencePiece's tokenizer.model, with no space prefix, else tokenizer.json.
void convert_vocab(HfConvert& c) {
    if (c.vocab_sentencepiece(HfConvert::SpmAdded::Base))
        c.set_bool("tokenizer.ggml.add_space_prefix", false);
    else
        c.vocab_bpe();
}

}  // namespace

// Gemma3Model's keys (over TextModel's): its defaults for what config.json leaves out, the
// global layers' RoPE base, the soft-cap when set, the window unless every layer is global
// (a pattern of 1).
void gemma3_convert_keys(HfConvert& c) {
    c.set_u32("context_length", (uint32_t)c.integer("max_position_embeddings").value_or(131072));
    c.set_u32("attention.head_count", (uint32_t)c.integer("num_attention_heads").value_or(8));
    c.set_f32("attention.layer_norm_rms_epsilon", (float)c.number("rms_norm_eps").value_or(1e-6));
    const auto head_dim = (uint32_t)c.integer("head_dim").value_or(256);
    c.set_u32("attention.key_length", head_dim);
    c.set_u32("attention.value_length", head_dim);
    c.set_f32("rope.freq_base", (float)c.number("rope.rope_theta").value_or(1e6));
    if (c.number("attn_logit_softcapping"))
        c.fail("config.json: \"attn_logit_softcapping\" is Gemma 2's (Gemma 3 and 4 have none)");
    if (const auto cap = c.number("final_logit_softcapping"); cap && *cap != 0.0)
        c.set_f32("final_logit_softcapping", (float)*cap);
    if (c.integer("sliding_window_pattern") != 1)
        c.set_u32("attention.sliding_window", (uint32_t)c.need_integer("sliding_window"));
    c.set_u32("attention.head_count_kv", (uint32_t)c.integer("num_key_value_heads").value_or(4));
}

const ArchInfo& gemma3() {
    static const ArchInfo a = [] {
        ArchInfo a;
        a.name = "gemma3";
        a.keys = dense_keys();
        // (the window, its pattern and the soft-cap: the convert hook, as llama.cpp's
        // converter writes them; it writes no pattern: llama.cpp's loader fixes it at 6)
        a.keys.push_back({"attention.sliding_window", nullptr, Field::Swa, false, false, 0});
        a.keys.push_back({"attention.sliding_window_pattern", nullptr, Field::SwaPattern, false, false, 6});
        // (after the global base, where llama.cpp writes it)
        a.keys.insert(std::find_if(a.keys.begin(), a.keys.end(),
                                   [](const ArchKey& k) { return std::string_view(k.key) == "rope.freq_base"; }) + 1,
                      {"rope.freq_base_swa", "rope_swa.rope_theta", Field::RopeBaseSwa, true, false, 10000.0});
        a.keys.push_back({"final_logit_softcapping", nullptr, Field::FinalSoftcap, true, false, 0.0});
        a.tensors = dense_tensors({.qk_norm = true, .post_norms = true});
        // every norm stored as w - 1 in the checkpoint
        for (ArchTensor& t : a.tensors)
            if (t.quant == QuantRole::Keep) t.hf_map = HfMap::PlusOne;
        a.rope_neox = true;
        a.qk_norm = true;
        a.gemma = true;
        a.finish = finish;
        a.hf_archs = {"Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"};
        a.convert = convert;
        a.convert_vocab = convert_vocab;
        // (transformers' Gemma3TextConfig: the text_config of the multimodal checkpoints
        // leaves most of these out)
        a.hf_defaults = {{"vocab_size", 262208},       {"num_attention_heads", 8},
                         {"num_key_value_heads", 4},    {"head_dim", 256},
                         {"rms_norm_eps", 1e-6},        {"rope_theta", 1000000.0},
                         {"rope_local_base_freq", 10000.0}, {"max_position_embeddings", 131072},
                         {"sliding_window", 4096},      {"query_pre_attn_scalar", 256}};
        return a;
    }();
    return a;
}

}  // namespace edgellm::arch
