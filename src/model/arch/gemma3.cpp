// Gemma 3 (text): norms after attention and FFN too, GELU FFN, embeddings scaled by
// sqrt(n_embd), sliding-window layers with their own RoPE base, q/k head norms.
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

}  // namespace

const ArchInfo& gemma3() {
    static const ArchInfo a = [] {
        ArchInfo a;
        a.name = "gemma3";
        a.hf_archs = {"Gemma3ForCausalLM"};
        a.keys = dense_keys();
        a.keys.push_back({"attention.sliding_window", "sliding_window", Field::Swa, false, false, 0});
        a.keys.push_back({"attention.sliding_window_pattern", "sliding_window_pattern", Field::SwaPattern, false, false, 6});
        a.keys.push_back({"rope.freq_base_swa", "rope_local_base_freq", Field::RopeBaseSwa, true, false, 10000.0});
        a.keys.push_back({"final_logit_softcapping", "final_logit_softcapping", Field::FinalSoftcap, true, false, 0.0});
        a.tensors = dense_tensors({.qk_norm = true, .post_norms = true});
        // every norm stored as w - 1 in the checkpoint
        for (ArchTensor& t : a.tensors)
            if (t.quant == QuantRole::Keep) t.hf_map = HfMap::PlusOne;
        a.rope_neox = true;
        a.qk_norm = true;
        a.gemma = true;
        a.finish = finish;
        return a;
    }();
    return a;
}

}  // namespace edgellm::arch
