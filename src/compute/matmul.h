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
// (the kernel set's gemv_x16_cols), the panel GEMM above. The panel GEMM unpacks every
// weight once per call (a fixed ~220 ms for Qwen2.5 1.5B Q4_K_M on 2 threads here) and
// then costs little per token; the GEMV has no fixed cost and, taking four tokens per
// unpacking, little per token too. Prefill, tokens/s, GEMV vs panel, 1.5B, 2 threads:
// AVX-512 16 tokens 141 vs 52, 64: 168 vs 112, 128: 165 vs 146, 256: 164 vs 157, 512:
// 154 vs 160; AVX2 (two tokens per unpacking) 16: 80 vs 31, 64: 84 vs 54, 256: 84 vs
// ~70. At 512 the GEMV wins on the 0.5B (Q4_K_M 488 vs 405) but loses on some 1.5B files
// (Q2_K_S, 1 thread: 66 vs 73), so x86 sets take the GEMV up to 256 tokens. ARM: not
// timed on a board, 64.
int64_t x16_gemv_max_tokens(TensorType t);

// xq[t] = quantize(x[t * x_stride .. + w.ne[0]]) in the vec_dot_type of w (and the panel
// blocks after them, when the batch or the weights' layout takes them).
void quantize_activations(ThreadPool& pool, const TensorView& w, const float* x,
                          int64_t x_stride, int64_t n_rows, void* xq);

// y[t * y_stride + r] = dot(w row r, xq[t]) for every weight row r and token t.
// xq rows as written by quantize_activations for w.ne[0] elements.
void matmul_quantized(ThreadPool& pool, const TensorView& w, const void* xq, int64_t n_tokens,
                      float* y, int64_t y_stride);

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
