#include "compute/attention.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "edgellm/error.h"
#include "kernels/fp16.h"
#include "kernels/kernels.h"

namespace edgellm {

namespace {

// The query is converted once to the key's dot-product type (F16 for an F16 cache, Q8_0
// for a Q8_0 cache) and dotted with each cached key row slice.
TensorType query_type(TensorType kv_type) {
    return type_kernels(kv_type).vec_dot_type;
}

size_t align64(size_t n) {
    return (n + 63) / 64 * 64;
}

// Per-thread scratch: the converted query, an accumulator, one dequantized V row, and
// (f16 cache) the scores of every cell.
struct Scratch {
    void* q_conv;
    float* acc;
    float* vrow;
    float* scores;
};

Scratch carve(uint8_t* p, const AttentionShape& s, TensorType kv_type) {
    Scratch out;
    out.q_conv = p;
    p += align64(row_size(query_type(kv_type), s.head_dim));
    out.acc = (float*)p;
    p += align64(sizeof(float) * s.head_dim);
    out.vrow = (float*)p;
    p += align64(sizeof(float) * s.head_dim);
    out.scores = (float*)p;
    return out;
}

// f16 cache: scores, exact softmax, probabilities rounded to f16, weighted sum of V.
void attend_f16(const AttentionShape& s, const TypeKernels& kk, const KvLayerView& kv,
                const int32_t* cell_pos, int64_t n_cells, int32_t pos, int hkv, const Scratch& w,
                float* out) {
    const int hd = s.head_dim;
    const size_t head_bytes = row_size(kv.type, hd);
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t c = 0; c < n_cells; ++c) {
        if (cell_pos[c] < 0 || cell_pos[c] > pos) {
            w.scores[c] = -std::numeric_limits<float>::infinity();
            continue;
        }
        float score;
        kk.vec_dot(hd, &score, kv.k + (size_t)c * kv.row_bytes + hkv * head_bytes, w.q_conv);
        w.scores[c] = score * s.scale;
        mx = std::fmax(mx, w.scores[c]);
    }
    double sum = 0.0;
    for (int64_t c = 0; c < n_cells; ++c) {
        const float e = w.scores[c] == -std::numeric_limits<float>::infinity()
                            ? 0.0f
                            : std::exp(w.scores[c] - mx);
        w.scores[c] = e;
        sum += (double)e;
    }
    const float inv = sum > 0.0 ? (float)(1.0 / sum) : 0.0f;
    std::memset(w.acc, 0, sizeof(float) * hd);
    for (int64_t c = 0; c < n_cells; ++c) {
        if (w.scores[c] == 0.0f) continue;
        const float p = fp16_to_f32(f32_to_fp16(w.scores[c] * inv));
        kk.to_float(kv.v + (size_t)c * kv.row_bytes + hkv * head_bytes, w.vrow, hd);
        for (int i = 0; i < hd; ++i) w.acc[i] += p * w.vrow[i];
    }
    std::memcpy(out, w.acc, sizeof(float) * hd);
}

// Quantized cache: one pass with an online softmax (running maximum m, running sum).
void attend_online(const AttentionShape& s, const TypeKernels& kk, const KvLayerView& kv,
                   const int32_t* cell_pos, int64_t n_cells, int32_t pos, int hkv, const Scratch& w,
                   float* out) {
    const int hd = s.head_dim;
    const size_t head_bytes = row_size(kv.type, hd);
    float m = -std::numeric_limits<float>::infinity();
    float sum = 0.0f;
    std::memset(w.acc, 0, sizeof(float) * hd);
    for (int64_t c = 0; c < n_cells; ++c) {
        if (cell_pos[c] < 0 || cell_pos[c] > pos) continue;
        float score;
        kk.vec_dot(hd, &score, kv.k + (size_t)c * kv.row_bytes + hkv * head_bytes, w.q_conv);
        score *= s.scale;
        float weight = 1.0f;
        if (score > m) {
            // New maximum: rescale what was accumulated under the old one.
            const float f = std::exp(m - score);
            for (int i = 0; i < hd; ++i) w.acc[i] *= f;
            sum *= f;
            m = score;
        } else {
            weight = std::exp(score - m);
        }
        kk.to_float(kv.v + (size_t)c * kv.row_bytes + hkv * head_bytes, w.vrow, hd);
        for (int i = 0; i < hd; ++i) w.acc[i] += weight * w.vrow[i];
        sum += weight;
    }
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    for (int i = 0; i < hd; ++i) out[i] = w.acc[i] * inv;
}

}  // namespace

size_t attention_scratch_per_thread(const AttentionShape& s, TensorType kv_type, int64_t n_ctx) {
    return align64(row_size(query_type(kv_type), s.head_dim)) +
           align64(sizeof(float) * s.head_dim) * 2 + align64(sizeof(float) * (size_t)n_ctx);
}

void attention(ThreadPool& pool, const AttentionShape& s, const float* q, const int32_t* q_pos,
               int64_t n_tokens, const KvLayerView& kv, const int32_t* cell_pos, int64_t n_cells,
               float* out, uint8_t* scratch, size_t scratch_per_thread) {
    const TypeKernels& kk = type_kernels(kv.type);
    const TypeKernels& qk = type_kernels(query_type(kv.type));
    EDGELLM_ASSERT(kk.vec_dot && kk.to_float && qk.from_float, "KV type lacks kernels");
    EDGELLM_ASSERT(scratch_per_thread >= attention_scratch_per_thread(s, kv.type, n_cells),
                   "attention scratch too small for the cells");
    const int hd = s.head_dim;
    const int group = s.n_head / s.n_head_kv;
    const int64_t n_items = n_tokens * s.n_head;
    const bool f16 = kv.type == TensorType::F16;

    pool.run([&](int ith, int nth) {
        const Scratch w = carve(scratch + (size_t)ith * scratch_per_thread, s, kv.type);
        int64_t i0, i1;
        ThreadPool::split(n_items, ith, nth, &i0, &i1);
        for (int64_t item = i0; item < i1; ++item) {
            const int64_t t = item / s.n_head;
            const int h = (int)(item % s.n_head);
            const float* qh = q + t * (int64_t)s.n_head * hd + (int64_t)h * hd;
            float* o = out + t * (int64_t)s.n_head * hd + (int64_t)h * hd;
            qk.from_float(qh, w.q_conv, hd);
            if (f16)
                attend_f16(s, kk, kv, cell_pos, n_cells, q_pos[t], h / group, w, o);
            else
                attend_online(s, kk, kv, cell_pos, n_cells, q_pos[t], h / group, w, o);
        }
    });
}

}  // namespace edgellm
