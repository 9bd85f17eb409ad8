#include "compute/matmul.h"

#include <algorithm>

#include "edgellm/error.h"
#include "kernels/kernels.h"

namespace edgellm {

size_t activation_buffer_size(TensorType weight_type, int64_t n, int64_t n_rows) {
    const TensorType vdt = type_kernels(weight_type).vec_dot_type;
    return row_size(vdt, n) * (size_t)n_rows;
}

void quantize_activations(ThreadPool& pool, TensorType weight_type, const float* x,
                          int64_t x_stride, int64_t n, int64_t n_rows, void* xq) {
    const TypeKernels& vk = type_kernels(type_kernels(weight_type).vec_dot_type);
    EDGELLM_ASSERT(vk.from_float != nullptr, "activation type has no quantizer");
    const size_t row_bytes = row_size(type_kernels(weight_type).vec_dot_type, n);
    auto body = [&](int ith, int nth) {
        int64_t r0, r1;
        ThreadPool::split(n_rows, ith, nth, &r0, &r1);
        for (int64_t r = r0; r < r1; ++r)
            vk.from_float(x + r * x_stride, (uint8_t*)xq + (size_t)r * row_bytes, n);
    };
    if (n_rows == 1)
        body(0, 1);
    else
        pool.run(body);
}

void matmul_quantized(ThreadPool& pool, const TensorView& w, const void* xq, int64_t n_tokens,
                      float* y, int64_t y_stride) {
    const TypeKernels& k = type_kernels(w.type);
    EDGELLM_ASSERT(k.vec_dot != nullptr, "weight type has no dot product");
    const int64_t n = w.ne[0];
    const int64_t n_rows = w.n_rows();
    const size_t x_row_bytes = row_size(k.vec_dot_type, n);
    const size_t w_row_bytes = w.row_bytes();
    // Rows in blocks of 16 so threads write separate cache lines of y.
    constexpr int64_t kRowBlock = 16;
    const int64_t n_blocks = (n_rows + kRowBlock - 1) / kRowBlock;
    pool.run([&](int ith, int nth) {
        int64_t b0, b1;
        ThreadPool::split(n_blocks, ith, nth, &b0, &b1);
        for (int64_t b = b0; b < b1; ++b) {
            const int64_t r_end = std::min(n_rows, (b + 1) * kRowBlock);
            int64_t t = 0;
            if (k.vec_dot_4) {
                // Four tokens at a time: each weight row's blocks are decoded once for four.
                float s4[4];
                for (; t + 4 <= n_tokens; t += 4) {
                    const uint8_t* xt = (const uint8_t*)xq + (size_t)t * x_row_bytes;
                    for (int64_t r = b * kRowBlock; r < r_end; ++r) {
                        k.vec_dot_4(n, s4, (const uint8_t*)w.data + (size_t)r * w_row_bytes, xt,
                                    x_row_bytes);
                        for (int c = 0; c < 4; ++c) y[(t + c) * y_stride + r] = s4[c];
                    }
                }
            }
            for (; t < n_tokens; ++t) {
                const uint8_t* xt = (const uint8_t*)xq + (size_t)t * x_row_bytes;
                float* yt = y + t * y_stride;
                for (int64_t r = b * kRowBlock; r < r_end; ++r)
                    k.vec_dot(n, &yt[r], (const uint8_t*)w.data + (size_t)r * w_row_bytes, xt);
            }
        }
    });
}

void matmul(ThreadPool& pool, const TensorView& w, const float* x, int64_t x_stride,
            int64_t n_tokens, void* xq, float* y, int64_t y_stride) {
    quantize_activations(pool, w.type, x, x_stride, w.ne[0], n_tokens, xq);
    matmul_quantized(pool, w, xq, n_tokens, y, y_stride);
}

}  // namespace edgellm
