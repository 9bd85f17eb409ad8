#include "model/kv_cache.h"

#include <algorithm>
#include <cstring>

#include <sys/mman.h>

#include "edgellm/error.h"

namespace edgellm {

size_t KvLayout::bytes() const {
    size_t total = 0;
    for (int64_t l = 0; l < n_layer; ++l)
        total += (size_t)cells(l) * (row_size(type_k, embd_kv(l)) + row_size(type_v, embd_kv(l)));
    return total;
}

KvCache::KvCache(const KvLayout& layout)
    : l_(layout),
      data_(layout.bytes(), layout.lazy),
      cell_pos_((size_t)layout.n_ctx, -1),
      ring_pos_((size_t)std::max<int64_t>(0, layout.ring_cells), -1) {
    size_t at = 0;
    for (int64_t l = 0; l < l_.n_layer; ++l) {
        k_row_.push_back(row_size(l_.type_k, l_.embd_kv(l)));
        v_row_.push_back(row_size(l_.type_v, l_.embd_kv(l)));
        offset_.push_back(at);
        at += (size_t)n_cells(l) * (k_row_.back() + v_row_.back());
    }
    // Touch every page now so the token loop never page-faults on the cache.
    if (!data_.mapped) std::memset(data_.get(), 0, l_.bytes());
}

KvCache::Buffer::Buffer(size_t n, bool lazy) : bytes(n) {
    if (lazy && n > 0) {
        void* m = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                         -1, 0);
        if (m != MAP_FAILED) {
            p = (uint8_t*)m;
            mapped = true;
            return;
        }
    }
    p = new uint8_t[std::max<size_t>(n, 1)];
}

KvCache::Buffer::~Buffer() {
    if (mapped)
        ::munmap(p, bytes);
    else
        delete[] p;
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

void KvCache::shift(int64_t n_keep, int64_t n_discard,
                    const std::function<void(int64_t layer, uint8_t* k_head)>& rotate) {
    n_keep = std::clamp<int64_t>(n_keep, 0, n_used_);
    n_discard = std::clamp<int64_t>(n_discard, 0, n_used_ - n_keep);
    if (n_discard == 0) return;
    const int64_t n_move = n_used_ - n_keep - n_discard;
    std::vector<uint8_t> tmp;
    for (int64_t l = 0; l < l_.n_layer; ++l) {
        const int64_t n_head = l_.head_kv(l);
        if (n_head == 0) continue;  // (a recurrent layer: no K/V)
        const size_t hbs[2] = {k_row_[(size_t)l] / (size_t)n_head, v_row_[(size_t)l] / (size_t)n_head};
        const size_t cells = (size_t)n_cells(l);
        uint8_t* blocks[2] = {k_rows(l), v_rows(l)};
        if (!is_ring(l)) {
            // Cell = position: each head's later rows slide down over the dropped ones.
            for (int b = 0; b < 2; ++b)
                for (int64_t hh = 0; hh < n_head; ++hh) {
                    const size_t hb = hbs[b];
                    uint8_t* head = blocks[b] + (size_t)hh * cells * hb;
                    std::memmove(head + (size_t)n_keep * hb, head + (size_t)(n_keep + n_discard) * hb,
                                 (size_t)n_move * hb);
                    if (b == 0)
                        for (int64_t c = n_keep; c < n_keep + n_move; ++c) rotate(l, head + (size_t)c * hb);
                }
            continue;
        }
        // A ring: cell = position % ring_cells. Each row goes from its old position's cell
        // to its new one's (distinct: the ring holds fewer than ring_cells positions).
        tmp.assign(blocks[0], blocks[0] + cells * (k_row_[(size_t)l] + v_row_[(size_t)l]));
        const uint8_t* old_blocks[2] = {tmp.data(), tmp.data() + cells * k_row_[(size_t)l]};
        for (size_t c = 0; c < cells; ++c) {
            const int32_t p = ring_pos_[c];
            if (p < 0 || p < n_keep + n_discard) continue;  // empty, kept in place, or dropped
            const size_t to = (size_t)((p - n_discard) % l_.ring_cells);
            for (int b = 0; b < 2; ++b)
                for (int64_t hh = 0; hh < n_head; ++hh) {
                    const size_t hb = hbs[b], head = (size_t)hh * cells * hb;
                    uint8_t* dst = blocks[b] + head + to * hb;
                    std::memcpy(dst, old_blocks[b] + head + c * hb, hb);
                    if (b == 0) rotate(l, dst);
                }
        }
    }
    if (!ring_pos_.empty()) {
        std::vector<int32_t> pos(ring_pos_.size(), -1);
        for (int32_t p : ring_pos_) {
            if (p < 0 || (p >= n_keep && p < n_keep + n_discard)) continue;
            const int32_t np = p < n_keep ? p : p - (int32_t)n_discard;
            pos[(size_t)(np % l_.ring_cells)] = np;
        }
        ring_pos_ = std::move(pos);
    }
    n_used_ -= n_discard;
    for (int64_t i = n_used_; i < l_.n_ctx; ++i) cell_pos_[(size_t)i] = -1;
}

namespace {

// The header of a snapshot: the layout it fits and the positions it holds.
struct KvHeader {
    char magic[8];
    int64_t n_layer, n_ctx, n_embd_kv, n_head_kv, type_k, type_v, ring_cells, window, n_used;
};
constexpr char kKvMagic[8] = {'E', 'D', 'G', 'K', 'V', '0', '0', '3'};

void put_bytes(std::vector<uint8_t>* out, const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out->insert(out->end(), b, b + n);
}

}  // namespace

// Per layer, K then V; each head's used cells (global layers: cells [0, n_used), which
// are contiguous within a head; rings: every cell), so a snapshot of a short prefix is
// small whatever the context size.
void KvCache::snapshot(std::vector<uint8_t>* out) const {
    KvHeader h;
    std::memcpy(h.magic, kKvMagic, sizeof h.magic);
    h.n_layer = l_.n_layer;
    h.n_ctx = l_.n_ctx;
    h.n_embd_kv = l_.n_embd_kv;
    h.n_head_kv = l_.n_head_kv;
    h.type_k = (int64_t)l_.type_k;
    h.type_v = (int64_t)l_.type_v;
    h.ring_cells = l_.ring_cells;
    h.window = l_.window;
    h.n_used = n_used_;
    size_t total = sizeof h + ring_pos_.size() * sizeof(int32_t);
    for (int64_t l = 0; l < l_.n_layer; ++l)
        total += (k_row_[(size_t)l] + v_row_[(size_t)l]) * (size_t)(is_ring(l) ? n_cells(l) : n_used_);
    out->reserve(out->size() + total);
    put_bytes(out, &h, sizeof h);
    if (!ring_pos_.empty()) put_bytes(out, ring_pos_.data(), ring_pos_.size() * sizeof(int32_t));
    for (int64_t l = 0; l < l_.n_layer; ++l) {
        const int64_t n_head = l_.head_kv(l);
        if (n_head == 0) continue;  // (a recurrent layer: no K/V)
        const size_t hbs[2] = {k_row_[(size_t)l] / (size_t)n_head, v_row_[(size_t)l] / (size_t)n_head};
        const size_t cells = (size_t)n_cells(l), used = is_ring(l) ? cells : (size_t)n_used_;
        const uint8_t* blocks[2] = {data_.get() + offset_[(size_t)l],
                                    data_.get() + offset_[(size_t)l] + k_row_[(size_t)l] * cells};
        for (int b = 0; b < 2; ++b)
            for (int64_t hh = 0; hh < n_head; ++hh)
                put_bytes(out, blocks[b] + (size_t)hh * cells * hbs[b], used * hbs[b]);
    }
}

std::string KvCache::restore(std::span<const uint8_t> blob) {
    KvHeader h;
    truncate(0);
    if (blob.size() < sizeof h) return "it is too short";
    std::memcpy(&h, blob.data(), sizeof h);
    if (std::memcmp(h.magic, kKvMagic, sizeof h.magic) != 0) return "it is not a saved KV cache";
    if (h.n_layer != l_.n_layer || h.n_embd_kv != l_.n_embd_kv || h.n_head_kv != l_.n_head_kv ||
        h.type_k != (int64_t)l_.type_k || h.type_v != (int64_t)l_.type_v ||
        h.ring_cells != l_.ring_cells || h.window != l_.window || h.n_ctx != l_.n_ctx)
        return "it was saved with a different model, context size or KV cache type";
    if (h.n_used < 0 || h.n_used > l_.n_ctx) return "it is damaged (position count)";
    size_t need = sizeof h + ring_pos_.size() * sizeof(int32_t);
    for (int64_t l = 0; l < l_.n_layer; ++l)
        need += (k_row_[(size_t)l] + v_row_[(size_t)l]) * (size_t)(is_ring(l) ? n_cells(l) : h.n_used);
    if (blob.size() != need) return blob.size() < need ? "it is too short" : "it is damaged (size)";
    const uint8_t* at = blob.data() + sizeof h;
    std::vector<int32_t> ring(ring_pos_.size());
    if (!ring.empty()) std::memcpy(ring.data(), at, ring.size() * sizeof(int32_t));
    at += ring.size() * sizeof(int32_t);
    for (int64_t l = 0; l < l_.n_layer; ++l) {
        const int64_t n_head = l_.head_kv(l);
        if (n_head == 0) continue;  // (a recurrent layer: no K/V)
        const size_t hbs[2] = {k_row_[(size_t)l] / (size_t)n_head, v_row_[(size_t)l] / (size_t)n_head};
        const size_t cells = (size_t)n_cells(l), used = is_ring(l) ? cells : (size_t)h.n_used;
        uint8_t* blocks[2] = {data_.get() + offset_[(size_t)l],
                              data_.get() + offset_[(size_t)l] + k_row_[(size_t)l] * cells};
        for (int b = 0; b < 2; ++b)
            for (int64_t hh = 0; hh < n_head; ++hh) {
                std::memcpy(blocks[b] + (size_t)hh * cells * hbs[b], at, used * hbs[b]);
                at += used * hbs[b];
            }
    }
    n_used_ = h.n_used;
    for (int64_t i = 0; i < n_used_; ++i) cell_pos_[(size_t)i] = (int32_t)i;
    for (int64_t i = n_used_; i < l_.n_ctx; ++i) cell_pos_[(size_t)i] = -1;
    for (size_t i = 0; i < ring.size(); ++i)
        ring_pos_[i] = ring[i] >= 0 && ring[i] < n_used_ ? ring[i] : -1;
    return {};
}

}  // namespace edgellm
