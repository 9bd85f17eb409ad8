#include "modelfile/convert/spm_model.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>

#include "edgellm/error.h"

namespace edgellm::convert {

namespace {

// A protobuf message's fields, one after another.
class Wire {
  public:
    Wire(const std::string& file, const uint8_t* p, size_t n, size_t base)
        : file_(file), p_(p), n_(n), base_(base) {}
    bool done() const { return pos_ >= n_; }
    uint64_t varint() {
        uint64_t v = 0;
        for (int shift = 0; shift < 64; shift += 7) {
            if (pos_ >= n_) fail("a varint runs past the end");
            const uint8_t b = p_[pos_++];
            v |= (uint64_t)(b & 0x7f) << shift;
            if (!(b & 0x80)) return v;
        }
        fail("a varint is too long");
    }
    // The bytes of a length-delimited field.
    std::pair<const uint8_t*, size_t> bytes() {
        const uint64_t len = varint();
        if (len > n_ - pos_) fail("a field of " + std::to_string(len) + " bytes runs past the end");
        const uint8_t* at = p_ + pos_;
        pos_ += (size_t)len;
        return {at, (size_t)len};
    }
    uint32_t fixed32() {
        if (n_ - pos_ < 4) fail("a 32-bit field runs past the end");
        uint32_t v;
        std::memcpy(&v, p_ + pos_, 4);
        pos_ += 4;
        return v;
    }
    void skip(int wire_type) {
        switch (wire_type) {
            case 0: varint(); break;
            case 1:
                if (n_ - pos_ < 8) fail("a 64-bit field runs past the end");
                pos_ += 8;
                break;
            case 2: bytes(); break;
            case 5: fixed32(); break;
            default: fail("wire type " + std::to_string(wire_type) + " is not protobuf's");
        }
    }
    size_t offset() const { return base_ + pos_; }
    [[noreturn]] void fail(const std::string& why) const {
        throw Error(file_ + ": not a SentencePiece model: at offset " + std::to_string(base_ + pos_) + ", " + why);
    }

  private:
    std::string file_;
    const uint8_t* p_;
    size_t n_, base_, pos_ = 0;
};

}  // namespace

std::vector<SpmPiece> read_spm_model(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(path + ": cannot be read");
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string data = ss.str();
    Wire top(path, (const uint8_t*)data.data(), data.size(), 0);
    std::vector<SpmPiece> pieces;
    while (!top.done()) {
        const uint64_t key = top.varint();
        if (key >> 3 != 1 || (key & 7) != 2) {  // (only field 1, the pieces, matters)
            top.skip((int)(key & 7));
            continue;
        }
        const size_t at = top.offset();
        const auto [p, n] = top.bytes();
        Wire m(path, p, n, at);
        SpmPiece piece;
        while (!m.done()) {
            const uint64_t k = m.varint();
            if (k == (1 << 3 | 2)) {
                const auto [s, len] = m.bytes();
                piece.piece.assign((const char*)s, len);
            } else if (k == (2 << 3 | 5)) {
                const uint32_t bits = m.fixed32();
                std::memcpy(&piece.score, &bits, 4);
            } else if (k == (3 << 3 | 0)) {
                piece.type = (int)m.varint();
            } else {
                m.skip((int)(k & 7));
            }
        }
        pieces.push_back(std::move(piece));
    }
    if (pieces.empty()) throw Error(path + ": a SentencePiece model without pieces");
    return pieces;
}

}  // namespace edgellm::convert
