// The blocks of hybrids' recurrent layers, which carry a state per sequence
// (model/recurrent_state.h) instead of attending over a KV cache.
#include "compute/matmul.h"
#include "compute/ops.h"
#include "model/forward_step.h"

namespace edgellm {

// As llama.cpp's src/models/lfm2.cpp (build_shortconv_block): in_proj's output is B, C and
// x one after the other, the convolution ggml_ssm_conv over the window and B * x.
void short_conv_block(Context::Impl& c, std::span<const Segment> segs, const LayerWeights& l,
                      int64_t il, int64_t n) {
    const HParams& h = c.model->hparams();
    ThreadPool& pool = *c.pool;
    const int64_t E = h.n_embd, K = h.conv_kernel, W = 3 * E;
    auto trace = [&](const char* name, const float* data, int64_t width) {
        if (c.trace) c.trace(name, (int)il, data, n, width);
    };
    matmul(pool, l.conv_in_proj, c.xn, E, n, c.act_q, c.conv_in, W);
    trace("conv_in_proj", c.conv_in, W);
    // B * x, over the normalized input (no longer needed)
    for_each_row(pool, n, [&](int64_t t) {
        const float* r = c.conv_in + t * W;
        float* bx = c.xn + t * E;
        for (int64_t i = 0; i < E; ++i) bx[i] = r[i] * r[2 * E + i];
    });
    // Each sequence's rows through the convolution with its own window; the channels are
    // independent, so the threads split them.
    for (const Segment& sg : segs) {
        float* window = sg.rs->conv(il);
        const float* in = c.xn + sg.row0 * E;
        float* out = c.conv_io + sg.row0 * E;
        pool.run([&](int ith, int nth) {
            int64_t c0, c1;
            ThreadPool::split(E, ith, nth, &c0, &c1);
            if (c1 > c0)
                conv1d_causal(in + c0, E, sg.n, c1 - c0, l.conv_kernel + c0 * K, K, window + c0, E,
                              out + c0, E, false);
        });
    }
    trace("conv_conv", c.conv_io, E);
    for_each_row(pool, n, [&](int64_t t) {
        float* y = c.conv_io + t * E;
        const float* gate = c.conv_in + t * W + E;  // C
        for (int64_t i = 0; i < E; ++i) y[i] *= gate[i];
    });
    matmul(pool, l.conv_out_proj, c.conv_io, E, n, c.act_q, c.xn, E);
    trace("conv_out_proj", c.xn, E);
}

}  // namespace edgellm
