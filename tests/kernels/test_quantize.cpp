// Weight quantizers (kernels/quantize.h): the bytes llama.cpp's quantizer wrote for the
// golden models, reproduced from their f32 weights; error budgets on random data; no NaN or
// inf from zero rows or outliers.
#include <gtest/gtest.h>

#include "test_paths.h"

#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "edgellm/gguf.h"
#include "kernels/block_formats.h"
#include "kernels/kernels.h"
#include "kernels/quantize.h"

using namespace edgellm;

namespace {

const TensorType kQuantTypes[] = {
    TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1, TensorType::Q8_0,
    TensorType::Q2_K, TensorType::Q3_K, TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K};

std::vector<float> dequantize(TensorType t, const std::vector<uint8_t>& q, int64_t n) {
    std::vector<float> out((size_t)n);
    reference_kernels(t).to_float(q.data(), out.data(), n);
    return out;
}

std::vector<uint8_t> quantize(TensorType t, const float* x, int64_t n) {
    std::vector<uint8_t> q(row_size(t, n));
    EXPECT_TRUE(quantize_row(t, x, q.data(), n)) << tensor_type_name(t);
    return q;
}

// rms(dequantize(quantize(x)) - x) / rms(x)
double relative_rmse(TensorType t, const std::vector<float>& x) {
    const int64_t n = (int64_t)x.size();
    const std::vector<float> y = dequantize(t, quantize(t, x.data(), n), n);
    double err = 0, ref = 0;
    for (int64_t i = 0; i < n; ++i) {
        err += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
        ref += (double)x[i] * x[i];
    }
    return std::sqrt(err / ref);
}

std::vector<float> gaussian(int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> x((size_t)n);
    for (float& v : x) v = dist(rng);
    return x;
}

// ---- golden files ----------------------------------------------------------------------

struct BlockCount {
    int64_t matched = 0, total = 0, tensors = 0, block_size = 1;
};

// Quantize every tensor of `quantized` from the same-named tensor of `f32` with the type
// it has in `quantized`, and count the blocks whose bytes agree, per type.
void compare_with_golden(const GgufFile& f32, const GgufFile& quantized,
                         std::map<std::string, BlockCount>* counts) {
    for (const GgufTensorInfo& t : quantized.tensors()) {
        const GgufTensorInfo* src = f32.tensor(t.name);
        ASSERT_NE(src, nullptr) << t.name << " is not in " << f32.path();
        ASSERT_EQ(src->type, TensorType::F32) << t.name;
        ASSERT_EQ(src->n_elements(), t.n_elements()) << t.name;
        ASSERT_TRUE(can_quantize(t.type)) << t.name << " " << tensor_type_name(t.type);
        const int64_t n_per_row = t.ne[0];
        const int64_t rows = t.n_elements() / n_per_row;
        const int64_t block = tensor_type_info(t.type).block_size;
        const size_t block_bytes = tensor_type_info(t.type).type_size;
        const size_t row_bytes = row_size(t.type, n_per_row);
        ASSERT_EQ(row_bytes * (size_t)rows, t.n_bytes) << t.name;
        BlockCount& c = (*counts)[tensor_type_name(t.type)];
        c.tensors++;
        c.block_size = block;
        std::vector<uint8_t> ours(row_bytes);
        std::vector<float> row((size_t)n_per_row);
        int64_t first_bad_row = -1, first_bad_block = -1;
        for (int64_t r = 0; r < rows; ++r) {
            // The mapping gives no alignment guarantee for float access.
            std::memcpy(row.data(), src->data + (size_t)r * n_per_row * sizeof(float),
                        row.size() * sizeof(float));
            ASSERT_TRUE(quantize_row(t.type, row.data(), ours.data(), n_per_row));
            const uint8_t* theirs = t.data + (size_t)r * row_bytes;
            for (int64_t b = 0; b < n_per_row / block; ++b) {
                const bool same = std::memcmp(ours.data() + b * block_bytes,
                                              theirs + b * block_bytes, block_bytes) == 0;
                c.matched += same;
                c.total++;
                if (!same && first_bad_row < 0) {
                    first_bad_row = r;
                    first_bad_block = b;
                }
            }
        }
        EXPECT_EQ(first_bad_row, -1)
            << quantized.path() << ": " << t.name << " (" << tensor_type_name(t.type)
            << ") differs first at row " << first_bad_row << ", block " << first_bad_block;
    }
}

struct GoldenCase {
    const char* f32;
    const char* quantized;
};

class GoldenBytes : public testing::TestWithParam<GoldenCase> {};

TEST_P(GoldenBytes, ReproducesLlamaCppBytes) {
    const auto dir = test::golden_dir();
    const auto f32_path = dir / GetParam().f32;
    const auto q_path = dir / GetParam().quantized;
    if (!std::filesystem::exists(f32_path) || !std::filesystem::exists(q_path))
        GTEST_SKIP() << "golden models not found: " << f32_path << ", " << q_path;
    auto f32 = GgufFile::open(f32_path.string());
    ASSERT_TRUE(f32.ok()) << f32.error();
    auto q = GgufFile::open(q_path.string());
    ASSERT_TRUE(q.ok()) << q.error();
    std::map<std::string, BlockCount> counts;
    compare_with_golden(**f32, **q, &counts);
    ASSERT_FALSE(counts.empty()) << q_path << " has no quantized tensors";
    for (const auto& [type, c] : counts) {
        std::printf("  %-24s %-5s %2lld tensors, %7lld / %7lld %s identical\n",
                    GetParam().quantized, type.c_str(), (long long)c.tensors, (long long)c.matched,
                    (long long)c.total, c.block_size == 1 ? "values" : "blocks");
        EXPECT_EQ(c.matched, c.total) << type;
    }
}

// Every quantized golden file (q4_K_M and friends mix types; each tensor is checked
// against its own type; the f32 ones, norms and biases, are copies). The f16 / bf16 files
// check the plain conversions.
INSTANTIATE_TEST_SUITE_P(
    Quantize, GoldenBytes,
    testing::Values(GoldenCase{"tiny-qwen2-f32.gguf", "tiny-qwen2-q4_0.gguf"},
                    GoldenCase{"tiny-qwen2-f32.gguf", "tiny-qwen2-q4_1.gguf"},
                    GoldenCase{"tiny-qwen2-f32.gguf", "tiny-qwen2-q5_0.gguf"},
                    GoldenCase{"tiny-qwen2-f32.gguf", "tiny-qwen2-q5_1.gguf"},
                    GoldenCase{"tiny-qwen2-f32.gguf", "tiny-qwen2-q8_0.gguf"},
                    GoldenCase{"tiny-qwen2-f32.gguf", "tiny-qwen2-q2_k.gguf"},
                    GoldenCase{"tiny-qwen2-f32.gguf", "tiny-qwen2-q3_k_m.gguf"},
                    GoldenCase{"tiny-qwen2-f32.gguf", "tiny-qwen2-q4_k_m.gguf"},
                    GoldenCase{"tiny-qwen2-f32.gguf", "tiny-qwen2-q5_k_m.gguf"},
                    GoldenCase{"tiny-qwen2-f32.gguf", "tiny-qwen2-q6_k.gguf"},
                    GoldenCase{"tiny-qwen2-f32.gguf", "tiny-qwen2-f16.gguf"},
                    GoldenCase{"tiny-qwen2-f32.gguf", "tiny-qwen2-bf16.gguf"},
                    GoldenCase{"tiny-llama-f32.gguf", "tiny-llama-q8_0.gguf"},
                    GoldenCase{"tiny-llama-f32.gguf", "tiny-llama-q4_k_m.gguf"},
                    GoldenCase{"tiny-llama-f32.gguf", "tiny-llama-q6_k.gguf"}),
    [](const testing::TestParamInfo<GoldenCase>& info) {
        std::string name = info.param.quantized;
        name = name.substr(0, name.size() - 5);  // ".gguf"
        for (char& ch : name)
            if (!std::isalnum((unsigned char)ch)) ch = '_';
        return name;
    });

// ---- hand-checked values ---------------------------------------------------------------

// The ways llama.cpp rounds that a careless port gets wrong.
TEST(Quantize, Q8_0RoundsHalvesAwayFromZero) {
    // amax 127 gives d = 1 exactly, so x * (1/d) = x and roundf decides: 2.5 -> 3, -0.5 -> -1
    // (round-half-even would give 2 and 0).
    float x[32] = {127.0f, 2.5f, -0.5f, 1.5f};
    block_q8_0 b;
    ASSERT_TRUE(quantize_row(TensorType::Q8_0, x, &b, 32));
    EXPECT_EQ(fp16_to_f32(b.d), 1.0f);
    EXPECT_EQ(b.qs[0], 127);
    EXPECT_EQ(b.qs[1], 3);
    EXPECT_EQ(b.qs[2], -1);
    EXPECT_EQ(b.qs[3], 2);
    EXPECT_EQ(b.qs[4], 0);
}

TEST(Quantize, Q4_0MapsTheLargestMagnitudeToMinus8) {
    // max |x| is -4 (negative): d = -4 / -8 = 0.5 and x = -4 is q = 0 (value -8 * 0.5).
    float x[32] = {};
    x[0] = -4.0f;
    x[1] = 3.0f;
    x[17] = 1.25f;  // 1.25 / 0.5 + 8.5 = 11 -> 11 (truncation of 11.0)
    block_q4_0 b;
    ASSERT_TRUE(quantize_row(TensorType::Q4_0, x, &b, 32));
    EXPECT_EQ(fp16_to_f32(b.d), 0.5f);
    EXPECT_EQ(b.qs[0] & 0xF, 0);
    EXPECT_EQ(b.qs[1] & 0xF, 14);
    EXPECT_EQ(b.qs[1] >> 4, 11);  // element 17 is the high nibble of byte 1
    EXPECT_EQ(b.qs[2] & 0xF, 8);  // zero
}

TEST(Quantize, FloatTypesRoundToNearestEven) {
    const float x[4] = {1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 70000.0f, -2.0f};
    fp16_t h[4];
    ASSERT_TRUE(quantize_row(TensorType::F16, x, h, 4));
    EXPECT_EQ(fp16_to_f32(h[0]), 1.0f);
    EXPECT_EQ(fp16_to_f32(h[1]), 1.0f + 2.0f / 1024);
    EXPECT_EQ(h[2], 0x7c00);
    EXPECT_EQ(fp16_to_f32(h[3]), -2.0f);
    const float y[2] = {f32_from_bits(0x3f808000), f32_from_bits(0x3f818000)};
    bf16_t bf[2];
    ASSERT_TRUE(quantize_row(TensorType::BF16, y, bf, 2));
    EXPECT_EQ(bf[0], 0x3f80);
    EXPECT_EQ(bf[1], 0x3f82);
    float out[4];
    ASSERT_TRUE(quantize_row(TensorType::F32, x, out, 4));
    EXPECT_EQ(std::memcmp(out, x, sizeof x), 0);
}

TEST(Quantize, SupportedTypes) {
    for (TensorType t : kQuantTypes) EXPECT_TRUE(can_quantize(t)) << tensor_type_name(t);
    for (TensorType t : {TensorType::F32, TensorType::F16, TensorType::BF16})
        EXPECT_TRUE(can_quantize(t)) << tensor_type_name(t);
    for (TensorType t :
         {TensorType::Q8_1, TensorType::Q8_K, TensorType::I8, TensorType::I32, TensorType::F64}) {
        EXPECT_FALSE(can_quantize(t)) << tensor_type_name(t);
        float x[256] = {};
        uint8_t out[1024];
        EXPECT_FALSE(quantize_row(t, x, out, 256)) << tensor_type_name(t);
    }
}

TEST(Quantize, RefusesPartialBlocks) {
    std::vector<float> x(512, 1.0f);
    std::vector<uint8_t> out(4096, 0xAB);
    EXPECT_FALSE(quantize_row(TensorType::Q4_K, x.data(), out.data(), 128));
    EXPECT_FALSE(quantize_row(TensorType::Q4_0, x.data(), out.data(), 48));
    EXPECT_FALSE(quantize_row(TensorType::Q4_0, x.data(), out.data(), -32));
    for (uint8_t v : out) ASSERT_EQ(v, 0xAB);  // nothing written
    EXPECT_TRUE(quantize_row(TensorType::Q4_0, x.data(), out.data(), 0));
}

// ---- error budgets on random data ------------------------------------------------------

TEST(Quantize, RoundTripErrorWithinBudget) {
    // Relative RMSE on N(0, 1) data (64 rows of 4096); budgets about 15% above what
    // llama.cpp's quantizer achieves.
    const std::vector<float> x = gaussian(64 * 4096, 1234);
    const std::map<TensorType, double> budget = {
        {TensorType::Q2_K, 0.34},   {TensorType::Q3_K, 0.173},  {TensorType::Q4_0, 0.099},
        {TensorType::Q4_1, 0.090},  {TensorType::Q4_K, 0.082},  {TensorType::Q5_0, 0.049},
        {TensorType::Q5_1, 0.0435}, {TensorType::Q5_K, 0.0415}, {TensorType::Q6_K, 0.0204},
        {TensorType::Q8_0, 0.0062},
    };
    std::map<TensorType, double> err;
    for (TensorType t : kQuantTypes) {
        err[t] = relative_rmse(t, x);
        std::printf("  %-5s relative rmse %.5f (budget %.4f)\n", tensor_type_name(t), err[t],
                    budget.at(t));
        EXPECT_LT(err[t], budget.at(t)) << tensor_type_name(t);
        EXPECT_GT(err[t], budget.at(t) / 4) << tensor_type_name(t) << ": suspiciously exact";
    }
    using T = TensorType;
    // Fewer bits, more error: q2_K > q3_K > q4_0 ~ q4_K > the 5-bit types > q6_K > q8_0.
    EXPECT_GT(err[T::Q2_K], err[T::Q3_K]);
    for (T q4 : {T::Q4_0, T::Q4_1, T::Q4_K}) {
        EXPECT_GT(err[T::Q3_K], err[q4]) << tensor_type_name(q4);
        for (T q5 : {T::Q5_0, T::Q5_1, T::Q5_K})
            EXPECT_GT(err[q4], err[q5]) << tensor_type_name(q4) << " vs " << tensor_type_name(q5);
    }
    EXPECT_LT(std::fabs(err[T::Q4_0] - err[T::Q4_K]), 0.35 * err[T::Q4_0]);
    for (T q5 : {T::Q5_0, T::Q5_1, T::Q5_K})
        EXPECT_GT(err[q5], err[T::Q6_K]) << tensor_type_name(q5);
    EXPECT_GT(err[T::Q6_K], err[T::Q8_0]);
}

// ---- degenerate rows -------------------------------------------------------------------

void expect_finite(TensorType t, const std::vector<float>& x, const char* what) {
    const int64_t n = (int64_t)x.size();
    const std::vector<uint8_t> q = quantize(t, x.data(), n);
    const std::vector<float> y = dequantize(t, q, n);
    for (int64_t i = 0; i < n; ++i)
        ASSERT_TRUE(std::isfinite(y[i]))
            << tensor_type_name(t) << " " << what << ": element " << i << " is " << y[i];
}

TEST(Quantize, ZeroRowsGiveZeros) {
    const std::vector<float> x(1024, 0.0f);
    for (TensorType t : kQuantTypes) {
        const std::vector<float> y = dequantize(t, quantize(t, x.data(), 1024), 1024);
        for (float v : y) ASSERT_EQ(v, 0.0f) << tensor_type_name(t);
    }
}

TEST(Quantize, OutliersStayFinite) {
    // One huge value among normal ones (as in real attention / embedding weights), at the
    // start, middle and end of a block, with either sign; and a row of tiny values.
    for (TensorType t : kQuantTypes) {
        for (float huge : {1e4f, -3e4f}) {
            for (int at : {0, 137, 255}) {
                std::vector<float> x = gaussian(1024, 7);
                x[(size_t)at] = huge;
                expect_finite(t, x, "outlier");
                const int64_t n = 1024;
                const std::vector<float> y = dequantize(t, quantize(t, x.data(), n), n);
                // The outlier itself survives (it sets the block's scale).
                EXPECT_NEAR(y[(size_t)at], huge, std::fabs(huge) * 0.02) << tensor_type_name(t);
            }
        }
        std::vector<float> tiny = gaussian(1024, 9);
        for (float& v : tiny) v *= 1e-20f;
        expect_finite(t, tiny, "tiny values");
        std::vector<float> one(1024, 0.0f);
        one[5] = 1.0f;
        expect_finite(t, one, "a single non-zero");
    }
}

// ---- speed -----------------------------------------------------------------------------

// Not a pass/fail check (the machine may be busy): prints the rate, so a slowdown shows.
TEST(Quantize, Speed) {
    const int64_t n = 256 * 4096;
    const std::vector<float> x = gaussian(n, 3);
    for (TensorType t : {TensorType::Q4_K, TensorType::Q6_K, TensorType::Q2_K, TensorType::Q3_K,
                         TensorType::Q5_K, TensorType::Q4_0}) {
        std::vector<uint8_t> q(row_size(t, n));
        const auto t0 = std::chrono::steady_clock::now();
        ASSERT_TRUE(quantize_row(t, x.data(), q.data(), n));
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("  %-5s %6.1f M weights/s on one thread (1.5e9 weights: %.0f s)\n",
                    tensor_type_name(t), n / s / 1e6, 1.5e9 / (n / s));
    }
}

}  // namespace
