// Causal self-attention over a KV cache, one (token, head) at a time: no n_tokens x n_kv
// score matrix. Grouped-query: query head h reads KV head h / (n_head / n_head_kv).
//
// The arithmetic follows llama.cpp's: for an f16 cache its default (non-flash) path, so
// that our logits match its golden files: the query rounded to f16, the scores of all
// visible cells first, then an exact softmax (max, exp, sum), probabilities rounded to
// f16, then the weighted sum of V. For a quantized cache (llama.cpp only has its
// flash-attention path there, an online softmax; the two agree to float rounding) the
// query is quantized to the keys' dot-product type (q8_0 or q8_1) as llama.cpp does, and
// the probabilities stay f32. The scores and the V sum are the kernel set's dot_rows and
// vec_mad_n (keys in SIMD lanes), each giving its scalar twin's bits; q8_0 keys take
// dot_rows_q8 instead: integer block sums against the q8_0 query, as llama.cpp's q8_0 x
// q8_0 dot product.
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

// One layer's cache, keys in type_k and values in type_v (any type with dot_rows and
// vec_mad_n kernels: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl): the keys of KV
// head h for cell c start at k + h * k_head_stride + c * k_row_bytes (values likewise).
// A head stride 0 means the row bytes / n_head_kv (cell-major: row c holds every head, as
// llama.cpp keeps it); the model keeps it head-major (head stride = n_ctx * row bytes), so
// one head's cells are contiguous.
struct KvLayerView {
    TensorType type_k, type_v;
    const uint8_t* k;
    const uint8_t* v;
    size_t k_row_bytes, v_row_bytes;
    size_t k_head_stride = 0, v_head_stride = 0;
    // The same type and layout for both.
    static KvLayerView same(TensorType t, const uint8_t* k, const uint8_t* v, size_t row_bytes,
                            size_t head_stride = 0) {
        return {t, t, k, v, row_bytes, row_bytes, head_stride, head_stride};
    }
};

// Scratch each thread needs, in bytes, for caches of up to n_ctx cells with keys in type_k.
size_t attention_scratch_per_thread(const AttentionShape& s, TensorType type_k, int64_t n_ctx);

// out[t] (n_head * head_dim floats) = softmax(q[t] . K^T * scale + mask) V, where cell c
// is visible to query t when cell_pos[c] <= q_pos[t]. q is f32 [n_tokens][n_head*head_dim].
// scratch: scratch_per_thread bytes for each thread of the pool, at least
// attention_scratch_per_thread(s, kv.type_k, n_cells). Cells with cell_pos < 0 are empty.
void attention(ThreadPool& pool, const AttentionShape& s, const float* q, const int32_t* q_pos,
               int64_t n_tokens, const KvLayerView& kv, const int32_t* cell_pos, int64_t n_cells,
               float* out, uint8_t* scratch, size_t scratch_per_thread);

}  // namespace edgellm
