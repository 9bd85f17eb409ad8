// What the forward pass's translation units share: the rows of one sequence in a step, and
// the pool's loop over rows. forward.cpp runs the step; recurrent_blocks.cpp has the blocks
// of the recurrent layers.
#pragma once

#include <cstdint>
#include <span>

#include "compute/thread_pool.h"
#include "model/model_impl.h"

namespace edgellm {

// The rows of one sequence in a forward step: rows [row0, row0 + n) of the batch go to
// positions first_cell.. of `kv`, and through the recurrent layers with `rs` (null: the
// model has none).
struct Segment {
    KvCache* kv;
    int64_t row0, n, first_cell;
    int seq;  // the context's sequence (its LoRA adapters)
    RecurrentState* rs = nullptr;
};

// Run fn(t) for t in [0, n) on the pool (inline when there is one row).
template <typename F>
void for_each_row(ThreadPool& pool, int64_t n, F&& fn) {
    if (n == 1) {
        fn(0);
        return;
    }
    pool.run([&](int ith, int nth) {
        int64_t t0, t1;
        ThreadPool::split(n, ith, nth, &t0, &t1);
        for (int64_t t = t0; t < t1; ++t) fn(t);
    });
}

// LFM2's short convolution block of recurrent layer il over the step's n rows, from their
// normalized inputs (c.xn) to the block's output (c.xn, [n][n_embd]):
//   B, C, x = h in_proj;  y = C * conv(B * x);  out = y out_proj
// with conv the causal depthwise convolution over each sequence's positions, its window
// carried in the sequence's recurrent state (model/recurrent_blocks.cpp).
void short_conv_block(Context::Impl& c, std::span<const Segment> segs, const LayerWeights& l,
                      int64_t il, int64_t n);

}  // namespace edgellm
