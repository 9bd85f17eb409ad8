// Panel GEMM with AVX-512 VNNI (kernels/panel.h): panels of 16 rows, one zmm holds four
// elements of each row. Weights are made unsigned by flipping their sign bit (w + 128),
// so vpdpbusd multiplies them with the signed activation bytes, broadcast four at a time
// from memory; the group's int32 accumulator starts at -128 * sum(activations) (from the
// activation block) and ends at exactly sum(w * a). Tiles of kCols tokens share each
// weight register.
// (GCC 12 false positives in the AVX-512 header, as in avx512.cpp; and as there, nothing
// here calls an inline function of a shared header.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include "kernels/count_dispatch.h"
#include "kernels/panel.h"
#include "kernels/x86/x86_kernels.h"

namespace edgellm {

namespace {

constexpr int kRows = 16;

inline __m512i bcast4(const int8_t* p) {
    int32_t v;
    __builtin_memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

template <int G, bool kMin, int kCols>
void tile(const uint8_t* panel, int64_t n_groups, const PanelActBlock* act, size_t act_stride,
          float* y, size_t y_stride, __mmask16 rows) {
    constexpr size_t kQBytes = (size_t)G * kRows;
    constexpr size_t kGroupBytes = kQBytes + sizeof(float) * kRows * (kMin ? 2 : 1);
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    const PanelActBlock* a[kCols];
    for (int c = 0; c < kCols; ++c) a[c] = act + act_stride * (size_t)c;
    __m512 acc[kCols];
    for (int c = 0; c < kCols; ++c) acc[c] = _mm512_setzero_ps();
    for (int64_t g = 0; g < n_groups; ++g) {
        const uint8_t* pg = panel + kGroupBytes * (size_t)g;
        const int64_t blk = G == 32 ? g : g / 2;
        const int half = G == 32 ? 0 : (int)(g & 1);
        __m512i isum[kCols];
        for (int c = 0; c < kCols; ++c)
            isum[c] = _mm512_set1_epi32(G == 32 ? a[c][blk].nsum32 : a[c][blk].nsum16[half]);
        for (int s = 0; s < G / 4; ++s) {
            const __m512i w = _mm512_xor_si512(_mm512_loadu_si512(pg + 64 * s), flip);
            for (int c = 0; c < kCols; ++c)
                isum[c] = _mm512_dpbusd_epi32(isum[c], w, bcast4(a[c][blk].qs + 16 * half + 4 * s));
        }
        const __m512 scale = _mm512_loadu_ps(pg + kQBytes);
        for (int c = 0; c < kCols; ++c) {
            const __m512 sd = _mm512_mul_ps(scale, _mm512_set1_ps(a[c][blk].d));
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[c]), sd, acc[c]);
        }
        if constexpr (kMin) {
            const __m512 off = _mm512_loadu_ps(pg + kQBytes + sizeof(float) * kRows);
            for (int c = 0; c < kCols; ++c) {
                const float ds = G == 32 ? a[c][blk].dsum32 : a[c][blk].dsum16[half];
                acc[c] = _mm512_fmadd_ps(off, _mm512_set1_ps(ds), acc[c]);
            }
        }
    }
    for (int c = 0; c < kCols; ++c) _mm512_mask_storeu_ps(y + y_stride * (size_t)c, rows, acc[c]);
}

constexpr int kTile = 8;

void panel_gemm_avx512(const uint8_t* panel, int64_t n_groups, int G, bool has_min,
                       const PanelActBlock* act, size_t act_stride, int64_t n_cols, float* y,
                       size_t y_stride, int rows) {
    const __mmask16 m = (__mmask16)((1u << rows) - 1u);
    with_panel_group(G, has_min, [&]<int kG, bool kMin>() {
        over_tiles<kTile>(n_cols, [&]<int kN>(int64_t c) {
            tile<kG, kMin, kN>(panel, n_groups, act + act_stride * (size_t)c, act_stride,
                               y + y_stride * (size_t)c, y_stride, m);
        });
    });
}

}  // namespace

void fill_panel_avx512(PanelKernel* panel) {
    panel->rows = kRows;
    panel->gemm = panel_gemm_avx512;
    panel->isa = "avx512";
}

}  // namespace edgellm
