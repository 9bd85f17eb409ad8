// AVX2 kernels (kquants). Compiled with -mavx2 -mfma -mf16c; see x86_kernels.h.
//
// The dot products follow one pattern: unpack the weights of a block into unsigned bytes,
// multiply them with the signed q8_K activations by _mm256_maddubs_epi16 (pairs summed to
// int16; every product here is at most 63 * 128, so the pair sums never saturate), weight
// the int16 sums by the sub-block scales with _mm256_madd_epi16 (int32), and fold the
// block's int32 lanes into float accumulators with one FMA per scale kind. Offsets (the
// mins of q2_K/q4_K/q5_K, the "- 4" / "- 32" of q3_K/q6_K) are applied once per block
// through the activation's bsums (sums of 16 activations) instead of per element.
//
// Blocks are packed structs with no alignment, so every vector access is an unaligned
// load/store through a byte pointer.
#include <immintrin.h>

#include <cstddef>
#include <cstring>

#include "kernels/block_formats.h"
#include "kernels/x86/avx2_common.h"
#include "kernels/x86/x86_kernels.h"

namespace edgellm {

namespace {

using namespace avx2;

// ---------------------------------------------------------------------------------------
// Helpers

// Byte pointers into a q8_K block (qs at offset 4, bsums at 260).
inline const int8_t* q8_qs(const block_q8_K* b) {
    return (const int8_t*)((const uint8_t*)b + offsetof(block_q8_K, qs));
}
inline const void* q8_bsums(const block_q8_K* b) {
    return (const uint8_t*)b + offsetof(block_q8_K, bsums);
}

// Shuffle masks that broadcast one int16 of a 128-bit lane to the whole lane:
// pick16(j) selects int16 j in both lanes.
inline __m256i pick16(int j) {
    return _mm256_set1_epi16((short)(((2 * j + 1) << 8) | (2 * j)));
}
// For 16-element sub-blocks: int16 2k in the low lane and 2k+1 in the high lane, so a
// 32-byte maddubs result (low lane = sub-block 2k, high lane = 2k+1) gets its two scales.
inline __m256i pick16_pair(int k) {
    const short lo = (short)(((4 * k + 1) << 8) | (4 * k));
    const short hi = (short)(((4 * k + 3) << 8) | (4 * k + 2));
    return _mm256_set_m128i(_mm_set1_epi16(hi), _mm_set1_epi16(lo));
}

// q4_K / q5_K 6-bit scales and mins: bytes 0..7 = sc[0..7], bytes 8..15 = m[0..7].
inline __m128i unpack_scale_min_k4(const uint8_t* scales) {
    uint32_t w[3];
    std::memcpy(w, scales, 12);
    const uint32_t sc_lo = w[0] & 0x3f3f3f3fu;
    const uint32_t m_lo = w[1] & 0x3f3f3f3fu;
    const uint32_t sc_hi = (w[2] & 0x0f0f0f0fu) | ((w[0] >> 2) & 0x30303030u);
    const uint32_t m_hi = ((w[2] >> 4) & 0x0f0f0f0fu) | ((w[1] >> 2) & 0x30303030u);
    return _mm_set_epi32((int)m_hi, (int)m_lo, (int)sc_hi, (int)sc_lo);
}

// q3_K: the 16 six-bit scales, minus 32, as int8.
inline __m128i unpack_q3_K_scales_avx(const uint8_t* scales) {
    uint32_t w[3];
    std::memcpy(w, scales, 12);
    uint32_t s[4];
    s[0] = (w[0] & 0x0f0f0f0fu) | ((w[2] << 4) & 0x30303030u);
    s[1] = (w[1] & 0x0f0f0f0fu) | ((w[2] << 2) & 0x30303030u);
    s[2] = ((w[0] >> 4) & 0x0f0f0f0fu) | (w[2] & 0x30303030u);
    s[3] = ((w[1] >> 4) & 0x0f0f0f0fu) | ((w[2] >> 2) & 0x30303030u);
    const __m128i v = _mm_set_epi32((int)s[3], (int)s[2], (int)s[1], (int)s[0]);
    return _mm_sub_epi8(v, _mm_set1_epi8(32));
}

// Keeps the compiler from fusing a multiply with the following subtraction: the
// reference rounds the product before subtracting, and so must we to match it bit for bit.
inline __m256 no_contract(__m256 v) {
    __asm__("" : "+x"(v));
    return v;
}

// dst[0..8) = a * (float)bytes[0..8) - b, bytes unsigned (low 8 bytes of v).
inline void emit8_u8(__m128i v, __m256 a, __m256 b, float* dst) {
    const __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
    _mm256_storeu_ps(dst, _mm256_sub_ps(no_contract(_mm256_mul_ps(a, f)), b));
}
// dst[0..16) from the 16 unsigned bytes of v.
inline void emit16_u8(__m128i v, float a, float b, float* dst) {
    const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
    emit8_u8(v, va, vb, dst);
    emit8_u8(_mm_srli_si128(v, 8), va, vb, dst + 8);
}
// dst[0..32) from the 32 unsigned bytes of v, one scale pair for all.
inline void emit32_u8(__m256i v, float a, float b, float* dst) {
    emit16_u8(_mm256_castsi256_si128(v), a, b, dst);
    emit16_u8(_mm256_extracti128_si256(v, 1), a, b, dst + 16);
}
// dst[0..16) = a * (float)bytes, bytes signed.
inline void emit16_s8(__m128i v, float a, float* dst) {
    const __m256 va = _mm256_set1_ps(a);
    _mm256_storeu_ps(dst, _mm256_mul_ps(va, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v))));
    _mm256_storeu_ps(
        dst + 8, _mm256_mul_ps(va, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(v, 8)))));
}

// ---------------------------------------------------------------------------------------
// q2_K

// q2_K · q8_K: the four 2-bit planes of each 32-byte half are peeled off with a shift and
// mask (values 0..3, unsigned); maddubs with the activations, madd with the 4-bit scales
// picked per 16-element sub-block; the 4-bit mins meet the bsums in one madd per block.
void vec_dot_q2_K_q8_K_avx2(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q2_K* x = (const block_q2_K*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    const int64_t nb = n / QK_K;
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m128i m4 = _mm_set1_epi8(0xF);
    __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
        const float yd = y[i].d;
        const float d = yd * h2f(x[i].d);
        const float dmin = yd * h2f(x[i].dmin);
        const int8_t* q8 = q8_qs(&y[i]);

        const __m128i sc_bytes = load128(x[i].scales);
        const __m128i sc8 = _mm_and_si128(sc_bytes, m4);
        const __m128i m8 = _mm_and_si128(_mm_srli_epi16(sc_bytes, 4), m4);
        const __m256i mins = _mm256_madd_epi16(load256(q8_bsums(&y[i])), _mm256_cvtepu8_epi16(m8));

        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; ++h) {
            const __m256i scales = _mm256_broadcastsi128_si256(
                _mm_cvtepu8_epi16(h == 0 ? sc8 : _mm_srli_si128(sc8, 8)));
            const __m256i qb = load256(x[i].qs + 32 * h);
            const int8_t* yq = q8 + 128 * h;
            const __m256i q0 = _mm256_and_si256(qb, m3);
            const __m256i q1 = _mm256_and_si256(_mm256_srli_epi16(qb, 2), m3);
            const __m256i q2 = _mm256_and_si256(_mm256_srli_epi16(qb, 4), m3);
            const __m256i q3 = _mm256_and_si256(_mm256_srli_epi16(qb, 6), m3);
            const __m256i p0 = _mm256_maddubs_epi16(q0, load256(yq));
            const __m256i p1 = _mm256_maddubs_epi16(q1, load256(yq + 32));
            const __m256i p2 = _mm256_maddubs_epi16(q2, load256(yq + 64));
            const __m256i p3 = _mm256_maddubs_epi16(q3, load256(yq + 96));
            const __m256i s01 = _mm256_add_epi32(
                _mm256_madd_epi16(p0, _mm256_shuffle_epi8(scales, pick16_pair(0))),
                _mm256_madd_epi16(p1, _mm256_shuffle_epi8(scales, pick16_pair(1))));
            const __m256i s23 = _mm256_add_epi32(
                _mm256_madd_epi16(p2, _mm256_shuffle_epi8(scales, pick16_pair(2))),
                _mm256_madd_epi16(p3, _mm256_shuffle_epi8(scales, pick16_pair(3))));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(s01, s23));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        accm = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(mins), accm);
    }
    *s = hsum_ps(_mm256_sub_ps(acc, accm));
}

// q2_K → f32: the same plane unpacking; each 16-element sub-block is d*sc*q - dmin*m.
void to_float_q2_K_avx2(const void* src, float* dst, int64_t n) {
    const block_q2_K* x = (const block_q2_K*)src;
    const __m256i m3 = _mm256_set1_epi8(3);
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const float d = h2f(x[i].d), dmin = h2f(x[i].dmin);
        float* out = dst + i * QK_K;
        for (int h = 0; h < 2; ++h) {
            const __m256i qb = load256(x[i].qs + 32 * h);
            for (int k = 0; k < 4; ++k) {
                const __m256i q = _mm256_and_si256(_mm256_srli_epi16(qb, 2 * k), m3);
                const int j = 8 * h + 2 * k;  // sub-block of the low 16 bytes
                const uint8_t s0 = x[i].scales[j], s1 = x[i].scales[j + 1];
                emit16_u8(_mm256_castsi256_si128(q), d * (float)(s0 & 0xF), dmin * (float)(s0 >> 4),
                          out + 16 * j);
                emit16_u8(_mm256_extracti128_si256(q, 1), d * (float)(s1 & 0xF),
                          dmin * (float)(s1 >> 4), out + 16 * j + 16);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// q3_K

// q3_K · q8_K: each weight is made unsigned, u = low2 + 4*hbit in 0..7 (= q + 4), and dotted
// with maddubs; the signed 6-bit scales apply by madd, and the "+ 4" comes back out as
// 4 * sum(sc * bsums) per block.
void vec_dot_q3_K_q8_K_avx2(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q3_K* x = (const block_q3_K*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    const int64_t nb = n / QK_K;
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m256i four = _mm256_set1_epi8(4);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
        const float d = y[i].d * h2f(x[i].d);
        const int8_t* q8 = q8_qs(&y[i]);

        const __m128i sc8 = unpack_q3_K_scales_avx(x[i].scales);
        const __m256i offset =
            _mm256_madd_epi16(load256(q8_bsums(&y[i])), _mm256_cvtepi8_epi16(sc8));

        // hm >> j holds, in bit 0 of every byte, the high bit of plane j (= 4*half + shift).
        __m256i hm = load256(x[i].hmask);
        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; ++h) {
            const __m256i scales = _mm256_broadcastsi128_si256(
                _mm_cvtepi8_epi16(h == 0 ? sc8 : _mm_srli_si128(sc8, 8)));
            const __m256i qb = load256(x[i].qs + 32 * h);
            const int8_t* yq = q8 + 128 * h;
            __m256i q[4];
            for (int k = 0; k < 4; ++k) {
                const __m256i low = _mm256_and_si256(_mm256_srli_epi16(qb, 2 * k), m3);
                const __m256i high = _mm256_and_si256(_mm256_slli_epi16(hm, 2), four);
                q[k] = _mm256_or_si256(low, high);
                hm = _mm256_srli_epi16(hm, 1);
            }
            const __m256i p0 = _mm256_maddubs_epi16(q[0], load256(yq));
            const __m256i p1 = _mm256_maddubs_epi16(q[1], load256(yq + 32));
            const __m256i p2 = _mm256_maddubs_epi16(q[2], load256(yq + 64));
            const __m256i p3 = _mm256_maddubs_epi16(q[3], load256(yq + 96));
            const __m256i s01 = _mm256_add_epi32(
                _mm256_madd_epi16(p0, _mm256_shuffle_epi8(scales, pick16_pair(0))),
                _mm256_madd_epi16(p1, _mm256_shuffle_epi8(scales, pick16_pair(1))));
            const __m256i s23 = _mm256_add_epi32(
                _mm256_madd_epi16(p2, _mm256_shuffle_epi8(scales, pick16_pair(2))),
                _mm256_madd_epi16(p3, _mm256_shuffle_epi8(scales, pick16_pair(3))));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(s01, s23));
        }
        sumi = _mm256_sub_epi32(sumi, _mm256_slli_epi32(offset, 2));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *s = hsum_ps(acc);
}

// q3_K → f32: q = low2 + 4*hbit - 4 as signed bytes, times d*sc per 16-element sub-block.
void to_float_q3_K_avx2(const void* src, float* dst, int64_t n) {
    const block_q3_K* x = (const block_q3_K*)src;
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m256i four = _mm256_set1_epi8(4);
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const float d = h2f(x[i].d);
        int8_t sc[16];
        _mm_storeu_si128((__m128i*)sc, unpack_q3_K_scales_avx(x[i].scales));
        float* out = dst + i * QK_K;
        __m256i hm = load256(x[i].hmask);
        for (int h = 0; h < 2; ++h) {
            const __m256i qb = load256(x[i].qs + 32 * h);
            for (int k = 0; k < 4; ++k) {
                const __m256i low = _mm256_and_si256(_mm256_srli_epi16(qb, 2 * k), m3);
                const __m256i high = _mm256_and_si256(_mm256_slli_epi16(hm, 2), four);
                const __m256i q = _mm256_sub_epi8(_mm256_or_si256(low, high), four);
                hm = _mm256_srli_epi16(hm, 1);
                const int j = 8 * h + 2 * k;
                emit16_s8(_mm256_castsi256_si128(q), d * (float)sc[j], out + 16 * j);
                emit16_s8(_mm256_extracti128_si256(q, 1), d * (float)sc[j + 1], out + 16 * j + 16);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// q4_K

// q4_K · q8_K: each 32-byte chunk of qs gives two 32-element sub-blocks (low nibbles by a
// mask, high nibbles by a 16-bit shift and the same mask); maddubs u4 × s8, madd by the
// sub-block's 6-bit scale broadcast with pshufb from one int16 scale vector. The mins
// (duplicated to match the pairs of 16-element bsums) take a single madd per block.
void vec_dot_q4_K_q8_K_avx2(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q4_K* x = (const block_q4_K*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    const int64_t nb = n / QK_K;
    const __m256i m4 = _mm256_set1_epi8(0xF);
    __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
        const float yd = y[i].d;
        const float d = yd * h2f(x[i].d);
        const float dmin = yd * h2f(x[i].dmin);
        const int8_t* q8 = q8_qs(&y[i]);

        const __m128i scm = unpack_scale_min_k4(x[i].scales);
        const __m256i scales = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(scm));
        const __m128i m8 = _mm_srli_si128(scm, 8);
        const __m256i mins2 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));  // m0 m0 m1 m1 ..
        const __m256i mins = _mm256_madd_epi16(load256(q8_bsums(&y[i])), mins2);

        __m256i sumi = _mm256_setzero_si256();
        for (int c = 0; c < 4; ++c) {
            const __m256i qb = load256(x[i].qs + 32 * c);
            const __m256i lo = _mm256_and_si256(qb, m4);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qb, 4), m4);
            const __m256i p0 = _mm256_maddubs_epi16(lo, load256(q8 + 64 * c));
            const __m256i p1 = _mm256_maddubs_epi16(hi, load256(q8 + 64 * c + 32));
            const __m256i s0 = _mm256_madd_epi16(p0, _mm256_shuffle_epi8(scales, pick16(2 * c)));
            const __m256i s1 =
                _mm256_madd_epi16(p1, _mm256_shuffle_epi8(scales, pick16(2 * c + 1)));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(s0, s1));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        accm = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(mins), accm);
    }
    *s = hsum_ps(_mm256_sub_ps(acc, accm));
}

// q4_K x 4 columns: scales, mins and nibbles unpacked once per block, then the q4_K
// integer dot product for each of the four activation rows.
void vec_dot4_q4_K_q8_K_avx2(int64_t n, float* s, const void* vx, const void* vy, size_t by) {
    const block_q4_K* x = (const block_q4_K*)vx;
    const block_q8_K* y[4];
    for (int c = 0; c < 4; ++c) y[c] = (const block_q8_K*)((const uint8_t*)vy + by * (size_t)c);
    const __m256i m4 = _mm256_set1_epi8(0xF);
    __m256 acc[4], accm[4];
    for (int c = 0; c < 4; ++c) acc[c] = accm[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const float xd = h2f(x[i].d), xdmin = h2f(x[i].dmin);
        const __m128i scm = unpack_scale_min_k4(x[i].scales);
        const __m256i scales = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(scm));
        const __m128i m8 = _mm_srli_si128(scm, 8);
        const __m256i mins2 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
        __m256i lo[4], hi[4], sc_lo[4], sc_hi[4];
        for (int k = 0; k < 4; ++k) {
            const __m256i qb = load256(x[i].qs + 32 * k);
            lo[k] = _mm256_and_si256(qb, m4);
            hi[k] = _mm256_and_si256(_mm256_srli_epi16(qb, 4), m4);
            sc_lo[k] = _mm256_shuffle_epi8(scales, pick16(2 * k));
            sc_hi[k] = _mm256_shuffle_epi8(scales, pick16(2 * k + 1));
        }
        for (int c = 0; c < 4; ++c) {
            const int8_t* q8 = q8_qs(&y[c][i]);
            const __m256i mins = _mm256_madd_epi16(load256(q8_bsums(&y[c][i])), mins2);
            __m256i sumi = _mm256_setzero_si256();
            for (int k = 0; k < 4; ++k) {
                const __m256i p0 = _mm256_maddubs_epi16(lo[k], load256(q8 + 64 * k));
                const __m256i p1 = _mm256_maddubs_epi16(hi[k], load256(q8 + 64 * k + 32));
                sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(_mm256_madd_epi16(p0, sc_lo[k]),
                                                               _mm256_madd_epi16(p1, sc_hi[k])));
            }
            const float yd = y[c][i].d;
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(yd * xd), _mm256_cvtepi32_ps(sumi), acc[c]);
            accm[c] =
                _mm256_fmadd_ps(_mm256_set1_ps(yd * xdmin), _mm256_cvtepi32_ps(mins), accm[c]);
        }
    }
    for (int c = 0; c < 4; ++c) s[c] = hsum_ps(_mm256_sub_ps(acc[c], accm[c]));
}

// q4_K → f32: nibbles split by mask and shift, widened to f32, d*sc*q - dmin*m per
// 32-element sub-block.
void to_float_q4_K_avx2(const void* src, float* dst, int64_t n) {
    const block_q4_K* x = (const block_q4_K*)src;
    const __m256i m4 = _mm256_set1_epi8(0xF);
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const float d = h2f(x[i].d), dmin = h2f(x[i].dmin);
        uint8_t sm[16];
        _mm_storeu_si128((__m128i*)sm, unpack_scale_min_k4(x[i].scales));
        float* out = dst + i * QK_K;
        for (int c = 0; c < 4; ++c) {
            const __m256i qb = load256(x[i].qs + 32 * c);
            emit32_u8(_mm256_and_si256(qb, m4), d * (float)sm[2 * c], dmin * (float)sm[8 + 2 * c],
                      out + 64 * c);
            emit32_u8(_mm256_and_si256(_mm256_srli_epi16(qb, 4), m4), d * (float)sm[2 * c + 1],
                      dmin * (float)sm[8 + 2 * c + 1], out + 64 * c + 32);
        }
    }
}

// ---------------------------------------------------------------------------------------
// q5_K

// q5_K · q8_K: as q4_K, with the fifth bit of chunk c taken from qh bits 2c / 2c+1, moved
// to bit 4 by a 16-bit shift and a mask; qh is shifted right by 2 after each chunk.
void vec_dot_q5_K_q8_K_avx2(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q5_K* x = (const block_q5_K*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    const int64_t nb = n / QK_K;
    const __m256i m4 = _mm256_set1_epi8(0xF);
    const __m256i bit4 = _mm256_set1_epi8(0x10);
    __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
        const float yd = y[i].d;
        const float d = yd * h2f(x[i].d);
        const float dmin = yd * h2f(x[i].dmin);
        const int8_t* q8 = q8_qs(&y[i]);

        const __m128i scm = unpack_scale_min_k4(x[i].scales);
        const __m256i scales = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(scm));
        const __m128i m8 = _mm_srli_si128(scm, 8);
        const __m256i mins2 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
        const __m256i mins = _mm256_madd_epi16(load256(q8_bsums(&y[i])), mins2);

        __m256i hb = load256(x[i].qh);
        __m256i sumi = _mm256_setzero_si256();
        for (int c = 0; c < 4; ++c) {
            const __m256i qb = load256(x[i].qs + 32 * c);
            const __m256i lo = _mm256_or_si256(_mm256_and_si256(qb, m4),
                                               _mm256_and_si256(_mm256_slli_epi16(hb, 4), bit4));
            const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qb, 4), m4),
                                               _mm256_and_si256(_mm256_slli_epi16(hb, 3), bit4));
            hb = _mm256_srli_epi16(hb, 2);
            const __m256i p0 = _mm256_maddubs_epi16(lo, load256(q8 + 64 * c));
            const __m256i p1 = _mm256_maddubs_epi16(hi, load256(q8 + 64 * c + 32));
            const __m256i s0 = _mm256_madd_epi16(p0, _mm256_shuffle_epi8(scales, pick16(2 * c)));
            const __m256i s1 =
                _mm256_madd_epi16(p1, _mm256_shuffle_epi8(scales, pick16(2 * c + 1)));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(s0, s1));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        accm = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(mins), accm);
    }
    *s = hsum_ps(_mm256_sub_ps(acc, accm));
}

// q5_K → f32: the q4_K unpacking plus the qh bit, then d*sc*q - dmin*m.
void to_float_q5_K_avx2(const void* src, float* dst, int64_t n) {
    const block_q5_K* x = (const block_q5_K*)src;
    const __m256i m4 = _mm256_set1_epi8(0xF);
    const __m256i bit4 = _mm256_set1_epi8(0x10);
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const float d = h2f(x[i].d), dmin = h2f(x[i].dmin);
        uint8_t sm[16];
        _mm_storeu_si128((__m128i*)sm, unpack_scale_min_k4(x[i].scales));
        float* out = dst + i * QK_K;
        __m256i hb = load256(x[i].qh);
        for (int c = 0; c < 4; ++c) {
            const __m256i qb = load256(x[i].qs + 32 * c);
            const __m256i lo = _mm256_or_si256(_mm256_and_si256(qb, m4),
                                               _mm256_and_si256(_mm256_slli_epi16(hb, 4), bit4));
            const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qb, 4), m4),
                                               _mm256_and_si256(_mm256_slli_epi16(hb, 3), bit4));
            hb = _mm256_srli_epi16(hb, 2);
            emit32_u8(lo, d * (float)sm[2 * c], dmin * (float)sm[8 + 2 * c], out + 64 * c);
            emit32_u8(hi, d * (float)sm[2 * c + 1], dmin * (float)sm[8 + 2 * c + 1],
                      out + 64 * c + 32);
        }
    }
}

// ---------------------------------------------------------------------------------------
// q6_K

// The four 32-byte planes of unsigned 6-bit values (0..63) of one q6_K half: low nibbles
// of ql[0..32) / ql[32..64), then their high nibbles, each with two bits of qh at bit 4.
struct Q6Planes {
    __m256i q[4];
};
inline Q6Planes q6_planes(const uint8_t* ql, const uint8_t* qh) {
    const __m256i m4 = _mm256_set1_epi8(0xF);
    const __m256i m30 = _mm256_set1_epi8(0x30);
    const __m256i l0 = load256(ql), l1 = load256(ql + 32), h = load256(qh);
    Q6Planes p;
    p.q[0] =
        _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(h, 4), m30));
    p.q[1] =
        _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(h, 2), m30));
    p.q[2] =
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(h, m30));
    p.q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                             _mm256_and_si256(_mm256_srli_epi16(h, 2), m30));
    return p;
}

// q6_K · q8_K: weights stay unsigned (q + 32 in 0..63) for maddubs; the int8 scales are
// applied per 16-element sub-block by madd, and the "+ 32" is removed once per block as
// 32 * sum(scales * bsums) (one madd of the scales with the bsums).
void vec_dot_q6_K_q8_K_avx2(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q6_K* x = (const block_q6_K*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    const int64_t nb = n / QK_K;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
        const float d = y[i].d * h2f(x[i].d);
        const int8_t* q8 = q8_qs(&y[i]);

        const __m128i sc8 = load128(x[i].scales);
        const __m256i offset =
            _mm256_madd_epi16(load256(q8_bsums(&y[i])), _mm256_cvtepi8_epi16(sc8));

        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; ++h) {
            const __m256i scales = _mm256_broadcastsi128_si256(
                _mm_cvtepi8_epi16(h == 0 ? sc8 : _mm_srli_si128(sc8, 8)));
            const Q6Planes p = q6_planes(x[i].ql + 64 * h, x[i].qh + 32 * h);
            const int8_t* yq = q8 + 128 * h;
            const __m256i p0 = _mm256_maddubs_epi16(p.q[0], load256(yq));
            const __m256i p1 = _mm256_maddubs_epi16(p.q[1], load256(yq + 32));
            const __m256i p2 = _mm256_maddubs_epi16(p.q[2], load256(yq + 64));
            const __m256i p3 = _mm256_maddubs_epi16(p.q[3], load256(yq + 96));
            const __m256i s01 = _mm256_add_epi32(
                _mm256_madd_epi16(p0, _mm256_shuffle_epi8(scales, pick16_pair(0))),
                _mm256_madd_epi16(p1, _mm256_shuffle_epi8(scales, pick16_pair(1))));
            const __m256i s23 = _mm256_add_epi32(
                _mm256_madd_epi16(p2, _mm256_shuffle_epi8(scales, pick16_pair(2))),
                _mm256_madd_epi16(p3, _mm256_shuffle_epi8(scales, pick16_pair(3))));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(s01, s23));
        }
        sumi = _mm256_sub_epi32(sumi, _mm256_slli_epi32(offset, 5));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *s = hsum_ps(acc);
}

// q6_K x 4 columns: the 6-bit planes and scales decoded once per block.
void vec_dot4_q6_K_q8_K_avx2(int64_t n, float* s, const void* vx, const void* vy, size_t by) {
    const block_q6_K* x = (const block_q6_K*)vx;
    const block_q8_K* y[4];
    for (int c = 0; c < 4; ++c) y[c] = (const block_q8_K*)((const uint8_t*)vy + by * (size_t)c);
    __m256 acc[4];
    for (int c = 0; c < 4; ++c) acc[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const float xd = h2f(x[i].d);
        const __m128i sc8 = load128(x[i].scales);
        const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
        Q6Planes planes[2];
        __m256i sc[2][4];
        for (int h = 0; h < 2; ++h) {
            planes[h] = q6_planes(x[i].ql + 64 * h, x[i].qh + 32 * h);
            const __m256i scales = _mm256_broadcastsi128_si256(
                _mm_cvtepi8_epi16(h == 0 ? sc8 : _mm_srli_si128(sc8, 8)));
            for (int k = 0; k < 4; ++k) sc[h][k] = _mm256_shuffle_epi8(scales, pick16_pair(k));
        }
        for (int c = 0; c < 4; ++c) {
            const int8_t* q8 = q8_qs(&y[c][i]);
            const __m256i offset = _mm256_madd_epi16(load256(q8_bsums(&y[c][i])), sc16);
            __m256i sumi = _mm256_setzero_si256();
            for (int h = 0; h < 2; ++h) {
                const int8_t* yq = q8 + 128 * h;
                for (int k = 0; k < 4; ++k) {
                    const __m256i p = _mm256_maddubs_epi16(planes[h].q[k], load256(yq + 32 * k));
                    sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, sc[h][k]));
                }
            }
            sumi = _mm256_sub_epi32(sumi, _mm256_slli_epi32(offset, 5));
            acc[c] =
                _mm256_fmadd_ps(_mm256_set1_ps(y[c][i].d * xd), _mm256_cvtepi32_ps(sumi), acc[c]);
        }
    }
    for (int c = 0; c < 4; ++c) s[c] = hsum_ps(acc[c]);
}

// q6_K → f32: the planes minus 32 as signed bytes, times d*scale per 16-element sub-block.
void to_float_q6_K_avx2(const void* src, float* dst, int64_t n) {
    const block_q6_K* x = (const block_q6_K*)src;
    const __m256i m32 = _mm256_set1_epi8(32);
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const float d = h2f(x[i].d);
        float* out = dst + i * QK_K;
        for (int h = 0; h < 2; ++h) {
            const Q6Planes p = q6_planes(x[i].ql + 64 * h, x[i].qh + 32 * h);
            for (int k = 0; k < 4; ++k) {
                const __m256i q = _mm256_sub_epi8(p.q[k], m32);
                const int j = 8 * h + 2 * k;
                emit16_s8(_mm256_castsi256_si128(q), d * (float)x[i].scales[j], out + 16 * j);
                emit16_s8(_mm256_extracti128_si256(q, 1), d * (float)x[i].scales[j + 1],
                          out + 16 * j + 16);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// q8_K

// q8_K ← f32 (the activation quantizer): a vector max of |x| finds amax, a compare scan
// finds the first element reaching it (whose sign the reference keeps); then 32 elements
// at a time: multiply by iscale, convert with the default round-half-to-even mode, clamp
// to 127, pack to bytes. bsums come from psadbw on the bytes biased by 128.
void from_float_q8_K_avx2(const float* src, void* dst, int64_t n) {
    block_q8_K* y = (block_q8_K*)dst;
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256i max127 = _mm256_set1_epi32(127);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const __m256i bias = _mm256_set1_epi8((char)0x80);
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const float* x = src + i * QK_K;
        __m256 vmax = _mm256_setzero_ps();
        for (int j = 0; j < QK_K; j += 8)
            vmax = _mm256_max_ps(vmax, _mm256_and_ps(_mm256_loadu_ps(x + j), abs_mask));
        __m128 m = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
        m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        m = _mm_max_ss(m, _mm_movehdup_ps(m));
        const float amax = _mm_cvtss_f32(m);
        uint8_t* yb = (uint8_t*)&y[i];
        if (amax == 0.0f) {
            std::memset(yb, 0, sizeof(block_q8_K));
            continue;
        }
        float max = amax;
        const __m256 vamax = _mm256_set1_ps(amax);
        for (int j = 0; j < QK_K; j += 8) {
            const __m256 v = _mm256_loadu_ps(x + j);
            const int hit =
                _mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(v, abs_mask), vamax, _CMP_EQ_OQ));
            if (hit) {
                max = x[j + __builtin_ctz((unsigned)hit)];
                break;
            }
        }
        const float iscale = -127.0f / max;
        const __m256 vis = _mm256_set1_ps(iscale);
        int16_t bsums[QK_K / 16];
        for (int g = 0; g < QK_K / 32; ++g) {
            const float* xg = x + 32 * g;
            __m256i v[4];
            for (int k = 0; k < 4; ++k)
                v[k] = _mm256_min_epi32(
                    _mm256_cvtps_epi32(_mm256_mul_ps(vis, _mm256_loadu_ps(xg + 8 * k))), max127);
            const __m256i w01 = _mm256_packs_epi32(v[0], v[1]);
            const __m256i w23 = _mm256_packs_epi32(v[2], v[3]);
            const __m256i b = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(w01, w23), order);
            _mm256_storeu_si256((__m256i*)(yb + offsetof(block_q8_K, qs) + 32 * g), b);
            // psadbw: four sums of 8 (q + 128); pairs of them are the two 16-element sums.
            const __m256i sad = _mm256_sad_epu8(_mm256_xor_si256(b, bias), _mm256_setzero_si256());
            const __m256i t = _mm256_add_epi64(sad, _mm256_srli_si256(sad, 8));
            bsums[2 * g] = (int16_t)(_mm256_extract_epi32(t, 0) - 16 * 128);
            bsums[2 * g + 1] = (int16_t)(_mm256_extract_epi32(t, 4) - 16 * 128);
        }
        std::memcpy(yb + offsetof(block_q8_K, bsums), bsums, sizeof bsums);
        const float d = 1.0f / iscale;
        std::memcpy(yb + offsetof(block_q8_K, d), &d, sizeof d);
    }
}

}  // namespace

void fill_avx2_kquants(TypeKernels* table) {
    using T = TensorType;
    TypeKernels& q2 = table[(uint32_t)T::Q2_K];
    q2.vec_dot = vec_dot_q2_K_q8_K_avx2;
    q2.to_float = to_float_q2_K_avx2;
    TypeKernels& q3 = table[(uint32_t)T::Q3_K];
    q3.vec_dot = vec_dot_q3_K_q8_K_avx2;
    q3.to_float = to_float_q3_K_avx2;
    TypeKernels& q4 = table[(uint32_t)T::Q4_K];
    q4.vec_dot = vec_dot_q4_K_q8_K_avx2;
    q4.vec_dot_4 = vec_dot4_q4_K_q8_K_avx2;
    q4.to_float = to_float_q4_K_avx2;
    TypeKernels& q5 = table[(uint32_t)T::Q5_K];
    q5.vec_dot = vec_dot_q5_K_q8_K_avx2;
    q5.to_float = to_float_q5_K_avx2;
    TypeKernels& q6 = table[(uint32_t)T::Q6_K];
    q6.vec_dot = vec_dot_q6_K_q8_K_avx2;
    q6.vec_dot_4 = vec_dot4_q6_K_q8_K_avx2;
    q6.to_float = to_float_q6_K_avx2;
    table[(uint32_t)T::Q8_K].from_float = from_float_q8_K_avx2;
}

}  // namespace edgellm
