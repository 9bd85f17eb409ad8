// GEMV over row-interleaved weights (kernels/x16.h) with sdot, for the "dotprod" set.
// A 64-byte chunk of a group is four registers, each four bytes of four rows; sdot by
// lane (vdotq_laneq_s32) multiplies each row's four bytes with four activation bytes
// taken from one lane of a 16-byte activation load, so the 16 rows' int32 sums sit in
// four registers and nothing is summed across lanes. sdot is signed x signed: nibbles and
// 6-bit values are small positive int8, q8_0's stored +128 is flipped back; the nibble
// types' offsets (-8, -16, -32) meet the activation sums of the panel blocks exactly. The
// float steps are those of x16.h, so the results are gemv_x16_ref's bits.
#include <arm_neon.h>

#include <cstring>

#include "kernels/arm/arm_kernels.h"
#include "kernels/x16.h"

#if !defined(__ARM_FEATURE_DOTPROD)
#error "neon_dotprod_x16.cpp needs -march=armv8.2-a+dotprod"
#endif

namespace edgellm {

namespace {

// The four registers of one 64-byte chunk (rows 0-3, 4-7, 8-11, 12-15).
struct Chunk {
    uint8x16_t v[4];
};
inline Chunk load_chunk(const uint8_t* p) {
    return {{vld1q_u8(p), vld1q_u8(p + 16), vld1q_u8(p + 32), vld1q_u8(p + 48)}};
}

// s[q] += rows 4q..4q+3 of w . the four activation bytes in lane L of a.
template <int L>
inline void sdot4(int32x4_t* s, const Chunk& w, int8x16_t a) {
    for (int q = 0; q < 4; ++q) s[q] = vdotq_laneq_s32(s[q], vreinterpretq_s8_u8(w.v[q]), a, L);
}
// The same with the lane chosen at run time among four (k is a loop counter).
inline void sdot4_lane(int32x4_t* s, const Chunk& w, int8x16_t a, int lane) {
    switch (lane) {
        case 0: sdot4<0>(s, w, a); break;
        case 1: sdot4<1>(s, w, a); break;
        case 2: sdot4<2>(s, w, a); break;
        default: sdot4<3>(s, w, a); break;
    }
}

inline Chunk low_nibbles(const Chunk& c) {
    const uint8x16_t m = vdupq_n_u8(0x0F);
    return {{vandq_u8(c.v[0], m), vandq_u8(c.v[1], m), vandq_u8(c.v[2], m), vandq_u8(c.v[3], m)}};
}
inline Chunk high_nibbles(const Chunk& c) {
    return {{vshrq_n_u8(c.v[0], 4), vshrq_n_u8(c.v[1], 4), vshrq_n_u8(c.v[2], 4),
             vshrq_n_u8(c.v[3], 4)}};
}

inline void zero4(int32x4_t* s) {
    for (int q = 0; q < 4; ++q) s[q] = vdupq_n_s32(0);
}

// The 16 rows' f16 scales at p as four float registers.
inline void halves16(const uint8_t* p, float32x4_t* d) {
    for (int q = 0; q < 4; ++q) {
        uint16_t h[4];
        std::memcpy(h, p + 8 * q, 8);
        d[q] = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h)));
    }
}

// acc[q] = fma(d[q] * da, float(isum[q]), acc[q]), x16.h's float step.
inline void fma_step(float32x4_t* acc, const float32x4_t* d, float da, const int32x4_t* isum) {
    for (int q = 0; q < 4; ++q)
        acc[q] = vfmaq_f32(acc[q], vmulq_n_f32(d[q], da), vcvtq_f32_s32(isum[q]));
}

inline void store16(float* y, const float32x4_t* acc) {
    for (int q = 0; q < 4; ++q) vst1q_f32(y + 4 * q, acc[q]);
}

// ---------------------------------------------------------------------------------------
// Legacy blocks of 32: q4_0, q5_0, q8_0.

// Bits 16q..16q+15 of the 64-bit mask at p, one per byte, as 16 in the selected bytes.
inline uint8x16_t mask_to_16(const uint8_t* p, int q) {
    static const uint8_t kBits[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t bits = vcombine_u8(vdup_n_u8(p[2 * q]), vdup_n_u8(p[2 * q + 1]));
    return vandq_u8(vtstq_u8(bits, vld1q_u8(kBits)), vdupq_n_u8(16));
}

// The legacy types' dots for NC columns: each chunk unpacked once, sdot per column.
// s[j] is column j's four registers.
struct X16Q4_0 {
    static constexpr size_t kBytes = 288;
    static constexpr int kShift = 4;
    template <int NC>
    static void dot(const uint8_t* g, const int8x16_t* a0, const int8x16_t* a1, int32x4_t (*s)[4]) {
        for (int k = 0; k < 4; ++k) {
            const Chunk c = load_chunk(g + 32 + 64 * k);
            const Chunk lo = low_nibbles(c), hi = high_nibbles(c);
            for (int j = 0; j < NC; ++j) {
                sdot4_lane(s[j], lo, a0[j], k);
                sdot4_lane(s[j], hi, a1[j], k);
            }
        }
    }
};

struct X16Q5_0 {
    static constexpr size_t kBytes = 352;
    static constexpr int kShift = 3;
    template <int NC>
    static void dot(const uint8_t* g, const int8x16_t* a0, const int8x16_t* a1, int32x4_t (*s)[4]) {
        for (int k = 0; k < 4; ++k) {
            const Chunk c = load_chunk(g + 96 + 64 * k);
            Chunk lo = low_nibbles(c), hi = high_nibbles(c);
            for (int q = 0; q < 4; ++q) {
                lo.v[q] = vorrq_u8(lo.v[q], mask_to_16(g + 32 + 16 * k, q));
                hi.v[q] = vorrq_u8(hi.v[q], mask_to_16(g + 40 + 16 * k, q));
            }
            for (int j = 0; j < NC; ++j) {
                sdot4_lane(s[j], lo, a0[j], k);
                sdot4_lane(s[j], hi, a1[j], k);
            }
        }
    }
};

struct X16Q8_0 {
    static constexpr size_t kBytes = 544;
    static constexpr int kShift = -1;  // signed again after the flip: no correction
    template <int NC>
    static void dot(const uint8_t* g, const int8x16_t* a0, const int8x16_t* a1, int32x4_t (*s)[4]) {
        const uint8x16_t flip = vdupq_n_u8(0x80);
        for (int k = 0; k < 8; ++k) {
            Chunk c = load_chunk(g + 32 + 64 * k);
            for (int q = 0; q < 4; ++q) c.v[q] = veorq_u8(c.v[q], flip);
            for (int j = 0; j < NC; ++j) sdot4_lane(s[j], c, k < 4 ? a0[j] : a1[j], k % 4);
        }
    }
};

// One x16 block's integer sums for its 16 rows (four registers of 4): isum and, for types
// with mins, -msum.
struct Sums {
    int32x4_t isum[4] = {vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0)};
    int32x4_t mneg[4] = {vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0)};
};

// NC columns of one group, block after block: the sums of X::sums (the type's part) meet
// the rows' scales (f16 at the block's start; the mins' at +32) in x16.h's float steps,
// column by column. X: kBytes per x16 block, kActs panel blocks per x16 block, kMin,
// kCols (the most columns its sums take at once), sums<NC>(g, ab, s).
template <typename X, int NC>
void gemv_cols(int64_t nb, const uint8_t* group, const PanelActBlock* act, size_t act_stride,
               float* y, size_t y_stride) {
    float32x4_t acc[NC][4];
    for (int j = 0; j < NC; ++j)
        for (int q = 0; q < 4; ++q) acc[j][q] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* g = group + X::kBytes * (size_t)b;
        const PanelActBlock* ab[NC];
        for (int j = 0; j < NC; ++j) ab[j] = act + act_stride * (size_t)j + X::kActs * b;
        Sums s[NC];
        X::template sums<NC>(g, ab, s);
        float32x4_t d[4];
        halves16(g, d);
        for (int j = 0; j < NC; ++j) fma_step(acc[j], d, ab[j][0].d, s[j].isum);
        if constexpr (X::kMin) {
            halves16(g + 32, d);
            for (int j = 0; j < NC; ++j) fma_step(acc[j], d, ab[j][0].d, s[j].mneg);
        }
    }
    for (int j = 0; j < NC; ++j) store16(y + y_stride * (size_t)j, acc[j]);
}

// Every type's GEMV: the columns in passes of X::kCols (two for the types whose sums fit
// the registers twice, so a verification step of a few tokens unpacks the weights half as
// often), the rest one at a time.
template <typename X>
void gemv(int64_t n, const uint8_t* group, const PanelActBlock* act, size_t act_stride,
          int64_t n_cols, float* y, size_t y_stride) {
    const int64_t nb = n / (32 * X::kActs);
    int64_t c = 0;
    if constexpr (X::kCols >= 2)
        for (; c + 2 <= n_cols; c += 2)
            gemv_cols<X, 2>(nb, group, act + act_stride * (size_t)c, act_stride,
                            y + y_stride * (size_t)c, y_stride);
    for (; c < n_cols; ++c)
        gemv_cols<X, 1>(nb, group, act + act_stride * (size_t)c, act_stride,
                        y + y_stride * (size_t)c, y_stride);
}

// The legacy types' sums: the dot of the signed or biased weights, plus the bias correction.
template <typename X>
struct Legacy {
    static constexpr size_t kBytes = X::kBytes;
    static constexpr int kActs = 1;
    static constexpr bool kMin = false;
    static constexpr int kCols = 2;
    template <int NC>
    static void sums(const uint8_t* g, const PanelActBlock* const* ab, Sums* s) {
        int8x16_t a0[NC], a1[NC];
        int32x4_t is[NC][4];
        for (int j = 0; j < NC; ++j) {
            a0[j] = vld1q_s8(ab[j]->qs);
            a1[j] = vld1q_s8(ab[j]->qs + 16);
            zero4(is[j]);
        }
        X::template dot<NC>(g, a0, a1, is);
        for (int j = 0; j < NC; ++j)
            for (int q = 0; q < 4; ++q) {
                s[j].isum[q] = is[j][q];
                if constexpr (X::kShift >= 0)
                    s[j].isum[q] = vaddq_s32(s[j].isum[q], vdupq_n_s32(ab[j]->nsum32 >> X::kShift));
            }
    }
};

// ---------------------------------------------------------------------------------------
// K-quants: per-row scales and mins unpacked in the int32 lanes (lane = row).

template <int b>
inline uint32x4_t lane_byte(uint32x4_t v) {
    return vandq_u32(vshrq_n_u32(v, 8 * b), vdupq_n_u32(0xFF));
}
template <int b>
inline int32x4_t lane_sbyte(uint32x4_t v) {
    return vshrq_n_s32(vshlq_n_s32(vreinterpretq_s32_u32(v), 24 - 8 * b), 24);
}
inline uint32x4_t lane_byte_rt(uint32x4_t v, int b) {
    switch (b) {
        case 0: return lane_byte<0>(v);
        case 1: return lane_byte<1>(v);
        case 2: return lane_byte<2>(v);
        default: return lane_byte<3>(v);
    }
}
inline int32x4_t lane_sbyte_rt(uint32x4_t v, int b) {
    switch (b) {
        case 0: return lane_sbyte<0>(v);
        case 1: return lane_sbyte<1>(v);
        case 2: return lane_sbyte<2>(v);
        default: return lane_sbyte<3>(v);
    }
}
// A chunk of per-row 32-bit words as four registers of four rows.
inline void load_words(const uint8_t* p, uint32x4_t* w) {
    for (int q = 0; q < 4; ++q) w[q] = vld1q_u32((const uint32_t*)(p + 16 * q));
}

// q4_K (layout: d, dmin, 3 scale chunks at 64, qs chunks at 256).
struct X16Q4_K {
    static constexpr size_t kBytes = 2304;
    static constexpr int kActs = 8;
    static constexpr bool kMin = true;
    static constexpr int kCols = 2;
    template <int NC>
    static void sums(const uint8_t* g, const PanelActBlock* const* abs, Sums* outs) {
        const uint32x4_t m6 = vdupq_n_u32(0x3F3F3F3F), m4 = vdupq_n_u32(0x0F0F0F0F),
                         m2 = vdupq_n_u32(0x30303030);
        uint32x4_t u0[4], u1[4], u2[4], sc[2][4], mn[2][4];
        load_words(g + 64, u0);
        load_words(g + 128, u1);
        load_words(g + 192, u2);
        for (int q = 0; q < 4; ++q) {
            sc[0][q] = vandq_u32(u0[q], m6);
            mn[0][q] = vandq_u32(u1[q], m6);
            sc[1][q] = vorrq_u32(vandq_u32(u2[q], m4), vandq_u32(vshrq_n_u32(u0[q], 2), m2));
            mn[1][q] = vorrq_u32(vandq_u32(vshrq_n_u32(u2[q], 4), m4),
                                 vandq_u32(vshrq_n_u32(u1[q], 2), m2));
        }
        for (int j = 0; j < 4; ++j) {
            int8x16_t l0[NC], l1[NC], h0[NC], h1[NC];
            int32x4_t s0[NC][4], s1[NC][4];
            for (int c = 0; c < NC; ++c) {
                const PanelActBlock& lo = abs[c][2 * j];
                const PanelActBlock& hi = abs[c][2 * j + 1];
                l0[c] = vld1q_s8(lo.qs);
                l1[c] = vld1q_s8(lo.qs + 16);
                h0[c] = vld1q_s8(hi.qs);
                h1[c] = vld1q_s8(hi.qs + 16);
                zero4(s0[c]);
                zero4(s1[c]);
            }
            for (int k = 0; k < 8; ++k) {
                const Chunk v = load_chunk(g + 256 + 64 * (8 * j + k));
                const Chunk lo = low_nibbles(v), hi = high_nibbles(v);
                for (int c = 0; c < NC; ++c) {
                    sdot4_lane(s0[c], lo, k < 4 ? l0[c] : l1[c], k % 4);
                    sdot4_lane(s1[c], hi, k < 4 ? h0[c] : h1[c], k % 4);
                }
            }
            // sub-blocks 2j and 2j + 1: bytes (2j) % 4 and (2j + 1) % 4 of set j / 2
            const int set = j / 2, b0 = (2 * j) % 4, b1 = (2 * j + 1) % 4;
            for (int c = 0; c < NC; ++c) {
                Sums& out = outs[c];
                const int32_t lo_n = abs[c][2 * j].nsum32, hi_n = abs[c][2 * j + 1].nsum32;
                for (int q = 0; q < 4; ++q) {
                    out.isum[q] = vmlaq_s32(out.isum[q], vreinterpretq_s32_u32(lane_byte_rt(sc[set][q], b0)), s0[c][q]);
                    out.isum[q] = vmlaq_s32(out.isum[q], vreinterpretq_s32_u32(lane_byte_rt(sc[set][q], b1)), s1[c][q]);
                    out.mneg[q] = vmlaq_n_s32(out.mneg[q], vreinterpretq_s32_u32(lane_byte_rt(mn[set][q], b0)),
                                              lo_n);
                    out.mneg[q] = vmlaq_n_s32(out.mneg[q], vreinterpretq_s32_u32(lane_byte_rt(mn[set][q], b1)),
                                              hi_n);
                }
            }
        }
        for (int c = 0; c < NC; ++c)
            for (int q = 0; q < 4; ++q) outs[c].mneg[q] = vshrq_n_s32(outs[c].mneg[q], 7);  // exactly -msum
    }
};

// q2_K (layout: d, dmin, 4 scale chunks at 64, 16 qs chunks at 320).
struct X16Q2_K {
    static constexpr size_t kBytes = 1344;
    static constexpr int kActs = 8;
    static constexpr bool kMin = true;
    static constexpr int kCols = 1;  // (its sums fill the registers for one column)
    template <int NC>
    static void sums(const uint8_t* g, const PanelActBlock* const* abs, Sums* outs) {
        static_assert(NC == 1, "one column at a time");
        const PanelActBlock* ab = abs[0];
        Sums& out = outs[0];
        const uint8x16_t m3 = vdupq_n_u8(3);
        uint32x4_t sc[4][4];
        for (int p = 0; p < 4; ++p) load_words(g + 64 + 64 * p, sc[p]);
        for (int h = 0; h < 2; ++h)
            for (int qd = 0; qd < 2; ++qd) {
                int32x4_t s[4][4];
                for (int j = 0; j < 4; ++j) zero4(s[j]);
                for (int kk = 0; kk < 4; ++kk) {
                    const int k = 4 * qd + kk;
                    const Chunk v = load_chunk(g + 320 + 64 * (8 * h + k));
                    for (int j = 0; j < 4; ++j) {
                        Chunk w;
                        for (int q = 0; q < 4; ++q)
                            w.v[q] = vandq_u8(
                                vshlq_u8(v.v[q], vdupq_n_s8((int8_t)(-2 * j))), m3);
                        const PanelActBlock& aj = ab[4 * h + j];
                        sdot4_lane(s[j], w, vld1q_s8(aj.qs + 16 * (k / 4)), k % 4);
                    }
                }
                for (int j = 0; j < 4; ++j) {
                    const int sb = 8 * h + 2 * j + qd;
                    const int32_t nsum = ab[4 * h + j].nsum16[qd];
                    for (int q = 0; q < 4; ++q) {
                        const uint32x4_t byte = lane_byte_rt(sc[sb / 4][q], sb % 4);
                        const int32x4_t scale = vreinterpretq_s32_u32(vandq_u32(byte, vdupq_n_u32(0xF)));
                        const int32x4_t min = vreinterpretq_s32_u32(vshrq_n_u32(byte, 4));
                        out.isum[q] = vmlaq_s32(out.isum[q], scale, s[j][q]);
                        out.mneg[q] = vmlaq_n_s32(out.mneg[q], min, nsum);
                    }
                }
            }
        for (int q = 0; q < 4; ++q) out.mneg[q] = vshrq_n_s32(out.mneg[q], 7);
    }
};

// q6_K (layout: d, 4 scale chunks at 32, then per (h, k) the chunks A, B, H at 288).
struct X16Q6_K {
    static constexpr size_t kBytes = 3360;
    static constexpr int kActs = 8;
    static constexpr bool kMin = false;
    static constexpr int kCols = 2;
    // One of the four 6-bit values of a (h, k) chunk triple: m = 0..3 from A, B and H.
    static Chunk six_bits(const uint8_t* base, int m) {
        const uint8x16_t m4 = vdupq_n_u8(0x0F), m2 = vdupq_n_u8(0x30);
        const Chunk L = load_chunk(base + 64 * (m & 1)), H = load_chunk(base + 128);
        Chunk w;
        for (int q = 0; q < 4; ++q) {
            switch (m) {
                case 0: w.v[q] = vorrq_u8(vandq_u8(L.v[q], m4), vandq_u8(vshlq_n_u8(H.v[q], 4), m2)); break;
                case 1: w.v[q] = vorrq_u8(vandq_u8(L.v[q], m4), vandq_u8(vshlq_n_u8(H.v[q], 2), m2)); break;
                case 2: w.v[q] = vorrq_u8(vshrq_n_u8(L.v[q], 4), vandq_u8(H.v[q], m2)); break;
                default: w.v[q] = vorrq_u8(vshrq_n_u8(L.v[q], 4), vandq_u8(vshrq_n_u8(H.v[q], 2), m2)); break;
            }
        }
        return w;
    }
    template <int NC>
    static void sums(const uint8_t* g, const PanelActBlock* const* abs, Sums* outs) {
        uint32x4_t sc[4][4];
        for (int p = 0; p < 4; ++p) load_words(g + 32 + 64 * p, sc[p]);
        if constexpr (NC == 1) {
            // One column: the four values of a chunk triple decoded together.
            const uint8x16_t m4 = vdupq_n_u8(0x0F), m2 = vdupq_n_u8(0x30);
            const PanelActBlock* ab = abs[0];
            Sums& out = outs[0];
            for (int h = 0; h < 2; ++h)
                for (int qd = 0; qd < 2; ++qd) {
                    int32x4_t s[4][4];
                    for (int m = 0; m < 4; ++m) zero4(s[m]);
                    for (int kk = 0; kk < 4; ++kk) {
                        const int k = 4 * qd + kk;
                        const uint8_t* base = g + 288 + 192 * (size_t)(8 * h + k);
                        const Chunk A = load_chunk(base), B = load_chunk(base + 64),
                                    H = load_chunk(base + 128);
                        Chunk w[4];
                        for (int q = 0; q < 4; ++q) {
                            w[0].v[q] = vorrq_u8(vandq_u8(A.v[q], m4),
                                                 vandq_u8(vshlq_n_u8(H.v[q], 4), m2));
                            w[1].v[q] = vorrq_u8(vandq_u8(B.v[q], m4),
                                                 vandq_u8(vshlq_n_u8(H.v[q], 2), m2));
                            w[2].v[q] = vorrq_u8(vshrq_n_u8(A.v[q], 4), vandq_u8(H.v[q], m2));
                            w[3].v[q] = vorrq_u8(vshrq_n_u8(B.v[q], 4),
                                                 vandq_u8(vshrq_n_u8(H.v[q], 2), m2));
                        }
                        for (int m = 0; m < 4; ++m)
                            sdot4_lane(s[m], w[m], vld1q_s8(ab[4 * h + m].qs + 16 * (k / 4)),
                                       k % 4);
                    }
                    for (int m = 0; m < 4; ++m) {
                        const int sb = 8 * h + 2 * m + qd;
                        const int32x4_t corr = vdupq_n_s32(ab[4 * h + m].nsum16[qd] >> 2);
                        for (int q = 0; q < 4; ++q)
                            out.isum[q] = vmlaq_s32(out.isum[q], lane_sbyte_rt(sc[sb / 4][q], sb % 4),
                                                    vaddq_s32(s[m][q], corr));
                    }
                }
        } else {
            // Several columns: one value at a time (the chunks read again from L1), so the
            // columns' sums fit the registers.
            for (int h = 0; h < 2; ++h)
                for (int qd = 0; qd < 2; ++qd)
                    for (int m = 0; m < 4; ++m) {
                        int32x4_t s[NC][4];
                        for (int c = 0; c < NC; ++c) zero4(s[c]);
                        for (int kk = 0; kk < 4; ++kk) {
                            const int k = 4 * qd + kk;
                            const Chunk w = six_bits(g + 288 + 192 * (size_t)(8 * h + k), m);
                            for (int c = 0; c < NC; ++c)
                                sdot4_lane(s[c], w, vld1q_s8(abs[c][4 * h + m].qs + 16 * (k / 4)),
                                           k % 4);
                        }
                        const int sb = 8 * h + 2 * m + qd;
                        for (int c = 0; c < NC; ++c) {
                            const int32x4_t corr = vdupq_n_s32(abs[c][4 * h + m].nsum16[qd] >> 2);
                            for (int q = 0; q < 4; ++q)
                                outs[c].isum[q] = vmlaq_s32(outs[c].isum[q],
                                                            lane_sbyte_rt(sc[sb / 4][q], sb % 4),
                                                            vaddq_s32(s[c][q], corr));
                        }
                    }
        }
    }
};

}  // namespace

void fill_x16_dotprod(TypeKernels* table) {
    // (not timed on a board yet: the GEMV for a chat turn's few tokens, panels above)
    set_x16_gemvs(table, {gemv<Legacy<X16Q4_0>>, gemv<Legacy<X16Q5_0>>, gemv<Legacy<X16Q8_0>>,
                          gemv<X16Q2_K>, gemv<X16Q4_K>, gemv<X16Q6_K>, 64});
}

}  // namespace edgellm
