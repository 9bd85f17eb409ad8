#include "compute/ops.h"

// Comparisons here never need to trap: without this GCC keeps one_plus_exp's clamps as
// branches, and swiglu's loop does not vectorize.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <memory>

#include "compute/cpu_clones.h"
#include "edgellm/error.h"
#include "kernels/fp16.h"

namespace edgellm {

void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += (double)x[i] * x[i];
    const float scale = 1.0f / std::sqrt((float)(sum / (double)n) + eps);
    if (!w) {
        for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale;
        return;
    }
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale * w[i];
}

namespace {

// 1 + exp(x) for -86 <= x <= 40 (beyond: 1 + exp(-86), 1 + exp(40)); exp within about
// 2 ulp of std::exp: x = n ln2 + r with |r| <= ln2 / 2, exp(r) by Cephes'
// single-precision polynomial, 2^n put into the exponent bits. No branches and no library
// call, so a loop over it vectorizes (prefill calls it for every element of the
// feed-forward: a call to expf per element was 5 % of a 512-token prompt's time).
//
// Every multiply-add is an explicit fma, and no product meets an addition otherwise: left
// to the compiler, the vector loop and the scalar tail were contracted differently, so an
// element's bits depended on where in a call it fell (17 of 4800 differed between calls
// of 8 and one call of 4800), and SwiGLU done tile by tile (matmul_glu) must give the bits
// of the whole row's. (Explicit fmas also give every clone the same bits; the SSE2 one
// calls fmaf.)
//
// The clamps are for swiglu, its only user. GCC splits off the lanes where x is clamped
// and computes their result, g / (1 + exp(hi)), for every lane, then blends: with hi = 88
// that quotient is subnormal for any ordinary g, and each subnormal result costs a
// microcode assist (3.7 ns an element against 0.35, 10 % of a 512-token prompt's time).
// With 40 it is subnormal only for |g| < 3e-21, and silu(g) for g < -40 is off by less
// than |g| e^-40. At -86 exp stays a normal float (at -87 p 2^-126 could not).
inline float one_plus_exp(float x) {
    x = std::min(std::max(x, -86.0f), 40.0f);
    const float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
    const float n = std::fma(x, 1.44269504088896341f, kRound) - kRound;
    const float r = std::fma(n, 2.12194440e-4f, std::fma(n, -0.693359375f, x));
    float p = 1.9875691500e-4f;
    p = std::fma(p, r, 1.3981999507e-3f);
    p = std::fma(p, r, 8.3334519073e-3f);
    p = std::fma(p, r, 4.1665795894e-2f);
    p = std::fma(p, r, 1.6666665459e-1f);
    p = std::fma(p, r, 5.0000001201e-1f);
    p = std::fma(p * r, r, r) + 1.0f;
    const uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    return std::fma(p, std::bit_cast<float>(bits), 1.0f);
}

}  // namespace

// Compiled for AVX-512 and AVX2 as well, the best chosen at load time from the CPU's (and
// OS's) features: with SSE2's four lanes the polynomial and the division were still 10 %
// of a prompt's time (compute/cpu_clones.h).
EDGELLM_CPU_CLONES void swiglu(float* gate, const float* up, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const float g = gate[i];
        gate[i] = g / one_plus_exp(-g) * up[i];
    }
}

namespace {

constexpr int64_t kConvMaxTaps = 8;
constexpr int64_t kConvChunk = 64;  // channels whose taps and sums stay in registers/L1

inline float silu_of(float v) {
    return v / one_plus_exp(-v);
}

// The window becomes the last K - 1 rows of u (the window's rows, then x's), in place: row
// r takes u's row n + r, which is further down (n >= 1) and not yet overwritten.
void advance_window(const float* x, int64_t ld_x, int64_t n, int64_t ch, int64_t K,
                    float* window, int64_t ld_win) {
    const int64_t rows = K - 1;
    for (int64_t r = 0; r < rows && n > 0; ++r) {
        const int64_t u = n + r;
        const float* src = u < rows ? window + u * ld_win : x + (u - rows) * ld_x;
        std::memmove(window + r * ld_win, src, (size_t)ch * sizeof(float));
    }
}

}  // namespace

// In chunks of channels: the chunk's taps transposed to [K][chunk] once, then per row K
// fmas over contiguous channels (the taps of a channel are K apart in w).
EDGELLM_CPU_CLONES void conv1d_causal(const float* x, int64_t ld_x, int64_t n, int64_t ch,
                                      const float* w, int64_t K, float* window, int64_t ld_win,
                                      float* y, int64_t ld_y, bool silu) {
    EDGELLM_ASSERT(K >= 1 && K <= kConvMaxTaps, "at most 8 taps");
    const int64_t rows = K - 1;
    float wt[kConvMaxTaps][kConvChunk];
    float acc[kConvChunk];
    for (int64_t c0 = 0; c0 < ch; c0 += kConvChunk) {
        const int64_t m = std::min(kConvChunk, ch - c0);
        for (int64_t k = 0; k < K; ++k)
            for (int64_t j = 0; j < m; ++j) wt[k][j] = w[(c0 + j) * K + k];
        for (int64_t t = 0; t < n; ++t) {
            for (int64_t j = 0; j < m; ++j) acc[j] = 0.0f;
            for (int64_t k = 0; k < K; ++k) {
                const int64_t u = t + k;
                const float* row = (u < rows ? window + u * ld_win : x + (u - rows) * ld_x) + c0;
                for (int64_t j = 0; j < m; ++j) acc[j] = std::fma(wt[k][j], row[j], acc[j]);
            }
            float* yt = y + t * ld_y + c0;
            if (silu)
                for (int64_t j = 0; j < m; ++j) yt[j] = silu_of(acc[j]);
            else
                for (int64_t j = 0; j < m; ++j) yt[j] = acc[j];
        }
    }
    advance_window(x, ld_x, n, ch, K, window, ld_win);
}

void conv1d_causal_ref(const float* x, int64_t ld_x, int64_t n, int64_t ch, const float* w,
                       int64_t K, float* window, int64_t ld_win, float* y, int64_t ld_y,
                       bool silu) {
    EDGELLM_ASSERT(K >= 1 && K <= kConvMaxTaps, "at most 8 taps");
    const int64_t rows = K - 1;
    for (int64_t c = 0; c < ch; ++c)
        for (int64_t t = 0; t < n; ++t) {
            float acc = 0.0f;
            for (int64_t k = 0; k < K; ++k) {
                const int64_t u = t + k;
                const float v = u < rows ? window[u * ld_win + c] : x[(u - rows) * ld_x + c];
                acc = std::fma(w[c * K + k], v, acc);
            }
            y[t * ld_y + c] = silu ? silu_of(acc) : acc;
        }
    advance_window(x, ld_x, n, ch, K, window, ld_win);
}

namespace {

float gelu_tanh(float x) {
    const float kSqrt2OverPi = 0.79788456080286535587989211986876f;
    return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + 0.044715f * x * x)));
}

// gelu_tanh of every f16 value, rounded to f16 (ggml's table): geglu's result depends on
// its input only through the input's f16 bits, so a lookup gives the formula's bits at a
// fraction of a tanh's cost (the FFN of Gemma 4 E2B evaluates 170 M of them a 512-token
// prompt: 40 % of its time with the formula).
const float* gelu_f16_table() {
    static const std::unique_ptr<float[]> table = [] {
        auto t = std::make_unique<float[]>(65536);
        for (uint32_t h = 0; h < 65536; ++h)
            t[h] = fp16_to_f32(f32_to_fp16(gelu_tanh(fp16_to_f32((fp16_t)h))));
        return t;
    }();
    return table.get();
}

}  // namespace

void geglu(float* gate, const float* up, int64_t n) {
    const float* table = gelu_f16_table();
    for (int64_t i = 0; i < n; ++i) {
        const float x = gate[i];
        float g;
        if (x <= -10.0f)
            g = 0.0f;
        else if (x >= 10.0f)
            g = x;
        else
            g = table[f32_to_fp16(x)];
        gate[i] = g * up[i];
    }
}

void softcap(float* x, int64_t n, float cap) {
    for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] / cap);
}

// The butterflies of each stage in 8-float vectors (GCC's vector extension; compiled for
// AVX-512 and AVX2 as well): within a vector for the strides 1..4 (each lane with its
// partner lane i ^ h: a + b below, a - b above, the very operations of the scalar loop),
// between vectors from 8 on. Every element gets the scalar loop's bits; its short inner
// loops for the small strides had stayed scalar (3 % of a prompt with a quantized cache).
// (Vectors of 16 went lane by lane through the stack in the AVX2 clone: 5 % of a 4096-token
// prompt there.)
EDGELLM_CPU_CLONES void hadamard(float* x, int64_t len, int n) {
    const float norm = 1.0f / std::sqrt((float)n);
    typedef float V8 __attribute__((vector_size(32)));
    typedef int32_t I8 __attribute__((vector_size(32)));
    for (int64_t at = 0; at + n <= len; at += n) {
        float* v = x + at;
        if (n < 8 || n % 8 != 0) {
            for (int h = 1; h < n; h *= 2)
                for (int i = 0; i < n; i += 2 * h)
                    for (int j = i; j < i + h; ++j) {
                        const float a = v[j], b = v[j + h];
                        v[j] = a + b;
                        v[j + h] = a - b;
                    }
            for (int i = 0; i < n; ++i) v[i] *= norm;
            continue;
        }
        const I8 lane = {0, 1, 2, 3, 4, 5, 6, 7};
        for (int i = 0; i < n; i += 8) {
            V8 w;
            std::memcpy(&w, v + i, sizeof w);
            for (int h = 1; h < 8; h *= 2) {
                const V8 partner = __builtin_shuffle(w, lane ^ h);
                const I8 upper = (lane & h) != 0;  // lane holds b: becomes a - b
                w = upper ? partner - w : w + partner;
            }
            std::memcpy(v + i, &w, sizeof w);
        }
        for (int h = 8; h < n; h *= 2)
            for (int i = 0; i < n; i += 2 * h)
                for (int j = i; j < i + h; j += 8) {
                    V8 a, b;
                    std::memcpy(&a, v + j, sizeof a);
                    std::memcpy(&b, v + j + h, sizeof b);
                    const V8 sum = a + b, diff = a - b;
                    std::memcpy(v + j, &sum, sizeof sum);
                    std::memcpy(v + j + h, &diff, sizeof diff);
                }
        for (int i = 0; i < n; ++i) v[i] *= norm;
    }
}

void scale(float* x, int64_t n, float s) {
    for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void add(float* x, const float* b, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] += b[i];
}

void rope(float* x, int64_t pos, const RopeParams& p) {
    const int half = p.n_rot / 2;
    const float theta_scale = std::pow(p.freq_base, -2.0f / (float)p.n_rot);
    float theta = (float)pos * p.freq_scale;  // theta_i = theta_0 * theta_scale^i
    for (int i = 0; i < half; ++i) {
        const float t = p.freq_factors ? theta / p.freq_factors[i] : theta;
        const float c = std::cos(t) * p.mscale, s = std::sin(t) * p.mscale;
        const int a = p.neox ? i : 2 * i;
        const int b = p.neox ? i + half : 2 * i + 1;
        const float x0 = x[a], x1 = x[b];
        x[a] = x0 * c - x1 * s;
        x[b] = x0 * s + x1 * c;
        theta *= theta_scale;
    }
}

}  // namespace edgellm
