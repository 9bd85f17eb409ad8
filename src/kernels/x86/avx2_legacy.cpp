// AVX2 kernels (legacy). Compiled with -mavx2 -mfma -mf16c; see x86_kernels.h.
//
// Float rows (f32, f16, bf16) and the 32-element block types q4_0, q4_1, q5_0, q5_1,
// q8_0 with their activation types q8_0 / q8_1. The integer dot products are exact per
// block (they must equal the reference's int sums bit for bit, including stored bytes
// of -128); only the order of the float scale sums differs from the reference.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/block_formats.h"
#include "kernels/count_dispatch.h"
#include "kernels/q8_queries.h"
#include "kernels/widen_chunks.h"
#include "kernels/x86/mad_chunk.h"
#include "kernels/x86/avx2_common.h"
#include "kernels/x86/x86_kernels.h"

namespace edgellm {

namespace {

using namespace avx2;

// ---------------------------------------------------------------------------------------
// Helpers

inline float hmax_ps(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

// 16 bytes of packed nibbles -> 32 bytes 0..15 in element order: the low nibbles
// (elements 0..15) fill the low 128-bit lane, the high nibbles (16..31) the high lane.
inline __m256i unpack_nibbles(const uint8_t* qs) {
    const __m128i b = load128(qs);
    const __m256i both = _mm256_set_m128i(_mm_srli_epi16(b, 4), b);
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// 32 bits (little-endian u32 at qh) -> 32 bytes: byte j is 0xFF when bit j is set, else 0.
// Broadcast the word, give byte j a copy of qh byte j/8, keep bit j%8, compare.
inline __m256i expand_bits(const uint8_t* qh) {
    uint32_t bits;
    std::memcpy(&bits, qh, 4);
    const __m256i spread = _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL,
                                             0x0101010101010101LL, 0x0000000000000000LL);
    const __m256i rep = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), spread);
    const __m256i sel = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    return _mm256_cmpeq_epi8(_mm256_and_si256(rep, sel), sel);
}

// 32 int8 x (|x| <= 127) times 32 int8 y (any value) -> 8 int32 partial sums, exact.
// Sign trick: |y| goes to maddubs' unsigned operand, y's sign moves onto x. y = -128
// becomes unsigned 128, and x never overflows on negation, so no byte value is special.
// Pair sums stay below 2 * 128 * 127 < 32767: no int16 saturation.
inline __m256i dot_i8(__m256i x, __m256i y) {
    const __m256i ay = _mm256_sign_epi8(y, y);
    const __m256i sx = _mm256_sign_epi8(x, y);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(ay, sx), _mm256_set1_epi16(1));
}

// 32 unsigned bytes x (0..31) times 32 int8 y -> 8 int32 partial sums, exact.
inline __m256i dot_u8_i8(__m256i x, __m256i y) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), _mm256_set1_epi16(1));
}

// Sum over nb blocks of f(i, acc, extra), two independent accumulator chains so the FMA
// latency of one block overlaps the integer work of the next.
template <typename BlockFn>
inline float sum_blocks(int64_t nb, BlockFn f) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    float extra0 = 0.0f, extra1 = 0.0f;
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
        f(i, acc0, extra0);
        f(i + 1, acc1, extra1);
    }
    if (i < nb) f(i, acc0, extra0);
    return hsum_ps(_mm256_add_ps(acc0, acc1)) + (extra0 + extra1);
}

// 32 int8 values -> 32 floats d * v (+ m): widen 8 at a time to int32, convert, scale.
// Multiply and add stay separate (no FMA) so the result has the reference's rounding.
template <bool kOffset>
inline void store_block_f32(__m256i v, float d, float m, float* dst) {
    const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
    const __m256i w[4] = {_mm256_cvtepi8_epi32(lo), _mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)),
                          _mm256_cvtepi8_epi32(hi), _mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))};
    const __m256 vd = _mm256_set1_ps(d), vm = _mm256_set1_ps(m);
    for (int k = 0; k < 4; ++k) {
        __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(w[k]), vd);
        if constexpr (kOffset) f = _mm256_add_ps(f, vm);
        _mm256_storeu_ps(dst + 8 * k, f);
    }
}

// Element values of one block as 32 bytes in element order.
inline __m256i values_q4_0(const block_q4_0& b) {  // -8..7
    return _mm256_sub_epi8(unpack_nibbles(b.qs), _mm256_set1_epi8(8));
}
inline __m256i values_q4_1(const block_q4_1& b) {
    return unpack_nibbles(b.qs);
}  // 0..15
inline __m256i values_q5_0(const block_q5_0& b) {  // -16..15
    // q - 16 with q = nibble | h << 4: h set gives the nibble, h clear gives nibble - 16,
    // which in two's complement is the nibble with the top four bits set.
    const __m256i high = _mm256_andnot_si256(expand_bits(b.qh), _mm256_set1_epi8((char)0xF0));
    return _mm256_or_si256(unpack_nibbles(b.qs), high);
}
inline __m256i values_q5_1(const block_q5_1& b) {  // 0..31
    const __m256i high = _mm256_and_si256(expand_bits(b.qh), _mm256_set1_epi8(0x10));
    return _mm256_or_si256(unpack_nibbles(b.qs), high);
}

// ---------------------------------------------------------------------------------------
// Dot products

// f32: four independent 8-lane FMA accumulators over 32 elements per step, scalar tail.
void vec_dot_f32_avx2(int64_t n, float* s, const void* vx, const void* vy) {
    const float* x = (const float*)vx;
    const float* y = (const float*)vy;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; ++k)
            acc[k] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8 * k), _mm256_loadu_ps(y + i + 8 * k),
                                     acc[k]);
    for (; i + 8 <= n; i += 8)
        acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc[0]);
    float sum =
        hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    for (; i < n; ++i) sum += x[i] * y[i];
    *s = sum;
}

// f16: F16C widens 8 halves to f32 (exact), then as f32 with four FMA accumulators.
void vec_dot_f16_avx2(int64_t n, float* s, const void* vx, const void* vy) {
    const fp16_t* x = (const fp16_t*)vx;
    const fp16_t* y = (const fp16_t*)vy;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; ++k)
            acc[k] = _mm256_fmadd_ps(_mm256_cvtph_ps(load128(x + i + 8 * k)),
                                     _mm256_cvtph_ps(load128(y + i + 8 * k)), acc[k]);
    for (; i + 8 <= n; i += 8)
        acc[0] = _mm256_fmadd_ps(_mm256_cvtph_ps(load128(x + i)), _mm256_cvtph_ps(load128(y + i)),
                                 acc[0]);
    float sum =
        hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    for (; i < n; ++i) sum += fp16_to_f32(x[i]) * fp16_to_f32(y[i]);
    *s = sum;
}

// f16 · several f16 rows: x is widened to f32 once (exact), then each y exactly as
// vec_dot_f16_avx2 does it (same lanes, same FMA order), so every result is bit-identical.
void vec_dot_n_f16_avx2(int64_t n, float* s, const void* vx, const void* vy, size_t by, int ny) {
    const fp16_t* x = (const fp16_t*)vx;
    constexpr int64_t kMax = 1024;
    if (n > kMax) {
        for (int c = 0; c < ny; ++c)
            vec_dot_f16_avx2(n, s + c, vx, (const uint8_t*)vy + by * (size_t)c);
        return;
    }
    alignas(32) float xf[kMax];
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_store_ps(xf + i, _mm256_cvtph_ps(load128(x + i)));
    for (; i < n; ++i) xf[i] = fp16_to_f32(x[i]);
    for (int c = 0; c < ny; ++c) {
        const fp16_t* y = (const fp16_t*)((const uint8_t*)vy + by * (size_t)c);
        __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                         _mm256_setzero_ps()};
        i = 0;
        for (; i + 32 <= n; i += 32)
            for (int k = 0; k < 4; ++k)
                acc[k] = _mm256_fmadd_ps(_mm256_load_ps(xf + i + 8 * k),
                                         _mm256_cvtph_ps(load128(y + i + 8 * k)), acc[k]);
        for (; i + 8 <= n; i += 8)
            acc[0] =
                _mm256_fmadd_ps(_mm256_load_ps(xf + i), _mm256_cvtph_ps(load128(y + i)), acc[0]);
        float sum =
            hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
        for (; i < n; ++i) sum += xf[i] * fp16_to_f32(y[i]);
        s[c] = sum;
    }
}

// bf16 -> f32 is a zero-extend and a 16-bit left shift; then as f32.
inline __m256 load_bf16x8(const bf16_t* p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(load128(p)), 16));
}
void vec_dot_bf16_avx2(int64_t n, float* s, const void* vx, const void* vy) {
    const bf16_t* x = (const bf16_t*)vx;
    const bf16_t* y = (const bf16_t*)vy;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; ++k)
            acc[k] =
                _mm256_fmadd_ps(load_bf16x8(x + i + 8 * k), load_bf16x8(y + i + 8 * k), acc[k]);
    for (; i + 8 <= n; i += 8)
        acc[0] = _mm256_fmadd_ps(load_bf16x8(x + i), load_bf16x8(y + i), acc[0]);
    float sum =
        hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    for (; i < n; ++i) sum += bf16_to_f32(x[i]) * bf16_to_f32(y[i]);
    *s = sum;
}

// q4_0 x q8_0: nibbles - 8 as int8, sign trick (dot_i8) for the exact int sum of the
// block, then one FMA of the 8 int32 partial sums (as float) by dx * dy.
void vec_dot_q4_0_q8_0_avx2(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q4_0* x = (const block_q4_0*)vx;
    const block_q8_0* y = (const block_q8_0*)vy;
    *s = sum_blocks(n / QK8_0, [&](int64_t i, __m256& acc, float&) {
        const __m256 d = _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d));
        const __m256i p = dot_i8(values_q4_0(x[i]), load256(y[i].qs));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
    });
}

// q4_1 x q8_1: nibbles are unsigned, so they feed maddubs directly; the offset term
// m * (dy * sum(qy)) comes from the activation's precomputed s, one scalar FMA per block.
void vec_dot_q4_1_q8_1_avx2(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q4_1* x = (const block_q4_1*)vx;
    const block_q8_1* y = (const block_q8_1*)vy;
    *s = sum_blocks(n / QK8_1, [&](int64_t i, __m256& acc, float& offs) {
        const __m256 d = _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d));
        const __m256i p = dot_u8_i8(values_q4_1(x[i]), load256(y[i].qs));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
        offs += h2f(x[i].m) * h2f(y[i].s);
    });
}

// q5_0 x q8_0: the fifth bits expand to bytes (expand_bits) and merge into the nibbles
// as signed q - 16; then as q4_0.
void vec_dot_q5_0_q8_0_avx2(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q5_0* x = (const block_q5_0*)vx;
    const block_q8_0* y = (const block_q8_0*)vy;
    *s = sum_blocks(n / QK8_0, [&](int64_t i, __m256& acc, float&) {
        const __m256 d = _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d));
        const __m256i p = dot_i8(values_q5_0(x[i]), load256(y[i].qs));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
    });
}

// q5_1 x q8_1: unsigned 5-bit values (nibble | bit << 4) into maddubs; offset as q4_1.
void vec_dot_q5_1_q8_1_avx2(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q5_1* x = (const block_q5_1*)vx;
    const block_q8_1* y = (const block_q8_1*)vy;
    *s = sum_blocks(n / QK8_1, [&](int64_t i, __m256& acc, float& offs) {
        const __m256 d = _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d));
        const __m256i p = dot_u8_i8(values_q5_1(x[i]), load256(y[i].qs));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
        offs += h2f(x[i].m) * h2f(y[i].s);
    });
}

// q8_0 x q8_0: both sides are full int8, where the sign trick is not exact (-128 * -128
// pairs overflow maddubs, and -(-128) wraps), and stored weights may hold -128. So widen
// both to int16 (vpmovsxbw) and use madd: exact for every byte. hadd + a qword permute
// leave int32 lane k = sum of bytes 4k..4k+3, and one FMA chain accumulates the blocks:
// the same float operations, in the same order, as llama.cpp's AVX2 kernel, so q8_0
// models reproduce its logits bit for bit.
void vec_dot_q8_0_q8_0_avx2(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q8_0* x = (const block_q8_0*)vx;
    const block_q8_0* y = (const block_q8_0*)vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK8_0; ++i) {
        const __m256 d = _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d));
        const __m256i x0 = _mm256_cvtepi8_epi16(load128(x[i].qs));
        const __m256i x1 = _mm256_cvtepi8_epi16(load128(x[i].qs + 16));
        const __m256i y0 = _mm256_cvtepi8_epi16(load128(y[i].qs));
        const __m256i y1 = _mm256_cvtepi8_epi16(load128(y[i].qs + 16));
        // lo lanes: pairs of bytes 0..15, hi lanes: pairs of bytes 16..31
        const __m256i lo = _mm256_madd_epi16(x0, y0);
        const __m256i hi = _mm256_madd_epi16(x1, y1);
        // hadd -> quads [0, 1, 4, 5 | 2, 3, 6, 7]; permute qwords (0, 2, 1, 3) -> 0..7
        const __m256i quads = _mm256_permute4x64_epi64(_mm256_hadd_epi32(lo, hi), 0xD8);
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(quads), acc);
    }
    *s = hsum_ps(acc);
}

// Four-column versions: one weight row against four activation rows (stride by bytes).
// The weight block is decoded once and reused. Each column does exactly the float
// operations of the one-column kernel (two accumulator chains, blocks alternating, as
// sum_blocks), so a batch and token-by-token decoding give identical logits.
template <typename Block, __m256i (*Values)(const Block&)>
void vec_dot4_q0_q8_0_avx2(int64_t n, float* s, const void* vx, const void* vy, size_t by) {
    const Block* x = (const Block*)vx;
    const block_q8_0* y[4];
    for (int c = 0; c < 4; ++c) y[c] = (const block_q8_0*)((const uint8_t*)vy + by * (size_t)c);
    __m256 acc[2][4];
    for (int c = 0; c < 4; ++c) acc[0][c] = acc[1][c] = _mm256_setzero_ps();
    const int64_t nb = n / QK8_0;
    for (int64_t i = 0; i < nb; ++i) {
        const __m256i qx = Values(x[i]);
        const float dx = h2f(x[i].d);
        const int chain = (int)(i & 1);  // as sum_blocks: even blocks on chain 0, odd on 1
        for (int c = 0; c < 4; ++c) {
            const __m256i p = dot_i8(qx, load256(y[c][i].qs));
            acc[chain][c] = _mm256_fmadd_ps(_mm256_set1_ps(dx * h2f(y[c][i].d)),
                                            _mm256_cvtepi32_ps(p), acc[chain][c]);
        }
    }
    // "+ 0.0f" as sum_blocks adds its (zero) extra term: it turns -0 into +0 the same way.
    for (int c = 0; c < 4; ++c) s[c] = hsum_ps(_mm256_add_ps(acc[0][c], acc[1][c])) + 0.0f;
}

// q8_0 x 4: as vec_dot_q8_0_q8_0_avx2 (exact for every byte, llama.cpp's lane order).
void vec_dot4_q8_0_q8_0_avx2(int64_t n, float* s, const void* vx, const void* vy, size_t by) {
    const block_q8_0* x = (const block_q8_0*)vx;
    const block_q8_0* y[4];
    for (int c = 0; c < 4; ++c) y[c] = (const block_q8_0*)((const uint8_t*)vy + by * (size_t)c);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    for (int64_t i = 0; i < n / QK8_0; ++i) {
        const __m256i x0 = _mm256_cvtepi8_epi16(load128(x[i].qs));
        const __m256i x1 = _mm256_cvtepi8_epi16(load128(x[i].qs + 16));
        const float dx = h2f(x[i].d);
        for (int c = 0; c < 4; ++c) {
            const __m256i lo = _mm256_madd_epi16(x0, _mm256_cvtepi8_epi16(load128(y[c][i].qs)));
            const __m256i hi =
                _mm256_madd_epi16(x1, _mm256_cvtepi8_epi16(load128(y[c][i].qs + 16)));
            const __m256i p = _mm256_permute4x64_epi64(_mm256_hadd_epi32(lo, hi), 0xD8);
            acc[c] =
                _mm256_fmadd_ps(_mm256_set1_ps(dx * h2f(y[c][i].d)), _mm256_cvtepi32_ps(p), acc[c]);
        }
    }
    for (int c = 0; c < 4; ++c) s[c] = hsum_ps(acc[c]);
}

// ---------------------------------------------------------------------------------------
// Dequantize: unpack the block's values to 32 bytes, widen to int32, convert, scale.

void to_float_q4_0_avx2(const void* src, float* dst, int64_t n) {
    const block_q4_0* x = (const block_q4_0*)src;
    for (int64_t i = 0; i < n / QK4_0; ++i)
        store_block_f32<false>(values_q4_0(x[i]), h2f(x[i].d), 0.0f, dst + i * QK4_0);
}
void to_float_q4_1_avx2(const void* src, float* dst, int64_t n) {
    const block_q4_1* x = (const block_q4_1*)src;
    for (int64_t i = 0; i < n / QK4_1; ++i)
        store_block_f32<true>(values_q4_1(x[i]), h2f(x[i].d), h2f(x[i].m), dst + i * QK4_1);
}
void to_float_q5_0_avx2(const void* src, float* dst, int64_t n) {
    const block_q5_0* x = (const block_q5_0*)src;
    for (int64_t i = 0; i < n / QK5_0; ++i)
        store_block_f32<false>(values_q5_0(x[i]), h2f(x[i].d), 0.0f, dst + i * QK5_0);
}
void to_float_q5_1_avx2(const void* src, float* dst, int64_t n) {
    const block_q5_1* x = (const block_q5_1*)src;
    for (int64_t i = 0; i < n / QK5_1; ++i)
        store_block_f32<true>(values_q5_1(x[i]), h2f(x[i].d), h2f(x[i].m), dst + i * QK5_1);
}
void to_float_q8_0_avx2(const void* src, float* dst, int64_t n) {
    const block_q8_0* x = (const block_q8_0*)src;
    for (int64_t i = 0; i < n / QK8_0; ++i)
        store_block_f32<false>(load256(x[i].qs), h2f(x[i].d), 0.0f, dst + i * QK8_0);
}

// f16 -> f32: F16C, 8 at a time, scalar tail.
void to_float_f16_avx2(const void* src, float* dst, int64_t n) {
    const fp16_t* x = (const fp16_t*)src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(load128(x + i)));
    for (; i < n; ++i) dst[i] = fp16_to_f32(x[i]);
}

// bf16 -> f32: zero-extend and shift left by 16, 8 at a time.
void to_float_bf16_avx2(const void* src, float* dst, int64_t n) {
    const bf16_t* x = (const bf16_t*)src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load_bf16x8(x + i));
    for (; i < n; ++i) dst[i] = bf16_to_f32(x[i]);
}

// ---------------------------------------------------------------------------------------
// Quantize

// One block of 32 floats -> int8 as the reference does it (and as llama.cpp's x86 code
// does): amax by and-not of the sign bit and a max tree, d = amax / 127, q = x * (127 /
// amax) rounded to nearest even. The four int32 vectors pack to int8 with saturating
// packs plus a dword permute to undo the lane interleave. Returns d; *sum gets sum(q).
inline float quantize_block_q8(const float* x, int8_t* qs, int* sum) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
        v[k] = _mm256_loadu_ps(x + 8 * k);
        amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[k]));
    }
    const float max_scalar = hmax_ps(amax);
    const float d = max_scalar / 127.0f;
    const __m256 vid = _mm256_set1_ps(max_scalar != 0.0f ? 127.0f / max_scalar : 0.0f);
    __m256i q[4];
    for (int k = 0; k < 4; ++k) {
        const __m256 t = _mm256_mul_ps(v[k], vid);
        q[k] =
            _mm256_cvtps_epi32(_mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    *sum = hsum_epi32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
    const __m256i p01 = _mm256_packs_epi32(q[0], q[1]);
    const __m256i p23 = _mm256_packs_epi32(q[2], q[3]);
    const __m256i p = _mm256_packs_epi16(p01, p23);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    _mm256_storeu_si256((__m256i*)qs, _mm256_permutevar8x32_epi32(p, order));
    return d;
}

// q8_0: quantize_block_q8 per block, d stored as f16.
void from_float_q8_0_avx2(const float* src, void* dst, int64_t n) {
    block_q8_0* y = (block_q8_0*)dst;
    for (int64_t i = 0; i < n / QK8_0; ++i) {
        int sum;
        y[i].d = f2h(quantize_block_q8(src + i * QK8_0, y[i].qs, &sum));
    }
}

// q8_1: as q8_0, plus s = f16(d * sum(q)) from the int32 lanes before packing.
void from_float_q8_1_avx2(const float* src, void* dst, int64_t n) {
    block_q8_1* y = (block_q8_1*)dst;
    for (int64_t i = 0; i < n / QK8_1; ++i) {
        int sum;
        const float d = quantize_block_q8(src + i * QK8_1, y[i].qs, &sum);
        y[i].d = f2h(d);
        y[i].s = f2h((float)sum * d);
    }
}

// f32 -> f16: F16C vcvtps2ph with round-to-nearest-even, 8 at a time, scalar tail.
void from_float_f16_avx2(const float* src, void* dst, int64_t n) {
    fp16_t* y = (fp16_t*)dst;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i*)(y + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; ++i) y[i] = f32_to_fp16(src[i]);
}

// f32 -> bf16: the reference's integer rounding (add 0x7fff + lsb, shift) on 8 lanes,
// NaN -> quiet NaN by blend, then an unsigned-saturating pack (values are <= 0xffff).
void from_float_bf16_avx2(const float* src, void* dst, int64_t n) {
    bf16_t* y = (bf16_t*)dst;
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
    const __m256i quiet = _mm256_set1_epi32(64);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i u = _mm256_castps_si256(_mm256_loadu_ps(src + i));
        const __m256i hi = _mm256_srli_epi32(u, 16);
        const __m256i lsb = _mm256_and_si256(hi, one);
        const __m256i rounded =
            _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(bias, lsb)), 16);
        const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
        const __m256i r = _mm256_blendv_epi8(rounded, _mm256_or_si256(hi, quiet), nan);
        _mm_storeu_si128((__m128i*)(y + i), _mm_packus_epi32(_mm256_castsi256_si128(r),
                                                             _mm256_extracti128_si256(r, 1)));
    }
    for (; i < n; ++i) y[i] = f32_to_bf16(src[i]);
}

// ---------------------------------------------------------------------------------------
// Attention over cached rows (dot_rows, vec_mad_n; kernels.h): eight elements widened at a
// time to exact f32 (f16 -> f32; q8_0: q * d), one FMA per element in element / row
// order, as the scalar references do, so the results are theirs bit for bit.

struct RowF16 {
    static constexpr TensorType kType = TensorType::F16;
    static bool fits(int64_t hd) { return hd % 8 == 0; }
    static __m256 at(const uint8_t* row, int64_t i0) {
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(row + 2 * i0)));
    }
};
struct RowQ8_0 {
    static constexpr TensorType kType = TensorType::Q8_0;
    static bool fits(int64_t hd) { return hd % 32 == 0; }
    static __m256 at(const uint8_t* row, int64_t i0) {
        const block_q8_0* b = (const block_q8_0*)row + i0 / 32;
        const __m256 q = _mm256_cvtepi32_ps(
            _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)(b->qs + i0 % 32))));
        return _mm256_mul_ps(q, _mm256_set1_ps(_cvtsh_ss(b->d)));
    }
};

// The other KV cache types, widened as exactly as the reference (d * q exact in f32; + m
// rounds once).
struct RowF32 {
    static constexpr TensorType kType = TensorType::F32;
    static bool fits(int64_t hd) { return hd % 8 == 0; }
    static __m256 at(const uint8_t* row, int64_t i0) { return _mm256_loadu_ps((const float*)row + i0); }
};
struct RowBF16 {
    static constexpr TensorType kType = TensorType::BF16;
    static bool fits(int64_t hd) { return hd % 8 == 0; }
    static __m256 at(const uint8_t* row, int64_t i0) {
        const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)(row + 2 * i0)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
    }
};
// 8 nibbles of a 32-element block from element j (a multiple of 8): elements 0..15 are
// the low nibbles of qs[0..15], 16..31 the high ones.
inline __m256i nibbles8(const uint8_t* qs, int64_t j) {
    __m128i b = _mm_loadl_epi64((const __m128i*)(qs + j % 16));
    if (j >= 16) b = _mm_srli_epi16(b, 4);
    return _mm256_cvtepu8_epi32(_mm_and_si128(b, _mm_set1_epi8(0x0F)));
}
// 16 in the lanes whose high bit (bit j + lane of qh) is set.
inline __m256i high_bits8(const uint8_t* qh, int64_t j) {
    uint32_t h;
    std::memcpy(&h, qh, 4);
    const __m256i bits = _mm256_set1_epi32((int)((h >> j) & 0xFF));
    const __m256i lane = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    return _mm256_and_si256(_mm256_cmpeq_epi32(_mm256_and_si256(bits, lane), lane), _mm256_set1_epi32(16));
}
struct RowQ4_0 {
    static constexpr TensorType kType = TensorType::Q4_0;
    static bool fits(int64_t hd) { return hd % 32 == 0; }
    static __m256 at(const uint8_t* row, int64_t i0) {
        const block_q4_0* b = (const block_q4_0*)row + i0 / 32;
        const __m256i q = _mm256_sub_epi32(nibbles8(b->qs, i0 % 32), _mm256_set1_epi32(8));
        return _mm256_mul_ps(_mm256_cvtepi32_ps(q), _mm256_set1_ps(_cvtsh_ss(b->d)));
    }
};
struct RowQ4_1 {
    static constexpr TensorType kType = TensorType::Q4_1;
    static bool fits(int64_t hd) { return hd % 32 == 0; }
    static __m256 at(const uint8_t* row, int64_t i0) {
        const block_q4_1* b = (const block_q4_1*)row + i0 / 32;
        return _mm256_fmadd_ps(_mm256_cvtepi32_ps(nibbles8(b->qs, i0 % 32)), _mm256_set1_ps(_cvtsh_ss(b->d)),
                               _mm256_set1_ps(_cvtsh_ss(b->m)));
    }
};
struct RowQ5_0 {
    static constexpr TensorType kType = TensorType::Q5_0;
    static bool fits(int64_t hd) { return hd % 32 == 0; }
    static __m256 at(const uint8_t* row, int64_t i0) {
        const block_q5_0* b = (const block_q5_0*)row + i0 / 32;
        const int64_t j = i0 % 32;
        const __m256i q = _mm256_sub_epi32(_mm256_or_si256(nibbles8(b->qs, j), high_bits8(b->qh, j)),
                                           _mm256_set1_epi32(16));
        return _mm256_mul_ps(_mm256_cvtepi32_ps(q), _mm256_set1_ps(_cvtsh_ss(b->d)));
    }
};
struct RowQ5_1 {
    static constexpr TensorType kType = TensorType::Q5_1;
    static bool fits(int64_t hd) { return hd % 32 == 0; }
    static __m256 at(const uint8_t* row, int64_t i0) {
        const block_q5_1* b = (const block_q5_1*)row + i0 / 32;
        const int64_t j = i0 % 32;
        const __m256i q = _mm256_or_si256(nibbles8(b->qs, j), high_bits8(b->qh, j));
        return _mm256_fmadd_ps(_mm256_cvtepi32_ps(q), _mm256_set1_ps(_cvtsh_ss(b->d)),
                               _mm256_set1_ps(_cvtsh_ss(b->m)));
    }
};
struct RowIQ4_NL {
    static constexpr TensorType kType = TensorType::IQ4_NL;
    static bool fits(int64_t hd) { return hd % 32 == 0; }
    static __m256 at(const uint8_t* row, int64_t i0) {
        const block_iq4_nl* b = (const block_iq4_nl*)row + i0 / 32;
        const __m256i idx = nibbles8(b->qs, i0 % 32);
        // the grid's two halves by index bit 3, each looked up with permutevar8x32
        const __m256 lo = _mm256_setr_ps(-127, -104, -83, -65, -49, -35, -22, -10);
        const __m256 hi = _mm256_setr_ps(1, 13, 25, 38, 53, 69, 89, 113);
        const __m256 vl = _mm256_permutevar8x32_ps(lo, idx), vh = _mm256_permutevar8x32_ps(hi, idx);
        const __m256 upper = _mm256_castsi256_ps(_mm256_cmpgt_epi32(idx, _mm256_set1_epi32(7)));
        return _mm256_mul_ps(_mm256_blendv_ps(vl, vh, upper), _mm256_set1_ps(_cvtsh_ss(b->d)));
    }
};

// V sum: slices of 32 elements (four ymm) for up to two heads stay in registers.
template <typename Row, int kHeads>
void mad_slice(int64_t n_rows, const uint8_t* x, size_t bx, int64_t i0, const float* p,
               size_t p_stride, float* acc, size_t acc_stride) {
    __m256 a[kHeads][4];
    for (int g = 0; g < kHeads; ++g)
        for (int k = 0; k < 4; ++k) a[g][k] = _mm256_loadu_ps(acc + acc_stride * g + 8 * k);
    for (int64_t c = 0; c < n_rows; ++c) {
        const uint8_t* row = x + bx * (size_t)c;
        __m256 v[4];
        for (int k = 0; k < 4; ++k) v[k] = Row::at(row, i0 + 8 * k);
        for (int g = 0; g < kHeads; ++g) {
            const __m256 pg = _mm256_set1_ps(p[p_stride * g + (size_t)c]);
            for (int k = 0; k < 4; ++k) a[g][k] = _mm256_fmadd_ps(pg, v[k], a[g][k]);
        }
    }
    for (int g = 0; g < kHeads; ++g)
        for (int k = 0; k < 4; ++k) _mm256_storeu_ps(acc + acc_stride * g + 8 * k, a[g][k]);
}

template <typename Row>
void vec_mad_n_avx2(int64_t hd, int64_t n_rows, const void* vx, size_t bx, const float* p,
                    size_t p_stride, int ng, float* acc) {
    if (!Row::fits(hd))
        return reference_kernels(Row::kType).vec_mad_n(hd, n_rows, vx, bx, p, p_stride, ng, acc);
    const uint8_t* x = (const uint8_t*)vx;
    // More than one pair of heads (prefill's blocks of tokens): the rows widened once into
    // L1, 16 KiB at a time, for all the pairs (widening per pair put four conversions
    // beside every eight FMAs); the sums still go row after row. (f32 rows are floats.)
    constexpr int64_t kBufFloats = 4096;
    if (Row::kType != TensorType::F32 && ng > 2 && hd <= kBufFloats) {
        alignas(32) float buf[kBufFloats];
        over_widened_chunks(
            hd, n_rows, x, bx, buf, kBufFloats,
            [&](const uint8_t* row, float* dst) {
                for (int64_t i0 = 0; i0 < hd; i0 += 8) _mm256_store_ps(dst + i0, Row::at(row, i0));
            },
            [&](int64_t c0, int64_t n) {
                vec_mad_n_avx2<RowF32>(hd, n, buf, sizeof(float) * (size_t)hd, p + c0, p_stride,
                                       ng, acc);
            });
        return;
    }
    int64_t i = 0;
    for (; i + 32 <= hd; i += 32) {
        over_tiles<2>(ng, [&]<int kN>(int64_t g) {  // heads two at a time, then the rest
            mad_slice<Row, kN>(n_rows, x, bx, i, p + p_stride * g, p_stride, acc + hd * g + i,
                               (size_t)hd);
        });
    }
    for (; i < hd; i += 8)  // the last 8, 16 or 24 elements
        for (int g = 0; g < ng; ++g) {
            __m256 a = _mm256_loadu_ps(acc + hd * g + i);
            for (int64_t c = 0; c < n_rows; ++c)
                a = _mm256_fmadd_ps(_mm256_set1_ps(p[p_stride * g + (size_t)c]),
                                    Row::at(x + bx * (size_t)c, i), a);
            _mm256_storeu_ps(acc + hd * g + i, a);
        }
}

// r[c] = row c (8 floats) -> r[j] = column j (element j of rows 0..7, row c in lane c).
inline void transpose8(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 4; ++i) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int h = 0; h < 2; ++h) {  // rows 4h .. 4h + 3: u[4h + m] = columns m | m + 4
        u[4 * h] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0x44);
        u[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0xEE);
        u[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
        u[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xEE);
    }
    for (int m = 0; m < 4; ++m) {
        r[m] = _mm256_permute2f128_ps(u[m], u[4 + m], 0x20);
        r[4 + m] = _mm256_permute2f128_ps(u[m], u[4 + m], 0x31);
    }
}

// Scores: eight keys at a time in the eight lanes. The keys' elements are widened and
// transposed once per eight keys into kt (element i of the eight keys in kt[i]), then every
// query takes them from L1, eight queries per pass; each score adds its products in element
// order, one FMA chain, as the reference. (Widening and transposing per group of queries
// put 32 shuffles and conversions beside every 32 FMAs.)
constexpr int64_t kMaxRowsHd = 512;

template <int kHeads>
void dot_rows_block(int64_t hd, const __m256* kt, const float* q, float* s, size_t s_stride) {
    __m256 acc[kHeads];
    for (int g = 0; g < kHeads; ++g) acc[g] = _mm256_setzero_ps();
    for (int64_t i = 0; i < hd; ++i) {
        const __m256 k = kt[i];
        for (int g = 0; g < kHeads; ++g)
            acc[g] = _mm256_fmadd_ps(_mm256_set1_ps(q[hd * g + i]), k, acc[g]);
    }
    for (int g = 0; g < kHeads; ++g) _mm256_storeu_ps(s + s_stride * (size_t)g, acc[g]);
}

template <typename Row>
void dot_rows_avx2(int64_t hd, int64_t n_rows, const void* vx, size_t bx, const float* q, int ng,
                   float* s, size_t s_stride) {
    if (!Row::fits(hd) || hd > kMaxRowsHd)
        return reference_kernels(Row::kType).dot_rows(hd, n_rows, vx, bx, q, ng, s, s_stride);
    const uint8_t* x = (const uint8_t*)vx;
    alignas(32) __m256 kt[kMaxRowsHd];
    int64_t c = 0;
    for (; c + 8 <= n_rows; c += 8) {
        const uint8_t* xc = x + bx * (size_t)c;
        for (int64_t i0 = 0; i0 < hd; i0 += 8) {
            __m256 r[8];
            for (int k = 0; k < 8; ++k) r[k] = Row::at(xc + bx * (size_t)k, i0);
            transpose8(r);
            for (int j = 0; j < 8; ++j) kt[i0 + j] = r[j];
        }
        over_tiles<8>(ng, [&]<int kN>(int64_t g0) {  // queries eight at a time, then the rest
            dot_rows_block<kN>(hd, kt, q + hd * g0, s + s_stride * (size_t)g0 + (size_t)c,
                               s_stride);
        });
    }
    for (; c < n_rows; ++c) {  // the last rows one at a time, in the same order
        const uint8_t* row = x + bx * (size_t)c;
        for (int g = 0; g < ng; ++g) {
            __m128 acc = _mm_setzero_ps();
            for (int64_t i0 = 0; i0 < hd; i0 += 8) {
                alignas(32) float w[8];
                _mm256_store_ps(w, Row::at(row, i0));
                for (int j = 0; j < 8; ++j)
                    acc = _mm_fmadd_ss(_mm_set_ss(q[hd * g + i0 + j]), _mm_set_ss(w[j]), acc);
            }
            s[s_stride * (size_t)g + (size_t)c] = _mm_cvtss_f32(acc);
        }
    }
}

// q8_0 keys against q8_0 queries in integers (dot_rows_q8), eight keys in the eight lanes:
// each block of the eight keys transposed (word m of every key in one register), once for
// all the queries; per query and block, |k| times four query codes broadcast with the
// keys' signs (the sign trick: exact for query codes in -127..127), pairs in int16, quads in int32
// (vpmaddubsw, vpmaddwd), the exact sum of the block; then one FMA by d_q x d_k, block
// after block as the reference.

template <int kN>
void q8_block8(int64_t nb, const __m256i* kt, const __m256* kd, const uint8_t* q, size_t q_stride,
               const float* dq, float* s, size_t s_stride) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[kN];
    for (int g = 0; g < kN; ++g) acc[g] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        __m256i isum[kN];
        const uint8_t* qs[kN];
        for (int g = 0; g < kN; ++g) {
            isum[g] = _mm256_setzero_si256();
            qs[g] = q + q_stride * (size_t)g + sizeof(block_q8_0) * (size_t)b + offsetof(block_q8_0, qs);
        }
        for (int m = 0; m < 8; ++m) {
            const __m256i k = kt[8 * b + m];
            const __m256i k_abs = _mm256_abs_epi8(k);  // (-128 -> 128 unsigned)
            for (int g = 0; g < kN; ++g) {
                int32_t four;
                std::memcpy(&four, qs[g] + 4 * m, 4);
                const __m256i pairs =
                    _mm256_maddubs_epi16(k_abs, _mm256_sign_epi8(_mm256_set1_epi32(four), k));
                isum[g] = _mm256_add_epi32(isum[g], _mm256_madd_epi16(pairs, ones));
            }
        }
        for (int g = 0; g < kN; ++g)
            acc[g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[g]),
                                     _mm256_mul_ps(_mm256_set1_ps(dq[nb * g + b]), kd[b]), acc[g]);
    }
    for (int g = 0; g < kN; ++g) _mm256_storeu_ps(s + s_stride * (size_t)g, acc[g]);
}

void dot_rows_q8_avx2(int64_t hd, int64_t n_rows, const void* vx, size_t bx, const void* vq,
                      size_t q_stride, int ng, float* s, size_t s_stride) {
    const DotRowsQ8Fn ref = reference_kernels(TensorType::Q8_0).dot_rows_q8;
    if (hd % 32 != 0 || hd > kMaxQ8Hd) return ref(hd, n_rows, vx, bx, vq, q_stride, ng, s, s_stride);
    const int64_t nb = hd / 32;
    const uint8_t* x = (const uint8_t*)vx;
    const uint8_t* q = (const uint8_t*)vq;
    alignas(32) __m256i kt[kMaxQ8Hd / 4];
    alignas(32) __m256 kd[kMaxQ8Hd / 32];
    float dq[kQ8Queries * (kMaxQ8Hd / 32)];
    const int64_t full = n_rows / 8 * 8;
    for (int g0 = 0; g0 < ng; g0 += kQ8Queries) {
        const int n = std::min(kQ8Queries, ng - g0);
        const uint8_t* qg = q + q_stride * (size_t)g0;
        read_q8_queries(qg, q_stride, n, nb, dq, nullptr);
        for (int64_t c = 0; c < full; c += 8) {
            const uint8_t* xc = x + bx * (size_t)c;
            for (int64_t b = 0; b < nb; ++b) {
                __m256 r[8];
                uint16_t d[8];
                for (int k = 0; k < 8; ++k) {
                    const block_q8_0* blk = (const block_q8_0*)(xc + bx * (size_t)k) + b;
                    r[k] = _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i*)blk->qs));
                    std::memcpy(&d[k], &blk->d, 2);
                }
                transpose8(r);  // (the words' bits, moved as floats)
                for (int m = 0; m < 8; ++m) kt[8 * b + m] = _mm256_castps_si256(r[m]);
                kd[b] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)d));
            }
            over_tiles<4>(n, [&]<int kN>(int64_t g) {  // queries four at a time, then the rest
                q8_block8<kN>(nb, kt, kd, qg + q_stride * (size_t)g, q_stride, dq + nb * g,
                              s + s_stride * (size_t)(g0 + g) + (size_t)c, s_stride);
            });
        }
    }
    if (full < n_rows)  // the last keys as the reference (the same bits)
        ref(hd, n_rows - full, x + bx * (size_t)full, bx, vq, q_stride, ng, s + full, s_stride);
}

// q8_0 values weighted in integers (mad_rows_q8), per chunk of 32 rows: the codes
// interleaved once for all the queries (kernels/x86/mad_chunk.h); then, a tile of queries
// at a time, first every (query, block)'s 7-bit weight codes P as the reference computes
// them, and only then the products, two queries at a time against each load of four rows'
// codes (vpmaddubsw: four P bytes broadcast, unsigned and at most 127, so a pair never
// saturates; vpmaddwd sums the pairs), and one FMA per element by the chunk's scale.
// (Computing P right before its products put a chain of ~80 cycles - max, division,
// packing, a store and its reloads - in front of every 64 multiply-port instructions, and
// the kernel ran at half the port's rate.)
constexpr int kMadTile = 8;  // queries whose P codes are made before their products

struct MadCodes {
    alignas(32) uint8_t p[kMadTile][kMadMaxBlocks][kMadChunkRows];
    float down[kMadTile][kMadMaxBlocks];    // D / 127
    bool live[kMadTile][kMadMaxBlocks];     // D positive and finite: the block weighs something
};

// Lane g: the largest lane of m[g] (three levels of unpack or shuffle and max)
inline __m256 hmax_8x8(const __m256* m) {
    __m256 t[4];
    for (int i = 0; i < 4; ++i)  // per 128-bit half: [a0|a2, b0|b2, a1|a3, b1|b3]
        t[i] = _mm256_max_ps(_mm256_unpacklo_ps(m[2 * i], m[2 * i + 1]),
                             _mm256_unpackhi_ps(m[2 * i], m[2 * i + 1]));
    __m256 u[2];
    for (int i = 0; i < 2; ++i)  // per half: the half's largest of m[4i .. 4i + 3]
        u[i] = _mm256_max_ps(_mm256_shuffle_ps(t[2 * i], t[2 * i + 1], 0x44),
                             _mm256_shuffle_ps(t[2 * i], t[2 * i + 1], 0xEE));
    return _mm256_max_ps(_mm256_permute2f128_ps(u[0], u[1], 0x20),
                         _mm256_permute2f128_ps(u[0], u[1], 0x31));
}

// P codes of the chunk for queries 0 .. n - 1 (weights at e + e_stride * g, past the chunk's
// nr rows read as 0). Per block: the eight queries' largest weights D in one vector (a
// NaN weight never the largest: max_ps keeps its second operand, which starts at 0), 127 /
// D and D / 127 in one division each, then each live query's codes: its weights times
// 127 / D rounded to nearest even; packs and packus saturate to 0..127 (a weight is at most
// D, so no code rounds above 127, and a NaN converts to INT_MIN, which saturates to 0).
inline void mad_weight_codes(const float* e, size_t e_stride, int n, int64_t nr, int64_t nb,
                             const MadChunk& ch, MadCodes& mc) {
    const __m256 zero = _mm256_setzero_ps(), fmax = _mm256_set1_ps(3.4028235e38f),
                 k127 = _mm256_set1_ps(127.0f);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    // the queries' weights of the chunk: read in place, or padded with zeros for a short
    // last chunk (a copy per chunk and query was 7 % of this kernel's time)
    alignas(32) float padded[kMadTile][kMadChunkRows];
    const float* eg[kMadTile];
    for (int g = 0; g < n; ++g) {
        eg[g] = e + e_stride * (size_t)g;
        if (nr < kMadChunkRows) {
            std::memset(padded[g], 0, sizeof padded[g]);
            std::memcpy(padded[g], eg[g], sizeof(float) * (size_t)nr);
            eg[g] = padded[g];
        }
    }
    for (int64_t b = 0; b < nb; ++b) {
        const float* d = ch.d[b];
        __m256 m[kMadTile];
        for (int g = 0; g < kMadTile; ++g) {
            m[g] = zero;
            if (g < n)
                for (int j = 0; j < 4; ++j)
                    m[g] = _mm256_max_ps(_mm256_mul_ps(_mm256_loadu_ps(eg[g] + 8 * j), _mm256_load_ps(d + 8 * j)), m[g]);
        }
        const __m256 dm = hmax_8x8(m);
        const int live = _mm256_movemask_ps(
            _mm256_and_ps(_mm256_cmp_ps(dm, zero, _CMP_GT_OQ), _mm256_cmp_ps(dm, fmax, _CMP_LE_OQ)));
        alignas(32) float up[kMadTile], down[kMadTile];
        _mm256_store_ps(up, _mm256_div_ps(k127, dm));
        _mm256_store_ps(down, _mm256_div_ps(dm, k127));
        for (int g = 0; g < n; ++g) {
            mc.down[g][b] = down[g];
            mc.live[g][b] = (live >> g) & 1;
            if (!mc.live[g][b]) continue;
            const __m256 ug = _mm256_broadcast_ss(up + g);
            __m256i p[4];
            for (int j = 0; j < 4; ++j)
                p[j] = _mm256_cvtps_epi32(_mm256_mul_ps(
                    _mm256_mul_ps(_mm256_loadu_ps(eg[g] + 8 * j), _mm256_load_ps(d + 8 * j)), ug));
            _mm256_store_si256((__m256i*)mc.p[g][b],
                               _mm256_permutevar8x32_epi32(
                                   _mm256_packus_epi16(_mm256_packs_epi32(p[0], p[1]),
                                                       _mm256_packs_epi32(p[2], p[3])),
                                   order));
        }
    }
}

// acc (32 floats) += (float)S * down, S the block's integer sums in four vectors
inline void mad_add(float* a, const __m256i* sum, float down) {
    const __m256 dv = _mm256_set1_ps(down);
    for (int j = 0; j < 4; ++j)
        _mm256_storeu_ps(a + 8 * j, _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[j]), dv, _mm256_loadu_ps(a + 8 * j)));
}

void mad_rows_q8_avx2(int64_t hd, int64_t n_rows, const void* vx, size_t bx, const float* e,
                      size_t e_stride, int ng, float* acc) {
    if (hd % 32 != 0 || hd > kMaxQ8Hd)
        return reference_kernels(TensorType::Q8_0).mad_rows_q8(hd, n_rows, vx, bx, e, e_stride, ng, acc);
    const int64_t nb = hd / 32;
    const uint8_t* x = (const uint8_t*)vx;
    const __m256i ones = _mm256_set1_epi16(1), zero = _mm256_setzero_si256();
    MadChunk ch;
    MadCodes mc;
    for (int64_t c0 = 0; c0 < n_rows; c0 += kMadChunkRows) {
        const int64_t nr = std::min(kMadChunkRows, n_rows - c0);
        const uint8_t* xc = x + bx * (size_t)c0;
        mad_chunk_codes(xc, bx, nr, nb, ch);
        for (int64_t b = 0; b < nb; ++b)
            for (int64_t r = 0; r < kMadChunkRows; ++r)
                ch.d[b][r] = r < nr ? h2f(((const block_q8_0*)(xc + bx * (size_t)r) + b)->d) : 0.0f;
        for (int t0 = 0; t0 < ng; t0 += kMadTile) {
            const int n = std::min(kMadTile, ng - t0);
            mad_weight_codes(e + e_stride * (size_t)t0 + (size_t)c0, e_stride, n, nr, nb, ch, mc);
            for (int64_t b = 0; b < nb; ++b) {
                // the live queries of this block, then two at a time
                int live[kMadTile], nl = 0;
                for (int g = 0; g < n; ++g)
                    if (mc.live[g][b]) live[nl++] = g;
                int i = 0;
                for (; i + 2 <= nl; i += 2) {
                    const int g0 = live[i], g1 = live[i + 1];
                    __m256i s0[4] = {zero, zero, zero, zero}, s1[4] = {zero, zero, zero, zero};
                    // (unrolled whole, GCC kept every code vector live and spilled them)
#pragma GCC unroll 2
                    for (int k = 0; k < kMadChunkRows / 4; ++k) {
                        int32_t f0, f1;
                        std::memcpy(&f0, mc.p[g0][b] + 4 * k, 4);
                        std::memcpy(&f1, mc.p[g1][b] + 4 * k, 4);
                        const __m256i p0 = _mm256_set1_epi32(f0), p1 = _mm256_set1_epi32(f1);
                        const uint8_t* codes = ch.codes[k][b][0];
                        for (int j = 0; j < 4; ++j) {
                            const __m256i c = _mm256_load_si256((const __m256i*)(codes + 32 * j));
                            s0[j] = _mm256_add_epi32(s0[j], _mm256_madd_epi16(_mm256_maddubs_epi16(p0, c), ones));
                            s1[j] = _mm256_add_epi32(s1[j], _mm256_madd_epi16(_mm256_maddubs_epi16(p1, c), ones));
                        }
                    }
                    mad_add(acc + hd * (t0 + g0) + 32 * b, s0, mc.down[g0][b]);
                    mad_add(acc + hd * (t0 + g1) + 32 * b, s1, mc.down[g1][b]);
                }
                if (i < nl) {
                    const int g = live[i];
                    __m256i s0[4] = {zero, zero, zero, zero};
                    for (int k = 0; k < kMadChunkRows / 4; ++k) {
                        int32_t f0;
                        std::memcpy(&f0, mc.p[g][b] + 4 * k, 4);
                        const __m256i p0 = _mm256_set1_epi32(f0);
                        const uint8_t* codes = ch.codes[k][b][0];
                        for (int j = 0; j < 4; ++j)
                            s0[j] = _mm256_add_epi32(
                                s0[j], _mm256_madd_epi16(_mm256_maddubs_epi16(p0, _mm256_load_si256((const __m256i*)(codes + 32 * j))), ones));
                    }
                    mad_add(acc + hd * (t0 + g) + 32 * b, s0, mc.down[g][b]);
                }
            }
        }
    }
}

}  // namespace

void fill_avx2_legacy(TypeKernels* table) {
    using T = TensorType;
    auto at = [table](T t) -> TypeKernels& { return table[(uint32_t)t]; };

    at(T::F32).vec_dot = vec_dot_f32_avx2;

    at(T::F16).vec_dot = vec_dot_f16_avx2;
    at(T::F16).to_float = to_float_f16_avx2;
    at(T::F16).from_float = from_float_f16_avx2;

    at(T::BF16).vec_dot = vec_dot_bf16_avx2;
    at(T::BF16).to_float = to_float_bf16_avx2;
    at(T::BF16).from_float = from_float_bf16_avx2;

    at(T::Q4_0).vec_dot = vec_dot_q4_0_q8_0_avx2;
    at(T::Q4_0).to_float = to_float_q4_0_avx2;
    at(T::Q4_1).vec_dot = vec_dot_q4_1_q8_1_avx2;
    at(T::Q4_1).to_float = to_float_q4_1_avx2;
    at(T::F16).vec_dot_n = vec_dot_n_f16_avx2;
    at(T::F16).vec_mad_n = vec_mad_n_avx2<RowF16>;
    at(T::F16).dot_rows = dot_rows_avx2<RowF16>;
    at(T::Q8_0).vec_mad_n = vec_mad_n_avx2<RowQ8_0>;
    at(T::Q8_0).dot_rows = dot_rows_avx2<RowQ8_0>;
    at(T::Q8_0).dot_rows_q8 = dot_rows_q8_avx2;
    at(T::Q8_0).mad_rows_q8 = mad_rows_q8_avx2;
    at(T::F32).vec_mad_n = vec_mad_n_avx2<RowF32>;
    at(T::F32).dot_rows = dot_rows_avx2<RowF32>;
    at(T::BF16).vec_mad_n = vec_mad_n_avx2<RowBF16>;
    at(T::BF16).dot_rows = dot_rows_avx2<RowBF16>;
    at(T::Q4_0).vec_mad_n = vec_mad_n_avx2<RowQ4_0>;
    at(T::Q4_0).dot_rows = dot_rows_avx2<RowQ4_0>;
    at(T::Q4_1).vec_mad_n = vec_mad_n_avx2<RowQ4_1>;
    at(T::Q4_1).dot_rows = dot_rows_avx2<RowQ4_1>;
    at(T::Q5_0).vec_mad_n = vec_mad_n_avx2<RowQ5_0>;
    at(T::Q5_0).dot_rows = dot_rows_avx2<RowQ5_0>;
    at(T::Q5_1).vec_mad_n = vec_mad_n_avx2<RowQ5_1>;
    at(T::Q5_1).dot_rows = dot_rows_avx2<RowQ5_1>;
    at(T::IQ4_NL).vec_mad_n = vec_mad_n_avx2<RowIQ4_NL>;
    at(T::IQ4_NL).dot_rows = dot_rows_avx2<RowIQ4_NL>;
    at(T::Q5_0).vec_dot = vec_dot_q5_0_q8_0_avx2;
    at(T::Q5_0).vec_dot_4 = vec_dot4_q0_q8_0_avx2<block_q5_0, values_q5_0>;
    at(T::Q4_0).vec_dot_4 = vec_dot4_q0_q8_0_avx2<block_q4_0, values_q4_0>;
    at(T::Q8_0).vec_dot_4 = vec_dot4_q8_0_q8_0_avx2;
    at(T::Q5_0).to_float = to_float_q5_0_avx2;
    at(T::Q5_1).vec_dot = vec_dot_q5_1_q8_1_avx2;
    at(T::Q5_1).to_float = to_float_q5_1_avx2;
    at(T::Q8_0).vec_dot = vec_dot_q8_0_q8_0_avx2;
    at(T::Q8_0).to_float = to_float_q8_0_avx2;
    at(T::Q8_0).from_float = from_float_q8_0_avx2;

    at(T::Q8_1).from_float = from_float_q8_1_avx2;
}

}  // namespace edgellm
