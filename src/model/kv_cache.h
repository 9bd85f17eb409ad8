// The KV cache of one sequence: per layer, a block of keys and one of values, allocated
// once. Within a block the model keeps the cache head-major (src/model/forward.cpp):
// KV head h's row for cell c at h * n_ctx * head_bytes + c * head_bytes, so each head's
// cells are contiguous for attention; row_bytes() is all heads' bytes for one cell. Cell c holds position cell_pos[c]; positions are appended in order and
// can be dropped from the end (truncate) for prefix reuse and speculative roll-back.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "edgellm/tensor_type.h"

namespace edgellm {

class KvCache {
  public:
    // Rows of n_embd_kv elements of `type` (F16 or Q8_0).
    KvCache(int64_t n_layer, int64_t n_ctx, int64_t n_embd_kv, TensorType type);
    static size_t bytes_needed(int64_t n_layer, int64_t n_ctx, int64_t n_embd_kv, TensorType type);

    TensorType type() const { return type_; }
    int64_t n_ctx() const { return n_ctx_; }
    int64_t n_used() const { return n_used_; }
    size_t row_bytes() const { return row_bytes_; }
    size_t total_bytes() const { return bytes_needed(n_layer_, n_ctx_, n_embd_kv_, type_); }

    uint8_t* k_rows(int64_t layer) { return data_.get() + (size_t)(2 * layer) * layer_bytes(); }
    uint8_t* v_rows(int64_t layer) { return data_.get() + (size_t)(2 * layer + 1) * layer_bytes(); }
    const int32_t* cell_pos() const { return cell_pos_.data(); }

    // Claim cells for positions n_used() .. n_used()+n-1; false when they do not fit.
    bool append(int64_t n);
    void truncate(int64_t n_keep);

  private:
    size_t layer_bytes() const { return row_bytes_ * (size_t)n_ctx_; }
    int64_t n_layer_, n_ctx_, n_embd_kv_;
    TensorType type_;
    size_t row_bytes_;
    int64_t n_used_ = 0;
    std::unique_ptr<uint8_t[]> data_;
    std::vector<int32_t> cell_pos_;
};

}  // namespace edgellm
