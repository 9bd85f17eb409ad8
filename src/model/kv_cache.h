// The KV cache of one sequence: per layer, a block of keys and one of values, allocated
// once. Within a block the model keeps the cache head-major (src/model/forward.cpp):
// KV head h's row for cell c at h * n_cells(layer) * head_bytes + c * head_bytes, so each
// head's cells are contiguous for attention; k_row_bytes(layer) is all heads' key bytes for
// one cell (v_row_bytes(layer) their values': K and V may have different types). Layers
// may differ in width (Gemma 4's sliding and global layers); layers that read another
// layer's K/V (Gemma 4's shared layers) are not in the cache at all; a hybrid's recurrent
// layers are, with no heads and no bytes (their state is model/recurrent_state.h's).
//
// Global layers have one cell per position (cell = position). Sliding-window layers
// (Gemma 3) may instead keep a ring of ring_cells cells (cell = position % ring_cells):
// a window of W positions read by batches of up to B tokens needs W + B cells, whatever
// the context. Positions are appended in order and can be dropped from the end
// (truncate) for prefix reuse and speculative roll-back; a ring can only go back as far
// as it still holds the window before the kept end.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "edgellm/model.h"
#include "edgellm/tensor_type.h"

namespace edgellm {

// Orders of the Hadamard turns applied to a quantized cache's keys (with the queries) and
// values (and attention's output turned back), 0 for none (compute/ops.h, hadamard): as
// llama.cpp, K in blocks of the largest power of two dividing the head, V in blocks of
// 64, when the head is a multiple of 64. Layer il's (its head).
struct KvRotation {
    int k = 0, v = 0;
};
KvRotation kv_rotation(const HParams& h, int64_t il, TensorType k, TensorType v);

struct KvLayout {
    int64_t n_layer = 0;     // layers with a cache of their own
    int64_t n_ctx = 0;
    int64_t n_embd_kv = 0;   // K (or V) values of one cell, all heads
    int64_t n_head_kv = 1;   // heads in a row (the cache is head-major within a layer)
    // Per layer where the layers differ (empty: every layer the two above).
    std::vector<int64_t> layer_embd_kv, layer_head_kv;
    int64_t embd_kv(int64_t layer) const {
        return layer < (int64_t)layer_embd_kv.size() ? layer_embd_kv[(size_t)layer] : n_embd_kv;
    }
    int64_t head_kv(int64_t layer) const {
        return layer < (int64_t)layer_head_kv.size() ? layer_head_kv[(size_t)layer] : n_head_kv;
    }
    TensorType type_k = TensorType::F16, type_v = TensorType::F16;
    std::vector<bool> ring;  // per layer: a ring of ring_cells cells (empty: none)
    int64_t ring_cells = 0;
    int64_t window = 0;      // positions a ring layer's queries see (<= ring_cells)
    // Pages taken as cells are first written, instead of all touched at creation (so the
    // token loop never faults): for slots that may each hold the whole context
    // (--kv-unified) while memory follows the positions in use.
    bool lazy = false;
    int64_t cells(int64_t layer) const {
        return layer < (int64_t)ring.size() && ring[(size_t)layer] && ring_cells < n_ctx
                   ? ring_cells
                   : n_ctx;
    }
    size_t bytes() const;
};

class KvCache {
  public:
    explicit KvCache(const KvLayout& layout);
    static size_t bytes_needed(const KvLayout& layout) { return layout.bytes(); }

    TensorType type_k() const { return l_.type_k; }
    TensorType type_v() const { return l_.type_v; }
    int64_t n_ctx() const { return l_.n_ctx; }
    int64_t n_used() const { return n_used_; }
    size_t k_row_bytes(int64_t layer = 0) const { return k_row_[(size_t)layer]; }
    size_t v_row_bytes(int64_t layer = 0) const { return v_row_[(size_t)layer]; }
    int64_t n_layer() const { return l_.n_layer; }
    size_t total_bytes() const { return l_.bytes(); }

    // Cells of a layer, the cell of a position in it, and each cell's position (-1: empty).
    int64_t n_cells(int64_t layer) const { return l_.cells(layer); }
    bool is_ring(int64_t layer) const { return n_cells(layer) < l_.n_ctx; }
    int64_t cell_of(int64_t layer, int64_t pos) const {
        return is_ring(layer) ? pos % l_.ring_cells : pos;
    }
    const int32_t* cell_pos(int64_t layer) const {
        return is_ring(layer) ? ring_pos_.data() : cell_pos_.data();
    }
    // Cells attention looks at in a layer: the used ones (global), the whole ring.
    int64_t n_cells_used(int64_t layer) const {
        return is_ring(layer) ? l_.ring_cells : n_used_;
    }

    uint8_t* k_rows(int64_t layer) { return data_.get() + offset_[(size_t)layer]; }
    uint8_t* v_rows(int64_t layer) {
        return data_.get() + offset_[(size_t)layer] + k_row_[(size_t)layer] * (size_t)n_cells(layer);
    }

    // Claim cells for positions n_used() .. n_used()+n-1; false when they do not fit.
    bool append(int64_t n);
    // Keep positions [0, n_keep) and drop the rest. Returns how many are kept: n_keep, or
    // 0 when a ring no longer holds the window before n_keep (then everything goes).
    int64_t truncate(int64_t n_keep);

    // Drop positions [n_keep, n_keep + n_discard) and number the later ones n_discard lower:
    // their rows move to the cells of their new positions, and rotate(layer, k) is called
    // on each moved key row (one head, at its new place) to turn its RoPE angle back by
    // n_discard positions. Positions a ring no longer holds stay dropped.
    void shift(int64_t n_keep, int64_t n_discard,
               const std::function<void(int64_t layer, uint8_t* k_head)>& rotate);

    // The used positions' K/V (for a ring: the whole ring and its positions), appended to
    // out in a form restore() accepts only into a cache of the same layout.
    void snapshot(std::vector<uint8_t>* out) const;
    // Replace the contents with what snapshot() wrote; "" on success, else why not (a
    // different layout, a short or damaged blob). On failure the cache is left empty.
    std::string restore(std::span<const uint8_t> blob);

  private:
    KvLayout l_;
    std::vector<size_t> k_row_, v_row_;  // per layer
    int64_t n_used_ = 0;
    std::vector<size_t> offset_;  // per layer: its K block; V follows
    // The blocks: new[] and touched, or (lazy) an anonymous mapping whose pages the kernel
    // supplies, zeroed, when first written.
    struct Buffer {
        uint8_t* p = nullptr;
        size_t bytes = 0;
        bool mapped = false;
        Buffer(size_t n, bool lazy);
        ~Buffer();
        Buffer(const Buffer&) = delete;
        Buffer& operator=(const Buffer&) = delete;
        uint8_t* get() const { return p; }
    };
    Buffer data_;
    std::vector<int32_t> cell_pos_;  // global layers
    std::vector<int32_t> ring_pos_;  // ring layers
};

}  // namespace edgellm
