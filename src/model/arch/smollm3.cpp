// SmolLM3: Llama's block, with no rotary positions on every fourth layer (NoPE; llama.cpp
// fixes the step at 4, as the released models use).
#include "model/arch/dense.h"
#include "model/arch/families.h"

namespace edgellm::arch {

const ArchInfo& smollm3() {
    static const ArchInfo a = [] {
        ArchInfo a;
        a.name = "smollm3";
        a.hf_archs = {"SmolLM3ForCausalLM"};
        a.keys = dense_keys();
        a.tensors = dense_tensors({.rope_permute = true});
        a.nope_every = 4;
        a.tokenizer_pre = "llama-bpe";
        // (llama.cpp converts it as a Llama: the NoPE layers are fixed at every fourth)
        a.convert = llama_convert;
        a.convert_vocab = llama_convert_vocab;
        // (transformers' SmolLM3Config)
        a.hf_defaults = {{"num_key_value_heads", 4}, {"rope_theta", 2000000.0}, {"rms_norm_eps", 1e-6},
                         {"max_position_embeddings", 32768}};
        return a;
    }();
    return a;
}

}  // namespace edgellm::arch
