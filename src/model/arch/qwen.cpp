// Qwen2 / Qwen2.5 (q/k/v biases) and Qwen3 (RMS norm per q and k head): NEOX RoPE.
#include "model/arch/dense.h"
#include "model/arch/families.h"

namespace edgellm::arch {

const ArchInfo& qwen2() {
    static const ArchInfo a = [] {
        ArchInfo a;
        a.name = "qwen2";
        a.hf_archs = {"Qwen2ForCausalLM"};
        a.keys = dense_keys();
        a.tensors = dense_tensors({.qkv_bias = true});
        a.rope_neox = true;
        a.tokenizer_pre = "qwen2";
        // (transformers' Qwen2Config)
        a.hf_defaults = {{"num_key_value_heads", 0, "num_attention_heads"}, {"rope_theta", 10000.0},
                         {"rms_norm_eps", 1e-6}, {"max_position_embeddings", 32768}};
        return a;
    }();
    return a;
}

const ArchInfo& qwen3() {
    static const ArchInfo a = [] {
        ArchInfo a;
        a.name = "qwen3";
        a.hf_archs = {"Qwen3ForCausalLM"};
        a.keys = dense_keys();
        a.tensors = dense_tensors({.qk_norm = true});
        a.rope_neox = true;
        a.qk_norm = true;
        a.tokenizer_pre = "qwen2";
        // (transformers' Qwen3Config)
        a.hf_defaults = {{"num_key_value_heads", 0, "num_attention_heads"}, {"head_dim", 128},
                         {"rope_theta", 10000.0}, {"rms_norm_eps", 1e-6}, {"max_position_embeddings", 32768}};
        return a;
    }();
    return a;
}

}  // namespace edgellm::arch
