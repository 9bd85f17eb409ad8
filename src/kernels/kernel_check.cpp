#include "kernels/kernel_check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/fp16.h"

namespace edgellm {

double vec_dot_error_budget(TensorType t) {
    switch (t) {
        case TensorType::F32:
        case TensorType::F16:
        case TensorType::BF16:
            return 1e-4;
        default:
            return 2e-5;
    }
}

namespace {

// Byte offsets of the f16 scale fields inside one block, per type.
std::vector<int> fp16_fields(TensorType t) {
    switch (t) {
        case TensorType::Q4_0:
        case TensorType::Q5_0:
        case TensorType::Q8_0:
        case TensorType::IQ4_NL:
            return {0};
        case TensorType::Q4_1:
        case TensorType::Q5_1:
        case TensorType::Q8_1:
        case TensorType::Q4_K:
        case TensorType::Q5_K:
            return {0, 2};
        case TensorType::Q2_K:
            return {80, 82};
        case TensorType::Q3_K:
            return {108};
        case TensorType::Q6_K:
            return {208};
        default:
            return {};
    }
}

// 16 random rows of type t (n elements, seeds seed, seed + 1, ...) repacked as one x16 group.
std::vector<uint8_t> random_x16_group(TensorType t, int64_t n, uint64_t seed) {
    const size_t row = row_size(t, n);
    std::vector<uint8_t> rows(row * kX16Rows), group(row * kX16Rows);
    for (int r = 0; r < kX16Rows; ++r) {
        const auto xr = random_tensor_data(t, n, seed + (uint64_t)r);
        std::memcpy(rows.data() + row * (size_t)r, xr.data(), row);
    }
    x16_pack(t, rows.data(), row, n, group.data());
    return group;
}

// cols activation rows of n elements as panel blocks, column c at c * stride blocks:
// normal floats quantized to act_type as the quantizers write them (-127..127: the AVX2
// GEMV's sign trick needs that, as the panel GEMM's does).
std::vector<PanelActBlock> random_panel_act(TensorType act_type, int64_t n, int cols,
                                            size_t stride, uint64_t seed) {
    std::vector<PanelActBlock> act(stride * (size_t)cols);
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> yf((size_t)n);
    std::vector<uint8_t> yq(row_size(act_type, n));
    for (int c = 0; c < cols; ++c) {
        for (float& v : yf) v = normal(rng);
        reference_kernels(act_type).from_float(yf.data(), yq.data(), n);
        to_panel_act(act_type, yq.data(), n, act.data() + stride * (size_t)c);
    }
    return act;
}

}  // namespace

std::vector<uint8_t> random_tensor_data(TensorType t, int64_t n, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> scale(-0.02f, 0.02f);
    const auto& info = tensor_type_info(t);
    const size_t bytes = row_size(t, n);
    std::vector<uint8_t> out(bytes);
    std::vector<float> f((size_t)n);
    for (auto& v : f) v = normal(rng);
    const auto& ref = reference_kernels(t);
    if (t == TensorType::Q8_K || t == TensorType::Q8_1 || t == TensorType::F32 ||
        t == TensorType::F16 || t == TensorType::BF16) {
        ref.from_float(f.data(), out.data(), n);
        return out;
    }
    for (auto& b : out) b = (uint8_t)(rng() & 0xff);
    const int64_t nb = n / info.block_size;
    for (int64_t i = 0; i < nb; ++i)
        for (int off : fp16_fields(t)) {
            const fp16_t h = f32_to_fp16(scale(rng));
            std::memcpy(out.data() + (size_t)i * info.type_size + off, &h, 2);
        }
    return out;
}

std::string check_type_kernels(TensorType t, const TypeKernels& cand, const TypeKernels& ref,
                               int64_t n, uint64_t seed) {
    char buf[256];
    const std::vector<uint8_t> x = random_tensor_data(t, n, seed);
    std::vector<float> xf((size_t)n), xf_ref((size_t)n);

    if (cand.to_float && cand.to_float != ref.to_float) {
        cand.to_float(x.data(), xf.data(), n);
        ref.to_float(x.data(), xf_ref.data(), n);
        for (int64_t i = 0; i < n; ++i) {
            const float tol = 1e-6f * std::fabs(xf_ref[i]) + 1e-30f;
            if (!(std::fabs(xf[i] - xf_ref[i]) <= tol)) {
                std::snprintf(buf, sizeof buf, "%s to_float[%s]: element %lld is %g, reference %g",
                              tensor_type_name(t), cand.to_float_isa, (long long)i, xf[i],
                              xf_ref[i]);
                return buf;
            }
        }
    }

    if (cand.from_float && cand.from_float != ref.from_float) {
        std::mt19937_64 rng(seed ^ 0x5eed);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        std::vector<float> src((size_t)n);
        for (auto& v : src) v = normal(rng);
        if (n >= 64) src[7] = 0.0f;  // a zero and an all-zero block are edge cases
        const auto& info = tensor_type_info(t);
        if (n >= 2 * info.block_size)
            for (int64_t i = info.block_size; i < 2 * info.block_size; ++i) src[(size_t)i] = 0.0f;
        const size_t bytes = row_size(t, n);
        std::vector<uint8_t> a(bytes), b(bytes);
        cand.from_float(src.data(), a.data(), n);
        ref.from_float(src.data(), b.data(), n);
        std::vector<float> da((size_t)n), db((size_t)n);
        ref.to_float(a.data(), da.data(), n);
        ref.to_float(b.data(), db.data(), n);
        for (int64_t blk = 0; blk < n / info.block_size; ++blk) {
            float amax = 0.0f;
            for (int64_t i = 0; i < info.block_size; ++i)
                amax = std::fmax(amax, std::fabs(src[(size_t)(blk * info.block_size + i)]));
            // one quantization step of an 8-bit block, or exact for the float types
            const float step = info.quantized ? amax / 127.0f * 1.01f + 1e-30f : 0.0f;
            for (int64_t i = 0; i < info.block_size; ++i) {
                const size_t k = (size_t)(blk * info.block_size + i);
                if (!(std::fabs(da[k] - db[k]) <= step)) {
                    std::snprintf(buf, sizeof buf,
                                  "%s from_float[%s]: element %zu dequantizes to %g, reference %g",
                                  tensor_type_name(t), cand.from_float_isa, k, da[k], db[k]);
                    return buf;
                }
            }
        }
    }

    if (cand.vec_dot && cand.vec_dot != ref.vec_dot) {
        const std::vector<uint8_t> y = random_tensor_data(ref.vec_dot_type, n, seed + 1);
        std::vector<float> yf((size_t)n);
        reference_kernels(ref.vec_dot_type).to_float(y.data(), yf.data(), n);
        ref.to_float(x.data(), xf_ref.data(), n);
        double magnitude = 0.0;
        for (int64_t i = 0; i < n; ++i) magnitude += std::fabs((double)xf_ref[i] * yf[i]);
        float got = 0.0f, want = 0.0f;
        cand.vec_dot(n, &got, x.data(), y.data());
        ref.vec_dot(n, &want, x.data(), y.data());
        const double err = std::fabs((double)got - want);
        if (!(err <= vec_dot_error_budget(t) * magnitude + 1e-30)) {
            std::snprintf(buf, sizeof buf,
                          "%s vec_dot[%s]: %.9g, reference %.9g (error %.3g of magnitude %.3g, "
                          "budget %.1g)",
                          tensor_type_name(t), cand.vec_dot_isa, got, want, err / magnitude,
                          magnitude, vec_dot_error_budget(t));
            return buf;
        }
    }
    if (cand.vec_dot_4 && cand.vec_dot_4 != ref.vec_dot_4) {
        // Four activation rows (with a gap between them, as rows of a batch have) against
        // one weight row; each result against the reference dot product.
        const size_t row = row_size(ref.vec_dot_type, n);
        const size_t stride = row + 64;
        std::vector<uint8_t> ys(stride * 4);
        for (int c = 0; c < 4; ++c) {
            const auto yc = random_tensor_data(ref.vec_dot_type, n, seed + 10 + (uint64_t)c);
            std::memcpy(ys.data() + stride * (size_t)c, yc.data(), row);
        }
        float got[4];
        cand.vec_dot_4(n, got, x.data(), ys.data(), stride);
        ref.to_float(x.data(), xf_ref.data(), n);
        std::vector<float> yf((size_t)n);
        for (int c = 0; c < 4; ++c) {
            const uint8_t* yc = ys.data() + stride * (size_t)c;
            reference_kernels(ref.vec_dot_type).to_float(yc, yf.data(), n);
            double magnitude = 0.0;
            for (int64_t i = 0; i < n; ++i) magnitude += std::fabs((double)xf_ref[i] * yf[i]);
            float want = 0.0f;
            ref.vec_dot(n, &want, x.data(), yc);
            const double err = std::fabs((double)got[c] - want);
            if (!(err <= vec_dot_error_budget(t) * magnitude + 1e-30)) {
                std::snprintf(buf, sizeof buf, "%s vec_dot_4[%s] column %d: %.9g, reference %.9g",
                              tensor_type_name(t), cand.vec_dot_4_isa, c, got[c], want);
                return buf;
            }
        }
    }
    if (cand.vec_dot_n && cand.vec_dot_n != ref.vec_dot_n) {
        // Seven rows sharing one: compare each result with the reference dot product.
        const size_t row = row_size(ref.vec_dot_type, n);
        const int ny = 7;
        std::vector<uint8_t> ys(row * ny);
        for (int c = 0; c < ny; ++c) {
            const auto yc = random_tensor_data(ref.vec_dot_type, n, seed + 20 + (uint64_t)c);
            std::memcpy(ys.data() + row * (size_t)c, yc.data(), row);
        }
        std::vector<float> got((size_t)ny);
        cand.vec_dot_n(n, got.data(), x.data(), ys.data(), row, ny);
        ref.to_float(x.data(), xf_ref.data(), n);
        std::vector<float> yf((size_t)n);
        for (int c = 0; c < ny; ++c) {
            const uint8_t* yc = ys.data() + row * (size_t)c;
            reference_kernels(ref.vec_dot_type).to_float(yc, yf.data(), n);
            double magnitude = 0.0;
            for (int64_t i = 0; i < n; ++i) magnitude += std::fabs((double)xf_ref[i] * yf[i]);
            float want = 0.0f;
            ref.vec_dot(n, &want, x.data(), yc);
            if (!(std::fabs((double)got[(size_t)c] - want) <=
                  vec_dot_error_budget(t) * magnitude + 1e-30)) {
                std::snprintf(buf, sizeof buf, "%s vec_dot_n[%s] row %d: %.9g, reference %.9g",
                              tensor_type_name(t), cand.vec_dot_n_isa, c, got[(size_t)c], want);
                return buf;
            }
        }
    }
    if (cand.pack_x16 && x16_layout(t)) {
        // 16 rows with a stride past their length, the same bytes as x16_pack
        const size_t row = row_size(t, n), stride = row + 7;
        std::vector<uint8_t> rows(stride * kX16Rows), want(row * kX16Rows), got(row * kX16Rows, 0xee);
        for (int r = 0; r < kX16Rows; ++r) {
            const auto xr = random_tensor_data(t, n, seed + 40 + (uint64_t)r);
            std::memcpy(rows.data() + stride * (size_t)r, xr.data(), row);
        }
        x16_pack(t, rows.data(), stride, n, want.data());
        cand.pack_x16(t, rows.data(), stride, n, got.data());
        if (want != got) {
            std::snprintf(buf, sizeof buf, "%s pack_x16 differs from x16_pack", tensor_type_name(t));
            return buf;
        }
    }
    if (cand.to_panel_x16 && x16_layout(t)) {
        // 16 random rows repacked; both panel signs, byte for byte against x16_to_panel
        const std::vector<uint8_t> group = random_x16_group(t, n, seed + 50);
        const size_t bytes = panel_bytes_max(kX16Rows, n);
        for (bool unsigned_q : {true, false}) {
            std::vector<uint8_t> want(bytes, 0xee), got(bytes, 0xee);
            x16_to_panel(t, group.data(), n, want.data(), unsigned_q);
            cand.to_panel_x16(group.data(), n, got.data(), unsigned_q);
            if (want != got) {
                std::snprintf(buf, sizeof buf, "%s to_panel_x16 (%s) differs from x16_to_panel",
                              tensor_type_name(t), unsigned_q ? "unsigned" : "signed");
                return buf;
            }
        }
    }
    if (cand.gemv_x16 && cand.gemv_x16 != ref.gemv_x16 && ref.gemv_x16 &&
        panel_act_supported(ref.vec_dot_type)) {
        // 16 rows repacked, seven activation columns a little apart: one column (decode)
        // and several (the GEMVs take four, two and one at a time), each bit for bit
        // against the scalar definition.
        const std::vector<uint8_t> group = random_x16_group(t, n, seed + 60);
        const size_t stride = (size_t)(n / 32) + 1;
        constexpr int kCols = 7;
        const std::vector<PanelActBlock> act =
            random_panel_act(ref.vec_dot_type, n, kCols, stride, seed ^ 0xa11ce);
        for (int cols : {1, 3, kCols}) {
            const size_t ys = kX16Rows + 5;
            std::vector<float> want(ys * (size_t)cols, -7.0f), got = want;
            ref.gemv_x16(n, group.data(), act.data(), stride, cols, want.data(), ys);
            cand.gemv_x16(n, group.data(), act.data(), stride, cols, got.data(), ys);
            if (std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) != 0) {
                std::snprintf(buf, sizeof buf,
                              "%s gemv_x16[%s] differs from the reference (%d columns)",
                              tensor_type_name(t), cand.gemv_x16_isa, cols);
                return buf;
            }
        }
    }
    if (cand.x16_tiles.gemm && x16_layout(t) && panel_act_supported(ref.vec_dot_type)) {
        // The exact batch GEMM against the scalar GEMV, bit for bit: 16 random rows
        // repacked, 37 activation columns (two whole tiles of 16, which go together, and a
        // partial one alone).
        const std::vector<uint8_t> group = random_x16_group(t, n, seed + 80);
        constexpr int kCols = 37, kTiles = 3;
        const size_t nb = (size_t)(n / 32);
        const std::vector<PanelActBlock> act =
            random_panel_act(ref.vec_dot_type, n, kCols, nb, seed ^ 0x7e57);
        std::vector<PanelActTile> tiles(nb * kTiles);
        for (int j = 0; j < kTiles; ++j)
            to_panel_act_tiles(act.data() + nb * (size_t)(16 * j), nb, (int64_t)nb,
                               std::min(16, kCols - 16 * j), tiles.data() + nb * (size_t)j);
        std::vector<int8_t> pairs(nb / 2 * kPanelPairBytes * kTiles);
        for (int j = 0; j < kTiles; ++j)
            to_panel_act_pairs(tiles.data() + nb * (size_t)j, (int64_t)nb,
                               pairs.data() + nb / 2 * kPanelPairBytes * (size_t)j);
        std::vector<uint8_t> panel(cand.x16_tiles.panel_bytes(n) + 64);
        cand.x16_tiles.pack(group.data(), n, panel.data());
        const size_t ys = kX16Rows + 3;
        std::vector<float> want(ys * kCols, -7.0f), got = want;
        gemv_x16_ref(t)(n, group.data(), act.data(), nb, kCols, want.data(), ys);
        cand.x16_tiles.gemm(panel.data(), n, tiles.data(), nb, pairs.data(), nb / 2 * kPanelPairBytes,
                            kCols, got.data(), ys);
        if (std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) != 0) {
            std::snprintf(buf, sizeof buf, "%s x16 tile GEMM differs from the scalar GEMV",
                          tensor_type_name(t));
            return buf;
        }
    }
    // Attention kernels: several head sizes (the SIMD slices and their tails; sizes a set
    // does not take go to the reference) and query counts (one, a group, more than one
    // register tile of queries), each against the reference bit for bit.
    const bool mad = cand.vec_mad_n && cand.vec_mad_n != ref.vec_mad_n && ref.vec_mad_n;
    const bool dots = cand.dot_rows && cand.dot_rows != ref.dot_rows && ref.dot_rows;
    const bool dots8 = cand.dot_rows_q8 && cand.dot_rows_q8 != ref.dot_rows_q8 && ref.dot_rows_q8;
    const bool mad8 = cand.mad_rows_q8 && cand.mad_rows_q8 != ref.mad_rows_q8 && ref.mad_rows_q8;
    const int64_t bs = tensor_type_info(t).block_size;
    for (const int64_t hd : {std::min<int64_t>(n, 128), (int64_t)96, (int64_t)80, (int64_t)48,
                             (int64_t)20, (int64_t)256, (int64_t)512}) {
        if (!(mad || dots || dots8 || mad8) || hd > n || hd % bs != 0) continue;
        for (const int ng : {1, 7, 12}) {  // 12: past one tile of 8 (unit tests: 56)
            // 16 + 16 + 5 rows: full SIMD blocks of keys and a tail; rows a little apart
            const int rows = 37;
            const size_t row = row_size(t, hd) + 10;
            std::vector<uint8_t> xs(row * rows);
            for (int c = 0; c < rows; ++c) {
                const auto xc = random_tensor_data(t, hd, seed + 40 + (uint64_t)c);
                std::memcpy(xs.data() + row * (size_t)c, xc.data(), xc.size());
            }
            std::mt19937 rng((uint32_t)seed + (uint32_t)hd);
            std::uniform_real_distribution<float> u(0.0f, 1.0f);
            const size_t ps = rows + 3;
            std::vector<float> p(ps * (size_t)ng), q((size_t)(ng * hd));
            for (float& v : p) v = u(rng);
            for (float& v : q) v = 2.0f * u(rng) - 1.0f;
            std::vector<float> want, got;
            if (mad) {
                want.assign((size_t)(ng * hd), 0.0f);
                for (float& v : want) v = u(rng) - 0.5f;
                got = want;
                ref.vec_mad_n(hd, rows, xs.data(), row, p.data(), ps, ng, want.data());
                cand.vec_mad_n(hd, rows, xs.data(), row, p.data(), ps, ng, got.data());
                if (std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) != 0) {
                    std::snprintf(buf, sizeof buf,
                                  "%s vec_mad_n[%s] differs from the reference (head size %lld, "
                                  "%d heads)",
                                  tensor_type_name(t), cand.vec_mad_n_isa, (long long)hd, ng);
                    return buf;
                }
            }
            if (mad8) {
                // weights as attention passes them (in [0, 1], some exactly 0 or 1, one
                // NaN); the first row's codes all 127, the second's all -128 (the largest
                // products), and a chunk of 32 rows before the 5 left
                std::vector<float> e = p;
                for (int g = 0; g < ng; ++g) {
                    e[ps * (size_t)g] = 1.0f;
                    e[ps * (size_t)g + 2 + (size_t)(g % 5)] = 0.0f;
                }
                if (ng > 1) e[ps + 7] = std::nanf("");
                std::vector<uint8_t> vals = xs;
                for (int64_t b = 0; b < hd / 32; ++b) {
                    std::memset(vals.data() + 34 * (size_t)b + 2, 127, 32);
                    std::memset(vals.data() + row + 34 * (size_t)b + 2, 0x80, 32);
                }
                // the fourth row's first scale +inf: its chunk's block 0 weighs w = inf
                // (D not finite: skipped) or, where the weight is 0, NaN
                const uint16_t inf_f16 = 0x7C00;
                std::memcpy(vals.data() + row * 3, &inf_f16, 2);
                want.assign((size_t)(ng * hd), 0.0f);
                for (float& v : want) v = u(rng) - 0.5f;
                got = want;
                ref.mad_rows_q8(hd, rows, vals.data(), row, e.data(), ps, ng, want.data());
                cand.mad_rows_q8(hd, rows, vals.data(), row, e.data(), ps, ng, got.data());
                if (std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) != 0) {
                    std::snprintf(buf, sizeof buf,
                                  "%s mad_rows_q8[%s] differs from the reference (head size %lld, "
                                  "%d queries)",
                                  tensor_type_name(t), cand.mad_rows_q8_isa, (long long)hd, ng);
                    return buf;
                }
            }
            if (dots8) {
                // queries quantized as attention does; the first key and query all +-127
                // (the largest block sums), the second key all -127
                const TensorType qt = TensorType::Q8_0;
                const size_t qrow = row_size(qt, hd) + 6;
                std::vector<uint8_t> qq(qrow * (size_t)ng);
                for (int g = 0; g < ng; ++g)
                    reference_kernels(qt).from_float(q.data() + hd * g, qq.data() + qrow * (size_t)g, hd);
                std::vector<uint8_t> keys = xs;
                for (int64_t b = 0; b < hd / 32; ++b) {
                    std::memset(keys.data() + 34 * (size_t)b + 2, 127, 32);
                    std::memset(keys.data() + row + 34 * (size_t)b + 2, 0x81, 32);
                    std::memset(qq.data() + 34 * (size_t)b + 2, (b % 2) ? 0x81 : 127, 32);
                }
                want.assign(ps * (size_t)ng, 3.0f);
                got = want;
                ref.dot_rows_q8(hd, rows, keys.data(), row, qq.data(), qrow, ng, want.data(), ps);
                cand.dot_rows_q8(hd, rows, keys.data(), row, qq.data(), qrow, ng, got.data(), ps);
                if (std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) != 0) {
                    std::snprintf(buf, sizeof buf,
                                  "%s dot_rows_q8[%s] differs from the reference (head size %lld, "
                                  "%d queries)",
                                  tensor_type_name(t), cand.dot_rows_q8_isa, (long long)hd, ng);
                    return buf;
                }
            }
            if (dots) {
                want.assign(ps * (size_t)ng, 3.0f);
                got = want;
                ref.dot_rows(hd, rows, xs.data(), row, q.data(), ng, want.data(), ps);
                cand.dot_rows(hd, rows, xs.data(), row, q.data(), ng, got.data(), ps);
                if (std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) != 0) {
                    std::snprintf(buf, sizeof buf,
                                  "%s dot_rows[%s] differs from the reference (head size %lld, "
                                  "%d queries)",
                                  tensor_type_name(t), cand.dot_rows_isa, (long long)hd, ng);
                    return buf;
                }
            }
        }
    }
    return {};
}

std::string check_panel_kernel(const PanelKernel& k, uint64_t seed) {
    if (!k.gemm || k.rows <= 0) return "panel kernel without a function";
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int> byte(-128, 127);
    std::uniform_int_distribution<int> act_byte(-127, 127);  // what the quantizers produce
    std::uniform_real_distribution<float> real(-1.0f, 1.0f);
    const int P = k.rows;
    // every column count to 11, and around the kernel's tiles of tokens when it takes more
    std::vector<int> col_counts;
    for (int c = 1; c <= 11; ++c) col_counts.push_back(c);
    if (k.cols > 11)
        for (int c : {16, 17, k.cols, k.cols + 3}) col_counts.push_back(c);
    const int max_cols = col_counts.back();
    // run == 1: three blocks of 32 (six groups of 16), every column count; runs of a q8_K
    // block's groups: two blocks of 256, a few column counts
    struct Case {
        int64_t n;
        bool runs;
    };
    for (const Case cs : {Case{96, false}, Case{512, true}}) {
        if (cs.runs && !k.runs) continue;
        const int64_t n = cs.n;
        std::vector<PanelActBlock> act((size_t)max_cols * (size_t)(n / 32));
        for (size_t ib = 0; ib < act.size(); ++ib) {
            PanelActBlock& b = act[ib];
            int s0 = 0, s1 = 0;
            // the first block of columns 0 and 1 at the extremes (int16 sums' worst case)
            const int fixed = ib == 0 ? 127 : ib == (size_t)(n / 32) ? -127 : 0;
            for (int j = 0; j < 32; ++j) {
                b.qs[j] = (int8_t)(fixed ? fixed : act_byte(rng));
                (j < 16 ? s0 : s1) += b.qs[j];
            }
            b.d = real(rng) * 0.01f;
            b.nsum16[0] = -128 * s0;
            b.nsum16[1] = -128 * s1;
            b.nsum32 = -128 * (s0 + s1);
            b.dsum16[0] = b.d * (float)s0;
            b.dsum16[1] = b.d * (float)s1;
            b.dsum32 = b.d * (float)(s0 + s1);
            b.unused = 0.0f;
        }
        for (int G : {16, 32})
            for (bool has_min : {false, true}) {
                const int64_t n_groups = n / G;
                const int run = cs.runs ? 256 / G : 1;
                std::vector<uint8_t> panel(panel_bytes(P, G, has_min, n));
                const size_t gb = panel_group_bytes(P, G, has_min);
                for (int64_t g = 0; g < n_groups; ++g) {
                    uint8_t* pg = panel.data() + gb * (size_t)g;
                    for (size_t i = 0; i < (size_t)P * G; ++i) pg[i] = (uint8_t)byte(rng);
                    float* fs = (float*)(pg + (size_t)P * G);
                    for (int i = 0; i < P * (has_min ? 2 : 1); ++i) fs[i] = real(rng) * 0.05f;
                }
                for (int rows : {P, P / 2 + 1})
                    for (int cols : col_counts) {
                        if (cs.runs && cols != 1 && cols != 3 && cols != 8 && cols < 11) continue;
                        const size_t ys = (size_t)P + 3;
                        std::vector<float> want(ys * (size_t)cols, -7.0f), got = want;
                        panel_gemm_ref(P, k.unsigned_q, panel.data(), n_groups, G, has_min, run,
                                       act.data(), (size_t)(n / 32), cols, want.data(), ys, rows);
                        k.gemm(panel.data(), n_groups, G, has_min, run, act.data(),
                               (size_t)(n / 32), cols, got.data(), ys, rows);
                        if (std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) !=
                            0) {
                            char msg[220];
                            std::snprintf(msg, sizeof msg,
                                          "panel gemm %s differs from the reference (G=%d, "
                                          "offsets %d, run %d, %d rows, %d columns)",
                                          k.isa, G, (int)has_min, run, rows, cols);
                            return msg;
                        }
                    }
                if (!k.gemm_small) continue;
                // small codes: u below 2^bits, against the definition (the signed panel's
                // bits), every code width a type has
                for (int bits = 2; bits <= kPanelSmallBits; ++bits) {
                    std::uniform_int_distribution<int> code(0, (1 << bits) - 1);
                    std::vector<uint8_t> small = panel;
                    for (int64_t g = 0; g < n_groups; ++g)
                        for (size_t i = 0; i < (size_t)P * G; ++i)
                            small[gb * (size_t)g + i] = (uint8_t)code(rng);
                    // the largest codes in the first group (against the extreme activations)
                    for (size_t i = 0; i < (size_t)P * G; ++i) small[i] = (uint8_t)((1 << bits) - 1);
                    for (int rows : {P, P / 2 + 1})
                        for (int cols : col_counts) {
                            if (cols > 9 && cols != max_cols) continue;
                            const size_t ys = (size_t)P + 3;
                            std::vector<float> want(ys * (size_t)cols, -7.0f), got = want;
                            panel_gemm_small_ref(P, bits, small.data(), n_groups, G, has_min, run,
                                                 act.data(), (size_t)(n / 32), cols, want.data(),
                                                 ys, rows);
                            k.gemm_small(bits, small.data(), n_groups, G, has_min, run,
                                         act.data(), (size_t)(n / 32), cols, got.data(), ys,
                                         rows);
                            if (std::memcmp(want.data(), got.data(),
                                            want.size() * sizeof(float)) != 0) {
                                char msg[220];
                                std::snprintf(msg, sizeof msg,
                                              "panel gemm_small %s differs from the reference "
                                              "(%d bits, G=%d, offsets %d, %d rows, %d columns)",
                                              k.isa, bits, G, (int)has_min, rows, cols);
                                return msg;
                            }
                        }
                }
            }
    }
    return check_bf16_kernels(k, seed);
}

std::string check_bf16_kernels(const PanelKernel& k, uint64_t seed) {
    if (!k.bf16_pack && !k.bf16_act && !k.bf16_gemm) return "";
    if (!k.bf16_pack || !k.bf16_act || !k.bf16_gemm) return "bf16 GEMM without all its functions";
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> real(-2.0f, 2.0f);
    const int64_t n = 96;  // three steps
    const size_t stride = (size_t)n + 5;
    // rows and tokens with the values rounding meets: ties, subnormals, zeros, the largest
    auto fill = [&](std::vector<float>& v) {
        for (float& f : v) f = real(rng);
        const float specials[] = {0.0f, -0.0f, 1.0f + 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-23f,
                                  1.0f + 3 * 0x1p-8f, 1e-39f, -3e-40f, 65504.0f};
        for (size_t i = 0; i < sizeof specials / sizeof *specials; ++i)
            v[(i * 37) % v.size()] = specials[i];
    };
    std::vector<float> rows(32 * stride), x(32 * stride);
    fill(rows);
    fill(x);
    const size_t step = kBf16StepElems * (size_t)(n / kBf16Step);
    std::vector<uint16_t> pw(2 * step), pg(2 * step), tw(2 * step), tg(2 * step);
    for (int j = 0; j < 2; ++j) {
        bf16_pack_ref(rows.data() + 16 * stride * (size_t)j, stride, n, pw.data() + step * (size_t)j);
        k.bf16_pack(rows.data() + 16 * stride * (size_t)j, stride, n, pg.data() + step * (size_t)j);
        bf16_act_ref(x.data() + 16 * stride * (size_t)j, stride, j ? 11 : 16, n, tw.data() + step * (size_t)j);
        k.bf16_act(x.data() + 16 * stride * (size_t)j, stride, j ? 11 : 16, n, tg.data() + step * (size_t)j);
    }
    if (pw != pg) return std::string("bf16 panel packing ") + k.isa + " differs from the reference";
    if (tw != tg) return std::string("bf16 activation tiles ") + k.isa + " differ from the reference";
    {
        // NaN (quieted), infinities, the largest floats (rounding up to infinity): packed and
        // tiled alike (not multiplied: the sums below would be NaN)
        std::vector<float> odd(rows);
        const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                                  -std::numeric_limits<float>::signaling_NaN(),
                                  std::numeric_limits<float>::infinity(),
                                  -std::numeric_limits<float>::infinity(),
                                  std::numeric_limits<float>::max(), -0x1.ffffp127f};
        for (size_t i = 0; i < odd.size(); i += 3) odd[i] = specials[(i / 3) % 6];
        std::vector<uint16_t> a(step), b(step);
        bf16_pack_ref(odd.data(), stride, n, a.data());
        k.bf16_pack(odd.data(), stride, n, b.data());
        if (a != b) return std::string("bf16 panel packing ") + k.isa + " differs on NaN or infinity";
        bf16_act_ref(odd.data(), stride, 16, n, a.data());
        k.bf16_act(odd.data(), stride, 16, n, b.data());
        if (a != b) return std::string("bf16 activation tiles ") + k.isa + " differ on NaN or infinity";
    }
    // The tile unit sums in an order (and with roundings) of its own: every result within
    // 1e-5 of the sum of the products' magnitudes from the exact sum, as the reference's.
    auto bf = [](uint16_t h) {
        const uint32_t b = (uint32_t)h << 16;
        float f;
        std::memcpy(&f, &b, 4);
        return (double)f;
    };
    for (int np : {1, 2})
        for (int nt : {1, 2}) {
            const size_t ys = 37;
            std::vector<float> want(ys * 32, -7.0f), got = want;
            bf16_gemm_ref(pw.data(), step, np, tw.data(), step, nt, n / kBf16Step, want.data(), ys);
            k.bf16_gemm(pw.data(), step, np, tw.data(), step, nt, n / kBf16Step, got.data(), ys);
            for (int t = 0; t < 32; ++t)
                for (int r = 0; r < (int)ys; ++r) {
                    const size_t i = (size_t)t * ys + (size_t)r;
                    if (t >= 16 * nt || r >= 16 * np) {
                        if (got[i] != -7.0f) return std::string("bf16 gemm ") + k.isa + " wrote outside its block";
                        continue;
                    }
                    double exact = 0.0, mag = 0.0;
                    for (int64_t e = 0; e < n; ++e) {
                        const int64_t kk = e / kBf16Step, p = (e % kBf16Step) / 2, j = e % 2;
                        const double a = bf(tw[step * (size_t)(t / 16) + (size_t)kk * kBf16StepElems +
                                               (size_t)(t % 16) * 32 + (size_t)(e % kBf16Step)]);
                        const double w = bf(pw[step * (size_t)(r / 16) + (size_t)kk * kBf16StepElems +
                                               (size_t)p * 32 + (size_t)(r % 16) * 2 + (size_t)j]);
                        exact += a * w;
                        mag += std::fabs(a * w);
                    }
                    const double bound = 1e-5 * mag + 1e-30;
                    if (std::fabs(want[i] - exact) > bound || std::fabs(got[i] - exact) > bound) {
                        char msg[200];
                        std::snprintf(msg, sizeof msg,
                                      "bf16 gemm %s differs from the exact sum (%d panels, %d tiles: "
                                      "[%d][%d] %.9g, reference %.9g, exact %.9g)",
                                      k.isa, np, nt, t, r, got[i], want[i], exact);
                        return msg;
                    }
                }
        }
    return "";
}

}  // namespace edgellm
