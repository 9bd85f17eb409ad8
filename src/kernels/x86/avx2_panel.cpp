// Panel GEMM with AVX2 (kernels/panel.h): panels of 8 rows, one ymm holds four elements
// of each row. Without VNNI the int8 products go through vpmaddubsw, which takes one
// unsigned operand: the weights' magnitudes |w| (0..128, -128 included) times the
// activations with the weights' signs moved onto them (vpsignb), so each product is
// w * a; pairs sum into int16 without saturation (128 * 127 * 2 < 2^15) and vpmaddwd
// adds the pairs into the int32 lanes. This needs activations in -127..127, which every
// quantizer here produces (PanelActBlock). Tiles of 4 tokens share each weight register.
#include <immintrin.h>

#include <cstring>

#include "kernels/count_dispatch.h"
#include "kernels/panel.h"
#include "kernels/x86/x86_kernels.h"

namespace edgellm {

namespace {

constexpr int kRows = 8;

inline __m256i bcast4(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

template <int G, bool kMin, int kCols>
void tile(const uint8_t* panel, int64_t n_groups, const PanelActBlock* act, size_t act_stride,
          float* y, size_t y_stride, int rows) {
    constexpr size_t kQBytes = (size_t)G * kRows;
    constexpr size_t kGroupBytes = kQBytes + sizeof(float) * kRows * (kMin ? 2 : 1);
    const __m256i ones = _mm256_set1_epi16(1);
    const PanelActBlock* a[kCols];
    for (int c = 0; c < kCols; ++c) a[c] = act + act_stride * (size_t)c;
    __m256 acc[kCols];
    for (int c = 0; c < kCols; ++c) acc[c] = _mm256_setzero_ps();
    for (int64_t g = 0; g < n_groups; ++g) {
        const uint8_t* pg = panel + kGroupBytes * (size_t)g;
        const int64_t blk = G == 32 ? g : g / 2;
        const int half = G == 32 ? 0 : (int)(g & 1);
        __m256i isum[kCols];
        for (int c = 0; c < kCols; ++c) isum[c] = _mm256_setzero_si256();
        for (int s = 0; s < G / 4; ++s) {
            const __m256i w = _mm256_loadu_si256((const __m256i*)(pg + 32 * s));
            const __m256i mag = _mm256_abs_epi8(w);
            for (int c = 0; c < kCols; ++c) {
                const __m256i av = bcast4(a[c][blk].qs + 16 * half + 4 * s);
                const __m256i p16 = _mm256_maddubs_epi16(mag, _mm256_sign_epi8(av, w));
                isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(p16, ones));
            }
        }
        const __m256 scale = _mm256_loadu_ps((const float*)(pg + kQBytes));
        for (int c = 0; c < kCols; ++c) {
            const __m256 sd = _mm256_mul_ps(scale, _mm256_set1_ps(a[c][blk].d));
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), sd, acc[c]);
        }
        if constexpr (kMin) {
            const __m256 off = _mm256_loadu_ps((const float*)(pg + kQBytes) + kRows);
            for (int c = 0; c < kCols; ++c) {
                const float ds = G == 32 ? a[c][blk].dsum32 : a[c][blk].dsum16[half];
                acc[c] = _mm256_fmadd_ps(off, _mm256_set1_ps(ds), acc[c]);
            }
        }
    }
    for (int c = 0; c < kCols; ++c) {
        float* yc = y + y_stride * (size_t)c;
        if (rows == kRows) {
            _mm256_storeu_ps(yc, acc[c]);
        } else {
            alignas(32) float tmp[kRows];
            _mm256_store_ps(tmp, acc[c]);
            std::memcpy(yc, tmp, sizeof(float) * (size_t)rows);
        }
    }
}

constexpr int kTile = 4;

void panel_gemm_avx2(const uint8_t* panel, int64_t n_groups, int G, bool has_min, int /*run: 1*/,
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

void fill_panel_avx2(PanelKernel* panel) {
    panel->rows = kRows;
    panel->gemm = panel_gemm_avx2;
    panel->isa = "avx2";
}

}  // namespace edgellm
