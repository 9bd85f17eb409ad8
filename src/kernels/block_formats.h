// The block formats of GGUF tensors, byte for byte as llama.cpp writes them. Each struct
// is one block; QK_* is the number of elements it holds. All multi-byte fields are
// little-endian; `fp16_t` is an IEEE half.
#pragma once

#include <cstdint>

#include "kernels/fp16.h"

namespace edgellm {

inline constexpr int QK4_0 = 32;
inline constexpr int QK4_1 = 32;
inline constexpr int QK5_0 = 32;
inline constexpr int QK5_1 = 32;
inline constexpr int QK8_0 = 32;
inline constexpr int QK8_1 = 32;
inline constexpr int QK4_NL = 32;
inline constexpr int QK_K = 256;
inline constexpr int K_SCALE_SIZE = 12;

#pragma pack(push, 1)

// q4_0: x = d * (q - 8)
//  0      2                  18
//  [ d:f16 ][ qs: 16 bytes   ]   qs[j] low nibble = element j, high nibble = element j+16
struct block_q4_0 {
    fp16_t d;
    uint8_t qs[QK4_0 / 2];
};
static_assert(sizeof(block_q4_0) == 18, "q4_0 block size");

// q4_1: x = d * q + m
//  [ d:f16 ][ m:f16 ][ qs: 16 bytes ]   nibbles as in q4_0
struct block_q4_1 {
    fp16_t d;
    fp16_t m;
    uint8_t qs[QK4_1 / 2];
};
static_assert(sizeof(block_q4_1) == 20, "q4_1 block size");

// q5_0: x = d * (q - 16), q = nibble | (bit j of qh) << 4
//  [ d:f16 ][ qh: u32 ][ qs: 16 bytes ]  qh bit j -> element j, bit j+16 -> element j+16
struct block_q5_0 {
    fp16_t d;
    uint8_t qh[4];
    uint8_t qs[QK5_0 / 2];
};
static_assert(sizeof(block_q5_0) == 22, "q5_0 block size");

// q5_1: x = d * q + m, q as in q5_0 (unsigned, 0..31)
struct block_q5_1 {
    fp16_t d;
    fp16_t m;
    uint8_t qh[4];
    uint8_t qs[QK5_1 / 2];
};
static_assert(sizeof(block_q5_1) == 24, "q5_1 block size");

// iq4_nl: x = d * kvalues_iq4nl[q], q a 4-bit index into a non-linear grid (denser near 0)
//  [ d:f16 ][ qs: 16 bytes ]   nibbles as in q4_0
struct block_iq4_nl {
    fp16_t d;
    uint8_t qs[QK4_NL / 2];
};
static_assert(sizeof(block_iq4_nl) == 18, "iq4_nl block size");
inline constexpr int8_t kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                             1,    13,   25,  38,  53,  69,  89,  113};

// q8_0: x = d * q, q int8
//  [ d:f16 ][ qs: 32 x int8 ]
struct block_q8_0 {
    fp16_t d;
    int8_t qs[QK8_0];
};
static_assert(sizeof(block_q8_0) == 34, "q8_0 block size");

// q8_1: activation type for q4_1 / q5_1; s = d * sum(qs) to carry the weights' offset m.
struct block_q8_1 {
    fp16_t d;
    fp16_t s;
    int8_t qs[QK8_1];
};
static_assert(sizeof(block_q8_1) == 36, "q8_1 block size");

// q2_K: 16 sub-blocks of 16; x = d * (scales[i] & 15) * q - dmin * (scales[i] >> 4), q 2-bit
//  0            16               80      82        84
//  [ scales:16 ][ qs: 64 bytes   ][ d:f16 ][ dmin:f16 ]
//  qs: two halves of 32 bytes; in each, bits (2s, 2s+1) of byte l hold element 32*s + l
struct block_q2_K {
    uint8_t scales[QK_K / 16];
    uint8_t qs[QK_K / 4];
    fp16_t d;
    fp16_t dmin;
};
static_assert(sizeof(block_q2_K) == 84, "q2_K block size");

// q3_K: 16 sub-blocks of 16; x = d * (scale6 - 32) * (q2 - (hbit ? 0 : 4))
//  0            32             96            108     110
//  [ hmask:32  ][ qs: 64 bytes ][ scales: 12 ][ d:f16 ]
//  scales: 16 six-bit values: low 4 bits in bytes 0..7 (nibbles), high 2 bits in bytes 8..11
struct block_q3_K {
    uint8_t hmask[QK_K / 8];
    uint8_t qs[QK_K / 4];
    uint8_t scales[12];
    fp16_t d;
};
static_assert(sizeof(block_q3_K) == 110, "q3_K block size");

// q4_K: 8 sub-blocks of 32; x = d * sc[i] * q - dmin * m[i], sc/m 6-bit, q 4-bit
//  0       2          4             16             144
//  [ d:f16 ][ dmin:f16 ][ scales: 12 ][ qs: 128 bytes ]
//  scales: sc[0..3] = b[0..3] & 63, m[0..3] = b[4..7] & 63,
//          sc[4..7] = (b[8..11] & 15) | (b[0..3] >> 6) << 4, m[4..7] = (b[8..11] >> 4) | (b[4..7]
//          >> 6) << 4
//  qs: four chunks of 32 bytes, low nibbles = sub-block 2c, high nibbles = sub-block 2c+1
struct block_q4_K {
    fp16_t d;
    fp16_t dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qs[QK_K / 2];
};
static_assert(sizeof(block_q4_K) == 144, "q4_K block size");

// q5_K: as q4_K plus a fifth bit: qh bit 2c of byte l -> low-nibble element, bit 2c+1 -> high
//  [ d ][ dmin ][ scales: 12 ][ qh: 32 ][ qs: 128 ]
struct block_q5_K {
    fp16_t d;
    fp16_t dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
};
static_assert(sizeof(block_q5_K) == 176, "q5_K block size");

// q6_K: 16 sub-blocks of 16; x = d * scales[i] * (q - 32), q 6-bit = 4 low bits + 2 high bits
//  0              128           192            208     210
//  [ ql: 128 ][ qh: 64 ][ scales: 16 x int8 ][ d:f16 ]
struct block_q6_K {
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    fp16_t d;
};
static_assert(sizeof(block_q6_K) == 210, "q6_K block size");

// q8_K: activation type for the K-quants; d is f32, bsums = sums of each 16 qs.
//  [ d:f32 ][ qs: 256 x int8 ][ bsums: 16 x int16 ]
struct block_q8_K {
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];
};
static_assert(sizeof(block_q8_K) == 292, "q8_K block size");

#pragma pack(pop)

// Unpack sub-block j's 6-bit scale and min from a q4_K / q5_K scales array.
static inline void get_scale_min_k4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

// Unpack the 16 six-bit q3_K scales into signed values (already minus 32).
static inline void unpack_q3_K_scales(const uint8_t* scales, int8_t* out) {
    for (int i = 0; i < 16; ++i) {
        const int lo = i < 8 ? (scales[i] & 0xF) : (scales[i - 8] >> 4);
        const int hi = (scales[8 + (i % 4)] >> (2 * (i / 4))) & 3;
        out[i] = (int8_t)((lo | (hi << 4)) - 32);
    }
}

}  // namespace edgellm
