#include "model/arch/dense.h"

#include <cstring>
#include <stdexcept>

namespace edgellm::arch {

std::vector<ArchTensor> dense_tensors(const DenseOptions& o) {
    using D = Dim;
    using S = Slot;
    using Q = QuantRole;
    const HfMap pq = o.rope_permute ? HfMap::RopePermuteQ : HfMap::Copy;
    const HfMap pk = o.rope_permute ? HfMap::RopePermuteK : HfMap::Copy;
    std::vector<ArchTensor> t = {
        {"token_embd.weight", "model.embed_tokens.weight", S::TokEmbd, D::Embd, D::Vocab, false, true, nullptr, Q::TokEmbd, HfMap::Copy},
        {"attn_norm.weight", "model.layers.%d.input_layernorm.weight", S::AttnNorm, D::Embd, D::One, true, true, nullptr, Q::Keep, HfMap::Copy},
        {"attn_q.weight", "model.layers.%d.self_attn.q_proj.weight", S::Wq, D::Embd, D::Q, true, true, nullptr, Q::AttnQ, pq},
        {"attn_k.weight", "model.layers.%d.self_attn.k_proj.weight", S::Wk, D::Embd, D::Kv, true, true, nullptr, Q::AttnK, pk},
        {"attn_v.weight", "model.layers.%d.self_attn.v_proj.weight", S::Wv, D::Embd, D::Kv, true, true, nullptr, Q::AttnV, HfMap::Copy},
    };
    if (o.qkv_bias) {
        t.push_back({"attn_q.bias", "model.layers.%d.self_attn.q_proj.bias", S::Bq, D::Q, D::One, true, true, nullptr, Q::Keep, HfMap::Copy});
        t.push_back({"attn_k.bias", "model.layers.%d.self_attn.k_proj.bias", S::Bk, D::Kv, D::One, true, true, nullptr, Q::Keep, HfMap::Copy});
        t.push_back({"attn_v.bias", "model.layers.%d.self_attn.v_proj.bias", S::Bv, D::Kv, D::One, true, true, nullptr, Q::Keep, HfMap::Copy});
    }
    if (o.qk_norm) {
        t.push_back({"attn_q_norm.weight", "model.layers.%d.self_attn.q_norm.weight", S::QNorm, D::HeadDim, D::One, true, true, nullptr, Q::Keep, HfMap::Copy});
        t.push_back({"attn_k_norm.weight", "model.layers.%d.self_attn.k_norm.weight", S::KNorm, D::HeadDim, D::One, true, true, nullptr, Q::Keep, HfMap::Copy});
    }
    const std::vector<ArchTensor> rest = {
        {"attn_output.weight", "model.layers.%d.self_attn.o_proj.weight", S::Wo, D::Q, D::Embd, true, true, nullptr, Q::AttnOut, HfMap::Copy},
        {"ffn_norm.weight", "model.layers.%d.post_attention_layernorm.weight", S::FfnNorm, D::Embd, D::One, true, true, nullptr, Q::Keep, HfMap::Copy},
        {"ffn_gate.weight", "model.layers.%d.mlp.gate_proj.weight", S::Gate, D::Embd, D::Ff, true, true, nullptr, Q::FfnGate, HfMap::Copy},
        {"ffn_up.weight", "model.layers.%d.mlp.up_proj.weight", S::Up, D::Embd, D::Ff, true, true, nullptr, Q::FfnUp, HfMap::Copy},
        {"ffn_down.weight", "model.layers.%d.mlp.down_proj.weight", S::Down, D::Ff, D::Embd, true, true, nullptr, Q::FfnDown, HfMap::Copy},
        {"output_norm.weight", "model.norm.weight", S::OutputNorm, D::Embd, D::One, false, true, nullptr, Q::Keep, HfMap::Copy},
        // absent: tied to the token embedding
        {"output.weight", "lm_head.weight", S::Output, D::Embd, D::Vocab, false, false, nullptr, Q::Output, HfMap::Copy},
    };
    t.insert(t.end(), rest.begin(), rest.end());
    if (o.rope_freqs)
        t.push_back({"rope_freqs.weight", nullptr, S::RopeFreqs, D::RotHalf, D::One, false, false, nullptr, Q::Keep, HfMap::Copy});
    if (o.post_norms) {
        tensor(t, "ffn_norm.weight").hf = "model.layers.%d.pre_feedforward_layernorm.weight";
        t.push_back({"post_attention_norm.weight", "model.layers.%d.post_attention_layernorm.weight", S::PostAttnNorm,
                     D::Embd, D::One, true, true, nullptr, Q::Keep, HfMap::Copy});
        t.push_back({"post_ffw_norm.weight", "model.layers.%d.post_feedforward_layernorm.weight", S::PostFfnNorm,
                     D::Embd, D::One, true, true, nullptr, Q::Keep, HfMap::Copy});
    }
    return t;
}

ArchTensor& tensor(std::vector<ArchTensor>& ts, const char* gguf) {
    for (ArchTensor& t : ts)
        if (std::strcmp(t.gguf, gguf) == 0) return t;
    throw std::logic_error(std::string("no tensor ") + gguf + " in the entry");
}

std::vector<ArchKey> dense_keys() {
    using F = Field;
    // (in the order llama.cpp's converter writes them: convert keeps it)
    return {
        {"block_count", "num_hidden_layers", F::Layers, false, true},
        {"context_length", "max_position_embeddings", F::CtxTrain, false, false},
        {"embedding_length", "hidden_size", F::Embd, false, true},
        {"feed_forward_length", "intermediate_size", F::Ff, false, true},
        {"attention.head_count", "num_attention_heads", F::Heads, false, true},
        {"attention.head_count_kv", "num_key_value_heads", F::HeadsKv, false, false},
        {"rope.freq_base", "rope.rope_theta", F::RopeBase, true, false},
        {"attention.layer_norm_rms_epsilon", "rms_norm_eps", F::RmsEps, true, false},
        {"attention.key_length", "head_dim", F::KeyLength, false, false},
        {"attention.value_length", "head_dim", F::ValueLength, false, false},
        {"rope.dimension_count", nullptr, F::Rot, false, false},
    };
}

}  // namespace edgellm::arch
