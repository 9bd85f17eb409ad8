// Panel GEMM, portable part: every weight type decoded to int8 groups, panels packed from
// them, activation rows converted to panel blocks, and the scalar definition of the GEMM
// (src/kernels/panel.h explains the scheme).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/block_formats.h"
#include "kernels/kernels.h"
#include "kernels/panel.h"
#include "kernels/ref/ref_kernels.h"

// The SIMD kernels do (scale * d) and the fma as separate steps; so does this file.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace edgellm {

namespace {

// ---------------------------------------------------------------------------------------
// Decoders: q[n] int8, scale[n / G], offset[n / G] (types with an offset).

// Nibbles of a 16-byte legacy block: element j < 16 is low nibble of byte j, j >= 16 the
// high nibble of byte j - 16.
inline void legacy_nibbles(const uint8_t* qs, int8_t* q, int bias) {
    for (int j = 0; j < 16; ++j) {
        q[j] = (int8_t)((qs[j] & 0xF) - bias);
        q[j + 16] = (int8_t)((qs[j] >> 4) - bias);
    }
}
inline void legacy_high_bits(const uint8_t* qh, int8_t* q) {
    uint32_t h;
    std::memcpy(&h, qh, 4);
    for (int j = 0; j < 32; ++j) q[j] = (int8_t)(q[j] + (((h >> j) & 1) << 4));
}

void unpack_i8_q4_0(const void* src, int64_t n, int8_t* q, float* scale, float*) {
    const block_q4_0* x = (const block_q4_0*)src;
    for (int64_t i = 0; i < n / QK4_0; ++i) {
        legacy_nibbles(x[i].qs, q + 32 * i, 8);
        scale[i] = fp16_to_f32(x[i].d);
    }
}
void unpack_i8_q4_1(const void* src, int64_t n, int8_t* q, float* scale, float* offset) {
    const block_q4_1* x = (const block_q4_1*)src;
    for (int64_t i = 0; i < n / QK4_1; ++i) {
        legacy_nibbles(x[i].qs, q + 32 * i, 0);
        scale[i] = fp16_to_f32(x[i].d);
        offset[i] = fp16_to_f32(x[i].m);
    }
}
void unpack_i8_q5_0(const void* src, int64_t n, int8_t* q, float* scale, float*) {
    const block_q5_0* x = (const block_q5_0*)src;
    for (int64_t i = 0; i < n / QK5_0; ++i) {
        legacy_nibbles(x[i].qs, q + 32 * i, 16);
        legacy_high_bits(x[i].qh, q + 32 * i);
        scale[i] = fp16_to_f32(x[i].d);
    }
}
void unpack_i8_q5_1(const void* src, int64_t n, int8_t* q, float* scale, float* offset) {
    const block_q5_1* x = (const block_q5_1*)src;
    for (int64_t i = 0; i < n / QK5_1; ++i) {
        legacy_nibbles(x[i].qs, q + 32 * i, 0);
        legacy_high_bits(x[i].qh, q + 32 * i);
        scale[i] = fp16_to_f32(x[i].d);
        offset[i] = fp16_to_f32(x[i].m);
    }
}
void unpack_i8_q8_0(const void* src, int64_t n, int8_t* q, float* scale, float*) {
    const block_q8_0* x = (const block_q8_0*)src;
    for (int64_t i = 0; i < n / QK8_0; ++i) {
        std::memcpy(q + 32 * i, x[i].qs, 32);
        scale[i] = fp16_to_f32(x[i].d);
    }
}
void unpack_i8_q2_K(const void* src, int64_t n, int8_t* q, float* scale, float* offset) {
    const block_q2_K* x = (const block_q2_K*)src;
    uint8_t u[QK_K], sc[16], m[16];
    for (int64_t i = 0; i < n / QK_K; ++i) {
        ref::unpack_q2_K(x[i], u, sc, m);
        const float d = fp16_to_f32(x[i].d), dmin = fp16_to_f32(x[i].dmin);
        for (int j = 0; j < QK_K; ++j) q[QK_K * i + j] = (int8_t)u[j];
        for (int g = 0; g < 16; ++g) {
            scale[16 * i + g] = d * (float)sc[g];
            offset[16 * i + g] = -dmin * (float)m[g];
        }
    }
}
void unpack_i8_q3_K(const void* src, int64_t n, int8_t* q, float* scale, float*) {
    const block_q3_K* x = (const block_q3_K*)src;
    int8_t sc[16];
    for (int64_t i = 0; i < n / QK_K; ++i) {
        ref::unpack_q3_K(x[i], q + QK_K * i, sc);
        const float d = fp16_to_f32(x[i].d);
        for (int g = 0; g < 16; ++g) scale[16 * i + g] = d * (float)sc[g];
    }
}
template <typename Block, void (*Unpack)(const Block&, uint8_t*, uint8_t*, uint8_t*)>
void unpack_i8_q45_K(const void* src, int64_t n, int8_t* q, float* scale, float* offset) {
    const Block* x = (const Block*)src;
    uint8_t u[QK_K], sc[8], m[8];
    for (int64_t i = 0; i < n / QK_K; ++i) {
        Unpack(x[i], u, sc, m);
        const float d = fp16_to_f32(x[i].d), dmin = fp16_to_f32(x[i].dmin);
        for (int j = 0; j < QK_K; ++j) q[QK_K * i + j] = (int8_t)u[j];
        for (int g = 0; g < 8; ++g) {
            scale[8 * i + g] = d * (float)sc[g];
            offset[8 * i + g] = -dmin * (float)m[g];
        }
    }
}
void unpack_i8_q6_K(const void* src, int64_t n, int8_t* q, float* scale, float*) {
    const block_q6_K* x = (const block_q6_K*)src;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        ref::unpack_q6_K(x[i], q + QK_K * i);
        const float d = fp16_to_f32(x[i].d);
        for (int g = 0; g < 16; ++g) scale[16 * i + g] = d * (float)x[i].scales[g];
    }
}

void set_unpack(TypeKernels* table, TensorType t, UnpackI8Fn fn, int group, bool has_min,
                int bits) {
    TypeKernels& k = table[(uint32_t)t];
    k.unpack_i8 = fn;
    k.i8_group = group;
    k.i8_min = has_min;
    k.i8_bits = bits;
}

// Sums of a panel block's values (both halves) into its derived fields.
void finish_act_block(PanelActBlock& b, float d) {
    int s0 = 0, s1 = 0;
    for (int j = 0; j < 16; ++j) {
        s0 += b.qs[j];
        s1 += b.qs[j + 16];
    }
    b.d = d;
    b.nsum16[0] = -128 * s0;
    b.nsum16[1] = -128 * s1;
    b.nsum32 = -128 * (s0 + s1);
    b.dsum16[0] = d * (float)s0;
    b.dsum16[1] = d * (float)s1;
    b.dsum32 = d * (float)(s0 + s1);
    b.unused = 0.0f;
}

}  // namespace

namespace ref {

void fill_reference_unpack(TypeKernels* table) {
    using T = TensorType;
    set_unpack(table, T::Q4_0, unpack_i8_q4_0, 32, false, 4);
    set_unpack(table, T::Q4_1, unpack_i8_q4_1, 32, true, 4);
    set_unpack(table, T::Q5_0, unpack_i8_q5_0, 32, false, 5);
    set_unpack(table, T::Q5_1, unpack_i8_q5_1, 32, true, 5);
    set_unpack(table, T::Q8_0, unpack_i8_q8_0, 32, false, 8);
    set_unpack(table, T::Q2_K, unpack_i8_q2_K, 16, true, 2);
    set_unpack(table, T::Q3_K, unpack_i8_q3_K, 16, false, 3);
    set_unpack(table, T::Q4_K, unpack_i8_q45_K<block_q4_K, unpack_q4_K>, 32, true, 4);
    set_unpack(table, T::Q5_K, unpack_i8_q45_K<block_q5_K, unpack_q5_K>, 32, true, 5);
    set_unpack(table, T::Q6_K, unpack_i8_q6_K, 16, false, 6);
}

}  // namespace ref

void pack_panel(const TypeKernels& k, const uint8_t* w, size_t row_bytes, int rows, int P,
                int64_t n, uint8_t* panel, uint8_t* tmp, bool unsigned_q, int bias) {
    const int G = k.i8_group;
    const bool has_min = k.i8_min;
    const int64_t n_groups = n / G;
    const size_t gb = panel_group_bytes(P, G, has_min);
    int8_t* q = (int8_t*)tmp;
    float* scale = (float*)(tmp + ((n + 15) & ~(int64_t)15));
    float* offset = scale + n_groups;
    for (int r = 0; r < P; ++r) {
        if (r < rows) {
            k.unpack_i8(w + (size_t)r * row_bytes, n, q, scale, offset);
        } else {
            std::memset(q, 0, (size_t)n);
            std::memset(scale, 0, sizeof(float) * (size_t)n_groups * 2);
        }
        if (unsigned_q && !has_min)  // u = q + 128: the sign bit flipped
            for (int64_t i = 0; i < n; ++i) q[i] = (int8_t)((uint8_t)q[i] ^ 0x80);
        if (bias != 0)  // small codes: u = q + bias
            for (int64_t i = 0; i < n; ++i) q[i] = (int8_t)(uint8_t)(q[i] + bias);
        for (int64_t g = 0; g < n_groups; ++g) {
            uint8_t* pg = panel + gb * (size_t)g;
            const int8_t* qg = q + g * G;
            for (int s = 0; s < G / 4; ++s)
                std::memcpy(pg + 4 * ((size_t)s * P + r), qg + 4 * s, 4);
            float* fs = (float*)(pg + (size_t)P * G);
            fs[r] = scale[g];
            if (has_min) fs[P + r] = offset[g];
        }
    }
}

void panel_slice(const uint8_t* src, int Ps, int P, int part, int G, bool has_min, int64_t n,
                 uint8_t add, uint8_t* dst) {
    const size_t sb = panel_group_bytes(Ps, G, has_min), db = panel_group_bytes(P, G, has_min);
    const size_t row_bytes = 4 * (size_t)P;
    for (int64_t g = 0; g < n / G; ++g) {
        const uint8_t* sg = src + sb * (size_t)g;
        uint8_t* dg = dst + db * (size_t)g;
        for (int s = 0; s < G / 4; ++s) {
            const uint8_t* from = sg + 4 * ((size_t)s * Ps + (size_t)part * P);
            uint8_t* to = dg + row_bytes * (size_t)s;
            for (size_t i = 0; i < row_bytes; ++i) to[i] = (uint8_t)(from[i] + add);
        }
        const float* fs = (const float*)(sg + (size_t)Ps * G);
        float* fd = (float*)(dg + (size_t)P * G);
        std::memcpy(fd, fs + (size_t)part * P, sizeof(float) * (size_t)P);
        if (has_min) std::memcpy(fd + P, fs + Ps + (size_t)part * P, sizeof(float) * (size_t)P);
    }
}

bool panel_act_supported(TensorType act_type) {
    return act_type == TensorType::Q8_0 || act_type == TensorType::Q8_1 ||
           act_type == TensorType::Q8_K;
}

void to_panel_act(TensorType act_type, const void* src, int64_t n, PanelActBlock* dst) {
    switch (act_type) {
        case TensorType::Q8_0: {
            const block_q8_0* x = (const block_q8_0*)src;
            for (int64_t i = 0; i < n / 32; ++i) {
                std::memcpy(dst[i].qs, x[i].qs, 32);
                finish_act_block(dst[i], fp16_to_f32(x[i].d));
            }
            break;
        }
        case TensorType::Q8_1: {
            const block_q8_1* x = (const block_q8_1*)src;
            for (int64_t i = 0; i < n / 32; ++i) {
                std::memcpy(dst[i].qs, x[i].qs, 32);
                finish_act_block(dst[i], fp16_to_f32(x[i].d));
            }
            break;
        }
        case TensorType::Q8_K: {
            const block_q8_K* x = (const block_q8_K*)src;
            for (int64_t i = 0; i < n / QK_K; ++i)
                for (int b = 0; b < 8; ++b) {
                    PanelActBlock& o = dst[8 * i + b];
                    std::memcpy(o.qs, x[i].qs + 32 * b, 32);
                    finish_act_block(o, x[i].d);
                }
            break;
        }
        default:
            break;
    }
}

void to_panel_act_tiles(const PanelActBlock* act, size_t act_stride, int64_t n_blocks,
                        int n_tokens, PanelActTile* dst) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        PanelActTile& o = dst[b];
        for (int t = 0; t < kPanelTileTokens; ++t) {
            if (t < n_tokens) {
                const PanelActBlock& a = act[(size_t)t * act_stride + (size_t)b];
                std::memcpy(o.qs[t], a.qs, 32);
                o.d[t] = a.d;
                o.dsum32[t] = a.dsum32;
                o.dsum16[0][t] = a.dsum16[0];
                o.dsum16[1][t] = a.dsum16[1];
            } else {
                std::memset(o.qs[t], 0, 32);
                o.d[t] = o.dsum32[t] = o.dsum16[0][t] = o.dsum16[1][t] = 0.0f;
            }
        }
    }
}

void panel_gemm_via_tiles(PanelTiledGemmFn fn, const uint8_t* panel, int64_t n_groups, int G,
                          bool has_min, int run, const PanelActBlock* act, size_t act_stride,
                          int64_t n_cols, float* y, size_t y_stride, int rows) {
    const int64_t n_blocks = n_groups * G / 32;
    const int64_t n_tiles = (n_cols + kPanelTileTokens - 1) / kPanelTileTokens;
    std::vector<PanelActTile> tiles((size_t)(n_blocks * n_tiles));
    for (int64_t t = 0; t < n_tiles; ++t) {
        const int64_t c = t * kPanelTileTokens;
        to_panel_act_tiles(act + act_stride * (size_t)c, act_stride, n_blocks,
                           (int)std::min<int64_t>(kPanelTileTokens, n_cols - c),
                           tiles.data() + (size_t)(t * n_blocks));
    }
    fn(panel, n_groups, G, has_min, run, tiles.data(), (size_t)n_blocks, n_cols, y, y_stride, rows);
}

void panel_gemm_small_ref(int P, int bits, const uint8_t* panel, int64_t n_groups, int G,
                          bool has_min, int run, const PanelActBlock* act, size_t act_stride,
                          int64_t n_cols, float* y, size_t y_stride, int rows) {
    // the signed panel back, then the definition: the same integer sums, the same bits
    const int bias = panel_code_bias(bits, has_min);
    const size_t gb = panel_group_bytes(P, G, has_min);
    std::vector<uint8_t> s(panel, panel + gb * (size_t)n_groups);
    for (int64_t g = 0; g < n_groups; ++g)
        for (size_t i = 0; i < (size_t)P * (size_t)G; ++i) s[gb * (size_t)g + i] -= (uint8_t)bias;
    panel_gemm_ref(P, false, s.data(), n_groups, G, has_min, run, act, act_stride, n_cols, y,
                   y_stride, rows);
}

void panel_gemm_ref(int P, bool unsigned_q, const uint8_t* panel, int64_t n_groups, int G,
                    bool has_min, int run, const PanelActBlock* act, size_t act_stride,
                    int64_t n_cols, float* y, size_t y_stride, int rows) {
    const size_t gb = panel_group_bytes(P, G, has_min);
    // the signed weight value of panel byte v
    auto weight = [&](uint8_t v) -> int32_t {
        if (!unsigned_q) return (int8_t)v;
        return has_min ? (int32_t)v : (int32_t)v - 128;
    };
    for (int64_t c = 0; c < n_cols; ++c) {
        const PanelActBlock* a = act + (size_t)c * act_stride;
        for (int r = 0; r < rows; ++r) {
            float acc = 0.0f, t = 0.0f;
            for (int64_t g = 0; g < n_groups; ++g) {
                const uint8_t* pg = panel + gb * (size_t)g;
                const PanelActBlock& b = G == 32 ? a[g] : a[g / 2];
                const int half = G == 32 ? 0 : (int)(g % 2);
                const int8_t* aq = b.qs + 16 * half;
                int32_t isum = 0;
                for (int j = 0; j < G; ++j)
                    isum += weight(pg[4 * ((size_t)(j / 4) * P + r) + j % 4]) * aq[j];
                const float* fs = (const float*)(pg + (size_t)P * G);
                const float ds = G == 32 ? b.dsum32 : b.dsum16[half];
                if (run <= 1) {
                    const float sd = fs[r] * b.d;
                    acc = std::fma((float)isum, sd, acc);
                    if (has_min) acc = std::fma(fs[P + r], ds, acc);
                } else {
                    t = std::fma((float)isum, fs[r], t);
                    if (has_min) acc = std::fma(fs[P + r], ds, acc);
                    if ((g + 1) % run == 0) {
                        const int64_t g0 = g + 1 - run;
                        const float d = (G == 32 ? a[g0] : a[g0 / 2]).d;
                        acc = std::fma(t, d, acc);
                        t = 0.0f;
                    }
                }
            }
            y[(size_t)c * y_stride + r] = acc;
        }
    }
}

void bf16_pack_ref(const float* rows, size_t stride, int64_t n, uint16_t* panel) {
    for (int64_t k = 0; k < n / kBf16Step; ++k)
        for (int p = 0; p < 16; ++p)
            for (int r = 0; r < 16; ++r)
                for (int j = 0; j < 2; ++j)
                    panel[(size_t)k * kBf16StepElems + (size_t)p * 32 + (size_t)r * 2 + (size_t)j] =
                        bf16_round(rows[(size_t)r * stride + (size_t)(k * kBf16Step + 2 * p + j)]);
}

void bf16_act_ref(const float* x, size_t x_stride, int n_rows, int64_t n, uint16_t* tile) {
    for (int64_t k = 0; k < n / kBf16Step; ++k)
        for (int t = 0; t < 16; ++t)
            for (int i = 0; i < kBf16Step; ++i)
                tile[(size_t)k * kBf16StepElems + (size_t)t * 32 + (size_t)i] =
                    t < n_rows ? bf16_round(x[(size_t)t * x_stride + (size_t)(k * kBf16Step + i)])
                               : (uint16_t)0;
}

namespace {
float from_bf16(uint16_t h) {
    const uint32_t b = (uint32_t)h << 16;
    float f;
    std::memcpy(&f, &b, 4);
    return f;
}
}  // namespace

void bf16_gemm_ref(const uint16_t* panels, size_t panel_stride, int np, const uint16_t* tiles,
                   size_t tile_stride, int nt, int64_t n_steps, float* y, size_t y_stride) {
    for (int t = 0; t < 16 * nt; ++t)
        for (int r = 0; r < 16 * np; ++r) {
            const uint16_t* a = tiles + (size_t)(t / 16) * tile_stride + (size_t)(t % 16) * 32;
            const uint16_t* w = panels + (size_t)(r / 16) * panel_stride + (size_t)(r % 16) * 2;
            float acc = 0.0f;
            for (int64_t k = 0; k < n_steps; ++k)
                for (int p = 0; p < 16; ++p)
                    for (int j = 0; j < 2; ++j) {
                        // (the product of two bf16 is exact in f32: one rounding, the sum's)
                        const float prod = from_bf16(a[(size_t)k * kBf16StepElems + (size_t)(2 * p + j)]) *
                                           from_bf16(w[(size_t)k * kBf16StepElems + (size_t)p * 32 + (size_t)j]);
                        acc = acc + prod;
                    }
            y[(size_t)t * y_stride + (size_t)r] = acc;
        }
}

}  // namespace edgellm
