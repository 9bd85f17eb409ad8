#include "kernels/ref/ref_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "edgellm/error.h"
#include "kernels/quantize.h"

namespace edgellm::ref {

int nearest_int(float v) {
    return (int)std::nearbyint(v);
}

// ---------------------------------------------------------------------------------------
// Unpackers

void unpack_q2_K(const block_q2_K& b, uint8_t q[QK_K], uint8_t sc[16], uint8_t m[16]) {
    for (int half = 0; half < 2; ++half)
        for (int s = 0; s < 4; ++s)
            for (int l = 0; l < 32; ++l)
                q[128 * half + 32 * s + l] = (b.qs[32 * half + l] >> (2 * s)) & 3;
    for (int i = 0; i < 16; ++i) {
        sc[i] = b.scales[i] & 0xF;
        m[i] = b.scales[i] >> 4;
    }
}

void unpack_q3_K(const block_q3_K& b, int8_t q[QK_K], int8_t sc[16]) {
    for (int half = 0; half < 2; ++half)
        for (int s = 0; s < 4; ++s)
            for (int l = 0; l < 32; ++l) {
                const int low = (b.qs[32 * half + l] >> (2 * s)) & 3;
                const bool high = b.hmask[l] & (1 << (4 * half + s));
                q[128 * half + 32 * s + l] = (int8_t)(low - (high ? 0 : 4));
            }
    unpack_q3_K_scales(b.scales, sc);
}

void unpack_q4_K(const block_q4_K& b, uint8_t q[QK_K], uint8_t sc[8], uint8_t m[8]) {
    for (int c = 0; c < 4; ++c)
        for (int l = 0; l < 32; ++l) {
            q[64 * c + l] = b.qs[32 * c + l] & 0xF;
            q[64 * c + 32 + l] = b.qs[32 * c + l] >> 4;
        }
    for (int j = 0; j < 8; ++j) get_scale_min_k4(j, b.scales, &sc[j], &m[j]);
}

void unpack_q5_K(const block_q5_K& b, uint8_t q[QK_K], uint8_t sc[8], uint8_t m[8]) {
    for (int c = 0; c < 4; ++c)
        for (int l = 0; l < 32; ++l) {
            q[64 * c + l] = (uint8_t)((b.qs[32 * c + l] & 0xF) | (((b.qh[l] >> (2 * c)) & 1) << 4));
            q[64 * c + 32 + l] =
                (uint8_t)((b.qs[32 * c + l] >> 4) | (((b.qh[l] >> (2 * c + 1)) & 1) << 4));
        }
    for (int j = 0; j < 8; ++j) get_scale_min_k4(j, b.scales, &sc[j], &m[j]);
}

void unpack_q6_K(const block_q6_K& b, int8_t q[QK_K]) {
    for (int half = 0; half < 2; ++half) {
        const uint8_t* ql = b.ql + 64 * half;
        const uint8_t* qh = b.qh + 32 * half;
        int8_t* out = q + 128 * half;
        for (int l = 0; l < 32; ++l) {
            out[l] = (int8_t)(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
            out[l + 32] = (int8_t)(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
            out[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
            out[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
    }
}

namespace {

// Legacy 32-element blocks: integer value of element j (0..31).
inline int q4_0_value(const block_q4_0& b, int j) {
    return (j < 16 ? (b.qs[j] & 0xF) : (b.qs[j - 16] >> 4)) - 8;
}
inline int q4_1_value(const block_q4_1& b, int j) {
    return j < 16 ? (b.qs[j] & 0xF) : (b.qs[j - 16] >> 4);
}
inline uint32_t load_u32(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}
template <typename B>
inline int q5_value(const B& b, int j) {
    const int low = j < 16 ? (b.qs[j] & 0xF) : (b.qs[j - 16] >> 4);
    const int high = (load_u32(b.qh) >> j) & 1;
    return low | (high << 4);
}

// ---------------------------------------------------------------------------------------
// Dequantize

void to_float_f32(const void* src, float* dst, int64_t n) {
    std::memcpy(dst, src, (size_t)n * sizeof(float));
}
void to_float_f16(const void* src, float* dst, int64_t n) {
    const fp16_t* x = (const fp16_t*)src;
    for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_f32(x[i]);
}
void to_float_bf16(const void* src, float* dst, int64_t n) {
    const bf16_t* x = (const bf16_t*)src;
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(x[i]);
}
void to_float_q4_0(const void* src, float* dst, int64_t n) {
    const block_q4_0* x = (const block_q4_0*)src;
    for (int64_t i = 0; i < n / QK4_0; ++i) {
        const float d = fp16_to_f32(x[i].d);
        for (int j = 0; j < QK4_0; ++j) dst[i * QK4_0 + j] = d * (float)q4_0_value(x[i], j);
    }
}
void to_float_iq4_nl(const void* src, float* dst, int64_t n) {
    const block_iq4_nl* x = (const block_iq4_nl*)src;
    for (int64_t i = 0; i < n / QK4_NL; ++i) {
        const float d = fp16_to_f32(x[i].d);
        for (int j = 0; j < QK4_NL / 2; ++j) {
            dst[i * QK4_NL + j] = d * (float)kvalues_iq4nl[x[i].qs[j] & 0xF];
            dst[i * QK4_NL + j + QK4_NL / 2] = d * (float)kvalues_iq4nl[x[i].qs[j] >> 4];
        }
    }
}
void to_float_q4_1(const void* src, float* dst, int64_t n) {
    const block_q4_1* x = (const block_q4_1*)src;
    for (int64_t i = 0; i < n / QK4_1; ++i) {
        const float d = fp16_to_f32(x[i].d), m = fp16_to_f32(x[i].m);
        for (int j = 0; j < QK4_1; ++j) dst[i * QK4_1 + j] = d * (float)q4_1_value(x[i], j) + m;
    }
}
void to_float_q5_0(const void* src, float* dst, int64_t n) {
    const block_q5_0* x = (const block_q5_0*)src;
    for (int64_t i = 0; i < n / QK5_0; ++i) {
        const float d = fp16_to_f32(x[i].d);
        for (int j = 0; j < QK5_0; ++j) dst[i * QK5_0 + j] = d * (float)(q5_value(x[i], j) - 16);
    }
}
void to_float_q5_1(const void* src, float* dst, int64_t n) {
    const block_q5_1* x = (const block_q5_1*)src;
    for (int64_t i = 0; i < n / QK5_1; ++i) {
        const float d = fp16_to_f32(x[i].d), m = fp16_to_f32(x[i].m);
        for (int j = 0; j < QK5_1; ++j) dst[i * QK5_1 + j] = d * (float)q5_value(x[i], j) + m;
    }
}
void to_float_q8_0(const void* src, float* dst, int64_t n) {
    const block_q8_0* x = (const block_q8_0*)src;
    for (int64_t i = 0; i < n / QK8_0; ++i) {
        const float d = fp16_to_f32(x[i].d);
        for (int j = 0; j < QK8_0; ++j) dst[i * QK8_0 + j] = d * (float)x[i].qs[j];
    }
}
void to_float_q8_1(const void* src, float* dst, int64_t n) {
    const block_q8_1* x = (const block_q8_1*)src;
    for (int64_t i = 0; i < n / QK8_1; ++i) {
        const float d = fp16_to_f32(x[i].d);
        for (int j = 0; j < QK8_1; ++j) dst[i * QK8_1 + j] = d * (float)x[i].qs[j];
    }
}
void to_float_q2_K(const void* src, float* dst, int64_t n) {
    const block_q2_K* x = (const block_q2_K*)src;
    uint8_t q[QK_K], sc[16], m[16];
    for (int64_t i = 0; i < n / QK_K; ++i) {
        unpack_q2_K(x[i], q, sc, m);
        const float d = fp16_to_f32(x[i].d), dmin = fp16_to_f32(x[i].dmin);
        for (int j = 0; j < QK_K; ++j)
            dst[i * QK_K + j] = d * (float)sc[j / 16] * (float)q[j] - dmin * (float)m[j / 16];
    }
}
void to_float_q3_K(const void* src, float* dst, int64_t n) {
    const block_q3_K* x = (const block_q3_K*)src;
    int8_t q[QK_K], sc[16];
    for (int64_t i = 0; i < n / QK_K; ++i) {
        unpack_q3_K(x[i], q, sc);
        const float d = fp16_to_f32(x[i].d);
        for (int j = 0; j < QK_K; ++j) dst[i * QK_K + j] = d * (float)sc[j / 16] * (float)q[j];
    }
}
void to_float_q4_K(const void* src, float* dst, int64_t n) {
    const block_q4_K* x = (const block_q4_K*)src;
    uint8_t q[QK_K], sc[8], m[8];
    for (int64_t i = 0; i < n / QK_K; ++i) {
        unpack_q4_K(x[i], q, sc, m);
        const float d = fp16_to_f32(x[i].d), dmin = fp16_to_f32(x[i].dmin);
        for (int j = 0; j < QK_K; ++j)
            dst[i * QK_K + j] = d * (float)sc[j / 32] * (float)q[j] - dmin * (float)m[j / 32];
    }
}
void to_float_q5_K(const void* src, float* dst, int64_t n) {
    const block_q5_K* x = (const block_q5_K*)src;
    uint8_t q[QK_K], sc[8], m[8];
    for (int64_t i = 0; i < n / QK_K; ++i) {
        unpack_q5_K(x[i], q, sc, m);
        const float d = fp16_to_f32(x[i].d), dmin = fp16_to_f32(x[i].dmin);
        for (int j = 0; j < QK_K; ++j)
            dst[i * QK_K + j] = d * (float)sc[j / 32] * (float)q[j] - dmin * (float)m[j / 32];
    }
}
void to_float_q6_K(const void* src, float* dst, int64_t n) {
    const block_q6_K* x = (const block_q6_K*)src;
    int8_t q[QK_K];
    for (int64_t i = 0; i < n / QK_K; ++i) {
        unpack_q6_K(x[i], q);
        const float d = fp16_to_f32(x[i].d);
        for (int j = 0; j < QK_K; ++j)
            dst[i * QK_K + j] = d * (float)x[i].scales[j / 16] * (float)q[j];
    }
}
void to_float_q8_K(const void* src, float* dst, int64_t n) {
    const block_q8_K* x = (const block_q8_K*)src;
    for (int64_t i = 0; i < n / QK_K; ++i)
        for (int j = 0; j < QK_K; ++j) dst[i * QK_K + j] = x[i].d * (float)x[i].qs[j];
}

// ---------------------------------------------------------------------------------------
// Quantize (the activation types and the float types)

void from_float_f32(const float* src, void* dst, int64_t n) {
    std::memcpy(dst, src, (size_t)n * sizeof(float));
}
void from_float_f16(const float* src, void* dst, int64_t n) {
    fp16_t* y = (fp16_t*)dst;
    for (int64_t i = 0; i < n; ++i) y[i] = f32_to_fp16(src[i]);
}
void from_float_bf16(const float* src, void* dst, int64_t n) {
    bf16_t* y = (bf16_t*)dst;
    for (int64_t i = 0; i < n; ++i) y[i] = f32_to_bf16(src[i]);
}

// q8_0: d = max|x| / 127, q = x * (127 / max|x|) rounded to nearest even. (llama.cpp's
// portable reference rounds x / d half away from zero; its x86 code, which produced the
// golden logits, does this. The two differ in the last bit of a few values.)
void from_float_q8_0(const float* src, void* dst, int64_t n) {
    block_q8_0* y = (block_q8_0*)dst;
    for (int64_t i = 0; i < n / QK8_0; ++i) {
        const float* x = src + i * QK8_0;
        float amax = 0.0f;
        for (int j = 0; j < QK8_0; ++j) amax = std::fmax(amax, std::fabs(x[j]));
        const float d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        y[i].d = f32_to_fp16(d);
        for (int j = 0; j < QK8_0; ++j) y[i].qs[j] = (int8_t)nearest_int(x[j] * id);
    }
}

// q8_1: as q8_0, plus s = d * sum(q).
void from_float_q8_1(const float* src, void* dst, int64_t n) {
    block_q8_1* y = (block_q8_1*)dst;
    for (int64_t i = 0; i < n / QK8_1; ++i) {
        const float* x = src + i * QK8_1;
        float amax = 0.0f;
        for (int j = 0; j < QK8_1; ++j) amax = std::fmax(amax, std::fabs(x[j]));
        const float d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        int sum = 0;
        for (int j = 0; j < QK8_1; ++j) {
            y[i].qs[j] = (int8_t)nearest_int(x[j] * id);
            sum += y[i].qs[j];
        }
        y[i].d = f32_to_fp16(d);
        y[i].s = f32_to_fp16((float)sum * d);
    }
}

// q8_K: the scale maps the element of largest magnitude to -127 (its sign kept in d), so
// the other extreme may round to 128 and is clamped to 127; bsums feed the K-quant mins.
void from_float_q8_K(const float* src, void* dst, int64_t n) {
    block_q8_K* y = (block_q8_K*)dst;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const float* x = src + i * QK_K;
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK_K; ++j) {
            const float ax = std::fabs(x[j]);
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        if (amax == 0.0f) {
            std::memset(&y[i], 0, sizeof(block_q8_K));
            continue;
        }
        const float iscale = -127.0f / max;
        for (int j = 0; j < QK_K; ++j) {
            const int v = nearest_int(iscale * x[j]);
            y[i].qs[j] = (int8_t)(v > 127 ? 127 : v);
        }
        for (int j = 0; j < QK_K / 16; ++j) {
            int sum = 0;
            for (int l = 0; l < 16; ++l) sum += y[i].qs[16 * j + l];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1.0f / iscale;
    }
}

// ---------------------------------------------------------------------------------------
// Dot products

void vec_dot_f32(int64_t n, float* s, const void* vx, const void* vy) {
    const float* x = (const float*)vx;
    const float* y = (const float*)vy;
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += (double)x[i] * (double)y[i];
    *s = (float)sum;
}
void vec_dot_f16(int64_t n, float* s, const void* vx, const void* vy) {
    const fp16_t* x = (const fp16_t*)vx;
    const fp16_t* y = (const fp16_t*)vy;
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += (double)fp16_to_f32(x[i]) * (double)fp16_to_f32(y[i]);
    *s = (float)sum;
}
void vec_dot_bf16(int64_t n, float* s, const void* vx, const void* vy) {
    const bf16_t* x = (const bf16_t*)vx;
    const bf16_t* y = (const bf16_t*)vy;
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += (double)bf16_to_f32(x[i]) * (double)bf16_to_f32(y[i]);
    *s = (float)sum;
}

void vec_dot_q4_0_q8_0(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q4_0* x = (const block_q4_0*)vx;
    const block_q8_0* y = (const block_q8_0*)vy;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK8_0; ++i) {
        int sumi = 0;
        for (int j = 0; j < QK8_0; ++j) sumi += q4_0_value(x[i], j) * y[i].qs[j];
        sum += (float)sumi * fp16_to_f32(x[i].d) * fp16_to_f32(y[i].d);
    }
    *s = sum;
}
void vec_dot_q4_1_q8_1(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q4_1* x = (const block_q4_1*)vx;
    const block_q8_1* y = (const block_q8_1*)vy;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK8_1; ++i) {
        int sumi = 0;
        for (int j = 0; j < QK8_1; ++j) sumi += q4_1_value(x[i], j) * y[i].qs[j];
        sum += (float)sumi * fp16_to_f32(x[i].d) * fp16_to_f32(y[i].d) +
               fp16_to_f32(x[i].m) * fp16_to_f32(y[i].s);
    }
    *s = sum;
}
void vec_dot_q5_0_q8_0(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q5_0* x = (const block_q5_0*)vx;
    const block_q8_0* y = (const block_q8_0*)vy;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK8_0; ++i) {
        int sumi = 0;
        for (int j = 0; j < QK8_0; ++j) sumi += (q5_value(x[i], j) - 16) * y[i].qs[j];
        sum += (float)sumi * fp16_to_f32(x[i].d) * fp16_to_f32(y[i].d);
    }
    *s = sum;
}
void vec_dot_q5_1_q8_1(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q5_1* x = (const block_q5_1*)vx;
    const block_q8_1* y = (const block_q8_1*)vy;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK8_1; ++i) {
        int sumi = 0;
        for (int j = 0; j < QK8_1; ++j) sumi += q5_value(x[i], j) * y[i].qs[j];
        sum += (float)sumi * fp16_to_f32(x[i].d) * fp16_to_f32(y[i].d) +
               fp16_to_f32(x[i].m) * fp16_to_f32(y[i].s);
    }
    *s = sum;
}
void vec_dot_q8_0_q8_0(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q8_0* x = (const block_q8_0*)vx;
    const block_q8_0* y = (const block_q8_0*)vy;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK8_0; ++i) {
        int sumi = 0;
        for (int j = 0; j < QK8_0; ++j) sumi += x[i].qs[j] * y[i].qs[j];
        sum += (float)sumi * fp16_to_f32(x[i].d) * fp16_to_f32(y[i].d);
    }
    *s = sum;
}

// K-quants: integer sums per sub-block, then the block scales; the mins use the
// activation's bsums so the offset term needs no per-element work.
void vec_dot_q2_K_q8_K(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q2_K* x = (const block_q2_K*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    uint8_t q[QK_K], sc[16], m[16];
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        unpack_q2_K(x[i], q, sc, m);
        int isum = 0, summs = 0;
        for (int sb = 0; sb < 16; ++sb) {
            int sumi = 0;
            for (int l = 0; l < 16; ++l) sumi += q[16 * sb + l] * y[i].qs[16 * sb + l];
            isum += sc[sb] * sumi;
            summs += m[sb] * y[i].bsums[sb];
        }
        sum += y[i].d * fp16_to_f32(x[i].d) * (float)isum -
               y[i].d * fp16_to_f32(x[i].dmin) * (float)summs;
    }
    *s = sum;
}
void vec_dot_q3_K_q8_K(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q3_K* x = (const block_q3_K*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    int8_t q[QK_K], sc[16];
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        unpack_q3_K(x[i], q, sc);
        int isum = 0;
        for (int sb = 0; sb < 16; ++sb) {
            int sumi = 0;
            for (int l = 0; l < 16; ++l) sumi += q[16 * sb + l] * y[i].qs[16 * sb + l];
            isum += sc[sb] * sumi;
        }
        sum += y[i].d * fp16_to_f32(x[i].d) * (float)isum;
    }
    *s = sum;
}
template <typename Block, void (*Unpack)(const Block&, uint8_t*, uint8_t*, uint8_t*)>
void vec_dot_q45_K_q8_K(int64_t n, float* s, const void* vx, const void* vy) {
    const Block* x = (const Block*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    uint8_t q[QK_K], sc[8], m[8];
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        Unpack(x[i], q, sc, m);
        int isum = 0, summs = 0;
        for (int sb = 0; sb < 8; ++sb) {
            int sumi = 0;
            for (int l = 0; l < 32; ++l) sumi += q[32 * sb + l] * y[i].qs[32 * sb + l];
            isum += sc[sb] * sumi;
            summs += m[sb] * (y[i].bsums[2 * sb] + y[i].bsums[2 * sb + 1]);
        }
        sum += y[i].d * fp16_to_f32(x[i].d) * (float)isum -
               y[i].d * fp16_to_f32(x[i].dmin) * (float)summs;
    }
    *s = sum;
}
void vec_dot_q6_K_q8_K(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q6_K* x = (const block_q6_K*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    int8_t q[QK_K];
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        unpack_q6_K(x[i], q);
        int isum = 0;
        for (int sb = 0; sb < 16; ++sb) {
            int sumi = 0;
            for (int l = 0; l < 16; ++l) sumi += q[16 * sb + l] * y[i].qs[16 * sb + l];
            isum += x[i].scales[sb] * sumi;
        }
        sum += y[i].d * fp16_to_f32(x[i].d) * (float)isum;
    }
    *s = sum;
}

// KV cache rows of the 4- and 5-bit types are written with the weight quantizers (as
// llama.cpp's cache writes them).
template <TensorType T>
void from_float_weights(const float* src, void* dst, int64_t n) {
    quantize_row(T, src, dst, n);
}

void vec_dot_iq4_nl_q8_0(int64_t n, float* s, const void* vx, const void* vy) {
    const block_iq4_nl* x = (const block_iq4_nl*)vx;
    const block_q8_0* y = (const block_q8_0*)vy;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK4_NL; ++i) {
        int isum = 0;
        for (int j = 0; j < QK4_NL / 2; ++j)
            isum += kvalues_iq4nl[x[i].qs[j] & 0xF] * y[i].qs[j] +
                    kvalues_iq4nl[x[i].qs[j] >> 4] * y[i].qs[j + QK4_NL / 2];
        sum += fp16_to_f32(x[i].d) * fp16_to_f32(y[i].d) * (float)isum;
    }
    *s = sum;
}

// The weighted sum of rows, one fma per (row, head, element) in row order.
template <typename Row, float (*Widen)(Row)>
void vec_mad_n_rows(int64_t hd, int64_t n_rows, const void* x, size_t bx, const float* p,
                    size_t p_stride, int ng, float* acc) {
    for (int g = 0; g < ng; ++g) {
        float* a = acc + (size_t)g * (size_t)hd;
        for (int64_t c = 0; c < n_rows; ++c) {
            const Row* row = (const Row*)((const uint8_t*)x + bx * (size_t)c);
            const float pc = p[(size_t)g * p_stride + (size_t)c];
            for (int64_t i = 0; i < hd; ++i) a[i] = std::fma(pc, Widen(row[i]), a[i]);
        }
    }
}
inline float widen_f16(fp16_t h) {
    return fp16_to_f32(h);
}
inline float widen_bf16(bf16_t h) {
    return bf16_to_f32(h);
}
inline float widen_f32(float f) {
    return f;
}
template <typename Row, float (*Widen)(Row)>
void dot_rows_f32q(int64_t hd, int64_t n_rows, const void* x, size_t bx, const float* q, int ng,
                   float* s, size_t s_stride) {
    for (int g = 0; g < ng; ++g)
        for (int64_t c = 0; c < n_rows; ++c) {
            const Row* row = (const Row*)((const uint8_t*)x + bx * (size_t)c);
            float acc = 0.0f;
            for (int64_t i = 0; i < hd; ++i) acc = std::fma(q[hd * g + i], Widen(row[i]), acc);
            s[s_stride * (size_t)g + (size_t)c] = acc;
        }
}

// The same for block types: each row dequantized whole (exact values), then as above.
constexpr int64_t kMaxHead = 1024;
template <ToFloatFn ToFloat>
void vec_mad_n_blocks(int64_t hd, int64_t n_rows, const void* x, size_t bx, const float* p,
                      size_t p_stride, int ng, float* acc) {
    EDGELLM_ASSERT(hd <= kMaxHead, "head size above 1024");
    float row[kMaxHead];
    for (int g = 0; g < ng; ++g) {
        float* a = acc + (size_t)g * (size_t)hd;
        for (int64_t c = 0; c < n_rows; ++c) {
            ToFloat((const uint8_t*)x + bx * (size_t)c, row, hd);
            const float pc = p[(size_t)g * p_stride + (size_t)c];
            for (int64_t i = 0; i < hd; ++i) a[i] = std::fma(pc, row[i], a[i]);
        }
    }
}
template <ToFloatFn ToFloat>
void dot_rows_blocks(int64_t hd, int64_t n_rows, const void* x, size_t bx, const float* q, int ng,
                     float* s, size_t s_stride) {
    EDGELLM_ASSERT(hd <= kMaxHead, "head size above 1024");
    float row[kMaxHead];
    for (int64_t c = 0; c < n_rows; ++c) {
        ToFloat((const uint8_t*)x + bx * (size_t)c, row, hd);
        for (int g = 0; g < ng; ++g) {
            float acc = 0.0f;
            for (int64_t i = 0; i < hd; ++i) acc = std::fma(q[hd * g + i], row[i], acc);
            s[s_stride * (size_t)g + (size_t)c] = acc;
        }
    }
}

// q8_0 keys against q8_0 queries: per block the exact integer sum, then one FMA.
void dot_rows_q8_q8_0(int64_t hd, int64_t n_rows, const void* x, size_t bx, const void* q,
                      size_t q_stride, int ng, float* s, size_t s_stride) {
    const int64_t nb = hd / 32;
    for (int g = 0; g < ng; ++g) {
        const block_q8_0* qb = (const block_q8_0*)((const uint8_t*)q + q_stride * (size_t)g);
        for (int64_t c = 0; c < n_rows; ++c) {
            const block_q8_0* xb = (const block_q8_0*)((const uint8_t*)x + bx * (size_t)c);
            float acc = 0.0f;
            for (int64_t b = 0; b < nb; ++b) {
                int32_t isum = 0;
                for (int i = 0; i < 32; ++i) isum += (int32_t)qb[b].qs[i] * (int32_t)xb[b].qs[i];
                const float d = fp16_to_f32(qb[b].d) * fp16_to_f32(xb[b].d);
                acc = std::fma((float)isum, d, acc);
            }
            s[s_stride * (size_t)g + (size_t)c] = acc;
        }
    }
}

// q8_0 values weighted in integers: per chunk of rows and block, the weights rounded to
// 7 bits against the chunk's largest, the exact integer sums, one FMA by its scale.
void mad_rows_q8_q8_0(int64_t hd, int64_t n_rows, const void* x, size_t bx, const float* e,
                      size_t e_stride, int ng, float* acc) {
    const int64_t nb = hd / 32;
    for (int g = 0; g < ng; ++g) {
        const float* eg = e + e_stride * (size_t)g;
        for (int64_t c0 = 0; c0 < n_rows; c0 += kMadChunkRows) {
            const int64_t nr = std::min(kMadChunkRows, n_rows - c0);
            for (int64_t b = 0; b < nb; ++b) {
                float w[kMadChunkRows];
                float dmax = 0.0f;
                for (int64_t r = 0; r < nr; ++r) {
                    const block_q8_0* xb = (const block_q8_0*)((const uint8_t*)x + bx * (size_t)(c0 + r)) + b;
                    w[r] = eg[c0 + r] * fp16_to_f32(xb->d);
                    if (w[r] > dmax) dmax = w[r];
                }
                if (!(dmax > 0.0f) || std::isinf(dmax)) continue;
                const float up = 127.0f / dmax, down = dmax / 127.0f;
                int32_t sum[32] = {};
                for (int64_t r = 0; r < nr; ++r) {
                    const float v = w[r] * up;
                    const int32_t pc = v >= 0.0f ? (int32_t)std::min(std::nearbyint(v), 127.0f) : 0;
                    const block_q8_0* xb = (const block_q8_0*)((const uint8_t*)x + bx * (size_t)(c0 + r)) + b;
                    for (int i = 0; i < 32; ++i) sum[i] += pc * (int32_t)xb->qs[i];
                }
                float* a = acc + (size_t)g * (size_t)hd + 32 * (size_t)b;
                for (int i = 0; i < 32; ++i) a[i] = std::fma((float)sum[i], down, a[i]);
            }
        }
    }
}

void set(TypeKernels* table, TensorType t, ToFloatFn to, FromFloatFn from, VecDotFn dot,
         TensorType dot_type) {
    TypeKernels& k = table[(uint32_t)t];
    k.to_float = to;
    k.from_float = from;
    k.vec_dot = dot;
    k.vec_dot_type = dot_type;
}

}  // namespace

void fill_reference(TypeKernels* table) {
    using T = TensorType;
    set(table, T::F32, to_float_f32, from_float_f32, vec_dot_f32, T::F32);
    set(table, T::F16, to_float_f16, from_float_f16, vec_dot_f16, T::F16);
    set(table, T::BF16, to_float_bf16, from_float_bf16, vec_dot_bf16, T::BF16);
    set(table, T::Q4_0, to_float_q4_0, from_float_weights<T::Q4_0>, vec_dot_q4_0_q8_0, T::Q8_0);
    set(table, T::Q4_1, to_float_q4_1, from_float_weights<T::Q4_1>, vec_dot_q4_1_q8_1, T::Q8_1);
    set(table, T::Q5_0, to_float_q5_0, from_float_weights<T::Q5_0>, vec_dot_q5_0_q8_0, T::Q8_0);
    set(table, T::Q5_1, to_float_q5_1, from_float_weights<T::Q5_1>, vec_dot_q5_1_q8_1, T::Q8_1);
    set(table, T::IQ4_NL, to_float_iq4_nl, from_float_weights<T::IQ4_NL>, vec_dot_iq4_nl_q8_0,
        T::Q8_0);
    set(table, T::Q8_0, to_float_q8_0, from_float_q8_0, vec_dot_q8_0_q8_0, T::Q8_0);
    set(table, T::Q8_1, to_float_q8_1, from_float_q8_1, nullptr, T::Q8_1);
    set(table, T::Q2_K, to_float_q2_K, nullptr, vec_dot_q2_K_q8_K, T::Q8_K);
    set(table, T::Q3_K, to_float_q3_K, nullptr, vec_dot_q3_K_q8_K, T::Q8_K);
    set(table, T::Q4_K, to_float_q4_K, nullptr, vec_dot_q45_K_q8_K<block_q4_K, unpack_q4_K>,
        T::Q8_K);
    set(table, T::Q5_K, to_float_q5_K, nullptr, vec_dot_q45_K_q8_K<block_q5_K, unpack_q5_K>,
        T::Q8_K);
    set(table, T::Q6_K, to_float_q6_K, nullptr, vec_dot_q6_K_q8_K, T::Q8_K);
    set(table, T::Q8_K, to_float_q8_K, from_float_q8_K, nullptr, T::Q8_K);
    table[(uint32_t)T::F16].vec_mad_n = vec_mad_n_rows<fp16_t, widen_f16>;
    table[(uint32_t)T::F16].dot_rows = dot_rows_f32q<fp16_t, widen_f16>;
    table[(uint32_t)T::Q8_0].vec_mad_n = vec_mad_n_blocks<to_float_q8_0>;
    table[(uint32_t)T::Q8_0].dot_rows = dot_rows_blocks<to_float_q8_0>;
    table[(uint32_t)T::Q8_0].dot_rows_q8 = dot_rows_q8_q8_0;
    table[(uint32_t)T::Q8_0].mad_rows_q8 = mad_rows_q8_q8_0;
    // The other KV cache types (attention's scores and weighted sums).
    table[(uint32_t)T::F32].vec_mad_n = vec_mad_n_rows<float, widen_f32>;
    table[(uint32_t)T::F32].dot_rows = dot_rows_f32q<float, widen_f32>;
    table[(uint32_t)T::BF16].vec_mad_n = vec_mad_n_rows<bf16_t, widen_bf16>;
    table[(uint32_t)T::BF16].dot_rows = dot_rows_f32q<bf16_t, widen_bf16>;
    table[(uint32_t)T::Q4_0].vec_mad_n = vec_mad_n_blocks<to_float_q4_0>;
    table[(uint32_t)T::Q4_0].dot_rows = dot_rows_blocks<to_float_q4_0>;
    table[(uint32_t)T::Q4_1].vec_mad_n = vec_mad_n_blocks<to_float_q4_1>;
    table[(uint32_t)T::Q4_1].dot_rows = dot_rows_blocks<to_float_q4_1>;
    table[(uint32_t)T::Q5_0].vec_mad_n = vec_mad_n_blocks<to_float_q5_0>;
    table[(uint32_t)T::Q5_0].dot_rows = dot_rows_blocks<to_float_q5_0>;
    table[(uint32_t)T::Q5_1].vec_mad_n = vec_mad_n_blocks<to_float_q5_1>;
    table[(uint32_t)T::Q5_1].dot_rows = dot_rows_blocks<to_float_q5_1>;
    table[(uint32_t)T::IQ4_NL].vec_mad_n = vec_mad_n_blocks<to_float_iq4_nl>;
    table[(uint32_t)T::IQ4_NL].dot_rows = dot_rows_blocks<to_float_iq4_nl>;
    fill_reference_unpack(table);
    for (uint32_t id = 0; id < kTensorTypeCount; ++id)
        table[id].gemv_x16 = gemv_x16_ref((TensorType)id);
}

}  // namespace edgellm::ref
