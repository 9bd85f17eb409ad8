// Panel GEMM with AVX-512 VNNI (kernels/panel.h): panels of 16 rows, one zmm holds four
// elements of each row. The panels hold unsigned weights (PanelKernel::unsigned_q), so
// vpdpbusd multiplies them as they are with the signed activation bytes, broadcast four
// at a time from memory: for types with offsets q itself (0..31), and the int32
// accumulator starts at zero; for the others q + 128, and it starts at -128 * sum(a) (from
// the activation block), ending at exactly sum(q * a). Tiles of kCols tokens share each
// weight register. With q8_K activations (one scale per 256) the groups of a run meet the
// activation scale once per run, not once per group (panel.h, run > 1).
// (As in avx512.cpp, nothing here calls an inline function of a shared header.)
#include "kernels/x86/immintrin_quiet.h"

#include "kernels/count_dispatch.h"
#include "kernels/panel.h"
#include "kernels/x86/x86_kernels.h"

namespace edgellm {

namespace {

constexpr int kRows = 16;

// acc + vpdpbusd(w, the four bytes at p broadcast), the broadcast embedded in the
// instruction's memory operand (GCC keeps a separate vpbroadcastd otherwise: one more
// instruction per multiply-add, measured 20 % of the tile's time here).
inline __m512i dpbusd_bcast(__m512i acc, __m512i w, const int8_t* p) {
    asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t*)p));
    return acc;
}

// The int32 sums of group g for kCols columns.
template <int G, bool kMin, int kCols>
inline void group_sums(const uint8_t* pg, const PanelActBlock* const* a, int64_t blk, int half,
                       __m512i* isum) {
    for (int c = 0; c < kCols; ++c)
        isum[c] = kMin ? _mm512_setzero_si512()
                       : _mm512_set1_epi32(G == 32 ? a[c][blk].nsum32 : a[c][blk].nsum16[half]);
    for (int s = 0; s < G / 4; ++s) {
        const __m512i w = _mm512_loadu_si512(pg + 64 * s);
        for (int c = 0; c < kCols; ++c)
            isum[c] = dpbusd_bcast(isum[c], w, a[c][blk].qs + 16 * half + 4 * s);
    }
}

template <int G, bool kMin, int kCols, bool kRuns>
void tile(const uint8_t* panel, int64_t n_groups, int run, const PanelActBlock* act,
          size_t act_stride, float* y, size_t y_stride, __mmask16 rows) {
    constexpr size_t kQBytes = (size_t)G * kRows;
    constexpr size_t kGroupBytes = kQBytes + sizeof(float) * kRows * (kMin ? 2 : 1);
    const PanelActBlock* a[kCols];
    for (int c = 0; c < kCols; ++c) a[c] = act + act_stride * (size_t)c;
    __m512 acc[kCols];
    for (int c = 0; c < kCols; ++c) acc[c] = _mm512_setzero_ps();
    auto add_offsets = [&](const uint8_t* pg, int64_t blk, int half) {
        if constexpr (kMin) {
            const __m512 off = _mm512_loadu_ps(pg + kQBytes + sizeof(float) * kRows);
            for (int c = 0; c < kCols; ++c) {
                const float ds = G == 32 ? a[c][blk].dsum32 : a[c][blk].dsum16[half];
                acc[c] = _mm512_fmadd_ps(off, _mm512_set1_ps(ds), acc[c]);
            }
        }
    };
    // Group g's integer sums and row scales to `use`, then its offsets into acc.
    auto each_group = [&](int64_t g, auto&& use) {
        const uint8_t* pg = panel + kGroupBytes * (size_t)g;
        const int64_t blk = G == 32 ? g : g / 2;
        const int half = G == 32 ? 0 : (int)(g & 1);
        __m512i isum[kCols];
        group_sums<G, kMin, kCols>(pg, a, blk, half, isum);
        use(blk, isum, _mm512_loadu_ps(pg + kQBytes));
        add_offsets(pg, blk, half);
    };
    if constexpr (kRuns) {
        for (int64_t g0 = 0; g0 < n_groups; g0 += run) {
            __m512 t[kCols];
            for (int c = 0; c < kCols; ++c) t[c] = _mm512_setzero_ps();
            for (int64_t g = g0; g < g0 + run; ++g)
                each_group(g, [&](int64_t, const __m512i* isum, __m512 scale) {
                    for (int c = 0; c < kCols; ++c)
                        t[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[c]), scale, t[c]);
                });
            const int64_t blk0 = G == 32 ? g0 : g0 / 2;
            for (int c = 0; c < kCols; ++c)
                acc[c] = _mm512_fmadd_ps(t[c], _mm512_set1_ps(a[c][blk0].d), acc[c]);
        }
    } else {
        for (int64_t g = 0; g < n_groups; ++g)
            each_group(g, [&](int64_t blk, const __m512i* isum, __m512 scale) {
                for (int c = 0; c < kCols; ++c) {
                    const __m512 sd = _mm512_mul_ps(scale, _mm512_set1_ps(a[c][blk].d));
                    acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[c]), sd, acc[c]);
                }
            });
    }
    for (int c = 0; c < kCols; ++c) _mm512_mask_storeu_ps(y + y_stride * (size_t)c, rows, acc[c]);
}

constexpr int kTile = 8;

void panel_gemm_avx512(const uint8_t* panel, int64_t n_groups, int G, bool has_min, int run,
                       const PanelActBlock* act, size_t act_stride, int64_t n_cols, float* y,
                       size_t y_stride, int rows) {
    const __mmask16 m = (__mmask16)((1u << rows) - 1u);
    with_panel_group(G, has_min, [&]<int kG, bool kMin>() {
        over_tiles<kTile>(n_cols, [&]<int kN>(int64_t c) {
            if (run > 1)
                tile<kG, kMin, kN, true>(panel, n_groups, run, act + act_stride * (size_t)c,
                                         act_stride, y + y_stride * (size_t)c, y_stride, m);
            else
                tile<kG, kMin, kN, false>(panel, n_groups, 1, act + act_stride * (size_t)c,
                                          act_stride, y + y_stride * (size_t)c, y_stride, m);
        });
    });
}

}  // namespace

void fill_panel_avx512(PanelKernel* panel) {
    panel->rows = kRows;
    panel->gemm = panel_gemm_avx512;
    panel->isa = "avx512";
    panel->unsigned_q = true;
    panel->runs = true;
}

}  // namespace edgellm
