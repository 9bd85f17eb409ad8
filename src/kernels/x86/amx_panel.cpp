// Panel GEMM with AMX tiles (kernels/panel.h), on panels of 16 rows with four elements
// of each row in 64 bytes (as the AVX-512 set's) but signed weights (tdpbssd multiplies
// signed by signed, so no correction for an offset of 128 is needed).
//
// One group of a panel, G/4 steps x 16 rows x 4 bytes, is exactly the second operand of
// tdpbssd (G/4 rows of 64 bytes), and the group's bytes of 16 tokens, one row per token,
// are the first: the activations arrive as tiles of 16 tokens (PanelActTile, built once
// per batch by the matmul), 16 rows of 32 bytes, so a group is 16 contiguous rows (G = 16:
// half of each, at a stride of 32). One instruction gives the int32 sums of the group for
// 16 tokens x 16 rows, the integers panel_gemm_ref sums. The tiles sum over K = G, not 64:
// each group has its own scales, so its sums must come out alone. They go through memory
// (1 KiB per group) to an AVX-512 epilogue, which applies the scales in the order of
// panel_gemm_ref, so the results are the same bits.
//
// The groups go two at a time, in two sets of result tiles: while the tile unit computes
// the next two groups, the epilogue applies the scales of the two before, and the 16
// tokens' sums stay in 16 registers over the whole panel. Tokens past the batch are zero
// in the tiles; their rows are computed and not stored.
//
// The tile configuration is per thread and stays loaded between calls (loading it costs
// about as much as a group); a thread reloads it only when the group size changes.
// As in avx512.cpp, nothing here calls an inline function of a shared header (an
// out-of-line copy built with these flags could serve other CPUs); panel_group_bytes is
// only evaluated at compile time.
#include "kernels/x86/immintrin_quiet.h"

#include <cstring>

#include "kernels/count_dispatch.h"
#include "kernels/panel.h"
#include "kernels/x86/avx512_transpose.h"
#include "kernels/x86/avx512_x16_blocks.h"
#include "kernels/x86/x86_kernels.h"

namespace edgellm {

namespace {

constexpr int kRows = 16;    // weight rows per panel: 16 int32 columns of a result tile
constexpr int kTokens = 16;  // tokens per tile: the rows of the activation and result tiles
static_assert(kTokens == kPanelTileTokens, "one activation tile per 16 tokens");

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

// The group size of the configuration this thread has loaded (0: none, or another one's).
thread_local int loaded_G = 0;

// Tiles 0 and 1: activations (16 rows of G bytes); 2 and 3: weights (G/4 rows of 64
// bytes); 4, 5 and 6, 7: the two sets of results (16 rows of 16 int32).
void configure(int G) {
    if (loaded_G == G) return;
    TileConfig c;
    std::memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t : {0, 1}) {
        c.rows[t] = (uint8_t)kTokens;
        c.colsb[t] = (uint16_t)G;
    }
    for (int t : {2, 3}) {
        c.rows[t] = (uint8_t)(G / 4);
        c.colsb[t] = 64;
    }
    for (int t : {4, 5, 6, 7}) {
        c.rows[t] = (uint8_t)kTokens;
        c.colsb[t] = 64;
    }
    load_config(c);
    loaded_G = G;
}

// Group g's activation bytes (16 rows at a stride of 32), scales and sums.
template <int G>
inline const int8_t* act_q(const PanelActTile* t, int64_t g) {
    return G == 32 ? t[g].qs[0] : t[g / 2].qs[0] + 16 * (g & 1);
}
template <int G>
inline const float* act_d(const PanelActTile* t, int64_t g) {
    return t[G == 32 ? g : g / 2].d;
}
template <int G>
inline const float* act_dsum(const PanelActTile* t, int64_t g) {
    return G == 32 ? t[g].dsum32 : t[g / 2].dsum16[g & 1];
}

using Sums = int32_t[2][kTokens][kRows];  // one set: two groups' results

// The products of groups g0 and (ng == 2) g0 + 1 into result set kSet, and the set's
// stores. The tile intrinsics paste their tile numbers into the instruction's text, so
// the numbers are literals (a macro per set), not template arguments.
#define EDGELLM_AMX_SET(kSet, c0, c1)                                                          \
    template <int G, bool kMin>                                                                \
    inline void products##kSet(const uint8_t* panel, const PanelActTile* tiles, int64_t g0,   \
                               int ng) {                                                       \
        constexpr size_t kGroupBytes = panel_group_bytes(kRows, G, kMin);                      \
        _tile_zero(c0);                                                                        \
        _tile_loadd(0, act_q<G>(tiles, g0), 32);                                               \
        _tile_loadd(2, panel + kGroupBytes * (size_t)g0, 64);                                  \
        _tile_dpbssd(c0, 0, 2);                                                                \
        if (ng > 1) {                                                                          \
            _tile_zero(c1);                                                                    \
            _tile_loadd(1, act_q<G>(tiles, g0 + 1), 32);                                       \
            _tile_loadd(3, panel + kGroupBytes * (size_t)(g0 + 1), 64);                        \
            _tile_dpbssd(c1, 1, 3);                                                            \
        }                                                                                      \
    }                                                                                          \
    inline void store##kSet(Sums& s, int ng) {                                                 \
        _tile_stored(c0, s[0], 64);                                                            \
        if (ng > 1) _tile_stored(c1, s[1], 64);                                                \
    }
EDGELLM_AMX_SET(0, 4, 5)
EDGELLM_AMX_SET(1, 6, 7)
#undef EDGELLM_AMX_SET

// 16 tokens (m of them stored) over the whole panel.
template <int G, bool kMin>
void tile(const uint8_t* panel, int64_t n_groups, int run, const PanelActTile* tiles, int m,
          float* y, size_t y_stride, __mmask16 rows) {
    constexpr size_t kQBytes = (size_t)G * kRows;
    constexpr size_t kGroupBytes = panel_group_bytes(kRows, G, kMin);
    alignas(64) Sums sums[2];
    alignas(64) float run_sums[kTokens][kRows];  // t of panel_gemm_ref (run > 1)
    __m512 acc[kTokens];
#pragma GCC unroll 16
    for (int c = 0; c < kTokens; ++c) acc[c] = _mm512_setzero_ps();
    const int64_t n_steps = (n_groups + 1) / 2;
    // The scales of step k's two groups, from its sums in memory.
    auto apply = [&](int64_t k) __attribute__((always_inline)) {
        const int64_t g0 = 2 * k;
        const int ng = n_groups - g0 > 1 ? 2 : 1;
        const Sums& s = sums[k & 1];
        const uint8_t* pg0 = panel + kGroupBytes * (size_t)g0;
        // (the second group's fields only when there is one: the panel may end here)
        const uint8_t* pg1 = ng > 1 ? pg0 + kGroupBytes : pg0;
        const __m512 sc0 = _mm512_loadu_ps(pg0 + kQBytes);
        const __m512 sc1 = _mm512_loadu_ps(pg1 + kQBytes);
        __m512 off0 = _mm512_setzero_ps(), off1 = _mm512_setzero_ps();
        if constexpr (kMin) {
            off0 = _mm512_loadu_ps(pg0 + kQBytes + sizeof(float) * kRows);
            off1 = _mm512_loadu_ps(pg1 + kQBytes + sizeof(float) * kRows);
        }
        const float* ds0 = act_dsum<G>(tiles, g0);
        const float* ds1 = act_dsum<G>(tiles, ng > 1 ? g0 + 1 : g0);
        if (run > 1) {
            // runs have an even number of groups: a step never crosses one
            const bool first = g0 % run == 0, last = (g0 + 2) % run == 0;
            const float* d = act_d<G>(tiles, g0 + 2 - run);
#pragma GCC unroll 16
            for (int c = 0; c < kTokens; ++c) {
                __m512 t = first ? _mm512_setzero_ps() : _mm512_load_ps(run_sums[c]);
                t = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(s[0][c])), sc0, t);
                if constexpr (kMin) acc[c] = _mm512_fmadd_ps(off0, _mm512_set1_ps(ds0[c]), acc[c]);
                t = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(s[1][c])), sc1, t);
                if constexpr (kMin) acc[c] = _mm512_fmadd_ps(off1, _mm512_set1_ps(ds1[c]), acc[c]);
                if (last)
                    acc[c] = _mm512_fmadd_ps(t, _mm512_set1_ps(d[c]), acc[c]);
                else
                    _mm512_store_ps(run_sums[c], t);
            }
        } else {
            const float* d0 = act_d<G>(tiles, g0);
            const float* d1 = act_d<G>(tiles, ng > 1 ? g0 + 1 : g0);
#pragma GCC unroll 16
            for (int c = 0; c < kTokens; ++c) {
                __m512 a = acc[c];
                a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(s[0][c])),
                                    _mm512_mul_ps(sc0, _mm512_set1_ps(d0[c])), a);
                if constexpr (kMin) a = _mm512_fmadd_ps(off0, _mm512_set1_ps(ds0[c]), a);
                if (ng > 1) {
                    a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(s[1][c])),
                                        _mm512_mul_ps(sc1, _mm512_set1_ps(d1[c])), a);
                    if constexpr (kMin) a = _mm512_fmadd_ps(off1, _mm512_set1_ps(ds1[c]), a);
                }
                acc[c] = a;
            }
        }
    };
    // Three stages in flight: the tile unit computes step k + 1 while step k's results
    // are stored and step k - 1's, stored one step earlier, are scaled. (Scaling the sums
    // just stored made every vector load wait for the tile store to reach the cache.)
    products0<G, kMin>(panel, tiles, 0, n_groups > 1 ? 2 : 1);
    for (int64_t k = 0; k < n_steps; ++k) {
        const int64_t g0 = 2 * k;
        const int ng = n_groups - g0 > 1 ? 2 : 1;
        const int64_t g1 = g0 + 2;
        // the next two groups go to the tile unit before this step's sums are stored
        if (g1 < n_groups) {
            const int ng1 = n_groups - g1 > 1 ? 2 : 1;
            if (k & 1)
                products0<G, kMin>(panel, tiles, g1, ng1);
            else
                products1<G, kMin>(panel, tiles, g1, ng1);
        }
        if (k & 1)
            store1(sums[1], ng);
        else
            store0(sums[0], ng);
        if (k > 0) apply(k - 1);
    }
    apply(n_steps - 1);
#pragma GCC unroll 16
    for (int c = 0; c < kTokens; ++c)
        if (c < m) _mm512_mask_storeu_ps(y + y_stride * (size_t)c, rows, acc[c]);
}

void panel_gemm_amx_tiled(const uint8_t* panel, int64_t n_groups, int G, bool has_min, int run,
                          const PanelActTile* tiles, size_t tile_stride, int64_t n_cols,
                          float* y, size_t y_stride, int rows) {
    const __mmask16 mask = (__mmask16)((1u << rows) - 1u);
    with_panel_group(G, has_min, [&]<int kG, bool kMin>() {
        configure(kG);
        for (int64_t c = 0; c < n_cols; c += kTokens) {
            const int m = (int)(n_cols - c < kTokens ? n_cols - c : kTokens);
            tile<kG, kMin>(panel, n_groups, run, tiles + tile_stride * (size_t)(c / kTokens), m,
                           y + y_stride * (size_t)c, y_stride, mask);
        }
    });
}

void panel_gemm_amx(const uint8_t* panel, int64_t n_groups, int G, bool has_min, int run,
                    const PanelActBlock* act, size_t act_stride, int64_t n_cols, float* y,
                    size_t y_stride, int rows) {
    panel_gemm_via_tiles(panel_gemm_amx_tiled, panel, n_groups, G, has_min, run, act, act_stride,
                         n_cols, y, y_stride, rows);
}

// ---- The bf16 GEMM (kernels/panel.h): tdpbf16ps over the whole row, 2 x 2 tiles ----

// 32 floats as 32 bf16, in order (vcvtne2ps2bf16: bf16_round's rounding).
inline __m512i bf16x32(const float* p) {
    return (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(p + 16), _mm512_loadu_ps(p));
}

void bf16_pack_amx(const float* rows, size_t stride, int64_t n, uint16_t* panel) {
    for (int64_t k = 0; k < n / kBf16Step; ++k) {
        __m512i v[16];
#pragma GCC unroll 16
        for (int r = 0; r < 16; ++r) v[r] = bf16x32(rows + stride * (size_t)r + (size_t)(k * kBf16Step));
        avx512::transpose16(v);  // v[p]: pair p of every row
        uint16_t* dst = panel + (size_t)k * kBf16StepElems;
#pragma GCC unroll 16
        for (int p = 0; p < 16; ++p) _mm512_storeu_si512(dst + 32 * p, v[p]);
    }
}

void bf16_act_amx(const float* x, size_t x_stride, int n_rows, int64_t n, uint16_t* tile) {
    for (int t = 0; t < 16; ++t)
        for (int64_t k = 0; k < n / kBf16Step; ++k)
            _mm512_storeu_si512(tile + (size_t)k * kBf16StepElems + 32 * (size_t)t,
                                t < n_rows ? bf16x32(x + x_stride * (size_t)t + (size_t)(k * kBf16Step))
                                           : _mm512_setzero_si512());
}

// Tiles 0, 1: the tokens' steps (16 x 32 bf16); 2, 3: the panels' (16 pairs x 16 rows);
// 4..7: the sums, tokens (16 j) x rows (16 i) in tile 4 + 2 j + i.
template <int NP, int NT>
void bf16_block(const uint16_t* panels, size_t ps, const uint16_t* tiles, size_t ts,
                int64_t n_steps, float* y, size_t y_stride) {
    _tile_zero(4);
    if (NP > 1) _tile_zero(5);
    if (NT > 1) _tile_zero(6);
    if (NP > 1 && NT > 1) _tile_zero(7);
    for (int64_t k = 0; k < n_steps; ++k) {
        const size_t at = (size_t)k * kBf16StepElems;
        _tile_loadd(0, tiles + at, 64);
        _tile_loadd(2, panels + at, 64);
        _tile_dpbf16ps(4, 0, 2);
        if (NP > 1) {
            _tile_loadd(3, panels + ps + at, 64);
            _tile_dpbf16ps(5, 0, 3);
        }
        if (NT > 1) {
            _tile_loadd(1, tiles + ts + at, 64);
            _tile_dpbf16ps(6, 1, 2);
            if (NP > 1) _tile_dpbf16ps(7, 1, 3);
        }
    }
    const size_t stride = sizeof(float) * y_stride;
    _tile_stored(4, y, stride);
    if (NP > 1) _tile_stored(5, y + 16, stride);
    if (NT > 1) _tile_stored(6, y + 16 * y_stride, stride);
    if (NP > 1 && NT > 1) _tile_stored(7, y + 16 * y_stride + 16, stride);
}

void bf16_gemm_amx(const uint16_t* panels, size_t panel_stride, int np, const uint16_t* tiles,
                   size_t tile_stride, int nt, int64_t n_steps, float* y, size_t y_stride) {
    configure(64);  // every tile 16 rows of 64 bytes
    if (np > 1 && nt > 1)
        bf16_block<2, 2>(panels, panel_stride, tiles, tile_stride, n_steps, y, y_stride);
    else if (np > 1)
        bf16_block<2, 1>(panels, panel_stride, tiles, tile_stride, n_steps, y, y_stride);
    else if (nt > 1)
        bf16_block<1, 2>(panels, panel_stride, tiles, tile_stride, n_steps, y, y_stride);
    else
        bf16_block<1, 1>(panels, panel_stride, tiles, tile_stride, n_steps, y, y_stride);
}

// ---- Exact batches of x16 q2_K, q4_K and q6_K (X16TileKernel, kernels/x16.h) -----------
//
// The GEMV sums a 256-block's products in integers, each sub-block's scaled by its
// integer scale (q4_K: isum = sum sc * (q . a), msum = sum m * sum(a); q6_K: isum), and
// meets the floats once per block. The int8 tiles can do the same if the scale is in the
// weights: w = sc * q is at most 945 (q4_K) or 4096 in magnitude (q6_K), so the panel
// holds it as two bytes, lo = w & 255 (unsigned) and hi = w >> 8, and the tile sums
// 256 * sum(a * hi) + sum(a * lo) are exactly isum. Two result tiles then run over the
// whole 256-block and leave the tile unit once per block, not once per 32 or 16 elements
// as the panel GEMM's do. q4_K's msum is vpdpwssd's: each row's minima of two sub-blocks
// (int16 pairs, in the panel) against a token's sums of them (in the pair tiles). q2_K's
// w = sc * q is at most 45, one byte: its second product is msum, the rows' sub-block
// minima repeated over their 16 elements (the q2_K 16-element sub-blocks do not match
// the pair tiles' sums of 32). The floats are the GEMV's:
//     acc = fma(d_r * d_act, float(isum), acc);  acc = fma(dmin_r * d_act, float(-msum), acc)
// Panel, per 256-block: for each pair of blocks of 32 elements, its 16 steps (64 bytes:
// four bytes of each of the 16 rows) of lo and of hi, each the second operand of one
// tdpbsud of K = 64 (q2_K: of lo and of m), and (q4_K) the 16 rows' minima of the two as
// int16 pairs; then d[16] and (q4_K, q2_K) dmin[16] as floats. The activations come as pair tiles (16 tokens x 64
// bytes: two blocks of 32 per row, and their sums).

constexpr size_t kStep = 64, kPairSteps = 16, kPartBytes = kPairSteps * kStep;
constexpr size_t kQ4KPair = 2 * kPartBytes + 64;  // lo, hi, m of a pair of blocks of 32
constexpr size_t kQ6KPair = 2 * kPartBytes;  // lo, hi
constexpr size_t kQ4KSuper = 4 * kQ4KPair + 2 * 16 * sizeof(float);
constexpr size_t kQ6KSuper = 4 * kQ6KPair + 16 * sizeof(float);
constexpr size_t kQ2KPair = 2 * kPartBytes;  // lo (sc * q <= 45), m over each sub-block
constexpr size_t kQ2KSuper = 4 * kQ2KPair + 2 * 16 * sizeof(float);
// step s (< 8) of block g (< 8) of a 256-block, in part `part` (0 lo, 1 hi)
inline size_t step_at(size_t pair_bytes, int g, int part, int s) {
    return pair_bytes * (size_t)(g / 2) + kPartBytes * (size_t)part + kStep * (size_t)(8 * (g % 2) + s);
}

size_t q4_K_exact_bytes(int64_t n) {
    return kQ4KSuper * (size_t)(n / 256);
}
size_t q6_K_exact_bytes(int64_t n) {
    return kQ6KSuper * (size_t)(n / 256);
}
size_t q2_K_exact_bytes(int64_t n) {
    return kQ2KSuper * (size_t)(n / 256);
}

using avx512::halves16;
using avx512::load512;
using avx512::scale_byte;
inline void store64(uint8_t* p, __m512i v) {
    _mm512_storeu_si512((void*)p, v);
}

// The 64 bytes v (values, unsigned, minus `bias`) times the scale of each row (sc: the
// row's 32-bit lane holds it in both 16-bit halves), as 16-bit products of the even and
// the odd bytes; then their low bytes and their high bytes (arithmetic), in byte order.
struct Scaled {
    __m512i even, odd;
};
inline Scaled scaled(__m512i v, __m512i sc, __m512i bias) {
    const __m512i low8 = _mm512_set1_epi16(0x00FF);
    const __m512i even = _mm512_sub_epi16(_mm512_and_si512(v, low8), bias);
    const __m512i odd = _mm512_sub_epi16(_mm512_srli_epi16(v, 8), bias);
    return {_mm512_mullo_epi16(even, sc), _mm512_mullo_epi16(odd, sc)};
}
inline __m512i low_bytes(Scaled p) {
    return _mm512_or_si512(_mm512_and_si512(p.even, _mm512_set1_epi16(0x00FF)), _mm512_slli_epi16(p.odd, 8));
}
inline __m512i high_bytes(Scaled p) {
    const __m512i low8 = _mm512_set1_epi16(0x00FF);
    return _mm512_or_si512(_mm512_and_si512(_mm512_srai_epi16(p.even, 8), low8),
                           _mm512_andnot_si512(low8, p.odd));
}
inline void scaled_bytes(__m512i v, __m512i sc, __m512i bias, uint8_t* lo, uint8_t* hi) {
    const Scaled p = scaled(v, sc, bias);
    store64(lo, low_bytes(p));
    store64(hi, high_bytes(p));
}
inline __m512i both_halves(__m512i v32) {  // a 16-bit value in each half of its lane
    return _mm512_or_si512(_mm512_and_si512(v32, _mm512_set1_epi32(0xFFFF)), _mm512_slli_epi32(v32, 16));
}

void q4_K_exact_pack(const uint8_t* group, int64_t n, uint8_t* panel) {
    const __m512i zero = _mm512_setzero_si512();
    for (int64_t b = 0; b < n / 256; ++b) {
        const uint8_t* x = group + 2304 * (size_t)b;
        uint8_t* out = panel + kQ4KSuper * (size_t)b;
        __m512i sc[2], mn[2];  // the 6-bit scales and minima (avx512::q4_K_scales)
        avx512::q4_K_scales(x, sc, mn);
        for (int g = 0; g < 8; ++g) {
            const __m512i scw = both_halves(scale_byte(sc, g));
            // sub-block g: the low (g even) or high nibbles of chunks 8 (g / 2) + s
            for (int s = 0; s < 8; ++s) {
                const __m512i v = load512(x + 256 + 64 * (8 * (g / 2) + s));
                const __m512i q = (g & 1) ? avx512::high_nibbles(v) : avx512::low_nibbles(v);
                scaled_bytes(q, scw, zero, out + step_at(kQ4KPair, g, 0, s),
                             out + step_at(kQ4KPair, g, 1, s));
            }
        }
        for (int h = 0; h < 4; ++h)  // the minima of blocks 2h and 2h + 1, as int16 pairs
            store64(out + kQ4KPair * (size_t)h + 2 * kPartBytes,
                    _mm512_or_si512(scale_byte(mn, 2 * h), _mm512_slli_epi32(scale_byte(mn, 2 * h + 1), 16)));
        float* f = (float*)(out + 4 * kQ4KPair);
        _mm512_storeu_ps(f, halves16(x));
        _mm512_storeu_ps(f + 16, halves16(x + 32));
    }
}

void q6_K_exact_pack(const uint8_t* group, int64_t n, uint8_t* panel) {
    const __m512i bias = _mm512_set1_epi16(32);
    for (int64_t b = 0; b < n / 256; ++b) {
        const uint8_t* x = group + 3360 * (size_t)b;
        uint8_t* out = panel + kQ6KSuper * (size_t)b;
        __m512i sc[4];
        avx512::scale_chunks(x + 32, sc);
        for (int h = 0; h < 2; ++h)
            for (int k = 0; k < 8; ++k) {
                __m512i v[4];
                avx512::q6_K_values(x, h, k, v);
                for (int m = 0; m < 4; ++m) {
                    const int g16 = 8 * h + 2 * m + k / 4;  // sub-block of 16
                    const int g = g16 / 2, s = 4 * (g16 % 2) + k % 4;
                    scaled_bytes(v[m], both_halves(avx512::scale_sbyte(sc, g16)), bias,
                                 out + step_at(kQ6KPair, g, 0, s), out + step_at(kQ6KPair, g, 1, s));
                }
            }
        _mm512_storeu_ps((float*)(out + 4 * kQ6KPair), halves16(x));
    }
}

// q2_K: chunk c (half h = c / 8, position k = c % 8), bits 2s: sub-block of 16
// 8h + 2s + k / 4, step k % 4 of it; the scale byte of sub-block g is byte g % 4 of the
// row's word in chunk g / 4 (sc: low nibble, m: high). w = sc * q <= 45: one byte.
void q2_K_exact_pack(const uint8_t* group, int64_t n, uint8_t* panel) {
    const __m512i three = _mm512_set1_epi8(3), zero = _mm512_setzero_si512();
    const __m512i nib32 = _mm512_set1_epi32(0x0F);
    for (int64_t b = 0; b < n / 256; ++b) {
        const uint8_t* x = group + 1344 * (size_t)b;
        uint8_t* out = panel + kQ2KSuper * (size_t)b;
        __m512i sc[4];
        avx512::scale_chunks(x + 64, sc);
        for (int c = 0; c < 16; ++c) {
            const int h = c / 8, k = c % 8;
            const __m512i v = load512(x + 320 + 64 * c);
            for (int sh = 0; sh < 4; ++sh) {
                const int g16 = 8 * h + 2 * sh + k / 4;
                const int g = g16 / 2, st = 4 * (g16 % 2) + k % 4;
                const __m512i byte = scale_byte(sc, g16);
                const __m512i q = _mm512_and_si512(_mm512_srli_epi16(v, 2 * sh), three);
                store64(out + step_at(kQ2KPair, g, 0, st),
                        low_bytes(scaled(q, both_halves(_mm512_and_si512(byte, nib32)), zero)));
                store64(out + step_at(kQ2KPair, g, 1, st),
                        _mm512_mullo_epi32(_mm512_srli_epi32(byte, 4), _mm512_set1_epi32(0x01010101)));
            }
        }
        float* f = (float*)(out + 4 * kQ2KPair);
        _mm512_storeu_ps(f, halves16(x));
        _mm512_storeu_ps(f + 16, halves16(x + 32));
    }
}

// Tiles 0 and 3: pair tiles of two tiles of 16 tokens; 1, 2: a pair's lo and hi steps;
// 4, 5 and 6, 7: their sums over a 256-block. Every tile 16 rows of 64 bytes.
constexpr int kExactConfig = -1;  // loaded_G's value for this configuration
void configure_exact() {
    if (loaded_G == kExactConfig) return;
    TileConfig c;
    std::memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t : {0, 1, 2, 3, 4, 5, 6, 7}) {
        c.rows[t] = (uint8_t)kTokens;
        c.colsb[t] = 64;
    }
    load_config(c);
    loaded_G = kExactConfig;
}

// Up to kExactTiles tiles of 16 tokens over the panel, each 256-block for every tile in
// turn (its weight tiles are read from L2 once and then from L1). The second tile product
// of a pair: q4_K's hi bytes (unsigned; its minima through vpdpwssd), q6_K's (signed), or
// q2_K's minima (w = sc * q fits one byte there, so its panel's second part is m). The
// sums of a (block, tile) step are stored while the tile unit runs the next step, and
// scaled one step later.
constexpr int kExactTiles = 32;

enum class Exact { Q4K, Q6K, Q2K };

template <Exact kKind>
void exact_tiles(const uint8_t* panel, int64_t n_super, const PanelActTile* tiles,
                 size_t tile_stride, const int8_t* pairs, size_t pair_stride, int64_t n_cols,
                 float* y, size_t y_stride) {
    constexpr bool kMin = kKind != Exact::Q6K;      // d and dmin, and a minimum term
    constexpr bool kVnniMin = kKind == Exact::Q4K;  // the minima through vpdpwssd
    constexpr size_t kPair = kKind == Exact::Q4K ? kQ4KPair : kKind == Exact::Q6K ? kQ6KPair : kQ2KPair;
    constexpr size_t kSuper = kKind == Exact::Q4K ? kQ4KSuper : kKind == Exact::Q6K ? kQ6KSuper : kQ2KSuper;
    const int nt = (int)((n_cols + kTokens - 1) / kTokens);
    // [set][tile of the pair][the two products]
    alignas(64) int32_t sums[2][2][2][kTokens][kRows];
    alignas(64) float acc[kExactTiles][kTokens][kRows];
    for (int j = 0; j < nt; ++j)
        for (int c = 0; c < kTokens; ++c) _mm512_store_ps(acc[j][c], _mm512_setzero_ps());
    // the floats of step (sb, j) from its sums
    auto apply = [&](int64_t sb, int j, int set, int slot) __attribute__((always_inline)) {
        const int32_t(*sm)[kTokens][kRows] = sums[set][slot];
        const float* f = (const float*)(panel + kSuper * (size_t)sb + 4 * kPair);
        const __m512 d = _mm512_loadu_ps(f);
        const float* da = tiles[tile_stride * (size_t)j + 8 * (size_t)sb].d;
        // (q4_K) the rows' minima per pair, and where the tokens' sums of pair 0 are
        __m512i mins[4];
        const int8_t* a_sums = pairs + pair_stride * (size_t)j + 4 * kPanelPairBytes * (size_t)sb + 16 * 64;
        if constexpr (kVnniMin)
            for (int h = 0; h < 4; ++h)
                mins[h] = _mm512_loadu_si512(panel + kSuper * (size_t)sb + kPair * (size_t)h + 2 * kPartBytes);
#pragma GCC unroll 16
        for (int c = 0; c < kTokens; ++c) {
            const __m512i isum =
                kKind == Exact::Q2K
                    ? _mm512_load_si512(sm[0][c])
                    : _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(sm[1][c]), 8),
                                       _mm512_load_si512(sm[0][c]));
            const __m512 dac = _mm512_set1_ps(da[c]);
            __m512 a = _mm512_fmadd_ps(_mm512_mul_ps(d, dac), _mm512_cvtepi32_ps(isum),
                                       _mm512_load_ps(acc[j][c]));
            if constexpr (kVnniMin) {
                // msum: the four pairs' minima against this token's sums of the pairs
                __m512i msum = _mm512_setzero_si512();
#pragma GCC unroll 4
                for (int h = 0; h < 4; ++h) {
                    int32_t both;
                    __builtin_memcpy(&both, a_sums + kPanelPairBytes * (size_t)h + 4 * (size_t)c, 4);
                    msum = _mm512_dpwssd_epi32(msum, mins[h], _mm512_set1_epi32(both));
                }
                a = _mm512_fnmadd_ps(_mm512_mul_ps(_mm512_loadu_ps(f + 16), dac),
                                     _mm512_cvtepi32_ps(msum), a);
            } else if constexpr (kMin) {
                a = _mm512_fnmadd_ps(_mm512_mul_ps(_mm512_loadu_ps(f + 16), dac),
                                     _mm512_cvtepi32_ps(_mm512_load_si512(sm[1][c])), a);
            }
            _mm512_store_ps(acc[j][c], a);
        }
    };
    // Two tiles of tokens per step share each weight tile: A (tiles 0 and 3), lo and hi
    // (1, 2), the sums (4, 5 and 6, 7).
    int64_t step = 0, prev_sb = 0;
    int prev_j = 0;
    bool prev_two = false;
    for (int64_t sb = 0; sb < n_super; ++sb) {
        const uint8_t* p = panel + kSuper * (size_t)sb;
        for (int j = 0; j < nt; j += 2, ++step) {
            const bool two = j + 1 < nt;
            const int8_t* a = pairs + pair_stride * (size_t)j + 4 * kPanelPairBytes * (size_t)sb;
            const int set = (int)(step & 1);
            _tile_zero(4);
            _tile_zero(5);
            if (two) {
                _tile_zero(6);
                _tile_zero(7);
                for (int h = 0; h < 4; ++h) {
                    const uint8_t* pr = p + kPair * (size_t)h;
                    _tile_loadd(0, a + kPanelPairBytes * (size_t)h, 64);
                    _tile_loadd(3, a + pair_stride + kPanelPairBytes * (size_t)h, 64);
                    _tile_loadd(1, pr, 64);
                    _tile_loadd(2, pr + kPartBytes, 64);
                    _tile_dpbsud(4, 0, 1);
                    _tile_dpbsud(6, 3, 1);
                    if constexpr (kKind != Exact::Q6K) {
                        _tile_dpbsud(5, 0, 2);
                        _tile_dpbsud(7, 3, 2);
                    } else {
                        _tile_dpbssd(5, 0, 2);
                        _tile_dpbssd(7, 3, 2);
                    }
                }
                _tile_stored(4, sums[set][0][0], 64);
                _tile_stored(5, sums[set][0][1], 64);
                _tile_stored(6, sums[set][1][0], 64);
                _tile_stored(7, sums[set][1][1], 64);
            } else {
                for (int h = 0; h < 4; ++h) {
                    const uint8_t* pr = p + kPair * (size_t)h;
                    _tile_loadd(0, a + kPanelPairBytes * (size_t)h, 64);
                    _tile_loadd(1, pr, 64);
                    _tile_loadd(2, pr + kPartBytes, 64);
                    _tile_dpbsud(4, 0, 1);
                    if constexpr (kKind != Exact::Q6K)
                        _tile_dpbsud(5, 0, 2);
                    else
                        _tile_dpbssd(5, 0, 2);
                }
                _tile_stored(4, sums[set][0][0], 64);
                _tile_stored(5, sums[set][0][1], 64);
            }
            if (step > 0) {
                apply(prev_sb, prev_j, set ^ 1, 0);
                if (prev_two) apply(prev_sb, prev_j + 1, set ^ 1, 1);
            }
            prev_sb = sb;
            prev_j = j;
            prev_two = two;
        }
    }
    if (step > 0) {
        const int set = (int)((step - 1) & 1);
        apply(prev_sb, prev_j, set, 0);
        if (prev_two) apply(prev_sb, prev_j + 1, set, 1);
    }
    for (int j = 0; j < nt; ++j)
        for (int c = 0; c < kTokens && j * kTokens + c < n_cols; ++c)
            _mm512_storeu_ps(y + y_stride * (size_t)(j * kTokens + c), _mm512_load_ps(acc[j][c]));
}

template <Exact kKind>
void exact_gemm(const uint8_t* panel, int64_t n, const PanelActTile* tiles, size_t tile_stride,
                const int8_t* pairs, size_t pair_stride, int64_t n_cols, float* y,
                size_t y_stride) {
    configure_exact();
    constexpr int64_t kMost = (int64_t)kExactTiles * kTokens;
    for (int64_t c = 0; c < n_cols; c += kMost)
        exact_tiles<kKind>(panel, n / 256, tiles + tile_stride * (size_t)(c / kTokens), tile_stride,
                          pairs + pair_stride * (size_t)(c / kTokens), pair_stride,
                          n_cols - c < kMost ? n_cols - c : kMost, y + y_stride * (size_t)c, y_stride);
}

}  // namespace

void fill_panel_amx(PanelKernel* panel) {
    panel->rows = kRows;
    panel->gemm = panel_gemm_amx;
    panel->gemm_tiled = panel_gemm_amx_tiled;
    panel->isa = "amx";
    panel->unsigned_q = false;
    panel->runs = true;
    panel->cols = 2 * kTokens;
}

void fill_amx(TypeKernels* table) {
    table[(uint32_t)TensorType::Q2_K].x16_tiles = {q2_K_exact_bytes, q2_K_exact_pack, exact_gemm<Exact::Q2K>};
    table[(uint32_t)TensorType::Q4_K].x16_tiles = {q4_K_exact_bytes, q4_K_exact_pack, exact_gemm<Exact::Q4K>};
    table[(uint32_t)TensorType::Q6_K].x16_tiles = {q6_K_exact_bytes, q6_K_exact_pack, exact_gemm<Exact::Q6K>};
}

void fill_panel_amx_bf16(PanelKernel* panel) {
    fill_panel_amx(panel);
    panel->isa = "amx-bf16";
    panel->bf16_pack = bf16_pack_amx;
    panel->bf16_act = bf16_act_amx;
    panel->bf16_gemm = bf16_gemm_amx;
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
    loaded_G = 0;
    int64_t sum = 0;
    for (auto& t : out)
        for (auto& r : t)
            for (int32_t v : r) sum += v;
    *lanes_sum = sum;
    return iters * 4 * 16 * 16 * 64;
}

}  // namespace edgellm
