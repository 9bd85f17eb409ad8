// A 16 x 16 transposition of 32-bit elements in 16 zmm registers, for the translation units
// compiled for AVX-512 (avx512.cpp, avx512_x16.cpp, amx_panel.cpp) and only those: the
// functions are static, so each keeps its own copy and none built with these flags can
// serve another unit (see avx512.cpp).
#pragma once

#include "kernels/x86/immintrin_quiet.h"

namespace edgellm::avx512 {

// v[i] element j <- v[j] element i.
static inline void transpose16(__m512i v[16]) {
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) {  // lane k: (a[4k], b[4k], a[4k+1], b[4k+1]) / (4k+2, 4k+3)
        t[i] = _mm512_unpacklo_epi32(v[i], v[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(v[i], v[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {  // v[i + m] lane k = column 4k + m of rows i .. i + 3
        v[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        v[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        v[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        v[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int h = 0; h < 16; h += 8)  // then a 4 x 4 transposition of the 128-bit lanes
        for (int i = 0; i < 4; ++i) {
            t[h + i] = _mm512_shuffle_i32x4(v[h + i], v[h + i + 4], 0x88);
            t[h + i + 4] = _mm512_shuffle_i32x4(v[h + i], v[h + i + 4], 0xdd);
        }
    for (int i = 0; i < 8; ++i) {
        v[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
        v[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
    }
}

static inline void transpose16(__m512 r[16]) {
    __m512i v[16];
    for (int i = 0; i < 16; ++i) v[i] = _mm512_castps_si512(r[i]);
    transpose16(v);
    for (int i = 0; i < 16; ++i) r[i] = _mm512_castsi512_ps(v[i]);
}

}  // namespace edgellm::avx512
