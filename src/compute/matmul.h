// Matrix multiplication of a weight matrix with a batch of activation rows, with the
// activations quantized once to the weights' vec_dot_type (Q8_0 / Q8_1 / Q8_K / F16 ...),
// as llama.cpp does, so quantized weights are never expanded to floats.
#pragma once

#include <cstdint>

#include "compute/tensor_view.h"
#include "compute/thread_pool.h"

namespace edgellm {

// Bytes of scratch for matmul over n_rows activation rows of w.ne[0] elements with weights
// w on n_threads threads: the rows quantized to the weights' vec_dot_type and, for
// batches that take the panel GEMM (kernels/panel.h) or weights in the row-interleaved
// layout (kernels/x16.h), the same rows as panel blocks; for the panel GEMM also each
// thread's weight panel.
size_t activation_buffer_size(const TensorView& w, int64_t n_rows, int n_threads);

// Batches of at least this many tokens take the panel GEMM when the kernel set has one.
inline constexpr int64_t kPanelMinTokens = 8;

// Weights in the row-interleaved layout (x16) take their GEMV up to this many tokens
// (the kernel set's gemv_x16_cols), the panel GEMM above. The GEMV has no fixed cost and
// unpacks the weights once per eight tokens; the panel GEMM unpacks every weight once per
// call. With AVX-512 the panels are made straight from the x16 layout, which makes them
// as fast as the GEMV from 16 tokens on (GMAC/s, 2 threads, 8960 x 1536 Q4_K, GEMV vs
// panel: 32 tokens 183 vs 192, 64: 201 vs 223, 128: 148 vs 253, 256: 237 vs 274; 4864 x
// 896 Q8_0 and Q5_0 alike within this machine's noise): the set takes the GEMV up to 16.
// AVX2 up to 32: its panels of 8 rows were signed and unpacked through the file's layout
// (then up to 256: 16 tokens 80 vs 31, 64: 84 vs 54, 256: 84 vs ~70 tokens/s on the 1.5B);
// with small codes and slices of x16 panels, on the 1.5B shape: 32 tokens 75 vs 61, 64:
// 71 vs 80, 128: 83 vs 98, 256: 82 vs 102. ARM: not timed on a board, 64.
int64_t x16_gemv_max_tokens(TensorType t);

// Work on one activation row just before it is quantized, by the thread that quantizes
// it, while the row is in its cache (the feed-forward's gate: h = silu(gate) * up written
// over the gate's row and read at once, instead of a pass over the whole batch between).
struct RowPrep {
    void (*fn)(void* ctx, int64_t row) = nullptr;
    void* ctx = nullptr;
};

// xq[t] = quantize(x[t * x_stride .. + w.ne[0]]) in the vec_dot_type of w (and the panel
// blocks after them, when the batch or the weights' layout takes them); prep.fn(ctx, t),
// when given, first.
void quantize_activations(ThreadPool& pool, const TensorView& w, const float* x,
                          int64_t x_stride, int64_t n_rows, void* xq, RowPrep prep = {});

// y[t * y_stride + r] = dot(w row r, xq[t]) for every weight row r and token t.
// xq rows as written by quantize_activations for w.ne[0] elements.
void matmul_quantized(ThreadPool& pool, const TensorView& w, const void* xq, int64_t n_tokens,
                      float* y, int64_t y_stride);

// y = glu(xq W_gate^T, xq W_up^T) row by row (glu(gate, up, n) writes over gate), each
// tile of rows and tokens computed for both weights and joined while in the cache, when
// both take the panel GEMM alike (same type, shape and layout): true. False, and nothing
// done, otherwise (the caller then multiplies each and joins them itself).
using GluFn = void (*)(float* gate, const float* up, int64_t n);
bool matmul_glu(ThreadPool& pool, const TensorView& w_gate, const TensorView& w_up, GluFn glu,
                const void* xq, int64_t n_tokens, float* y, int64_t y_stride);

// What a batch keeps of a token's bits. A batch gives each token the bits it gets alone
// (the decode GEMV), so a restored prompt prefix continues exactly as the whole prompt
// would, for q4_0, q5_0 and q8_0 weights in the x16 layout (panel and GEMV take the same
// float steps per block of 32), iq4_nl, and, with AMX, x16 q2_K, q4_K and q6_K weights
// (the exact x16 GEMM takes the GEMV's integer sums). Not for other K-quants and q4_1 /
// q5_1 (and those three without AMX: the GEMV sums a 256-block's sub-blocks in integers and
// scales once, the panel scales each sub-block in floats), or legacy weights left in the
// file's layout (vec_dot adds in another order): there a batch differs from one token in
// the order of its float additions (about 1e-7 of a result); with the bf16 GEMM
// (amx-bf16), by bf16 rounding (about 1e-3).
// (Matmul.BatchesKeepEachTokensBitsWherePanelsPromiseIt holds the promise.)

// Whether w times a batch of n_tokens takes the exact x16 GEMM (kernels/x16.h,
// X16TileKernel: AMX, x16 q2_K, q4_K and q6_K weights), whose activations carry pair tiles.
bool takes_exact_x16(const TensorView& w, int64_t n_tokens);

// Whether w times a batch of n_tokens takes the bf16 GEMM (kernels/panel.h: the kernel
// set amx-bf16, and a batch that takes panels): the activations are then bf16 tiles,
// whatever w's type, and any two such weights of one width share them.
bool takes_bf16(const TensorView& w, int64_t n_tokens);

// Both steps: y = x W^T. xq is scratch of activation_buffer_size(w, n_tokens).
void matmul(ThreadPool& pool, const TensorView& w, const float* x, int64_t x_stride,
            int64_t n_tokens, void* xq, float* y, int64_t y_stride);

// Row r of w as floats (w.ne[0] of them), whatever its layout (the embedding lookup).
void row_to_float(const TensorView& w, int64_t r, float* dst);

// Repack w (rows a multiple of 16, a type with the layout) into the row-interleaved
// layout at dst (w.n_rows() * w.row_bytes() bytes), n_threads threads; the view of it.
TensorView repack_x16(ThreadPool* pool, const TensorView& w, uint8_t* dst);

// Whether w can be repacked and the kernels in use have a SIMD GEMV for it.
bool x16_pays(const TensorView& w);

}  // namespace edgellm
