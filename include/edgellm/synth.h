// Synthetic models: random weights in the exact tensor shapes of real models, with a
// synthetic vocabulary of the right size. Speed depends only on shapes and types, so these
// stand in for real models in benchmarks and tests.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "edgellm/error.h"
#include "edgellm/quantize.h"

namespace edgellm {

struct ModelShape {
    const char* name = "";  // "qwen2.5-0.5b"
    const char* arch = "";  // its family (the table's name): synth's default --arch
    int64_t n_embd = 0, n_ff = 0, n_layer = 0, n_head = 0, n_head_kv = 0, n_vocab = 0,
            n_ctx_train = 0;
    int64_t head_dim = 0;  // 0: n_embd / n_head
    bool tied_output = false;  // no output.weight
    float rope_base = 1e4f, rms_eps = 1e-6f;
    int64_t n_rot = 0;       // rotated dimensions per head (0: all)
    int64_t n_ctx_orig = 0;  // Phi-3's LongRoPE: the original context (0: none)
    // Gemma 4: every swa_period-th layer global, the others sliding over n_swa positions
    // with heads of head_dim_swa (head_dim: the global ones'), n_head_kv_global KV heads on
    // the global layers (0: n_head_kv), per-layer embeddings of n_embd_per_layer, the last
    // n_kv_shared layers without K/V of their own (and, double_wide_shared, an FFN twice
    // as wide), the global layers rotating rope_partial of their dimensions.
    int64_t swa_period = 0, n_swa = 0, head_dim_swa = 0, n_head_kv_global = 0;
    int64_t n_embd_per_layer = 0, n_kv_shared = 0;
    bool double_wide_shared = false;
    float rope_base_swa = 1e4f, rope_partial = 1.0f, final_softcap = 0.0f;
    // LFM2: bit il set for an attention layer, the others short convolutions of conv_kernel
    // taps.
    uint64_t attn_layers = 0;
    int64_t conv_kernel = 0;
};

const std::vector<ModelShape>& model_shapes();
const ModelShape* find_model_shape(const std::string& name);

struct SynthOptions {
    std::string arch;  // a family of the architecture table ("": the shape's)
    std::string shape = "tiny";
    // A GGUF whose tokenizer.* keys the model gets (its vocabulary, merges or scores,
    // special tokens, chat template), the embedding and output sized for it ("": a
    // synthetic byte-level vocabulary of the shape's size).
    std::string vocab;
    FileType type = FileType::F16;
    uint64_t seed = 1;
    int n_threads = 0;
    std::function<void(size_t index, size_t count, const std::string& name, TensorType type)>
        progress;
};

struct SynthStats {
    size_t bytes = 0;  // tensor bytes
    size_t n_tensors = 0;
    int64_t n_params = 0;
};

// What synth_model would write (tensor count, parameters, bytes), without writing it.
Result<SynthStats> synth_size(const SynthOptions& opts);

// Write the model to `path` (atomically). Same seed, same bytes.
Result<SynthStats> synth_model(const std::string& path, const SynthOptions& opts);

}  // namespace edgellm
