// GEMV over row-interleaved weights (kernels/x16.h) with AVX2, for CPUs without AVX-512.
// A 64-byte chunk is two ymm (rows 0-7 and 8-15), four bytes of each row per int32 lane.
// Without VNNI, vpmaddubsw multiplies the unsigned weight bytes with four signed
// activation bytes broadcast (pairs summed in int16: at most 2 * 63 * 127 for the 6-bit
// values, no saturation) and vpmaddwd adds the pairs into the row's int32 lane. q8_0's
// bytes (stored + 128) would saturate that, so they go through the sign trick instead:
// |w| times the activation with w's sign (vpsignb), as the AVX2 panel GEMM does; this
// needs activations in -127..127, which every quantizer here writes. The float steps are
// those of x16.h, so the results are gemv_x16_ref's bits.
#include <immintrin.h>

#include <cstring>

#include "kernels/x16.h"
#include "kernels/x86/x86_kernels.h"

namespace edgellm {

namespace {

inline __m256i bcast4(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}
inline __m256i load256(const uint8_t* p) {
    return _mm256_loadu_si256((const __m256i*)p);
}

// Rows 0-7 and 8-15 of a chunk.
struct Chunk {
    __m256i v[2];
};
inline Chunk load_chunk(const uint8_t* p) {
    return {{load256(p), load256(p + 32)}};
}
inline Chunk low_nibbles(const Chunk& c) {
    const __m256i m = _mm256_set1_epi8(0x0F);
    return {{_mm256_and_si256(c.v[0], m), _mm256_and_si256(c.v[1], m)}};
}
inline Chunk high_nibbles(const Chunk& c) {
    const __m256i m = _mm256_set1_epi8(0x0F);
    return {{_mm256_and_si256(_mm256_srli_epi16(c.v[0], 4), m),
             _mm256_and_si256(_mm256_srli_epi16(c.v[1], 4), m)}};
}

// s[h] += per row: the four unsigned weight bytes . the four activation bytes a.
inline void dot4(__m256i* s, const Chunk& w, __m256i a) {
    const __m256i ones = _mm256_set1_epi16(1);
    for (int h = 0; h < 2; ++h)
        s[h] = _mm256_add_epi32(s[h], _mm256_madd_epi16(_mm256_maddubs_epi16(w.v[h], a), ones));
}

// Int16 chains: Zen 2 and 3 issue vpmaddubsw and vpmaddwd on one port, so steps of small
// codes add their vpmaddubsw pairs in int16 (while the sums stay below 2^15: each caller
// states its bound) and widen once per chain, not once per product.
// p[h] = (first ? 0 : p[h]) + the pairs of w's rows . the four activation bytes a.
inline void chain16(__m256i* p, const Chunk& w, __m256i a, bool first) {
    for (int h = 0; h < 2; ++h) {
        const __m256i m = _mm256_maddubs_epi16(w.v[h], a);
        p[h] = first ? m : _mm256_add_epi16(p[h], m);
    }
}

// One step of a block of 32: lo . a[0..3] and hi . a[16..19] into the chain p.
inline void pairs16(__m256i* p, const Chunk& lo, const Chunk& hi, const int8_t* a, bool first) {
    chain16(p, lo, bcast4(a), first);
    chain16(p, hi, bcast4(a + 16), false);
}

// A small int32 per lane (a sub-block's scale, -32768..32767) in both int16 halves: a
// vpmaddwd of a chain by it is the scale times the chain's pair sums, exact.
inline __m256i in_both_halves(__m256i x) {
    return _mm256_or_si256(_mm256_and_si256(x, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(x, 16));
}

// s[h] += the int16 pairs of p[h] summed per int32 lane.
inline void widen_add(__m256i* s, const __m256i* p) {
    const __m256i ones = _mm256_set1_epi16(1);
    for (int h = 0; h < 2; ++h) s[h] = _mm256_add_epi32(s[h], _mm256_madd_epi16(p[h], ones));
}

inline void zero2(__m256i* s) {
    s[0] = s[1] = _mm256_setzero_si256();
}

// The 16 rows' f16 scales at p.
inline void halves16(const uint8_t* p, __m256* d) {
    d[0] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)p));
    d[1] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(p + 16)));
}
inline void fma_step(__m256* acc, const __m256* d, float da, const __m256i* isum) {
    for (int h = 0; h < 2; ++h)
        acc[h] = _mm256_fmadd_ps(_mm256_mul_ps(d[h], _mm256_set1_ps(da)),
                                 _mm256_cvtepi32_ps(isum[h]), acc[h]);
}
inline void store16(float* y, const __m256* acc) {
    _mm256_storeu_ps(y, acc[0]);
    _mm256_storeu_ps(y + 8, acc[1]);
}

// ---------------------------------------------------------------------------------------
// Legacy blocks of 32.

// Bits 32h..32h+31 of the 64-bit mask at p, one per byte, as 16 in the selected bytes.
inline __m256i mask_to_16(const uint8_t* p, int h) {
    uint32_t m;
    std::memcpy(&m, p + 4 * h, 4);
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32((int)m),
        _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3,
                         3, 3, 3, 3, 3, 3, 3));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    return _mm256_and_si256(set, _mm256_set1_epi8(16));
}

// Decode reads each matrix once, 16 rows' blocks one after the other: the blocks of 32
// (q4_0, q5_0, q8_0) are prefetched this many bytes ahead, which took the 0.5B shape's
// decode on a 2-core Zen 2 EPYC from 35-38 to 43-49 tokens/s (1024 to 8192 bytes all did
// as well). The k-quants' blocks are not: there it measured 15-20 % slower at any distance.
constexpr size_t kPrefetchAhead = 4096;

// Every type computes its block's integer sums for NC activation columns at once (the
// weights are loaded and unpacked once per block for all of them); NC is 1 or 2, as AVX2
// has 16 registers.

struct X16Q4_0 {
    static constexpr size_t kBytes = 288;
    static constexpr int kShift = 4;
    template <int NC>
    static void dot(const uint8_t* g, const int8_t* const* a, __m256i (*s)[2]) {
        __m256i p[NC][2] = {};  // all 8 steps' pairs in int16: at most 8 x 2 x 15 x 127 = 30480
        for (int k = 0; k < 4; ++k) {
            const Chunk c = load_chunk(g + 32 + 64 * k);
            const Chunk lo = low_nibbles(c), hi = high_nibbles(c);
            for (int j = 0; j < NC; ++j) pairs16(p[j], lo, hi, a[j] + 4 * k, k == 0);
        }
        for (int j = 0; j < NC; ++j) widen_add(s[j], p[j]);
    }
};

struct X16Q5_0 {
    static constexpr size_t kBytes = 352;
    static constexpr int kShift = 3;
    template <int NC>
    static void dot(const uint8_t* g, const int8_t* const* a, __m256i (*s)[2]) {
        __m256i p[NC][2] = {};  // 4 steps' pairs in int16: at most 4 x 2 x 31 x 127 = 31496
        for (int k = 0; k < 4; ++k) {
            const Chunk c = load_chunk(g + 96 + 64 * k);
            Chunk lo = low_nibbles(c), hi = high_nibbles(c);
            for (int h = 0; h < 2; ++h) {
                lo.v[h] = _mm256_or_si256(lo.v[h], mask_to_16(g + 32 + 16 * k, h));
                hi.v[h] = _mm256_or_si256(hi.v[h], mask_to_16(g + 40 + 16 * k, h));
            }
            for (int j = 0; j < NC; ++j) pairs16(p[j], lo, hi, a[j] + 4 * k, k % 2 == 0);
            if (k % 2 == 1)
                for (int j = 0; j < NC; ++j) widen_add(s[j], p[j]);
        }
    }
};

struct X16Q8_0 {
    static constexpr size_t kBytes = 544;
    static constexpr int kShift = -1;  // signed again after the flip: no correction
    template <int NC>
    static void dot(const uint8_t* g, const int8_t* const* a, __m256i (*s)[2]) {
        const __m256i flip = _mm256_set1_epi8((char)0x80);
        const __m256i ones = _mm256_set1_epi16(1);
        for (int k = 0; k < 8; ++k) {
            const Chunk c = load_chunk(g + 32 + 64 * k);
            __m256i w[2], aw[2];
            for (int h = 0; h < 2; ++h) {
                w[h] = _mm256_xor_si256(c.v[h], flip);
                aw[h] = _mm256_sign_epi8(w[h], w[h]);
            }
            for (int j = 0; j < NC; ++j) {
                const __m256i av = bcast4(a[j] + 4 * k);
                for (int h = 0; h < 2; ++h) {
                    const __m256i p = _mm256_maddubs_epi16(aw[h], _mm256_sign_epi8(av, w[h]));
                    s[j][h] = _mm256_add_epi32(s[j][h], _mm256_madd_epi16(p, ones));
                }
            }
        }
    }
};

// One x16 block's integer sums for its 16 rows (two registers of 8) and one column: isum
// and, for types with mins, -msum.
struct Sums {
    __m256i isum[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    __m256i mneg[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
};

// NC columns of one group, block after block: the sums of X::sums (the type's part) meet
// the rows' scales (f16 at the block's start; the mins' at +32) in x16.h's float steps,
// column by column. X: kBytes per x16 block, kActs panel blocks per x16 block, kMin,
// sums<NC>(g, ab, s).
template <typename X, int NC>
void gemv_cols(int64_t nb, const uint8_t* group, const PanelActBlock* const* a, float* const* y) {
    __m256 acc[NC][2];
    for (int j = 0; j < NC; ++j) acc[j][0] = acc[j][1] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* g = group + X::kBytes * (size_t)b;
        if constexpr (X::kPrefetch)
            for (size_t off = 0; off < X::kBytes; off += 64)
                _mm_prefetch((const char*)g + kPrefetchAhead + off, _MM_HINT_T0);
        const PanelActBlock* ab[NC];
        for (int j = 0; j < NC; ++j) ab[j] = a[j] + X::kActs * b;
        Sums s[NC];
        X::template sums<NC>(g, ab, s);
        __m256 d[2];
        halves16(g, d);
        for (int j = 0; j < NC; ++j) fma_step(acc[j], d, ab[j][0].d, s[j].isum);
        if constexpr (X::kMin) {
            halves16(g + 32, d);
            for (int j = 0; j < NC; ++j) fma_step(acc[j], d, ab[j][0].d, s[j].mneg);
        }
    }
    for (int j = 0; j < NC; ++j) store16(y[j], acc[j]);
}

// Columns c .. c + NC - 1.
template <typename X, int NC>
void gemv_at(int64_t nb, const uint8_t* group, const PanelActBlock* act, size_t act_stride,
             int64_t c, float* y, size_t y_stride) {
    const PanelActBlock* a[NC];
    float* out[NC];
    for (int j = 0; j < NC; ++j) {
        a[j] = act + act_stride * (size_t)(c + j);
        out[j] = y + y_stride * (size_t)(c + j);
    }
    gemv_cols<X, NC>(nb, group, a, out);
}

// Every type's GEMV: the columns in passes of up to four (each pass unpacks the weights
// once), the last pass taking what is left, so a step of a few tokens (speculative
// decoding's drafts) unpacks the weights as seldom as the registers allow.
template <typename X>
void gemv(int64_t n, const uint8_t* group, const PanelActBlock* act, size_t act_stride,
          int64_t n_cols, float* y, size_t y_stride) {
    const int64_t nb = n / (32 * X::kActs);
    int64_t c = 0;
    for (; c + 4 <= n_cols; c += 4) gemv_at<X, 4>(nb, group, act, act_stride, c, y, y_stride);
    switch (n_cols - c) {
        case 3: return gemv_at<X, 3>(nb, group, act, act_stride, c, y, y_stride);
        case 2: return gemv_at<X, 2>(nb, group, act, act_stride, c, y, y_stride);
        case 1: return gemv_at<X, 1>(nb, group, act, act_stride, c, y, y_stride);
        default: return;
    }
}

// The legacy types' sums: the dot of the biased weights plus the bias correction.
template <typename X>
struct Legacy {
    static constexpr size_t kBytes = X::kBytes;
    static constexpr bool kPrefetch = true;
    static constexpr int kActs = 1;
    static constexpr bool kMin = false;
    template <int NC>
    static void sums(const uint8_t* g, const PanelActBlock* const* ab, Sums* s) {
        const int8_t* a[NC];
        __m256i d[NC][2];
        for (int j = 0; j < NC; ++j) {
            a[j] = ab[j]->qs;
            zero2(d[j]);
        }
        X::template dot<NC>(g, a, d);
        for (int j = 0; j < NC; ++j) {
            s[j].isum[0] = d[j][0];
            s[j].isum[1] = d[j][1];
            if constexpr (X::kShift >= 0) {
                const __m256i corr = _mm256_set1_epi32(ab[j]->nsum32 >> X::kShift);
                for (int h = 0; h < 2; ++h) s[j].isum[h] = _mm256_add_epi32(s[j].isum[h], corr);
            }
        }
    }
};

// ---------------------------------------------------------------------------------------
// K-quants: per-row scales and mins unpacked in the int32 lanes (lane = row).

inline __m256i lane_byte(__m256i v, int b) {
    return _mm256_and_si256(_mm256_srlv_epi32(v, _mm256_set1_epi32(8 * b)),
                            _mm256_set1_epi32(0xFF));
}
inline __m256i lane_sbyte(__m256i v, int b) {
    return _mm256_srai_epi32(_mm256_sllv_epi32(v, _mm256_set1_epi32(24 - 8 * b)), 24);
}
inline void load_words(const uint8_t* p, __m256i* w) {
    w[0] = load256(p);
    w[1] = load256(p + 32);
}

struct X16Q4_K {
    static constexpr size_t kBytes = 2304;
    static constexpr int kActs = 8;
    static constexpr bool kPrefetch = false;
    static constexpr bool kMin = true;
    template <int NC>
    static void sums(const uint8_t* g, const PanelActBlock* const* ab, Sums* out) {
        const __m256i m6 = _mm256_set1_epi8(0x3F), m4 = _mm256_set1_epi8(0x0F),
                      m2 = _mm256_set1_epi8(0x30);
        __m256i u0[2], u1[2], u2[2], sc[2][2], mn[2][2];
        load_words(g + 64, u0);
        load_words(g + 128, u1);
        load_words(g + 192, u2);
        for (int h = 0; h < 2; ++h) {
            sc[0][h] = _mm256_and_si256(u0[h], m6);
            mn[0][h] = _mm256_and_si256(u1[h], m6);
            sc[1][h] = _mm256_or_si256(_mm256_and_si256(u2[h], m4),
                                       _mm256_and_si256(_mm256_srli_epi32(u0[h], 2), m2));
            mn[1][h] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(u2[h], 4), m4),
                                       _mm256_and_si256(_mm256_srli_epi32(u1[h], 2), m2));
        }
        for (int j = 0; j < 4; ++j) {
            // Sub-blocks 2j and 2j + 1 (low and high nibbles): the vpmaddubsw pairs of all 8
            // steps added in int16 (at most 8 x 2 x 15 x 127 = 30480), then one vpmaddwd
            // by the sub-block's scale in both halves of each lane: the scaled sum, exact,
            // with one multiply per 8 steps instead of 8 vpmaddwd and a vpmulld (Zen 2 and
            // 3 issue all of them on one port).
            __m256i s0[NC][2], s1[NC][2];
            for (int k = 0; k < 8; ++k) {
                const Chunk v = load_chunk(g + 256 + 64 * (8 * j + k));
                const Chunk lo = low_nibbles(v), hi = high_nibbles(v);
                for (int c = 0; c < NC; ++c) {
                    chain16(s0[c], lo, bcast4(ab[c][2 * j].qs + 4 * k), k == 0);
                    chain16(s1[c], hi, bcast4(ab[c][2 * j + 1].qs + 4 * k), k == 0);
                }
            }
            const int set = j / 2, b0 = (2 * j) % 4, b1 = (2 * j + 1) % 4;
            for (int h = 0; h < 2; ++h) {
                const __m256i sc0 = lane_byte(sc[set][h], b0), sc1 = lane_byte(sc[set][h], b1);
                const __m256i sc0w = in_both_halves(sc0), sc1w = in_both_halves(sc1);
                const __m256i mn0 = lane_byte(mn[set][h], b0), mn1 = lane_byte(mn[set][h], b1);
                for (int c = 0; c < NC; ++c) {
                    Sums& o = out[c];
                    o.isum[h] = _mm256_add_epi32(o.isum[h], _mm256_madd_epi16(s0[c][h], sc0w));
                    o.isum[h] = _mm256_add_epi32(o.isum[h], _mm256_madd_epi16(s1[c][h], sc1w));
                    o.mneg[h] = _mm256_add_epi32(
                        o.mneg[h], _mm256_mullo_epi32(mn0, _mm256_set1_epi32(ab[c][2 * j].nsum32)));
                    o.mneg[h] = _mm256_add_epi32(
                        o.mneg[h],
                        _mm256_mullo_epi32(mn1, _mm256_set1_epi32(ab[c][2 * j + 1].nsum32)));
                }
            }
        }
        for (int c = 0; c < NC; ++c)
            for (int h = 0; h < 2; ++h) out[c].mneg[h] = _mm256_srai_epi32(out[c].mneg[h], 7);
    }
};

struct X16Q2_K {
    static constexpr size_t kBytes = 1344;
    static constexpr int kActs = 8;
    static constexpr bool kPrefetch = false;
    static constexpr bool kMin = true;
    template <int NC>
    static void sums(const uint8_t* g, const PanelActBlock* const* ab, Sums* out) {
        const __m256i m3 = _mm256_set1_epi8(3);
        __m256i sc[4][2];
        for (int p = 0; p < 4; ++p) load_words(g + 64 + 64 * p, sc[p]);
        for (int hh = 0; hh < 2; ++hh)
            for (int qd = 0; qd < 2; ++qd) {
                __m256i s[NC][4][2];
                for (int c = 0; c < NC; ++c)
                    for (int j = 0; j < 4; ++j) zero2(s[c][j]);
                for (int kk = 0; kk < 4; ++kk) {
                    const int k = 4 * qd + kk;
                    const Chunk v = load_chunk(g + 320 + 64 * (8 * hh + k));
                    for (int j = 0; j < 4; ++j) {
                        const __m128i shift = _mm_cvtsi32_si128(2 * j);
                        const Chunk w = {{_mm256_and_si256(_mm256_srl_epi16(v.v[0], shift), m3),
                                          _mm256_and_si256(_mm256_srl_epi16(v.v[1], shift), m3)}};
                        for (int c = 0; c < NC; ++c)
                            dot4(s[c][j], w, bcast4(ab[c][4 * hh + j].qs + 4 * k));
                    }
                }
                for (int j = 0; j < 4; ++j) {
                    const int sb = 8 * hh + 2 * j + qd;
                    for (int h = 0; h < 2; ++h) {
                        const __m256i byte = lane_byte(sc[sb / 4][h], sb % 4);
                        const __m256i scale = _mm256_and_si256(byte, _mm256_set1_epi32(0xF));
                        const __m256i min = _mm256_srli_epi32(byte, 4);
                        for (int c = 0; c < NC; ++c) {
                            const __m256i nsum = _mm256_set1_epi32(ab[c][4 * hh + j].nsum16[qd]);
                            out[c].isum[h] =
                                _mm256_add_epi32(out[c].isum[h], _mm256_mullo_epi32(scale, s[c][j][h]));
                            out[c].mneg[h] = _mm256_add_epi32(out[c].mneg[h], _mm256_mullo_epi32(min, nsum));
                        }
                    }
                }
            }
        for (int c = 0; c < NC; ++c)
            for (int h = 0; h < 2; ++h) out[c].mneg[h] = _mm256_srai_epi32(out[c].mneg[h], 7);
    }
};

struct X16Q6_K {
    static constexpr size_t kBytes = 3360;
    static constexpr int kActs = 8;
    static constexpr bool kPrefetch = false;
    static constexpr bool kMin = false;
    template <int NC>
    static void sums(const uint8_t* g, const PanelActBlock* const* ab, Sums* out) {
        const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x30);
        __m256i sc[4][2];
        for (int p = 0; p < 4; ++p) load_words(g + 32 + 64 * p, sc[p]);
        for (int hh = 0; hh < 2; ++hh)
            for (int qd = 0; qd < 2; ++qd) {
                __m256i s[NC][4][2][2];  // column, sub-block, steps 0-1 / 2-3, rows 0-7 / 8-15
                for (int kk = 0; kk < 4; ++kk) {
                    const int k = 4 * qd + kk;
                    const uint8_t* base = g + 288 + 192 * (size_t)(8 * hh + k);
                    const Chunk A = load_chunk(base), B = load_chunk(base + 64),
                                H = load_chunk(base + 128);
                    Chunk w[4];
                    for (int h = 0; h < 2; ++h) {
                        w[0].v[h] = _mm256_or_si256(
                            _mm256_and_si256(A.v[h], m4),
                            _mm256_and_si256(_mm256_slli_epi16(H.v[h], 4), m2));
                        w[1].v[h] = _mm256_or_si256(
                            _mm256_and_si256(B.v[h], m4),
                            _mm256_and_si256(_mm256_slli_epi16(H.v[h], 2), m2));
                        w[2].v[h] = _mm256_or_si256(
                            _mm256_and_si256(_mm256_srli_epi16(A.v[h], 4), m4),
                            _mm256_and_si256(H.v[h], m2));
                        w[3].v[h] = _mm256_or_si256(
                            _mm256_and_si256(_mm256_srli_epi16(B.v[h], 4), m4),
                            _mm256_and_si256(_mm256_srli_epi16(H.v[h], 2), m2));
                    }
                    // pairs of steps added in int16 (at most 2 x 2 x 63 x 127 = 32004)
                    for (int c = 0; c < NC; ++c)
                        for (int m = 0; m < 4; ++m)
                            chain16(s[c][m][kk / 2], w[m], bcast4(ab[c][4 * hh + m].qs + 4 * k),
                                    kk % 2 == 0);
                }
                // per sub-block: scale x (the two pair sums + the bias's correction), the
                // pair sums scaled by one vpmaddwd each (the scale in both halves of each
                // lane: exact)
                for (int m = 0; m < 4; ++m) {
                    const int sb = 8 * hh + 2 * m + qd;
                    for (int h = 0; h < 2; ++h) {
                        const __m256i scale = lane_sbyte(sc[sb / 4][h], sb % 4);
                        const __m256i scale_w = in_both_halves(scale);
                        for (int c = 0; c < NC; ++c) {
                            const __m256i corr = _mm256_set1_epi32(ab[c][4 * hh + m].nsum16[qd] >> 2);
                            __m256i t = _mm256_mullo_epi32(scale, corr);
                            t = _mm256_add_epi32(t, _mm256_madd_epi16(s[c][m][0][h], scale_w));
                            t = _mm256_add_epi32(t, _mm256_madd_epi16(s[c][m][1][h], scale_w));
                            out[c].isum[h] = _mm256_add_epi32(out[c].isum[h], t);
                        }
                    }
                }
            }
    }
};

}  // namespace

void fill_x16_avx2(TypeKernels* table) {
    // Measured (Qwen2.5 0.5B and 1.5B shapes, 2026-12-05): since the small-code panels the
    // panel GEMM is faster from 48-token batches on (pp64 1.1-1.2x, pp128 1.2-1.4x, pp256
    // 1.25-1.4x the GEMV), the GEMV at 32 (1.02-1.24x the panels); see compute/matmul.h.
    // The k-quants' GEMV with its int16 chains (2026-12-06, Zen 2, 1.5B shape) is faster up
    // to 64 tokens (pp48 70 against 62, pp64 73-74 against 68-70), even at 128, slower at
    // 256 (74 against 79).
    set_x16_gemvs(table, {gemv<Legacy<X16Q4_0>>, gemv<Legacy<X16Q5_0>>, gemv<Legacy<X16Q8_0>>,
                          gemv<X16Q2_K>, gemv<X16Q4_K>, gemv<X16Q6_K>, 32, 64});
}

}  // namespace edgellm
