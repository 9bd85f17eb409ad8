#include "model/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "edgellm/error.h"

namespace edgellm {

size_t KvLayout::bytes() const {
    size_t total = 0;
    for (int64_t l = 0; l < n_layer; ++l)
        total += 2 * (size_t)cells(l) * row_size(type, n_embd_kv);
    return total;
}

KvCache::KvCache(const KvLayout& layout)
    : l_(layout),
      row_bytes_(row_size(layout.type, layout.n_embd_kv)),
      data_(new uint8_t[layout.bytes()]),
      cell_pos_((size_t)layout.n_ctx, -1),
      ring_pos_((size_t)std::max<int64_t>(0, layout.ring_cells), -1) {
    size_t at = 0;
    for (int64_t l = 0; l < l_.n_layer; ++l) {
        offset_.push_back(at);
        at += 2 * (size_t)n_cells(l) * row_bytes_;
    }
    // Touch every page now so the token loop never page-faults on the cache.
    std::memset(data_.get(), 0, l_.bytes());
}

bool KvCache::append(int64_t n) {
    if (n < 0 || n_used_ + n > l_.n_ctx) return false;
    for (int64_t i = 0; i < n; ++i) {
        const int64_t pos = n_used_ + i;
        cell_pos_[(size_t)pos] = (int32_t)pos;
        if (!ring_pos_.empty()) ring_pos_[(size_t)(pos % l_.ring_cells)] = (int32_t)pos;
    }
    n_used_ += n;
    return true;
}

int64_t KvCache::truncate(int64_t n_keep) {
    n_keep = std::clamp<int64_t>(n_keep, 0, n_used_);
    if (!ring_pos_.empty() && n_keep > 0 && n_keep < n_used_) {
        // The ring holds positions [n_used - ring_cells, n_used); the window before the
        // kept end must still be there.
        const int64_t oldest = std::max<int64_t>(0, n_used_ - l_.ring_cells);
        if (std::max<int64_t>(0, n_keep - l_.window) < oldest) n_keep = 0;
    }
    for (int64_t i = n_keep; i < n_used_; ++i) {
        cell_pos_[(size_t)i] = -1;
        if (!ring_pos_.empty()) {
            int32_t& slot = ring_pos_[(size_t)(i % l_.ring_cells)];
            if (slot == (int32_t)i) slot = -1;
        }
    }
    n_used_ = n_keep;
    return n_keep;
}

}  // namespace edgellm
