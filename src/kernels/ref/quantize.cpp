// Weight quantizers (kernels/quantize.h). The goal is llama.cpp's bytes, so each type
// follows its reference quantizer (ggml-quants.c, quantize_row_*_ref; llama-quantize calls
// those when there is no importance matrix) operation for operation: the same float
// expressions evaluated in the same order, the same rounding (round-half-even through the
// 1.5 * 2^23 trick where llama.cpp uses nearest_int, truncation or roundf where it uses
// those), the same integer narrowing. A change that looks harmless (a reciprocal instead of
// a division, a reassociated sum) changes bytes: tests/kernels/test_quantize.cpp checks
// every type against files llama.cpp wrote.

#include "kernels/quantize.h"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "kernels/block_formats.h"

// A fused multiply-add rounds a*b+c once instead of twice and changes bytes. llama.cpp's
// quantizer lives in ggml-base, built for the baseline ISA, so it never fuses; GCC fuses by
// default wherever the target has FMA (every aarch64), so contraction is off in this file.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace edgellm {
namespace {

// Groups whose largest magnitude is below this quantize to all zeros.
constexpr float kGroupMaxEps = 1e-15f;

// Round to nearest, ties to even, for |v| < 2^22: adding 1.5 * 2^23 leaves the rounded
// integer in the low mantissa bits. Outside that range (or for NaN) the result is wrong
// but defined, exactly as in llama.cpp; every caller clamps it.
inline int round_even(float v) {
    const int32_t bits = std::bit_cast<int32_t>(v + 12582912.0f);
    return (bits & 0x007fffff) - 0x00400000;
}

inline int clamp_int(int v, int lo, int hi) {
    return v < lo ? lo : (v > hi ? hi : v);
}

// The element of largest magnitude, with its sign (the first one on ties).
inline float signed_absmax(const float* x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < n; ++i) {
        const float ax = std::fabs(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    return max;
}

// ---------------------------------------------------------------------------------------
// The legacy 32-element types: one pass, no search.

// q4_0 / q5_0: d = -(element of largest magnitude) / 2^(bits-1), so that element lands on
// q = 0 and the opposite extreme on 2^bits - 1 at most; q = trunc(x/d + offset + 0.5).
void quantize_q4_0(const float* x, block_q4_0* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += QK4_0) {
        const float max = signed_absmax(x, QK4_0);
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        for (int j = 0; j < QK4_0 / 2; ++j) {
            const float v0 = x[j] * id;
            const float v1 = x[j + QK4_0 / 2] * id;
            const int q0 = std::min(15, (int)(int8_t)(v0 + 8.5f));
            const int q1 = std::min(15, (int)(int8_t)(v1 + 8.5f));
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

void quantize_q5_0(const float* x, block_q5_0* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += QK5_0) {
        const float max = signed_absmax(x, QK5_0);
        const float d = max / -16.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        uint32_t qh = 0;
        for (int j = 0; j < QK5_0 / 2; ++j) {
            const float v0 = x[j] * id;
            const float v1 = x[j + QK5_0 / 2] * id;
            const uint32_t q0 = (uint8_t)std::min(31, (int)(int8_t)(v0 + 16.5f));
            const uint32_t q1 = (uint8_t)std::min(31, (int)(int8_t)(v1 + 16.5f));
            y[i].qs[j] = (uint8_t)((q0 & 0xF) | ((q1 & 0xF) << 4));
            qh |= ((q0 >> 4) & 1) << j;
            qh |= ((q1 >> 4) & 1) << (j + QK5_0 / 2);
        }
        std::memcpy(y[i].qh, &qh, sizeof qh);
    }
}

// q4_1 / q5_1: m = min, d = (max - min) / (2^bits - 1), q = trunc((x - m)/d + 0.5).
void quantize_q4_1(const float* x, block_q4_1* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += QK4_1) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < QK4_1; ++j) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        const float d = (max - min) / 15.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        y[i].m = f32_to_fp16(min);
        for (int j = 0; j < QK4_1 / 2; ++j) {
            const float v0 = (x[j] - min) * id;
            const float v1 = (x[j + QK4_1 / 2] - min) * id;
            const int q0 = std::min(15, (int)(int8_t)(v0 + 0.5f));
            const int q1 = std::min(15, (int)(int8_t)(v1 + 0.5f));
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

void quantize_q5_1(const float* x, block_q5_1* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += QK5_1) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < QK5_1; ++j) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        const float d = (max - min) / 31.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        y[i].m = f32_to_fp16(min);
        uint32_t qh = 0;
        for (int j = 0; j < QK5_1 / 2; ++j) {
            const float v0 = (x[j] - min) * id;
            const float v1 = (x[j + QK5_1 / 2] - min) * id;
            // No clamp (llama.cpp has none): v <= 31 up to rounding, so trunc(v + 0.5) <= 31.
            const uint32_t q0 = (uint8_t)(v0 + 0.5f);
            const uint32_t q1 = (uint8_t)(v1 + 0.5f);
            y[i].qs[j] = (uint8_t)((q0 & 0xF) | ((q1 & 0xF) << 4));
            qh |= ((q0 >> 4) & 1) << j;
            qh |= ((q1 >> 4) & 1) << (j + QK5_1 / 2);
        }
        std::memcpy(y[i].qh, &qh, sizeof qh);
    }
}

// q8_0: d = max|x| / 127, q = roundf(x * (1/d)), halves away from zero. (The activation
// quantizer in ref_kernels.cpp rounds halves to even, as llama.cpp's x86 code does.)
void quantize_q8_0(const float* x, block_q8_0* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += QK8_0) {
        float amax = 0.0f;
        for (int j = 0; j < QK8_0; ++j) {
            const float ax = std::fabs(x[j]);
            amax = amax > ax ? amax : ax;
        }
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        for (int j = 0; j < QK8_0; ++j) y[i].qs[j] = (int8_t)std::round(x[j] * id);
    }
}

// iq4_nl (llama.cpp's reference, no importance weights): the grid scaled so its end (-127)
// meets the value of largest magnitude, each value to its nearest grid point, then the
// scale refitted by least squares weighted by x^2.
namespace {
int nearest_iq4nl(float x) {
    if (x <= kvalues_iq4nl[0]) return 0;
    if (x >= kvalues_iq4nl[15]) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (x < kvalues_iq4nl[mid])
            hi = mid;
        else
            lo = mid;
    }
    return x - kvalues_iq4nl[hi - 1] < kvalues_iq4nl[hi] - x ? hi - 1 : hi;
}
}  // namespace

void quantize_iq4_nl(const float* x, block_iq4_nl* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += QK4_NL) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK4_NL; ++j)
            if (std::fabs(x[j]) > amax) {
                amax = std::fabs(x[j]);
                max = x[j];
            }
        uint8_t L[QK4_NL] = {};
        float d = 0.0f;
        if (amax >= 1e-15f) {
            const float id = 1.0f / (max / kvalues_iq4nl[0]);
            float sumqx = 0.0f, sumq2 = 0.0f;
            for (int j = 0; j < QK4_NL; ++j) {
                L[j] = (uint8_t)nearest_iq4nl(id * x[j]);
                const float q = kvalues_iq4nl[L[j]], w = x[j] * x[j];
                sumqx += w * q * x[j];
                sumq2 += w * q * q;
            }
            d = sumq2 > 0.0f ? sumqx / sumq2 : 0.0f;
        }
        y[i].d = f32_to_fp16(d);
        for (int j = 0; j < QK4_NL / 2; ++j) y[i].qs[j] = (uint8_t)(L[j] | (L[j + QK4_NL / 2] << 4));
    }
}

// ---------------------------------------------------------------------------------------
// Scale searches for the K-quants (llama.cpp: make_qx_quants, make_q3_quants,
// make_qkx2_quants). Each fits the integers L of a small group to its values x.

// The fits that try many scales run G groups side by side, value i of group g at
// [i * G + g], in vectors of 4 lanes (GCC / Clang vector extensions: SSE2 on any x86-64,
// NEON on aarch64). Each lane does exactly the one-group algorithm, the same IEEE
// operations in the same order as scalar code, so the bits are llama.cpp's; but a group's
// float sums are serial chains, and running G chains at once is several times faster.
typedef float f32x4 __attribute__((vector_size(16)));
typedef int32_t i32x4 __attribute__((vector_size(16)));  // also the lane masks: 0 or -1

inline f32x4 load4(const float* p) {
    f32x4 v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
inline f32x4 splat(float s) {
    return f32x4{s, s, s, s};
}
inline i32x4 splat_int(int s) {
    return i32x4{s, s, s, s};
}
inline f32x4 to_float(i32x4 v) {
    return __builtin_convertvector(v, f32x4);
}
inline f32x4 select(i32x4 mask, f32x4 a, f32x4 b) {  // mask ? a : b, per lane
    return (f32x4)(((i32x4)a & mask) | ((i32x4)b & ~mask));
}
inline i32x4 select(i32x4 mask, i32x4 a, i32x4 b) {
    return (a & mask) | (b & ~mask);
}
inline f32x4 abs4(f32x4 v) {
    return (f32x4)((i32x4)v & 0x7fffffff);
}
inline i32x4 round_even(f32x4 v) {  // round_even() per lane
    const i32x4 bits = (i32x4)(v + splat(12582912.0f));
    return (bits & 0x007fffff) - 0x00400000;
}
inline i32x4 clamp4(i32x4 v, int lo, int hi) {
    v = select(v < lo, splat_int(lo), v);
    return select(v > hi, splat_int(hi), v);
}
inline bool any_lane(i32x4 mask) {
    return (mask[0] | mask[1] | mask[2] | mask[3]) != 0;
}

// Symmetric fit, q in [-nmax, nmax-1], least squares weighted by x^2 (make_qx_quants with
// rmse_type 1 and no importance weights). The start is iscale = -nmax / (signed max), so
// the largest magnitude maps to -nmax; then 18 more scales -(nmax + 0.1 k) / max, k = ±1..9,
// are tried and the one with the best weighted fit sum(w x l)^2 / sum(w l^2) is kept.
// Per group g (lanes layout): L gets q + nmax; scale[g] the least-squares scale of the
// kept L (may be negative).
template <int G, int N>
void fit_symmetric(int nmax, const float* x, int8_t* L, float* scale) {
    static_assert(G % 4 == 0);
    constexpr int V = G / 4;  // vectors per row of lanes
    f32x4 max[V], amax[V], sumlx[V], suml2[V], best[V], sc[V];
    i32x4 Lv[N][V], cand[N][V];
    for (int c = 0; c < V; ++c) amax[c] = max[c] = splat(0.0f);
    for (int i = 0; i < N; ++i)
        for (int c = 0; c < V; ++c) {
            const f32x4 v = load4(x + i * G + 4 * c);
            const i32x4 larger = abs4(v) > amax[c];
            amax[c] = select(larger, abs4(v), amax[c]);
            max[c] = select(larger, v, max[c]);
        }
    // One pass of the search at iscale: q into out, the weighted sums into sumlx / suml2.
    auto try_scale = [&](const f32x4* iscale, i32x4(*out)[V]) {
        for (int c = 0; c < V; ++c) sumlx[c] = suml2[c] = splat(0.0f);
        for (int i = 0; i < N; ++i)
            for (int c = 0; c < V; ++c) {
                const f32x4 v = load4(x + i * G + 4 * c);
                const i32x4 l = clamp4(round_even(iscale[c] * v), -nmax, nmax - 1);
                out[i][c] = l + nmax;
                const f32x4 lf = to_float(l);
                const f32x4 w = v * v;
                sumlx[c] += w * v * lf;
                suml2[c] += w * lf * lf;
            }
    };
    f32x4 iscale[V];
    for (int c = 0; c < V; ++c) iscale[c] = splat((float)-nmax) / max[c];
    try_scale(iscale, Lv);
    for (int c = 0; c < V; ++c) {
        sc[c] = select(suml2[c] != 0.0f, sumlx[c] / suml2[c], splat(0.0f));
        best[c] = sc[c] * sumlx[c];
    }
    for (int k = -9; k <= 9; ++k) {
        if (k == 0) continue;
        for (int c = 0; c < V; ++c) iscale[c] = splat(-((float)nmax + 0.1f * (float)k)) / max[c];
        try_scale(iscale, cand);
        i32x4 take[V];
        bool any = false;
        for (int c = 0; c < V; ++c) {
            take[c] = (suml2[c] > 0.0f) & (sumlx[c] * sumlx[c] > best[c] * suml2[c]);
            any |= any_lane(take[c]);
            const f32x4 s = sumlx[c] / suml2[c];
            sc[c] = select(take[c], s, sc[c]);
            best[c] = select(take[c], s * sumlx[c], best[c]);
        }
        if (!any) continue;
        for (int i = 0; i < N; ++i)
            for (int c = 0; c < V; ++c) Lv[i][c] = select(take[c], cand[i][c], Lv[i][c]);
    }
    // Groups of (near) zeros: all q = 0 and scale 0.
    for (int c = 0; c < V; ++c) {
        const i32x4 zero = amax[c] < kGroupMaxEps;
        sc[c] = select(zero, splat(0.0f), sc[c]);
        for (int i = 0; i < N; ++i) Lv[i][c] = select(zero, splat_int(0), Lv[i][c]);
    }
    for (int c = 0; c < V; ++c)
        for (int lane = 0; lane < 4; ++lane) {
            scale[4 * c + lane] = sc[c][lane];
            for (int i = 0; i < N; ++i) L[i * G + 4 * c + lane] = (int8_t)Lv[i][c][lane];
        }
}

// Symmetric fit for q3_K, q in [-nmax, nmax-1], weights x^2 (make_q3_quants with do_rmse):
// start from iscale = -nmax / (signed max), then up to 5 sweeps of coordinate descent, each
// moving one q to the value that is best for the others' current least-squares scale when
// that improves the fit. L gets q + nmax; returns the least-squares scale.
float fit_symmetric_descent(int n, int nmax, const float* x, int8_t* L) {
    const float max = signed_absmax(x, n);
    if (!(std::fabs(max) >= kGroupMaxEps)) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.0f;
    }
    const float iscale = (float)-nmax / max;
    float sumlx = 0.0f, suml2 = 0.0f;
    for (int i = 0; i < n; ++i) {
        const int l = clamp_int(round_even(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        const float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    for (int sweep = 0; sweep < 5; ++sweep) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * (float)L[i];
            if (slx > 0.0f) {
                float sl2 = suml2 - w * (float)L[i] * (float)L[i];
                const int l = clamp_int(round_even(x[i] * sl2 / slx), -nmax, nmax - 1);
                if (l != L[i]) {
                    slx += w * x[i] * (float)l;
                    sl2 += w * (float)l * (float)l;
                    if (sl2 > 0.0f && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)l;
                        sumlx = slx;
                        suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (n_changed == 0) break;
    }
    for (int i = 0; i < n; ++i) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Asymmetric fit x ~ scale * q - m, q in [0, nmax], m >= 0 (make_qkx2_quants). Starts
// from the range [min(x, 0), max x], then for k = 0..nstep tries iscale = (nmax + rmin +
// rdelta k) / (max - min), solves weighted least squares for scale and min given those q,
// and keeps the candidate with the smallest weighted error (|e| if use_mad, else e^2).
// `min` is the best offset so far and the next candidates are taken relative to it, as in
// llama.cpp. Per group g (lanes layout): scale[g], neg_min[g] = -min, L in 0..nmax.
template <int G, int N, bool use_mad>
void fit_asymmetric(int nmax, const float* x, const float* w, uint8_t* L, float* scale,
                    float* neg_min, float rmin, float rdelta, int nstep) {
    static_assert(G % 4 == 0);
    constexpr int V = G / 4;  // vectors per row of lanes
    f32x4 min[V], max[V], sum_w[V], sum_x[V], best[V], sc[V], first_min[V];
    f32x4 Lv[N][V], cand[N][V];  // q as floats
    i32x4 flat[V];
    for (int c = 0; c < V; ++c) {
        min[c] = max[c] = load4(x + 4 * c);
        sum_w[c] = load4(w + 4 * c);
        sum_x[c] = sum_w[c] * load4(x + 4 * c);
    }
    for (int i = 1; i < N; ++i)
        for (int c = 0; c < V; ++c) {
            const f32x4 v = load4(x + i * G + 4 * c), wi = load4(w + i * G + 4 * c);
            min[c] = select(v < min[c], v, min[c]);
            max[c] = select(v > max[c], v, max[c]);
            sum_w[c] += wi;
            sum_x[c] += wi * v;
        }
    // The q of every element at iscale, relative to the current min.
    auto quantize_at = [&](const f32x4* iscale, f32x4(*out)[V]) {
        for (int i = 0; i < N; ++i)
            for (int c = 0; c < V; ++c) {
                const f32x4 v = load4(x + i * G + 4 * c);
                out[i][c] = to_float(clamp4(round_even(iscale[c] * (v - min[c])), 0, nmax));
            }
    };
    // sum(w e) with e = |s q + m - x| or its square.
    auto error_of = [&](const f32x4* s, const f32x4* m, const f32x4(*q)[V], f32x4* err) {
        for (int c = 0; c < V; ++c) err[c] = splat(0.0f);
        for (int i = 0; i < N; ++i)
            for (int c = 0; c < V; ++c) {
                f32x4 e = s[c] * q[i][c] + m[c] - load4(x + i * G + 4 * c);
                e = use_mad ? abs4(e) : e * e;
                err[c] += load4(w + i * G + 4 * c) * e;
            }
    };
    f32x4 iscale[V];
    for (int c = 0; c < V; ++c) {
        min[c] = select(min[c] > 0.0f, splat(0.0f), min[c]);
        flat[c] = max[c] == min[c];  // all q = 0, scale 0 (applied at the end)
        first_min[c] = min[c];
        iscale[c] = splat((float)nmax) / (max[c] - min[c]);
        sc[c] = 1.0f / iscale[c];
    }
    quantize_at(iscale, Lv);
    error_of(sc, min, Lv, best);
    for (int k = 0; k <= nstep; ++k) {
        const float numerator = rmin + rdelta * (float)k + (float)nmax;
        for (int c = 0; c < V; ++c) iscale[c] = splat(numerator) / (max[c] - min[c]);
        quantize_at(iscale, cand);
        f32x4 sum_l[V], sum_l2[V], sum_xl[V];
        for (int c = 0; c < V; ++c) sum_l[c] = sum_l2[c] = sum_xl[c] = splat(0.0f);
        for (int i = 0; i < N; ++i)
            for (int c = 0; c < V; ++c) {
                const f32x4 wl = load4(w + i * G + 4 * c) * cand[i][c];
                sum_l[c] += wl;
                sum_l2[c] += wl * cand[i][c];
                sum_xl[c] += wl * load4(x + i * G + 4 * c);
            }
        f32x4 this_scale[V], this_min[V], error[V];
        i32x4 take[V];
        for (int c = 0; c < V; ++c) {
            const f32x4 D = sum_w[c] * sum_l2[c] - sum_l[c] * sum_l[c];
            take[c] = D > 0.0f;  // a candidate with D <= 0 is skipped
            const f32x4 s = (sum_w[c] * sum_xl[c] - sum_x[c] * sum_l[c]) / D;
            const f32x4 m = (sum_l2[c] * sum_x[c] - sum_l[c] * sum_xl[c]) / D;
            // A positive offset is not representable: refit the scale alone with m = 0.
            const i32x4 positive = m > 0.0f;
            this_scale[c] = select(positive, sum_xl[c] / sum_l2[c], s);
            this_min[c] = select(positive, splat(0.0f), m);
        }
        error_of(this_scale, this_min, cand, error);
        bool any = false;
        for (int c = 0; c < V; ++c) {
            take[c] &= error[c] < best[c];
            any |= any_lane(take[c]);
            best[c] = select(take[c], error[c], best[c]);
            sc[c] = select(take[c], this_scale[c], sc[c]);
            min[c] = select(take[c], this_min[c], min[c]);
        }
        if (!any) continue;
        for (int i = 0; i < N; ++i)
            for (int c = 0; c < V; ++c) Lv[i][c] = select(take[c], cand[i][c], Lv[i][c]);
    }
    for (int c = 0; c < V; ++c) {
        sc[c] = select(flat[c], splat(0.0f), sc[c]);
        min[c] = select(flat[c], first_min[c], min[c]);
        for (int i = 0; i < N; ++i) Lv[i][c] = select(flat[c], splat(0.0f), Lv[i][c]);
    }
    for (int c = 0; c < V; ++c)
        for (int lane = 0; lane < 4; ++lane) {
            scale[4 * c + lane] = sc[c][lane];
            neg_min[4 * c + lane] = -min[c][lane];
            for (int i = 0; i < N; ++i) L[i * G + 4 * c + lane] = (uint8_t)Lv[i][c][lane];
        }
}

// Groups of n consecutive values (group g at x[n g]) to the side-by-side layout and back.
inline void to_lanes(const float* x, int n_groups, int n, float* out) {
    for (int g = 0; g < n_groups; ++g)
        for (int i = 0; i < n; ++i) out[i * n_groups + g] = x[n * g + i];
}
template <typename T>
inline void from_lanes(const T* in, int n_groups, int n, T* out) {
    for (int g = 0; g < n_groups; ++g)
        for (int i = 0; i < n; ++i) out[n * g + i] = in[i * n_groups + g];
}

// Pack 256 two-bit values: byte l of 32-byte half h holds elements 128h + 32s + l in bits
// 2s..2s+1 (q2_K and q3_K qs).
void pack_2bit(const uint8_t* L, uint8_t* qs) {
    for (int h = 0; h < QK_K / 128; ++h)
        for (int l = 0; l < 32; ++l) {
            const uint8_t* e = L + 128 * h + l;
            qs[32 * h + l] = (uint8_t)(e[0] | (e[32] << 2) | (e[64] << 4) | (e[96] << 6));
        }
}

// ---------------------------------------------------------------------------------------
// The K-quants: 256-element super-blocks.

// q2_K: per 16-element sub-block an asymmetric 2-bit fit weighted by |x| with absolute
// error; its scale and min are then quantized to 4 bits against the block's largest ones,
// and the values are re-fitted to the quantized scale and min.
void quantize_q2_K(const float* x, block_q2_K* y, int64_t nb) {
    uint8_t L[QK_K], lanes_L[QK_K];
    float lanes_x[QK_K], lanes_w[QK_K], scales[QK_K / 16], mins[QK_K / 16];
    for (int64_t i = 0; i < nb; ++i, x += QK_K) {
        to_lanes(x, QK_K / 16, 16, lanes_x);
        for (int e = 0; e < QK_K; ++e) lanes_w[e] = std::fabs(lanes_x[e]);
        fit_asymmetric<QK_K / 16, 16, true>(3, lanes_x, lanes_w, lanes_L, scales, mins, -0.5f, 0.1f,
                                            15);
        from_lanes(lanes_L, QK_K / 16, 16, L);
        float max_scale = 0.0f, max_min = 0.0f;
        for (int j = 0; j < QK_K / 16; ++j) {
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        block_q2_K& b = y[i];
        if (max_scale > 0.0f) {
            const float iscale = 15.0f / max_scale;
            for (int j = 0; j < QK_K / 16; ++j)
                b.scales[j] = (uint8_t)round_even(iscale * scales[j]);
            b.d = f32_to_fp16(max_scale / 15.0f);
        } else {
            for (int j = 0; j < QK_K / 16; ++j) b.scales[j] = 0;
            b.d = f32_to_fp16(0.0f);
        }
        if (max_min > 0.0f) {
            const float iscale = 15.0f / max_min;
            for (int j = 0; j < QK_K / 16; ++j)
                b.scales[j] |= (uint8_t)(round_even(iscale * mins[j]) << 4);
            b.dmin = f32_to_fp16(max_min / 15.0f);
        } else {
            b.dmin = f32_to_fp16(0.0f);
        }
        const float d_all = fp16_to_f32(b.d), dmin_all = fp16_to_f32(b.dmin);
        for (int j = 0; j < QK_K / 16; ++j) {
            const float d = d_all * (float)(b.scales[j] & 0xF);
            if (d == 0.0f) continue;  // keep the fit's values
            const float dm = dmin_all * (float)(b.scales[j] >> 4);
            for (int l = 0; l < 16; ++l)
                L[16 * j + l] = (uint8_t)clamp_int(round_even((x[16 * j + l] + dm) / d), 0, 3);
        }
        pack_2bit(L, b.qs);
    }
}

// q3_K: per 16-element sub-block a symmetric 3-bit fit (coordinate descent, weights x^2);
// the signed scales are quantized to 6 bits against the one of largest magnitude (which
// maps to -32), and the values re-fitted to the quantized scales.
void quantize_q3_K(const float* x, block_q3_K* y, int64_t nb) {
    int8_t L[QK_K];
    float scales[QK_K / 16];
    for (int64_t i = 0; i < nb; ++i, x += QK_K) {
        float max_scale = 0.0f, amax = 0.0f;
        for (int j = 0; j < QK_K / 16; ++j) {
            scales[j] = fit_symmetric_descent(16, 4, x + 16 * j, L + 16 * j);
            const float a = std::fabs(scales[j]);
            if (a > amax) {
                amax = a;
                max_scale = scales[j];
            }
        }
        block_q3_K& b = y[i];
        std::memset(b.scales, 0, sizeof b.scales);
        if (max_scale != 0.0f) {
            const float iscale = -32.0f / max_scale;
            for (int j = 0; j < QK_K / 16; ++j) {
                // 6-bit scale + 32: low nibble into byte j (j < 8) or the high nibble of
                // byte j - 8; the top two bits into byte 8 + j % 4 at bit 2 (j / 4).
                int8_t l = (int8_t)round_even(iscale * scales[j]);
                l = (int8_t)(clamp_int(l, -32, 31) + 32);
                if (j < 8)
                    b.scales[j] = (uint8_t)(l & 0xF);
                else
                    b.scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
                b.scales[8 + j % 4] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
            }
            b.d = f32_to_fp16(1.0f / iscale);
        } else {
            b.d = f32_to_fp16(0.0f);
        }
        int8_t sc[16];
        unpack_q3_K_scales(b.scales, sc);
        const float d_all = fp16_to_f32(b.d);
        for (int j = 0; j < QK_K / 16; ++j) {
            const float d = d_all * (float)sc[j];
            if (d == 0.0f) continue;  // keep the fit's values
            for (int l = 0; l < 16; ++l)
                L[16 * j + l] = (int8_t)(clamp_int(round_even(x[16 * j + l] / d), -4, 3) + 4);
        }
        // High bit of element e into bit e / 32 of hmask[e % 32]; low two bits into qs.
        std::memset(b.hmask, 0, sizeof b.hmask);
        uint8_t low[QK_K];
        for (int e = 0; e < QK_K; ++e) {
            if (L[e] > 3) b.hmask[e % 32] |= (uint8_t)(1 << (e / 32));
            low[e] = (uint8_t)(L[e] & 3);
        }
        pack_2bit(low, b.qs);
    }
}

// q4_K / q5_K: per 32-element sub-block an asymmetric fit weighted by rms(sub-block) + |x|;
// scales and mins quantized to 6 bits against the block's largest, then the values
// re-fitted. Writes d, dmin, the 12 packed scale bytes and L (0..nmax) per element.
template <int nmax>
void quantize_k_asym_32(const float* x, fp16_t* d_out, fp16_t* dmin_out, uint8_t* packed,
                        uint8_t* L, float rmin, int nstep) {
    constexpr int G = QK_K / 32;
    float lanes_x[QK_K], lanes_w[QK_K], sum_x2[G], av_x[G], scales[G], mins[G];
    uint8_t lanes_L[QK_K];
    to_lanes(x, G, 32, lanes_x);
    for (int g = 0; g < G; ++g) sum_x2[g] = 0.0f;
    for (int l = 0; l < 32; ++l)
        for (int g = 0; g < G; ++g) sum_x2[g] += lanes_x[l * G + g] * lanes_x[l * G + g];
    for (int g = 0; g < G; ++g) av_x[g] = std::sqrt(sum_x2[g] / 32.0f);
    for (int l = 0; l < 32; ++l)
        for (int g = 0; g < G; ++g) lanes_w[l * G + g] = av_x[g] + std::fabs(lanes_x[l * G + g]);
    fit_asymmetric<G, 32, false>(nmax, lanes_x, lanes_w, lanes_L, scales, mins, rmin, 0.1f, nstep);
    from_lanes(lanes_L, G, 32, L);
    float max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < G; ++j) {
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
    for (int j = 0; j < QK_K / 32; ++j) {
        const uint8_t ls = std::min<uint8_t>(63, (uint8_t)round_even(inv_scale * scales[j]));
        const uint8_t lm = std::min<uint8_t>(63, (uint8_t)round_even(inv_min * mins[j]));
        // The layout get_scale_min_k4 reads (block_formats.h).
        if (j < 4) {
            packed[j] = ls;
            packed[j + 4] = lm;
        } else {
            packed[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
            packed[j - 4] |= (uint8_t)((ls >> 4) << 6);
            packed[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *d_out = f32_to_fp16(max_scale / 63.0f);
    *dmin_out = f32_to_fp16(max_min / 63.0f);
    const float d_all = fp16_to_f32(*d_out), dmin_all = fp16_to_f32(*dmin_out);
    for (int j = 0; j < QK_K / 32; ++j) {
        uint8_t sc, m;
        get_scale_min_k4(j, packed, &sc, &m);
        const float d = d_all * (float)sc;
        if (d == 0.0f) continue;  // keep the fit's values
        const float dm = dmin_all * (float)m;
        for (int l = 0; l < 32; ++l)
            L[32 * j + l] = (uint8_t)clamp_int(round_even((x[32 * j + l] + dm) / d), 0, nmax);
    }
}

void quantize_q4_K(const float* x, block_q4_K* y, int64_t nb) {
    uint8_t L[QK_K];
    for (int64_t i = 0; i < nb; ++i, x += QK_K) {
        block_q4_K& b = y[i];
        quantize_k_asym_32<15>(x, &b.d, &b.dmin, b.scales, L, -1.0f, 20);
        // Chunk c of 32 bytes: low nibbles = sub-block 2c, high nibbles = sub-block 2c+1.
        for (int c = 0; c < QK_K / 64; ++c)
            for (int l = 0; l < 32; ++l)
                b.qs[32 * c + l] = (uint8_t)(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
    }
}

void quantize_q5_K(const float* x, block_q5_K* y, int64_t nb) {
    uint8_t L[QK_K];
    for (int64_t i = 0; i < nb; ++i, x += QK_K) {
        block_q5_K& b = y[i];
        quantize_k_asym_32<31>(x, &b.d, &b.dmin, b.scales, L, -0.5f, 15);
        // As q4_K for the low nibbles; bit 4 of sub-block 2c's element l into bit 2c of
        // qh[l], of sub-block 2c+1's into bit 2c+1.
        std::memset(b.qh, 0, sizeof b.qh);
        for (int c = 0; c < QK_K / 64; ++c)
            for (int l = 0; l < 32; ++l) {
                const uint8_t lo = L[64 * c + l], hi = L[64 * c + 32 + l];
                b.qs[32 * c + l] = (uint8_t)((lo & 0xF) | ((hi & 0xF) << 4));
                b.qh[l] |= (uint8_t)(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
            }
    }
}

// q6_K: per 16-element sub-block a symmetric 6-bit fit (19 scales tried, weights x^2); the
// signed scales quantized to int8 against the one of largest magnitude (mapped to -128),
// then the values re-fitted.
void quantize_q6_K(const float* x, block_q6_K* y, int64_t nb) {
    int8_t L[QK_K], lanes_L[QK_K];
    float lanes_x[QK_K], scales[QK_K / 16];
    for (int64_t i = 0; i < nb; ++i, x += QK_K) {
        block_q6_K& b = y[i];
        to_lanes(x, QK_K / 16, 16, lanes_x);
        fit_symmetric<QK_K / 16, 16>(32, lanes_x, lanes_L, scales);
        from_lanes(lanes_L, QK_K / 16, 16, L);
        float max_scale = 0.0f, max_abs_scale = 0.0f;
        for (int j = 0; j < QK_K / 16; ++j) {
            const float a = std::fabs(scales[j]);
            if (a > max_abs_scale) {
                max_abs_scale = a;
                max_scale = scales[j];
            }
        }
        if (max_abs_scale < kGroupMaxEps) {
            std::memset(&b, 0, sizeof b);
            continue;
        }
        const float iscale = -128.0f / max_scale;
        b.d = f32_to_fp16(1.0f / iscale);
        for (int j = 0; j < QK_K / 16; ++j)
            b.scales[j] = (int8_t)std::min(127, round_even(iscale * scales[j]));
        const float d_all = fp16_to_f32(b.d);
        for (int j = 0; j < QK_K / 16; ++j) {
            const float d = d_all * (float)b.scales[j];
            if (d == 0.0f) continue;  // keep the fit's values
            for (int l = 0; l < 16; ++l)
                L[16 * j + l] = (int8_t)(clamp_int(round_even(x[16 * j + l] / d), -32, 31) + 32);
        }
        // Per 128-element half h: ql[64h + l] = low nibbles of elements l (low) and l + 64
        // (high), ql[64h + 32 + l] those of l + 32 and l + 96; qh[32h + l] the top two bits
        // of l, l + 32, l + 64, l + 96 at bits 0, 2, 4, 6.
        for (int h = 0; h < QK_K / 128; ++h) {
            const int8_t* e = L + 128 * h;
            for (int l = 0; l < 32; ++l) {
                b.ql[64 * h + l] = (uint8_t)((e[l] & 0xF) | ((e[l + 64] & 0xF) << 4));
                b.ql[64 * h + 32 + l] = (uint8_t)((e[l + 32] & 0xF) | ((e[l + 96] & 0xF) << 4));
                b.qh[32 * h + l] = (uint8_t)((e[l] >> 4) | ((e[l + 32] >> 4) << 2) |
                                             ((e[l + 64] >> 4) << 4) | ((e[l + 96] >> 4) << 6));
            }
        }
    }
}

}  // namespace

bool can_quantize(TensorType type) {
    switch (type) {
        case TensorType::F32:
        case TensorType::F16:
        case TensorType::BF16:
        case TensorType::Q4_0:
        case TensorType::Q4_1:
        case TensorType::Q5_0:
        case TensorType::Q5_1:
        case TensorType::Q8_0:
        case TensorType::IQ4_NL:
        case TensorType::Q2_K:
        case TensorType::Q3_K:
        case TensorType::Q4_K:
        case TensorType::Q5_K:
        case TensorType::Q6_K:
            return true;
        default:
            return false;
    }
}

bool quantize_row(TensorType type, const float* src, void* dst, int64_t n) {
    if (!can_quantize(type) || n < 0) return false;
    const int64_t block = tensor_type_info(type).block_size;
    if (n % block != 0) return false;
    const int64_t nb = n / block;
    switch (type) {
        case TensorType::F32:
            std::memcpy(dst, src, (size_t)n * sizeof(float));
            return true;
        case TensorType::F16:
            for (int64_t i = 0; i < n; ++i) ((fp16_t*)dst)[i] = f32_to_fp16(src[i]);
            return true;
        case TensorType::BF16:
            for (int64_t i = 0; i < n; ++i) ((bf16_t*)dst)[i] = f32_to_bf16(src[i]);
            return true;
        case TensorType::Q4_0:
            quantize_q4_0(src, (block_q4_0*)dst, nb);
            return true;
        case TensorType::Q4_1:
            quantize_q4_1(src, (block_q4_1*)dst, nb);
            return true;
        case TensorType::Q5_0:
            quantize_q5_0(src, (block_q5_0*)dst, nb);
            return true;
        case TensorType::Q5_1:
            quantize_q5_1(src, (block_q5_1*)dst, nb);
            return true;
        case TensorType::Q8_0:
            quantize_q8_0(src, (block_q8_0*)dst, nb);
            return true;
        case TensorType::IQ4_NL:
            quantize_iq4_nl(src, (block_iq4_nl*)dst, nb);
            return true;
        case TensorType::Q2_K:
            quantize_q2_K(src, (block_q2_K*)dst, nb);
            return true;
        case TensorType::Q3_K:
            quantize_q3_K(src, (block_q3_K*)dst, nb);
            return true;
        case TensorType::Q4_K:
            quantize_q4_K(src, (block_q4_K*)dst, nb);
            return true;
        case TensorType::Q5_K:
            quantize_q5_K(src, (block_q5_K*)dst, nb);
            return true;
        case TensorType::Q6_K:
            quantize_q6_K(src, (block_q6_K*)dst, nb);
            return true;
        default:
            return false;
    }
}

}  // namespace edgellm
