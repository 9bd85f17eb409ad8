// Panel GEMM with AVX2 (kernels/panel.h): panels of 8 rows, one ymm holds four elements
// of each row. Without VNNI the int8 products go through vpmaddubsw, which takes one
// unsigned operand. Signed panels (8-bit codes: q8_0): the weights' magnitudes |w|
// (0..128, -128 included) times the activations with the weights' signs moved onto them
// (vpsignb), so each product is w * a; pairs sum into int16 without saturation (128 * 127 *
// 2 < 2^15) and vpmaddwd adds the pairs into the int32 lanes, every step. Small codes
// (gemm_small: u = q + bias below 2^bits, bits <= 6): vpmaddubsw takes u as it is, the
// int16 pairs of up to 8 steps add up without leaving int16 (kChain below), and one
// vpmaddwd per chain widens them; the int32 sum starts at -bias * sum(a), an exact shift
// of the block's -128 * sum(a). About half the instructions per step of the signed form.
// Both need activations in -127..127, which every quantizer here produces
// (PanelActBlock). Tiles of 4 tokens share each weight register.
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

// Steps of vpmaddubsw products of `bits`-bit codes that add up in int16: k * 2 * (2^bits - 1)
// * 127 < 2^15 (6 bits: 2, 5 bits: 4, fewer: 8, a whole group of 32).
constexpr int chain_for_bits(int bits) {
    return bits >= 6 ? 2 : bits == 5 ? 4 : 8;
}

// kChain 0: a signed panel. Else a small-code panel, kChain steps per int16 chain, and
// `shift` = 8 - bits: -bias * sum(a) = nsum >> shift (nsum = -128 * sum(a)).
template <int G, bool kMin, int kCols, int kChain>
void tile(const uint8_t* panel, int64_t n_groups, const PanelActBlock* act, size_t act_stride,
          float* y, size_t y_stride, int rows, int shift) {
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
        if constexpr (kChain == 0) {
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
        } else {
            constexpr int kSteps = G / 4;
            constexpr int kK = kChain < kSteps ? kChain : kSteps;
            for (int c = 0; c < kCols; ++c) {
                if constexpr (kMin) {
                    isum[c] = _mm256_setzero_si256();
                } else {
                    const int32_t nsum = G == 32 ? a[c][blk].nsum32 : a[c][blk].nsum16[half];
                    isum[c] = _mm256_set1_epi32(nsum >> shift);
                }
            }
            for (int s0 = 0; s0 < kSteps; s0 += kK) {
                __m256i p16[kCols];
                for (int s = s0; s < s0 + kK; ++s) {
                    const __m256i u = _mm256_loadu_si256((const __m256i*)(pg + 32 * s));
                    for (int c = 0; c < kCols; ++c) {
                        const __m256i m =
                            _mm256_maddubs_epi16(u, bcast4(a[c][blk].qs + 16 * half + 4 * s));
                        p16[c] = s == s0 ? m : _mm256_add_epi16(p16[c], m);
                    }
                }
                for (int c = 0; c < kCols; ++c)
                    isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(p16[c], ones));
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

// kChain 0 with bits 8: the signed panel (shift 0, unused).
template <int kChain>
void gemm_tiles(int bits, const uint8_t* panel, int64_t n_groups, int G, bool has_min,
                const PanelActBlock* act, size_t act_stride, int64_t n_cols, float* y,
                size_t y_stride, int rows) {
    with_panel_group(G, has_min, [&]<int kG, bool kMin>() {
        over_tiles<kTile>(n_cols, [&]<int kN>(int64_t c) {
            tile<kG, kMin, kN, kChain>(panel, n_groups, act + act_stride * (size_t)c,
                                       act_stride, y + y_stride * (size_t)c, y_stride, rows,
                                       8 - bits);
        });
    });
}

void panel_gemm_avx2(const uint8_t* panel, int64_t n_groups, int G, bool has_min, int /*run: 1*/,
                     const PanelActBlock* act, size_t act_stride, int64_t n_cols, float* y,
                     size_t y_stride, int rows) {
    gemm_tiles<0>(8, panel, n_groups, G, has_min, act, act_stride, n_cols, y, y_stride, rows);
}

void panel_gemm_small_avx2(int bits, const uint8_t* panel, int64_t n_groups, int G,
                           bool has_min, int /*run: 1*/, const PanelActBlock* act,
                           size_t act_stride, int64_t n_cols, float* y, size_t y_stride,
                           int rows) {
    switch (chain_for_bits(bits)) {
        case 2:
            gemm_tiles<2>(bits, panel, n_groups, G, has_min, act, act_stride, n_cols, y, y_stride,
                          rows);
            break;
        case 4:
            gemm_tiles<4>(bits, panel, n_groups, G, has_min, act, act_stride, n_cols, y, y_stride,
                          rows);
            break;
        default:
            gemm_tiles<8>(bits, panel, n_groups, G, has_min, act, act_stride, n_cols, y, y_stride,
                          rows);
    }
}

}  // namespace

void fill_panel_avx2(PanelKernel* panel) {
    panel->rows = kRows;
    panel->gemm = panel_gemm_avx2;
    panel->gemm_small = panel_gemm_small_avx2;
    panel->isa = "avx2";
}

}  // namespace edgellm
