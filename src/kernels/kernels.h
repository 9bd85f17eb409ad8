// The per-type kernel dispatch table. Every tensor type has one entry holding the kernels
// in use: dequantize a row, quantize a row, and the dot product of a row of this type
// with a row of its activation type (`vec_dot_type`). The entries start as the scalar
// reference (src/kernels/ref) and are replaced, per function, by an ISA-specific version
// when the CPU and OS support it and it passes a self-test against the reference.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "edgellm/kernels.h"
#include "edgellm/tensor_type.h"
#include "kernels/panel.h"
#include "kernels/x16.h"

namespace edgellm {

// Dequantize n elements (a multiple of the block size) from src into dst.
using ToFloatFn = void (*)(const void* src, float* dst, int64_t n);
// Quantize n floats (a multiple of the block size) into dst.
using FromFloatFn = void (*)(const float* src, void* dst, int64_t n);
// *s = dot(x, y) over n elements; x is a row of the weight type, y a row of vec_dot_type.
using VecDotFn = void (*)(int64_t n, float* s, const void* x, const void* y);
// s[c] = dot(x, y_c) for c = 0..3, where y_c starts by * c bytes after y: one weight row
// against four activation rows, so the weight blocks are decoded once for four tokens
// (prefill). Optional; matmul falls back to vec_dot.
using VecDot4Fn = void (*)(int64_t n, float* s, const void* x, const void* y, size_t by);
// s[c] = dot(x, y_c) for c = 0..ny-1 (y_c at y + by * c), each exactly as vec_dot computes
// it: one row against several others that share it (attention: a cached key against the
// query heads of its group). Optional.
using VecDotNFn = void (*)(int64_t n, float* s, const void* x, const void* y, size_t by, int ny);

// acc[g * hd + i] += sum over rows c < n_rows of p[g * p_stride + c] * x_c[i], for heads
// g < ng and i < hd, where x_c (a row of this type, hd elements) starts at x + bx * c:
// attention's weighted sum of cached V rows for the query heads that share them. Per
// (g, i) the rows are added in order, each with one fused multiply-add, so every
// implementation gives the reference's bits. Optional.
using VecMadNFn = void (*)(int64_t hd, int64_t n_rows, const void* x, size_t bx, const float* p,
                           size_t p_stride, int ng, float* acc);

// s[g * s_stride + c] = sum over i < hd of q_g[i] * x_c[i] for heads g < ng and rows
// c < n_rows: x_c a row of this type at x + bx * c (a cached key), q_g = q + hd * g f32
// (a query). Per (g, c) the sum runs i = 0, 1, ... with one fused multiply-add each, so
// every implementation gives the reference's bits; SIMD versions put rows in lanes.
// Optional.
using DotRowsFn = void (*)(int64_t hd, int64_t n_rows, const void* x, size_t bx, const float* q,
                           int ng, float* s, size_t s_stride);

// The same scores in integers, for q8_0 keys against queries quantized to q8_0 (as
// llama.cpp's q8_0 x q8_0 dot product): q_g is q8_0 at q + q_stride * g. Per (g, c) and
// block b in order, the exact integer sum of the block's 32 code products, then one fused
// multiply-add: acc = fma((float)isum_b, d_q_b * d_x_b, acc) from 0 (d_q_b * d_x_b one f32
// product). The query's codes in -127..127, as from_float writes them. Optional.
using DotRowsQ8Fn = void (*)(int64_t hd, int64_t n_rows, const void* x, size_t bx, const void* q,
                             size_t q_stride, int ng, float* s, size_t s_stride);

// Attention's weighted sum of q8_0 V rows in integers (q8_0 caches): e[g * e_stride + c] is
// query g's weight of row c, e^(score - max) in [0, 1] before the division by the sum, and
// row c (hd elements, q8_0) starts at x + bx * c. Rows go in chunks of kMadChunkRows from
// the first (the last may be shorter). Per chunk, query g and block b (elements 32 b ..
// 32 b + 31): w_c = e_gc * d_cb (one f32 product); D = the largest w_c of the chunk (0 to
// start, a NaN w_c never larger); when D is positive and finite, P_c = w_c * (127 / D)
// rounded to nearest even, clamped to 0..127 (a NaN: 0), the exact integer sums
// S_i = sum over the chunk of P_c * q_ci, and then per element of the block
// acc[g * hd + i] = fma((float)S_i, D / 127, acc[g * hd + i]) (127 / D and D / 127 one f32
// division each). Chunk after chunk in order, so every implementation gives the
// reference's bits. The weights get 7 bits per 32 rows, the precision of llama.cpp's q8_0
// activations, and the products go at the int8 dot-product rate. Optional.
inline constexpr int64_t kMadChunkRows = 32;
using MadRowsQ8Fn = void (*)(int64_t hd, int64_t n_rows, const void* x, size_t bx, const float* e,
                             size_t e_stride, int ng, float* acc);

struct TypeKernels {
    ToFloatFn to_float = nullptr;
    FromFloatFn from_float = nullptr;
    VecDotFn vec_dot = nullptr;
    VecDot4Fn vec_dot_4 = nullptr;
    VecDotNFn vec_dot_n = nullptr;
    VecMadNFn vec_mad_n = nullptr;
    DotRowsFn dot_rows = nullptr;
    DotRowsQ8Fn dot_rows_q8 = nullptr;  // q8_0 keys only
    MadRowsQ8Fn mad_rows_q8 = nullptr;  // q8_0 values only
    TensorType vec_dot_type = TensorType::F32;
    // Decoding to int8 groups for the panel GEMM (kernels/panel.h); reference only.
    UnpackI8Fn unpack_i8 = nullptr;
    int i8_group = 0;     // G: 16 or 32
    bool i8_min = false;  // has offsets
    // Bits of its codes: q spans 2^bits values (q4_0: -8..7, q6_K: -32..31, q4_K: 0..15;
    // 8 for q8_0). Kernels of small codes take q + panel_code_bias (panel.h) unsigned.
    int i8_bits = 8;
    // GEMV over row-interleaved weights (kernels/x16.h), for types with that layout. The
    // reference has the scalar definition; weights are repacked at load only when the
    // kernel set has a SIMD one (gemv_x16_isa is not "ref").
    GemvX16Fn gemv_x16 = nullptr;
    // Batches of up to this many tokens take gemv_x16 rather than the panel GEMM (which
    // reads x16 weights back into panels): the set's measured crossover.
    int64_t gemv_x16_cols = 0;
    // x16_pack with SIMD (load time's repacking), the same bytes; null: x16_pack.
    X16PackFn pack_x16 = nullptr;
    // x16_to_panel with SIMD (prefill's panels from x16 weights), the same bytes; null:
    // x16_to_panel.
    X16ToPanelFn to_panel_x16 = nullptr;
    // A batch GEMM over x16 weights with the GEMV's bits (x16.h), where the set has one.
    X16TileKernel x16_tiles{};
    // Which kernel set each function came from ("ref", "avx2", ...), for reports.
    const char* to_float_isa = "ref";
    const char* from_float_isa = "ref";
    const char* vec_dot_isa = "ref";
    const char* vec_dot_4_isa = "ref";
    const char* vec_dot_n_isa = "ref";
    const char* vec_mad_n_isa = "ref";
    const char* dot_rows_isa = "ref";
    const char* dot_rows_q8_isa = "ref";
    const char* mad_rows_q8_isa = "ref";
    const char* gemv_x16_isa = "ref";
};

// The int8 dot-product instruction a kernel set's integer kernels are built on (vpdpbusd,
// vpmaddubsw + vpmaddwd, sdot, smmla), issued `iters` times over K independent
// accumulators from registers: the set's compute limit. Operands from buf (128 bytes: a in
// the first 64, b in the last 64, small values so nothing saturates); *lanes_sum gets the
// sum of every accumulator lane at the end (int64, from int32 lanes: keep iters small when
// checking it). Returns the multiply-adds done.
using Int8PeakFn = uint64_t (*)(uint64_t iters, const int8_t* buf, int64_t* lanes_sum);

// A set of ISA kernels overriding some entries of the reference table.
struct KernelSet {
    const char* name;                  // "avx2"
    bool (*supported)();               // CPU and OS support it
    void (*fill)(TypeKernels* table);  // writes the functions it has (table[type id])
    void (*fill_panel)(PanelKernel* panel) = nullptr;  // its panel GEMM, if it has one
    Int8PeakFn int8_peak = nullptr;    // its int8 compute limit (none: ref, neon)
    int int8_peak_accumulators = 0;    // K, and the lanes dot products of one instruction
    int int8_peak_macs = 0;            // multiply-adds per instruction
    // Used only when asked for by name (--kernels): not the default even where supported.
    bool opt_in = false;
};

// (Int8Limit, measure_int8_limit: edgellm/kernels.h)

// A set's int8_peak, and the scalar definition of its *lanes_sum for the same arguments
// (tests check one against the other); nullptr / 0 for a set without one.
Int8PeakFn int8_peak_of(const std::string& set);
int64_t int8_peak_reference(const std::string& set, uint64_t iters, const int8_t* buf);

// The table in use. Chooses kernels on first call (thread-safe).
const TypeKernels& type_kernels(TensorType t);

// The scalar reference table (never changes).
const TypeKernels& reference_kernels(TensorType t);

// (available_kernel_sets, select_kernel_set, active_kernel_set: edgellm/kernels.h)
// The set used unless another is asked for: the best supported one that is not opt-in.
std::string default_kernel_set();

// One line per type whose kernels differ from the reference, e.g. "q4_K vec_dot=avx2".
std::string kernel_report();

// Self-test messages from selection (kernels that failed and were dropped).
std::vector<std::string> kernel_selftest_failures();

}  // namespace edgellm
