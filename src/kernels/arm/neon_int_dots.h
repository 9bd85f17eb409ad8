// The integer dot products of every quantized type with its activation type, written
// once over a `Dot` policy and instantiated by two kernel sets:
//
//   neon.cpp          Dot = smull + sadalp (ARMv8.0: 16-bit products, pairwise added
//                     into int32 lanes)
//   neon_dotprod.cpp  Dot = sdot (ARMv8.2 DotProd: four products per int32 lane)
//
// A policy has one function, `int32x4_t dot(int32x4_t acc, int8x16_t a, int8x16_t b)`,
// which adds the 16 products a[k] * b[k] into the lanes of acc. Which lane gets which
// product differs between policies; the kernels only use lane totals. Both are exact for
// every pair of int8 values (-128 included), so each block's integer sum equals the
// reference's; only the order of the float scale sums differs from it.
//
// Every weight value is turned into a signed byte before the dot (q - 8 for q4_0, the
// 6-bit q6_K value minus 32, ...), so no offset has to be taken back out through the
// activation sums; only the formats' mins are, as in the reference (q4_1 / q5_1 through
// the q8_1 s, the K-quants through the q8_K bsums). Sub-block sums go to the scales four
// at a time: four int32x4 partial sums fold into one vector of totals (lane_sums4) and
// meet four scales in one vmlaq.
//
// Include only from a kernel set's translation unit (internal linkage: see
// neon_common.h).
#pragma once

#include <arm_neon.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/arm/neon_common.h"
#include "kernels/block_formats.h"
#include "kernels/count_dispatch.h"
#include "kernels/q8_queries.h"
#include "kernels/kernels.h"

namespace edgellm::neon {
namespace {

// ---------------------------------------------------------------------------------------
// Helpers

// Dot of 32 weight bytes (a0: elements 0..15, a1: 16..31) with 32 activation bytes at y.
template <class Dot>
inline int32x4_t dot32(int8x16_t a0, int8x16_t a1, const int8_t* y) {
    return Dot::dot(Dot::dot(vdupq_n_s32(0), a0, load_s8(y)), a1, load_s8(y + 16));
}
template <class Dot>
inline int32x4_t dot16(int8x16_t a, const int8_t* y) {
    return Dot::dot(vdupq_n_s32(0), a, load_s8(y));
}

inline int8x16_t as_s8(uint8x16_t v) {
    return vreinterpretq_s8_u8(v);
}

// The bsums of a q8_K block, as a byte pointer (the field is a packed int16 array).
inline const uint8_t* q8_K_bsums(const block_q8_K& b) {
    return (const uint8_t*)&b + offsetof(block_q8_K, bsums);
}

// Sum over nb blocks of f(i, acc, extra): two float accumulator chains, so the float
// work of one block overlaps the integer work of the next.
template <typename BlockFn>
inline float sum_blocks(int64_t nb, BlockFn f) {
    float32x4_t acc0 = vdupq_n_f32(0.0f), acc1 = vdupq_n_f32(0.0f);
    float extra0 = 0.0f, extra1 = 0.0f;
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
        f(i, acc0, extra0);
        f(i + 1, acc1, extra1);
    }
    if (i < nb) f(i, acc0, extra0);
    return vaddvq_f32(vaddq_f32(acc0, acc1)) + (extra0 + extra1);
}

// 32 bits of a q5 qh field -> two byte masks: byte j of `lo` is 0xFF when bit j is set
// (elements 0..15), of `hi` when bit 16 + j is set (elements 16..31).
struct BitMasks {
    uint8x16_t lo, hi;
};
inline BitMasks expand_qh(const uint8_t* qh) {
    // Byte j of each half takes qh byte j / 8 (a table lookup), then tests bit j % 8.
    uint32_t bits;
    std::memcpy(&bits, qh, 4);
    const uint8x16_t src = vreinterpretq_u8_u32(vdupq_n_u32(bits));  // qh[0..3] in lanes 0..3
    const uint8x16_t pick_lo = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
    const uint8x16_t pick_hi = {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};
    const uint8x16_t bit = vreinterpretq_u8_u64(vdupq_n_u64(0x8040201008040201ULL));
    return {vtstq_u8(vqtbl1q_u8(src, pick_lo), bit), vtstq_u8(vqtbl1q_u8(src, pick_hi), bit)};
}

// q4_K / q5_K: the 8 six-bit scales (out[0..8)) and mins (out[8..16)) of get_scale_min_k4,
// four at a time on 32-bit words.
inline uint8x16_t unpack_scale_min_k4(const uint8_t* scales) {
    uint32_t w[3];
    std::memcpy(w, scales, 12);
    const uint32_t v[4] = {
        w[0] & 0x3f3f3f3fu,                                        // sc 0..3
        (w[2] & 0x0f0f0f0fu) | ((w[0] >> 2) & 0x30303030u),        // sc 4..7
        w[1] & 0x3f3f3f3fu,                                        // m 0..3
        ((w[2] >> 4) & 0x0f0f0f0fu) | ((w[1] >> 2) & 0x30303030u)  // m 4..7
    };
    return vreinterpretq_u8_u32(vld1q_u32(v));
}

// q3_K: the 16 six-bit scales minus 32 (unpack_q3_K_scales), four at a time: scale i has
// its low nibble in byte i % 8 (low nibble for i < 8, high for i >= 8) and its top two
// bits in byte 8 + i % 4 at bit 2 * (i / 4).
inline int8x16_t unpack_q3_K_scales_neon(const uint8_t* scales) {
    uint32_t w[3];
    std::memcpy(w, scales, 12);
    const uint32_t v[4] = {
        (w[0] & 0x0f0f0f0fu) | ((w[2] << 4) & 0x30303030u),
        (w[1] & 0x0f0f0f0fu) | ((w[2] << 2) & 0x30303030u),
        ((w[0] >> 4) & 0x0f0f0f0fu) | (w[2] & 0x30303030u),
        ((w[1] >> 4) & 0x0f0f0f0fu) | ((w[2] >> 2) & 0x30303030u),
    };
    return vsubq_s8(vreinterpretq_s8_u32(vld1q_u32(v)), vdupq_n_s8(32));
}

// sum(totals of p[0..8) * scales[0..8)): eight sub-block partial sums, eight int16 scales.
inline int32x4_t scale8(const int32x4_t p[8], int16x8_t scales, int32x4_t acc) {
    acc = vmlaq_s32(acc, lane_sums4(p[0], p[1], p[2], p[3]), widen_lo_s32(scales));
    return vmlaq_s32(acc, lane_sums4(p[4], p[5], p[6], p[7]), widen_hi_s32(scales));
}

// ---------------------------------------------------------------------------------------
// Legacy 32-element blocks (with q8_0 / q8_1)

// q4_0: x = nibble - 8; low nibbles are elements 0..15, high nibbles 16..31.
template <class Dot>
void vec_dot_q4_0_q8_0(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q4_0* x = (const block_q4_0*)vx;
    const block_q8_0* y = (const block_q8_0*)vy;
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    const int8x16_t eight = vdupq_n_s8(8);
    *s = sum_blocks(n / QK8_0, [&](int64_t i, float32x4_t& acc, float&) {
        const uint8x16_t qs = load_u8(x[i].qs);
        const int8x16_t lo = vsubq_s8(as_s8(vandq_u8(qs, m4)), eight);
        const int8x16_t hi = vsubq_s8(as_s8(vshrq_n_u8(qs, 4)), eight);
        const int32x4_t p = dot32<Dot>(lo, hi, y[i].qs);
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(p), h2f(x[i].d) * h2f(y[i].d));
    });
}

// q4_1: x = d * nibble + m; the offset meets the activation's s = d_y * sum(q_y).
template <class Dot>
void vec_dot_q4_1_q8_1(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q4_1* x = (const block_q4_1*)vx;
    const block_q8_1* y = (const block_q8_1*)vy;
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    *s = sum_blocks(n / QK8_1, [&](int64_t i, float32x4_t& acc, float& extra) {
        const uint8x16_t qs = load_u8(x[i].qs);
        const int32x4_t p = dot32<Dot>(as_s8(vandq_u8(qs, m4)), as_s8(vshrq_n_u8(qs, 4)), y[i].qs);
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(p), h2f(x[i].d) * h2f(y[i].d));
        extra += h2f(x[i].m) * h2f(y[i].s);
    });
}

// q5_0: x = (nibble | bit << 4) - 16. As a signed byte that is the nibble when the bit is
// set, and the nibble with the top four bits set (nibble - 16) when it is clear.
template <class Dot>
void vec_dot_q5_0_q8_0(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q5_0* x = (const block_q5_0*)vx;
    const block_q8_0* y = (const block_q8_0*)vy;
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    const uint8x16_t top = vdupq_n_u8(0xF0);
    *s = sum_blocks(n / QK8_0, [&](int64_t i, float32x4_t& acc, float&) {
        const uint8x16_t qs = load_u8(x[i].qs);
        const BitMasks h = expand_qh(x[i].qh);
        const int8x16_t lo = as_s8(vorrq_u8(vandq_u8(qs, m4), vbicq_u8(top, h.lo)));
        const int8x16_t hi = as_s8(vorrq_u8(vshrq_n_u8(qs, 4), vbicq_u8(top, h.hi)));
        const int32x4_t p = dot32<Dot>(lo, hi, y[i].qs);
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(p), h2f(x[i].d) * h2f(y[i].d));
    });
}

// q5_1: x = d * (nibble | bit << 4) + m, values 0..31; offset as q4_1.
template <class Dot>
void vec_dot_q5_1_q8_1(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q5_1* x = (const block_q5_1*)vx;
    const block_q8_1* y = (const block_q8_1*)vy;
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    const uint8x16_t bit4 = vdupq_n_u8(0x10);
    *s = sum_blocks(n / QK8_1, [&](int64_t i, float32x4_t& acc, float& extra) {
        const uint8x16_t qs = load_u8(x[i].qs);
        const BitMasks h = expand_qh(x[i].qh);
        const int8x16_t lo = as_s8(vorrq_u8(vandq_u8(qs, m4), vandq_u8(bit4, h.lo)));
        const int8x16_t hi = as_s8(vorrq_u8(vshrq_n_u8(qs, 4), vandq_u8(bit4, h.hi)));
        const int32x4_t p = dot32<Dot>(lo, hi, y[i].qs);
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(p), h2f(x[i].d) * h2f(y[i].d));
        extra += h2f(x[i].m) * h2f(y[i].s);
    });
}

// q8_0: both sides plain int8 (stored weights may hold -128; both policies are exact).
template <class Dot>
void vec_dot_q8_0_q8_0(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q8_0* x = (const block_q8_0*)vx;
    const block_q8_0* y = (const block_q8_0*)vy;
    *s = sum_blocks(n / QK8_0, [&](int64_t i, float32x4_t& acc, float&) {
        const int32x4_t p = dot32<Dot>(load_s8(x[i].qs), load_s8(x[i].qs + 16), y[i].qs);
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(p), h2f(x[i].d) * h2f(y[i].d));
    });
}

// ---------------------------------------------------------------------------------------
// K-quants (with q8_K). Per block: integer sums per sub-block times the sub-block scales
// (int32, exact), then one float step: d_y * d * isum - d_y * dmin * summs.

// q2_K: 16 sub-blocks of 16. In each 32-byte half of qs, plane s (bits 2s, 2s+1) of byte
// l is element 32s + l of that half: bytes 0..15 of the plane are sub-block 2s, bytes
// 16..31 sub-block 2s + 1. Scales are the low nibbles of scales[], mins the high ones.
template <class Dot>
void vec_dot_q2_K_q8_K(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q2_K* x = (const block_q2_K*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    const uint8x16_t m3 = vdupq_n_u8(3);
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const int8_t* q8 = y[i].qs;
        const uint8x16_t sc_bytes = load_u8(x[i].scales);
        const uint8x16_t sc = vandq_u8(sc_bytes, m4), mins = vshrq_n_u8(sc_bytes, 4);

        // summs = sum(m[j] * bsums[j]) over the 16 sub-blocks
        const int16x8_t b0 = load_s16(q8_K_bsums(y[i]));
        const int16x8_t b1 = load_s16(q8_K_bsums(y[i]) + 16);
        const int16x8_t m_lo = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(mins)));
        const int16x8_t m_hi = vreinterpretq_s16_u16(vmovl_high_u8(mins));
        int32x4_t mm = vmull_s16(vget_low_s16(b0), vget_low_s16(m_lo));
        mm = vmlal_high_s16(mm, b0, m_lo);
        mm = vmlal_s16(mm, vget_low_s16(b1), vget_low_s16(m_hi));
        mm = vmlal_high_s16(mm, b1, m_hi);
        const int summs = vaddvq_s32(mm);

        int32x4_t sumi = vdupq_n_s32(0);
        for (int h = 0; h < 2; ++h) {
            uint8x16_t q0 = load_u8(x[i].qs + 32 * h), q1 = load_u8(x[i].qs + 32 * h + 16);
            const int8_t* yq = q8 + 128 * h;
            int32x4_t p[8];
            for (int pl = 0; pl < 4; ++pl) {
                p[2 * pl] = dot16<Dot>(as_s8(vandq_u8(q0, m3)), yq + 32 * pl);
                p[2 * pl + 1] = dot16<Dot>(as_s8(vandq_u8(q1, m3)), yq + 32 * pl + 16);
                q0 = vshrq_n_u8(q0, 2);
                q1 = vshrq_n_u8(q1, 2);
            }
            const uint8x8_t sc_half = h == 0 ? vget_low_u8(sc) : vget_high_u8(sc);
            sumi = scale8(p, vreinterpretq_s16_u16(vmovl_u8(sc_half)), sumi);
        }
        const int isum = vaddvq_s32(sumi);
        sum += y[i].d * h2f(x[i].d) * (float)isum - y[i].d * h2f(x[i].dmin) * (float)summs;
    }
    *s = sum;
}

// q3_K: as q2_K's planes, with q = low2 - 4 unless the element's hmask bit is set. The
// hmask bit of plane s of half h is bit 4h + s of hmask[l]; `bit` walks through them.
template <class Dot>
void vec_dot_q3_K_q8_K(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q3_K* x = (const block_q3_K*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    const uint8x16_t m3 = vdupq_n_u8(3);
    const uint8x16_t four = vdupq_n_u8(4);
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const int8_t* q8 = y[i].qs;
        const int8x16_t scales = unpack_q3_K_scales_neon(x[i].scales);
        const uint8x16_t hm0 = load_u8(x[i].hmask), hm1 = load_u8(x[i].hmask + 16);
        uint8x16_t bit = vdupq_n_u8(1);
        int32x4_t sumi = vdupq_n_s32(0);
        for (int h = 0; h < 2; ++h) {
            uint8x16_t q0 = load_u8(x[i].qs + 32 * h), q1 = load_u8(x[i].qs + 32 * h + 16);
            const int8_t* yq = q8 + 128 * h;
            int32x4_t p[8];
            for (int pl = 0; pl < 4; ++pl) {
                // 4 where the high bit is clear, 0 where it is set
                const uint8x16_t sub0 = vbicq_u8(four, vtstq_u8(hm0, bit));
                const uint8x16_t sub1 = vbicq_u8(four, vtstq_u8(hm1, bit));
                const int8x16_t v0 = vsubq_s8(as_s8(vandq_u8(q0, m3)), as_s8(sub0));
                const int8x16_t v1 = vsubq_s8(as_s8(vandq_u8(q1, m3)), as_s8(sub1));
                p[2 * pl] = dot16<Dot>(v0, yq + 32 * pl);
                p[2 * pl + 1] = dot16<Dot>(v1, yq + 32 * pl + 16);
                q0 = vshrq_n_u8(q0, 2);
                q1 = vshrq_n_u8(q1, 2);
                bit = vshlq_n_u8(bit, 1);
            }
            const int8x8_t sc_half = h == 0 ? vget_low_s8(scales) : vget_high_s8(scales);
            sumi = scale8(p, vmovl_s8(sc_half), sumi);
        }
        sum += y[i].d * h2f(x[i].d) * (float)vaddvq_s32(sumi);
    }
    *s = sum;
}

// q4_K: 8 sub-blocks of 32. Chunk c of qs (32 bytes) holds sub-block 2c in its low
// nibbles and 2c + 1 in its high nibbles. The mins meet the q8_K bsums, summed in pairs
// (16-element bsums, 32-element sub-blocks).
template <class Dot>
void vec_dot_q4_K_q8_K(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q4_K* x = (const block_q4_K*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const int8_t* q8 = y[i].qs;
        const uint8x16_t scm = unpack_scale_min_k4(x[i].scales);
        const int16x8_t sc = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(scm)));
        const int16x8_t mins = vreinterpretq_s16_u16(vmovl_high_u8(scm));

        const int16x8_t bs =
            vpaddq_s16(load_s16(q8_K_bsums(y[i])), load_s16(q8_K_bsums(y[i]) + 16));
        int32x4_t mm = vmull_s16(vget_low_s16(bs), vget_low_s16(mins));
        mm = vmlal_high_s16(mm, bs, mins);
        const int summs = vaddvq_s32(mm);

        int32x4_t p[8];
        for (int c = 0; c < 4; ++c) {
            const uint8x16_t b0 = load_u8(x[i].qs + 32 * c), b1 = load_u8(x[i].qs + 32 * c + 16);
            p[2 * c] = dot32<Dot>(as_s8(vandq_u8(b0, m4)), as_s8(vandq_u8(b1, m4)), q8 + 64 * c);
            p[2 * c + 1] =
                dot32<Dot>(as_s8(vshrq_n_u8(b0, 4)), as_s8(vshrq_n_u8(b1, 4)), q8 + 64 * c + 32);
        }
        const int isum = vaddvq_s32(scale8(p, sc, vdupq_n_s32(0)));
        sum += y[i].d * h2f(x[i].d) * (float)isum - y[i].d * h2f(x[i].dmin) * (float)summs;
    }
    *s = sum;
}

// q5_K: as q4_K, plus the fifth bit: bit 2c of qh[l] for the low nibble of chunk c's byte
// l, bit 2c + 1 for its high nibble; qh is shifted right by 2 per chunk.
template <class Dot>
void vec_dot_q5_K_q8_K(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q5_K* x = (const block_q5_K*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    const uint8x16_t one = vdupq_n_u8(1), two = vdupq_n_u8(2);
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const int8_t* q8 = y[i].qs;
        const uint8x16_t scm = unpack_scale_min_k4(x[i].scales);
        const int16x8_t sc = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(scm)));
        const int16x8_t mins = vreinterpretq_s16_u16(vmovl_high_u8(scm));

        const int16x8_t bs =
            vpaddq_s16(load_s16(q8_K_bsums(y[i])), load_s16(q8_K_bsums(y[i]) + 16));
        int32x4_t mm = vmull_s16(vget_low_s16(bs), vget_low_s16(mins));
        mm = vmlal_high_s16(mm, bs, mins);
        const int summs = vaddvq_s32(mm);

        uint8x16_t h0 = load_u8(x[i].qh), h1 = load_u8(x[i].qh + 16);
        int32x4_t p[8];
        for (int c = 0; c < 4; ++c) {
            const uint8x16_t b0 = load_u8(x[i].qs + 32 * c), b1 = load_u8(x[i].qs + 32 * c + 16);
            // vsli keeps the low nibble of the first operand and inserts the bit above it
            const uint8x16_t lo0 = vsliq_n_u8(b0, vandq_u8(h0, one), 4);
            const uint8x16_t lo1 = vsliq_n_u8(b1, vandq_u8(h1, one), 4);
            const uint8x16_t hi0 =
                vsliq_n_u8(vshrq_n_u8(b0, 4), vshrq_n_u8(vandq_u8(h0, two), 1), 4);
            const uint8x16_t hi1 =
                vsliq_n_u8(vshrq_n_u8(b1, 4), vshrq_n_u8(vandq_u8(h1, two), 1), 4);
            p[2 * c] = dot32<Dot>(as_s8(lo0), as_s8(lo1), q8 + 64 * c);
            p[2 * c + 1] = dot32<Dot>(as_s8(hi0), as_s8(hi1), q8 + 64 * c + 32);
            h0 = vshrq_n_u8(h0, 2);
            h1 = vshrq_n_u8(h1, 2);
        }
        const int isum = vaddvq_s32(scale8(p, sc, vdupq_n_s32(0)));
        sum += y[i].d * h2f(x[i].d) * (float)isum - y[i].d * h2f(x[i].dmin) * (float)summs;
    }
    *s = sum;
}

// q6_K: 16 sub-blocks of 16, int8 scales. Per 128-element half: ql (64 bytes) L0..L3,
// qh (32 bytes) H0, H1. Sub-blocks 0..3 are the low nibbles of L0..L3 with qh bits 0-1
// (H0, H1) and 2-3 (H0, H1) on top; sub-blocks 4..7 the high nibbles with bits 4-5 and
// 6-7. Each 6-bit value minus 32 is a signed byte.
template <class Dot>
void vec_dot_q6_K_q8_K(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q6_K* x = (const block_q6_K*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    const uint8x16_t m3 = vdupq_n_u8(3);
    const uint8x16_t m30 = vdupq_n_u8(0x30);
    const int8x16_t m32 = vdupq_n_s8(32);
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const int8x16_t scales = load_s8(x[i].scales);
        int32x4_t sumi = vdupq_n_s32(0);
        for (int h = 0; h < 2; ++h) {
            const uint8_t* ql = x[i].ql + 64 * h;
            const uint8_t* qh = x[i].qh + 32 * h;
            const int8_t* yq = y[i].qs + 128 * h;
            const uint8x16_t l0 = load_u8(ql), l1 = load_u8(ql + 16);
            const uint8x16_t l2 = load_u8(ql + 32), l3 = load_u8(ql + 48);
            const uint8x16_t h0 = load_u8(qh), h1 = load_u8(qh + 16);
            const uint8x16_t h0s = vshrq_n_u8(h0, 2), h1s = vshrq_n_u8(h1, 2);
            const uint8x16_t q[8] = {
                vsliq_n_u8(l0, vandq_u8(h0, m3), 4),
                vsliq_n_u8(l1, vandq_u8(h1, m3), 4),
                vsliq_n_u8(l2, vandq_u8(h0s, m3), 4),
                vsliq_n_u8(l3, vandq_u8(h1s, m3), 4),
                vorrq_u8(vshrq_n_u8(l0, 4), vandq_u8(h0, m30)),
                vorrq_u8(vshrq_n_u8(l1, 4), vandq_u8(h1, m30)),
                vorrq_u8(vshrq_n_u8(l2, 4), vandq_u8(h0s, m30)),
                vorrq_u8(vshrq_n_u8(l3, 4), vandq_u8(h1s, m30)),
            };
            int32x4_t p[8];
            for (int k = 0; k < 8; ++k) p[k] = dot16<Dot>(vsubq_s8(as_s8(q[k]), m32), yq + 16 * k);
            const int8x8_t sc_half = h == 0 ? vget_low_s8(scales) : vget_high_s8(scales);
            sumi = scale8(p, vmovl_s8(sc_half), sumi);
        }
        sum += y[i].d * h2f(x[i].d) * (float)vaddvq_s32(sumi);
    }
    *s = sum;
}

// ---------------------------------------------------------------------------------------
// q8_0 keys against q8_0 queries in integers (dot_rows_q8), four keys in the four lanes:
// each block of the four keys transposed (word m of every key in one register), once for
// all the queries; per query and block, four of its codes broadcast and Lanes::dot (lane j
// += the four products of bytes 4j..4j+3: sdot's grouping) give the exact sum of the
// block's code products per key, then one FMA by d_q x d_k, block after block as the
// reference. Head sizes up to kMaxQ8Hd (kernels/q8_queries.h); larger ones keep the
// reference.

template <class Lanes, int kN>
inline void q8_keys4(int64_t nb, const int8x16_t* kt, const float32x4_t* kd, const uint8_t* q,
                     size_t q_stride, const float* dq, float* s, size_t s_stride) {
    float32x4_t acc[kN];
    for (int g = 0; g < kN; ++g) acc[g] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < nb; ++b) {
        int32x4_t isum[kN];
        const uint8_t* qs[kN];
        for (int g = 0; g < kN; ++g) {
            isum[g] = vdupq_n_s32(0);
            qs[g] = q + q_stride * (size_t)g + sizeof(block_q8_0) * (size_t)b + offsetof(block_q8_0, qs);
        }
        for (int m = 0; m < 8; ++m) {
            const int8x16_t k = kt[8 * b + m];
            for (int g = 0; g < kN; ++g) {
                int32_t four;
                std::memcpy(&four, qs[g] + 4 * m, 4);
                isum[g] = Lanes::dot(isum[g], k, vreinterpretq_s8_s32(vdupq_n_s32(four)));
            }
        }
        for (int g = 0; g < kN; ++g)
            acc[g] = vfmaq_f32(acc[g], vcvtq_f32_s32(isum[g]), vmulq_n_f32(kd[b], dq[nb * g + b]));
    }
    for (int g = 0; g < kN; ++g) vst1q_f32(s + s_stride * (size_t)g, acc[g]);
}

// Words 0..3 of four rows (r[j]: row j) -> r[m]: word m of every row, row j in lane j.
inline void transpose_words4(int32x4_t r[4]) {
    const int32x4_t t0 = vtrn1q_s32(r[0], r[1]), t1 = vtrn2q_s32(r[0], r[1]);
    const int32x4_t t2 = vtrn1q_s32(r[2], r[3]), t3 = vtrn2q_s32(r[2], r[3]);
    r[0] = vreinterpretq_s32_s64(vtrn1q_s64(vreinterpretq_s64_s32(t0), vreinterpretq_s64_s32(t2)));
    r[1] = vreinterpretq_s32_s64(vtrn1q_s64(vreinterpretq_s64_s32(t1), vreinterpretq_s64_s32(t3)));
    r[2] = vreinterpretq_s32_s64(vtrn2q_s64(vreinterpretq_s64_s32(t0), vreinterpretq_s64_s32(t2)));
    r[3] = vreinterpretq_s32_s64(vtrn2q_s64(vreinterpretq_s64_s32(t1), vreinterpretq_s64_s32(t3)));
}

template <class Lanes>
void dot_rows_q8_keys4(int64_t hd, int64_t n_rows, const void* vx, size_t bx, const void* vq,
                       size_t q_stride, int ng, float* s, size_t s_stride) {
    const DotRowsQ8Fn ref = reference_kernels(TensorType::Q8_0).dot_rows_q8;
    if (hd % 32 != 0 || hd > kMaxQ8Hd) return ref(hd, n_rows, vx, bx, vq, q_stride, ng, s, s_stride);
    const int64_t nb = hd / 32;
    const uint8_t* x = (const uint8_t*)vx;
    const uint8_t* q = (const uint8_t*)vq;
    int8x16_t kt[kMaxQ8Hd / 4];
    float32x4_t kd[kMaxQ8Hd / 32];
    float dq[kQ8Queries * (kMaxQ8Hd / 32)];
    const int64_t full = n_rows / 4 * 4;
    for (int g0 = 0; g0 < ng; g0 += kQ8Queries) {
        const int n = ng - g0 < kQ8Queries ? ng - g0 : kQ8Queries;
        const uint8_t* qg = q + q_stride * (size_t)g0;
        read_q8_queries(qg, q_stride, n, nb, dq, nullptr);
        for (int64_t c = 0; c < full; c += 4) {
            const uint8_t* xc = x + bx * (size_t)c;
            for (int64_t b = 0; b < nb; ++b) {
                int32x4_t lo[4], hi[4];
                uint16_t d[4];
                for (int j = 0; j < 4; ++j) {
                    const block_q8_0* blk = (const block_q8_0*)(xc + bx * (size_t)j) + b;
                    lo[j] = vreinterpretq_s32_s8(load_s8(blk->qs));
                    hi[j] = vreinterpretq_s32_s8(load_s8(blk->qs + 16));
                    std::memcpy(&d[j], &blk->d, 2);
                }
                transpose_words4(lo);
                transpose_words4(hi);
                for (int m = 0; m < 4; ++m) {
                    kt[8 * b + m] = vreinterpretq_s8_s32(lo[m]);
                    kt[8 * b + 4 + m] = vreinterpretq_s8_s32(hi[m]);
                }
                kd[b] = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(d)));
            }
            over_tiles<8>(n, [&]<int kN>(int64_t g) {  // queries eight at a time, then the rest
                q8_keys4<Lanes, kN>(nb, kt, kd, qg + q_stride * (size_t)g, q_stride, dq + nb * g,
                                    s + s_stride * (size_t)(g0 + g) + (size_t)c, s_stride);
            });
        }
    }
    if (full < n_rows)  // the last keys as the reference (the same bits)
        ref(hd, n_rows - full, x + bx * (size_t)full, bx, vq, q_stride, ng, s + full, s_stride);
}

// ---------------------------------------------------------------------------------------
// q8_0 values weighted in integers (mad_rows_q8), per chunk of 32 rows: the codes of rows
// 4k .. 4k + 3 interleaved once for all the queries (lane i of a register holds their four
// codes of element i: sdot's grouping); per query and block, the weights' 7-bit codes P
// as the reference computes them (P <= 127: a signed byte), four of them broadcast and
// Lanes::dot against each group of rows, then one FMA per element by the chunk's scale.
// Head sizes up to kMaxQ8Hd; larger ones keep the reference.

struct MadChunkNeon {
    int8x16_t codes[kMadChunkRows / 4][kMaxQ8Hd / 4];  // group k, elements 4j .. 4j + 3
    float d[kMaxQ8Hd / 32][kMadChunkRows];             // the rows' scales, 0 past the chunk
};

template <class Lanes>
void mad_rows_q8_rows4(int64_t hd, int64_t n_rows, const void* vx, size_t bx, const float* e,
                       size_t e_stride, int ng, float* acc) {
    if (hd % 32 != 0 || hd > kMaxQ8Hd)
        return reference_kernels(TensorType::Q8_0).mad_rows_q8(hd, n_rows, vx, bx, e, e_stride, ng, acc);
    const int64_t nb = hd / 32;
    const uint8_t* x = (const uint8_t*)vx;
    static const uint8_t zero_row[sizeof(block_q8_0) * (kMaxQ8Hd / 32)] = {};
    MadChunkNeon ch;
    for (int64_t c0 = 0; c0 < n_rows; c0 += kMadChunkRows) {
        const int64_t nr = n_rows - c0 < kMadChunkRows ? n_rows - c0 : kMadChunkRows;
        const uint8_t* xc = x + bx * (size_t)c0;
        for (int64_t b = 0; b < nb; ++b)
            for (int64_t r = 0; r < kMadChunkRows; ++r)
                ch.d[b][r] = r < nr ? h2f(((const block_q8_0*)(xc + bx * (size_t)r) + b)->d) : 0.0f;
        for (int64_t k = 0; k < kMadChunkRows / 4; ++k) {
            const uint8_t* rows[4];
            for (int j = 0; j < 4; ++j) rows[j] = 4 * k + j < nr ? xc + bx * (size_t)(4 * k + j) : zero_row;
            for (int64_t b = 0; b < nb; ++b)
                for (int half = 0; half < 2; ++half) {
                    const size_t at = sizeof(block_q8_0) * (size_t)b + offsetof(block_q8_0, qs) + 16 * (size_t)half;
                    const int8x16_t r0 = load_s8(rows[0] + at), r1 = load_s8(rows[1] + at);
                    const int8x16_t r2 = load_s8(rows[2] + at), r3 = load_s8(rows[3] + at);
                    const int16x8_t p01a = vreinterpretq_s16_s8(vzip1q_s8(r0, r1));
                    const int16x8_t p01b = vreinterpretq_s16_s8(vzip2q_s8(r0, r1));
                    const int16x8_t p23a = vreinterpretq_s16_s8(vzip1q_s8(r2, r3));
                    const int16x8_t p23b = vreinterpretq_s16_s8(vzip2q_s8(r2, r3));
                    int8x16_t* out = ch.codes[k] + 8 * b + 4 * half;
                    out[0] = vreinterpretq_s8_s16(vzip1q_s16(p01a, p23a));
                    out[1] = vreinterpretq_s8_s16(vzip2q_s16(p01a, p23a));
                    out[2] = vreinterpretq_s8_s16(vzip1q_s16(p01b, p23b));
                    out[3] = vreinterpretq_s8_s16(vzip2q_s16(p01b, p23b));
                }
        }
        const int64_t groups = (nr + 3) / 4;
        for (int g = 0; g < ng; ++g) {
            // the query's weights of the chunk: read in place, or padded with zeros for a
            // short last chunk (as the AVX2 kernel: no copy per chunk and query)
            const float* eg = e + e_stride * (size_t)g + (size_t)c0;
            float padded[kMadChunkRows];
            if (nr < kMadChunkRows) {
                std::memset(padded, 0, sizeof padded);
                std::memcpy(padded, eg, sizeof(float) * (size_t)nr);
                eg = padded;
            }
            for (int64_t b = 0; b < nb; ++b) {
                float32x4_t w[8];
                float32x4_t m = vdupq_n_f32(0.0f);
                for (int j = 0; j < 8; ++j) {
                    w[j] = vmulq_f32(vld1q_f32(eg + 4 * j), vld1q_f32(ch.d[b] + 4 * j));
                    m = vmaxnmq_f32(m, w[j]);  // (maxNum: a NaN w never wins)
                }
                const float dmax = vmaxnmvq_f32(m);
                if (!(dmax > 0.0f && dmax <= 3.4028235e38f)) continue;  // the chunk weighs nothing
                const float up = 127.0f / dmax;
                int8_t pc[kMadChunkRows];
                for (int j = 0; j < 8; j += 2) {
                    const int32x4_t lo = vminq_s32(vmaxq_s32(vcvtnq_s32_f32(vmulq_n_f32(w[j], up)), vdupq_n_s32(0)), vdupq_n_s32(127));
                    const int32x4_t hi = vminq_s32(vmaxq_s32(vcvtnq_s32_f32(vmulq_n_f32(w[j + 1], up)), vdupq_n_s32(0)), vdupq_n_s32(127));
                    vst1_s8(pc + 4 * j, vmovn_s16(vcombine_s16(vmovn_s32(lo), vmovn_s32(hi))));
                }
                int32x4_t sum[8];
                for (int j = 0; j < 8; ++j) sum[j] = vdupq_n_s32(0);
                for (int64_t k = 0; k < groups; ++k) {
                    int32_t four;
                    std::memcpy(&four, pc + 4 * k, 4);
                    const int8x16_t pk = vreinterpretq_s8_s32(vdupq_n_s32(four));
                    const int8x16_t* codes = ch.codes[k] + 8 * b;
                    for (int j = 0; j < 8; ++j) sum[j] = Lanes::dot(sum[j], codes[j], pk);
                }
                const float down = dmax / 127.0f;
                float* a = acc + hd * g + 32 * b;
                for (int j = 0; j < 8; ++j)
                    vst1q_f32(a + 4 * j, vfmaq_n_f32(vld1q_f32(a + 4 * j), vcvtq_f32_s32(sum[j]), down));
            }
        }
    }
}

// Every integer dot product above, instantiated with one policy.
template <class Dot>
void fill_int_dots(TypeKernels* table, const Dot&) {
    using T = TensorType;
    auto at = [table](T t) -> TypeKernels& { return table[(uint32_t)t]; };
    at(T::Q4_0).vec_dot = vec_dot_q4_0_q8_0<Dot>;
    at(T::Q4_1).vec_dot = vec_dot_q4_1_q8_1<Dot>;
    at(T::Q5_0).vec_dot = vec_dot_q5_0_q8_0<Dot>;
    at(T::Q5_1).vec_dot = vec_dot_q5_1_q8_1<Dot>;
    at(T::Q8_0).vec_dot = vec_dot_q8_0_q8_0<Dot>;
    at(T::Q2_K).vec_dot = vec_dot_q2_K_q8_K<Dot>;
    at(T::Q3_K).vec_dot = vec_dot_q3_K_q8_K<Dot>;
    at(T::Q4_K).vec_dot = vec_dot_q4_K_q8_K<Dot>;
    at(T::Q5_K).vec_dot = vec_dot_q5_K_q8_K<Dot>;
    at(T::Q6_K).vec_dot = vec_dot_q6_K_q8_K<Dot>;
}

}  // namespace
}  // namespace edgellm::neon
