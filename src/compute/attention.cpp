#include "compute/attention.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "compute/cpu_clones.h"
#include "edgellm/error.h"
#include "kernels/fp16.h"
#include "kernels/kernels.h"

namespace edgellm {

namespace {

// The query is converted once to the key's dot-product type (F16 for an F16 cache, Q8_0
// for a quantized one, as llama.cpp does) and dotted with each cached key row slice.
// (Measured: keeping the query in f32 against a q8_0 cache moves the logits further from
// the f16 cache's, KLD 0.0093 against 0.0076 on Qwen2.5-Coder-0.5B.)
TensorType query_type(TensorType kv_type) {
    return type_kernels(kv_type).vec_dot_type;
}
size_t align64(size_t n) {
    return (n + 63) / 64 * 64;
}

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// e^x for x <= 0 (a score minus the maximum), within 2 ulp of std::exp, in plain
// arithmetic so that loops over it vectorize: x = n ln2 + r with |r| <= ln2 / 2 (ln2 in
// two parts), e^r by a degree-6 Taylor polynomial, 2^n put into the exponent bits.
inline float exp_nonpositive(float x) {
    x = x > -87.0f ? x : -87.0f;        // e^-87 ~ 1.6e-38, the smallest normal range
    const float shifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
    const float t = x * 1.44269504f + shifter;
    const float n = t - shifter;
    const float r = (x - n * 0.693145752f) - n * 1.42860677e-6f;
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    return p * std::bit_cast<float>(((int32_t)n + 127) << 23);
}

// The softmax's loops take 16 cells per step in vectors of GCC's vector extension: one of
// 16 floats where the AVX-512 clone runs (compute/cpu_clones.h), two of 8 elsewhere (one
// AVX2 register each; in the AVX2 clone GCC took 16-float selects and lane reads one lane
// at a time through the stack, 6x slower). Both give the same bits: every lane's
// operations are the scalar ones, and sums keep 16 partial sums (cell c in sum (c - a) %
// 16) added in the same order. Macros, not functions: a vector passed by value changes the
// ABI between the clones, which GCC warns of.
typedef float F8x __attribute__((vector_size(32)));
typedef int32_t I8x __attribute__((vector_size(32)));
typedef float F16x __attribute__((vector_size(64)));
typedef int32_t I16x __attribute__((vector_size(64)));

// exp_nonpositive on the lanes of a V (F8x or F16x; I the int32 vector of its size), step
// for step.
#define EDGELLM_EXP_NONPOSITIVE(V, I, xin)                                         \
    ({                                                                             \
        const V lo_ = V{} - 87.0f;                                                 \
        const V x_ = (xin) > lo_ ? (xin) : lo_;                                    \
        const V sh_ = V{} + 12582912.0f;                                           \
        const V n_ = (x_ * 1.44269504f + sh_) - sh_;                               \
        const V r_ = (x_ - n_ * 0.693145752f) - n_ * 1.42860677e-6f;               \
        V p_ = V{} + 1.0f / 720.0f;                                                \
        p_ = p_ * r_ + 1.0f / 120.0f;                                              \
        p_ = p_ * r_ + 1.0f / 24.0f;                                               \
        p_ = p_ * r_ + 1.0f / 6.0f;                                                \
        p_ = p_ * r_ + 0.5f;                                                       \
        p_ = p_ * r_ + 1.0f;                                                       \
        p_ = p_ * r_ + 1.0f;                                                       \
        const I bits_ = (__builtin_convertvector(n_, I) + 127) << 23;              \
        V two_n_;                                                                  \
        std::memcpy(&two_n_, &bits_, sizeof two_n_);                               \
        p_ * two_n_;                                                               \
    })

// Whether this CPU runs the AVX-512 clone (the resolver's test): the softmax then takes
// vectors of 16 floats.
inline bool softmax_wide() {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__SANITIZE_THREAD__)
    static const bool wide = __builtin_cpu_supports("x86-64-v4");
    return wide;
#else
    return false;
#endif
}

// The heads one work item handles: query heads [h0, h0 + n) of tokens [t, t + nt), all
// reading the same KV head. Each cached K and V row is then read and converted once for
// all of them: nt = 1 when decoding, a block of up to kTokenBlock prompt tokens in prefill
// (query row j = token t + j / n, head h0 + j % n).
struct Item {
    int64_t t;
    int hkv, h0, n;
    int nt = 1;
};

// Prompt tokens per work item: their queries share each cached row's conversion (the
// keys' widening and transposition is most of a long prompt's attention otherwise).
constexpr int kTokenBlock = 8;

// Per-thread scratch for the query rows of one item (kTokenBlock tokens x a KV head's
// query heads at most): converted queries, one accumulator each (first the widened
// queries), and each row's scores.
struct Scratch {
    uint8_t* q_conv;  // group x q_row bytes
    size_t q_row;
    float* acc;     // group x head_dim
    float* inv;       // group: each row's 1 / (sum of its weights), integer V sums only
    float* run_max;   // group: each row's largest score so far (key blocks)
    double* run_sum;  // group: each row's sum of weights so far, at run_max (key blocks)
    float* scores;    // group rows, score_stride(n_ctx) apart
};

// Floats from one query row's scores to the next: whole cache lines, an odd number of them.
// (A power-of-two stride, 4096 cells = 16 KiB, put every row's cell c in one L1 set: the
// kernels writing or reading 16 cells of each of 56 rows thrashed it.)
size_t score_stride(int64_t n_ctx) {
    size_t lines = ((size_t)n_ctx + 15) / 16;
    if (lines % 2 == 0) ++lines;
    return lines * 16;
}

// Cells per key block when q8_0 keys and values go block after block (attend_q8_blocks):
// a multiple of the integer V sum's chunk.
constexpr int64_t kKeyBlock = 256;
static_assert(kKeyBlock % kMadChunkRows == 0);

size_t scratch_size(const AttentionShape& s, TensorType kv_type, int64_t n_ctx) {
    const size_t group = (size_t)(s.n_head / s.n_head_kv) * kTokenBlock;
    return align64(row_size(query_type(kv_type), s.head_dim)) * group +
           align64(sizeof(float) * s.head_dim) * group + 2 * align64(sizeof(float) * group) +
           align64(sizeof(double) * group) +
           sizeof(float) * score_stride(std::max<int64_t>(n_ctx, kKeyBlock)) * group;
}

Scratch carve(uint8_t* p, const AttentionShape& s, TensorType kv_type) {
    const size_t group = (size_t)(s.n_head / s.n_head_kv) * kTokenBlock;
    Scratch w;
    w.q_row = align64(row_size(query_type(kv_type), s.head_dim));
    w.q_conv = p;
    p += w.q_row * group;
    w.acc = (float*)p;
    p += align64(sizeof(float) * s.head_dim) * group;
    w.inv = (float*)p;
    p += align64(sizeof(float) * group);
    w.run_max = (float*)p;
    p += align64(sizeof(float) * group);
    w.run_sum = (double*)p;
    p += align64(sizeof(double) * group);
    w.scores = (float*)p;
    return w;
}

// The inner loops run per cached position and head: compiled for AVX-512 and AVX2 as well
// (compute/cpu_clones.h).

// One query row's span [a, e) of scores: when not every cell of it is visible, the hidden
// cells set to -inf and the others scaled. Returns the largest scaled score, and in *mul
// the factor the scores still need: s.scale for a span read, not rewritten (a positive
// factor keeps the order, so the maximum of the scaled scores is the scaled maximum), 1
// once scaled here. (Vectors of independent lanes: the compiler left an array of 16
// scalar.)
template <typename V>
[[gnu::always_inline]] inline float row_max_v(float* sc, int64_t a, int64_t e, float scale,
                                              bool whole, const int32_t* cell_pos,
                                              int32_t oldest, int32_t pos, float* mul) {
    constexpr int kLanes = sizeof(V) / sizeof(float), kVecs = 16 / kLanes;
    *mul = scale;
    if (!whole) {
        for (int64_t r = a; r < e; ++r) {
            const bool visible = cell_pos[r] >= oldest && cell_pos[r] <= pos;
            sc[r] = visible ? sc[r] * scale : kNegInf;
        }
        *mul = 1.0f;  // x 1 is exact
    }
    V mx[kVecs];
    for (int k = 0; k < kVecs; ++k) mx[k] = V{} + kNegInf;
    int64_t c = a;
    for (; c + 16 <= e; c += 16)
        for (int k = 0; k < kVecs; ++k) {
            V v;
            std::memcpy(&v, sc + c + kLanes * k, sizeof v);
            mx[k] = v > mx[k] ? v : mx[k];
        }
    for (int k = 1; k < kVecs; ++k) mx[0] = mx[k] > mx[0] ? mx[k] : mx[0];
    float m = kNegInf;
    for (; c < e; ++c) m = std::max(m, sc[c]);
    for (int l = 0; l < kLanes; ++l) m = std::max(m, mx[0][l]);
    return m * *mul;
}

// e^(score x mul - m) over [a, e) in place (-inf cells 0) and their sum: exp and the sum in
// one pass, the sum in 16 independent lanes (cell c in lane (c - a) % 16) added in double.
template <typename V, typename I>
[[gnu::always_inline]] inline double exp_sum_v(float* sc, int64_t a, int64_t e, float m,
                                               float mul) {
    constexpr int kLanes = sizeof(V) / sizeof(float), kVecs = 16 / kLanes;
    V part[kVecs];
    for (int k = 0; k < kVecs; ++k) part[k] = V{};
    const V vm = V{} + m, vmul = V{} + mul, ninf = V{} + kNegInf, zero = V{};
    int64_t c = a;
    for (; c + 16 <= e; c += 16)
        for (int k = 0; k < kVecs; ++k) {
            V v;
            std::memcpy(&v, sc + c + kLanes * k, sizeof v);
            v *= vmul;
            const V x = EDGELLM_EXP_NONPOSITIVE(V, I, v - vm);
            const V y = v != ninf ? x : zero;
            std::memcpy(sc + c + kLanes * k, &y, sizeof y);
            part[k] += y;
        }
    float tail = part[0][0];
    for (; c < e; ++c) {
        const float v = sc[c] * mul;
        const float x = v != kNegInf ? exp_nonpositive(v - m) : 0.0f;
        sc[c] = x;
        tail += x;
    }
    part[0][0] = tail;
    double sum = 0.0;
    for (int k = 0; k < kVecs; ++k)
        for (int l = 0; l < kLanes; ++l) sum += (double)part[k][l];
    return sum;
}

// sc[c] = round_to_f16_unit(sc[c] * inv) over [a, e), 16 cells per step in vectors (the
// same bits; GCC left the scalar loop unvectorized, with a branch per cell: 9 % of a
// 4096-token prompt with an f16 cache).
template <typename V, typename I>
[[gnu::always_inline]] inline void scale_round_f16_v(float* sc, int64_t a, int64_t e,
                                                     float inv) {
    constexpr int kLanes = sizeof(V) / sizeof(float), kVecs = 16 / kLanes;
    int64_t c = a;
    for (; c + 16 <= e; c += 16)
        for (int k = 0; k < kVecs; ++k)
            scale_round_to_f16_unit<V, I>(sc + c + kLanes * k, inv, sc + c + kLanes * k);
    for (; c < e; ++c) sc[c] = round_to_f16_unit(sc[c] * inv);
}

[[gnu::always_inline]] inline void scale_round_f16(float* sc, int64_t a, int64_t e, float inv) {
    if (softmax_wide())
        scale_round_f16_v<F16x, I16x>(sc, a, e, inv);
    else
        scale_round_f16_v<F8x, I8x>(sc, a, e, inv);
}

[[gnu::always_inline]] inline float row_max(float* sc, int64_t a, int64_t e, float scale,
                                            bool whole, const int32_t* cell_pos,
                                            int32_t oldest, int32_t pos, float* mul) {
    return softmax_wide()
               ? row_max_v<F16x>(sc, a, e, scale, whole, cell_pos, oldest, pos, mul)
               : row_max_v<F8x>(sc, a, e, scale, whole, cell_pos, oldest, pos, mul);
}

[[gnu::always_inline]] inline double exp_sum(float* sc, int64_t a, int64_t e, float m,
                                             float mul) {
    return softmax_wide() ? exp_sum_v<F16x, I16x>(sc, a, e, m, mul)
                          : exp_sum_v<F8x, I8x>(sc, a, e, m, mul);
}

// q8_0 keys and values, block after block of kKeyBlock cells (blocks start at multiples of
// kKeyBlock): the scores of a block's cells for every query row, each row's softmax kept
// online (its largest score so far; when a block raises it, the row's sums so far are
// scaled down by e^(old - new)), then the block's values weighted in integers. A block's
// scores stay in L1 and L2 instead of a row of every visible cell going out to L3 and
// back (0.9 MB for 56 rows at 4096 cells). A row's arithmetic depends only on its own
// scores and the fixed blocks: the same bits alone as in a block of prompt tokens.
EDGELLM_CPU_CLONES void attend_q8_blocks(const AttentionShape& s, const TypeKernels& kk,
                                          const TypeKernels& vk, const KvLayerView& kv,
                                          const int32_t* cell_pos, const int32_t* tok_pos,
                                          const Item& it, const int32_t* oldest,
                                          const int64_t* lo_t, const int64_t* hi_t,
                                          const bool* whole, int64_t lo, int64_t hi,
                                          size_t k_off, size_t v_off, const Scratch& w,
                                          float* out) {
    const int hd = s.head_dim;
    const int nq = it.n * it.nt;
    const size_t stride = score_stride(kKeyBlock);
    for (int j = 0; j < nq; ++j) {
        w.run_max[j] = kNegInf;
        w.run_sum[j] = 0.0;
        std::memset(w.acc + (size_t)j * hd, 0, sizeof(float) * hd);
    }
    for (int64_t b0 = lo / kKeyBlock * kKeyBlock; b0 < hi; b0 += kKeyBlock) {
        const int64_t k0 = std::max(b0, lo), k1 = std::min(b0 + kKeyBlock, hi);
        const int64_t v0 = std::max(b0, lo / kMadChunkRows * kMadChunkRows);
        kk.dot_rows_q8(hd, k1 - k0, kv.k + (size_t)k0 * kv.k_row_bytes + k_off, kv.k_row_bytes,
                       w.q_conv, w.q_row, nq, w.scores + (k0 - b0), stride);
        for (int j = 0; j < nq; ++j) {
            const int tt = j / it.n;
            const int32_t pos = tok_pos[tt];
            const int64_t a = std::max(lo_t[tt], b0), e = std::min(hi_t[tt], b0 + kKeyBlock);
            float* sc = w.scores + (size_t)j * stride - b0;  // indexed by cell
            if (a >= e) {  // nothing of this row here
                std::fill(sc + v0, sc + k1, 0.0f);
                continue;
            }
            float mul;
            const float m = row_max(sc, a, e, s.scale, whole[tt], cell_pos, oldest[tt], pos, &mul);
            if (m > w.run_max[j]) {  // the row's sums so far, down to the new maximum
                if (w.run_max[j] != kNegInf) {
                    const float alpha = exp_nonpositive(w.run_max[j] - m);
                    float* acc = w.acc + (size_t)j * hd;
                    for (int i = 0; i < hd; ++i) acc[i] *= alpha;
                    w.run_sum[j] *= (double)alpha;
                }
                w.run_max[j] = m;
            }
            w.run_sum[j] += exp_sum(sc, a, e, w.run_max[j], mul);
            std::fill(sc + v0, sc + a, 0.0f);
            std::fill(sc + e, sc + k1, 0.0f);
        }
        vk.mad_rows_q8(hd, k1 - v0, kv.v + (size_t)v0 * kv.v_row_bytes + v_off, kv.v_row_bytes,
                       w.scores + (v0 - b0), stride, nq, w.acc);
    }
    for (int j = 0; j < nq; ++j) {
        float* o = out + (size_t)(j / it.n) * (size_t)s.n_head * hd + (size_t)(j % it.n) * hd;
        const float* a = w.acc + (size_t)j * hd;
        const float inv = w.run_sum[j] > 0.0 ? (float)(1.0 / w.run_sum[j]) : 0.0f;
        for (int i = 0; i < hd; ++i) o[i] = a[i] * inv;
    }
}

// Two passes, as llama.cpp's default (non-flash) path: the scores of every visible cell
// (dot_rows), an exact softmax (max, exp, sum), the probabilities (f16 cache: rounded to
// f16 as llama.cpp's f16 matrix product rounds them), then their weighted sum of the V
// rows (vec_mad_n). The kernels are the set's SIMD ones or, in the ref set, their scalar
// twins.
EDGELLM_CPU_CLONES void attend(const AttentionShape& s, const TypeKernels& kk,
                                const TypeKernels& vk, const KvLayerView& kv,
                                const int32_t* cell_pos, int64_t n_cells, bool cells_in_order,
                                const int32_t* tok_pos, const Item& it, const Scratch& w,
                                int64_t n_ctx, float* out) {
    const int hd = s.head_dim;
    const size_t k_off =
        (size_t)it.hkv * (kv.k_head_stride ? kv.k_head_stride : row_size(kv.type_k, hd));
    const size_t v_off =
        (size_t)it.hkv * (kv.v_head_stride ? kv.v_head_stride : row_size(kv.type_v, hd));
    const int nq = it.n * it.nt;  // query rows: token j / it.n, head it.h0 + j % it.n
    // Each token's visible span of cells, and the union of them. (sliding window: keys
    // older than the window are masked too.) Every row's softmax runs over its own token's
    // span exactly as a token alone would; the union only shares the K and V passes.
    int32_t oldest[kTokenBlock];
    int64_t lo_t[kTokenBlock], hi_t[kTokenBlock];
    bool whole[kTokenBlock];
    int64_t lo = n_cells, hi = 0;
    for (int tt = 0; tt < it.nt; ++tt) {
        const int32_t pos = tok_pos[tt];
        oldest[tt] = s.window > 0 ? (int32_t)std::max<int64_t>(0, pos - s.window + 1) : 0;
        int64_t first_seen = n_cells, last_seen = -1, n_visible = 0;
        if (cells_in_order && n_cells > 0) {
            // cell c holds position cell_pos[0] + c: the visible ones are a range
            const int64_t base = cell_pos[0];
            first_seen = std::max<int64_t>(0, oldest[tt] - base);
            last_seen = std::min<int64_t>(n_cells - 1, pos - base);
            if (last_seen < first_seen) {
                first_seen = n_cells;
                last_seen = -1;
            }
            n_visible = last_seen + 1 - std::min<int64_t>(first_seen, last_seen + 1);
        } else {
            for (int64_t c = 0; c < n_cells; ++c)
                if (cell_pos[c] >= oldest[tt] && cell_pos[c] <= pos) {
                    first_seen = std::min(first_seen, c);
                    last_seen = c;
                    ++n_visible;
                }
        }
        lo_t[tt] = first_seen;
        hi_t[tt] = last_seen + 1;
        // the usual case: every cell of the span visible, no mask to apply per cell
        whole[tt] = n_visible == hi_t[tt] - lo_t[tt];
        if (lo_t[tt] < hi_t[tt]) {
            lo = std::min(lo, lo_t[tt]);
            hi = std::max(hi, hi_t[tt]);
        }
    }
    // q8_0 values weighted in integers (mad_rows_q8). Its chunks of rows start at cells
    // that are multiples of the chunk: a token's sum then has the same bits whichever
    // tokens share its block (the rows before its span weigh 0 and leave its chunks'
    // scales alone), as speculative decoding's checks of a draft against single steps
    // need.
    const bool int_v = vk.mad_rows_q8 && kv.type_v == TensorType::Q8_0 && hd % 32 == 0;
    const int64_t v_lo = int_v ? lo / kMadChunkRows * kMadChunkRows : lo;
    if (int_v && kk.dot_rows_q8 && query_type(kv.type_k) == TensorType::Q8_0)
        return attend_q8_blocks(s, kk, vk, kv, cell_pos, tok_pos, it, oldest, lo_t, hi_t, whole,
                                lo, hi, k_off, v_off, w, out);
    // All keys of the union span at once (16 per AVX-512 step) against the queries: q8_0
    // keys in integers against the q8_0 queries, as llama.cpp does (dot_rows_q8), other
    // types in f32 against the queries widened into the accumulator space (unused until
    // the V sum).
    const uint8_t* k_lo = kv.k + (size_t)lo * kv.k_row_bytes + k_off;
    if (kk.dot_rows_q8 && query_type(kv.type_k) == TensorType::Q8_0) {
        if (lo < hi)
            kk.dot_rows_q8(hd, hi - lo, k_lo, kv.k_row_bytes, w.q_conv, w.q_row, nq, w.scores + lo,
                           (size_t)n_ctx);
    } else {
        float* qf = w.acc;
        const TypeKernels& qk = type_kernels(query_type(kv.type_k));
        for (int j = 0; j < nq; ++j)
            qk.to_float(w.q_conv + w.q_row * (size_t)j, qf + (size_t)j * hd, hd);
        if (lo < hi)
            kk.dot_rows(hd, hi - lo, k_lo, kv.k_row_bytes, qf, nq, w.scores + lo, (size_t)n_ctx);
    }
    for (int j = 0; j < nq; ++j) {
        const int tt = j / it.n;
        const int32_t pos = tok_pos[tt];
        const int64_t a = lo_t[tt], e = hi_t[tt];
        float* sc = w.scores + (size_t)j * n_ctx;
        // The maximum of the scaled scores (masked cells -inf), then exp and the sum.
        float mul;
        const float m = row_max(sc, a, e, s.scale, whole[tt], cell_pos, oldest[tt], pos, &mul);
        const double sum = exp_sum(sc, a, e, m, mul);
        // Probabilities (f16 cache: rounded to f16, as llama.cpp's f16 matrix product
        // rounds them). The integer V sum takes the weights before the division and
        // divides its result.
        const float inv = sum > 0.0 ? (float)(1.0 / sum) : 0.0f;
        if (int_v)
            w.inv[j] = inv;
        else if (kv.type_k == TensorType::F16 && kv.type_v == TensorType::F16)
            scale_round_f16(sc, a, e, inv);
        else
            for (int64_t c = a; c < e; ++c) sc[c] *= inv;
        // cells of the union this token does not see weigh 0 (adding 0 * v changes nothing)
        if (a >= e) {
            if (v_lo < hi) std::fill(sc + v_lo, sc + hi, 0.0f);
        } else {
            if (v_lo < a) std::fill(sc + v_lo, sc + a, 0.0f);
            if (e < hi) std::fill(sc + e, sc + hi, 0.0f);
        }
        std::memset(w.acc + (size_t)j * hd, 0, sizeof(float) * hd);
    }
    if (v_lo < hi) {
        const uint8_t* v_rows = kv.v + (size_t)v_lo * kv.v_row_bytes + v_off;
        if (int_v)
            vk.mad_rows_q8(hd, hi - v_lo, v_rows, kv.v_row_bytes, w.scores + v_lo, (size_t)n_ctx,
                           nq, w.acc);
        else
            vk.vec_mad_n(hd, hi - v_lo, v_rows, kv.v_row_bytes, w.scores + v_lo, (size_t)n_ctx,
                         nq, w.acc);
    }
    for (int j = 0; j < nq; ++j) {
        float* o = out + (size_t)(j / it.n) * (size_t)s.n_head * hd + (size_t)(j % it.n) * hd;
        const float* a = w.acc + (size_t)j * hd;
        if (int_v)
            for (int i = 0; i < hd; ++i) o[i] = a[i] * w.inv[j];
        else
            std::memcpy(o, a, sizeof(float) * hd);
    }
}

}  // namespace

size_t attention_scratch_per_thread(const AttentionShape& s, TensorType type_k, int64_t n_ctx) {
    return scratch_size(s, type_k, n_ctx);
}

void attention(ThreadPool& pool, const AttentionShape& s, const float* q, const int32_t* q_pos,
               int64_t n_tokens, const KvLayerView& kv, const int32_t* cell_pos, int64_t n_cells,
               float* out, uint8_t* scratch, size_t scratch_per_thread) {
    const TypeKernels& kk = type_kernels(kv.type_k);
    const TypeKernels& vk = type_kernels(kv.type_v);
    const TypeKernels& qk = type_kernels(query_type(kv.type_k));
    EDGELLM_ASSERT(kk.dot_rows && vk.vec_mad_n && qk.from_float && qk.to_float,
                   "KV type lacks attention kernels");
    EDGELLM_ASSERT(scratch_per_thread >= attention_scratch_per_thread(s, kv.type_k, n_cells),
                   "attention scratch too small for the cells");
    const size_t group = (size_t)(s.n_head / s.n_head_kv);
    const int64_t n_ctx = (int64_t)score_stride(n_cells);  // the scores' row stride
    const int hd = s.head_dim;

    // Work items: (tokens, KV head). Decoding one token with few KV heads: the query heads
    // split into sub-groups when there are fewer items than threads. A prompt: blocks of
    // up to kTokenBlock tokens (fewer when that would leave a thread without work).
    const int nth = pool.size();
    int split = 1;
    while (split < (int)group && n_tokens * s.n_head_kv * split < nth) ++split;
    const int per = (int)((group + (size_t)split - 1) / (size_t)split);
    int tb = 1;
    if (split == 1) {
        tb = kTokenBlock;
        while (tb > 1 && (n_tokens + tb - 1) / tb * s.n_head_kv < nth) tb /= 2;
    }
    const int64_t n_blocks = (n_tokens + tb - 1) / tb;
    const int64_t n_items = n_blocks * s.n_head_kv * split;

    // Cells holding consecutive positions in order (a cache filled front to back, the usual
    // case): each token's visible cells are then a range, found without a scan.
    bool in_order = true;
    for (int64_t c = 1; c < n_cells && in_order; ++c)
        in_order = cell_pos[c] == cell_pos[0] + c && cell_pos[0] >= 0;
    if (n_cells > 0 && cell_pos[0] < 0) in_order = false;

    // Items claimed one at a time from a shared counter, not dealt out in advance: under
    // the causal mask a late token sees many more cells than an early one (contiguous
    // ranges left one thread waiting for the other, 17 % of a 4096-token prompt's time),
    // and a core slowed by the other's memory traffic takes fewer.
    std::atomic<int64_t> next_item{0};
    pool.run([&](int ith, int) {
        const Scratch w = carve(scratch + (size_t)ith * scratch_per_thread, s, kv.type_k);
        for (int64_t item = next_item.fetch_add(1, std::memory_order_relaxed); item < n_items;
             item = next_item.fetch_add(1, std::memory_order_relaxed)) {
            Item it;
            it.t = item / (s.n_head_kv * split) * tb;
            it.nt = (int)std::min<int64_t>(tb, n_tokens - it.t);
            const int64_t rest = item % (s.n_head_kv * split);
            it.hkv = (int)(rest / split);
            const int part = (int)(rest % split);
            it.h0 = it.hkv * (int)group + part * per;
            it.n = std::min(per, it.hkv * (int)group + (int)group - it.h0);
            if (it.n <= 0) continue;
            for (int tt = 0; tt < it.nt; ++tt) {
                const float* qt = q + (it.t + tt) * (int64_t)s.n_head * hd;
                for (int g = 0; g < it.n; ++g)
                    qk.from_float(qt + (int64_t)(it.h0 + g) * hd,
                                  w.q_conv + w.q_row * (size_t)(tt * it.n + g), hd);
            }
            float* o = out + it.t * (int64_t)s.n_head * hd + (int64_t)it.h0 * hd;
            attend(s, kk, vk, kv, cell_pos, n_cells, in_order, q_pos + it.t, it, w, n_ctx, o);
        }
    });
}

}  // namespace edgellm
