// x16 groups straight to unsigned panels (kernels/x16.h, x16_to_panel): prefill's panel
// GEMM reads weights repacked for decode without taking them back to the file's layout
// first. Byte loops over 64-byte chunks, which the compiler vectorizes; the scales are
// computed with the same float steps as the decoders pack_panel uses, so the panel is
// byte for byte the one pack_panel writes (tests check it).
#include <cstring>

#include "kernels/fp16.h"
#include "kernels/panel.h"
#include "kernels/x16.h"

namespace edgellm {

namespace {

constexpr int R = kX16Rows;

float half_at(const uint8_t* p, int r) {
    fp16_t h;
    std::memcpy(&h, p + 2 * r, 2);
    return fp16_to_f32(h);
}

// Panel group g: its 64-byte steps, its scales and offsets.
struct PanelGroups {
    uint8_t* panel;
    size_t bytes;  // per group
    int G;
    uint8_t* step(int64_t g, int s) const { return panel + bytes * (size_t)g + 64 * (size_t)s; }
    float* scale(int64_t g) const { return (float*)(panel + bytes * (size_t)g + (size_t)R * G); }
    float* offset(int64_t g) const { return scale(g) + R; }
};

// out[i] = (in[i] >> shift & mask) + add, for the 64 bytes of a chunk
inline void bytes_of(const uint8_t* in, int shift, uint8_t mask, uint8_t add, uint8_t* out) {
    for (int i = 0; i < 64; ++i) out[i] = (uint8_t)(((in[i] >> shift) & mask) + add);
}

// Legacy blocks of 32 (q4_0, q5_0): nibbles (+ the fifth bit) + bias, one group per block.
void q4_0_to_panel(const uint8_t* group, int64_t nb, const PanelGroups& p) {
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* x = group + 288 * (size_t)b;
        for (int k = 0; k < 4; ++k) {
            bytes_of(x + 32 + 64 * k, 0, 0x0F, 120, p.step(b, k));  // nibble - 8 + 128
            bytes_of(x + 32 + 64 * k, 4, 0x0F, 120, p.step(b, 4 + k));
        }
        for (int r = 0; r < R; ++r) p.scale(b)[r] = half_at(x, r);
    }
}

// kSpread[m]: byte i = bit i of m, times 16 (the fifth bit of eight q5_0 values).
struct Spread {
    uint64_t v[256];
    constexpr Spread() : v() {
        for (int m = 0; m < 256; ++m)
            for (int i = 0; i < 8; ++i)
                if (m >> i & 1) v[m] |= (uint64_t)16 << (8 * i);
    }
};
constexpr Spread kSpread{};

void q5_0_to_panel(const uint8_t* group, int64_t nb, const PanelGroups& p) {
    constexpr uint64_t kLow = 0x0F0F0F0F0F0F0F0Full, kBias = 0x7070707070707070ull;  // 112
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* x = group + 352 * (size_t)b;
        for (int k = 0; k < 4; ++k) {
            const uint8_t* lo = x + 32 + 16 * k;  // 8 bytes of mask: elements 4k + j
            const uint8_t* hi = lo + 8;           // elements 16 + 4k + j
            const uint8_t* v = x + 96 + 64 * k;
            uint8_t* s0 = p.step(b, k);
            uint8_t* s1 = p.step(b, 4 + k);
            for (int i = 0; i < 8; ++i) {  // nibble | bit << 4, - 16 + 128; no carries
                uint64_t w;
                std::memcpy(&w, v + 8 * i, 8);
                const uint64_t a = (w & kLow) + kSpread.v[lo[i]] + kBias;
                const uint64_t c = ((w >> 4) & kLow) + kSpread.v[hi[i]] + kBias;
                std::memcpy(s0 + 8 * i, &a, 8);
                std::memcpy(s1 + 8 * i, &c, 8);
            }
        }
        for (int r = 0; r < R; ++r) p.scale(b)[r] = half_at(x, r);
    }
}

void q8_0_to_panel(const uint8_t* group, int64_t nb, const PanelGroups& p) {
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* x = group + 544 * (size_t)b;
        std::memcpy(p.step(b, 0), x + 32, 512);  // already q + 128
        for (int r = 0; r < R; ++r) p.scale(b)[r] = half_at(x, r);
    }
}

// q4_K: sub-block 2j + h (h = 0 low nibbles, 1 high) step s = chunk 8j + s; 6-bit scales
// and mins from the row's 12 scale bytes, as the reference decodes them.
void q4_K_to_panel(const uint8_t* group, int64_t nb, const PanelGroups& p) {
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* x = group + 2304 * (size_t)b;
        const uint8_t* qs = x + 256;
        for (int j = 0; j < 4; ++j)
            for (int s = 0; s < 8; ++s) {
                bytes_of(qs + 64 * (8 * j + s), 0, 0x0F, 0, p.step(8 * b + 2 * j, s));
                bytes_of(qs + 64 * (8 * j + s), 4, 0x0F, 0, p.step(8 * b + 2 * j + 1, s));
            }
        for (int r = 0; r < R; ++r) {
            uint8_t q[12];
            for (int c = 0; c < 3; ++c) std::memcpy(q + 4 * c, x + 64 + 64 * c + 4 * r, 4);
            const float d = half_at(x, r), dmin = half_at(x + 32, r);
            for (int j = 0; j < 8; ++j) {
                uint8_t sc, m;
                if (j < 4) {
                    sc = q[j] & 63;
                    m = q[j + 4] & 63;
                } else {
                    sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
                    m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
                }
                p.scale(8 * b + j)[r] = d * (float)sc;
                p.offset(8 * b + j)[r] = -dmin * (float)m;
            }
        }
    }
}

// q2_K: chunk c (of half h = c / 8, position k = c % 8) holds, in bits 2s, element
// 128h + 32s + 4k + i: group 8h + 2s + k / 4, step k % 4.
void q2_K_to_panel(const uint8_t* group, int64_t nb, const PanelGroups& p) {
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* x = group + 1344 * (size_t)b;
        for (int c = 0; c < 16; ++c) {
            const int h = c / 8, k = c % 8;
            for (int s = 0; s < 4; ++s)
                bytes_of(x + 320 + 64 * c, 2 * s, 3, 0,
                         p.step(16 * b + 8 * h + 2 * s + k / 4, k % 4));
        }
        for (int r = 0; r < R; ++r) {
            const float d = half_at(x, r), dmin = half_at(x + 32, r);
            for (int g = 0; g < 16; ++g) {
                const uint8_t sc = x[64 + 64 * (g / 4) + 4 * r + g % 4];
                p.scale(16 * b + g)[r] = d * (float)(sc & 0xF);
                p.offset(16 * b + g)[r] = -dmin * (float)(sc >> 4);
            }
        }
    }
}

// q6_K: for half h and chunk k, A (ql), B (ql + 32) and H (qh) give element
// 128h + 32m + 4k + i (m = 0: A low, H bits 0-1; 1: B low, bits 2-3; 2: A high, bits
// 4-5; 3: B high, bits 6-7): group 8h + 2m + k / 4, step k % 4; 6-bit value - 32 + 128.
void q6_K_to_panel(const uint8_t* group, int64_t nb, const PanelGroups& p) {
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* x = group + 3360 * (size_t)b;
        for (int h = 0; h < 2; ++h)
            for (int k = 0; k < 8; ++k) {
                const uint8_t* A = x + 288 + 192 * (size_t)(8 * h + k);
                const uint8_t* B = A + 64;
                const uint8_t* H = A + 128;
                const int64_t g = 16 * b + 8 * h + k / 4;
                uint8_t* s0 = p.step(g, k % 4);
                uint8_t* s1 = p.step(g + 2, k % 4);
                uint8_t* s2 = p.step(g + 4, k % 4);
                uint8_t* s3 = p.step(g + 6, k % 4);
                for (int i = 0; i < 64; ++i) {
                    s0[i] = (uint8_t)(((A[i] & 0x0F) | ((H[i] << 4) & 0x30)) + 96);
                    s1[i] = (uint8_t)(((B[i] & 0x0F) | ((H[i] << 2) & 0x30)) + 96);
                    s2[i] = (uint8_t)(((A[i] >> 4) | (H[i] & 0x30)) + 96);
                    s3[i] = (uint8_t)(((B[i] >> 4) | ((H[i] >> 2) & 0x30)) + 96);
                }
            }
        for (int r = 0; r < R; ++r) {
            const float d = half_at(x, r);
            for (int g = 0; g < 16; ++g) {
                const int8_t sc = (int8_t)x[32 + 64 * (g / 4) + 4 * r + g % 4];
                p.scale(16 * b + g)[r] = d * (float)sc;
            }
        }
    }
}

}  // namespace

namespace {

// Each type's converter and the panel's shape: its block (of the file), group and whether
// groups carry offsets. One table, so the sign flip below knows what the converter wrote.
struct ToPanel {
    void (*fn)(const uint8_t* group, int64_t nb, const PanelGroups& p);
    int block;
    int G;
    bool has_min;
};

bool to_panel_of(TensorType t, ToPanel* out) {
    switch (t) {
        case TensorType::Q4_0: *out = {q4_0_to_panel, 32, 32, false}; return true;
        case TensorType::Q5_0: *out = {q5_0_to_panel, 32, 32, false}; return true;
        case TensorType::Q8_0: *out = {q8_0_to_panel, 32, 32, false}; return true;
        case TensorType::Q2_K: *out = {q2_K_to_panel, 256, 16, true}; return true;
        case TensorType::Q4_K: *out = {q4_K_to_panel, 256, 32, true}; return true;
        case TensorType::Q6_K: *out = {q6_K_to_panel, 256, 16, false}; return true;
        default: return false;
    }
}

}  // namespace

void to_panel_act_pairs(const PanelActTile* tiles, int64_t n_blocks, int8_t* pairs) {
    for (int64_t q = 0; q < n_blocks / 2; ++q)
        for (int t = 0; t < kPanelTileTokens; ++t) {
            int8_t* pair = pairs + kPanelPairBytes * (size_t)q;
            int8_t* row = pair + 64 * (size_t)t;
            std::memcpy(row, tiles[2 * q].qs[t], 32);
            std::memcpy(row + 32, tiles[2 * q + 1].qs[t], 32);
            int32_t s0 = 0, s1 = 0;  // at most 32 * 127 in magnitude: an int16 each
            for (int i = 0; i < 32; ++i) {
                s0 += row[i];
                s1 += row[32 + i];
            }
            const uint32_t both = (uint32_t)(uint16_t)(int16_t)s0 | (uint32_t)(uint16_t)(int16_t)s1 << 16;
            std::memcpy(pair + 16 * 64 + 4 * t, &both, 4);
        }
}

bool x16_to_panel(TensorType t, const uint8_t* group, int64_t n, uint8_t* panel, bool unsigned_q) {
    ToPanel tp;
    if (!to_panel_of(t, &tp)) return false;
    const PanelGroups p{panel, panel_group_bytes(R, tp.G, tp.has_min), tp.G};
    tp.fn(group, n / tp.block, p);
    // Signed panels: u = q + 128 has the sign bit flipped; types with offsets have q >= 0,
    // the same byte either way.
    if (!unsigned_q && !tp.has_min)
        for (int64_t g = 0; g < n / tp.G; ++g) {
            uint8_t* q = p.step(g, 0);  // (held: a byte store could alias p)
            for (int i = 0; i < R * tp.G; ++i) q[i] ^= 0x80;
        }
    return true;
}

bool x16_has_panel(TensorType t) {
    ToPanel tp;
    return to_panel_of(t, &tp);
}

}  // namespace edgellm
