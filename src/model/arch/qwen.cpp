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
        return a;
    }();
    return a;
}

}  // namespace edgellm::arch
