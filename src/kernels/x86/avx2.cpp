#include <immintrin.h>

#include "kernels/x86/x86_kernels.h"

namespace edgellm {

void fill_avx2(TypeKernels* table) {
    fill_avx2_legacy(table);
    fill_avx2_kquants(table);
    fill_x16_avx2(table);
}

}  // namespace edgellm

namespace edgellm {

// AVX2's int8 dot product (no VNNI): vpmaddubsw (u8 x s8 pairs -> s16), vpmaddwd by ones
// (-> s32 per 4 bytes), vpaddd; four chains, each with its own copy of the operand (an empty
// asm says the copies change, so no product is computed once for all chains or iterations).
uint64_t int8_peak_avx2(uint64_t iters, const int8_t* buf, int64_t* lanes_sum) {
    __m256i a0 = _mm256_loadu_si256((const __m256i*)buf), a1 = a0, a2 = a0, a3 = a0;
    const __m256i b = _mm256_loadu_si256((const __m256i*)(buf + 64));
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i c0 = _mm256_setzero_si256(), c1 = c0, c2 = c0, c3 = c0;
    for (uint64_t i = 0; i < iters; ++i) {
        __asm__ volatile("" : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3));
        c0 = _mm256_add_epi32(c0, _mm256_madd_epi16(_mm256_maddubs_epi16(a0, b), ones));
        c1 = _mm256_add_epi32(c1, _mm256_madd_epi16(_mm256_maddubs_epi16(a1, b), ones));
        c2 = _mm256_add_epi32(c2, _mm256_madd_epi16(_mm256_maddubs_epi16(a2, b), ones));
        c3 = _mm256_add_epi32(c3, _mm256_madd_epi16(_mm256_maddubs_epi16(a3, b), ones));
    }
    const __m256i s = _mm256_add_epi32(_mm256_add_epi32(c0, c1), _mm256_add_epi32(c2, c3));
    alignas(32) int32_t lanes[8];
    _mm256_store_si256((__m256i*)lanes, s);
    int64_t sum = 0;
    for (int32_t v : lanes) sum += v;
    *lanes_sum = sum;
    return iters * 4 * 32;
}

}  // namespace edgellm
