// Causal self-attention over a KV cache, one (token, head) at a time: no n_tokens x n_kv
// score matrix. Grouped-query: query head h reads KV head h / (n_head / n_head_kv).
//
// The arithmetic follows llama.cpp's default (non-flash) path, so that our logits match
// its golden files: the query is rounded to the key's dot-product type (f16 for an f16
// cache, q8_0 for a q8_0 cache), the scores of all visible cells come first, then an exact
// softmax (max, exp, sum) and, for an f16 cache, probabilities rounded to f16, then the
// weighted sum of V. The scores and the V sum are the kernel set's dot_rows and vec_mad_n
// (keys in SIMD lanes), each giving its scalar twin's bits. For a q8_0 cache llama.cpp
// itself only has its flash-attention path (an online softmax); the two agree to float
// rounding.
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
    int64_t window = 0;  // > 0: a query at position p sees keys at positions > p - window
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
