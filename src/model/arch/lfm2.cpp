// LFM2 / LFM2.5 (Liquid AI's dense text models, 350M-2.6B): a hybrid of gated short
// convolutions and attention. attention.head_count_kv is an array with 0 on the short
// convolution layers (llama.cpp's is_recr; LFM2-1.2B: attention on layers 2, 5, 8, 10, 12
// and 14 of 16). A convolution layer has no K/V: in_proj gives B, C and x, a causal
// depthwise convolution of shortconv.l_cache taps runs over B * x, C gates its output and
// out_proj closes the block; its state per sequence is the last l_cache - 1 inputs of the
// convolution. Attention layers RMS-norm q and k per head and rotate NEOX pairs. The final
// norm is named token_embd_norm (llama.cpp's LLM_TENSOR_OUTPUT_NORM_LFM2). As llama.cpp's
// src/models/lfm2.cpp; conversion/lfm2.py writes the keys and tensors.
#include "model/arch/dense.h"
#include "model/arch/families.h"

namespace edgellm::arch {

namespace {

constexpr const char* kTextOnly = "edgellm runs LFM2's dense text models (LFM2, LFM2.5: 350M to 2.6B)";

std::string finish(HParams& hp, const GgufFile& f) {
    const std::string p = hp.arch + ".";
    if (const auto experts = f.get_int(p + "expert_count"); experts && *experts > 0)
        return p + "expert_count = " + std::to_string(*experts) +
               ": a mixture of experts (LFM2-8B-A1B) is not supported; " + kTextOnly;
    if (const auto swa = f.get_int(p + "attention.sliding_window"); swa && *swa > 0)
        return p + "attention.sliding_window = " + std::to_string(*swa) +
               ": LFM2.5-Audio's detokenizer (sliding-window attention) is not supported; " + kTextOnly;
    if (const auto causal = f.get_bool(p + "attention.causal"); causal && !*causal)
        return p + "attention.causal = false: a bidirectional LFM2 (an embedding model) is not "
               "supported; " + std::string(kTextOnly);
    if (f.find(p + "embedding_length_out"))
        return p + "embedding_length_out: an LFM2 with an output head of its own (ColBERT, "
               "LFM2.5-Audio's detokenizer) is not supported; " + std::string(kTextOnly);
    // (llama.cpp needs a window of at least one past input; our convolution takes up to 8)
    if (hp.conv_kernel < 2 || hp.conv_kernel > 8)
        return p + "shortconv.l_cache = " + std::to_string(hp.conv_kernel) + " must be 2 to 8";
    hp.conv_channels = hp.n_embd;
    return {};
}

}  // namespace

const ArchInfo& lfm2() {
    static const ArchInfo a = [] {
        using S = Slot;
        using D = Dim;
        using F = Field;
        using Q = QuantRole;
        ArchInfo a;
        a.name = "lfm2";
        // (no hf_archs yet: convert has no hook for LFM2's checkpoints — layer_types to the
        // KV head array, the adjusted FFN width, the convolution's squeezed taps — and refuses
        // them by name, Lfm2ForCausalLM, until it does)
        a.rope_neox = true;
        a.qk_norm = true;
        a.recurrent_without_kv_heads = true;
        a.keys = dense_keys();
        for (ArchKey& k : a.keys) {
            if (k.field == F::HeadsKv) k.form = KeyForm::Either;
            if (k.field == F::RmsEps) k.required = true;  // (llama.cpp reads it without a default)
        }
        a.keys.push_back({.key = "shortconv.l_cache", .hf = "conv_L_cache", .field = F::ConvKernel, .is_float = false, .required = true});

        a.tensors = dense_tensors({.qk_norm = true});
        for (const char* name : {"attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
                                 "attn_q_norm.weight", "attn_k_norm.weight"})
            tensor(a.tensors, name).when = When::AttnLayer;
        tensor(a.tensors, "attn_norm.weight").hf = "model.layers.%d.operator_norm.weight";
        tensor(a.tensors, "attn_q_norm.weight").hf = "model.layers.%d.self_attn.q_layernorm.weight";
        tensor(a.tensors, "attn_k_norm.weight").hf = "model.layers.%d.self_attn.k_layernorm.weight";
        tensor(a.tensors, "attn_output.weight").hf = "model.layers.%d.self_attn.out_proj.weight";
        tensor(a.tensors, "ffn_norm.weight").hf = "model.layers.%d.ffn_norm.weight";
        tensor(a.tensors, "ffn_gate.weight").hf = "model.layers.%d.feed_forward.w1.weight";
        tensor(a.tensors, "ffn_up.weight").hf = "model.layers.%d.feed_forward.w3.weight";
        tensor(a.tensors, "ffn_down.weight").hf = "model.layers.%d.feed_forward.w2.weight";
        ArchTensor& norm = tensor(a.tensors, "output_norm.weight");
        norm.gguf = "token_embd_norm.weight";
        norm.hf = "model.embedding_norm.weight";
        const std::vector<ArchTensor> conv = {
            // (the taps stay f32, as llama.cpp's converter and quantizer keep them)
            {"shortconv.conv.weight", "model.layers.%d.conv.conv.weight", S::ConvKernel, D::ConvKernel, D::Embd, true, true, nullptr, Q::Keep, HfMap::Copy, When::RecurrentLayer},
            {"shortconv.in_proj.weight", "model.layers.%d.conv.in_proj.weight", S::ConvInProj, D::Embd, D::Embd3, true, true, nullptr, Q::AttnQ, HfMap::Copy, When::RecurrentLayer},
            {"shortconv.out_proj.weight", "model.layers.%d.conv.out_proj.weight", S::ConvOutProj, D::Embd, D::Embd, true, true, nullptr, Q::AttnQ, HfMap::Copy, When::RecurrentLayer},
        };
        a.tensors.insert(a.tensors.end(), conv.begin(), conv.end());
        const char* moe = "a mixture-of-experts tensor (LFM2-8B-A1B): edgellm runs LFM2's dense text models";
        const char* media = "an image or audio encoder's tensor: edgellm runs LFM2's text models only (use the text GGUF, without its mmproj)";
        a.refused = {
            {"v.", nullptr, media},
            {"a.", nullptr, media},
            {"mm.", nullptr, media},
            {"dense_2_out", nullptr, "an output head of LFM2-ColBERT or LFM2.5-Audio's detokenizer: edgellm runs LFM2's text models"},
            {nullptr, "_exps", moe},
            {nullptr, "ffn_gate_inp", moe},
            {nullptr, "exp_probs_b", moe},
        };
        a.tokenizer_pre = "lfm2";
        a.finish = finish;
        return a;
    }();
    return a;
}

}  // namespace edgellm::arch
