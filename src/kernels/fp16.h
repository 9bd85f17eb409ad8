// IEEE half and bfloat16 conversions in plain C++ (the scalar reference; SIMD kernels use
// F16C / NEON conversions that give the same bits).
#pragma once

#include <cstdint>
#include <cstring>

namespace edgellm {

// These helpers are `static` (one private copy per translation unit) on purpose: the ISA
// kernel files include this header while compiled with -mavx2 / -mavx512f / +dotprod, and
// a shared inline copy from such a file could be the one the linker keeps for all callers,
// running AVX-512 code on a CPU without it.

using fp16_t = uint16_t;
using bf16_t = uint16_t;

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
static inline float f32_from_bits(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

static inline float fp16_to_f32(fp16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    const uint32_t exp = (h >> 10) & 0x1f;
    const uint32_t mant = h & 0x3ff;
    if (exp == 0x1f) return f32_from_bits(sign | 0x7f800000u | (mant << 13));  // inf / nan
    if (exp != 0) return f32_from_bits(sign | ((exp + 112) << 23) | (mant << 13));
    if (mant == 0) return f32_from_bits(sign);
    // subnormal half: value = mant * 2^-24
    float v = (float)mant * (1.0f / 16777216.0f);
    return sign ? -v : v;
}

// Round to nearest, ties to even; overflow gives inf, NaN stays NaN.
static inline fp16_t f32_to_fp16(float f) {
    const uint32_t x = f32_bits(f);
    const uint32_t sign = (x >> 16) & 0x8000;
    const uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return (fp16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
    if (ax >= 0x477ff000u) return (fp16_t)(sign | 0x7c00);  // rounds to >= 65520: inf
    if (ax < 0x38800000u) {                                 // below the smallest normal half
        if (ax < 0x33000000u) return (fp16_t)sign;          // < 2^-25 rounds to zero
        const uint32_t e = ax >> 23;
        const uint32_t m = (ax & 0x7fffff) | 0x800000;
        const uint32_t shift = 126 - e;  // bring to units of 2^-24
        uint32_t q = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1);
        const uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return (fp16_t)(sign | q);
    }
    uint32_t h = ((ax - 0x38000000u) >> 13);
    const uint32_t rem = ax & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return (fp16_t)(sign | h);
}

// fp16_to_f32(f32_to_fp16(x)) for 0 <= x <= 1, without branches so a loop over many values
// vectorizes: below 2^-14 (the f16 subnormals, a grid of 2^-24) the float addition of 0.5
// does the rounding (ties to even); above, rounding away the low 13 mantissa bits does.
static inline float round_to_f16_unit(float x) {
    uint32_t b = f32_bits(x);
    b = (b + 0xFFFu + ((b >> 13) & 1u)) & ~0x1FFFu;
    const float normal = f32_from_bits(b);
    const float sub = (x + 0.5f) - 0.5f;
    return x < 0x1p-14f ? sub : normal;
}

// round_to_f16_unit(x[l] * inv) on the lanes of one vector of GCC's vector extension (V:
// floats, I: int32 lanes of the same size), read from x and written to y: the scalar
// function's operations lane by lane, so the same bits. (Through memory rather than by
// value: a vector argument changes the ABI between target clones.)
template <typename V, typename I>
[[gnu::always_inline]] static inline void scale_round_to_f16_unit(const float* x, float inv,
                                                                  float* y) {
    V v;
    std::memcpy(&v, x, sizeof v);
    v *= inv;
    I b;
    std::memcpy(&b, &v, sizeof b);
    b = (b + 0xFFF + ((b >> 13) & 1)) & ~0x1FFF;  // 0 <= v <= 1: the top bit is clear
    V normal;
    std::memcpy(&normal, &b, sizeof normal);
    const V sub = (v + 0.5f) - 0.5f;
    const V r = v < 0x1p-14f ? sub : normal;
    std::memcpy(y, &r, sizeof r);
}

static inline float bf16_to_f32(bf16_t h) {
    return f32_from_bits((uint32_t)h << 16);
}

// Round to nearest even; NaN stays a quiet NaN (as ggml does).
static inline bf16_t f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16_t)((u >> 16) | 64);
    return (bf16_t)((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}

}  // namespace edgellm
