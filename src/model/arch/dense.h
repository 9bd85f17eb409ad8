// The tensors of the dense decoder block most families share (Llama's), for their table
// entries to start from: token embedding, RMS norms, q/k/v/o, a gated FFN, the output.
#pragma once

#include <vector>

#include "edgellm/arch.h"

namespace edgellm::arch {

struct DenseOptions {
    bool rope_permute = false;  // HF q/k in the interleaved RoPE order (Llama's converter)
    bool qkv_bias = false;      // q/k/v biases (Qwen2)
    bool qk_norm = false;       // RMS norm per q and k head (Qwen3, Gemma 3)
    bool rope_freqs = false;    // optional rope_freqs.weight (Llama 3's scaling, made by convert)
    bool post_norms = false;    // Gemma's norms after attention and FFN (and its names)
};

std::vector<ArchTensor> dense_tensors(const DenseOptions& o);

// The entry's tensor with this GGUF name (it must be there).
ArchTensor& tensor(std::vector<ArchTensor>& ts, const char* gguf);

// The metadata keys every family has (llama.cpp's general ones).
std::vector<ArchKey> dense_keys();

}  // namespace edgellm::arch
