// Row-interleaved weights for decode ("x16"): the layout weights are repacked into at load.
//
// Decode multiplies every weight row with one token. A dot product per row pays, per
// block of 32, for unpacking the block, a horizontal sum and the block's scale, and with
// one thread that work — not memory — limits the speed. Repacked, 16 rows go through the
// SIMD lanes together: one 64-byte load holds four consecutive bytes of each of 16 rows,
// a multiply-add against four activation bytes broadcast (vpdpbusd) adds to 16 int32
// row sums at once, the 16 rows' scales are one vector, and nothing is summed across
// lanes. The bytes are the file's, only moved (q8_0 also has 128 added to make them
// unsigned), so the repacked tensor is exactly as large as the file's and replaces it.
//
// A tensor of R rows (R a multiple of 16) becomes R / 16 groups; a group holds, block
// column after block column, one "x16 block": the 16 rows' blocks of that column, as
//
//   q4_0 (288 B): d[16] f16 | 4 chunks: chunk k, bytes 4r..4r+3 = row r's qs[4k..4k+3]
//   q5_0 (352 B): d[16] f16 | 4 masks of 16 B: mask k = two 64-bit masks, bit 4r+j of the
//                 first = qh bit 4k+j of row r, of the second = qh bit 16+4k+j
//                 | 4 chunks of qs as q4_0
//   q8_0 (544 B): d[16] f16 | 8 chunks: chunk k, bytes 4r+j = row r's qs[4k+j] + 128
//   q2_K (1344 B): d[16] f16 | dmin[16] f16 | 4 chunks of the 16 scale bytes | 16 chunks
//                 of qs (chunk c = qs[4c..4c+3])
//   q4_K (2304 B): d[16] f16 | dmin[16] f16 | 3 chunks of the 12 scale bytes (chunk p =
//                 bytes 4p..4p+3 of each row) | 32 chunks of qs (chunk c = qs[4c..4c+3])
//   q6_K (3360 B): d[16] f16 | 4 chunks of the 16 scale bytes | for h = 0, 1 and
//                 k = 0..7: three chunks, ql[64h+4k..], ql[64h+32+4k..], qh[32h+4k..]
//
// where a chunk is 64 bytes: 4 bytes of each of the 16 rows, row 0 first.
//
// The GEMV reads activations as panel blocks (PanelActBlock: int8 values, their scale,
// and their sums for the weights' offsets). Per row r and column, every implementation
// computes, block by block in order,
//     acc = fma(d_r * d_act, float(isum), acc)           isum: the exact integer sum
//     acc = fma(dmin_r * d_act, float(-msum), acc)       q2_K, q4_K: msum = sum m * sum(act)
// so every implementation gives the bits of gemv_x16_ref.
#pragma once

#include <cstddef>
#include <cstdint>

#include "edgellm/tensor_type.h"
#include "kernels/panel.h"

namespace edgellm {

inline constexpr int kX16Rows = 16;

// y[c * y_stride + r] = row r of the group · activation column c, for r < 16 and
// c < n_cols; column c's panel blocks start at act + c * act_stride; n elements per row.
using GemvX16Fn = void (*)(int64_t n, const uint8_t* group, const PanelActBlock* act,
                           size_t act_stride, int64_t n_cols, float* y, size_t y_stride);

// Whether the layout is defined for this type.
bool x16_layout(TensorType t);

// Repack 16 rows (row r at rows + r * row_bytes, n elements each) into one group
// (16 * row_bytes bytes).
void x16_pack(TensorType t, const uint8_t* rows, size_t row_bytes, int64_t n, uint8_t* group);

// A SIMD x16_pack (TypeKernels::pack_x16) moves each x16 block's chunks as runs of
// consecutive 4-byte source words (one 64-byte load per row, a 16 x 16 transposition, a
// store per word to its chunk), and the rest as x16_pack_block_rest writes it.
struct X16ChunkRun {
    uint16_t src = 0;  // the run's first byte in a row's block
    uint8_t count = 0;  // words (<= 16)
    uint32_t flip = 0;  // XOR on each word
    uint16_t dst[16] = {};  // word j's chunk in the x16 block
};
struct X16PackRuns {
    int n = 0;
    X16ChunkRun run[16];
};
const X16PackRuns& x16_pack_runs(TensorType t);
// Block column b's segments that are not chunks (the halves, q5_0's high-bit masks).
void x16_pack_block_rest(TensorType t, const uint8_t* rows, size_t row_bytes, int64_t b,
                         uint8_t* dst);
using X16PackFn = void (*)(TensorType t, const uint8_t* rows, size_t row_bytes, int64_t n,
                           uint8_t* group);

// All 16 rows of a group back in the file's block format (the inverse of x16_pack).
void x16_unpack_group(TensorType t, const uint8_t* group, int64_t n, uint8_t* rows,
                      size_t row_bytes);

// Row r (< 16) of a group, back in the file's block format (row_size(t, n) bytes).
void x16_unpack_row(TensorType t, const uint8_t* group, int r, int64_t n, uint8_t* row);

// Block column b of row r of a group, in the file's block format (one block).
void x16_unpack_block(TensorType t, const uint8_t* group, int r, int64_t b, uint8_t* block);

// The 16 rows of a group (n elements each) as a panel of 16 rows with unsigned weights
// (kernels/panel.h, PanelKernel::unsigned_q): byte for byte what pack_panel writes from
// the rows in the file's layout, without that detour (prefill from repacked weights).
// False, and nothing written, for a type without the layout.
// unsigned_q false: the panel with signed weights instead (PanelKernel::unsigned_q).
bool x16_to_panel(TensorType t, const uint8_t* group, int64_t n, uint8_t* panel,
                  bool unsigned_q = true);

// Whether x16_to_panel takes type t.
bool x16_has_panel(TensorType t);

// x16_to_panel for one type with SIMD (TypeKernels::to_panel_x16): the same bytes.
using X16ToPanelFn = void (*)(const uint8_t* group, int64_t n, uint8_t* panel, bool unsigned_q);

// A batch GEMM over x16 weights that gives gemv_x16_ref's bits for any number of tokens
// (TypeKernels::x16_tiles; AMX, q2_K, q4_K and q6_K): a batch then gives each token exactly what
// it gets alone. pack turns a group (16 rows of n elements) into the kernel's panel of
// panel_bytes(n) bytes, once per batch; gemm multiplies it with n_cols tokens' activations
// into y[c * y_stride + r]. It reads them as activation tiles (kernels/panel.h,
// PanelActTile: token tile j's blocks at tiles + j * tile_stride) and, for the int8
// values, as pair tiles: per tile of 16 tokens and pair of blocks of 32 (kPanelPairBytes
// each, token tile j's at pairs + j * pair_stride), 16 rows of 64 bytes, row t = token t's
// two blocks, then 16 int32: token t's sums of the two blocks' values as two int16, the
// first block's in the low half (to_panel_act_pairs).
inline constexpr size_t kPanelPairBytes = 16 * 64 + 16 * 4;
struct X16TileKernel {
    size_t (*panel_bytes)(int64_t n) = nullptr;
    void (*pack)(const uint8_t* group, int64_t n, uint8_t* panel) = nullptr;
    void (*gemm)(const uint8_t* panel, int64_t n, const PanelActTile* tiles, size_t tile_stride,
                 const int8_t* pairs, size_t pair_stride, int64_t n_cols, float* y,
                 size_t y_stride) = nullptr;
};
// The pair tiles of one tile of tokens from its activation tiles (n_blocks even).
void to_panel_act_pairs(const PanelActTile* tiles, int64_t n_blocks, int8_t* pairs);

// The scalar definition of the GEMV for type t (nullptr when x16_layout(t) is false).
GemvX16Fn gemv_x16_ref(TensorType t);

// A kernel set's GEMVs, one per type with the layout, and the largest batch (in tokens)
// they take before the panel GEMM does (TypeKernels::gemv_x16_cols).
struct X16Gemvs {
    GemvX16Fn q4_0, q5_0, q8_0, q2_K, q4_K, q6_K;
    int64_t max_cols;              // batches up to this many tokens take the GEMV
    int64_t max_cols_kquants = 0;  // the same for q2_K, q4_K, q6_K when not 0
};
struct TypeKernels;
void set_x16_gemvs(TypeKernels* table, const X16Gemvs& g);

}  // namespace edgellm
