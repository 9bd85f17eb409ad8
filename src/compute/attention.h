// Causal self-attention over a KV cache, streaming over the cached positions with an
// online softmax (no n_tokens x n_kv score matrix). Grouped-query: query head h reads
// KV head h / (n_head / n_head_kv).
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

// One layer's cache: row c holds the keys (or values) of all KV heads for cell c, in
// `type` (F16 or Q8_0), n_head_kv * head_dim elements per row.
struct KvLayerView {
    TensorType type;
    const uint8_t* k;
    const uint8_t* v;
    size_t row_bytes;
};

// Scratch each thread needs, in bytes.
size_t attention_scratch_per_thread(const AttentionShape& s, TensorType kv_type);

// out[t] (n_head * head_dim floats) = softmax(q[t] . K^T * scale + mask) V, where cell c
// is visible to query t when cell_pos[c] <= q_pos[t]. q is f32 [n_tokens][n_head*head_dim].
// scratch: attention_scratch_per_thread() bytes per thread of the pool.
void attention(ThreadPool& pool, const AttentionShape& s, const float* q, const int32_t* q_pos,
               int64_t n_tokens, const KvLayerView& kv, const int32_t* cell_pos, int64_t n_cells,
               float* out, uint8_t* scratch);

}  // namespace edgellm
