// The "dotprod" kernel set: ARMv8.2 DotProd (FEAT_DotProd; Cortex-A55, A76 and later,
// Raspberry Pi 5, Apple M1, Graviton 2). Compiled with -march=armv8.2-a+dotprod. It
// replaces the integer dot products of the "neon" set, which it builds on, with the
// same kernels (neon_int_dots.h) over sdot: each int32 lane takes four int8 products per
// instruction instead of the two smull + sadalp steps.
#include <arm_neon.h>

#include <cstring>

#include "kernels/arm/arm_kernels.h"
#include "kernels/arm/neon_int_dots.h"
#include "kernels/count_dispatch.h"
#include "kernels/panel.h"

#if !defined(__ARM_FEATURE_DOTPROD)
#error "neon_dotprod.cpp needs -march=armv8.2-a+dotprod"
#endif

namespace edgellm {

namespace neon {
namespace {

// Lane k gets a[4k..4k+3] . b[4k..4k+3], exact for every int8 pair.
struct DotSdot {
    static int32x4_t dot(int32x4_t acc, int8x16_t a, int8x16_t b) { return vdotq_s32(acc, a, b); }
};

// ---------------------------------------------------------------------------------------
// Panel GEMM (kernels/panel.h) with sdot: panels of 8 rows, two registers per step (rows
// 0..3 and 4..7, four bytes each). Weights and activations are both signed, so sdot's
// int32 lanes hold sum(w * a) directly; vdotq_laneq_s32 takes the four activation bytes
// of a step from one lane of a 16-byte load (four steps per load). Tiles of kCols tokens
// share each pair of weight registers. The float steps are the reference's:
// acc = fma(float(isum), scale * d, acc), then acc = fma(offset, dsum, acc).

constexpr int kPanelRows = 8;

template <int G, bool kMin, int kCols>
void panel_tile(const uint8_t* panel, int64_t n_groups, const PanelActBlock* act, size_t act_stride,
                float* y, size_t y_stride, int rows) {
    constexpr size_t kQBytes = (size_t)G * kPanelRows;
    constexpr size_t kGroupBytes = kQBytes + sizeof(float) * kPanelRows * (kMin ? 2 : 1);
    const PanelActBlock* a[kCols];
    for (int c = 0; c < kCols; ++c) a[c] = act + act_stride * (size_t)c;
    float32x4_t acc[kCols][2];
    for (int c = 0; c < kCols; ++c) acc[c][0] = acc[c][1] = vdupq_n_f32(0.0f);
    for (int64_t g = 0; g < n_groups; ++g) {
        const uint8_t* pg = panel + kGroupBytes * (size_t)g;
        const int64_t blk = G == 32 ? g : g / 2;
        const int half = G == 32 ? 0 : (int)(g & 1);
        int32x4_t isum[kCols][2];
        for (int c = 0; c < kCols; ++c) isum[c][0] = isum[c][1] = vdupq_n_s32(0);
        for (int s4 = 0; s4 < G / 16; ++s4) {  // four steps of four elements
            int8x16_t w[4][2];
            for (int k = 0; k < 4; ++k) {
                w[k][0] = vld1q_s8((const int8_t*)pg + 32 * (4 * s4 + k));
                w[k][1] = vld1q_s8((const int8_t*)pg + 32 * (4 * s4 + k) + 16);
            }
            for (int c = 0; c < kCols; ++c) {
                const int8x16_t av = vld1q_s8(a[c][blk].qs + 16 * half + 16 * s4);
                for (int r = 0; r < 2; ++r) {
                    isum[c][r] = vdotq_laneq_s32(isum[c][r], w[0][r], av, 0);
                    isum[c][r] = vdotq_laneq_s32(isum[c][r], w[1][r], av, 1);
                    isum[c][r] = vdotq_laneq_s32(isum[c][r], w[2][r], av, 2);
                    isum[c][r] = vdotq_laneq_s32(isum[c][r], w[3][r], av, 3);
                }
            }
        }
        const float* fs = (const float*)(pg + kQBytes);
        const float32x4_t sc[2] = {vld1q_f32(fs), vld1q_f32(fs + 4)};
        for (int c = 0; c < kCols; ++c)
            for (int r = 0; r < 2; ++r)
                acc[c][r] = vfmaq_f32(acc[c][r], vcvtq_f32_s32(isum[c][r]),
                                      vmulq_n_f32(sc[r], a[c][blk].d));
        if constexpr (kMin) {
            const float32x4_t off[2] = {vld1q_f32(fs + kPanelRows), vld1q_f32(fs + kPanelRows + 4)};
            for (int c = 0; c < kCols; ++c) {
                const float ds = G == 32 ? a[c][blk].dsum32 : a[c][blk].dsum16[half];
                for (int r = 0; r < 2; ++r)
                    acc[c][r] = vfmaq_f32(acc[c][r], off[r], vdupq_n_f32(ds));
            }
        }
    }
    for (int c = 0; c < kCols; ++c) {
        float* yc = y + y_stride * (size_t)c;
        if (rows == kPanelRows) {
            vst1q_f32(yc, acc[c][0]);
            vst1q_f32(yc + 4, acc[c][1]);
        } else {
            float tmp[kPanelRows];
            vst1q_f32(tmp, acc[c][0]);
            vst1q_f32(tmp + 4, acc[c][1]);
            std::memcpy(yc, tmp, sizeof(float) * (size_t)rows);
        }
    }
}

constexpr int kPanelTile = 4;

void panel_gemm_dotprod(const uint8_t* panel, int64_t n_groups, int G, bool has_min, int /*run: 1*/,
                        const PanelActBlock* act, size_t act_stride, int64_t n_cols, float* y,
                        size_t y_stride, int rows) {
    with_panel_group(G, has_min, [&]<int kG, bool kMin>() {
        over_tiles<kPanelTile>(n_cols, [&]<int kN>(int64_t c) {
            panel_tile<kG, kMin, kN>(panel, n_groups, act + act_stride * (size_t)c, act_stride,
                                     y + y_stride * (size_t)c, y_stride, rows);
        });
    });
}

}  // namespace
}  // namespace neon

void fill_neon_dotprod(TypeKernels* table) {
    neon::fill_int_dots(table, neon::DotSdot{});
    table[(uint32_t)TensorType::Q8_0].dot_rows_q8 = neon::dot_rows_q8_keys4<neon::DotSdot>;
    table[(uint32_t)TensorType::Q8_0].mad_rows_q8 = neon::mad_rows_q8_rows4<neon::DotSdot>;
    fill_x16_dotprod(table);
}

void fill_panel_dotprod(PanelKernel* panel) {
    panel->rows = neon::kPanelRows;
    panel->gemm = neon::panel_gemm_dotprod;
    panel->isa = "dotprod";
}

}  // namespace edgellm

namespace edgellm {

// DotProd's int8 dot product: sdot (16 multiply-adds), eight independent accumulators.
uint64_t int8_peak_dotprod(uint64_t iters, const int8_t* buf, int64_t* lanes_sum) {
    const int8x16_t a = vld1q_s8(buf), b = vld1q_s8(buf + 64);
    int32x4_t c0 = vdupq_n_s32(0), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0, c7 = c0;
    for (uint64_t i = 0; i < iters; ++i) {
        c0 = vdotq_s32(c0, a, b);
        c1 = vdotq_s32(c1, a, b);
        c2 = vdotq_s32(c2, a, b);
        c3 = vdotq_s32(c3, a, b);
        c4 = vdotq_s32(c4, a, b);
        c5 = vdotq_s32(c5, a, b);
        c6 = vdotq_s32(c6, a, b);
        c7 = vdotq_s32(c7, a, b);
        __asm__ volatile(""
                         : "+w"(c0), "+w"(c1), "+w"(c2), "+w"(c3), "+w"(c4), "+w"(c5), "+w"(c6),
                           "+w"(c7));
    }
    const int32x4_t s = vaddq_s32(vaddq_s32(vaddq_s32(c0, c1), vaddq_s32(c2, c3)),
                                  vaddq_s32(vaddq_s32(c4, c5), vaddq_s32(c6, c7)));
    *lanes_sum = (int64_t)vgetq_lane_s32(s, 0) + vgetq_lane_s32(s, 1) + vgetq_lane_s32(s, 2) +
                 vgetq_lane_s32(s, 3);
    return iters * 8 * 16;
}

}  // namespace edgellm
