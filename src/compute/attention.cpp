#include "compute/attention.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "edgellm/error.h"
#include "kernels/kernels.h"

namespace edgellm {

namespace {

// The query is converted once to the key's dot-product type (F16 for an F16 cache, Q8_0
// for a Q8_0 cache), as llama.cpp does, and dotted with each cached key row slice.
TensorType query_type(TensorType kv_type) { return type_kernels(kv_type).vec_dot_type; }

size_t align64(size_t n) { return (n + 63) / 64 * 64; }

}  // namespace

size_t attention_scratch_per_thread(const AttentionShape& s, TensorType kv_type) {
    return align64(row_size(query_type(kv_type), s.head_dim)) +  // converted query
           align64(sizeof(float) * s.head_dim) * 2;               // accumulator, one V row
}

void attention(ThreadPool& pool, const AttentionShape& s, const float* q, const int32_t* q_pos,
               int64_t n_tokens, const KvLayerView& kv, const int32_t* cell_pos, int64_t n_cells,
               float* out, uint8_t* scratch) {
    const TypeKernels& kk = type_kernels(kv.type);
    const TypeKernels& qk = type_kernels(query_type(kv.type));
    EDGELLM_ASSERT(kk.vec_dot && kk.to_float && qk.from_float, "KV type lacks kernels");
    const int hd = s.head_dim;
    const int group = s.n_head / s.n_head_kv;
    const size_t head_bytes = row_size(kv.type, hd);  // one head's slice of a cache row
    const size_t scratch_bytes = attention_scratch_per_thread(s, kv.type);
    const int64_t n_items = n_tokens * s.n_head;

    pool.run([&](int ith, int nth) {
        uint8_t* mine = scratch + (size_t)ith * scratch_bytes;
        void* q_conv = mine;
        float* acc = (float*)(mine + align64(row_size(query_type(kv.type), hd)));
        float* vrow = acc + align64(sizeof(float) * hd) / sizeof(float);
        int64_t i0, i1;
        ThreadPool::split(n_items, ith, nth, &i0, &i1);
        for (int64_t item = i0; item < i1; ++item) {
            const int64_t t = item / s.n_head;
            const int h = (int)(item % s.n_head);
            const int hkv = h / group;
            qk.from_float(q + t * (int64_t)s.n_head * hd + (int64_t)h * hd, q_conv, hd);
            float m = -std::numeric_limits<float>::infinity();
            float sum = 0.0f;
            std::memset(acc, 0, sizeof(float) * hd);
            for (int64_t c = 0; c < n_cells; ++c) {
                if (cell_pos[c] > q_pos[t]) continue;
                float score;
                kk.vec_dot(hd, &score, kv.k + (size_t)c * kv.row_bytes + hkv * head_bytes, q_conv);
                score *= s.scale;
                if (score > m) {
                    // Rescale what was accumulated under the old maximum.
                    const float f = std::exp(m - score);
                    for (int i = 0; i < hd; ++i) acc[i] *= f;
                    sum *= f;
                    m = score;
                }
                const float w = std::exp(score - m);
                kk.to_float(kv.v + (size_t)c * kv.row_bytes + hkv * head_bytes, vrow, hd);
                for (int i = 0; i < hd; ++i) acc[i] += w * vrow[i];
                sum += w;
            }
            float* o = out + t * (int64_t)s.n_head * hd + (int64_t)h * hd;
            const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
            for (int i = 0; i < hd; ++i) o[i] = acc[i] * inv;
        }
    });
}

}  // namespace edgellm
