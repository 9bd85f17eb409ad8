// Small AVX2 helpers shared by the AVX2 kernel files. Include only from translation units
// compiled with -mavx2 -mfma -mf16c.
#pragma once

#include <immintrin.h>

#include "kernels/fp16.h"

namespace edgellm::avx2 {

inline __m256i load256(const void* p) {
    return _mm256_loadu_si256((const __m256i*)p);
}
inline __m128i load128(const void* p) {
    return _mm_loadu_si128((const __m128i*)p);
}

// One half -> float with F16C (exact, same bits as fp16_to_f32 for non-NaN inputs).
inline float h2f(fp16_t h) {
    return _cvtsh_ss(h);
}
// One float -> half, round to nearest even (same as f32_to_fp16 for non-NaN inputs).
inline fp16_t f2h(float f) {
    return (fp16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}

// Sum of the 8 lanes: high half + low half, then pairs, then the last two.
inline float hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

inline int hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

}  // namespace edgellm::avx2
