#include "model/recurrent_state.h"

#include <algorithm>
#include <cstring>

#include "edgellm/error.h"

namespace edgellm {

int64_t RecurrentLayout::n_recurrent() const {
    return (int64_t)std::count(layers.begin(), layers.end(), (uint8_t)1);
}

RecurrentLayout recurrent_layout(const HParams& h) {
    RecurrentLayout l;
    if (!h.has_recurrent()) return l;
    for (int64_t il = 0; il < h.n_layer; ++il) l.layers.push_back(h.is_recurrent(il) ? 1 : 0);
    l.conv_rows = std::max<int64_t>(0, h.conv_kernel - 1);
    l.conv_channels = h.conv_channels;
    l.heads = h.rs_heads;
    l.head_k = h.rs_head_k;
    l.head_v = h.rs_head_v;
    return l;
}

RecurrentState::RecurrentState(const RecurrentLayout& layout)
    : l_(layout), data_(layout.bytes() / sizeof(float), 0.0f) {
    size_t at = 0;
    for (uint8_t r : l_.layers) index_.push_back(r ? at++ : (size_t)-1);
}

void RecurrentState::clear() {
    std::fill(data_.begin(), data_.end(), 0.0f);
}

bool RecurrentState::load(std::span<const float> from) {
    if (from.size() != data_.size()) return false;
    std::copy(from.begin(), from.end(), data_.begin());
    return true;
}

namespace {

// The header of a snapshot: the layout it fits.
struct RsHeader {
    char magic[8];
    int64_t n_layer, n_recurrent, conv_rows, conv_channels, heads, head_k, head_v;
};
constexpr char kRsMagic[8] = {'E', 'D', 'G', 'R', 'S', '0', '0', '1'};

RsHeader header_of(const RecurrentLayout& l) {
    RsHeader h;
    std::memcpy(h.magic, kRsMagic, sizeof h.magic);
    h.n_layer = (int64_t)l.layers.size();
    h.n_recurrent = l.n_recurrent();
    h.conv_rows = l.conv_rows;
    h.conv_channels = l.conv_channels;
    h.heads = l.heads;
    h.head_k = l.head_k;
    h.head_v = l.head_v;
    return h;
}

}  // namespace

size_t RecurrentState::snapshot_bytes() const {
    return sizeof(RsHeader) + bytes();
}

void RecurrentState::snapshot(std::vector<uint8_t>* out) const {
    const RsHeader h = header_of(l_);
    const auto* hb = reinterpret_cast<const uint8_t*>(&h);
    const auto* db = reinterpret_cast<const uint8_t*>(data_.data());
    out->reserve(out->size() + sizeof h + bytes());
    out->insert(out->end(), hb, hb + sizeof h);
    out->insert(out->end(), db, db + bytes());
}

std::string RecurrentState::restore(std::span<const uint8_t> blob) {
    clear();
    RsHeader h;
    if (blob.size() < sizeof h) return "it is too short (recurrent state)";
    std::memcpy(&h, blob.data(), sizeof h);
    if (std::memcmp(h.magic, kRsMagic, sizeof h.magic) != 0)
        return "it is not a saved recurrent state";
    const RsHeader want = header_of(l_);
    if (std::memcmp(&h, &want, sizeof h) != 0)
        return "its recurrent state was saved with a different model";
    if (blob.size() != sizeof h + bytes())
        return blob.size() < sizeof h + bytes() ? "it is too short (recurrent state)"
                                                : "it is damaged (recurrent state size)";
    std::memcpy(data_.data(), blob.data() + sizeof h, bytes());
    return {};
}

}  // namespace edgellm
