// What the x86 mad_rows_q8 kernels (kernels.h) build once per chunk of V rows, for all the
// queries: the codes of rows 4k .. 4k + 3 interleaved, so that lane i of a register holds
// their four codes of element i (the four bytes vpdpbusd, and vpmaddubsw + vpmaddwd, sum
// in one int32 lane), and the rows' scales as f32.
//
// AVX2 instructions only. Internal linkage (an anonymous namespace): each kernel set's
// translation unit is compiled for its own ISA, and one shared out-of-line copy could be
// the wrong ISA's.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/block_formats.h"
#include "kernels/kernels.h"
#include "kernels/q8_queries.h"

namespace edgellm {
namespace {

constexpr int kMadMaxBlocks = (int)(kMaxQ8Hd / 32);

struct MadChunk {
    // group k (rows 4k .. 4k + 3), block b, half h (elements 16h .. 16h + 15): 16 lanes
    // of 4 bytes, lane i holding element 16h + i of the four rows
    alignas(64) uint8_t codes[kMadChunkRows / 4][kMadMaxBlocks][2][64];
    alignas(64) float d[kMadMaxBlocks][kMadChunkRows];  // the rows' scales, 0 past the chunk
};

// Rows 0 .. nr - 1 (nr <= kMadChunkRows, row r at x + bx * r, nb blocks each) into the
// chunk's codes; rows past nr get codes 0.
inline void mad_chunk_codes(const uint8_t* x, size_t bx, int64_t nr, int64_t nb, MadChunk& ch) {
    alignas(32) static const uint8_t zero_row[sizeof(block_q8_0) * kMadMaxBlocks] = {};
    for (int64_t k = (nr + 3) / 4; k < kMadChunkRows / 4; ++k)  // (a short last chunk)
        std::memset(ch.codes[k], 0, sizeof ch.codes[k][0] * (size_t)nb);
    for (int64_t k = 0; k < (nr + 3) / 4; ++k) {
        const uint8_t* rows[4];
        for (int j = 0; j < 4; ++j) rows[j] = 4 * k + j < nr ? x + bx * (size_t)(4 * k + j) : zero_row;
        for (int64_t b = 0; b < nb; ++b) {
            const size_t at = sizeof(block_q8_0) * (size_t)b + offsetof(block_q8_0, qs);
            const __m256i y0 = _mm256_loadu_si256((const __m256i*)(rows[0] + at));
            const __m256i y1 = _mm256_loadu_si256((const __m256i*)(rows[1] + at));
            const __m256i y2 = _mm256_loadu_si256((const __m256i*)(rows[2] + at));
            const __m256i y3 = _mm256_loadu_si256((const __m256i*)(rows[3] + at));
            // per 128-bit lane (elements 0..15, 16..31): bytes of rows 0/1, then 2/3, paired
            const __m256i t0 = _mm256_unpacklo_epi8(y0, y1), t1 = _mm256_unpackhi_epi8(y0, y1);
            const __m256i t2 = _mm256_unpacklo_epi8(y2, y3), t3 = _mm256_unpackhi_epi8(y2, y3);
            // u0: elements 0..3 | 16..19, u1: 4..7 | 20..23, u2: 8..11 | 24..27, u3: 12..15 | 28..31
            const __m256i u0 = _mm256_unpacklo_epi16(t0, t2), u1 = _mm256_unpackhi_epi16(t0, t2);
            const __m256i u2 = _mm256_unpacklo_epi16(t1, t3), u3 = _mm256_unpackhi_epi16(t1, t3);
            uint8_t* h0 = ch.codes[k][b][0];
            uint8_t* h1 = ch.codes[k][b][1];
            _mm256_store_si256((__m256i*)h0, _mm256_permute2x128_si256(u0, u1, 0x20));
            _mm256_store_si256((__m256i*)(h0 + 32), _mm256_permute2x128_si256(u2, u3, 0x20));
            _mm256_store_si256((__m256i*)h1, _mm256_permute2x128_si256(u0, u1, 0x31));
            _mm256_store_si256((__m256i*)(h1 + 32), _mm256_permute2x128_si256(u2, u3, 0x31));
        }
    }
}

}  // namespace
}  // namespace edgellm
