// SHA-256 (FIPS 180-4), for llama.cpp's identification of a BPE pre-tokenizer (a digest of
// the token ids of a fixed text) and the tests' digests of tensors and metadata.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace edgellm::convert {

class Sha256 {
  public:
    Sha256();
    void add(const void* data, size_t n);
    void add(std::string_view s) { add(s.data(), s.size()); }
    std::string hex();  // (ends the digest)

  private:
    void block(const uint8_t* p);
    uint32_t h_[8];
    uint8_t buf_[64];
    size_t used_ = 0;
    uint64_t total_ = 0;
};

std::string sha256_hex(std::string_view s);

}  // namespace edgellm::convert
