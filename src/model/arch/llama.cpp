// Llama 2/3.x, SmolLM2, TinyLlama...: the dense block as it is. Llama 3.1+'s long-context
// RoPE scaling is the optional rope_freqs.weight convert writes from config.json.
#include <cctype>
#include <cmath>

#include "model/arch/dense.h"
#include "model/arch/families.h"

namespace edgellm::arch {

namespace {

// Llama 3's rope_scaling as llama.cpp's converter computes it (LlamaModel's
// generate_extra_tensors), operation by operation in float32 as torch does there: the
// frequencies base^(-2i/dim), and per frequency 1 (short wavelengths), `factor` (long ones)
// or the smooth blend between. (torch's pow may differ from the correctly rounded power
// this computes by one unit in the last place: on the machines measured it did not for
// bases 5e5 and 1e4 at head dimensions 16 to 128.)
std::vector<float> llama3_factors(const HfConvert& c, int64_t dim) {
    const float base = (float)c.number("rope.rope_theta").value_or(10000.0);
    const double factor = c.number("rope.factor").value_or(8.0);
    const double low = c.number("rope.low_freq_factor").value_or(1.0);
    const double high = c.number("rope.high_freq_factor").value_or(4.0);
    const double old_ctx = c.number("rope.original_max_position_embeddings").value_or(8192.0);
    const double low_wavelen = old_ctx / low, high_wavelen = old_ctx / high;
    std::vector<float> out;
    for (int64_t i = 0; i < dim; i += 2) {
        const float e = (float)i / (float)dim;
        const float freq = 1.0f / (float)std::pow((double)base, (double)e);
        const float wavelen = (1.0f / freq) * (float)(2.0 * M_PI);  // (2 pi / t: reciprocal, times)
        if (wavelen < (float)high_wavelen) {
            out.push_back(1.0f);
        } else if (wavelen > (float)low_wavelen) {
            out.push_back((float)factor);
        } else {
            const float smooth = ((1.0f / wavelen) * (float)old_ctx - (float)low) / (float)(high - low);
            out.push_back(1.0f / ((1.0f - smooth) / (float)factor + smooth));
        }
    }
    return out;
}

}  // namespace

// llama.cpp's LlamaModel (SmolLM3's too): the vocabulary size, the rotary dimensions and
// Llama 3's rope_freqs.
void llama_convert(HfConvert& c) {
    c.set_u32("vocab_size", (uint32_t)c.need_integer("vocab_size"));
    const auto head_dim = c.integer("head_dim");
    const int64_t rot =
        head_dim ? *head_dim : c.need_integer("hidden_size") / c.need_integer("num_attention_heads");
    c.set_u32("rope.dimension_count", (uint32_t)rot);
    auto type = c.string("rope.rope_type").value_or("");
    for (char& ch : type) ch = (char)std::tolower((unsigned char)ch);
    if (type == "llama3") c.add_tensor("rope_freqs.weight", llama3_factors(c, rot));
}

// Its set_vocab: tokenizer_config.json's add_prefix_space, then SentencePiece's
// tokenizer.model, else tokenizer.json's BPE (a SentencePiece-style tokenizer.json alone,
// which llama.cpp reads through transformers, is refused there); vocabularies of 49152
// tokens (SmolLM2's, Granite's small ones) add no BOS.
void llama_convert_vocab(HfConvert& c) {
    if (const auto space = c.file_flag("tokenizer_config.json", "add_prefix_space"))
        c.set_bool("tokenizer.ggml.add_space_prefix", *space);
    if (!c.vocab_sentencepiece(HfConvert::SpmAdded::Base)) c.vocab_bpe();
    if (c.integer("vocab_size").value_or(32000) == 49152) c.set_bool("tokenizer.ggml.add_bos_token", false);
}

const ArchInfo& llama() {
    static const ArchInfo a = [] {
        ArchInfo a;
        a.name = "llama";
        a.hf_archs = {"LlamaForCausalLM"};
        a.keys = dense_keys();
        a.tensors = dense_tensors({.rope_permute = true, .rope_freqs = true});
        a.tokenizer_pre = "llama-bpe";
        a.convert = llama_convert;
        a.convert_vocab = llama_convert_vocab;
        // (transformers' LlamaConfig)
        a.hf_defaults = {{"num_key_value_heads", 0, "num_attention_heads"},
                         {"head_dim", 0, "hidden_size", "num_attention_heads"},
                         {"rope_theta", 10000.0},
                         {"rms_norm_eps", 1e-6},
                         {"max_position_embeddings", 2048}};
        return a;
    }();
    return a;
}

}  // namespace edgellm::arch
