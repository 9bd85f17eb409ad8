#include "compute/matmul.h"

#include <algorithm>

#include "edgellm/error.h"
#include "kernels/kernels.h"
#include "kernels/panel.h"

namespace edgellm {

namespace {

constexpr size_t kLine = 64;

size_t round_up(size_t v) {
    return (v + kLine - 1) / kLine * kLine;
}

// Whether a batch of n_rows activation rows for weights of this vec_dot_type gets panel
// blocks (the decision quantize_activations and matmul_quantized both make).
bool panel_batch(TensorType act_type, int64_t n, int64_t n_rows) {
    return n_rows >= kPanelMinTokens && panel_kernel().gemm != nullptr && n % 32 == 0 &&
           panel_act_supported(act_type);
}

size_t pack_tmp_bytes(int64_t n) {
    return round_up((size_t)n + 2 * sizeof(float) * (size_t)(n / 16) + 16);
}

// Where the panel blocks and the per-thread panels start in the scratch.
struct PanelScratch {
    PanelActBlock* act;
    uint8_t* threads;
    size_t per_thread;
};
PanelScratch panel_scratch(void* xq, TensorType act_type, int64_t n, int64_t n_rows) {
    const size_t q_bytes = round_up(row_size(act_type, n) * (size_t)n_rows);
    const size_t act_bytes = sizeof(PanelActBlock) * (size_t)(n / 32) * (size_t)n_rows;
    uint8_t* base = (uint8_t*)(((uintptr_t)xq + kLine - 1) / kLine * kLine);
    return {(PanelActBlock*)(base + q_bytes), base + q_bytes + act_bytes,
            round_up(panel_bytes_max(panel_kernel().rows, n)) + pack_tmp_bytes(n)};
}

}  // namespace

size_t activation_buffer_size(TensorType weight_type, int64_t n, int64_t n_rows, int n_threads) {
    const TensorType vdt = type_kernels(weight_type).vec_dot_type;
    const size_t q_bytes = row_size(vdt, n) * (size_t)n_rows;
    if (!panel_batch(vdt, n, n_rows)) return q_bytes;
    const size_t per_thread =
        round_up(panel_bytes_max(panel_kernel().rows, n)) + pack_tmp_bytes(n);
    return kLine + round_up(q_bytes) + sizeof(PanelActBlock) * (size_t)(n / 32) * (size_t)n_rows +
           per_thread * (size_t)std::max(1, n_threads);
}

void quantize_activations(ThreadPool& pool, TensorType weight_type, const float* x,
                          int64_t x_stride, int64_t n, int64_t n_rows, void* xq) {
    const TypeKernels& vk = type_kernels(type_kernels(weight_type).vec_dot_type);
    EDGELLM_ASSERT(vk.from_float != nullptr, "activation type has no quantizer");
    const size_t row_bytes = row_size(type_kernels(weight_type).vec_dot_type, n);
    const TensorType vdt = type_kernels(weight_type).vec_dot_type;
    PanelActBlock* act = panel_batch(vdt, n, n_rows) ? panel_scratch(xq, vdt, n, n_rows).act
                                                     : nullptr;
    auto body = [&](int ith, int nth) {
        int64_t r0, r1;
        ThreadPool::split(n_rows, ith, nth, &r0, &r1);
        for (int64_t r = r0; r < r1; ++r) {
            uint8_t* q = (uint8_t*)xq + (size_t)r * row_bytes;
            vk.from_float(x + r * x_stride, q, n);
            if (act) to_panel_act(vdt, q, n, act + (size_t)r * (size_t)(n / 32));
        }
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
    if (k.unpack_i8 && n % k.i8_group == 0 && panel_batch(k.vec_dot_type, n, n_tokens)) {
        // Panel GEMM: each thread unpacks P weight rows at a time into its own panel and
        // multiplies it with every token.
        const PanelKernel& pk = panel_kernel();
        const PanelScratch ps = panel_scratch(const_cast<void*>(xq), k.vec_dot_type, n, n_tokens);
        const int P = pk.rows;
        const int64_t n_panels = (n_rows + P - 1) / P;
        pool.run([&](int ith, int nth) {
            int64_t p0, p1;
            ThreadPool::split(n_panels, ith, nth, &p0, &p1);
            uint8_t* panel = ps.threads + ps.per_thread * (size_t)ith;
            uint8_t* tmp = panel + round_up(panel_bytes_max(P, n));
            for (int64_t p = p0; p < p1; ++p) {
                const int64_t r0 = p * P;
                const int rows = (int)std::min<int64_t>(P, n_rows - r0);
                pack_panel(k, (const uint8_t*)w.data + (size_t)r0 * w_row_bytes, w_row_bytes,
                           rows, P, n, panel, tmp);
                pk.gemm(panel, n / k.i8_group, k.i8_group, k.i8_min, ps.act, (size_t)(n / 32),
                        n_tokens, y + r0, (size_t)y_stride, rows);
            }
        });
        return;
    }
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
