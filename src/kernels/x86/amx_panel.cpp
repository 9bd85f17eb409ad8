// Panel GEMM with AMX tiles (kernels/panel.h), on the AVX-512 set's panels: 16 rows, four
// elements of each row in 64 bytes, unsigned weights (PanelKernel::unsigned_q).
//
// One group of a panel, G/4 steps x 16 rows x 4 bytes, is exactly the second operand of
// tdpbsud (G/4 rows of 64 bytes, unsigned bytes), and the first G bytes of 16 tokens'
// activation blocks, one row per token at the activation stride, are its first operand
// (signed bytes). One instruction then gives the int32 sums of the group for 16 tokens x
// 16 rows, the same integers vpdpbusd sums (the rows hold q + 128 for types without
// offsets; adding the block's -128 * sum(a) undoes it). The tiles sum over K = G, not 64:
// each group has its own scales, so its sums must come out alone. Those go through memory
// (1 KiB per group) to the AVX-512 epilogue, which applies the scales in the order of
// panel_gemm_ref, as avx512_panel.cpp does, so the results are the same bits.
//
// Per call, groups are taken a chunk at a time (one run of a q8_K block, or 8): first every
// group's tile product, two sets of tiles alternating so one product runs while the other
// is stored, then the scales for each token over the chunk.
//
// The tile configuration is per thread and stays loaded between calls (loading it costs
// about as much as a group); a thread reloads it only when the group size or the number of
// tokens of its tile changes.
// As in avx512.cpp, nothing here calls an inline function of a shared header (an
// out-of-line copy built with these flags could serve other CPUs); panel_group_bytes is
// only evaluated at compile time.
#include "kernels/x86/immintrin_quiet.h"

#include <cstring>

#include "kernels/count_dispatch.h"
#include "kernels/panel.h"
#include "kernels/x86/x86_kernels.h"

namespace edgellm {

namespace {

constexpr int kRows = 16;    // weight rows per panel: 16 int32 columns of a result tile
constexpr int kTokens = 16;  // tokens per tile: the rows of the activation and result tiles
constexpr int kMaxChunk = 16;

struct alignas(64) TileConfig {
    uint8_t palette;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};
static_assert(sizeof(TileConfig) == 64, "ldtilecfg reads 64 bytes");

// ldtilecfg as an asm reading the whole struct: GCC 12's _tile_loadconfig does not tell
// the optimizer it reads the memory, and the stores of rows and colsb were dropped.
inline void load_config(const TileConfig& c) {
    asm volatile("ldtilecfg %0" : : "m"(c));
}

// The configuration this thread has loaded (0: none, or another one's).
thread_local int loaded_G = 0, loaded_m = 0;

// Tiles 0 and 1: weights (G/4 rows of 64 bytes); 2 and 3: activations (m rows of G
// bytes); 4 and 5: results (m rows of 16 int32).
void configure(int G, int m) {
    if (loaded_G == G && loaded_m == m) return;
    TileConfig c;
    std::memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t : {0, 1}) {
        c.rows[t] = (uint8_t)(G / 4);
        c.colsb[t] = 64;
    }
    for (int t : {2, 3}) {
        c.rows[t] = (uint8_t)m;
        c.colsb[t] = (uint16_t)G;
    }
    for (int t : {4, 5}) {
        c.rows[t] = (uint8_t)m;
        c.colsb[t] = 64;
    }
    load_config(c);
    loaded_G = G;
    loaded_m = m;
}

template <int G>
inline const void* act_operand(const PanelActBlock* act, int64_t g) {
    const int64_t blk = G == 32 ? g : g / 2;
    const int half = G == 32 ? 0 : (int)(g & 1);
    return (const void*)(act[blk].qs + 16 * half);
}

// The int32 sums of groups g0 .. g0 + ng - 1 for the tile's tokens, to sums[i].
template <int G, bool kMin>
void tile_products(const uint8_t* panel, int64_t g0, int ng, const PanelActBlock* act,
                   size_t act_row_bytes, int32_t (*sums)[kTokens][kRows]) {
    constexpr size_t kGroupBytes = panel_group_bytes(kRows, G, kMin);
    int i = 0;
    for (; i + 2 <= ng; i += 2) {
        const int64_t g = g0 + i;
        _tile_loadd(0, panel + kGroupBytes * (size_t)g, 64);
        _tile_loadd(2, act_operand<G>(act, g), act_row_bytes);
        _tile_zero(4);
        _tile_loadd(1, panel + kGroupBytes * (size_t)(g + 1), 64);
        _tile_loadd(3, act_operand<G>(act, g + 1), act_row_bytes);
        _tile_zero(5);
        _tile_dpbsud(4, 2, 0);
        _tile_dpbsud(5, 3, 1);
        _tile_stored(4, sums[i], 64);
        _tile_stored(5, sums[i + 1], 64);
    }
    if (i < ng) {
        const int64_t g = g0 + i;
        _tile_loadd(0, panel + kGroupBytes * (size_t)g, 64);
        _tile_loadd(2, act_operand<G>(act, g), act_row_bytes);
        _tile_zero(4);
        _tile_dpbsud(4, 2, 0);
        _tile_stored(4, sums[i], 64);
    }
}

// m (<= 16) tokens over the whole panel.
template <int G, bool kMin>
void tile(const uint8_t* panel, int64_t n_groups, int run, const PanelActBlock* act,
          size_t act_stride, int m, float* y, size_t y_stride, __mmask16 rows) {
    constexpr size_t kQBytes = (size_t)G * kRows;
    constexpr size_t kGroupBytes = panel_group_bytes(kRows, G, kMin);
    alignas(64) int32_t sums[kMaxChunk][kTokens][kRows];
    __m512 acc[kTokens];
    for (int c = 0; c < m; ++c) acc[c] = _mm512_setzero_ps();
    const int chunk = run > 1 ? run : 8;
    const size_t act_row_bytes = act_stride * sizeof(PanelActBlock);
    for (int64_t g0 = 0; g0 < n_groups; g0 += chunk) {
        const int ng = (int)(n_groups - g0 < chunk ? n_groups - g0 : chunk);
        tile_products<G, kMin>(panel, g0, ng, act, act_row_bytes, sums);
        for (int c = 0; c < m; ++c) {
            const PanelActBlock* a = act + act_stride * (size_t)c;
            __m512 ac = acc[c];
            // group g's sum for this token, as vpdpbusd would leave it
            auto isum = [&](int i) {
                const __m512i s = _mm512_load_si512((const void*)sums[i][c]);
                if constexpr (kMin) return s;
                const int64_t g = g0 + i;
                const int32_t ns = G == 32 ? a[g].nsum32 : a[g / 2].nsum16[g & 1];
                return _mm512_add_epi32(s, _mm512_set1_epi32(ns));
            };
            auto add_offset = [&](int i) {
                if constexpr (kMin) {
                    const int64_t g = g0 + i;
                    const uint8_t* pg = panel + kGroupBytes * (size_t)g;
                    const float ds = G == 32 ? a[g].dsum32 : a[g / 2].dsum16[g & 1];
                    ac = _mm512_fmadd_ps(_mm512_loadu_ps(pg + kQBytes + sizeof(float) * kRows),
                                         _mm512_set1_ps(ds), ac);
                }
            };
            if (run > 1) {
                __m512 t = _mm512_setzero_ps();
                for (int i = 0; i < ng; ++i) {
                    const uint8_t* pg = panel + kGroupBytes * (size_t)(g0 + i);
                    t = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum(i)), _mm512_loadu_ps(pg + kQBytes),
                                        t);
                    add_offset(i);
                }
                const int64_t blk0 = G == 32 ? g0 : g0 / 2;
                ac = _mm512_fmadd_ps(t, _mm512_set1_ps(a[blk0].d), ac);
            } else {
                for (int i = 0; i < ng; ++i) {
                    const int64_t g = g0 + i;
                    const uint8_t* pg = panel + kGroupBytes * (size_t)g;
                    const float d = G == 32 ? a[g].d : a[g / 2].d;
                    const __m512 sd = _mm512_mul_ps(_mm512_loadu_ps(pg + kQBytes), _mm512_set1_ps(d));
                    ac = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum(i)), sd, ac);
                    add_offset(i);
                }
            }
            acc[c] = ac;
        }
    }
    for (int c = 0; c < m; ++c) _mm512_mask_storeu_ps(y + y_stride * (size_t)c, rows, acc[c]);
}

void panel_gemm_amx(const uint8_t* panel, int64_t n_groups, int G, bool has_min, int run,
                    const PanelActBlock* act, size_t act_stride, int64_t n_cols, float* y,
                    size_t y_stride, int rows) {
    const __mmask16 mask = (__mmask16)((1u << rows) - 1u);
    with_panel_group(G, has_min, [&]<int kG, bool kMin>() {
        for (int64_t c = 0; c < n_cols; c += kTokens) {
            const int m = (int)(n_cols - c < kTokens ? n_cols - c : kTokens);
            configure(kG, m);
            tile<kG, kMin>(panel, n_groups, run, act + act_stride * (size_t)c, act_stride, m,
                           y + y_stride * (size_t)c, y_stride, mask);
        }
    });
}

}  // namespace

void fill_panel_amx(PanelKernel* panel) {
    panel->rows = kRows;
    panel->gemm = panel_gemm_amx;
    panel->isa = "amx";
    panel->unsigned_q = true;
    panel->runs = true;
    panel->cols = 2 * kTokens;
}

// The limit: tdpbsud on whole tiles (16 x 64 signed bytes times 16 x 64 unsigned), four
// result tiles in turn. A[m][k] = buf[k], B[r][c] = (uint8_t)buf[64 + c].
uint64_t int8_peak_amx(uint64_t iters, const int8_t* buf, int64_t* lanes_sum) {
    TileConfig c;
    std::memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 8; ++t) {
        c.rows[t] = 16;
        c.colsb[t] = 64;
    }
    load_config(c);
    alignas(64) int8_t a[16][64];
    alignas(64) uint8_t b[16][64];
    for (int r = 0; r < 16; ++r)
        for (int k = 0; k < 64; ++k) {
            a[r][k] = buf[k];
            b[r][k] = (uint8_t)buf[64 + k];
        }
    _tile_loadd(0, a, 64);
    _tile_loadd(1, b, 64);
    _tile_zero(4);
    _tile_zero(5);
    _tile_zero(6);
    _tile_zero(7);
    for (uint64_t i = 0; i < iters; ++i) {
        _tile_dpbsud(4, 0, 1);
        _tile_dpbsud(5, 0, 1);
        _tile_dpbsud(6, 0, 1);
        _tile_dpbsud(7, 0, 1);
    }
    alignas(64) int32_t out[4][16][16];
    _tile_stored(4, out[0], 64);
    _tile_stored(5, out[1], 64);
    _tile_stored(6, out[2], 64);
    _tile_stored(7, out[3], 64);
    _tile_release();
    loaded_G = loaded_m = 0;
    int64_t sum = 0;
    for (auto& t : out)
        for (auto& r : t)
            for (int32_t v : r) sum += v;
    *lanes_sum = sum;
    return iters * 4 * 16 * 16 * 64;
}

}  // namespace edgellm
