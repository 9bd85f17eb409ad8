// A fast 64-bit digest of bytes (a multiply-xorshift over 8-byte words), for checksums of
// saved caches and a model file's identity: it catches damage and tells files apart; it is
// not a defence against someone forging a file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace edgellm {

class Digest {
  public:
    explicit Digest(uint64_t seed = 0x9e3779b97f4a7c15ull) : h_(seed) {}
    void add(const void* data, size_t n) {
        const auto* p = static_cast<const uint8_t*>(data);
        size_t i = 0;
        for (; i + 8 <= n; i += 8) {
            uint64_t w;
            std::memcpy(&w, p + i, 8);
            mix(w);
        }
        uint64_t tail = 0;
        std::memcpy(&tail, p + i, n - i);
        mix(tail ^ ((uint64_t)(n - i) << 56));
        mix(n);
    }
    void add(std::span<const uint8_t> s) { add(s.data(), s.size()); }
    uint64_t value() const {
        uint64_t h = h_;
        h ^= h >> 33;
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 33;
        return h;
    }

  private:
    void mix(uint64_t w) {
        w *= 0x87c37b91114253d5ull;
        w = (w << 31) | (w >> 33);
        h_ ^= w * 0x4cf5ad432745937full;
        h_ = ((h_ << 27) | (h_ >> 37)) * 5 + 0x52dce729;
    }
    uint64_t h_;
};

}  // namespace edgellm
