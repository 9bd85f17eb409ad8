// GEMV over row-interleaved weights with AVX-512 VNNI (kernels/x16.h): one zmm of weights
// holds four consecutive bytes of each of 16 rows, so vpdpbusd against four activation
// bytes broadcast from memory adds to the 16 rows' int32 sums at once; the rows' f16
// scales are one vector. Weight bytes are unsigned (nibbles, 6-bit values, q8_0 + 128);
// the activation sums in the panel blocks correct for the offset (q4_0: -8, q5_0: -16,
// q8_0: -128, q6_K: -32) exactly. Columns run one after another over the same group,
// which stays in L1/L2 from the first.
// (GCC 12 false positives in the AVX-512 header, as in avx512.cpp; and as there, nothing
// here calls an inline function of a shared header.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include "kernels/x16.h"
#include "kernels/x86/x86_kernels.h"

namespace edgellm {

namespace {

inline __m512i bcast4(const int8_t* p) {
    int32_t v;
    __builtin_memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}
inline __m512i load512(const uint8_t* p) {
    return _mm512_loadu_si512((const void*)p);
}
// The 16 rows' f16 scales at p as floats.
inline __m512 halves16(const uint8_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)p));
}
inline __m512i low_nibbles(__m512i v) {
    return _mm512_and_si512(v, _mm512_set1_epi8(0x0F));
}
inline __m512i high_nibbles(__m512i v) {
    return _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(0x0F));
}

// ---------------------------------------------------------------------------------------
// Legacy blocks of 32: q4_0, q5_0, q8_0. Sum of (w + bias) * a, then + nsum32 / (128 /
// bias) = -bias * sum(a).

struct X16Q4_0 {
    static constexpr size_t kBytes = 288;
    static constexpr int kShift = 4;  // -8 * sum = nsum32 >> 4
    static __m512i dot(const uint8_t* g, const int8_t* a) {
        __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
        for (int k = 0; k < 4; ++k) {
            const __m512i v = load512(g + 32 + 64 * k);
            s0 = _mm512_dpbusd_epi32(s0, low_nibbles(v), bcast4(a + 4 * k));
            s1 = _mm512_dpbusd_epi32(s1, high_nibbles(v), bcast4(a + 16 + 4 * k));
        }
        return _mm512_add_epi32(s0, s1);
    }
};

struct X16Q5_0 {
    static constexpr size_t kBytes = 352;
    static constexpr int kShift = 3;  // -16 * sum
    static __m512i dot(const uint8_t* g, const int8_t* a) {
        const __m512i sixteen = _mm512_set1_epi8(16);
        __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
        for (int k = 0; k < 4; ++k) {
            uint64_t mlo, mhi;
            __builtin_memcpy(&mlo, g + 32 + 16 * k, 8);
            __builtin_memcpy(&mhi, g + 40 + 16 * k, 8);
            const __m512i v = load512(g + 96 + 64 * k);
            const __m512i lo = low_nibbles(v), hi = high_nibbles(v);
            s0 = _mm512_dpbusd_epi32(s0, _mm512_mask_add_epi8(lo, _cvtu64_mask64(mlo), lo, sixteen),
                                     bcast4(a + 4 * k));
            s1 = _mm512_dpbusd_epi32(s1, _mm512_mask_add_epi8(hi, _cvtu64_mask64(mhi), hi, sixteen),
                                     bcast4(a + 16 + 4 * k));
        }
        return _mm512_add_epi32(s0, s1);
    }
};

struct X16Q8_0 {
    static constexpr size_t kBytes = 544;
    static constexpr int kShift = 0;  // -128 * sum
    static __m512i dot(const uint8_t* g, const int8_t* a) {
        __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
        for (int k = 0; k < 8; k += 2) {
            s0 = _mm512_dpbusd_epi32(s0, load512(g + 32 + 64 * k), bcast4(a + 4 * k));
            s1 = _mm512_dpbusd_epi32(s1, load512(g + 96 + 64 * k), bcast4(a + 4 * k + 4));
        }
        return _mm512_add_epi32(s0, s1);
    }
};

// One x16 block's integer sums for its 16 rows: isum and, for types with mins, -msum.
struct Sums {
    __m512i isum;
    __m512i mneg = _mm512_setzero_si512();
};

// Every type's GEMV: per column, block after block, the sums of X::sums (the type's part)
// meet the rows' scales (f16 at the block's start; the mins' at +32) in x16.h's float
// steps. X: kBytes per x16 block, kActs panel blocks per x16 block, kMin, sums(g, ab).
template <typename X>
void gemv(int64_t n, const uint8_t* group, const PanelActBlock* act, size_t act_stride,
          int64_t n_cols, float* y, size_t y_stride) {
    const int64_t nb = n / (32 * X::kActs);
    for (int64_t c = 0; c < n_cols; ++c) {
        const PanelActBlock* a = act + act_stride * (size_t)c;
        __m512 acc = _mm512_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t* g = group + X::kBytes * (size_t)b;
            const PanelActBlock* ab = a + X::kActs * b;
            const Sums s = X::sums(g, ab);
            const __m512 da = _mm512_set1_ps(ab[0].d);
            acc = _mm512_fmadd_ps(_mm512_mul_ps(halves16(g), da), _mm512_cvtepi32_ps(s.isum), acc);
            if constexpr (X::kMin)
                acc = _mm512_fmadd_ps(_mm512_mul_ps(halves16(g + 32), da),
                                      _mm512_cvtepi32_ps(s.mneg), acc);
        }
        _mm512_storeu_ps(y + y_stride * (size_t)c, acc);
    }
}

// The legacy types' sums: the dot of the biased weights plus the bias correction.
template <typename X>
struct Legacy {
    static constexpr size_t kBytes = X::kBytes;
    static constexpr int kActs = 1;
    static constexpr bool kMin = false;
    static Sums sums(const uint8_t* g, const PanelActBlock* ab) {
        return {_mm512_add_epi32(X::dot(g, ab->qs), _mm512_set1_epi32(ab->nsum32 >> X::kShift))};
    }
};

// ---------------------------------------------------------------------------------------
// q4_K: 8 sub-blocks of 32, 6-bit scales and mins unpacked in the lanes from the three
// scale chunks (lane r = row r's 12 bytes), one activation panel block per sub-block.

// Byte b of each lane, as int32.
template <int b>
inline __m512i lane_byte(__m512i v) {
    return _mm512_and_si512(_mm512_srli_epi32(v, 8 * b), _mm512_set1_epi32(0xFF));
}
// Signed byte b of each lane, as int32.
template <int b>
inline __m512i lane_sbyte(__m512i v) {
    return _mm512_srai_epi32(_mm512_slli_epi32(v, 24 - 8 * b), 24);
}

template <int j>
inline void q4_K_pair(const uint8_t* qs, const PanelActBlock* ab, __m512i sc, __m512i m,
                      __m512i& isum, __m512i& mneg) {
    const PanelActBlock& lo = ab[2 * j];
    const PanelActBlock& hi = ab[2 * j + 1];
    __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
    for (int k = 0; k < 8; ++k) {
        const __m512i v = load512(qs + 64 * (8 * j + k));
        s0 = _mm512_dpbusd_epi32(s0, low_nibbles(v), bcast4(lo.qs + 4 * k));
        s1 = _mm512_dpbusd_epi32(s1, high_nibbles(v), bcast4(hi.qs + 4 * k));
    }
    // sub-blocks 2j and 2j + 1: bytes (2j) % 4 and (2j + 1) % 4 of the scale/min lanes
    constexpr int b0 = (2 * j) % 4, b1 = (2 * j + 1) % 4;
    isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(lane_byte<b0>(sc), s0));
    isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(lane_byte<b1>(sc), s1));
    mneg = _mm512_add_epi32(mneg, _mm512_mullo_epi32(lane_byte<b0>(m), _mm512_set1_epi32(lo.nsum32)));
    mneg = _mm512_add_epi32(mneg, _mm512_mullo_epi32(lane_byte<b1>(m), _mm512_set1_epi32(hi.nsum32)));
}

struct X16Q4_K {
    static constexpr size_t kBytes = 2304;
    static constexpr int kActs = 8;
    static constexpr bool kMin = true;
    static Sums sums(const uint8_t* g, const PanelActBlock* ab) {
        const __m512i m6 = _mm512_set1_epi8(0x3F), m4 = _mm512_set1_epi8(0x0F),
                      m2 = _mm512_set1_epi8(0x30);
        const __m512i u0 = load512(g + 64), u1 = load512(g + 128), u2 = load512(g + 192);
        const __m512i sc0 = _mm512_and_si512(u0, m6), m0 = _mm512_and_si512(u1, m6);
        // (x >> 2) & 0x30 per byte: the byte's top two bits at 4, 5
        const __m512i sc1 = _mm512_or_si512(_mm512_and_si512(u2, m4),
                                            _mm512_and_si512(_mm512_srli_epi32(u0, 2), m2));
        const __m512i m1 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u2, 4), m4),
                                           _mm512_and_si512(_mm512_srli_epi32(u1, 2), m2));
        const uint8_t* qs = g + 256;
        Sums s{_mm512_setzero_si512()};
        q4_K_pair<0>(qs, ab, sc0, m0, s.isum, s.mneg);
        q4_K_pair<1>(qs, ab, sc0, m0, s.isum, s.mneg);
        q4_K_pair<2>(qs, ab, sc1, m1, s.isum, s.mneg);
        q4_K_pair<3>(qs, ab, sc1, m1, s.isum, s.mneg);
        // sum m * (-128 * sum a) is a multiple of 128: exactly -msum after the shift
        s.mneg = _mm512_srai_epi32(s.mneg, 7);
        return s;
    }
};

// ---------------------------------------------------------------------------------------
// q2_K: 16 sub-blocks of 16, 4-bit scales and mins (one byte per sub-block: 4 chunks, lane
// r = row r's 16 bytes). Chunk (h, k) holds bytes qs[32h + 4k..]: element 128h + 32s + 4k + i
// in bits 2s, 2s + 1, sub-block 8h + 2s + k / 4, activation block 4h + s.

template <int h, int qd>
inline void q2_K_quad(const uint8_t* g, const PanelActBlock* ab, const __m512i* sc,
                      __m512i& isum, __m512i& mneg) {
    const __m512i m3 = _mm512_set1_epi8(3);
    __m512i s[4];
    for (int j = 0; j < 4; ++j) s[j] = _mm512_setzero_si512();
    for (int kk = 0; kk < 4; ++kk) {
        const int k = 4 * qd + kk;
        const __m512i v = load512(g + 320 + 64 * (size_t)(8 * h + k));
        s[0] = _mm512_dpbusd_epi32(s[0], _mm512_and_si512(v, m3), bcast4(ab[4 * h].qs + 4 * k));
        s[1] = _mm512_dpbusd_epi32(s[1], _mm512_and_si512(_mm512_srli_epi16(v, 2), m3),
                                   bcast4(ab[4 * h + 1].qs + 4 * k));
        s[2] = _mm512_dpbusd_epi32(s[2], _mm512_and_si512(_mm512_srli_epi16(v, 4), m3),
                                   bcast4(ab[4 * h + 2].qs + 4 * k));
        s[3] = _mm512_dpbusd_epi32(s[3], _mm512_and_si512(_mm512_srli_epi16(v, 6), m3),
                                   bcast4(ab[4 * h + 3].qs + 4 * k));
    }
    for (int j = 0; j < 4; ++j) {
        const int sb = 8 * h + 2 * j + qd;  // plane sb / 4, byte sb % 4
        __m512i byte;
        switch (sb % 4) {
            case 0: byte = lane_byte<0>(sc[sb / 4]); break;
            case 1: byte = lane_byte<1>(sc[sb / 4]); break;
            case 2: byte = lane_byte<2>(sc[sb / 4]); break;
            default: byte = lane_byte<3>(sc[sb / 4]); break;
        }
        const __m512i scale = _mm512_and_si512(byte, _mm512_set1_epi32(0xF));
        const __m512i min = _mm512_srli_epi32(byte, 4);
        isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(scale, s[j]));
        mneg = _mm512_add_epi32(
            mneg, _mm512_mullo_epi32(min, _mm512_set1_epi32(ab[4 * h + j].nsum16[qd])));
    }
}

struct X16Q2_K {
    static constexpr size_t kBytes = 1344;
    static constexpr int kActs = 8;
    static constexpr bool kMin = true;
    static Sums sums(const uint8_t* g, const PanelActBlock* ab) {
        const __m512i sc[4] = {load512(g + 64), load512(g + 128), load512(g + 192),
                               load512(g + 256)};
        Sums s{_mm512_setzero_si512()};
        q2_K_quad<0, 0>(g, ab, sc, s.isum, s.mneg);
        q2_K_quad<0, 1>(g, ab, sc, s.isum, s.mneg);
        q2_K_quad<1, 0>(g, ab, sc, s.isum, s.mneg);
        q2_K_quad<1, 1>(g, ab, sc, s.isum, s.mneg);
        s.mneg = _mm512_srai_epi32(s.mneg, 7);  // sum m * (-128 * sum a) / 128 = -msum
        return s;
    }
};

// ---------------------------------------------------------------------------------------
// q6_K: 16 sub-blocks of 16 with signed 8-bit scales. For half h and chunk k the three
// chunks A (ql), B (ql + 32) and H (qh) give the 6-bit values of elements 128h + 4k + i
// (A low, H bits 0-1), + 32 (B low, bits 2-3), + 64 (A high, bits 4-5), + 96 (B high,
// bits 6-7): sub-blocks 8h + 2m + k / 4 for m = 0..3.

template <int h, int qd>
inline void q6_K_quad(const uint8_t* g, const PanelActBlock* ab, const __m512i* sc,
                      __m512i& isum) {
    const __m512i m2 = _mm512_set1_epi8(0x30), m6 = _mm512_set1_epi8(0x3F);
    __m512i s[4];
    for (int m = 0; m < 4; ++m) s[m] = _mm512_setzero_si512();
    for (int kk = 0; kk < 4; ++kk) {
        const int k = 4 * qd + kk;
        const uint8_t* base = g + 288 + 192 * (size_t)(8 * h + k);
        const __m512i A = load512(base), B = load512(base + 64), H = load512(base + 128);
        // (x & m4) | (y & m2) in one ternary logic op: 0xCA = (mask ? y : x)
        const __m512i w0 = _mm512_ternarylogic_epi32(m2, _mm512_slli_epi16(H, 4), A, 0xCA);
        const __m512i w1 = _mm512_ternarylogic_epi32(m2, _mm512_slli_epi16(H, 2), B, 0xCA);
        const __m512i w2 = _mm512_ternarylogic_epi32(m2, H, _mm512_srli_epi16(A, 4), 0xCA);
        const __m512i w3 =
            _mm512_ternarylogic_epi32(m2, _mm512_srli_epi16(H, 2), _mm512_srli_epi16(B, 4), 0xCA);
        const __m512i w[4] = {w0, w1, w2, w3};
        for (int m = 0; m < 4; ++m)
            s[m] = _mm512_dpbusd_epi32(s[m], _mm512_and_si512(w[m], m6),
                                       bcast4(ab[4 * h + m].qs + 4 * k));
    }
    for (int m = 0; m < 4; ++m) {
        const int sb = 8 * h + 2 * m + qd;  // sub-block: plane sb / 4, byte sb % 4
        const __m512i corr = _mm512_set1_epi32(ab[4 * h + m].nsum16[qd] >> 2);  // -32 * sum
        __m512i scale;
        switch (sb % 4) {
            case 0: scale = lane_sbyte<0>(sc[sb / 4]); break;
            case 1: scale = lane_sbyte<1>(sc[sb / 4]); break;
            case 2: scale = lane_sbyte<2>(sc[sb / 4]); break;
            default: scale = lane_sbyte<3>(sc[sb / 4]); break;
        }
        isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(scale, _mm512_add_epi32(s[m], corr)));
    }
}

struct X16Q6_K {
    static constexpr size_t kBytes = 3360;
    static constexpr int kActs = 8;
    static constexpr bool kMin = false;
    static Sums sums(const uint8_t* g, const PanelActBlock* ab) {
        const __m512i sc[4] = {load512(g + 32), load512(g + 96), load512(g + 160),
                               load512(g + 224)};
        Sums s{_mm512_setzero_si512()};
        q6_K_quad<0, 0>(g, ab, sc, s.isum);
        q6_K_quad<0, 1>(g, ab, sc, s.isum);
        q6_K_quad<1, 0>(g, ab, sc, s.isum);
        q6_K_quad<1, 1>(g, ab, sc, s.isum);
        return s;
    }
};

}  // namespace

void fill_x16_avx512(TypeKernels* table) {
    using T = TensorType;
    table[(uint32_t)T::Q4_0].gemv_x16 = gemv<Legacy<X16Q4_0>>;
    table[(uint32_t)T::Q5_0].gemv_x16 = gemv<Legacy<X16Q5_0>>;
    table[(uint32_t)T::Q8_0].gemv_x16 = gemv<Legacy<X16Q8_0>>;
    table[(uint32_t)T::Q2_K].gemv_x16 = gemv<X16Q2_K>;
    table[(uint32_t)T::Q4_K].gemv_x16 = gemv<X16Q4_K>;
    table[(uint32_t)T::Q6_K].gemv_x16 = gemv<X16Q6_K>;
}

}  // namespace edgellm
