// Causal self-attention over a KV cache, one (token, head) at a time: no n_tokens x n_kv
// score matrix. Grouped-query: query head h reads KV head h / (n_head / n_head_kv).
//
// The arithmetic follows llama.cpp so that our logits match its golden files:
// - f16 cache: its default path. Scores q.k with q rounded to f16, exact softmax (max,
//   exp, sum in double), probabilities rounded to f16, then sum_c p_c * V_c.
// - q8_0 cache: q is quantized to q8_0 as for llama.cpp's q8_0 dot product. Where the
//   kernel set has SIMD dot_rows / vec_mad_n (avx512: keys 16 at a time in SIMD lanes)
//   the softmax is exact in two passes like the f16 one (no f16 rounding of the
//   probabilities); elsewhere an online softmax streams over the cells as llama.cpp's
//   flash-attention path does, rescaling the accumulator whenever a new maximum
//   appears. The two agree to float rounding.
#pragma once

#include <cstdint>

#include "compute/thread_pool.h"
#include "edgellm/tensor_type.h"

namespace edgellm {

struct AttentionShape {
    int n_head = 0;
    int n_head_kv = 0;
    int head_dim = 0;
    float scale = 1.0f;  // applied to q.k, usually 1/sqrt(head_dim)
};

// One layer's cache in `type` (F16 or Q8_0): the keys (values) of KV head h for cell c
// start at k (v) + h * head_stride + c * row_bytes. head_stride 0 means row_bytes / n_head_kv
// (cell-major: row c holds every head, as llama.cpp keeps it); the model keeps it
// head-major (head_stride = n_ctx * row_bytes), so one head's cells are contiguous.
struct KvLayerView {
    TensorType type;
    const uint8_t* k;
    const uint8_t* v;
    size_t row_bytes;
    size_t head_stride = 0;
};

// Scratch each thread needs, in bytes, for caches of up to n_ctx cells.
size_t attention_scratch_per_thread(const AttentionShape& s, TensorType kv_type, int64_t n_ctx);

// out[t] (n_head * head_dim floats) = softmax(q[t] . K^T * scale + mask) V, where cell c
// is visible to query t when cell_pos[c] <= q_pos[t]. q is f32 [n_tokens][n_head*head_dim].
// scratch: scratch_per_thread bytes for each thread of the pool, at least
// attention_scratch_per_thread(s, kv.type, n_cells). Cells with cell_pos < 0 are empty.
void attention(ThreadPool& pool, const AttentionShape& s, const float* q, const int32_t* q_pos,
               int64_t n_tokens, const KvLayerView& kv, const int32_t* cell_pos, int64_t n_cells,
               float* out, uint8_t* scratch, size_t scratch_per_thread);

}  // namespace edgellm
