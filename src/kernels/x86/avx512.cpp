// AVX-512 kernels (F, BW, VL + VNNI). Compiled with -mavx512f -mavx512bw -mavx512vl
// -mavx512vnni -mavx2 -mfma -mf16c; see x86_kernels.h. The set builds on AVX2: it
// replaces the dot products of q4_0, q5_0, q8_0 and q2_K .. q6_K (vec_dot and the
// four-token vec_dot_4, which give bit-identical columns) and the two activation
// quantizers, and keeps the AVX2 versions of everything else.
//
// Two VNNI instructions do the integer work:
//   vpdpbusd (_mm512_dpbusd_epi32): 4 products u8 x s8 added to each int32 lane, with no
//            int16 step, so it is exact for every byte value (maddubs saturates);
//   vpdpwssd (_mm512_dpwssd_epi32): 2 products s16 x s16 added to each int32 lane; it
//            applies the K-quants' sub-block scales to maddubs' int16 pair sums and
//            accumulates in one instruction (AVX2 needs madd + add).
// Weights always enter as unsigned bytes: a signed weight w is fed as w + bias (0..255)
// and bias * sum(y) is taken off once per block, for the legacy types by a second
// vpdpbusd with a constant, for the K-quants through the activation's bsums.
//
// Integer sums are exact; only the order of the float scale sums differs from the
// reference. The quantizers produce the reference's bytes.
//
// Every helper here has internal linkage, and no inline function of a shared header is
// called: an out-of-line copy compiled with AVX-512 flags must never be merged with the
// copy other translation units use on CPUs without AVX-512.

// GCC 12's AVX-512 intrinsics initialise their "undefined" operand from itself, which
// -W(maybe-)uninitialized reports wherever they are inlined (GCC bug 105593, fixed in 13):
// silence it for the header's code only.
#include "kernels/x86/immintrin_quiet.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/block_formats.h"
#include "kernels/count_dispatch.h"
#include "kernels/q8_queries.h"
#include "kernels/widen_chunks.h"
#include "kernels/x86/mad_chunk.h"
#include "kernels/x86/avx512_transpose.h"
#include "kernels/x86/x86_kernels.h"

namespace edgellm {

namespace {

// ---------------------------------------------------------------------------------------
// Helpers

inline __m128i load128(const void* p) {
    return _mm_loadu_si128((const __m128i*)p);
}
inline __m256i load256(const void* p) {
    return _mm256_loadu_si256((const __m256i*)p);
}
inline __m512i load512(const void* p) {
    return _mm512_loadu_si512(p);
}
inline uint32_t load_u32(const void* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

// One half -> float with F16C (the reference's bits for every non-NaN half).
inline float half_to_float(fp16_t h) {
    return _cvtsh_ss(h);
}

// The 256-bit a in the low half and b in the high half.
inline __m512i join256(__m256i a, __m256i b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
}
// 32 bytes at p in both halves.
inline __m512i broadcast256(const void* p) {
    return _mm512_broadcast_i64x4(load256(p));
}

// 128-bit lane k of the result holds the 16-bit value w_k in each of its 8 words. As a
// pshufb control, 0x8000 | j picks byte j of the lane zero-extended to 16 bits; as a
// vpermw index, j picks word j.
inline __m512i lanes16(int w0, int w1, int w2, int w3) {
    auto dw = [](int w) { return (int)((uint32_t)(w & 0xffff) * 0x10001u); };
    const int a = dw(w0), b = dw(w1), c = dw(w2), d = dw(w3);
    return _mm512_setr_epi32(a, a, a, a, b, b, b, b, c, c, c, c, d, d, d, d);
}
// The same per 64-bit half: qwords 0..3 hold a, qwords 4..7 hold b (variable shift counts).
inline __m512i halves64(long long a, long long b) {
    return _mm512_setr_epi64(a, a, a, a, b, b, b, b);
}

inline int hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}
inline float hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
inline float hsum_ps(__m512 v) {
    return hsum_ps(_mm256_add_ps(_mm512_castps512_ps256(v),
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
}

// ---------------------------------------------------------------------------------------
// Dot products: one weight row against kCols activation rows (vec_dot: 1, vec_dot_4: 4,
// rows `by` bytes apart). The weights of a block are unpacked once; every column then runs
// the same instructions in the same order as a single-column call, so vec_dot_4's column
// c is bit for bit vec_dot of row c: a batch and token-by-token decoding give the same
// logits.

template <typename Block, int kCols>
inline void column_pointers(const void* vy, size_t by, const Block* (&y)[kCols]) {
    for (int c = 0; c < kCols; ++c) y[c] = (const Block*)((const uint8_t*)vy + by * (size_t)c);
}

// ---------------------------------------------------------------------------------------
// Legacy 32-element blocks with q8_0 activations: q4_0, q5_0, q8_0
//
// Two blocks fill one zmm (block i in bytes 0..31, block i+1 in 32..63), so vpdpbusd
// leaves int32 lanes 0..7 for one block and 8..15 for the next; four blocks per step give
// one vector of four scales dx * dy (one F16C conversion of 8 halves), spread over the
// lanes by vpermps.

// Activations of two consecutive blocks.
inline __m512i load_q8_0_pair(const block_q8_0* y) {
    return join256(load256(y[0].qs), load256(y[1].qs));
}

// 16 bytes of packed nibbles -> 32 bytes 0..15 in element order (low nibbles = elements
// 0..15 in the low lane, high nibbles = 16..31 in the high lane).
inline __m256i unpack_nibbles(const uint8_t* qs) {
    const __m128i b = load128(qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(b, 4), b), _mm256_set1_epi8(0x0F));
}
// The same for two blocks: each 16 bytes go to two lanes, and the second copy (words
// 8..15 and 24..31) is shifted right by 4.
inline __m512i unpack_nibbles_pair(const uint8_t* a, const uint8_t* b) {
    const __m512i v =
        join256(_mm256_broadcastsi128_si256(load128(a)), _mm256_broadcastsi128_si256(load128(b)));
    return _mm512_and_si512(_mm512_mask_srli_epi16(v, 0xFF00FF00u, v, 4), _mm512_set1_epi8(0x0F));
}

// Weights as unsigned bytes w + kBias, for one block (ymm) or two (zmm).
struct Q4_0Unsigned {  // q - 8 + 8: the nibbles themselves
    static constexpr int kBias = 8;
    static __m256i one(const block_q4_0& b) { return unpack_nibbles(b.qs); }
    static __m512i two(const block_q4_0* b) { return unpack_nibbles_pair(b[0].qs, b[1].qs); }
};
struct Q5_0Unsigned {  // q - 16 + 16: the nibbles plus 16 where qh has the element's bit
    static constexpr int kBias = 16;
    static __m256i one(const block_q5_0& b) {
        const __m256i v = unpack_nibbles(b.qs);
        return _mm256_mask_add_epi8(v, _cvtu32_mask32(load_u32(b.qh)), v, _mm256_set1_epi8(16));
    }
    static __m512i two(const block_q5_0* b) {
        // qh bit j is element j, and element j is byte j: the two words are the byte mask.
        const __mmask64 high =
            _cvtu64_mask64((uint64_t)load_u32(b[0].qh) | (uint64_t)load_u32(b[1].qh) << 32);
        const __m512i v = unpack_nibbles_pair(b[0].qs, b[1].qs);
        return _mm512_mask_add_epi8(v, high, v, _mm512_set1_epi8(16));
    }
};
struct Q8_0Unsigned {  // q + 128: flip the sign bit (every byte, -128 included)
    static constexpr int kBias = 128;
    static __m256i one(const block_q8_0& b) {
        return _mm256_xor_si256(load256(b.qs), _mm256_set1_epi8((char)0x80));
    }
    static __m512i two(const block_q8_0* b) {
        return _mm512_xor_si512(load_q8_0_pair(b), _mm512_set1_epi8((char)0x80));
    }
};

// The halves d of four consecutive blocks, in the low 64 bits.
template <typename Block>
inline __m128i scale_halves4(const Block* b) {
    return _mm_setr_epi16((short)b[0].d, (short)b[1].d, (short)b[2].d, (short)b[3].d, 0, 0, 0, 0);
}
// dx * dy of four consecutive blocks, from the x halves (scale_halves4) and the y blocks.
inline __m128 block_scales4(__m128i hx, const block_q8_0* y) {
    const __m256 f = _mm256_cvtph_ps(_mm_unpacklo_epi64(hx, scale_halves4(y)));
    return _mm_mul_ps(_mm256_castps256_ps128(f), _mm256_extractf128_ps(f, 1));
}

template <typename Block>
inline __m128 block_scales4(const Block* x, const block_q8_0* y) {
    const __m128i h = _mm_setr_epi16((short)x[0].d, (short)x[1].d, (short)x[2].d, (short)x[3].d,
                                     (short)y[0].d, (short)y[1].d, (short)y[2].d, (short)y[3].d);
    const __m256 f = _mm256_cvtph_ps(h);
    return _mm_mul_ps(_mm256_castps256_ps128(f), _mm256_extractf128_ps(f, 1));
}

// x · y for a legacy weight type against q8_0: per pair of blocks
//   vpdpbusd(w + bias, y) - vpdpbusd(bias, y) = sum(w * y)   (8 int32 lanes per block),
// exact for any activation bytes (|w + bias| <= 255, |y| <= 128: 4 products < 2^18).
// The int32 lanes are converted and FMA'd by their block's scale; one to three leftover
// blocks take the 256-bit form.
template <typename Block, typename Unsigned, int kCols>
void dot_legacy_q8_0(int64_t n, float* s, const void* vx, const void* vy, size_t by) {
    const Block* x = (const Block*)vx;
    const block_q8_0* y[kCols];
    column_pointers(vy, by, y);
    const int64_t nb = n / QK8_0;
    const __m512i bias = _mm512_set1_epi8((char)Unsigned::kBias);
    const __m512i zero = _mm512_setzero_si512();
    const __m512i spread01 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const __m512i spread23 = _mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    __m512 acc0[kCols], acc1[kCols];
    for (int c = 0; c < kCols; ++c) acc0[c] = acc1[c] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 4 <= nb; i += 4) {
        const __m512i w01 = Unsigned::two(x + i), w23 = Unsigned::two(x + i + 2);
        const __m128i hx = scale_halves4(x + i);
        for (int c = 0; c < kCols; ++c) {
            const block_q8_0* yc = y[c] + i;
            // (one column: the eight halves in one go; the values are the same either way)
            const __m512 d = _mm512_castps128_ps512(kCols == 1 ? block_scales4(x + i, yc)
                                                               : block_scales4(hx, yc));
            const __m512i y01 = load_q8_0_pair(yc), y23 = load_q8_0_pair(yc + 2);
            const __m512i p01 = _mm512_sub_epi32(_mm512_dpbusd_epi32(zero, w01, y01),
                                                 _mm512_dpbusd_epi32(zero, bias, y01));
            const __m512i p23 = _mm512_sub_epi32(_mm512_dpbusd_epi32(zero, w23, y23),
                                                 _mm512_dpbusd_epi32(zero, bias, y23));
            acc0[c] = _mm512_fmadd_ps(_mm512_permutexvar_ps(spread01, d), _mm512_cvtepi32_ps(p01),
                                      acc0[c]);
            acc1[c] = _mm512_fmadd_ps(_mm512_permutexvar_ps(spread23, d), _mm512_cvtepi32_ps(p23),
                                      acc1[c]);
        }
    }
    float sum[kCols];
    for (int c = 0; c < kCols; ++c) sum[c] = hsum_ps(_mm512_add_ps(acc0[c], acc1[c]));
    const __m256i bias1 = _mm256_set1_epi8((char)Unsigned::kBias);
    const __m256i zero1 = _mm256_setzero_si256();
    for (; i < nb; ++i) {
        const __m256i w = Unsigned::one(x[i]);
        const float dx = half_to_float(x[i].d);
        for (int c = 0; c < kCols; ++c) {
            const __m256i yv = load256(y[c][i].qs);
            const __m256i p = _mm256_sub_epi32(_mm256_dpbusd_epi32(zero1, w, yv),
                                               _mm256_dpbusd_epi32(zero1, bias1, yv));
            sum[c] += (float)hsum_epi32(p) * (dx * half_to_float(y[c][i].d));
        }
    }
    for (int c = 0; c < kCols; ++c) s[c] = sum[c];
}

// ---------------------------------------------------------------------------------------
// K-quants with q8_K activations
//
// Each zmm covers 64 consecutive elements of a block, so one 64-byte load of the
// activations pairs with it. Weights are unpacked to unsigned bytes, maddubs multiplies
// them with the activations (pair sums: at most 2 * 63 * 128 < 2^15, no saturation), and
// vpdpwssd multiplies those by the sub-block scales (one scale per 128-bit lane for
// 16-element sub-blocks, per 256-bit half for 32-element ones) into the block's int32
// sum. The mins and the "+ 4" / "+ 32" offsets meet the activation's bsums once per block.

// Byte pointers into a q8_K block (qs at offset 4, bsums at 260).
inline const int8_t* q8_K_qs(const block_q8_K* b) {
    return (const int8_t*)((const uint8_t*)b + offsetof(block_q8_K, qs));
}
inline __m256i q8_K_bsums(const block_q8_K* b) {
    return load256((const uint8_t*)b + offsetof(block_q8_K, bsums));
}

// q4_K / q5_K 6-bit scales and mins: bytes 0..7 = sc[0..7], bytes 8..15 = m[0..7]. With
// the 12 bytes as words w0, w1, w2: sc[0..3] = w0 & 0x3f.., m[0..3] = w1 & 0x3f..,
// sc[4..7] = (w2 & 0x0f..) | (w0 >> 2 & 0x30..), m[4..7] = (w2 >> 4 & 0x0f..) | (w1 >> 2 &
// 0x30..). PRECONDITION: 16 bytes readable at `scales` (the block goes on after them).
inline __m128i unpack_k4_scale_min(const uint8_t* scales) {
    const __m128i v = load128(scales);
    const __m128i lo = _mm_and_si128(v, _mm_set1_epi8(0x3f));  // [sc 0..3, m 0..3, -, -]
    const __m128i w2 = _mm_srlv_epi32(_mm_shuffle_epi32(v, _MM_SHUFFLE(2, 2, 2, 2)),
                                      _mm_setr_epi32(0, 4, 0, 0));  // [w2, w2 >> 4, -, -]
    const __m128i hi = _mm_or_si128(_mm_and_si128(w2, _mm_set1_epi8(0x0f)),
                                    _mm_and_si128(_mm_srli_epi32(v, 2), _mm_set1_epi8(0x30)));
    return _mm_unpacklo_epi32(lo, hi);
}
// The mins of unpack_k4_scale_min, each twice, as int16: m0 m0 m1 m1 .. m7 m7, to meet
// the 16 bsums (two per 32-element sub-block) in one madd.
inline __m256i k4_mins16(__m128i scale_min) {
    const __m128i m8 = _mm_srli_si128(scale_min, 8);
    return _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
}

// q3_K: the 16 six-bit scales minus 32, as int8. With the 12 bytes as words w0, w1, w2,
// word k of the result has low nibbles from [w0, w1, w0 >> 4, w1 >> 4] and bits 4..5
// from w2 rotated by [4, 2, 0, -2]. A masked load reads only the 12 bytes (the block's
// last field is 2 bytes, so 16 could run past the end of the tensor).
inline __m128i unpack_q3_K_scales16(const uint8_t* scales) {
    const __m128i v = _mm_maskz_loadu_epi8(0x0FFF, scales);
    const __m128i lo = _mm_and_si128(
        _mm_srlv_epi32(_mm_shuffle_epi32(v, _MM_SHUFFLE(1, 0, 1, 0)), _mm_setr_epi32(0, 0, 4, 4)),
        _mm_set1_epi8(0x0f));
    const __m128i hi = _mm_and_si128(
        _mm_rolv_epi32(_mm_shuffle_epi32(v, _MM_SHUFFLE(2, 2, 2, 2)), _mm_setr_epi32(4, 2, 0, 30)),
        _mm_set1_epi8(0x30));
    return _mm_sub_epi8(_mm_or_si128(lo, hi), _mm_set1_epi8(32));
}

// [y.d * d, y.d * dmin] of a block whose d and dmin are adjacent halves at dm.
inline __m128 k_scales(const void* dm, float yd) {
    return _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128((int)load_u32(dm))), _mm_set1_ps(yd));
}

// Scales of zmm m (elements 64m..64m+63, sub-blocks of 16) from the 16 int16 scales in
// the low half of s16: lane k gets scale 4m + k.
inline __m512i scales16_of(__m512i s16, int m) {
    return _mm512_permutexvar_epi16(lanes16(4 * m, 4 * m + 1, 4 * m + 2, 4 * m + 3), s16);
}

// sum over the four zmm of a block of vpdpwssd(maddubs(q[m], y[64m..]), scale[m]).
inline __m512i dot_block_q8_K(const __m512i (&q)[4], const __m512i (&scale)[4],
                              const block_q8_K* y) {
    const int8_t* q8 = q8_K_qs(y);
    __m512i sumi = _mm512_setzero_si512();
    for (int m = 0; m < 4; ++m)
        sumi =
            _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(q[m], load512(q8 + 64 * m)), scale[m]);
    return sumi;
}

// The four zmm of q4_K / q5_K chunk c = 0..3 (32 bytes of qs: sub-block 2c in the low
// nibbles, 2c+1 in the high ones = elements 64c..64c+63): broadcast to both halves, the
// high half shifted by 4. Their scales: sc[2c] zero-extended in the low half, sc[2c+1]
// in the high half, picked by pshufb from the scale bytes in every lane.
inline void unpack_k4_nibbles(const uint8_t* qs, __m512i (&q)[4]) {
    for (int c = 0; c < 4; ++c) {
        const __m512i qb = broadcast256(qs + 32 * c);
        q[c] = _mm512_and_si512(_mm512_mask_srli_epi16(qb, 0xFFFF0000u, qb, 4),
                                _mm512_set1_epi8(0x0F));
    }
}
inline void k4_scales(__m128i scale_min, __m512i (&scale)[4]) {
    const __m512i sc = _mm512_broadcast_i32x4(scale_min);
    for (int c = 0; c < 4; ++c)
        scale[c] = _mm512_shuffle_epi8(sc, lanes16(0x8000 | (2 * c), 0x8000 | (2 * c),
                                                   0x8000 | (2 * c + 1), 0x8000 | (2 * c + 1)));
}

// One block of a type with mins (q2_K, q4_K, q5_K) against one column: d * dy *
// sum(scale * q * y) into acc, dmin * dy * sum(mins * bsums) into accm (subtracted at the
// end). dm points at the block's d, dmin halves.
inline void add_block_with_mins(const __m512i (&q)[4], const __m512i (&scale)[4], __m256i mins16,
                                const void* dm, const block_q8_K* yc, __m512& acc, __m256& accm) {
    const __m512i sumi = dot_block_q8_K(q, scale, yc);
    const __m256i mins = _mm256_madd_epi16(q8_K_bsums(yc), mins16);
    const __m128 d = k_scales(dm, yc->d);
    acc = _mm512_fmadd_ps(_mm512_broadcastss_ps(d), _mm512_cvtepi32_ps(sumi), acc);
    accm =
        _mm256_fmadd_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(d)), _mm256_cvtepi32_ps(mins), accm);
}

// q4_K / q5_K · q8_K: d * sum(sc * q * y) - dmin * sum(m * bsums) per block.
template <typename Block, int kCols>
void dot_q45_K_q8_K(int64_t n, float* s, const void* vx, const void* vy, size_t by) {
    const Block* x = (const Block*)vx;
    const block_q8_K* y[kCols];
    column_pointers(vy, by, y);
    const int64_t nb = n / QK_K;
    __m512 acc[kCols];
    __m256 accm[kCols];
    for (int c = 0; c < kCols; ++c) {
        acc[c] = _mm512_setzero_ps();
        accm[c] = _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < nb; ++i) {
        const __m128i scm = unpack_k4_scale_min(x[i].scales);
        __m512i q[4], scale[4];
        unpack_k4_nibbles(x[i].qs, q);
        if constexpr (std::is_same_v<Block, block_q5_K>) {
            // the fifth bit of chunk c: qh bit 2c (low half) or 2c+1 (high half) of byte l,
            // as a byte mask by vptestmb, added as 16
            const __m512i qh = broadcast256(x[i].qh);
            for (int c = 0; c < 4; ++c) {
                const int lo = 0x0101 << (2 * c), hi = 0x0101 << (2 * c + 1);
                const __mmask64 bit = _mm512_test_epi8_mask(qh, lanes16(lo, lo, hi, hi));
                q[c] = _mm512_mask_add_epi8(q[c], bit, q[c], _mm512_set1_epi8(16));
            }
        }
        k4_scales(scm, scale);
        const __m256i mins16 = k4_mins16(scm);
        const void* dm = (const uint8_t*)&x[i] + offsetof(Block, d);
        for (int c = 0; c < kCols; ++c)
            add_block_with_mins(q, scale, mins16, dm, &y[c][i], acc[c], accm[c]);
    }
    for (int c = 0; c < kCols; ++c) s[c] = hsum_ps(acc[c]) - hsum_ps(accm[c]);
}

// q6_K · q8_K: per half h, the 64 bytes ql[64h..] give elements 128h + 0..63 by their low
// nibbles and 128h + 64..127 by their high nibbles; the two high bits come from the 32
// bytes qh[32h..] broadcast to both halves and shifted per half (variable qword shifts:
// << 4 / << 2 for the first zmm, >> 0 / >> 2 for the second, then mask 0x30). Weights are
// q + 32 (0..63); 32 * sum(scale * bsums) comes off once per block.
template <int kCols>
void dot_q6_K_q8_K(int64_t n, float* s, const void* vx, const void* vy, size_t by) {
    const block_q6_K* x = (const block_q6_K*)vx;
    const block_q8_K* y[kCols];
    column_pointers(vy, by, y);
    const int64_t nb = n / QK_K;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i m30 = _mm512_set1_epi8(0x30);
    const __m512i shl0 = halves64(4, 2), shr1 = halves64(0, 2);
    __m512 acc[kCols];
    for (int c = 0; c < kCols; ++c) acc[c] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
        const __m256i sc16 = _mm256_cvtepi8_epi16(load128(x[i].scales));
        const __m512i s16 = _mm512_castsi256_si512(sc16);
        __m512i q[4], scale[4];
        for (int h = 0; h < 2; ++h) {
            const __m512i ql = load512(x[i].ql + 64 * h);
            const __m512i qh = broadcast256(x[i].qh + 32 * h);
            q[2 * h] = _mm512_or_si512(_mm512_and_si512(ql, m4),
                                       _mm512_and_si512(_mm512_sllv_epi64(qh, shl0), m30));
            q[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                           _mm512_and_si512(_mm512_srlv_epi64(qh, shr1), m30));
        }
        for (int m = 0; m < 4; ++m) scale[m] = scales16_of(s16, m);
        const float dx = half_to_float(x[i].d);
        for (int c = 0; c < kCols; ++c) {
            const block_q8_K* yc = &y[c][i];
            const __m256i offset = _mm256_madd_epi16(q8_K_bsums(yc), sc16);
            const __m512i off = _mm512_zextsi256_si512(_mm256_slli_epi32(offset, 5));
            const __m512i sumi = _mm512_sub_epi32(dot_block_q8_K(q, scale, yc), off);
            acc[c] = _mm512_fmadd_ps(_mm512_set1_ps(yc->d * dx), _mm512_cvtepi32_ps(sumi), acc[c]);
        }
    }
    for (int c = 0; c < kCols; ++c) s[c] = hsum_ps(acc[c]);
}

// The low two bits of q2_K / q3_K: the 32 bytes of half h hold elements 128h + 32s + l at
// bits 2s of byte l; broadcast to both halves, zmm m = 2h + j (elements 64m..) shifts its
// halves by 4j and 4j + 2 (variable qword shifts) and masks with 3.
inline void unpack_k2_low_bits(const uint8_t* qs, __m512i (&q)[4]) {
    const __m512i shift[2] = {halves64(0, 2), halves64(4, 6)};
    for (int h = 0; h < 2; ++h) {
        const __m512i qb = broadcast256(qs + 32 * h);
        for (int j = 0; j < 2; ++j)
            q[2 * h + j] = _mm512_and_si512(_mm512_srlv_epi64(qb, shift[j]), _mm512_set1_epi8(3));
    }
}

// q2_K · q8_K: the 4-bit scales are unsigned, so pshufb picks and zero-extends them
// (lane k of zmm m: scale 4m + k); the 4-bit mins meet the bsums in one madd.
template <int kCols>
void dot_q2_K_q8_K(int64_t n, float* s, const void* vx, const void* vy, size_t by) {
    const block_q2_K* x = (const block_q2_K*)vx;
    const block_q8_K* y[kCols];
    column_pointers(vy, by, y);
    const int64_t nb = n / QK_K;
    const __m128i m4 = _mm_set1_epi8(0x0F);
    __m512 acc[kCols];
    __m256 accm[kCols];
    for (int c = 0; c < kCols; ++c) {
        acc[c] = _mm512_setzero_ps();
        accm[c] = _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < nb; ++i) {
        const __m128i sc_bytes = load128(x[i].scales);
        const __m512i sc = _mm512_broadcast_i32x4(_mm_and_si128(sc_bytes, m4));
        const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc_bytes, 4), m4));
        __m512i q[4], scale[4];
        unpack_k2_low_bits(x[i].qs, q);
        for (int m = 0; m < 4; ++m)
            scale[m] = _mm512_shuffle_epi8(sc, lanes16(0x8000 | (4 * m), 0x8000 | (4 * m + 1),
                                                       0x8000 | (4 * m + 2), 0x8000 | (4 * m + 3)));
        const void* dm = (const uint8_t*)&x[i] + offsetof(block_q2_K, d);
        for (int c = 0; c < kCols; ++c)
            add_block_with_mins(q, scale, mins16, dm, &y[c][i], acc[c], accm[c]);
    }
    for (int c = 0; c < kCols; ++c) s[c] = hsum_ps(acc[c]) - hsum_ps(accm[c]);
}

// q3_K · q8_K: the low two bits as q2_K; the high bit of element 128h + 32s + l is bit
// 4h + s of hmask[l] (for zmm m: bit 2m in the low half, 2m + 1 in the high half; vptestmb
// gives the byte mask), added as 4, so the weight is u = q + 4 (0..7). The signed scales
// go through vpermw; the "+ 4" comes off as 4 * sum(scale * bsums).
template <int kCols>
void dot_q3_K_q8_K(int64_t n, float* s, const void* vx, const void* vy, size_t by) {
    const block_q3_K* x = (const block_q3_K*)vx;
    const block_q8_K* y[kCols];
    column_pointers(vy, by, y);
    const int64_t nb = n / QK_K;
    __m512 acc[kCols];
    for (int c = 0; c < kCols; ++c) acc[c] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
        const __m256i sc16 = _mm256_cvtepi8_epi16(unpack_q3_K_scales16(x[i].scales));
        const __m512i s16 = _mm512_castsi256_si512(sc16);
        const __m512i hm = broadcast256(x[i].hmask);
        __m512i q[4], scale[4];
        unpack_k2_low_bits(x[i].qs, q);
        for (int m = 0; m < 4; ++m) {
            const int lo = 0x0101 << (2 * m), hi = 0x0101 << (2 * m + 1);
            const __mmask64 bit = _mm512_test_epi8_mask(hm, lanes16(lo, lo, hi, hi));
            q[m] = _mm512_mask_add_epi8(q[m], bit, q[m], _mm512_set1_epi8(4));
            scale[m] = scales16_of(s16, m);
        }
        const float dx = half_to_float(x[i].d);
        for (int c = 0; c < kCols; ++c) {
            const block_q8_K* yc = &y[c][i];
            const __m256i offset = _mm256_madd_epi16(q8_K_bsums(yc), sc16);
            const __m512i off = _mm512_zextsi256_si512(_mm256_slli_epi32(offset, 2));
            const __m512i sumi = _mm512_sub_epi32(dot_block_q8_K(q, scale, yc), off);
            acc[c] = _mm512_fmadd_ps(_mm512_set1_ps(yc->d * dx), _mm512_cvtepi32_ps(sumi), acc[c]);
        }
    }
    for (int c = 0; c < kCols; ++c) s[c] = hsum_ps(acc[c]);
}

// The table's two entry points of a kernel templated on the column count.
template <void (*Dot)(int64_t, float*, const void*, const void*, size_t)>
void vec_dot_1(int64_t n, float* s, const void* vx, const void* vy) {
    Dot(n, s, vx, vy, 0);
}

// ---------------------------------------------------------------------------------------
// Activation quantizers (the reference's bytes)

inline float hmax_ps(__m512 v) {
    __m256 m = _mm256_max_ps(_mm512_castps512_ps256(v),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 r = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    r = _mm_max_ps(r, _mm_movehl_ps(r, r));
    r = _mm_max_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}
inline float hmin_ps(__m512 v) {
    __m256 m = _mm256_min_ps(_mm512_castps512_ps256(v),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 r = _mm_min_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    r = _mm_min_ps(r, _mm_movehl_ps(r, r));
    r = _mm_min_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

// q8_0 ← f32: per block of 32, amax = max |x|, d = amax / 127, q = x * (127 / amax)
// converted with the default round-half-to-even mode (the reference's nearbyint) and
// narrowed with signed saturation (|q| <= 127 already).
void from_float_q8_0_avx512(const float* src, void* dst, int64_t n) {
    block_q8_0* y = (block_q8_0*)dst;
    for (int64_t i = 0; i < n / QK8_0; ++i) {
        const float* x = src + i * QK8_0;
        const __m512 a = _mm512_loadu_ps(x), b = _mm512_loadu_ps(x + 16);
        const float amax = hmax_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
        const float d = amax / 127.0f;
        const __m512 id = _mm512_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
        _mm_storeu_si128((__m128i*)y[i].qs,
                         _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(a, id))));
        _mm_storeu_si128((__m128i*)(y[i].qs + 16),
                         _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(b, id))));
        y[i].d = (fp16_t)_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    }
}

// q8_K ← f32: the reference scales by -127 / max, where max is the first element of
// largest magnitude with its sign. A max and a min vector give it without a scan unless
// both +amax and -amax occur (then the first one found by a compare scan). q = round(x *
// iscale) half to even; the saturating packs clamp the one possible 128 to 127. Each
// 128-bit lane of a packed zmm is one 16-element group, so psadbw of the bytes biased by
// 128 gives the bsums (two qword halves per group, added, minus 16 * 128).
void from_float_q8_K_avx512(const float* src, void* dst, int64_t n) {
    block_q8_K* y = (block_q8_K*)dst;
    // packs interleave 128-bit lanes: lane L holds dword L of v0, v1, v2, v3 in turn
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    // after the qword gather below, words hold groups 0,4,1,5,2,6,3,7 | 8,12,9,13,...
    const __m256i group_order =
        _mm256_setr_epi16(0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15);
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const float* x = src + i * QK_K;
        uint8_t* yb = (uint8_t*)&y[i];
        __m512 vmax = _mm512_loadu_ps(x), vmin = vmax;
        for (int j = 16; j < QK_K; j += 16) {
            const __m512 v = _mm512_loadu_ps(x + j);
            vmax = _mm512_max_ps(vmax, v);
            vmin = _mm512_min_ps(vmin, v);
        }
        const float hi = hmax_ps(vmax), neg_lo = -hmin_ps(vmin);
        const float amax = hi > neg_lo ? hi : neg_lo;
        if (amax == 0.0f) {
            std::memset(yb, 0, sizeof(block_q8_K));
            continue;
        }
        float max = hi > neg_lo ? hi : -neg_lo;
        if (hi == neg_lo) {
            const __m512 vamax = _mm512_set1_ps(amax);
            for (int j = 0; j < QK_K; j += 16) {
                const __m512 v = _mm512_loadu_ps(x + j);
                const __mmask16 hit = _mm512_cmp_ps_mask(_mm512_abs_ps(v), vamax, _CMP_EQ_OQ);
                if (hit) {
                    max = x[j + __builtin_ctz((unsigned)hit)];
                    break;
                }
            }
        }
        const float iscale = -127.0f / max;
        const __m512 vis = _mm512_set1_ps(iscale);
        __m512i sad[4];
        for (int g = 0; g < 4; ++g) {
            __m512i v[4];
            for (int k = 0; k < 4; ++k)
                v[k] = _mm512_cvtps_epi32(_mm512_mul_ps(vis, _mm512_loadu_ps(x + 64 * g + 16 * k)));
            const __m512i w01 = _mm512_packs_epi32(v[0], v[1]);
            const __m512i w23 = _mm512_packs_epi32(v[2], v[3]);
            const __m512i b = _mm512_permutexvar_epi32(order, _mm512_packs_epi16(w01, w23));
            _mm512_storeu_si512(yb + offsetof(block_q8_K, qs) + 64 * g, b);
            sad[g] = _mm512_sad_epu8(_mm512_xor_si512(b, bias), _mm512_setzero_si512());
        }
        // lane L of u01: [group L, group 4 + L]; of u23: [group 8 + L, group 12 + L]
        const __m512i u01 = _mm512_add_epi64(_mm512_unpacklo_epi64(sad[0], sad[1]),
                                             _mm512_unpackhi_epi64(sad[0], sad[1]));
        const __m512i u23 = _mm512_add_epi64(_mm512_unpacklo_epi64(sad[2], sad[3]),
                                             _mm512_unpackhi_epi64(sad[2], sad[3]));
        const __m256i w = _mm256_set_m128i(_mm512_cvtepi64_epi16(u23), _mm512_cvtepi64_epi16(u01));
        const __m256i bsums =
            _mm256_sub_epi16(_mm256_permutexvar_epi16(group_order, w), _mm256_set1_epi16(16 * 128));
        _mm256_storeu_si256((__m256i*)(yb + offsetof(block_q8_K, bsums)), bsums);
        const float d = 1.0f / iscale;
        std::memcpy(yb + offsetof(block_q8_K, d), &d, sizeof d);
    }
}

// ---------------------------------------------------------------------------------------
// Attention over cached rows of f16 or q8_0 (vec_mad_n, dot_rows). Both widen 16 elements
// of a row at a time to exact f32 values (f16 -> f32; q8_0: q * d, exact in f32) and then
// do one FMA per element in element / row order, as the scalar references do.

struct WidenF16 {
    static constexpr TensorType kType = TensorType::F16;
    static __m512 at(const uint8_t* row, int64_t i0) {
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(row + 2 * i0)));
    }
    static bool fits(int64_t hd) { return hd % 16 == 0; }
};
struct WidenQ8_0 {
    static constexpr TensorType kType = TensorType::Q8_0;
    static __m512 at(const uint8_t* row, int64_t i0) {
        const block_q8_0* b = (const block_q8_0*)row + i0 / 32;
        const __m512 q = _mm512_cvtepi32_ps(
            _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(b->qs + (i0 % 32)))));
        return _mm512_mul_ps(q, _mm512_set1_ps(_cvtsh_ss(b->d)));
    }
    static bool fits(int64_t hd) { return hd % 32 == 0; }
};

// The other KV cache types, widened as exactly: their products d * q are exact in f32
// (and + m rounds once, as the reference's multiply then add).
struct WidenF32 {
    static constexpr TensorType kType = TensorType::F32;
    static __m512 at(const uint8_t* row, int64_t i0) {
        return _mm512_loadu_ps((const float*)row + i0);
    }
    static bool fits(int64_t hd) { return hd % 16 == 0; }
};
struct WidenBF16 {
    static constexpr TensorType kType = TensorType::BF16;
    static __m512 at(const uint8_t* row, int64_t i0) {
        const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(row + 2 * i0)));
        return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
    }
    static bool fits(int64_t hd) { return hd % 16 == 0; }
};
// 16 nibbles of a 32-element block: elements 0..15 are the low nibbles of qs[0..15],
// 16..31 the high ones.
inline __m512i nibbles16(const uint8_t* qs, int64_t j) {
    __m128i b = _mm_loadu_si128((const __m128i*)qs);
    if (j >= 16) b = _mm_srli_epi16(b, 4);
    return _mm512_cvtepu8_epi32(_mm_and_si128(b, _mm_set1_epi8(0x0F)));
}
// 16 high bits (bit j of qh for element j) as 16 in the lanes that have them.
inline __m512i high_bits16(const uint8_t* qh, int64_t j) {
    uint32_t h;
    std::memcpy(&h, qh, 4);
    return _mm512_maskz_mov_epi32((__mmask16)(h >> j), _mm512_set1_epi32(16));
}
struct WidenQ4_0 {
    static constexpr TensorType kType = TensorType::Q4_0;
    static __m512 at(const uint8_t* row, int64_t i0) {
        const block_q4_0* b = (const block_q4_0*)row + i0 / 32;
        const __m512i q = _mm512_sub_epi32(nibbles16(b->qs, i0 % 32), _mm512_set1_epi32(8));
        return _mm512_mul_ps(_mm512_cvtepi32_ps(q), _mm512_set1_ps(_cvtsh_ss(b->d)));
    }
    static bool fits(int64_t hd) { return hd % 32 == 0; }
};
struct WidenQ4_1 {
    static constexpr TensorType kType = TensorType::Q4_1;
    static __m512 at(const uint8_t* row, int64_t i0) {
        const block_q4_1* b = (const block_q4_1*)row + i0 / 32;
        return _mm512_fmadd_ps(_mm512_cvtepi32_ps(nibbles16(b->qs, i0 % 32)),
                               _mm512_set1_ps(_cvtsh_ss(b->d)), _mm512_set1_ps(_cvtsh_ss(b->m)));
    }
    static bool fits(int64_t hd) { return hd % 32 == 0; }
};
struct WidenQ5_0 {
    static constexpr TensorType kType = TensorType::Q5_0;
    static __m512 at(const uint8_t* row, int64_t i0) {
        const block_q5_0* b = (const block_q5_0*)row + i0 / 32;
        const int64_t j = i0 % 32;
        const __m512i q = _mm512_sub_epi32(
            _mm512_or_si512(nibbles16(b->qs, j), high_bits16(b->qh, j)), _mm512_set1_epi32(16));
        return _mm512_mul_ps(_mm512_cvtepi32_ps(q), _mm512_set1_ps(_cvtsh_ss(b->d)));
    }
    static bool fits(int64_t hd) { return hd % 32 == 0; }
};
struct WidenQ5_1 {
    static constexpr TensorType kType = TensorType::Q5_1;
    static __m512 at(const uint8_t* row, int64_t i0) {
        const block_q5_1* b = (const block_q5_1*)row + i0 / 32;
        const int64_t j = i0 % 32;
        const __m512i q = _mm512_or_si512(nibbles16(b->qs, j), high_bits16(b->qh, j));
        return _mm512_fmadd_ps(_mm512_cvtepi32_ps(q), _mm512_set1_ps(_cvtsh_ss(b->d)),
                               _mm512_set1_ps(_cvtsh_ss(b->m)));
    }
    static bool fits(int64_t hd) { return hd % 32 == 0; }
};
struct WidenIQ4_NL {
    static constexpr TensorType kType = TensorType::IQ4_NL;
    static __m512 at(const uint8_t* row, int64_t i0) {
        const block_iq4_nl* b = (const block_iq4_nl*)row + i0 / 32;
        const __m512 grid = _mm512_setr_ps(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38,
                                           53, 69, 89, 113);
        const __m512 v = _mm512_permutexvar_ps(nibbles16(b->qs, i0 % 32), grid);
        return _mm512_mul_ps(v, _mm512_set1_ps(_cvtsh_ss(b->d)));
    }
    static bool fits(int64_t hd) { return hd % 32 == 0; }
};

// Weighted sum of V rows: slices of 64 elements (four zmm) for up to four heads stay in
// registers over all rows; each V slice is widened once per group of four heads.
template <typename Widen, int kHeads>
void mad_slice(int64_t n_rows, const uint8_t* x, size_t bx, int64_t i0, const float* p,
               size_t p_stride, float* acc, size_t acc_stride) {
    __m512 a[kHeads][4];
    for (int g = 0; g < kHeads; ++g)
        for (int k = 0; k < 4; ++k) a[g][k] = _mm512_loadu_ps(acc + acc_stride * g + 16 * k);
    for (int64_t c = 0; c < n_rows; ++c) {
        const uint8_t* row = x + bx * (size_t)c;
        _mm_prefetch((const char*)(row + 32 * bx), _MM_HINT_T0);
        _mm_prefetch((const char*)(row + 32 * bx + 64), _MM_HINT_T0);
        __m512 v[4];
        for (int k = 0; k < 4; ++k) v[k] = Widen::at(row, i0 + 16 * k);
        for (int g = 0; g < kHeads; ++g) {
            const __m512 pg = _mm512_set1_ps(p[p_stride * g + (size_t)c]);
            for (int k = 0; k < 4; ++k) a[g][k] = _mm512_fmadd_ps(pg, v[k], a[g][k]);
        }
    }
    for (int g = 0; g < kHeads; ++g)
        for (int k = 0; k < 4; ++k) _mm512_storeu_ps(acc + acc_stride * g + 16 * k, a[g][k]);
}

// More than one group of four heads (a block of prompt tokens) over a quantized cache: the
// rows are widened once into L1 (16 KiB at a time) for all the groups, instead of once per
// group. Each (head, element) still adds the rows in order, one FMA each: the same bits.
// (f16, bf16 and f32 rows widen in one instruction: the round trip measured no faster.)
constexpr int64_t kWidenedFloats = 4096;
template <typename Widen>
constexpr bool kWidenOnce = Widen::kType != TensorType::F16 && Widen::kType != TensorType::BF16 &&
                            Widen::kType != TensorType::F32;

template <typename Widen>
void vec_mad_n_avx512(int64_t hd, int64_t n_rows, const void* vx, size_t bx, const float* p,
                      size_t p_stride, int ng, float* acc) {
    if (!Widen::fits(hd))
        return reference_kernels(Widen::kType).vec_mad_n(hd, n_rows, vx, bx, p, p_stride, ng, acc);
    const uint8_t* x = (const uint8_t*)vx;
    if (kWidenOnce<Widen> && ng > 4 && hd % 64 == 0 && hd * 16 <= kWidenedFloats) {
        alignas(64) float vw[kWidenedFloats];
        over_widened_chunks(
            hd, n_rows, x, bx, vw, kWidenedFloats,
            [&](const uint8_t* row, float* dst) {
                for (int64_t i0 = 0; i0 < hd; i0 += 16)
                    _mm512_store_ps(dst + i0, Widen::at(row, i0));
            },
            [&](int64_t c0, int64_t nr) {
                for (int64_t i = 0; i < hd; i += 64)
                    over_tiles<4>(ng, [&]<int kN>(int64_t g) {
                        mad_slice<WidenF32, kN>(nr, (const uint8_t*)vw, sizeof(float) * (size_t)hd,
                                                i, p + p_stride * g + (size_t)c0, p_stride,
                                                acc + hd * g + i, (size_t)hd);
                    });
            });
        return;
    }
    int64_t i = 0;
    for (; i + 64 <= hd; i += 64) {
        over_tiles<4>(ng, [&]<int kN>(int64_t g) {  // heads four at a time, then the rest
            mad_slice<Widen, kN>(n_rows, x, bx, i, p + p_stride * g, p_stride, acc + hd * g + i,
                                 (size_t)hd);
        });
    }
    for (; i < hd; i += 16)  // a last slice of 16 or 32 elements (hd a multiple of 16 / 32)
        for (int g = 0; g < ng; ++g) {
            __m512 a = _mm512_loadu_ps(acc + hd * g + i);
            for (int64_t c = 0; c < n_rows; ++c)
                a = _mm512_fmadd_ps(_mm512_set1_ps(p[p_stride * g + (size_t)c]),
                                    Widen::at(x + bx * (size_t)c, i), a);
            _mm512_storeu_ps(acc + hd * g + i, a);
        }
}

// Scores: 16 keys at a time in the 16 lanes. Each 16 x 16 tile (16 keys x 16 elements)
// is widened and transposed in registers, once for all the queries (a block of prompt
// tokens brings many), into L1, so one zmm holds element i of all 16 keys; every query
// then takes one FMA per element with q[i] broadcast, in element order. Head sizes up to
// this (32 KiB of stack: Gemma 4's global heads are 512; larger ones keep the reference):
constexpr int64_t kMaxTransposedHd = 512;

// Keys c < 16 (row c at x + bx * c) widened and transposed: kt[16 * i + c] = element i of
// key c, for i < hd.
template <typename Widen>
void transpose_keys(int64_t hd, const uint8_t* x, size_t bx, float* kt) {
    for (int c = 64; c < 80; ++c)  // keys four blocks ahead on their way
        for (size_t b = 0; b < bx; b += 64)
            _mm_prefetch((const char*)(x + bx * (size_t)c + b), _MM_HINT_T0);
    for (int64_t i0 = 0; i0 < hd; i0 += 16) {
        __m512 r[16];
#pragma GCC unroll 16
        for (int c = 0; c < 16; ++c) r[c] = Widen::at(x + bx * (size_t)c, i0);
        avx512::transpose16(r);  // r[j]: column j, row c in lane c
#pragma GCC unroll 16
        for (int j = 0; j < 16; ++j) _mm512_store_ps(kt + 16 * (i0 + j), r[j]);
    }
}

// The scores of kHeads queries from transposed keys, element after element per query.
template <int kHeads>
void dot_rows_transposed(int64_t hd, const float* kt, const float* q, float* s, size_t s_stride) {
    __m512 acc[kHeads];
    for (int g = 0; g < kHeads; ++g) acc[g] = _mm512_setzero_ps();
    for (int64_t i = 0; i < hd; ++i) {
        const __m512 k = _mm512_load_ps(kt + 16 * i);
#pragma GCC unroll 8
        for (int g = 0; g < kHeads; ++g)
            acc[g] = _mm512_fmadd_ps(_mm512_set1_ps(q[hd * g + i]), k, acc[g]);
    }
    for (int g = 0; g < kHeads; ++g) _mm512_storeu_ps(s + s_stride * (size_t)g, acc[g]);
}

template <typename Widen>
void dot_rows_avx512(int64_t hd, int64_t n_rows, const void* vx, size_t bx, const float* q, int ng,
                     float* s, size_t s_stride) {
    if (!Widen::fits(hd) || hd > kMaxTransposedHd)
        return reference_kernels(Widen::kType).dot_rows(hd, n_rows, vx, bx, q, ng, s, s_stride);
    const uint8_t* x = (const uint8_t*)vx;
    int64_t c = 0;
    alignas(64) float kt[kMaxTransposedHd * 16];
    for (; c + 16 <= n_rows; c += 16) {
        transpose_keys<Widen>(hd, x + bx * (size_t)c, bx, kt);
        over_tiles<8>(ng, [&]<int kN>(int64_t g0) {  // queries eight at a time, then the rest
            dot_rows_transposed<kN>(hd, kt, q + hd * g0, s + s_stride * (size_t)g0 + (size_t)c,
                                    s_stride);
        });
    }
    for (; c < n_rows; ++c) {  // the last rows one at a time, in the same order
        const uint8_t* row = x + bx * (size_t)c;
        for (int g = 0; g < ng; ++g) {
            __m128 acc = _mm_setzero_ps();
            for (int64_t i0 = 0; i0 < hd; i0 += 16) {
                alignas(64) float w[16];
                _mm512_store_ps(w, Widen::at(row, i0));
                for (int j = 0; j < 16; ++j)
                    acc = _mm_fmadd_ss(_mm_set_ss(q[hd * g + i0 + j]), _mm_set_ss(w[j]), acc);
            }
            s[s_stride * (size_t)g + (size_t)c] = _mm_cvtss_f32(acc);
        }
    }
}

// q8_0 keys against q8_0 queries in integers (dot_rows_q8), 16 keys in the 16 lanes: each
// key's codes gathered four bytes at a time and made unsigned (+128) for vpdpbusd, its
// scales widened, once for all the queries; a query's block sum starts at -128 x the sum of
// its codes (so the lanes end at the exact sum of the code products), takes 8 vpdpbusd
// with four of its codes broadcast, then one FMA by d_q x d_k, block after block as the
// reference. Head sizes up to kMaxQ8Hd (kernels/q8_queries.h); larger ones keep the
// reference.

// A tile of kN queries packed once per call, each value at a constant offset from one
// pointer (eight query pointers and runtime strides ran GCC out of registers: it reloaded
// them from the stack for every broadcast): codes[(8 * b + m) * kN + g] holds bytes
// 4m..4m+3 of query g's block b, start[b * kN + g] -128 x the sum of those 32 codes, and
// dq[b * kN + g] the block's scale.
struct Q8Tile {
    int32_t codes[8 * (kMaxQ8Hd / 32) * 8];
    int32_t start[(kMaxQ8Hd / 32) * 8];
    float dq[(kMaxQ8Hd / 32) * 8];
};

template <int kN>
void pack_q8_tile(int64_t nb, const uint8_t* q, size_t q_stride, const int32_t* sum,
                  const float* dq, Q8Tile& t) {
    for (int g = 0; g < kN; ++g)
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t* qs =
                q + q_stride * (size_t)g + sizeof(block_q8_0) * (size_t)b + offsetof(block_q8_0, qs);
            for (int m = 0; m < 8; ++m) std::memcpy(&t.codes[(8 * b + m) * kN + g], qs + 4 * m, 4);
            t.start[b * kN + g] = -128 * sum[nb * g + b];
            t.dq[b * kN + g] = dq[nb * g + b];
        }
}

// The scores of a tile's kN queries against 16 gathered keys: kt[8 * b + m] holds bytes
// 4m..4m+3 of block b of every key (+128), kd[b] the keys' scales.
template <int kN>
void q8_tile(int64_t nb, const __m512i* kt, const __m512* kd, const Q8Tile& t, float* s,
             size_t s_stride) {
    __m512 acc[kN];
    for (int g = 0; g < kN; ++g) acc[g] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        const int32_t* codes = t.codes + 8 * kN * b;
        __m512i isum[kN];
        for (int g = 0; g < kN; ++g) isum[g] = _mm512_set1_epi32(t.start[b * kN + g]);
#pragma GCC unroll 8
        for (int m = 0; m < 8; ++m) {
            const __m512i k = kt[8 * b + m];
            for (int g = 0; g < kN; ++g)
                isum[g] = _mm512_dpbusd_epi32(isum[g], k, _mm512_set1_epi32(codes[m * kN + g]));
        }
        for (int g = 0; g < kN; ++g)
            acc[g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[g]),
                                     _mm512_mul_ps(_mm512_set1_ps(t.dq[b * kN + g]), kd[b]), acc[g]);
    }
    for (int g = 0; g < kN; ++g) _mm512_storeu_ps(s + s_stride * (size_t)g, acc[g]);
}

void dot_rows_q8_avx512(int64_t hd, int64_t n_rows, const void* vx, size_t bx, const void* vq,
                        size_t q_stride, int ng, float* s, size_t s_stride) {
    const DotRowsQ8Fn ref = reference_kernels(TensorType::Q8_0).dot_rows_q8;
    if (hd % 32 != 0 || hd > kMaxQ8Hd || bx > (size_t)(INT32_MAX / 16))
        return ref(hd, n_rows, vx, bx, vq, q_stride, ng, s, s_stride);
    const int64_t nb = hd / 32;
    const uint8_t* x = (const uint8_t*)vx;
    const uint8_t* q = (const uint8_t*)vq;
    const __m512i index = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32((int32_t)bx));
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    alignas(64) __m512i kt[kMaxQ8Hd / 4];
    alignas(64) __m512 kd[kMaxQ8Hd / 32];
    int32_t sum[kQ8Queries * (kMaxQ8Hd / 32)];
    float dq[kQ8Queries * (kMaxQ8Hd / 32)];
    alignas(64) Q8Tile tiles[kQ8Queries / 8];
    const int64_t full = n_rows / 16 * 16;
    for (int g0 = 0; g0 < ng; g0 += kQ8Queries) {
        const int n = std::min(kQ8Queries, ng - g0);
        const uint8_t* qg = q + q_stride * (size_t)g0;
        read_q8_queries(qg, q_stride, n, nb, dq, sum);
        over_tiles<8>(n, [&]<int kN>(int64_t g) {  // queries eight at a time, then the rest
            pack_q8_tile<kN>(nb, qg + q_stride * (size_t)g, q_stride, sum + nb * g, dq + nb * g,
                             tiles[g / 8]);
        });
        for (int64_t c = 0; c < full; c += 16) {
            const uint8_t* xc = x + bx * (size_t)c;
            for (int64_t b = 0; b < nb; ++b) {
                const uint8_t* blk = xc + sizeof(block_q8_0) * (size_t)b;
                // (32 bits from the scale's address: the scale and the first two codes)
                const __m512i d = _mm512_i32gather_epi32(index, blk, 1);
                kd[b] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d));
                for (int m = 0; m < 8; ++m)
                    kt[8 * b + m] = _mm512_xor_si512(
                        _mm512_i32gather_epi32(index, blk + offsetof(block_q8_0, qs) + 4 * m, 1),
                        bias);
            }
            over_tiles<8>(n, [&]<int kN>(int64_t g) {
                q8_tile<kN>(nb, kt, kd, tiles[g / 8], s + s_stride * (size_t)(g0 + g) + (size_t)c,
                            s_stride);
            });
        }
    }
    if (full < n_rows)  // the last keys as the reference (the same bits)
        ref(hd, n_rows - full, x + bx * (size_t)full, bx, vq, q_stride, ng, s + full, s_stride);
}

// ---------------------------------------------------------------------------------------
// q8_0 values weighted in integers (mad_rows_q8), per chunk of 32 rows: the codes of rows
// 4k .. 4k + 3 interleaved (lane i holds their four codes of element i: vpdpbusd's four
// bytes), once for all the queries; per query and block, the weights' 7-bit codes P (the
// reference's arithmetic on 16 rows per step), then vpdpbusd with four of them broadcast
// (P unsigned, the codes signed: exact), and one FMA per element by the chunk's scale.

// Rows 0 .. nr - 1 (nr <= 32) into the chunk (kernels/x86/mad_chunk.h); the scales by
// gathers.
inline void mad_chunk(const uint8_t* x, size_t bx, int64_t nr, int64_t nb, MadChunk& ch) {
    const __m512i index = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
                                                               11, 12, 13, 14, 15),
                                             _mm512_set1_epi32((int)bx));
    for (int64_t b = 0; b < nb; ++b)
        for (int half = 0; half < 2; ++half) {
            const int64_t r0 = 16 * half;
            const __mmask16 live = r0 >= nr ? 0 : nr - r0 >= 16 ? 0xFFFF : (__mmask16)((1u << (nr - r0)) - 1);
            // (32 bits from the scale's address: the scale and the first two codes)
            const __m512i raw = _mm512_mask_i32gather_epi32(
                _mm512_setzero_si512(), live, index,
                x + bx * (size_t)r0 + sizeof(block_q8_0) * (size_t)b, 1);
            _mm512_store_ps(ch.d[b] + r0, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(raw)));
        }
    mad_chunk_codes(x, bx, nr, nb, ch);
}

// The largest lane of each of x[0..7] (no NaN among them), all at once: out[4 c] is x[c]'s
// and out[4 c + 2] x[4 + c]'s, for c < 4. Three rounds halve the lanes each input keeps
// while packing two inputs per register, then a swap within pairs finishes them.
inline void max_lanes8(const __m512 x[8], float out[16]) {
    __m512 c[4];
    for (int i = 0; i < 4; ++i)  // chunks 0, 1: x[2i]'s 8-lane partial; 2, 3: x[2i + 1]'s
        c[i] = _mm512_max_ps(_mm512_shuffle_f32x4(x[2 * i], x[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_f32x4(x[2 * i], x[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    __m512 h[2];
    for (int i = 0; i < 2; ++i)  // chunk j: the 4-lane partial of x[4i + j]
        h[i] = _mm512_max_ps(_mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    // per chunk j: lanes 0, 1 pairs of x[j], lanes 2, 3 of x[4 + j]
    const __m512 m = _mm512_max_ps(_mm512_shuffle_ps(h[0], h[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_ps(h[0], h[1], _MM_SHUFFLE(3, 2, 3, 2)));
    _mm512_storeu_ps(out, _mm512_max_ps(m, _mm512_permute_ps(m, _MM_SHUFFLE(2, 3, 0, 1))));
}

// kN queries over one chunk: acc[g * hd + 32 b + i] as the reference (rows past nr have
// codes and weights 0). kN * kNB <= 8.
template <int kNB, int kN>
inline void mad_chunk_queries(const MadChunk& ch, int64_t nr, const float* e, size_t e_stride,
                              int64_t hd, float* acc) {
    static_assert(kN * kNB <= 8);
    alignas(64) float w[kN * kNB][kMadChunkRows];
    alignas(64) uint8_t pc[kN * kNB][kMadChunkRows];
    const __mmask16 m0 = nr >= 16 ? 0xFFFF : (__mmask16)((1u << nr) - 1);
    const __mmask16 m1 = nr <= 16 ? 0 : nr >= 32 ? 0xFFFF : (__mmask16)((1u << (nr - 16)) - 1);
    const __m512 zero = _mm512_setzero_ps();
    // the weights w = e * d and each (query, block)'s largest (a NaN w counts as 0: max_ps
    // gives its second operand when the first is a NaN)
    __m512 mx[8];
    for (int i = kN * kNB; i < 8; ++i) mx[i] = zero;
    for (int g = 0; g < kN; ++g) {
        const float* eg = e + e_stride * (size_t)g;
        const __m512 e0 = _mm512_maskz_loadu_ps(m0, eg), e1 = _mm512_maskz_loadu_ps(m1, eg + 16);
        for (int b = 0; b < kNB; ++b) {
            const __m512 w0 = _mm512_mul_ps(e0, _mm512_load_ps(ch.d[b]));
            const __m512 w1 = _mm512_mul_ps(e1, _mm512_load_ps(ch.d[b] + 16));
            _mm512_store_ps(w[kNB * g + b], w0);
            _mm512_store_ps(w[kNB * g + b] + 16, w1);
            mx[kNB * g + b] = _mm512_max_ps(w1, _mm512_max_ps(w0, zero));
        }
    }
    alignas(64) float lanes[16];
    max_lanes8(mx, lanes);
    alignas(64) float dmax[16], up[16], down[16];
    for (int c = 0; c < 4; ++c) {
        dmax[c] = lanes[4 * c];
        dmax[4 + c] = lanes[4 * c + 2];
    }
    {
        const __m256 dm = _mm256_load_ps(dmax);
        _mm256_store_ps(up, _mm256_div_ps(_mm256_set1_ps(127.0f), dm));
        _mm256_store_ps(down, _mm256_div_ps(dm, _mm256_set1_ps(127.0f)));
    }
    const __m512i lo = _mm512_setzero_si512(), hi = _mm512_set1_epi32(127);
    for (int i = 0; i < kN * kNB; ++i) {
        const __m512 u = _mm512_set1_ps(up[i]);
        const __m512i p0 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_load_ps(w[i]), u));
        const __m512i p1 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_load_ps(w[i] + 16), u));
        _mm_store_si128((__m128i*)pc[i], _mm512_cvtepi32_epi8(_mm512_min_epi32(_mm512_max_epi32(p0, lo), hi)));
        _mm_store_si128((__m128i*)(pc[i] + 16),
                        _mm512_cvtepi32_epi8(_mm512_min_epi32(_mm512_max_epi32(p1, lo), hi)));
    }
    // One (query, block) at a time, its 32 rows in four independent sums (even and odd
    // groups of rows, each half of the block's elements): GCC kept an array of 16
    // accumulators across the row loop with a register copy per product, and spilled.
    for (int i = 0; i < kN * kNB; ++i) {
        const int g = i / kNB, b = i % kNB;
        const float dm = dmax[i];
        if (!(dm > 0.0f && dm <= 3.4028235e38f)) continue;  // the chunk weighs nothing
        __m512i s0a = _mm512_setzero_si512(), s1a = s0a, s0b = s0a, s1b = s0a;
#pragma GCC unroll 4
        for (int k = 0; k < kMadChunkRows / 4; k += 2) {
            int32_t f0, f1;
            std::memcpy(&f0, pc[i] + 4 * k, 4);
            std::memcpy(&f1, pc[i] + 4 * k + 4, 4);
            const __m512i p0 = _mm512_set1_epi32(f0), p1 = _mm512_set1_epi32(f1);
            s0a = _mm512_dpbusd_epi32(s0a, p0, _mm512_load_si512((const void*)ch.codes[k][b][0]));
            s1a = _mm512_dpbusd_epi32(s1a, p0, _mm512_load_si512((const void*)ch.codes[k][b][1]));
            s0b = _mm512_dpbusd_epi32(s0b, p1, _mm512_load_si512((const void*)ch.codes[k + 1][b][0]));
            s1b = _mm512_dpbusd_epi32(s1b, p1, _mm512_load_si512((const void*)ch.codes[k + 1][b][1]));
        }
        const __m512 dn = _mm512_set1_ps(down[i]);
        float* a = acc + hd * g + 32 * b;
        _mm512_storeu_ps(a, _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0a, s0b)), dn,
                                            _mm512_loadu_ps(a)));
        _mm512_storeu_ps(a + 16, _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s1a, s1b)),
                                                 dn, _mm512_loadu_ps(a + 16)));
    }
}

void mad_rows_q8_avx512(int64_t hd, int64_t n_rows, const void* vx, size_t bx, const float* e,
                        size_t e_stride, int ng, float* acc) {
    if (hd % 32 != 0 || hd > kMaxQ8Hd)
        return reference_kernels(TensorType::Q8_0).mad_rows_q8(hd, n_rows, vx, bx, e, e_stride, ng, acc);
    const int64_t nb = hd / 32;
    const uint8_t* x = (const uint8_t*)vx;
    MadChunk ch;
    for (int64_t c0 = 0; c0 < n_rows; c0 += kMadChunkRows) {
        const int64_t nr = std::min(kMadChunkRows, n_rows - c0);
        mad_chunk(x + bx * (size_t)c0, bx, nr, nb, ch);
        with_count<kMadMaxBlocks>((int)nb, [&]<int kNB>() {
            // queries in register tiles of at most 16 accumulators
            constexpr int kTile = kNB >= 8 ? 1 : 8 / kNB;
            over_tiles<kTile>(ng, [&]<int kN>(int64_t g) {
                const float* eg = e + e_stride * (size_t)g + (size_t)c0;
                mad_chunk_queries<kNB, kN>(ch, nr, eg, e_stride, hd, acc + hd * g);
            });
        });
    }
}

}  // namespace

void fill_avx512(TypeKernels* table) {
    using T = TensorType;
    // (head sizes the 16-element steps cover; others keep the reference)
    table[(uint32_t)T::F16].vec_mad_n = vec_mad_n_avx512<WidenF16>;
    table[(uint32_t)T::F16].dot_rows = dot_rows_avx512<WidenF16>;
    table[(uint32_t)T::Q8_0].vec_mad_n = vec_mad_n_avx512<WidenQ8_0>;
    table[(uint32_t)T::Q8_0].dot_rows = dot_rows_avx512<WidenQ8_0>;
    table[(uint32_t)T::Q8_0].dot_rows_q8 = dot_rows_q8_avx512;
    table[(uint32_t)T::Q8_0].mad_rows_q8 = mad_rows_q8_avx512;
    table[(uint32_t)T::F32].vec_mad_n = vec_mad_n_avx512<WidenF32>;
    table[(uint32_t)T::F32].dot_rows = dot_rows_avx512<WidenF32>;
    table[(uint32_t)T::BF16].vec_mad_n = vec_mad_n_avx512<WidenBF16>;
    table[(uint32_t)T::BF16].dot_rows = dot_rows_avx512<WidenBF16>;
    table[(uint32_t)T::Q4_0].vec_mad_n = vec_mad_n_avx512<WidenQ4_0>;
    table[(uint32_t)T::Q4_0].dot_rows = dot_rows_avx512<WidenQ4_0>;
    table[(uint32_t)T::Q4_1].vec_mad_n = vec_mad_n_avx512<WidenQ4_1>;
    table[(uint32_t)T::Q4_1].dot_rows = dot_rows_avx512<WidenQ4_1>;
    table[(uint32_t)T::Q5_0].vec_mad_n = vec_mad_n_avx512<WidenQ5_0>;
    table[(uint32_t)T::Q5_0].dot_rows = dot_rows_avx512<WidenQ5_0>;
    table[(uint32_t)T::Q5_1].vec_mad_n = vec_mad_n_avx512<WidenQ5_1>;
    table[(uint32_t)T::Q5_1].dot_rows = dot_rows_avx512<WidenQ5_1>;
    table[(uint32_t)T::IQ4_NL].vec_mad_n = vec_mad_n_avx512<WidenIQ4_NL>;
    table[(uint32_t)T::IQ4_NL].dot_rows = dot_rows_avx512<WidenIQ4_NL>;
    auto set_dots = [table](T t, auto dot1, auto dot4) {
        table[(uint32_t)t].vec_dot = dot1;
        table[(uint32_t)t].vec_dot_4 = dot4;
    };
    set_dots(T::Q4_0, vec_dot_1<dot_legacy_q8_0<block_q4_0, Q4_0Unsigned, 1>>,
             dot_legacy_q8_0<block_q4_0, Q4_0Unsigned, 4>);
    set_dots(T::Q5_0, vec_dot_1<dot_legacy_q8_0<block_q5_0, Q5_0Unsigned, 1>>,
             dot_legacy_q8_0<block_q5_0, Q5_0Unsigned, 4>);
    set_dots(T::Q8_0, vec_dot_1<dot_legacy_q8_0<block_q8_0, Q8_0Unsigned, 1>>,
             dot_legacy_q8_0<block_q8_0, Q8_0Unsigned, 4>);
    set_dots(T::Q2_K, vec_dot_1<dot_q2_K_q8_K<1>>, dot_q2_K_q8_K<4>);
    set_dots(T::Q3_K, vec_dot_1<dot_q3_K_q8_K<1>>, dot_q3_K_q8_K<4>);
    set_dots(T::Q4_K, vec_dot_1<dot_q45_K_q8_K<block_q4_K, 1>>, dot_q45_K_q8_K<block_q4_K, 4>);
    set_dots(T::Q5_K, vec_dot_1<dot_q45_K_q8_K<block_q5_K, 1>>, dot_q45_K_q8_K<block_q5_K, 4>);
    set_dots(T::Q6_K, vec_dot_1<dot_q6_K_q8_K<1>>, dot_q6_K_q8_K<4>);
    table[(uint32_t)T::Q8_0].from_float = from_float_q8_0_avx512;
    table[(uint32_t)T::Q8_K].from_float = from_float_q8_K_avx512;
    fill_x16_avx512(table);
}

}  // namespace edgellm

namespace edgellm {

// AVX-512 VNNI's int8 dot product: vpdpbusd on zmm (64 multiply-adds), twelve independent
// accumulators (latency 4-5 cycles, up to two a cycle).
uint64_t int8_peak_avx512(uint64_t iters, const int8_t* buf, int64_t* lanes_sum) {
    const __m512i a = _mm512_loadu_si512((const void*)buf);
    const __m512i b = _mm512_loadu_si512((const void*)(buf + 64));
    __m512i c0 = _mm512_setzero_si512(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0;
    __m512i c6 = c0, c7 = c0, c8 = c0, c9 = c0, c10 = c0, c11 = c0;
    for (uint64_t i = 0; i < iters; ++i) {
        c0 = _mm512_dpbusd_epi32(c0, a, b);
        c1 = _mm512_dpbusd_epi32(c1, a, b);
        c2 = _mm512_dpbusd_epi32(c2, a, b);
        c3 = _mm512_dpbusd_epi32(c3, a, b);
        c4 = _mm512_dpbusd_epi32(c4, a, b);
        c5 = _mm512_dpbusd_epi32(c5, a, b);
        c6 = _mm512_dpbusd_epi32(c6, a, b);
        c7 = _mm512_dpbusd_epi32(c7, a, b);
        c8 = _mm512_dpbusd_epi32(c8, a, b);
        c9 = _mm512_dpbusd_epi32(c9, a, b);
        c10 = _mm512_dpbusd_epi32(c10, a, b);
        c11 = _mm512_dpbusd_epi32(c11, a, b);
        __asm__ volatile("" : "+v"(c0), "+v"(c1), "+v"(c2), "+v"(c3), "+v"(c4), "+v"(c5));
        __asm__ volatile("" : "+v"(c6), "+v"(c7), "+v"(c8), "+v"(c9), "+v"(c10), "+v"(c11));
    }
    __m512i s =
        _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(c0, c1), _mm512_add_epi32(c2, c3)),
                         _mm512_add_epi32(_mm512_add_epi32(c4, c5), _mm512_add_epi32(c6, c7)));
    s = _mm512_add_epi32(s, _mm512_add_epi32(_mm512_add_epi32(c8, c9), _mm512_add_epi32(c10, c11)));
    alignas(64) int32_t lanes[16];
    _mm512_store_si512((void*)lanes, s);
    int64_t sum = 0;
    for (int32_t v : lanes) sum += v;
    *lanes_sum = sum;
    return iters * 12 * 64;
}

}  // namespace edgellm
