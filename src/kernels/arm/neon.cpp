// The "neon" kernel set: ARMv8.0 Advanced SIMD, which every aarch64 CPU has. Compiled
// with -march=armv8-a (see CMakeLists.txt), so nothing here may need a later extension.
//
// Float rows (f32, f16, bf16) accumulate in four f32x4 FMA chains; f16 and bf16 widen to
// f32 first (exact), since f16 arithmetic would neither be on every CPU nor within the
// error budget. The activation quantizers (q8_0, q8_1, q8_K) produce the reference's
// bytes: the same float multiply per element, and fcvtns, which rounds to nearest with
// ties to even as the reference's nearest_int does. The integer dot products are
// neon_int_dots.h with a widening-multiply policy.
#include <arm_neon.h>

#include <cmath>
#include <cstddef>
#include <cstring>

#include "kernels/arm/arm_kernels.h"
#include "kernels/arm/neon_common.h"
#include "kernels/arm/neon_int_dots.h"
#include "kernels/block_formats.h"
#include "kernels/count_dispatch.h"

#if defined(__ARM_FEATURE_DOTPROD) || defined(__ARM_FEATURE_MATMUL_INT8)
#error "neon.cpp is the ARMv8.0 baseline: compile it with -march=armv8-a"
#endif

namespace edgellm {

namespace neon {
namespace {

// Without sdot: 16 int8 products as int16 (smull: |a * b| <= 128 * 128, exact), added in
// pairs into the int32 lanes (sadalp). Lane k gets products 2k, 2k+1, 2k+8, 2k+9.
struct DotWiden {
    static int32x4_t dot(int32x4_t acc, int8x16_t a, int8x16_t b) {
        acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(a), vget_low_s8(b)));
        return vpadalq_s16(acc, vmull_high_s8(a, b));
    }
};
// sdot's grouping without sdot: lane j += the products of bytes 4j..4j+3 (pairs in int16:
// exact while one side's codes are in -127..127, as a quantized query's are).
struct DotLanes {
    static int32x4_t dot(int32x4_t acc, int8x16_t a, int8x16_t b) {
        const int16x8_t pairs = vpaddq_s16(vmull_s8(vget_low_s8(a), vget_low_s8(b)),
                                           vmull_high_s8(a, b));
        return vpadalq_s16(acc, pairs);
    }
};

// ---------------------------------------------------------------------------------------
// Float rows

// 8 halves -> two f32x4 (exact).
inline float32x4_t f16_lo(uint16x8_t h) {
    return vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(h)));
}
inline float32x4_t f16_hi(uint16x8_t h) {
    return vcvt_high_f32_f16(vreinterpretq_f16_u16(h));
}
// 8 bfloat16 -> two f32x4: the 16 bits are the top half of the float.
inline float32x4_t bf16_lo(uint16x8_t h) {
    return vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16));
}
inline float32x4_t bf16_hi(uint16x8_t h) {
    return vreinterpretq_f32_u32(vshll_high_n_u16(h, 16));
}

inline float sum4(const float32x4_t acc[4]) {
    return vaddvq_f32(vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3])));
}

void vec_dot_f32_neon(int64_t n, float* s, const void* vx, const void* vy) {
    const float* x = (const float*)vx;
    const float* y = (const float*)vy;
    float32x4_t acc[4] = {vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0)};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 4; ++k)
            acc[k] = vfmaq_f32(acc[k], vld1q_f32(x + i + 4 * k), vld1q_f32(y + i + 4 * k));
    for (; i + 4 <= n; i += 4) acc[0] = vfmaq_f32(acc[0], vld1q_f32(x + i), vld1q_f32(y + i));
    float sum = sum4(acc);
    for (; i < n; ++i) sum += x[i] * y[i];
    *s = sum;
}

// f16 · f16: 16 elements per step, widened to f32 and summed in four FMA chains.
void vec_dot_f16_neon(int64_t n, float* s, const void* vx, const void* vy) {
    const fp16_t* x = (const fp16_t*)vx;
    const fp16_t* y = (const fp16_t*)vy;
    float32x4_t acc[4] = {vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0)};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const uint16x8_t x0 = vld1q_u16(x + i), x1 = vld1q_u16(x + i + 8);
        const uint16x8_t y0 = vld1q_u16(y + i), y1 = vld1q_u16(y + i + 8);
        acc[0] = vfmaq_f32(acc[0], f16_lo(x0), f16_lo(y0));
        acc[1] = vfmaq_f32(acc[1], f16_hi(x0), f16_hi(y0));
        acc[2] = vfmaq_f32(acc[2], f16_lo(x1), f16_lo(y1));
        acc[3] = vfmaq_f32(acc[3], f16_hi(x1), f16_hi(y1));
    }
    for (; i + 8 <= n; i += 8) {
        const uint16x8_t x0 = vld1q_u16(x + i), y0 = vld1q_u16(y + i);
        acc[0] = vfmaq_f32(acc[0], f16_lo(x0), f16_lo(y0));
        acc[1] = vfmaq_f32(acc[1], f16_hi(x0), f16_hi(y0));
    }
    float sum = sum4(acc);
    for (; i < n; ++i) sum += h2f(x[i]) * h2f(y[i]);
    *s = sum;
}

void vec_dot_bf16_neon(int64_t n, float* s, const void* vx, const void* vy) {
    const bf16_t* x = (const bf16_t*)vx;
    const bf16_t* y = (const bf16_t*)vy;
    float32x4_t acc[4] = {vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0)};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const uint16x8_t x0 = vld1q_u16(x + i), x1 = vld1q_u16(x + i + 8);
        const uint16x8_t y0 = vld1q_u16(y + i), y1 = vld1q_u16(y + i + 8);
        acc[0] = vfmaq_f32(acc[0], bf16_lo(x0), bf16_lo(y0));
        acc[1] = vfmaq_f32(acc[1], bf16_hi(x0), bf16_hi(y0));
        acc[2] = vfmaq_f32(acc[2], bf16_lo(x1), bf16_lo(y1));
        acc[3] = vfmaq_f32(acc[3], bf16_hi(x1), bf16_hi(y1));
    }
    float sum = sum4(acc);
    for (; i < n; ++i) sum += bf16_to_f32(x[i]) * bf16_to_f32(y[i]);
    *s = sum;
}

void to_float_f16_neon(const void* src, float* dst, int64_t n) {
    const fp16_t* x = (const fp16_t*)src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const uint16x8_t h = vld1q_u16(x + i);
        vst1q_f32(dst + i, f16_lo(h));
        vst1q_f32(dst + i + 4, f16_hi(h));
    }
    for (; i < n; ++i) dst[i] = h2f(x[i]);
}

// f32 -> f16 by fcvtn: round to nearest even, overflow to inf, subnormals kept (FPCR's
// defaults on Linux), as f32_to_fp16.
void from_float_f16_neon(const float* src, void* dst, int64_t n) {
    fp16_t* y = (fp16_t*)dst;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const float16x8_t h =
            vcvt_high_f16_f32(vcvt_f16_f32(vld1q_f32(src + i)), vld1q_f32(src + i + 4));
        vst1q_u16(y + i, vreinterpretq_u16_f16(h));
    }
    for (; i < n; ++i) y[i] = f32_to_fp16(src[i]);
}

void to_float_bf16_neon(const void* src, float* dst, int64_t n) {
    const bf16_t* x = (const bf16_t*)src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const uint16x8_t h = vld1q_u16(x + i);
        vst1q_f32(dst + i, bf16_lo(h));
        vst1q_f32(dst + i + 4, bf16_hi(h));
    }
    for (; i < n; ++i) dst[i] = bf16_to_f32(x[i]);
}

// f32 -> bf16 with the reference's integer rounding: (u + 0x7fff + lsb) >> 16, and NaN to
// the quiet NaN (u >> 16) | 64.
void from_float_bf16_neon(const float* src, void* dst, int64_t n) {
    bf16_t* y = (bf16_t*)dst;
    const uint32x4_t abs_mask = vdupq_n_u32(0x7fffffffu), inf = vdupq_n_u32(0x7f800000u);
    const uint32x4_t bias = vdupq_n_u32(0x7fff), one = vdupq_n_u32(1), quiet = vdupq_n_u32(64);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const uint32x4_t u = vreinterpretq_u32_f32(vld1q_f32(src + i));
        const uint32x4_t hi = vshrq_n_u32(u, 16);
        const uint32x4_t rounded =
            vshrq_n_u32(vaddq_u32(u, vaddq_u32(bias, vandq_u32(hi, one))), 16);
        const uint32x4_t nan = vcgtq_u32(vandq_u32(u, abs_mask), inf);
        vst1_u16(y + i, vmovn_u32(vbslq_u32(nan, vorrq_u32(hi, quiet), rounded)));
    }
    for (; i < n; ++i) y[i] = f32_to_bf16(src[i]);
}

// ---------------------------------------------------------------------------------------
// Legacy 32-element blocks

void to_float_q8_0_neon(const void* src, float* dst, int64_t n) {
    const block_q8_0* x = (const block_q8_0*)src;
    for (int64_t i = 0; i < n / QK8_0; ++i) {
        const float d = h2f(x[i].d);
        float* out = dst + i * QK8_0;
        for (int k = 0; k < 2; ++k) {
            const int8x16_t q = load_s8(x[i].qs + 16 * k);
            const int16x8_t lo = vmovl_s8(vget_low_s8(q)), hi = vmovl_high_s8(q);
            vst1q_f32(out + 16 * k, vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), d));
            vst1q_f32(out + 16 * k + 4, vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(lo)), d));
            vst1q_f32(out + 16 * k + 8, vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), d));
            vst1q_f32(out + 16 * k + 12, vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(hi)), d));
        }
    }
}

// 32 floats -> 32 int8 as the reference's q8_0 / q8_1: amax, d = amax / 127, q = x * (127 /
// amax) rounded to nearest even (fcvtns). Values stay within [-127, 127], so the
// saturating narrows never saturate. Returns d; *sum gets sum(q).
inline float quantize_block_q8(const float* x, int8_t* qs, int* sum) {
    float32x4_t v[8];
    float32x4_t amax = vdupq_n_f32(0.0f);
    for (int k = 0; k < 8; ++k) {
        v[k] = vld1q_f32(x + 4 * k);
        amax = vmaxq_f32(amax, vabsq_f32(v[k]));
    }
    const float max_scalar = vmaxvq_f32(amax);
    const float d = max_scalar / 127.0f;
    const float id = max_scalar != 0.0f ? 127.0f / max_scalar : 0.0f;
    int32x4_t total = vdupq_n_s32(0);
    for (int k = 0; k < 8; k += 2) {
        const int32x4_t a = vcvtnq_s32_f32(vmulq_n_f32(v[k], id));
        const int32x4_t b = vcvtnq_s32_f32(vmulq_n_f32(v[k + 1], id));
        total = vaddq_s32(total, vaddq_s32(a, b));
        const int16x8_t ab = vcombine_s16(vqmovn_s32(a), vqmovn_s32(b));
        vst1_s8(qs + 4 * k, vqmovn_s16(ab));
    }
    *sum = vaddvq_s32(total);
    return d;
}

void from_float_q8_0_neon(const float* src, void* dst, int64_t n) {
    block_q8_0* y = (block_q8_0*)dst;
    for (int64_t i = 0; i < n / QK8_0; ++i) {
        int sum;
        y[i].d = f2h(quantize_block_q8(src + i * QK8_0, y[i].qs, &sum));
    }
}

void from_float_q8_1_neon(const float* src, void* dst, int64_t n) {
    block_q8_1* y = (block_q8_1*)dst;
    for (int64_t i = 0; i < n / QK8_1; ++i) {
        int sum;
        const float d = quantize_block_q8(src + i * QK8_1, y[i].qs, &sum);
        y[i].d = f2h(d);
        y[i].s = f2h((float)sum * d);
    }
}

// ---------------------------------------------------------------------------------------
// q8_K (the K-quants' activation quantizer)

// As the reference: the element of largest magnitude (the first one, if several) maps to
// -127, its sign kept in d = 1 / iscale; q = iscale * x rounded to nearest even, clamped to
// 127 above (the other extreme may round to 128); bsums are the sums of each 16 q.
void from_float_q8_K_neon(const float* src, void* dst, int64_t n) {
    block_q8_K* y = (block_q8_K*)dst;
    const int32x4_t max127 = vdupq_n_s32(127);
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const float* x = src + i * QK_K;
        float32x4_t vmax = vdupq_n_f32(0.0f);
        for (int j = 0; j < QK_K; j += 4) vmax = vmaxq_f32(vmax, vabsq_f32(vld1q_f32(x + j)));
        const float amax = vmaxvq_f32(vmax);
        uint8_t* yb = (uint8_t*)&y[i];
        if (amax == 0.0f) {
            std::memset(yb, 0, sizeof(block_q8_K));
            continue;
        }
        // The first element reaching amax: a vector compare finds the group of four, a
        // scalar look the lane.
        float max = amax;
        const float32x4_t vamax = vdupq_n_f32(amax);
        for (int j = 0; j < QK_K; j += 4) {
            if (vmaxvq_u32(vceqq_f32(vabsq_f32(vld1q_f32(x + j)), vamax)) == 0) continue;
            int k = 0;
            while (std::fabs(x[j + k]) != amax) ++k;
            max = x[j + k];
            break;
        }
        const float iscale = -127.0f / max;
        int8_t qs[QK_K];
        for (int j = 0; j < QK_K; j += 16) {
            int32x4_t q[4];
            for (int k = 0; k < 4; ++k)
                q[k] = vminq_s32(vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + j + 4 * k), iscale)),
                                 max127);
            const int16x8_t q01 = vcombine_s16(vqmovn_s32(q[0]), vqmovn_s32(q[1]));
            const int16x8_t q23 = vcombine_s16(vqmovn_s32(q[2]), vqmovn_s32(q[3]));
            vst1q_s8(qs + j, vcombine_s8(vqmovn_s16(q01), vqmovn_s16(q23)));
        }
        int16_t bsums[QK_K / 16];
        for (int j = 0; j < QK_K / 16; ++j) bsums[j] = vaddlvq_s8(vld1q_s8(qs + 16 * j));
        const float d = 1.0f / iscale;
        std::memcpy(yb + offsetof(block_q8_K, d), &d, sizeof d);
        std::memcpy(yb + offsetof(block_q8_K, qs), qs, sizeof qs);
        std::memcpy(yb + offsetof(block_q8_K, bsums), bsums, sizeof bsums);
    }
}

// ---------------------------------------------------------------------------------------
// Attention over cached rows (dot_rows, vec_mad_n; kernels.h): elements widened four at a
// time to exact f32 (f16 -> f32; q8_0: q * d), then one FMA per element in element / row
// order, as the scalar references do, so the results are theirs bit for bit.

struct RowF16 {
    static constexpr TensorType kType = TensorType::F16;
    static bool fits(int64_t hd) { return hd % 4 == 0; }
    static float32x4_t at(const uint8_t* row, int64_t i0) {
        return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t*)(row + 2 * i0))));
    }
};
struct RowQ8_0 {
    static constexpr TensorType kType = TensorType::Q8_0;
    static bool fits(int64_t hd) { return hd % 32 == 0; }
    static float32x4_t at(const uint8_t* row, int64_t i0) {
        const block_q8_0* b = (const block_q8_0*)row + i0 / 32;
        int32_t four;
        std::memcpy(&four, b->qs + i0 % 32, 4);
        const int16x8_t q16 = vmovl_s8(vreinterpret_s8_s32(vdup_n_s32(four)));
        const float32x4_t q = vcvtq_f32_s32(vmovl_s16(vget_low_s16(q16)));
        const float d = vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(b->d))), 0);
        return vmulq_n_f32(q, d);
    }
};

// The other KV cache types, four elements at a time as exactly (d * q is exact in f32;
// + m rounds once, as the reference's multiply then add).
inline float half_to_float(uint16_t h) {
    return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}
// Four 4-bit values of a 32-element block from element j (a multiple of 4): elements
// 0..15 are the low nibbles of qs[0..15], 16..31 the high ones.
inline uint32x4_t nibbles4(const uint8_t* qs, int64_t j) {
    uint32_t four;
    std::memcpy(&four, qs + j % 16, 4);
    uint8x8_t b = vreinterpret_u8_u32(vdup_n_u32(four));
    b = j >= 16 ? vshr_n_u8(b, 4) : vand_u8(b, vdup_n_u8(0x0F));
    return vmovl_u16(vget_low_u16(vmovl_u8(b)));
}
// 16 where bit j + lane of qh is set.
inline uint32x4_t high_bits4(const uint8_t* qh, int64_t j) {
    uint32_t h;
    std::memcpy(&h, qh, 4);
    const uint32x4_t bits = vdupq_n_u32((h >> j) & 0xF);
    const uint32_t lanes[4] = {1, 2, 4, 8};
    const uint32x4_t lane = vld1q_u32(lanes);
    return vandq_u32(vceqq_u32(vandq_u32(bits, lane), lane), vdupq_n_u32(16));
}
struct RowF32 {
    static constexpr TensorType kType = TensorType::F32;
    static bool fits(int64_t hd) { return hd % 4 == 0; }
    static float32x4_t at(const uint8_t* row, int64_t i0) { return vld1q_f32((const float*)row + i0); }
};
struct RowBF16 {
    static constexpr TensorType kType = TensorType::BF16;
    static bool fits(int64_t hd) { return hd % 4 == 0; }
    static float32x4_t at(const uint8_t* row, int64_t i0) {
        return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16((const uint16_t*)(row + 2 * i0)), 16));
    }
};
struct RowQ4_0 {
    static constexpr TensorType kType = TensorType::Q4_0;
    static bool fits(int64_t hd) { return hd % 32 == 0; }
    static float32x4_t at(const uint8_t* row, int64_t i0) {
        const block_q4_0* b = (const block_q4_0*)row + i0 / 32;
        const int32x4_t q = vsubq_s32(vreinterpretq_s32_u32(nibbles4(b->qs, i0 % 32)), vdupq_n_s32(8));
        return vmulq_n_f32(vcvtq_f32_s32(q), half_to_float(b->d));
    }
};
struct RowQ4_1 {
    static constexpr TensorType kType = TensorType::Q4_1;
    static bool fits(int64_t hd) { return hd % 32 == 0; }
    static float32x4_t at(const uint8_t* row, int64_t i0) {
        const block_q4_1* b = (const block_q4_1*)row + i0 / 32;
        return vfmaq_n_f32(vdupq_n_f32(half_to_float(b->m)), vcvtq_f32_u32(nibbles4(b->qs, i0 % 32)),
                           half_to_float(b->d));
    }
};
struct RowQ5_0 {
    static constexpr TensorType kType = TensorType::Q5_0;
    static bool fits(int64_t hd) { return hd % 32 == 0; }
    static float32x4_t at(const uint8_t* row, int64_t i0) {
        const block_q5_0* b = (const block_q5_0*)row + i0 / 32;
        const int64_t j = i0 % 32;
        const int32x4_t q = vsubq_s32(vreinterpretq_s32_u32(vorrq_u32(nibbles4(b->qs, j), high_bits4(b->qh, j))),
                                      vdupq_n_s32(16));
        return vmulq_n_f32(vcvtq_f32_s32(q), half_to_float(b->d));
    }
};
struct RowQ5_1 {
    static constexpr TensorType kType = TensorType::Q5_1;
    static bool fits(int64_t hd) { return hd % 32 == 0; }
    static float32x4_t at(const uint8_t* row, int64_t i0) {
        const block_q5_1* b = (const block_q5_1*)row + i0 / 32;
        const int64_t j = i0 % 32;
        const uint32x4_t q = vorrq_u32(nibbles4(b->qs, j), high_bits4(b->qh, j));
        return vfmaq_n_f32(vdupq_n_f32(half_to_float(b->m)), vcvtq_f32_u32(q), half_to_float(b->d));
    }
};
struct RowIQ4_NL {
    static constexpr TensorType kType = TensorType::IQ4_NL;
    static bool fits(int64_t hd) { return hd % 32 == 0; }
    static float32x4_t at(const uint8_t* row, int64_t i0) {
        const block_iq4_nl* b = (const block_iq4_nl*)row + i0 / 32;
        const uint32x4_t idx = nibbles4(b->qs, i0 % 32);
        const float v[4] = {(float)kvalues_iq4nl[vgetq_lane_u32(idx, 0)], (float)kvalues_iq4nl[vgetq_lane_u32(idx, 1)],
                            (float)kvalues_iq4nl[vgetq_lane_u32(idx, 2)], (float)kvalues_iq4nl[vgetq_lane_u32(idx, 3)]};
        return vmulq_n_f32(vld1q_f32(v), half_to_float(b->d));
    }
};

// V sum: slices of 16 elements (four registers) for up to four heads stay in registers
// over all rows; each slice of a V row is widened once per four heads.
template <typename Row, int kHeads>
void mad_slice(int64_t n_rows, const uint8_t* x, size_t bx, int64_t i0, const float* p,
               size_t p_stride, float* acc, size_t acc_stride) {
    float32x4_t a[kHeads][4];
    for (int g = 0; g < kHeads; ++g)
        for (int k = 0; k < 4; ++k) a[g][k] = vld1q_f32(acc + acc_stride * g + 4 * k);
    for (int64_t c = 0; c < n_rows; ++c) {
        const uint8_t* row = x + bx * (size_t)c;
        float32x4_t v[4];
        for (int k = 0; k < 4; ++k) v[k] = Row::at(row, i0 + 4 * k);
        for (int g = 0; g < kHeads; ++g) {
            const float pg = p[p_stride * g + (size_t)c];
            for (int k = 0; k < 4; ++k) a[g][k] = vfmaq_n_f32(a[g][k], v[k], pg);
        }
    }
    for (int g = 0; g < kHeads; ++g)
        for (int k = 0; k < 4; ++k) vst1q_f32(acc + acc_stride * g + 4 * k, a[g][k]);
}

template <typename Row>
void vec_mad_n_neon(int64_t hd, int64_t n_rows, const void* vx, size_t bx, const float* p,
                    size_t p_stride, int ng, float* acc) {
    if (!Row::fits(hd))
        return reference_kernels(Row::kType).vec_mad_n(hd, n_rows, vx, bx, p, p_stride, ng, acc);
    const uint8_t* x = (const uint8_t*)vx;
    int64_t i = 0;
    for (; i + 16 <= hd; i += 16) {
        over_tiles<4>(ng, [&]<int kN>(int64_t g) {  // heads four at a time, then the rest
            mad_slice<Row, kN>(n_rows, x, bx, i, p + p_stride * g, p_stride, acc + hd * g + i,
                               (size_t)hd);
        });
    }
    for (; i < hd; i += 4)  // the last 4, 8 or 12 elements
        for (int g = 0; g < ng; ++g) {
            float32x4_t a = vld1q_f32(acc + hd * g + i);
            for (int64_t c = 0; c < n_rows; ++c)
                a = vfmaq_n_f32(a, Row::at(x + bx * (size_t)c, i), p[p_stride * g + (size_t)c]);
            vst1q_f32(acc + hd * g + i, a);
        }
}

// Scores: four keys at a time in the four lanes; each 4 x 4 tile (four keys x four
// elements) is widened and transposed, then every query takes one FMA per element.
template <typename Row, int kHeads>
void dot_rows_block(int64_t hd, const uint8_t* x, size_t bx, const float* q, float* s,
                    size_t s_stride) {
    float32x4_t acc[kHeads];
    for (int g = 0; g < kHeads; ++g) acc[g] = vdupq_n_f32(0.0f);
    for (int64_t i0 = 0; i0 < hd; i0 += 4) {
        const float32x4_t r0 = Row::at(x, i0), r1 = Row::at(x + bx, i0),
                          r2 = Row::at(x + 2 * bx, i0), r3 = Row::at(x + 3 * bx, i0);
        const float32x4_t t0 = vtrn1q_f32(r0, r1), t1 = vtrn2q_f32(r0, r1);
        const float32x4_t t2 = vtrn1q_f32(r2, r3), t3 = vtrn2q_f32(r2, r3);
        float32x4_t col[4];
        col[0] =
            vreinterpretq_f32_f64(vtrn1q_f64(vreinterpretq_f64_f32(t0), vreinterpretq_f64_f32(t2)));
        col[1] =
            vreinterpretq_f32_f64(vtrn1q_f64(vreinterpretq_f64_f32(t1), vreinterpretq_f64_f32(t3)));
        col[2] =
            vreinterpretq_f32_f64(vtrn2q_f64(vreinterpretq_f64_f32(t0), vreinterpretq_f64_f32(t2)));
        col[3] =
            vreinterpretq_f32_f64(vtrn2q_f64(vreinterpretq_f64_f32(t1), vreinterpretq_f64_f32(t3)));
        for (int j = 0; j < 4; ++j)
            for (int g = 0; g < kHeads; ++g)
                acc[g] = vfmaq_n_f32(acc[g], col[j], q[hd * g + i0 + j]);
    }
    for (int g = 0; g < kHeads; ++g) vst1q_f32(s + s_stride * (size_t)g, acc[g]);
}

template <typename Row>
void dot_rows_neon(int64_t hd, int64_t n_rows, const void* vx, size_t bx, const float* q, int ng,
                   float* s, size_t s_stride) {
    if (!Row::fits(hd))
        return reference_kernels(Row::kType).dot_rows(hd, n_rows, vx, bx, q, ng, s, s_stride);
    const uint8_t* x = (const uint8_t*)vx;
    int64_t c = 0;
    for (; c + 4 <= n_rows; c += 4)
        over_tiles<8>(ng, [&]<int kN>(int64_t g0) {  // queries eight at a time, then the rest
            dot_rows_block<Row, kN>(hd, x + bx * (size_t)c, bx, q + hd * g0,
                                    s + s_stride * (size_t)g0 + (size_t)c, s_stride);
        });
    for (; c < n_rows; ++c) {  // the last rows one at a time, in the same order
        const uint8_t* row = x + bx * (size_t)c;
        for (int g = 0; g < ng; ++g) {
            float acc = 0.0f;
            for (int64_t i0 = 0; i0 < hd; i0 += 4) {
                float w[4];
                vst1q_f32(w, Row::at(row, i0));
                for (int j = 0; j < 4; ++j) acc = std::fma(q[hd * g + i0 + j], w[j], acc);
            }
            s[s_stride * (size_t)g + (size_t)c] = acc;
        }
    }
}

}  // namespace
}  // namespace neon

void fill_neon(TypeKernels* table) {
    using namespace neon;
    using T = TensorType;
    auto at = [table](T t) -> TypeKernels& { return table[(uint32_t)t]; };

    at(T::F32).vec_dot = vec_dot_f32_neon;

    at(T::F16).vec_dot = vec_dot_f16_neon;
    at(T::F16).to_float = to_float_f16_neon;
    at(T::F16).from_float = from_float_f16_neon;

    at(T::BF16).vec_dot = vec_dot_bf16_neon;
    at(T::BF16).to_float = to_float_bf16_neon;
    at(T::BF16).from_float = from_float_bf16_neon;

    at(T::Q8_0).to_float = to_float_q8_0_neon;
    at(T::Q8_0).from_float = from_float_q8_0_neon;
    at(T::Q8_1).from_float = from_float_q8_1_neon;
    at(T::Q8_K).from_float = from_float_q8_K_neon;

    at(T::F16).vec_mad_n = vec_mad_n_neon<RowF16>;
    at(T::F16).dot_rows = dot_rows_neon<RowF16>;
    at(T::Q8_0).vec_mad_n = vec_mad_n_neon<RowQ8_0>;
    at(T::Q8_0).dot_rows = dot_rows_neon<RowQ8_0>;
    at(T::Q8_0).dot_rows_q8 = dot_rows_q8_keys4<DotLanes>;
    at(T::Q8_0).mad_rows_q8 = mad_rows_q8_rows4<DotLanes>;
    at(T::F32).vec_mad_n = vec_mad_n_neon<RowF32>;
    at(T::F32).dot_rows = dot_rows_neon<RowF32>;
    at(T::BF16).vec_mad_n = vec_mad_n_neon<RowBF16>;
    at(T::BF16).dot_rows = dot_rows_neon<RowBF16>;
    at(T::Q4_0).vec_mad_n = vec_mad_n_neon<RowQ4_0>;
    at(T::Q4_0).dot_rows = dot_rows_neon<RowQ4_0>;
    at(T::Q4_1).vec_mad_n = vec_mad_n_neon<RowQ4_1>;
    at(T::Q4_1).dot_rows = dot_rows_neon<RowQ4_1>;
    at(T::Q5_0).vec_mad_n = vec_mad_n_neon<RowQ5_0>;
    at(T::Q5_0).dot_rows = dot_rows_neon<RowQ5_0>;
    at(T::Q5_1).vec_mad_n = vec_mad_n_neon<RowQ5_1>;
    at(T::Q5_1).dot_rows = dot_rows_neon<RowQ5_1>;
    at(T::IQ4_NL).vec_mad_n = vec_mad_n_neon<RowIQ4_NL>;
    at(T::IQ4_NL).dot_rows = dot_rows_neon<RowIQ4_NL>;

    fill_int_dots(table, DotWiden{});
}

}  // namespace edgellm
