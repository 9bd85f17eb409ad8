// Reading x16 blocks (kernels/x16.h) in AVX-512 registers, one lane per row of the group,
// for the translation units compiled for AVX-512 (avx512_x16.cpp: the GEMV and the panel
// conversion; amx_panel.cpp: the exact GEMM's panels) and only those: the functions are
// static, so each unit keeps its own copy and none built with these flags can serve
// another unit (see avx512.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/x86/immintrin_quiet.h"

namespace edgellm::avx512 {

static inline __m512i load512(const uint8_t* p) {
    return _mm512_loadu_si512((const void*)p);
}
// The 16 rows' f16 values at p (a block's d or dmin) as floats.
static inline __m512 halves16(const uint8_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)p));
}
static inline __m512i low_nibbles(__m512i v) {
    return _mm512_and_si512(v, _mm512_set1_epi8(0x0F));
}
static inline __m512i high_nibbles(__m512i v) {
    return _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(0x0F));
}

// Byte b of each lane, as int32 (unsigned, and sign-extended).
template <int b>
static inline __m512i lane_byte(__m512i v) {
    return _mm512_and_si512(_mm512_srli_epi32(v, 8 * b), _mm512_set1_epi32(0xFF));
}
template <int b>
static inline __m512i lane_sbyte(__m512i v) {
    return _mm512_srai_epi32(_mm512_slli_epi32(v, 24 - 8 * b), 24);
}
// Byte sb % 4 of plane sb / 4 of each lane, as int32: sub-block sb's scale byte where a
// block keeps one byte per sub-block in chunks of four (q2_K, q6_K; q4_K once unpacked).
static inline __m512i scale_byte(const __m512i* sc, int sb) {
    switch (sb % 4) {
        case 0: return lane_byte<0>(sc[sb / 4]);
        case 1: return lane_byte<1>(sc[sb / 4]);
        case 2: return lane_byte<2>(sc[sb / 4]);
        default: return lane_byte<3>(sc[sb / 4]);
    }
}
static inline __m512i scale_sbyte(const __m512i* sc, int sb) {
    switch (sb % 4) {
        case 0: return lane_sbyte<0>(sc[sb / 4]);
        case 1: return lane_sbyte<1>(sc[sb / 4]);
        case 2: return lane_sbyte<2>(sc[sb / 4]);
        default: return lane_sbyte<3>(sc[sb / 4]);
    }
}

// A q4_K x16 block's 6-bit scales and minima, from its three chunks of scale bytes (lane r
// = row r's 12 bytes): byte j of sc[0] (sc[1]) is sub-block j's (4 + j's) scale, and the
// same for m, so scale_byte(sc, j) is sub-block j's.
static inline void q4_K_scales(const uint8_t* block, __m512i sc[2], __m512i m[2]) {
    const __m512i m6 = _mm512_set1_epi8(0x3F), m4 = _mm512_set1_epi8(0x0F),
                  m2 = _mm512_set1_epi8(0x30);
    const __m512i u0 = load512(block + 64), u1 = load512(block + 128), u2 = load512(block + 192);
    sc[0] = _mm512_and_si512(u0, m6);
    m[0] = _mm512_and_si512(u1, m6);
    // (x >> 2) & 0x30 per byte: the byte's top two bits at 4, 5
    sc[1] = _mm512_or_si512(_mm512_and_si512(u2, m4), _mm512_and_si512(_mm512_srli_epi32(u0, 2), m2));
    m[1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u2, 4), m4),
                           _mm512_and_si512(_mm512_srli_epi32(u1, 2), m2));
}

// A q6_K x16 block's 6-bit values (0..63, before the -32) of half h and chunk k, from its
// chunks A (ql), B (ql + 32) and H (qh) at block + 288 + 192 (8h + k): w[m] holds elements
// 128h + 32m + 4k + i (A low, H bits 0-1; B low, bits 2-3; A high, bits 4-5; B high, bits
// 6-7), sub-block 8h + 2m + k / 4. (16-bit shifts: bits crossing into a neighbouring byte
// are masked off.)
static inline void q6_K_values(const uint8_t* block, int h, int k, __m512i w[4]) {
    const uint8_t* base = block + 288 + 192 * (size_t)(8 * h + k);
    const __m512i A = load512(base), B = load512(base + 64), H = load512(base + 128);
    const __m512i m2 = _mm512_set1_epi8(0x30), m6 = _mm512_set1_epi8(0x3F);
    // (x & m4) | (y & m2) in one ternary logic op: 0xCA = (mask ? y : x)
    w[0] = _mm512_and_si512(_mm512_ternarylogic_epi32(m2, _mm512_slli_epi16(H, 4), A, 0xCA), m6);
    w[1] = _mm512_and_si512(_mm512_ternarylogic_epi32(m2, _mm512_slli_epi16(H, 2), B, 0xCA), m6);
    w[2] = _mm512_and_si512(_mm512_ternarylogic_epi32(m2, H, _mm512_srli_epi16(A, 4), 0xCA), m6);
    w[3] = _mm512_and_si512(
        _mm512_ternarylogic_epi32(m2, _mm512_srli_epi16(H, 2), _mm512_srli_epi16(B, 4), 0xCA), m6);
}

// The four chunks of a block's scale bytes, one byte per sub-block (q2_K at + 64, q6_K at
// + 32), for scale_byte / scale_sbyte.
static inline void scale_chunks(const uint8_t* p, __m512i sc[4]) {
    for (int q = 0; q < 4; ++q) sc[q] = load512(p + 64 * q);
}

}  // namespace edgellm::avx512
