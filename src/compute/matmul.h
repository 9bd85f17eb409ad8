// Matrix multiplication of a weight matrix with a batch of activation rows, with the
// activations quantized once to the weights' vec_dot_type (Q8_0 / Q8_1 / Q8_K / F16 ...),
// as llama.cpp does, so quantized weights are never expanded to floats.
#pragma once

#include <cstdint>

#include "compute/tensor_view.h"
#include "compute/thread_pool.h"

namespace edgellm {

// Bytes of scratch for matmul over n_rows activation rows of n elements with weights of
// `type` on n_threads threads: the rows quantized to the weights' vec_dot_type and, for
// batches that take the panel GEMM (kernels/panel.h), the same rows as panel blocks and
// each thread's weight panel.
size_t activation_buffer_size(TensorType weight_type, int64_t n, int64_t n_rows, int n_threads);

// Batches of at least this many tokens take the panel GEMM when the kernel set has one.
inline constexpr int64_t kPanelMinTokens = 8;

// xq[t] = quantize(x[t * x_stride .. + n]) in the vec_dot_type of `weight_type` (and the
// panel blocks after them, when the batch takes the panel GEMM).
void quantize_activations(ThreadPool& pool, TensorType weight_type, const float* x,
                          int64_t x_stride, int64_t n, int64_t n_rows, void* xq);

// y[t * y_stride + r] = dot(w row r, xq[t]) for every weight row r and token t.
// xq rows as written by quantize_activations for w.ne[0] elements.
void matmul_quantized(ThreadPool& pool, const TensorView& w, const void* xq, int64_t n_tokens,
                      float* y, int64_t y_stride);

// Both steps: y = x W^T. xq is scratch of activation_buffer_size(w.type, w.ne[0], n_tokens).
void matmul(ThreadPool& pool, const TensorView& w, const float* x, int64_t x_stride,
            int64_t n_tokens, void* xq, float* y, int64_t y_stride);

}  // namespace edgellm
