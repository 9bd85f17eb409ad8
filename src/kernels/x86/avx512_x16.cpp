// GEMV over row-interleaved weights with AVX-512 VNNI (kernels/x16.h): one zmm of weights
// holds four consecutive bytes of each of 16 rows, so vpdpbusd against four activation
// bytes broadcast from memory adds to the 16 rows' int32 sums at once; the rows' f16
// scales are one vector. Weight bytes are unsigned (nibbles, 6-bit values, q8_0 + 128);
// the activation sums in the panel blocks correct for the offset (q4_0: -8, q5_0: -16,
// q8_0: -128, q6_K: -32) exactly. Columns run one after another over the same group,
// which stays in L1/L2 from the first.
// (As in avx512.cpp, nothing here calls an inline function of a shared header.)
#include "kernels/x86/immintrin_quiet.h"

#include "kernels/x16.h"
#include "kernels/x86/avx512_transpose.h"
#include "kernels/x86/avx512_x16_blocks.h"
#include "kernels/x86/x86_kernels.h"

namespace edgellm {

namespace {

inline __m512i bcast4(const int8_t* p) {
    int32_t v;
    __builtin_memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}
using avx512::halves16;
using avx512::high_nibbles;
using avx512::lane_byte;
using avx512::load512;
using avx512::low_nibbles;
using avx512::scale_byte;
using avx512::scale_sbyte;

// ---------------------------------------------------------------------------------------
// Every type computes its block's integer sums for NC activation columns at once: the
// weights are loaded and unpacked once, then multiplied with each column (a chat turn's
// prompt tokens, or the decode steps of several slots, are several columns).

// Legacy blocks of 32: q4_0, q5_0, q8_0. Sum of (w + bias) * a, then + nsum32 / (128 /
// bias) = -bias * sum(a).

struct X16Q4_0 {
    static constexpr size_t kBytes = 288;
    static constexpr int kShift = 4;  // -8 * sum = nsum32 >> 4
    template <int NC>
    static void dot(const uint8_t* g, const int8_t* const* a, __m512i* out) {
        __m512i s0[NC], s1[NC];
        for (int c = 0; c < NC; ++c) s0[c] = s1[c] = _mm512_setzero_si512();
        for (int k = 0; k < 4; ++k) {
            const __m512i v = load512(g + 32 + 64 * k);
            const __m512i lo = low_nibbles(v), hi = high_nibbles(v);
            for (int c = 0; c < NC; ++c) {
                s0[c] = _mm512_dpbusd_epi32(s0[c], lo, bcast4(a[c] + 4 * k));
                s1[c] = _mm512_dpbusd_epi32(s1[c], hi, bcast4(a[c] + 16 + 4 * k));
            }
        }
        for (int c = 0; c < NC; ++c) out[c] = _mm512_add_epi32(s0[c], s1[c]);
    }
};

struct X16Q5_0 {
    static constexpr size_t kBytes = 352;
    static constexpr int kShift = 3;  // -16 * sum
    template <int NC>
    static void dot(const uint8_t* g, const int8_t* const* a, __m512i* out) {
        const __m512i sixteen = _mm512_set1_epi8(16);
        __m512i s0[NC], s1[NC];
        for (int c = 0; c < NC; ++c) s0[c] = s1[c] = _mm512_setzero_si512();
        for (int k = 0; k < 4; ++k) {
            uint64_t mlo, mhi;
            __builtin_memcpy(&mlo, g + 32 + 16 * k, 8);
            __builtin_memcpy(&mhi, g + 40 + 16 * k, 8);
            const __m512i v = load512(g + 96 + 64 * k);
            const __m512i lo = low_nibbles(v), hi = high_nibbles(v);
            const __m512i wlo = _mm512_mask_add_epi8(lo, _cvtu64_mask64(mlo), lo, sixteen);
            const __m512i whi = _mm512_mask_add_epi8(hi, _cvtu64_mask64(mhi), hi, sixteen);
            for (int c = 0; c < NC; ++c) {
                s0[c] = _mm512_dpbusd_epi32(s0[c], wlo, bcast4(a[c] + 4 * k));
                s1[c] = _mm512_dpbusd_epi32(s1[c], whi, bcast4(a[c] + 16 + 4 * k));
            }
        }
        for (int c = 0; c < NC; ++c) out[c] = _mm512_add_epi32(s0[c], s1[c]);
    }
};

struct X16Q8_0 {
    static constexpr size_t kBytes = 544;
    static constexpr int kShift = 0;  // -128 * sum
    template <int NC>
    static void dot(const uint8_t* g, const int8_t* const* a, __m512i* out) {
        __m512i s0[NC], s1[NC];
        for (int c = 0; c < NC; ++c) s0[c] = s1[c] = _mm512_setzero_si512();
        for (int k = 0; k < 8; k += 2) {
            const __m512i v0 = load512(g + 32 + 64 * k), v1 = load512(g + 96 + 64 * k);
            for (int c = 0; c < NC; ++c) {
                s0[c] = _mm512_dpbusd_epi32(s0[c], v0, bcast4(a[c] + 4 * k));
                s1[c] = _mm512_dpbusd_epi32(s1[c], v1, bcast4(a[c] + 4 * k + 4));
            }
        }
        for (int c = 0; c < NC; ++c) out[c] = _mm512_add_epi32(s0[c], s1[c]);
    }
};

// One x16 block's integer sums for its 16 rows and one column: isum and, for types with
// mins, -msum.
struct Sums {
    __m512i isum = _mm512_setzero_si512();
    __m512i mneg = _mm512_setzero_si512();
};

// NC columns of one group, block after block: the sums of X::sums (the type's part) meet
// the rows' scales (f16 at the block's start; the mins' at +32) in x16.h's float steps,
// column by column as gemv_x16_ref does. X: kBytes per x16 block, kActs panel blocks per
// x16 block, kMin, sums<NC>(g, ab, s).
template <typename X, int NC>
void gemv_cols(int64_t nb, const uint8_t* group, const PanelActBlock* const* a, float* const* y) {
    __m512 acc[NC];
    for (int c = 0; c < NC; ++c) acc[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* g = group + X::kBytes * (size_t)b;
        const PanelActBlock* ab[NC];
        for (int c = 0; c < NC; ++c) ab[c] = a[c] + X::kActs * b;
        Sums s[NC];
        X::template sums<NC>(g, ab, s);
        const __m512 d = halves16(g);
        for (int c = 0; c < NC; ++c) {
            const __m512 da = _mm512_set1_ps(ab[c][0].d);
            acc[c] = _mm512_fmadd_ps(_mm512_mul_ps(d, da), _mm512_cvtepi32_ps(s[c].isum), acc[c]);
            if constexpr (X::kMin)
                acc[c] = _mm512_fmadd_ps(_mm512_mul_ps(halves16(g + 32), da),
                                         _mm512_cvtepi32_ps(s[c].mneg), acc[c]);
        }
    }
    for (int c = 0; c < NC; ++c) _mm512_storeu_ps(y[c], acc[c]);
}

// Columns c .. c + NC - 1.
template <typename X, int NC>
void gemv_at(int64_t nb, const uint8_t* group, const PanelActBlock* act, size_t act_stride,
             int64_t c, float* y, size_t y_stride) {
    const PanelActBlock* a[NC];
    float* out[NC];
    for (int i = 0; i < NC; ++i) {
        a[i] = act + act_stride * (size_t)(c + i);
        out[i] = y + y_stride * (size_t)(c + i);
    }
    gemv_cols<X, NC>(nb, group, a, out);
}

// Every type's GEMV: the columns in passes over the group of at most eight (each pass
// unpacks the weights once), the last pass taking what is left in one go, so a step of a
// few tokens (speculative decoding's drafts) reads and unpacks the weights once.
template <typename X>
void gemv(int64_t n, const uint8_t* group, const PanelActBlock* act, size_t act_stride,
          int64_t n_cols, float* y, size_t y_stride) {
    const int64_t nb = n / (32 * X::kActs);
    int64_t c = 0;
    for (; c + 8 <= n_cols; c += 8) gemv_at<X, 8>(nb, group, act, act_stride, c, y, y_stride);
    switch (n_cols - c) {
        case 7: return gemv_at<X, 7>(nb, group, act, act_stride, c, y, y_stride);
        case 6: return gemv_at<X, 6>(nb, group, act, act_stride, c, y, y_stride);
        case 5: return gemv_at<X, 5>(nb, group, act, act_stride, c, y, y_stride);
        case 4: return gemv_at<X, 4>(nb, group, act, act_stride, c, y, y_stride);
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
    static constexpr int kActs = 1;
    static constexpr bool kMin = false;
    template <int NC>
    static void sums(const uint8_t* g, const PanelActBlock* const* ab, Sums* s) {
        const int8_t* a[NC];
        for (int c = 0; c < NC; ++c) a[c] = ab[c]->qs;
        __m512i d[NC];
        X::template dot<NC>(g, a, d);
        for (int c = 0; c < NC; ++c)
            s[c].isum = _mm512_add_epi32(d[c], _mm512_set1_epi32(ab[c]->nsum32 >> X::kShift));
    }
};

// ---------------------------------------------------------------------------------------
// q4_K: 8 sub-blocks of 32, 6-bit scales and mins unpacked in the lanes from the three
// scale chunks (lane r = row r's 12 bytes), one activation panel block per sub-block.

template <int j, int NC>
inline void q4_K_pair(const uint8_t* qs, const PanelActBlock* const* ab, __m512i sc, __m512i m,
                      Sums* s) {
    __m512i s0[NC], s1[NC];
    for (int c = 0; c < NC; ++c) s0[c] = s1[c] = _mm512_setzero_si512();
    for (int k = 0; k < 8; ++k) {
        const __m512i v = load512(qs + 64 * (8 * j + k));
        const __m512i lo = low_nibbles(v), hi = high_nibbles(v);
        for (int c = 0; c < NC; ++c) {
            s0[c] = _mm512_dpbusd_epi32(s0[c], lo, bcast4(ab[c][2 * j].qs + 4 * k));
            s1[c] = _mm512_dpbusd_epi32(s1[c], hi, bcast4(ab[c][2 * j + 1].qs + 4 * k));
        }
    }
    // sub-blocks 2j and 2j + 1: bytes (2j) % 4 and (2j + 1) % 4 of the scale/min lanes
    constexpr int b0 = (2 * j) % 4, b1 = (2 * j + 1) % 4;
    const __m512i sc0 = lane_byte<b0>(sc), sc1 = lane_byte<b1>(sc);
    const __m512i m0 = lane_byte<b0>(m), m1 = lane_byte<b1>(m);
    for (int c = 0; c < NC; ++c) {
        s[c].isum = _mm512_add_epi32(s[c].isum, _mm512_mullo_epi32(sc0, s0[c]));
        s[c].isum = _mm512_add_epi32(s[c].isum, _mm512_mullo_epi32(sc1, s1[c]));
        s[c].mneg = _mm512_add_epi32(
            s[c].mneg, _mm512_mullo_epi32(m0, _mm512_set1_epi32(ab[c][2 * j].nsum32)));
        s[c].mneg = _mm512_add_epi32(
            s[c].mneg, _mm512_mullo_epi32(m1, _mm512_set1_epi32(ab[c][2 * j + 1].nsum32)));
    }
}

struct X16Q4_K {
    static constexpr size_t kBytes = 2304;
    static constexpr int kActs = 8;
    static constexpr bool kMin = true;
    template <int NC>
    static void sums(const uint8_t* g, const PanelActBlock* const* ab, Sums* s) {
        __m512i sc[2], m[2];
        avx512::q4_K_scales(g, sc, m);
        const uint8_t* qs = g + 256;
        q4_K_pair<0, NC>(qs, ab, sc[0], m[0], s);
        q4_K_pair<1, NC>(qs, ab, sc[0], m[0], s);
        q4_K_pair<2, NC>(qs, ab, sc[1], m[1], s);
        q4_K_pair<3, NC>(qs, ab, sc[1], m[1], s);
        // sum m * (-128 * sum a) is a multiple of 128: exactly -msum after the shift
        for (int c = 0; c < NC; ++c) s[c].mneg = _mm512_srai_epi32(s[c].mneg, 7);
    }
};

// ---------------------------------------------------------------------------------------
// q2_K: 16 sub-blocks of 16, 4-bit scales and mins (one byte per sub-block: 4 chunks, lane
// r = row r's 16 bytes). Chunk (h, k) holds bytes qs[32h + 4k..]: element 128h + 32s + 4k + i
// in bits 2s, 2s + 1, sub-block 8h + 2s + k / 4, activation block 4h + s.

template <int h, int qd, int NC>
inline void q2_K_quad(const uint8_t* g, const PanelActBlock* const* ab, const __m512i* sc,
                      Sums* s) {
    const __m512i m3 = _mm512_set1_epi8(3);
    __m512i acc[NC][4];
    for (int c = 0; c < NC; ++c)
        for (int j = 0; j < 4; ++j) acc[c][j] = _mm512_setzero_si512();
    for (int kk = 0; kk < 4; ++kk) {
        const int k = 4 * qd + kk;
        const __m512i v = load512(g + 320 + 64 * (size_t)(8 * h + k));
        const __m512i w[4] = {_mm512_and_si512(v, m3),
                              _mm512_and_si512(_mm512_srli_epi16(v, 2), m3),
                              _mm512_and_si512(_mm512_srli_epi16(v, 4), m3),
                              _mm512_and_si512(_mm512_srli_epi16(v, 6), m3)};
        for (int c = 0; c < NC; ++c)
            for (int j = 0; j < 4; ++j)
                acc[c][j] = _mm512_dpbusd_epi32(acc[c][j], w[j], bcast4(ab[c][4 * h + j].qs + 4 * k));
    }
    for (int j = 0; j < 4; ++j) {
        const __m512i byte = scale_byte(sc, 8 * h + 2 * j + qd);
        const __m512i scale = _mm512_and_si512(byte, _mm512_set1_epi32(0xF));
        const __m512i min = _mm512_srli_epi32(byte, 4);
        for (int c = 0; c < NC; ++c) {
            s[c].isum = _mm512_add_epi32(s[c].isum, _mm512_mullo_epi32(scale, acc[c][j]));
            s[c].mneg = _mm512_add_epi32(
                s[c].mneg, _mm512_mullo_epi32(min, _mm512_set1_epi32(ab[c][4 * h + j].nsum16[qd])));
        }
    }
}

struct X16Q2_K {
    static constexpr size_t kBytes = 1344;
    static constexpr int kActs = 8;
    static constexpr bool kMin = true;
    template <int NC>
    static void sums(const uint8_t* g, const PanelActBlock* const* ab, Sums* s) {
        __m512i sc[4];
        avx512::scale_chunks(g + 64, sc);
        q2_K_quad<0, 0, NC>(g, ab, sc, s);
        q2_K_quad<0, 1, NC>(g, ab, sc, s);
        q2_K_quad<1, 0, NC>(g, ab, sc, s);
        q2_K_quad<1, 1, NC>(g, ab, sc, s);
        // sum m * (-128 * sum a) / 128 = -msum
        for (int c = 0; c < NC; ++c) s[c].mneg = _mm512_srai_epi32(s[c].mneg, 7);
    }
};

// ---------------------------------------------------------------------------------------
// q6_K: 16 sub-blocks of 16 with signed 8-bit scales. For half h and chunk k the three
// chunks A (ql), B (ql + 32) and H (qh) give the 6-bit values of elements 128h + 4k + i
// (A low, H bits 0-1), + 32 (B low, bits 2-3), + 64 (A high, bits 4-5), + 96 (B high,
// bits 6-7): sub-blocks 8h + 2m + k / 4 for m = 0..3.

template <int h, int qd, int NC>
inline void q6_K_quad(const uint8_t* g, const PanelActBlock* const* ab, const __m512i* sc,
                      Sums* s) {
    __m512i acc[NC][4];
    for (int c = 0; c < NC; ++c)
        for (int m = 0; m < 4; ++m) acc[c][m] = _mm512_setzero_si512();
    for (int kk = 0; kk < 4; ++kk) {
        const int k = 4 * qd + kk;
        __m512i w[4];
        avx512::q6_K_values(g, h, k, w);
        for (int c = 0; c < NC; ++c)
            for (int m = 0; m < 4; ++m)
                acc[c][m] = _mm512_dpbusd_epi32(acc[c][m], w[m], bcast4(ab[c][4 * h + m].qs + 4 * k));
    }
    for (int m = 0; m < 4; ++m) {
        const __m512i scale = scale_sbyte(sc, 8 * h + 2 * m + qd);
        for (int c = 0; c < NC; ++c) {
            const __m512i corr = _mm512_set1_epi32(ab[c][4 * h + m].nsum16[qd] >> 2);  // -32 * sum
            s[c].isum = _mm512_add_epi32(s[c].isum,
                                         _mm512_mullo_epi32(scale, _mm512_add_epi32(acc[c][m], corr)));
        }
    }
}

struct X16Q6_K {
    static constexpr size_t kBytes = 3360;
    static constexpr int kActs = 8;
    static constexpr bool kMin = false;
    template <int NC>
    static void sums(const uint8_t* g, const PanelActBlock* const* ab, Sums* s) {
        __m512i sc[4];
        avx512::scale_chunks(g + 32, sc);
        q6_K_quad<0, 0, NC>(g, ab, sc, s);
        q6_K_quad<0, 1, NC>(g, ab, sc, s);
        q6_K_quad<1, 0, NC>(g, ab, sc, s);
        q6_K_quad<1, 1, NC>(g, ab, sc, s);
    }
};

// x16_pack: each run of a block's chunk words is one masked 64-byte load per row (masked:
// no read past the block), a transposition, and a store per word; the halves and masks as
// the reference writes them. The same bytes as x16_pack (start-up self-test).
void pack_x16_avx512(TensorType t, const uint8_t* rows, size_t row_bytes, int64_t n,
                     uint8_t* group) {
    const X16PackRuns& runs = x16_pack_runs(t);
    const auto& info = tensor_type_info(t);
    const int64_t nb = n / info.block_size;
    const size_t bs = info.type_size;
    for (int64_t b = 0; b < nb; ++b) {
        uint8_t* dst = group + (size_t)b * 16 * bs;
        for (int i = 0; i < runs.n; ++i) {
            const X16ChunkRun& run = runs.run[i];
            const __mmask16 mask = (__mmask16)((1u << run.count) - 1u);
            const __m512i flip = _mm512_set1_epi32((int)run.flip);
            const uint8_t* src = rows + (size_t)b * bs + run.src;
            __m512i v[16];
#pragma GCC unroll 16
            for (int r = 0; r < 16; ++r) v[r] = _mm512_maskz_loadu_epi32(mask, src + row_bytes * (size_t)r);
            avx512::transpose16(v);
            for (int j = 0; j < run.count; ++j)
                _mm512_storeu_si512(dst + run.dst[j], _mm512_xor_si512(v[j], flip));
        }
        x16_pack_block_rest(t, rows, row_bytes, b, dst);
    }
}

// ---------------------------------------------------------------------------------------
// x16 groups to panels of 16 rows (x16_to_panel, kernels/x16.h): the same bytes, the
// scales with the same float steps (one product per row, rows in lanes), so the panel is
// byte for byte the reference's (start-up self-test). Prefill converts every x16 group
// it multiplies once per batch; in the scalar code that was 15-20 % of a 300-token
// prompt on the 1.5B.

constexpr int kRowsX16 = 16;

// Panel group g of G elements (with offsets or not): its step s, its scales, its offsets.
template <int G, bool kMin>
struct PanelAt {
    static constexpr size_t kBytes = (size_t)kRowsX16 * G + sizeof(float) * kRowsX16 * (kMin ? 2 : 1);
    uint8_t* panel;
    uint8_t* step(int64_t g, int s) const { return panel + kBytes * (size_t)g + 64 * (size_t)s; }
    float* scale(int64_t g) const { return (float*)(panel + kBytes * (size_t)g + (size_t)kRowsX16 * G); }
    float* offset(int64_t g) const { return scale(g) + kRowsX16; }
};

// -v as the reference's unary minus: the sign bit flipped (0 - v would give +0 for 0).
inline __m512 negate(__m512 v) {
    return _mm512_castsi512_ps(
        _mm512_xor_si512(_mm512_castps_si512(v), _mm512_set1_epi32((int)0x80000000u)));
}

inline void store512(uint8_t* p, __m512i v) {
    _mm512_storeu_si512((void*)p, v);
}

// q4_0: nibble - 8, as q + 128 (unsigned) or q (signed): + 120 or + 248 (mod 256).
void q4_0_to_panel_avx512(const uint8_t* group, int64_t n, uint8_t* panel, bool unsigned_q) {
    const PanelAt<32, false> p{panel};
    const __m512i bias = _mm512_set1_epi8((char)(unsigned_q ? 120 : 248));
    for (int64_t b = 0; b < n / 32; ++b) {
        const uint8_t* x = group + 288 * (size_t)b;
        for (int k = 0; k < 4; ++k) {
            const __m512i v = load512(x + 32 + 64 * k);
            store512(p.step(b, k), _mm512_add_epi8(low_nibbles(v), bias));
            store512(p.step(b, 4 + k), _mm512_add_epi8(high_nibbles(v), bias));
        }
        _mm512_storeu_ps(p.scale(b), halves16(x));
    }
}

// q5_0: nibble | fifth bit << 4, - 16: + 112 or + 240. The fifth bits of element 4k + j
// of the 16 rows are bits 4r + j of a 64-bit mask (kernels/x16.h): mask bit i to byte i.
void q5_0_to_panel_avx512(const uint8_t* group, int64_t n, uint8_t* panel, bool unsigned_q) {
    const PanelAt<32, false> p{panel};
    const __m512i bias = _mm512_set1_epi8((char)(unsigned_q ? 112 : 240));
    const __m512i bit4 = _mm512_set1_epi8(16);
    for (int64_t b = 0; b < n / 32; ++b) {
        const uint8_t* x = group + 352 * (size_t)b;
        for (int k = 0; k < 4; ++k) {
            uint64_t lo, hi;
            __builtin_memcpy(&lo, x + 32 + 16 * k, 8);
            __builtin_memcpy(&hi, x + 32 + 16 * k + 8, 8);
            const __m512i v = load512(x + 96 + 64 * k);
            const __m512i a = _mm512_mask_add_epi8(low_nibbles(v), (__mmask64)lo, low_nibbles(v), bit4);
            const __m512i c = _mm512_mask_add_epi8(high_nibbles(v), (__mmask64)hi, high_nibbles(v), bit4);
            store512(p.step(b, k), _mm512_add_epi8(a, bias));
            store512(p.step(b, 4 + k), _mm512_add_epi8(c, bias));
        }
        _mm512_storeu_ps(p.scale(b), halves16(x));
    }
}

// q8_0: the x16 bytes are q + 128 already; signed: the sign bit flipped back.
void q8_0_to_panel_avx512(const uint8_t* group, int64_t n, uint8_t* panel, bool unsigned_q) {
    const PanelAt<32, false> p{panel};
    const __m512i flip = _mm512_set1_epi8(unsigned_q ? 0 : (char)0x80);
    for (int64_t b = 0; b < n / 32; ++b) {
        const uint8_t* x = group + 544 * (size_t)b;
        for (int k = 0; k < 8; ++k)
            store512(p.step(b, k), _mm512_xor_si512(load512(x + 32 + 64 * k), flip));
        _mm512_storeu_ps(p.scale(b), halves16(x));
    }
}

// q2_K: chunk c (half h = c / 8, position k = c % 8), bits 2s: group 8h + 2s + k / 4,
// step k % 4; scale byte g % 4 of chunk g / 4 per row: d * low nibble, -dmin * high.
void q2_K_to_panel_avx512(const uint8_t* group, int64_t n, uint8_t* panel, bool) {
    const PanelAt<16, true> p{panel};
    const __m512i three = _mm512_set1_epi8(3), low4 = _mm512_set1_epi32(0x0F);
    for (int64_t b = 0; b < n / 256; ++b) {
        const uint8_t* x = group + 1344 * (size_t)b;
        for (int c = 0; c < 16; ++c) {
            const int h = c / 8, k = c % 8;
            const __m512i v = load512(x + 320 + 64 * c);
            const int64_t g = 16 * b + 8 * h + k / 4;
            store512(p.step(g, k % 4), _mm512_and_si512(v, three));
            store512(p.step(g + 2, k % 4), _mm512_and_si512(_mm512_srli_epi16(v, 2), three));
            store512(p.step(g + 4, k % 4), _mm512_and_si512(_mm512_srli_epi16(v, 4), three));
            store512(p.step(g + 6, k % 4), _mm512_and_si512(_mm512_srli_epi16(v, 6), three));
        }
        const __m512 d = halves16(x), ndmin = negate(halves16(x + 32));
        __m512i sc[4];
        avx512::scale_chunks(x + 64, sc);
        for (int sb = 0; sb < 16; ++sb) {
            const __m512i byte = scale_byte(sc, sb);
            const int64_t g = 16 * b + sb;
            _mm512_storeu_ps(p.scale(g), _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_and_si512(byte, low4))));
            _mm512_storeu_ps(p.offset(g), _mm512_mul_ps(ndmin, _mm512_cvtepi32_ps(_mm512_srli_epi32(byte, 4))));
        }
    }
}

// q4_K: sub-block 2j + h (h = 0 low nibbles, 1 high), step s = chunk 8j + s; the 6-bit
// scales and mins decoded in the rows' lanes from the three 32-bit words of scale bytes.
void q4_K_to_panel_avx512(const uint8_t* group, int64_t n, uint8_t* panel, bool) {
    const PanelAt<32, true> p{panel};
    for (int64_t b = 0; b < n / 256; ++b) {
        const uint8_t* x = group + 2304 * (size_t)b;
        const uint8_t* qs = x + 256;
        for (int j = 0; j < 4; ++j)
            for (int s = 0; s < 8; ++s) {
                const __m512i v = load512(qs + 64 * (8 * j + s));
                store512(p.step(8 * b + 2 * j, s), low_nibbles(v));
                store512(p.step(8 * b + 2 * j + 1, s), high_nibbles(v));
            }
        const __m512 d = halves16(x), ndmin = negate(halves16(x + 32));
        __m512i sc[2], m[2];
        avx512::q4_K_scales(x, sc, m);
        for (int j = 0; j < 8; ++j) {
            _mm512_storeu_ps(p.scale(8 * b + j), _mm512_mul_ps(d, _mm512_cvtepi32_ps(scale_byte(sc, j))));
            _mm512_storeu_ps(p.offset(8 * b + j), _mm512_mul_ps(ndmin, _mm512_cvtepi32_ps(scale_byte(m, j))));
        }
    }
}

// q6_K: the values of half h and chunk k (avx512::q6_K_values) go to group 8h + 2m + k / 4,
// step k % 4, as the 6-bit value - 32: + 96 or + 224.
void q6_K_to_panel_avx512(const uint8_t* group, int64_t n, uint8_t* panel, bool unsigned_q) {
    const PanelAt<16, false> p{panel};
    const __m512i bias = _mm512_set1_epi8((char)(unsigned_q ? 96 : 224));
    for (int64_t b = 0; b < n / 256; ++b) {
        const uint8_t* x = group + 3360 * (size_t)b;
        for (int h = 0; h < 2; ++h)
            for (int k = 0; k < 8; ++k) {
                __m512i v[4];
                avx512::q6_K_values(x, h, k, v);
                for (int m = 0; m < 4; ++m)
                    store512(p.step(16 * b + 8 * h + 2 * m + k / 4, k % 4), _mm512_add_epi8(v[m], bias));
            }
        const __m512 d = halves16(x);
        __m512i sc[4];
        avx512::scale_chunks(x + 32, sc);
        for (int sb = 0; sb < 16; ++sb)
            _mm512_storeu_ps(p.scale(16 * b + sb), _mm512_mul_ps(d, _mm512_cvtepi32_ps(scale_sbyte(sc, sb))));
    }
}

}  // namespace

void fill_x16_avx512(TypeKernels* table) {
    // Measured here (Qwen2.5 0.5B and 1.5B shapes): since the panel GEMM reads x16 weights
    // straight into its panels it is as fast as the GEMV from 16-token batches and faster
    // above; see compute/matmul.h.
    set_x16_gemvs(table, {gemv<Legacy<X16Q4_0>>, gemv<Legacy<X16Q5_0>>, gemv<Legacy<X16Q8_0>>,
                          gemv<X16Q2_K>, gemv<X16Q4_K>, gemv<X16Q6_K>, 16});
    for (TensorType t : {TensorType::Q4_0, TensorType::Q5_0, TensorType::Q8_0, TensorType::Q2_K,
                         TensorType::Q4_K, TensorType::Q6_K})
        table[(uint32_t)t].pack_x16 = pack_x16_avx512;
    table[(uint32_t)TensorType::Q4_0].to_panel_x16 = q4_0_to_panel_avx512;
    table[(uint32_t)TensorType::Q5_0].to_panel_x16 = q5_0_to_panel_avx512;
    table[(uint32_t)TensorType::Q8_0].to_panel_x16 = q8_0_to_panel_avx512;
    table[(uint32_t)TensorType::Q2_K].to_panel_x16 = q2_K_to_panel_avx512;
    table[(uint32_t)TensorType::Q4_K].to_panel_x16 = q4_K_to_panel_avx512;
    table[(uint32_t)TensorType::Q6_K].to_panel_x16 = q6_K_to_panel_avx512;
}

}  // namespace edgellm
