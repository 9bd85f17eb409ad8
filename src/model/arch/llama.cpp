// Llama 2/3.x, SmolLM2, TinyLlama...: the dense block as it is. Llama 3.1+'s long-context
// RoPE scaling is the optional rope_freqs.weight convert writes from config.json.
#include "model/arch/dense.h"
#include "model/arch/families.h"

namespace edgellm::arch {

const ArchInfo& llama() {
    static const ArchInfo a = [] {
        ArchInfo a;
        a.name = "llama";
        a.hf_archs = {"LlamaForCausalLM"};
        a.keys = dense_keys();
        a.tensors = dense_tensors({.rope_permute = true, .rope_freqs = true});
        a.tokenizer_pre = "llama-bpe";
        return a;
    }();
    return a;
}

}  // namespace edgellm::arch
