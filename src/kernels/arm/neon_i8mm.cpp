// The "i8mm" kernel set: ARMv8.6 I8MM (FEAT_I8MM: smmla, ummla, usmmla, usdot, sudot).
// Compiled with -march=armv8.6-a+dotprod+i8mm. It builds on the "dotprod" set and adds
// the panel GEMM (kernels/panel.h) over smmla:
//
// - smmla multiplies a 2x8 int8 matrix by an 8x2 one: 32 products into four int32 lanes
//   (two rows of weights x two columns of activations), twice sdot's 16. Only a kernel
//   that produces two weight rows x two columns at once uses all four, which the panel
//   GEMM does; the one-row dot products (vec_dot, vec_dot_4) keep dotprod's sdot.
// - usdot (unsigned x signed bytes) would help a weight format with unsigned values above
//   127; every block format here is unpacked to values that fit a signed byte, so sdot
//   already takes them.
//
// Detection of I8MM (HWCAP2_I8MM) is testable under qemu: with -cpu max the set is
// selected, with -cpu cortex-a76 it must not be. (Timings under qemu mean nothing: the
// kernel is checked there for its bits only.)
#include <arm_neon.h>

#include <cstring>

#include "kernels/arm/arm_kernels.h"
#include "kernels/count_dispatch.h"
#include "kernels/panel.h"

#if !defined(__ARM_FEATURE_MATMUL_INT8) || !defined(__ARM_FEATURE_DOTPROD)
#error "neon_i8mm.cpp needs -march=armv8.6-a+dotprod+i8mm"
#endif

namespace edgellm {

void fill_neon_i8mm(TypeKernels*) {}

namespace {

// Panel GEMM with smmla: panels of 8 signed rows as dotprod's (a step: rows 0..7, four
// bytes each). Two steps zipped give eight consecutive bytes of two rows, the 2x8 weight
// operand; eight bytes of two columns the 8x2 activation one; so per eight elements four
// row pairs x two column pairs take eight smmla, whose int32 lanes hold (r, c), (r, c + 1),
// (r + 1, c), (r + 1, c + 1). The float steps are the reference's per lane, with the
// rows' scales and the columns' d laid out the same way: acc = fma(float(isum), scale *
// d, acc), then acc = fma(offset, dsum, acc). An odd last column is paired with itself.
constexpr int kRows = 8;

inline int8x16_t zip_lo(int8x16_t a, int8x16_t b) {
    return vreinterpretq_s8_u32(vzip1q_u32(vreinterpretq_u32_s8(a), vreinterpretq_u32_s8(b)));
}
inline int8x16_t zip_hi(int8x16_t a, int8x16_t b) {
    return vreinterpretq_s8_u32(vzip2q_u32(vreinterpretq_u32_s8(a), vreinterpretq_u32_s8(b)));
}
// (x[i], x[i], x[i + 1], x[i + 1]): a row pair's values for the four lanes
inline float32x4_t row_pair(const float* x, int i) {
    const float32x2_t v = vld1_f32(x + i);
    return vcombine_f32(vdup_lane_f32(v, 0), vdup_lane_f32(v, 1));
}
// (a, b, a, b): a column pair's values for the four lanes
inline float32x4_t col_pair(float a, float b) {
    const float32x2_t v = {a, b};
    return vcombine_f32(v, v);
}

template <int G, bool kMin, int kCols>
void tile(const uint8_t* panel, int64_t n_groups, const PanelActBlock* act, size_t act_stride,
          float* y, size_t y_stride, int rows) {
    constexpr int kPairs = (kCols + 1) / 2;
    constexpr size_t kQBytes = (size_t)G * kRows;
    constexpr size_t kGroupBytes = kQBytes + sizeof(float) * kRows * (kMin ? 2 : 1);
    const PanelActBlock* a[2 * kPairs];
    for (int c = 0; c < 2 * kPairs; ++c)
        a[c] = act + act_stride * (size_t)(c < kCols ? c : kCols - 1);
    float32x4_t acc[4][kPairs];
    for (int rp = 0; rp < 4; ++rp)
        for (int cp = 0; cp < kPairs; ++cp) acc[rp][cp] = vdupq_n_f32(0.0f);
    for (int64_t g = 0; g < n_groups; ++g) {
        const int8_t* pg = (const int8_t*)panel + kGroupBytes * (size_t)g;
        const int64_t blk = G == 32 ? g : g / 2;
        const int half = G == 32 ? 0 : (int)(g & 1);
        int32x4_t isum[4][kPairs];
        for (int rp = 0; rp < 4; ++rp)
            for (int cp = 0; cp < kPairs; ++cp) isum[rp][cp] = vdupq_n_s32(0);
        for (int s = 0; s < G / 4; s += 2) {  // eight elements: steps s and s + 1
            const int8x16_t lo0 = vld1q_s8(pg + 32 * s), hi0 = vld1q_s8(pg + 32 * s + 16);
            const int8x16_t lo1 = vld1q_s8(pg + 32 * s + 32), hi1 = vld1q_s8(pg + 32 * s + 48);
            const int8x16_t w[4] = {zip_lo(lo0, lo1), zip_hi(lo0, lo1), zip_lo(hi0, hi1),
                                    zip_hi(hi0, hi1)};
            for (int cp = 0; cp < kPairs; ++cp) {
                const int8_t* a0 = a[2 * cp][blk].qs + 16 * half + 4 * s;
                const int8_t* a1 = a[2 * cp + 1][blk].qs + 16 * half + 4 * s;
                const int8x16_t b = vcombine_s8(vld1_s8(a0), vld1_s8(a1));
                for (int rp = 0; rp < 4; ++rp) isum[rp][cp] = vmmlaq_s32(isum[rp][cp], w[rp], b);
            }
        }
        const float* fs = (const float*)(pg + kQBytes);
        for (int cp = 0; cp < kPairs; ++cp) {
            const float32x4_t d = col_pair(a[2 * cp][blk].d, a[2 * cp + 1][blk].d);
            for (int rp = 0; rp < 4; ++rp)
                acc[rp][cp] = vfmaq_f32(acc[rp][cp], vcvtq_f32_s32(isum[rp][cp]),
                                        vmulq_f32(row_pair(fs, 2 * rp), d));
        }
        if constexpr (kMin) {
            for (int cp = 0; cp < kPairs; ++cp) {
                const PanelActBlock& b0 = a[2 * cp][blk];
                const PanelActBlock& b1 = a[2 * cp + 1][blk];
                const float32x4_t ds = G == 32 ? col_pair(b0.dsum32, b1.dsum32)
                                               : col_pair(b0.dsum16[half], b1.dsum16[half]);
                for (int rp = 0; rp < 4; ++rp)
                    acc[rp][cp] = vfmaq_f32(acc[rp][cp], row_pair(fs + kRows, 2 * rp), ds);
            }
        }
    }
    for (int rp = 0; rp < 4; ++rp)
        for (int cp = 0; cp < kPairs; ++cp) {
            float v[4];
            vst1q_f32(v, acc[rp][cp]);
            for (int i = 0; i < 2; ++i)
                for (int j = 0; j < 2; ++j) {
                    const int r = 2 * rp + i, c = 2 * cp + j;
                    if (r < rows && c < kCols) y[y_stride * (size_t)c + (size_t)r] = v[2 * i + j];
                }
        }
}

constexpr int kTile = 4;

void panel_gemm_i8mm(const uint8_t* panel, int64_t n_groups, int G, bool has_min, int /*run: 1*/,
                     const PanelActBlock* act, size_t act_stride, int64_t n_cols, float* y,
                     size_t y_stride, int rows) {
    with_panel_group(G, has_min, [&]<int kG, bool kMin>() {
        over_tiles<kTile>(n_cols, [&]<int kN>(int64_t c) {
            tile<kG, kMin, kN>(panel, n_groups, act + act_stride * (size_t)c, act_stride,
                               y + y_stride * (size_t)c, y_stride, rows);
        });
    });
}

}  // namespace

void fill_panel_i8mm(PanelKernel* panel) {
    panel->rows = kRows;
    panel->gemm = panel_gemm_i8mm;
    panel->isa = "i8mm";
}

}  // namespace edgellm

namespace edgellm {

// I8MM's int8 matrix multiply: smmla (a 2x8 by 8x2 block, 32 multiply-adds), eight
// independent accumulators.
uint64_t int8_peak_i8mm(uint64_t iters, const int8_t* buf, int64_t* lanes_sum) {
    const int8x16_t a = vld1q_s8(buf), b = vld1q_s8(buf + 64);
    int32x4_t c0 = vdupq_n_s32(0), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0, c7 = c0;
    for (uint64_t i = 0; i < iters; ++i) {
        c0 = vmmlaq_s32(c0, a, b);
        c1 = vmmlaq_s32(c1, a, b);
        c2 = vmmlaq_s32(c2, a, b);
        c3 = vmmlaq_s32(c3, a, b);
        c4 = vmmlaq_s32(c4, a, b);
        c5 = vmmlaq_s32(c5, a, b);
        c6 = vmmlaq_s32(c6, a, b);
        c7 = vmmlaq_s32(c7, a, b);
        __asm__ volatile(""
                         : "+w"(c0), "+w"(c1), "+w"(c2), "+w"(c3), "+w"(c4), "+w"(c5), "+w"(c6),
                           "+w"(c7));
    }
    const int32x4_t s = vaddq_s32(vaddq_s32(vaddq_s32(c0, c1), vaddq_s32(c2, c3)),
                                  vaddq_s32(vaddq_s32(c4, c5), vaddq_s32(c6, c7)));
    *lanes_sum = (int64_t)vgetq_lane_s32(s, 0) + vgetq_lane_s32(s, 1) + vgetq_lane_s32(s, 2) +
                 vgetq_lane_s32(s, 3);
    return iters * 8 * 32;
}

}  // namespace edgellm
