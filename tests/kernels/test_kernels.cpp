// Every kernel set this machine supports, against the scalar reference, on random blocks;
// plus checks that pin the reference itself to the block layouts.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <cstring>
#include <random>

#include "kernels/block_formats.h"
#include "kernels/cpu_features.h"
#include "kernels/kernel_check.h"
#include "kernels/kernels.h"
#include "kernels/x16.h"
#include "kernels/ref/ref_kernels.h"

using namespace edgellm;

namespace {

std::vector<TensorType> all_types() {
    std::vector<TensorType> out;
    for (uint32_t id = 0; id < kTensorTypeCount; ++id)
        if (tensor_type_info(id) && reference_kernels((TensorType)id).to_float)
            out.push_back((TensorType)id);
    return out;
}

}  // namespace

TEST(Fp16, RoundTripsEveryHalf) {
    for (uint32_t h = 0; h < 65536; ++h) {
        const float f = fp16_to_f32((fp16_t)h);
        if (std::isnan(f)) continue;
        EXPECT_EQ(f32_to_fp16(f), h) << "half 0x" << std::hex << h;
    }
}

TEST(Fp16, RoundsToNearestEven) {
    EXPECT_EQ(fp16_to_f32(f32_to_fp16(1.0f + 1.0f / 2048)), 1.0f);  // tie, down to even
    EXPECT_EQ(fp16_to_f32(f32_to_fp16(1.0f + 3.0f / 2048)), 1.0f + 2.0f / 1024);  // tie, up
    EXPECT_EQ(f32_to_fp16(70000.0f), 0x7c00);                                     // overflow to inf
    EXPECT_EQ(fp16_to_f32(f32_to_fp16(5.96046448e-08f)), 5.96046448e-08f);  // smallest subnormal
}

// The branch-free rounding attention uses equals the f16 round trip on every float in [0, 1].
TEST(Fp16, UnitRoundingMatchesTheRoundTripEverywhere) {
    long mismatches = 0;
    for (uint32_t b = 0; b <= 0x3f800000u; ++b) {
        const float x = f32_from_bits(b);
        mismatches += f32_bits(round_to_f16_unit(x)) != f32_bits(fp16_to_f32(f32_to_fp16(x)));
    }
    EXPECT_EQ(mismatches, 0);
}

// Its vector form (attention's loop over an f16 cache's probabilities), in 8 and 16 lanes,
// on every float in [0, 1] (x 1, exact) and on products x * inv (the form's own multiply).
template <typename V, typename I>
long vector_unit_rounding_mismatches() {
    constexpr int kLanes = sizeof(V) / sizeof(float);
    long mismatches = 0;
    float x[kLanes], y[kLanes];
    for (uint32_t b0 = 0; b0 <= 0x3f800000u; b0 += kLanes) {
        for (int l = 0; l < kLanes; ++l) x[l] = f32_from_bits(std::min(b0 + l, 0x3f800000u));
        scale_round_to_f16_unit<V, I>(x, 1.0f, y);
        for (int l = 0; l < kLanes; ++l)
            mismatches += f32_bits(y[l]) != f32_bits(fp16_to_f32(f32_to_fp16(x[l])));
    }
    std::mt19937 rng(18);
    std::uniform_real_distribution<float> unit(0.0f, 1.0f), exps(-30.0f, 0.0f);
    for (int i = 0; i < 200000; ++i) {
        const float inv = 1.0f / (1.0f + 50.0f * unit(rng));
        for (int l = 0; l < kLanes; ++l) x[l] = std::exp(exps(rng));
        scale_round_to_f16_unit<V, I>(x, inv, y);
        for (int l = 0; l < kLanes; ++l)
            mismatches += f32_bits(y[l]) != f32_bits(round_to_f16_unit(x[l] * inv));
    }
    return mismatches;
}

TEST(Fp16, UnitRoundingInVectorsMatchesTheScalarForm) {
    typedef float F8 __attribute__((vector_size(32)));
    typedef int32_t I8 __attribute__((vector_size(32)));
    typedef float F16 __attribute__((vector_size(64)));
    typedef int32_t I16 __attribute__((vector_size(64)));
    EXPECT_EQ((vector_unit_rounding_mismatches<F8, I8>()), 0);
    EXPECT_EQ((vector_unit_rounding_mismatches<F16, I16>()), 0);
}

TEST(Bf16, RoundsToNearestEven) {
    EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f)), 1.0f);
    EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3f808000)), 0x3f80);  // tie to even (down)
    EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3f818000)), 0x3f82);  // tie to even (up)
}

TEST(Reference, Q4_0NibbleOrder) {
    block_q4_0 b{};
    b.d = f32_to_fp16(0.5f);
    b.qs[0] = 0x9F;  // element 0 = 15, element 16 = 9
    b.qs[15] = 0x08;
    float out[32];
    reference_kernels(TensorType::Q4_0).to_float(&b, out, 32);
    EXPECT_FLOAT_EQ(out[0], 0.5f * (15 - 8));
    EXPECT_FLOAT_EQ(out[16], 0.5f * (9 - 8));
    EXPECT_FLOAT_EQ(out[15], 0.0f);
    EXPECT_FLOAT_EQ(out[31], -4.0f);
}

TEST(Reference, Q5_0HighBits) {
    block_q5_0 b{};
    b.d = f32_to_fp16(1.0f);
    const uint32_t qh = (1u << 3) | (1u << 20);  // element 3 and element 20 get bit 4
    std::memcpy(b.qh, &qh, 4);
    float out[32];
    reference_kernels(TensorType::Q5_0).to_float(&b, out, 32);
    EXPECT_FLOAT_EQ(out[3], 0.0f);    // 16 - 16
    EXPECT_FLOAT_EQ(out[20], 0.0f);   // 16 - 16
    EXPECT_FLOAT_EQ(out[4], -16.0f);  // 0 - 16
}

TEST(Reference, Q6_KLayout) {
    block_q6_K b{};
    b.d = f32_to_fp16(1.0f);
    for (auto& s : b.scales) s = 1;
    b.ql[0] = 0x21;  // element 0 low = 1, element 64 low = 2
    b.qh[0] = 0xE4;  // element 0 high 0, element 32 high 1, element 64 high 2, element 96 high 3
    float out[256];
    reference_kernels(TensorType::Q6_K).to_float(&b, out, 256);
    EXPECT_FLOAT_EQ(out[0], 1 - 32);
    EXPECT_FLOAT_EQ(out[32], 16 - 32);
    EXPECT_FLOAT_EQ(out[64], (2 | 32) - 32);
    EXPECT_FLOAT_EQ(out[96], 48 - 32);
}

TEST(Reference, Q3_KScalesMatchSixBitPacking) {
    // Scale i: low nibble in byte i (i<8) or high nibble of byte i-8; top 2 bits in byte
    // 8 + i%4 at bit 2*(i/4). Set scale 13 to 0b110101 = 53 -> 53 - 32 = 21.
    uint8_t scales[12] = {};
    scales[13 - 8] = 0x5 << 4;
    scales[8 + 13 % 4] = 0x3 << (2 * (13 / 4));
    int8_t out[16];
    unpack_q3_K_scales(scales, out);
    EXPECT_EQ(out[13], 21);
    EXPECT_EQ(out[0], -32);
}

TEST(Reference, Q8_KKeepsSignOfLargestAndSums) {
    std::vector<float> x(256, 0.25f);
    x[17] = -2.0f;
    block_q8_K q;
    reference_kernels(TensorType::Q8_K).from_float(x.data(), &q, 256);
    EXPECT_EQ(q.qs[17], -127);
    EXPECT_NEAR(q.d * q.qs[17], -2.0f, 1e-6);
    int sum = 0;
    for (int l = 16; l < 32; ++l) sum += q.qs[l];
    EXPECT_EQ(q.bsums[1], sum);
}

// The reference dot product must equal the float dot product of the dequantized rows:
// this ties vec_dot to to_float, so a layout error in one shows up against the other.
TEST(Reference, VecDotMatchesDequantizedDot) {
    for (TensorType t : all_types()) {
        const TypeKernels& k = reference_kernels(t);
        if (!k.vec_dot) continue;
        const int64_t n = 1024;
        auto x = random_tensor_data(t, n, 7);
        auto y = random_tensor_data(k.vec_dot_type, n, 8);
        std::vector<float> xf(n), yf(n);
        k.to_float(x.data(), xf.data(), n);
        reference_kernels(k.vec_dot_type).to_float(y.data(), yf.data(), n);
        double want = 0, mag = 0;
        for (int64_t i = 0; i < n; ++i) {
            want += (double)xf[i] * yf[i];
            mag += std::fabs((double)xf[i] * yf[i]);
        }
        float got;
        k.vec_dot(n, &got, x.data(), y.data());
        // q4_1/q5_1 use the f16-rounded sum s of the activation block: allow its rounding.
        const double budget = (t == TensorType::Q4_1 || t == TensorType::Q5_1) ? 2e-3 : 1e-5;
        EXPECT_LE(std::fabs(got - want), budget * mag) << tensor_type_name(t);
    }
}

// Every type with the row-interleaved layout (kernels/x16.h).
std::vector<TensorType> x16_types() {
    std::vector<TensorType> out;
    for (TensorType t : all_types())
        if (x16_layout(t)) out.push_back(t);
    return out;
}

class KernelSetTest : public ::testing::TestWithParam<std::string> {
  protected:
    void SetUp() override { ASSERT_TRUE(select_kernel_set(GetParam())); }
    void TearDown() override { select_kernel_set(default_kernel_set()); }
};

// The set's x16 packing (load time's repacking) writes x16_pack's bytes, for every type
// with the layout, rows wider than the self-test's and at a stride past their length.
TEST_P(KernelSetTest, PackX16IsX16Pack) {
    int checked = 0;
    for (TensorType t : x16_types()) {
        const TypeKernels& k = type_kernels(t);
        if (!k.pack_x16) continue;
        for (int64_t n : {int64_t(256), int64_t(8960)}) {
            const size_t row = row_size(t, n), stride = row + 13;
            std::vector<uint8_t> rows(stride * 16), want(row * 16), got(row * 16, 0xee);
            for (int r = 0; r < 16; ++r) {
                const auto x = random_tensor_data(t, n, 500 + (uint64_t)r);
                std::memcpy(rows.data() + stride * (size_t)r, x.data(), row);
            }
            x16_pack(t, rows.data(), stride, n, want.data());
            k.pack_x16(t, rows.data(), stride, n, got.data());
            EXPECT_EQ(want, got) << tensor_type_name(t) << " n " << n;
            ++checked;
        }
    }
    if (checked == 0) GTEST_SKIP() << "no SIMD x16 packing in set " << GetParam();
}

// The set's x16-to-panel conversion (prefill's panels from x16 weights) writes
// x16_to_panel's bytes for both panel signs, on wide rows, random blocks and blocks whose
// minimum scale is zero (the offsets must be -0.0f, as the reference's unary minus writes).
TEST_P(KernelSetTest, ToPanelX16IsX16ToPanel) {
    int checked = 0;
    for (TensorType t : x16_types()) {
        const TypeKernels& k = type_kernels(t);
        if (!k.to_panel_x16) continue;
        for (int64_t n : {int64_t(256), int64_t(8960)})
            for (bool zero_dmin : {false, true}) {
                const size_t row = row_size(t, n);
                std::vector<uint8_t> rows(row * 16), group(row * 16);
                for (int r = 0; r < 16; ++r) {
                    const auto x = random_tensor_data(t, n, 700 + (uint64_t)r);
                    std::memcpy(rows.data() + row * (size_t)r, x.data(), row);
                }
                if (zero_dmin && (t == TensorType::Q2_K || t == TensorType::Q4_K)) {
                    // dmin is the f16 after d in both blocks (256 elements each)
                    const size_t bs = tensor_type_info(t).type_size, at = t == TensorType::Q2_K ? 82 : 2;
                    for (size_t b = 0; b < rows.size() / bs; ++b) rows[b * bs + at] = rows[b * bs + at + 1] = 0;
                }
                x16_pack(t, rows.data(), row, n, group.data());
                const size_t bytes = panel_bytes(kX16Rows, k.i8_group, k.i8_min, n);
                for (bool uq : {true, false}) {
                    std::vector<uint8_t> want(bytes, 0x11), got(bytes, 0x22);
                    ASSERT_TRUE(x16_to_panel(t, group.data(), n, want.data(), uq));
                    k.to_panel_x16(group.data(), n, got.data(), uq);
                    EXPECT_EQ(want, got) << tensor_type_name(t) << " n " << n
                                         << (uq ? " unsigned" : " signed")
                                         << (zero_dmin ? ", dmin 0" : "");
                }
                ++checked;
            }
    }
    if (checked == 0) GTEST_SKIP() << "no SIMD x16-to-panel conversion in set " << GetParam();
}

// Each SIMD function against its reference, many sizes and seeds, within the budget
// stated in kernel_check.cpp (2e-5 of the magnitude for integer kernels, 1e-4 for float).
TEST_P(KernelSetTest, MatchesReferenceOnRandomBlocks) {
    EXPECT_TRUE(kernel_selftest_failures().empty());
    int checked = 0;
    for (TensorType t : all_types()) {
        const TypeKernels& k = type_kernels(t);
        const TypeKernels& r = reference_kernels(t);
        const bool differs = k.to_float != r.to_float || k.from_float != r.from_float ||
                             k.vec_dot != r.vec_dot || k.gemv_x16 != r.gemv_x16;
        if (!differs) continue;
        ++checked;
        const int64_t bs = tensor_type_info(t).block_size;
        for (int64_t n :
             {bs == 1 ? (int64_t)1 : bs, bs * 8 + (bs == 1 ? 7 : 0), (int64_t)4096, (int64_t)14336})
            for (uint64_t seed = 0; seed < 8; ++seed) {
                if (n % bs) continue;
                const std::string err = check_type_kernels(t, k, r, n, 1000 * seed + n);
                ASSERT_TRUE(err.empty()) << "n=" << n << " seed=" << seed << ": " << err;
            }
    }
    if (GetParam() != "ref") {
        EXPECT_GT(checked, 0) << "kernel set " << GetParam() << " replaces nothing";
    }
    std::printf("kernel set %s: %d types checked\n%s", GetParam().c_str(), checked,
                kernel_report().c_str());
}

// A batch (vec_dot_4) and one token at a time (vec_dot) must give the same bits: otherwise
// prefill and decode disagree, and with 8-bit activations a one-ulp difference grows into
// visibly different logits (and breaks prefix reuse and speculative verification).
TEST_P(KernelSetTest, FourColumnDotEqualsOneColumnBitForBit) {
    for (TensorType t : all_types()) {
        const TypeKernels& k = type_kernels(t);
        if (!k.vec_dot_4) continue;
        for (int64_t n : {(int64_t)256, (int64_t)896, (int64_t)4096, (int64_t)4864}) {
            if (n % tensor_type_info(t).block_size) continue;
            for (uint64_t seed = 0; seed < 4; ++seed) {
                const auto x = random_tensor_data(t, n, 100 + seed);
                const size_t row = row_size(k.vec_dot_type, n);
                std::vector<uint8_t> ys(row * 4);
                for (int c = 0; c < 4; ++c) {
                    const auto yc =
                        random_tensor_data(k.vec_dot_type, n, 200 + 4 * seed + (uint64_t)c);
                    std::memcpy(ys.data() + row * (size_t)c, yc.data(), row);
                }
                float four[4];
                k.vec_dot_4(n, four, x.data(), ys.data(), row);
                for (int c = 0; c < 4; ++c) {
                    float one;
                    k.vec_dot(n, &one, x.data(), ys.data() + row * (size_t)c);
                    uint32_t a, b;
                    std::memcpy(&a, &four[c], 4);
                    std::memcpy(&b, &one, 4);
                    ASSERT_EQ(a, b) << tensor_type_name(t) << " n=" << n << " column " << c << ": "
                                    << four[c] << " vs " << one;
                }
            }
        }
    }
}

// The same for vec_dot_n (one row against several, as attention uses it).
TEST_P(KernelSetTest, ManyColumnDotEqualsOneColumnBitForBit) {
    if (GetParam() == "amx-bf16")
        GTEST_SKIP() << "amx-bf16 has amx's dot products (checked there); its batches are bf16 "
                        "sums (Matmul.Bf16GemmIsTheRoundedProducts)";
    int checked = 0;
    for (TensorType t : all_types()) {
        const TypeKernels& k = type_kernels(t);
        if (!k.vec_dot_n) continue;
        ++checked;
        const int64_t bs = tensor_type_info(t).block_size;
        for (int64_t n :
             {(int64_t)32, (int64_t)64, (int64_t)72, (int64_t)128, (int64_t)256, (int64_t)2048}) {
            if (n % bs) continue;
            const auto x = random_tensor_data(t, n, 300 + (uint64_t)n);
            const size_t row = row_size(k.vec_dot_type, n), stride = row + 16;
            const int ny = 7;
            std::vector<uint8_t> ys(stride * ny);
            for (int c = 0; c < ny; ++c) {
                const auto yc = random_tensor_data(k.vec_dot_type, n, 400 + (uint64_t)c);
                std::memcpy(ys.data() + stride * (size_t)c, yc.data(), row);
            }
            std::vector<float> many(ny);
            k.vec_dot_n(n, many.data(), x.data(), ys.data(), stride, ny);
            for (int c = 0; c < ny; ++c) {
                float one;
                k.vec_dot(n, &one, x.data(), ys.data() + stride * (size_t)c);
                uint32_t a, b;
                std::memcpy(&a, &many[(size_t)c], 4);
                std::memcpy(&b, &one, 4);
                ASSERT_EQ(a, b) << tensor_type_name(t) << " n=" << n << " column " << c;
            }
        }
    }
    if (GetParam().rfind("avx", 0) != 0 && GetParam() != "amx") {
        // (amx keeps AVX-512's; the scalar set and the ARM sets have none: callers loop over vec_dot, and ARM
        // decode uses the 16-row interleaved kernels)
        EXPECT_EQ(checked, 0) << "kernel set " << GetParam();
    } else {
        EXPECT_GT(checked, 0) << "no vec_dot_n in kernel set " << GetParam();
    }
}

INSTANTIATE_TEST_SUITE_P(Available, KernelSetTest, ::testing::ValuesIn(available_kernel_sets()),
                         [](const auto& info) {
                             std::string n = info.param;  // (amx-bf16: no '-' in a test name)
                             for (char& ch : n)
                                 if (ch == '-') ch = '_';
                             return n;
                         });

TEST(CpuFeatures, ReportsSomething) {
    std::printf("cpu features: %s\n", cpu_features_string().c_str());
    EXPECT_FALSE(available_kernel_sets().empty());
}

// ------------------------------------------------------------------------ panel GEMM

// Every quantized weight type decodes, through its panel, to exactly the weights its
// reference to_float gives: scale * q + offset per group, in the panel's byte order.
TEST(Panel, PackedWeightsDecodeLikeToFloat) {
    const int P = 16;
    const int64_t n = 512;
    const int rows = 11;           // a partial panel: rows 11..15 must be zero
    for (bool uq : {false, true})  // signed q, or unsigned (PanelKernel::unsigned_q)
        for (TensorType t : all_types()) {
            const TypeKernels& k = reference_kernels(t);
            if (!k.unpack_i8) continue;
            const int G = k.i8_group;
            const size_t rb = row_size(t, n);
            const std::vector<uint8_t> w = random_tensor_data(t, n * rows, 77 + (uint64_t)t);
            std::vector<uint8_t> panel(panel_bytes(P, G, k.i8_min, n)),
                tmp(n + 2 * 4 * (n / 16) + 16);
            pack_panel(k, w.data(), rb, rows, P, n, panel.data(), tmp.data(), uq);
            const size_t gb = panel_group_bytes(P, G, k.i8_min);
            std::vector<float> want((size_t)n);
            for (int r = 0; r < P; ++r) {
                if (r < rows) k.to_float(w.data() + rb * (size_t)r, want.data(), n);
                for (int64_t i = 0; i < n; ++i) {
                    const uint8_t* pg = panel.data() + gb * (size_t)(i / G);
                    const int j = (int)(i % G);
                    const uint8_t v = pg[4 * ((size_t)(j / 4) * P + r) + j % 4];
                    const int q = !uq ? (int8_t)v : k.i8_min ? (int)v : (int)v - 128;
                    if (uq && k.i8_min) {
                        ASSERT_LE(q, 31) << tensor_type_name(t);
                    }
                    const float* fs = (const float*)(pg + (size_t)P * G);
                    const float got = fs[r] * (float)q + (k.i8_min ? fs[P + r] : 0.0f);
                    const float expect = r < rows ? want[(size_t)i] : 0.0f;
                    ASSERT_NEAR(got, expect, 1e-6f * (std::fabs(expect) + 1e-3f))
                        << tensor_type_name(t) << " row " << r << " element " << i << " unsigned "
                        << uq;
                }
            }
        }
}

// Each set's panel GEMM gives the reference's bits (what the start-up self-test checks,
// here with more seeds).
// Prefill attention hands dot_rows the queries of a block of tokens at once (8 tokens x
// a KV head's query heads): every set gives the reference's bits for many queries too
// (the start-up self-test stops at 12, to stay quick).
TEST_P(KernelSetTest, DotRowsOfManyQueriesEqualsReferenceBitForBit) {
    for (TensorType t : {TensorType::F16, TensorType::Q8_0}) {
        const TypeKernels& k = type_kernels(t);
        const TypeKernels& r = reference_kernels(t);
        if (!k.dot_rows) continue;
        for (const int64_t hd : {64, 128}) {
            const int ng = 56, rows = 45;
            const size_t row = row_size(t, hd);
            std::vector<uint8_t> xs(row * rows);
            for (int c = 0; c < rows; ++c) {
                const auto xc = random_tensor_data(t, hd, 900 + (uint64_t)c);
                std::memcpy(xs.data() + row * (size_t)c, xc.data(), row);
            }
            std::mt19937 rng(5);
            std::uniform_real_distribution<float> u(-1.0f, 1.0f);
            std::vector<float> q((size_t)(ng * hd));
            for (float& v : q) v = u(rng);
            const size_t ss = rows + 5;
            std::vector<float> want(ss * ng, 2.0f), got = want;
            r.dot_rows(hd, rows, xs.data(), row, q.data(), ng, want.data(), ss);
            k.dot_rows(hd, rows, xs.data(), row, q.data(), ng, got.data(), ss);
            EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
                << GetParam() << " " << tensor_type_name(t) << " hd " << hd;
        }
    }
}

// The weighted sum of V rows for a block of prompt tokens' heads (AVX-512 widens the rows
// once into L1 for all of them, 16 KiB of rows at a time): the reference's bits, over
// several such blocks of rows.
TEST_P(KernelSetTest, VecMadNOfManyHeadsEqualsReferenceBitForBit) {
    for (TensorType t : {TensorType::F16, TensorType::Q8_0}) {
        const TypeKernels& k = type_kernels(t);
        const TypeKernels& r = reference_kernels(t);
        if (!k.vec_mad_n) continue;
        for (const int64_t hd : {64, 128}) {
            const int ng = 56, rows = 150;
            const size_t row = row_size(t, hd) + 2;
            std::vector<uint8_t> xs(row * rows);
            for (int c = 0; c < rows; ++c) {
                const auto xc = random_tensor_data(t, hd, 700 + (uint64_t)c);
                std::memcpy(xs.data() + row * (size_t)c, xc.data(), xc.size());
            }
            std::mt19937 rng(9);
            std::uniform_real_distribution<float> u(0.0f, 1.0f);
            const size_t ps = rows + 7;
            std::vector<float> p(ps * ng);
            for (float& v : p) v = u(rng);
            std::vector<float> want((size_t)(ng * hd));
            for (float& v : want) v = u(rng) - 0.5f;
            std::vector<float> got = want;
            r.vec_mad_n(hd, rows, xs.data(), row, p.data(), ps, ng, want.data());
            k.vec_mad_n(hd, rows, xs.data(), row, p.data(), ps, ng, got.data());
            EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
                << GetParam() << " " << tensor_type_name(t) << " hd " << hd;
        }
    }
}

// q8_0 keys take integer scores against the q8_0 query (dot_rows_q8): every set gives the
// reference's bits for a block of prompt tokens' queries, codes at the ends of their
// range included; and the scores are the query's dot with the keys as llama.cpp's q8_0 x
// q8_0 vec_dot computes it (the same integer sums and scales), within f32 rounding.
TEST_P(KernelSetTest, IntegerScoresOfQ8KeysEqualReferenceBitForBit) {
    const TypeKernels& k = type_kernels(TensorType::Q8_0);
    const TypeKernels& r = reference_kernels(TensorType::Q8_0);
    ASSERT_NE(k.dot_rows_q8, nullptr);
    for (const int64_t hd : {64, 128, 256}) {
        const int ng = 56, rows = 45;
        const size_t row = row_size(TensorType::Q8_0, hd) + 4, qrow = row_size(TensorType::Q8_0, hd);
        std::vector<uint8_t> xs(row * rows), qs(qrow * ng);
        std::mt19937 rng(7 + (uint32_t)hd);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        std::vector<float> f((size_t)hd);
        for (int c = 0; c < rows; ++c) {
            for (float& v : f) v = normal(rng);
            r.from_float(f.data(), xs.data() + row * (size_t)c, hd);
        }
        for (int g = 0; g < ng; ++g) {
            for (float& v : f) v = normal(rng);
            r.from_float(f.data(), qs.data() + qrow * (size_t)g, hd);
        }
        std::memset(xs.data() + 2, 127, 32);         // key 0, block 0: all +127
        std::memset(xs.data() + row + 2, 0x81, 32);  // key 1: all -127
        std::memset(qs.data() + 2, 0x81, 32);        // query 0: all -127
        std::memset(xs.data() + 2 * row + 2, 0x80, 8);  // key 2: some -128 (any key code)
        const size_t ss = rows + 5;
        std::vector<float> want(ss * ng, 2.0f), got = want;
        r.dot_rows_q8(hd, rows, xs.data(), row, qs.data(), qrow, ng, want.data(), ss);
        k.dot_rows_q8(hd, rows, xs.data(), row, qs.data(), qrow, ng, got.data(), ss);
        EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
            << GetParam() << " hd " << hd;
        for (int g = 0; g < ng; g += 11)
            for (int c = 0; c < rows; c += 7) {
                float dot = 0.0f;
                r.vec_dot(hd, &dot, xs.data() + row * (size_t)c, qs.data() + qrow * (size_t)g);
                EXPECT_NEAR(got[ss * (size_t)g + (size_t)c], dot, 1e-5f * (1.0f + std::fabs(dot)))
                    << "key " << c << " query " << g;
            }
    }
}

// q8_0 values weighted in integers: every set gives the reference's bits (two full chunks
// of rows and a short one; extreme codes; weights 0, 1 and softmax-like), and the result
// stays within the 7-bit weights' rounding of the exact weighted sum.
TEST_P(KernelSetTest, IntegerValueSumsOfQ8EqualReferenceBitForBit) {
    const TypeKernels& k = type_kernels(TensorType::Q8_0);
    const TypeKernels& r = reference_kernels(TensorType::Q8_0);
    ASSERT_NE(k.mad_rows_q8, nullptr);
    // every SIMD set has its own (the scalar one would be slower than the float sums)
    // (the AMX sets keep AVX-512's, i8mm keeps dotprod's)
    const std::string own = GetParam().rfind("amx", 0) == 0 ? "avx512"
                            : GetParam() == "i8mm"           ? "dotprod"
                                                             : GetParam();
    EXPECT_EQ(std::string(k.mad_rows_q8_isa), own);
    // 56 queries, and 13: tiles of queries that do not divide them, and an odd one out
    for (const int64_t hd : {64, 96, 128, 256}) for (const int ng : {56, 13}) {
        const int rows = 75;
        const size_t row = row_size(TensorType::Q8_0, hd) + 6, es = rows + 3;
        std::vector<uint8_t> xs(row * rows);
        std::mt19937 rng(11 + (uint32_t)hd);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        std::vector<float> f((size_t)hd), exact((size_t)(ng * hd), 0.0f);
        for (int c = 0; c < rows; ++c) {
            for (float& v : f) v = normal(rng) * (c % 3 == 0 ? 4.0f : 1.0f);  // scales apart
            r.from_float(f.data(), xs.data() + row * (size_t)c, hd);
        }
        std::memset(xs.data() + 2, 127, 32);         // row 0, block 0: all +127
        std::memset(xs.data() + row + 2, 0x80, 32);  // row 1: all -128
        std::vector<float> e(es * ng);
        for (int g = 0; g < ng; ++g) {
            // e^(score - max) of scores spread as attention's are; query 0 one row alone
            float* eg = e.data() + es * (size_t)g;
            float mx = -1e30f;
            for (int c = 0; c < rows; ++c) mx = std::max(mx, eg[c] = 2.0f * normal(rng));
            for (int c = 0; c < rows; ++c) eg[c] = g == 0 ? (c == 40 ? 1.0f : 0.0f) : std::exp(eg[c] - mx);
            if (g == 3) std::fill(eg + 32, eg + 64, 0.0f);  // a chunk weighing nothing
        }
        std::vector<float> row_f((size_t)hd);
        for (int c = 0; c < rows; ++c) {
            r.to_float(xs.data() + row * (size_t)c, row_f.data(), hd);
            for (int g = 0; g < ng; ++g)
                for (int64_t i = 0; i < hd; ++i)
                    exact[hd * g + i] += e[es * (size_t)g + (size_t)c] * row_f[(size_t)i];
        }
        std::vector<float> want((size_t)(ng * hd), 0.0f), got = want;
        r.mad_rows_q8(hd, rows, xs.data(), row, e.data(), es, ng, want.data());
        k.mad_rows_q8(hd, rows, xs.data(), row, e.data(), es, ng, got.data());
        EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
            << GetParam() << " hd " << hd << " queries " << ng;
        // query 0 weighs one row by 1: that row (its codes times 127, times d / 127)
        for (int64_t i = 0; i < hd; ++i)
            ASSERT_NEAR(got[(size_t)i], exact[(size_t)i], 1e-6f * std::fabs(exact[(size_t)i])) << i;
        // the others within the weights' rounding: at most half of D / 127 each, which
        // over these rows of random signs measured 1.0 % of the sum's RMS (a wrong scale or
        // a lost chunk is far above it)
        double err = 0.0, norm = 0.0;
        for (size_t i = 0; i < got.size(); ++i) {
            err += (got[i] - exact[i]) * (double)(got[i] - exact[i]);
            norm += exact[i] * (double)exact[i];
        }
        EXPECT_LT(std::sqrt(err / norm), 0.02) << "hd " << hd;
    }
}

TEST_P(KernelSetTest, PanelKernelEqualsReferenceBitForBit) {
    const PanelKernel& k = panel_kernel();
    if (GetParam() == "ref" || GetParam() == "neon") {
        // the scalar set and ARMv8.0 NEON (no sdot) have none: prefill keeps the row dots
        EXPECT_EQ(k.gemm, nullptr) << GetParam();
        return;
    }
    ASSERT_NE(k.gemm, nullptr) << GetParam();
    EXPECT_EQ(std::string(k.isa), GetParam());
    for (uint64_t seed = 1; seed <= 20; ++seed) EXPECT_EQ(check_panel_kernel(k, seed), "");
}

// The reference GEMMs for panels of 4 rows, as kernels (PanelGemmFn, PanelSmallGemmFn).
static void gemm_ref4(const uint8_t* panel, int64_t n_groups, int G, bool has_min, int run,
                      const PanelActBlock* act, size_t act_stride, int64_t n_cols, float* y,
                      size_t y_stride, int rows) {
    panel_gemm_ref(4, false, panel, n_groups, G, has_min, run, act, act_stride, n_cols, y,
                   y_stride, rows);
}
static void gemm_small_ref4(int bits, const uint8_t* panel, int64_t n_groups, int G,
                            bool has_min, int run, const PanelActBlock* act, size_t act_stride,
                            int64_t n_cols, float* y, size_t y_stride, int rows) {
    panel_gemm_small_ref(4, bits, panel, n_groups, G, has_min, run, act, act_stride, n_cols, y,
                         y_stride, rows);
}

// A corrupted kernel is caught: the check is not vacuous.
TEST(Panel, CheckCatchesAWrongKernel) {
    PanelKernel wrong;
    wrong.rows = 4;
    wrong.isa = "wrong";
    wrong.gemm = [](const uint8_t* panel, int64_t n_groups, int G, bool has_min, int run,
                    const PanelActBlock* act, size_t act_stride, int64_t n_cols, float* y,
                    size_t y_stride, int rows) {
        panel_gemm_ref(4, false, panel, n_groups, G, has_min, run, act, act_stride, n_cols, y,
                       y_stride, rows);
        y[0] += 1e-3f;
    };
    EXPECT_NE(check_panel_kernel(wrong, 1), "");
    wrong.gemm = gemm_ref4;
    EXPECT_EQ(check_panel_kernel(wrong, 1), "");
    // a kernel that takes runs but computes them as run == 1 is caught too
    wrong.runs = true;
    wrong.gemm = [](const uint8_t* panel, int64_t n_groups, int G, bool has_min, int,
                    const PanelActBlock* act, size_t act_stride, int64_t n_cols, float* y,
                    size_t y_stride, int rows) {
        panel_gemm_ref(4, false, panel, n_groups, G, has_min, 1, act, act_stride, n_cols, y,
                       y_stride, rows);
    };
    EXPECT_NE(check_panel_kernel(wrong, 1), "");
}

// The check of a small-code GEMM is not vacuous either: a wrong bias, and int16 sums chained
// over more steps than the codes leave room for (they saturate only at large codes and
// activations), are caught.
TEST(Panel, CheckCatchesAWrongSmallCodeKernel) {
    PanelKernel k;
    k.rows = 4;
    k.isa = "small";
    k.gemm = gemm_ref4;
    k.gemm_small = gemm_small_ref4;
    EXPECT_EQ(check_panel_kernel(k, 1), "");
    k.gemm_small = [](int bits, const uint8_t* panel, int64_t n_groups, int G, bool has_min,
                      int run, const PanelActBlock* act, size_t act_stride, int64_t n_cols,
                      float* y, size_t y_stride, int rows) {
        panel_gemm_small_ref(4, bits == 5 ? 4 : bits, panel, n_groups, G, has_min, run, act,
                             act_stride, n_cols, y, y_stride, rows);
    };
    EXPECT_NE(check_panel_kernel(k, 1), "");
    // row 0 of the first group of column 0 as a chain of 4 steps (16 products) in int16
    // would sum it: wrong wherever that saturates
    k.gemm_small = [](int bits, const uint8_t* panel, int64_t n_groups, int G, bool has_min,
                      int run, const PanelActBlock* act, size_t act_stride, int64_t n_cols,
                      float* y, size_t y_stride, int rows) {
        gemm_small_ref4(bits, panel, n_groups, G, has_min, run, act, act_stride, n_cols, y,
                        y_stride, rows);
        int32_t exact = 0, chained = 0;
        for (int s = 0; s < 4; ++s)
            for (int j = 0; j < 4; ++j) {
                const int32_t p = (int32_t)panel[4 * (s * 4 + 0) + j] * act[0].qs[4 * s + j];
                exact += p;
                chained = std::clamp(chained + p, -32768, 32767);
            }
        if (chained != exact) y[0] += 1.0f;
    };
    EXPECT_NE(check_panel_kernel(k, 1), "");
}

// The attention-kernel check covers head sizes with SIMD tails and more queries than one
// register tile: kernels wrong only there are caught.
TEST(AttentionKernels, CheckCatchesWrongTailsAndLargeGroups) {
    TypeKernels k = reference_kernels(TensorType::F16);
    const TypeKernels& r = reference_kernels(TensorType::F16);
    k.dot_rows = [](int64_t hd, int64_t n_rows, const void* x, size_t bx, const float* q, int ng,
                    float* s, size_t ss) {
        reference_kernels(TensorType::F16).dot_rows(hd, n_rows, x, bx, q, ng, s, ss);
        if (hd == 20) s[0] += 1.0f;  // wrong only for a head size of 20
    };
    EXPECT_NE(check_type_kernels(TensorType::F16, k, r, 512, 5).find("dot_rows"),
              std::string::npos);
    k.dot_rows = r.dot_rows;
    k.vec_mad_n = [](int64_t hd, int64_t n_rows, const void* x, size_t bx, const float* p,
                     size_t ps, int ng, float* acc) {
        reference_kernels(TensorType::F16).vec_mad_n(hd, n_rows, x, bx, p, ps, ng, acc);
        if (ng > 8) acc[8 * hd] += 1.0f;  // wrong only past eight heads
    };
    EXPECT_NE(check_type_kernels(TensorType::F16, k, r, 512, 5).find("vec_mad_n"),
              std::string::npos);
    k.vec_mad_n = [](int64_t hd, int64_t n_rows, const void* x, size_t bx, const float* p,
                     size_t ps, int ng, float* acc) {
        reference_kernels(TensorType::F16).vec_mad_n(hd, n_rows, x, bx, p, ps, ng, acc);
    };
    EXPECT_EQ(check_type_kernels(TensorType::F16, k, r, 512, 5), "");
    // integer scores of q8_0 keys: wrong only for a 128-element head
    TypeKernels k8 = reference_kernels(TensorType::Q8_0);
    const TypeKernels& r8 = reference_kernels(TensorType::Q8_0);
    k8.dot_rows_q8 = [](int64_t hd, int64_t n_rows, const void* x, size_t bx, const void* q,
                        size_t qs, int ng, float* s, size_t ss) {
        reference_kernels(TensorType::Q8_0).dot_rows_q8(hd, n_rows, x, bx, q, qs, ng, s, ss);
        if (hd == 128) s[3] += 1.0f;
    };
    EXPECT_NE(check_type_kernels(TensorType::Q8_0, k8, r8, 512, 5).find("dot_rows_q8"),
              std::string::npos);
    // integer value sums: wrong only past the first chunk of rows
    k8.dot_rows_q8 = r8.dot_rows_q8;
    k8.mad_rows_q8 = [](int64_t hd, int64_t n_rows, const void* x, size_t bx, const float* e,
                        size_t es, int ng, float* acc) {
        reference_kernels(TensorType::Q8_0).mad_rows_q8(hd, n_rows, x, bx, e, es, ng, acc);
        if (n_rows > kMadChunkRows) acc[hd - 1] += 1.0f;
    };
    EXPECT_NE(check_type_kernels(TensorType::Q8_0, k8, r8, 512, 5).find("mad_rows_q8"),
              std::string::npos);
}

// ---------------------------------------------------------------------------------------
// Row-interleaved weights (kernels/x16.h)

namespace {

// 16 random rows of n elements, one after another.
std::vector<uint8_t> random_rows(TensorType t, int64_t n, uint64_t seed) {
    const size_t row = row_size(t, n);
    std::vector<uint8_t> rows(row * kX16Rows);
    for (int r = 0; r < kX16Rows; ++r) {
        const auto x = random_tensor_data(t, n, seed + (uint64_t)r);
        std::memcpy(rows.data() + row * (size_t)r, x.data(), row);
    }
    return rows;
}

}  // namespace

TEST(X16, LayoutCoversTheDecodeTypes) {
    for (TensorType t : {TensorType::Q4_0, TensorType::Q5_0, TensorType::Q8_0, TensorType::Q2_K,
                         TensorType::Q4_K, TensorType::Q6_K})
        EXPECT_TRUE(x16_layout(t)) << tensor_type_name(t);
    EXPECT_FALSE(x16_layout(TensorType::F16));
    EXPECT_EQ(gemv_x16_ref(TensorType::F16), nullptr);
}

// Repacking moves bytes: every row comes back exactly, whole or block by block, and the
// group is as large as the rows were.
TEST(X16, PackThenUnpackGivesBackEveryRow) {
    for (TensorType t : x16_types()) {
        const int64_t bs = tensor_type_info(t).block_size;
        const int64_t n = bs * 5;
        const size_t row = row_size(t, n);
        const auto rows = random_rows(t, n, 7);
        std::vector<uint8_t> group(row * kX16Rows + 64, 0xEE);
        x16_pack(t, rows.data(), row, n, group.data());
        for (size_t i = row * kX16Rows; i < group.size(); ++i)
            ASSERT_EQ(group[i], 0xEE) << tensor_type_name(t) << ": wrote past the group";
        std::vector<uint8_t> all(rows.size(), 0x5A);
        x16_unpack_group(t, group.data(), n, all.data(), row);
        ASSERT_EQ(all, rows) << tensor_type_name(t) << ": the whole group back";
        std::vector<uint8_t> back(row);
        for (int r = 0; r < kX16Rows; ++r) {
            x16_unpack_row(t, group.data(), r, n, back.data());
            ASSERT_EQ(std::memcmp(back.data(), rows.data() + row * (size_t)r, row), 0)
                << tensor_type_name(t) << " row " << r;
            std::vector<uint8_t> block(tensor_type_info(t).type_size);
            x16_unpack_block(t, group.data(), r, 3, block.data());
            ASSERT_EQ(std::memcmp(block.data(), back.data() + 3 * block.size(), block.size()), 0);
        }
    }
}

// Prefill reads x16 weights straight into panels (unsigned, or signed for AMX): the bytes
// pack_panel writes from the rows in the file's layout, for every type with the layout
// (partial groups of the panel would show as a difference: no byte is left unwritten).
TEST(X16, ToPanelIsPackPanelOfTheRows) {
    for (TensorType t : x16_types())
        for (bool uq : {true, false}) {
            const TypeKernels& k = reference_kernels(t);
            const int64_t n = 512;  // two K-quant blocks, 16 legacy blocks
            const size_t row = row_size(t, n);
            const auto rows = random_rows(t, n, 31 + (uint64_t)t);
            std::vector<uint8_t> group(row * kX16Rows);
            x16_pack(t, rows.data(), row, n, group.data());
            const size_t bytes = panel_bytes(kX16Rows, k.i8_group, k.i8_min, n);
            std::vector<uint8_t> want(bytes, 0x11), got(bytes, 0x22),
                tmp(n + 2 * 4 * (n / 16) + 16);
            pack_panel(k, rows.data(), row, kX16Rows, kX16Rows, n, want.data(), tmp.data(), uq);
            ASSERT_TRUE(x16_to_panel(t, group.data(), n, got.data(), uq)) << tensor_type_name(t);
            for (size_t i = 0; i < bytes; ++i)
                ASSERT_EQ(got[i], want[i])
                    << tensor_type_name(t) << (uq ? " unsigned" : " signed") << " panel byte " << i;
        }
    std::vector<uint8_t> none(64);
    EXPECT_FALSE(x16_to_panel(TensorType::F16, none.data(), 32, none.data()));
}

// Kernels with panels of 8 rows (AVX2) take each half of a group's x16_to_panel panel
// (panel_slice): the bytes pack_panel writes from those 8 rows, signed and in the
// small-code form, for every type with the layout.
TEST(X16, PanelSliceIsPackPanelOfTheHalf) {
    for (TensorType t : x16_types()) {
        const TypeKernels& k = reference_kernels(t);
        ASSERT_TRUE(x16_has_panel(t)) << tensor_type_name(t);
        const int64_t n = 512;
        const size_t row = row_size(t, n);
        const auto rows = random_rows(t, n, 57 + (uint64_t)t);
        std::vector<uint8_t> group(row * kX16Rows);
        x16_pack(t, rows.data(), row, n, group.data());
        std::vector<uint8_t> whole(panel_bytes(kX16Rows, k.i8_group, k.i8_min, n));
        ASSERT_TRUE(x16_to_panel(t, group.data(), n, whole.data(), true));
        const size_t bytes = panel_bytes(8, k.i8_group, k.i8_min, n);
        std::vector<uint8_t> tmp(n + 2 * 4 * (n / 16) + 16);
        for (bool small : {false, true}) {
            if (small && k.i8_bits > kPanelSmallBits) continue;
            const int bias = small ? panel_code_bias(k.i8_bits, k.i8_min) : 0;
            const uint8_t add = k.i8_min ? 0 : (uint8_t)(128 + bias);
            for (int part : {0, 1}) {
                std::vector<uint8_t> want(bytes, 0x11), got(bytes, 0x22);
                pack_panel(k, rows.data() + row * 8 * (size_t)part, row, 8, 8, n, want.data(),
                           tmp.data(), false, bias);
                panel_slice(whole.data(), kX16Rows, 8, part, k.i8_group, k.i8_min, n, add,
                            got.data());
                for (size_t i = 0; i < bytes; ++i)
                    ASSERT_EQ(got[i], want[i]) << tensor_type_name(t) << (small ? " small" : " signed")
                                               << " half " << part << " byte " << i;
            }
        }
    }
}

// Every code at its largest and every activation at +127: the AVX2 GEMVs add several
// steps' vpmaddubsw pairs in int16 before widening them (q4_0 / q4_K: 8 steps, q5_0: 4,
// q6_K: 2), which is exact only while those sums stay below 2^15. With one step too many
// in a chain the sums wrap and the result is off by thousands; the scalar definition
// never wraps. (Scales set to 1/64, the rest of each block all ones.)
TEST(X16, GemvsAtTheLargestCodesAreTheDefinitions) {
    for (TensorType t : x16_types()) {
        const TypeKernels& k = type_kernels(t);
        if (!k.gemv_x16) continue;
        const int64_t n = 1024;
        const size_t row = row_size(t, n);
        std::vector<uint8_t> rows(row * kX16Rows, 0xFF);
        const fp16_t d = f32_to_fp16(1.0f / 64.0f);
        const int64_t nb = n / tensor_type_info(t).block_size;
        for (int r = 0; r < kX16Rows; ++r)
            for (int64_t b = 0; b < nb; ++b) {
                uint8_t* blk = rows.data() + row * (size_t)r + tensor_type_info(t).type_size * (size_t)b;
                switch (t) {
                    case TensorType::Q4_0: ((block_q4_0*)blk)->d = d; break;
                    case TensorType::Q5_0: ((block_q5_0*)blk)->d = d; break;
                    case TensorType::Q8_0: ((block_q8_0*)blk)->d = d; break;
                    case TensorType::Q2_K: ((block_q2_K*)blk)->d = ((block_q2_K*)blk)->dmin = d; break;
                    case TensorType::Q4_K: ((block_q4_K*)blk)->d = ((block_q4_K*)blk)->dmin = d; break;
                    case TensorType::Q6_K: ((block_q6_K*)blk)->d = d; break;
                    default: FAIL() << "no block layout for " << tensor_type_name(t);
                }
            }
        std::vector<uint8_t> group(row * kX16Rows);
        x16_pack(t, rows.data(), row, n, group.data());
        // every activation code +127, the block's sums as to_panel_act writes them
        const size_t stride = (size_t)(n / 32);
        PanelActBlock top{};
        std::memset(top.qs, 127, sizeof top.qs);
        top.d = 1.0f / 127.0f;
        top.nsum32 = -128 * 127 * 32;
        top.nsum16[0] = top.nsum16[1] = -128 * 127 * 16;
        top.dsum32 = top.d * 127.0f * 32.0f;
        top.dsum16[0] = top.dsum16[1] = top.d * 127.0f * 16.0f;
        const std::vector<PanelActBlock> act(stride * 4, top);
        for (int64_t cols : {1, 4}) {
            float got[4 * kX16Rows], want[4 * kX16Rows];
            k.gemv_x16(n, group.data(), act.data(), stride, cols, got, kX16Rows);
            gemv_x16_ref(t)(n, group.data(), act.data(), stride, cols, want, kX16Rows);
            for (int i = 0; i < cols * kX16Rows; ++i)
                EXPECT_NEAR(got[i], want[i], 1e-5 * std::fabs(want[i]) + 1e-6)
                    << tensor_type_name(t) << " (" << k.gemv_x16_isa << ") columns " << cols << " at " << i;
        }
    }
}

// The scalar definition computes each row's dot product with the activations: it agrees
// with the reference dot product of the unpacked row (within the integer kernels' budget).
TEST(X16, ReferenceGemvIsTheRowDotProduct) {
    for (TensorType t : x16_types()) {
        const TypeKernels& k = reference_kernels(t);
        const int64_t n = 1024;
        const size_t row = row_size(t, n);
        const auto rows = random_rows(t, n, 11);
        std::vector<uint8_t> group(row * kX16Rows);
        x16_pack(t, rows.data(), row, n, group.data());
        const size_t stride = (size_t)(n / 32);
        std::vector<std::vector<uint8_t>> ys;
        std::vector<PanelActBlock> act(stride * 2);
        for (int c = 0; c < 2; ++c) {
            ys.push_back(random_tensor_data(k.vec_dot_type, n, 40 + (uint64_t)c));
            to_panel_act(k.vec_dot_type, ys.back().data(), n, act.data() + stride * (size_t)c);
        }
        float y[2 * kX16Rows];
        gemv_x16_ref(t)(n, group.data(), act.data(), stride, 2, y, kX16Rows);
        std::vector<float> xf((size_t)n), yf((size_t)n);
        for (int c = 0; c < 2; ++c) {
            reference_kernels(k.vec_dot_type).to_float(ys[(size_t)c].data(), yf.data(), n);
            for (int r = 0; r < kX16Rows; ++r) {
                const uint8_t* xr = rows.data() + row * (size_t)r;
                float want = 0.0f;
                k.vec_dot(n, &want, xr, ys[(size_t)c].data());
                k.to_float(xr, xf.data(), n);
                double magnitude = 0.0;
                for (int64_t i = 0; i < n; ++i) magnitude += std::fabs((double)xf[i] * yf[i]);
                EXPECT_NEAR(y[c * kX16Rows + r], want, vec_dot_error_budget(t) * magnitude)
                    << tensor_type_name(t) << " row " << r << " column " << c;
            }
        }
    }
}

TEST(X16, CheckCatchesAWrongKernel) {
    TypeKernels k = reference_kernels(TensorType::Q4_K);
    const TypeKernels& r = reference_kernels(TensorType::Q4_K);
    k.gemv_x16 = [](int64_t n, const uint8_t* g, const PanelActBlock* act, size_t as, int64_t nc,
                    float* y, size_t ys) {
        gemv_x16_ref(TensorType::Q4_K)(n, g, act, as, nc, y, ys);
        if (nc > 1) y[ys + 15] *= 1.0001f;  // wrong only in the last row of a second column
    };
    EXPECT_NE(check_type_kernels(TensorType::Q4_K, k, r, 512, 3).find("gemv_x16"),
              std::string::npos);
    k.gemv_x16 = [](int64_t n, const uint8_t* g, const PanelActBlock* act, size_t as, int64_t nc,
                    float* y,
                    size_t ys) { gemv_x16_ref(TensorType::Q4_K)(n, g, act, as, nc, y, ys); };
    EXPECT_EQ(check_type_kernels(TensorType::Q4_K, k, r, 512, 3), "");
}

// The int8 limit's loops (edgellm bench): each set's instruction gives, over K accumulators,
// exactly the lane sums of its scalar definition, and counts the multiply-adds it did.
TEST(Int8Limit, EachSetsLoopIsItsScalarDefinition) {
    alignas(64) int8_t buf[128];
    for (int i = 0; i < 128; ++i) buf[i] = (int8_t)((i * 7) % 13);  // 0..12: nothing saturates
    int checked = 0;
    for (const std::string& set : available_kernel_sets()) {
        Int8PeakFn fn = int8_peak_of(set);
        if (!fn) continue;
        for (uint64_t iters : {1ull, 3ull, 1000ull}) {
            int64_t sum = -1;
            const uint64_t macs = fn(iters, buf, &sum);
            EXPECT_EQ(sum, int8_peak_reference(set, iters, buf)) << set << " x" << iters;
            EXPECT_EQ(macs % iters, 0u) << set;
            EXPECT_GT(macs, 0u) << set;
        }
        ++checked;
    }
    if (checked == 0) GTEST_SKIP() << "no kernel set with an int8 dot-product instruction here";
}

TEST(Int8Limit, MeasuredForTheActiveSet) {
    const Int8Limit lim = measure_int8_limit(1, 0.02);
    if (!int8_peak_of(active_kernel_set())) {
        EXPECT_EQ(lim.macs_per_s, 0.0);
        GTEST_SKIP() << "the active set " << active_kernel_set() << " has no int8 limit";
    }
    EXPECT_EQ(lim.set, active_kernel_set());
    EXPECT_GT(lim.macs_per_s, 0.0);  // (a rate, not a timing check: bench reports it)
}
