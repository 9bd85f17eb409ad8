// The recurrent state of one sequence: what a hybrid model's recurrent layers (LFM2's short
// convolutions, Qwen3.5's Gated DeltaNet) keep instead of K/V. Each such layer keeps a fixed
// number of floats whatever the positions seen, allocated once beside the sequence's KV
// cache (Context::Impl holds one of each per sequence):
//
//   conv window  conv_rows x conv_channels   the inputs of the causal depthwise convolution
//                                            at the last conv_rows (= kernel - 1) positions,
//                                            the oldest row first, zeros before position 0
//                                            (compute/ops.h, conv1d_causal, reads and
//                                            advances it)
//   matrix       heads x head_k x head_v     the recurrent matrix of each head (DeltaNet; its
//                                            op defines the order of a head's elements)
//
// Unlike the KV cache it cannot go back: it has folded in every position it has seen. What it
// offers instead is a copy of its bytes (save / load), a fixed size per layer, so a caller
// can take a checkpoint at a position and come back to it (Context::save_recurrent).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "edgellm/model.h"

namespace edgellm {

struct RecurrentLayout {
    std::vector<uint8_t> layers;  // per layer of the model: 1 when it keeps a state
    int64_t conv_rows = 0, conv_channels = 0;
    int64_t heads = 0, head_k = 0, head_v = 0;
    int64_t conv_floats() const { return conv_rows * conv_channels; }
    int64_t matrix_floats() const { return heads * head_k * head_v; }
    int64_t n_recurrent() const;
    // Bytes of one sequence's state (0: a model without recurrent layers).
    size_t bytes() const { return (size_t)n_recurrent() * (size_t)(conv_floats() + matrix_floats()) * sizeof(float); }
    bool operator==(const RecurrentLayout&) const = default;
};

RecurrentLayout recurrent_layout(const HParams& h);

class RecurrentState {
  public:
    explicit RecurrentState(const RecurrentLayout& layout);

    const RecurrentLayout& layout() const { return l_; }
    size_t bytes() const { return data_.size() * sizeof(float); }
    // Layer il's window and matrix (il must keep a state).
    float* conv(int64_t il) { return data_.data() + offset(il); }
    float* matrix(int64_t il) { return data_.data() + offset(il) + l_.conv_floats(); }
    const float* conv(int64_t il) const { return data_.data() + offset(il); }
    const float* matrix(int64_t il) const { return data_.data() + offset(il) + l_.conv_floats(); }

    // Every layer's state before position 0 (zeros).
    void clear();
    // All of it, as floats, and back (a copy of the same layout's state: no allocation when
    // `out` already has the room, for checkpoints taken in the token loop).
    std::span<const float> floats() const { return data_; }
    void save(std::vector<float>* out) const { out->assign(data_.begin(), data_.end()); }
    // false (and nothing changed) when `from` is not of this layout's size.
    bool load(std::span<const float> from);

    // As bytes a file keeps (Context::snapshot): a header naming the layout, then the floats
    // (snapshot_bytes() of them, appended to out).
    void snapshot(std::vector<uint8_t>* out) const;
    size_t snapshot_bytes() const;
    // "" or why not (another layout, short or damaged); on failure the state is cleared.
    std::string restore(std::span<const uint8_t> blob);

  private:
    size_t offset(int64_t il) const {
        EDGELLM_ASSERT(il >= 0 && il < (int64_t)index_.size() && index_[(size_t)il] != (size_t)-1,
                       "a layer with a recurrent state");
        return index_[(size_t)il] * (size_t)(l_.conv_floats() + l_.matrix_floats());
    }
    RecurrentLayout l_;
    std::vector<size_t> index_;  // per layer: its place among the recurrent ones
    std::vector<float> data_;
};

}  // namespace edgellm
