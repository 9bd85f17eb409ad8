#include "model/kv_cache.h"

#include <cstring>

#include "edgellm/error.h"

namespace edgellm {

KvCache::KvCache(int64_t n_layer, int64_t n_ctx, int64_t n_embd_kv, TensorType type)
    : n_layer_(n_layer),
      n_ctx_(n_ctx),
      n_embd_kv_(n_embd_kv),
      type_(type),
      row_bytes_(row_size(type, n_embd_kv)),
      data_(new uint8_t[bytes_needed(n_layer, n_ctx, n_embd_kv, type)]),
      cell_pos_((size_t)n_ctx, -1) {
    // Touch every page now so the token loop never page-faults on the cache.
    std::memset(data_.get(), 0, bytes_needed(n_layer, n_ctx, n_embd_kv, type));
}

size_t KvCache::bytes_needed(int64_t n_layer, int64_t n_ctx, int64_t n_embd_kv, TensorType type) {
    return 2 * (size_t)n_layer * (size_t)n_ctx * row_size(type, n_embd_kv);
}

bool KvCache::append(int64_t n) {
    if (n < 0 || n_used_ + n > n_ctx_) return false;
    for (int64_t i = 0; i < n; ++i) cell_pos_[(size_t)(n_used_ + i)] = (int32_t)(n_used_ + i);
    n_used_ += n;
    return true;
}

void KvCache::truncate(int64_t n_keep) {
    if (n_keep < 0) n_keep = 0;
    for (int64_t i = n_keep; i < n_used_; ++i) cell_pos_[(size_t)i] = -1;
    if (n_keep < n_used_) n_used_ = n_keep;
}

}  // namespace edgellm
