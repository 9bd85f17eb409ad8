// The panel GEMM: prefill's matrix multiplication for quantized weights.
//
// A dot product per (weight row, token) pays for unpacking the weight block, for the
// horizontal sum of its SIMD lanes and for the block's scale, once per 32 multiply-adds.
// For a batch of tokens we instead unpack P weight rows at a time ("a panel") to plain
// int8 values with one float scale (and offset) per group of G elements, and interleave
// the rows four bytes at a time, so one SIMD register holds four consecutive elements of
// each of P rows. Multiplying that register with four bytes of one token, broadcast,
// accumulates P dot products in P int32 lanes (vpdpbusd, sdot): no horizontal sums, and
// each register of weights serves a whole tile of tokens. The unpacking costs one pass
// over the weights per batch, and the int8 panel of one thread lives in its L2 cache.
//
// Weights of every quantized type reduce to w = scale * q + offset per group, with q an
// int8 (q4_0: nibble - 8; q6_K: 6 bits - 32; q4_K: nibble, scale = d * sc, offset =
// -dmin * m; ...). Activations arrive quantized as the reference quantizes them for the
// weight type (q8_0 / q8_1 blocks of 32, or q8_K blocks of 256 with one scale), so the
// integer sums are exactly the reference's; the float sums run in another order (and
// q4_1 / q5_1 meet the activation sum d * sum(q) in f32 where the reference rounds it to
// f16 in the q8_1 block).
//
// Panel layout, for P rows and groups of G (16 or 32) elements, group after group:
//
//   [ q: G/4 steps x P rows x 4 bytes ][ scale: P floats ][ offset: P floats, if any ]
//
// byte 4 * (step * P + r) + j of a group = element 4 * step + j of the group in row r.
#pragma once

#include <cstddef>
#include <cstdint>

#include "edgellm/tensor_type.h"

namespace edgellm {

struct TypeKernels;

// One block of 32 activations as the panel kernels read them: the int8 values (-127..127,
// as every activation quantizer here writes them; -128 never occurs), their
// scale, and their sums (whole block and the two halves of 16) in the two forms used:
// -128 * sum (the correction for kernels that add 128 to the weights to make them
// unsigned, vpdpbusd) and d * sum (meets the weights' offsets).
struct alignas(64) PanelActBlock {
    int8_t qs[32];
    float d;
    int32_t nsum32;
    int32_t nsum16[2];
    float dsum32;
    float dsum16[2];
    float unused;
};
static_assert(sizeof(PanelActBlock) == 64, "panel activation block is one cache line");

// Bytes of one group of a panel of P rows.
constexpr size_t panel_group_bytes(int P, int G, bool has_min) {
    return (size_t)P * (size_t)G + (size_t)P * sizeof(float) * (has_min ? 2 : 1);
}
// Bytes of a panel of P rows of n elements (n a multiple of the group).
inline size_t panel_bytes(int P, int G, bool has_min, int64_t n) {
    return panel_group_bytes(P, G, has_min) * (size_t)(n / G);
}
// The largest panel any type needs for P rows of n elements.
inline size_t panel_bytes_max(int P, int64_t n) {
    return panel_bytes(P, 16, true, n);
}

// y[c * y_stride + r] = sum over the panel's groups g of
//     scale[g][r] * act[c][g].d * sum_j q[g][r][j] * act[c][g].qs[j]  (+ offset[g][r] * dsum)
// for rows r < rows (<= P) and columns c < n_cols; act[c] = act + c * act_stride blocks.
// Group g reads activation block g (G = 32) or half g % 2 of block g / 2 (G = 16).
// Implementations keep the order of the float operations of panel_gemm_ref per (r, c), so
// every implementation gives the same bits. With run == 1, per group:
//     acc = fma(float(isum), scale * d, acc);  acc = fma(offset, dsum, acc)
// With run > 1 (a kernel with PanelKernel::runs; the activations' scale d is the same for
// `run` groups in a row, as q8_K's one scale per 256), per run of groups:
//     t = 0;  per group: t = fma(float(isum), scale, t);  acc = fma(offset, dsum, acc)
//     then acc = fma(t, d, acc), d that of the run's first group
// which takes one multiplication per group and column less.
using PanelGemmFn = void (*)(const uint8_t* panel, int64_t n_groups, int G, bool has_min, int run,
                             const PanelActBlock* act, size_t act_stride, int64_t n_cols,
                             float* y, size_t y_stride, int rows);

// The activations of 16 tokens for one block of 32, as kernels that multiply a whole
// group for 16 tokens in one instruction read them (AMX: the int8 values are one tile
// operand, 16 rows of 32 bytes; a group of 16 is half of each row, read at a stride of
// 32). Token t of the 16 is row t; tokens past the batch are all zero. The fields are
// PanelActBlock's, one lane per token, but for the -128 * sum ones (tile kernels take
// signed panels).
struct alignas(64) PanelActTile {
    int8_t qs[16][32];
    float d[16];
    float dsum32[16];
    float dsum16[2][16];
};
static_assert(sizeof(PanelActTile) == 768, "panel activation tile is 12 cache lines");

// Tokens per PanelActTile.
inline constexpr int kPanelTileTokens = 16;

// Tiles of n_tokens (<= 16) tokens' activation blocks: dst[b] for block b < n_blocks of
// token t from act[t * act_stride + b].
void to_panel_act_tiles(const PanelActBlock* act, size_t act_stride, int64_t n_blocks,
                        int n_tokens, PanelActTile* dst);

// The panel GEMM over tiles: as PanelGemmFn, with column c's blocks in tile c / 16 (tile
// t starts at tiles + t * tile_stride), row c % 16 of it.
using PanelTiledGemmFn = void (*)(const uint8_t* panel, int64_t n_groups, int G, bool has_min,
                                  int run, const PanelActTile* tiles, size_t tile_stride,
                                  int64_t n_cols, float* y, size_t y_stride, int rows);

// A PanelGemmFn from a PanelTiledGemmFn: the tiles built first, per call (for callers
// with blocks at any stride: the kernel check, tests).
void panel_gemm_via_tiles(PanelTiledGemmFn fn, const uint8_t* panel, int64_t n_groups, int G,
                          bool has_min, int run, const PanelActBlock* act, size_t act_stride,
                          int64_t n_cols, float* y, size_t y_stride, int rows);

// The GEMM for panels of small codes (a type's TypeKernels::i8_bits <= 6): each byte is
// u = q + panel_code_bias(bits, has_min), unsigned and below 2^bits. Kernels without a
// multiply of two signed bytes (AVX2's vpmaddubsw) take u as it is, sum several steps of
// products in int16 (u * a with bits <= 6 leaves room) and subtract bias * sum(a) once per
// group, instead of moving the weights' signs onto the activations at every step. Else as
// PanelGemmFn: the integer sums are those of the signed panel, and so are the bits.
using PanelSmallGemmFn = void (*)(int bits, const uint8_t* panel, int64_t n_groups, int G,
                                  bool has_min, int run, const PanelActBlock* act,
                                  size_t act_stride, int64_t n_cols, float* y, size_t y_stride,
                                  int rows);
// The bias of small codes: types with offsets have q >= 0 already, the others' q spans
// -2^(bits-1) .. 2^(bits-1) - 1.
constexpr int panel_code_bias(int bits, bool has_min) {
    return has_min ? 0 : 1 << (bits - 1);
}
// Codes of at most this many bits take PanelKernel::gemm_small.
inline constexpr int kPanelSmallBits = 6;

// The panel kernel of a kernel set: P rows per panel and the GEMM. unsigned_q: its panels
// hold u = q + 128 as unsigned bytes for types without offsets and u = q (0..63: every
// type with offsets has q in 0..31) for those with (vpdpbusd multiplies unsigned
// weights by signed activations); otherwise q as signed bytes. runs: it takes run > 1.
// The bf16 panel GEMM (AMX-BF16): the weights dequantized (the type's to_float) and
// rounded to bf16, the activations rounded to bf16, their products summed in f32 over the
// whole row. No scale per group meets the sums, so nothing has to leave the tile unit
// until a row is done: on a CPU with AMX-BF16 this takes prefill where the int8 tiles
// must store and scale every group of 32.
//
// A bf16 panel holds 16 weight rows of n elements (n a multiple of 32) as n / 32 steps of
// 16 x 16 pairs: element (step k, pair p, row r, j) = row r's element 32 k + 2 p + j
// (the second operand of tdpbf16ps, 16 rows of 64 bytes per step). A bf16 activation tile
// holds 16 tokens as n / 32 steps of 16 x 32: element (k, t, i) = token t's element
// 32 k + i (the first operand); tokens past the batch are zero. bf16 is the f32 rounded to
// nearest, ties to even (bf16_round).
inline constexpr int kBf16Step = 32;
inline constexpr size_t kBf16StepElems = 16 * 32;  // one step of a panel or a tile

// Round f32 to bf16 as vcvtne2ps2bf16 does: to nearest with ties to even, a subnormal
// to a signed zero, a NaN to a quiet NaN.
inline uint16_t bf16_round(float f) {
    uint32_t b;
    __builtin_memcpy(&b, &f, 4);
    if ((b & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((b >> 16) | 0x40);
    if ((b & 0x7f800000u) == 0) b &= 0x80000000u;
    return (uint16_t)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

// Pack 16 rows of f32 (row r at rows + r * stride, n elements) into a bf16 panel.
using Bf16PackFn = void (*)(const float* rows, size_t stride, int64_t n, uint16_t* panel);
// y[t * y_stride + r] = sum over i < 32 * n_steps of token t's element i times row r's, for
// tokens t < 16 * nt of nt (1 or 2) activation tiles (tile j at tiles + j * tile_stride
// elements) and rows r < 16 * np of np (1 or 2) panels (panel j at panels + j *
// panel_stride). bf16_gemm_ref sums i = 0, 1, ... in f32 from 0, each product exact (a
// bf16 times a bf16 fits an f32) and each addition rounded to nearest. The tile unit sums
// in an order and with roundings of its own (none of the obvious orders gives its bits,
// measured): implementations agree with the exact sum within 1e-5 of the sum of the
// products' magnitudes, as the reference does, not bit for bit.
using Bf16GemmFn = void (*)(const uint16_t* panels, size_t panel_stride, int np,
                            const uint16_t* tiles, size_t tile_stride, int nt, int64_t n_steps,
                            float* y, size_t y_stride);
void bf16_pack_ref(const float* rows, size_t stride, int64_t n, uint16_t* panel);
void bf16_gemm_ref(const uint16_t* panels, size_t panel_stride, int np, const uint16_t* tiles,
                   size_t tile_stride, int nt, int64_t n_steps, float* y, size_t y_stride);
// Activation rows (n_rows <= 16, row t at x + t * x_stride, n elements) as one bf16 tile.
using Bf16ActFn = void (*)(const float* x, size_t x_stride, int n_rows, int64_t n,
                           uint16_t* tile);
void bf16_act_ref(const float* x, size_t x_stride, int n_rows, int64_t n, uint16_t* tile);

struct PanelKernel {
    int rows = 0;
    PanelGemmFn gemm = nullptr;
    const char* isa = "none";
    bool unsigned_q = false;
    bool runs = false;
    int cols = 8;  // tokens per call that keep it busy (the matmul's tile of tokens)
    // The GEMM for small codes, when the kernel has one: types with i8_bits <=
    // kPanelSmallBits then get biased panels (pack_panel's bias) and this GEMM.
    PanelSmallGemmFn gemm_small = nullptr;
    // The same GEMM over activation tiles, when the kernel has it: the matmul then builds
    // the tiles once per batch (a multiple of 16 tokens per call) and calls this one.
    PanelTiledGemmFn gemm_tiled = nullptr;
    // The bf16 GEMM (both or neither), when the CPU has it: batches that take panels take
    // it instead of the int8 one.
    Bf16PackFn bf16_pack = nullptr;
    Bf16ActFn bf16_act = nullptr;
    Bf16GemmFn bf16_gemm = nullptr;
};

// Decode n elements (whole blocks) of one weight row: q[n], scale[n / G] and, for types
// with an offset, offset[n / G]. Per type in TypeKernels (unpack_i8, i8_group, i8_min).
using UnpackI8Fn = void (*)(const void* src, int64_t n, int8_t* q, float* scale, float* offset);

// Unpack rows r < rows of a weight matrix (row r at w + r * row_bytes, n elements) into
// a panel of P rows; rows past `rows` are zero. `tmp` holds n + 2 * (n / 16) * 4 bytes.
// k: the weight type's kernels (its unpack_i8, i8_group, i8_min).
// unsigned_q: the panel's bytes as PanelKernel::unsigned_q says.
// bias: added to every code (the small-code panels of PanelKernel::gemm_small, bias
// panel_code_bias; 0 otherwise).
void pack_panel(const TypeKernels& k, const uint8_t* w, size_t row_bytes, int rows, int P,
                int64_t n, uint8_t* panel, uint8_t* tmp, bool unsigned_q = false, int bias = 0);

// Rows [part * P, part * P + P) of a panel of Ps rows (P divides Ps; n elements in groups
// of G) as a panel of P rows, `add` added to every code byte (mod 256): from a panel of
// x16_to_panel's unsigned bytes, 128 gives the signed panel and 128 + bias a small-code
// one, for types without offsets (theirs are the same bytes in every form: add 0).
void panel_slice(const uint8_t* src, int Ps, int P, int part, int G, bool has_min, int64_t n,
                 uint8_t add, uint8_t* dst);

// One activation row (n elements, quantized as `act_type`: q8_0, q8_1 or q8_K) as panel
// blocks. False for other activation types.
bool panel_act_supported(TensorType act_type);
void to_panel_act(TensorType act_type, const void* src, int64_t n, PanelActBlock* dst);

// The scalar definition of PanelSmallGemmFn, for any P.
void panel_gemm_small_ref(int P, int bits, const uint8_t* panel, int64_t n_groups, int G,
                          bool has_min, int run, const PanelActBlock* act, size_t act_stride,
                          int64_t n_cols, float* y, size_t y_stride, int rows);

// The scalar definition, for any P.
void panel_gemm_ref(int P, bool unsigned_q, const uint8_t* panel, int64_t n_groups, int G,
                    bool has_min, int run, const PanelActBlock* act, size_t act_stride,
                    int64_t n_cols, float* y, size_t y_stride, int rows);

// The panel kernel of the active kernel set; rows == 0 when it has none (the matmul
// then keeps to the per-row dot products).
const PanelKernel& panel_kernel();

}  // namespace edgellm
