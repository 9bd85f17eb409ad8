// Phi-3 / Phi-3.5 / Phi-4-mini: q, k and v in one matrix, gate and up in one, partial
// rotary dimensions (NEOX), LongRoPE: per-frequency factors, the short ones up to the
// original context and the long ones beyond it, and every rotation scaled by attn_factor.
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
        return a;
    }();
    return a;
}

}  // namespace edgellm::arch
