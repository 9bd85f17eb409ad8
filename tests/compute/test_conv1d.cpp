// The causal depthwise convolution of the recurrent layers (compute/ops.h, conv1d_causal)
// against its definition in double, and its promises: the scalar twin's bits in every
// clone, the same bits whether the rows come in one call or one at a time (prefill and
// decode agree) and whatever the split of the channels among threads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "compute/ops.h"

using namespace edgellm;

namespace {

struct Case {
    int64_t n, ch, K;
    std::vector<float> x, w, window;
};

Case make(int64_t n, int64_t ch, int64_t K, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    Case c{n, ch, K, {}, {}, {}};
    c.x.resize((size_t)(n * ch));
    c.w.resize((size_t)(ch * K));
    c.window.resize((size_t)((K - 1) * ch));
    for (float& v : c.x) v = u(rng);
    for (float& v : c.w) v = u(rng);
    for (float& v : c.window) v = u(rng);
    return c;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST(Conv1d, MatchesTheDefinitionInDouble) {
    for (int64_t K : {2, 3, 4}) {
        for (int64_t n : {1, 2, 5}) {
            const Case c = make(n, 70, K, (uint32_t)(K * 10 + n));
            std::vector<float> window = c.window, y((size_t)(n * c.ch));
            conv1d_causal(c.x.data(), c.ch, n, c.ch, c.w.data(), K, window.data(), c.ch, y.data(), c.ch, false);
            // u: the window's rows, then x's
            auto u = [&](int64_t row, int64_t ch) {
                return row < K - 1 ? (double)c.window[(size_t)(row * c.ch + ch)]
                                   : (double)c.x[(size_t)((row - (K - 1)) * c.ch + ch)];
            };
            for (int64_t t = 0; t < n; ++t)
                for (int64_t ch = 0; ch < c.ch; ++ch) {
                    double want = 0;
                    for (int64_t k = 0; k < K; ++k) want += (double)c.w[(size_t)(ch * K + k)] * u(t + k, ch);
                    ASSERT_NEAR(y[(size_t)(t * c.ch + ch)], want, 1e-5) << "K " << K << " n " << n;
                }
            // the window moved on to the last K - 1 inputs
            for (int64_t r = 0; r < K - 1; ++r)
                for (int64_t ch = 0; ch < c.ch; ++ch)
                    ASSERT_EQ(window[(size_t)(r * c.ch + ch)], (float)u(n + r, ch)) << "K " << K << " n " << n;
        }
    }
}

TEST(Conv1d, SiluFollowsTheSum) {
    const Case c = make(3, 40, 4, 7);
    std::vector<float> w1 = c.window, w2 = c.window, plain(3 * 40), act(3 * 40);
    conv1d_causal(c.x.data(), 40, 3, 40, c.w.data(), 4, w1.data(), 40, plain.data(), 40, false);
    conv1d_causal(c.x.data(), 40, 3, 40, c.w.data(), 4, w2.data(), 40, act.data(), 40, true);
    for (size_t i = 0; i < plain.size(); ++i) {
        const double v = plain[i];
        EXPECT_NEAR(act[i], v / (1.0 + std::exp(-v)), 4e-6 * (1.0 + std::fabs(v)));
    }
    EXPECT_TRUE(same_bits(w1, w2));
}

TEST(Conv1d, EveryCloneGivesTheScalarTwinsBits) {
    for (int64_t K : {2, 3, 4, 8})
        for (int64_t ch : {1, 63, 64, 65, 300})
            for (int64_t n : {1, 2, 3, 9})
                for (bool silu : {false, true}) {
                    const Case c = make(n, ch, K, (uint32_t)(K * 1000 + ch * 10 + n));
                    std::vector<float> wa = c.window, wb = c.window, ya((size_t)(n * ch)), yb((size_t)(n * ch));
                    conv1d_causal(c.x.data(), ch, n, ch, c.w.data(), K, wa.data(), ch, ya.data(), ch, silu);
                    conv1d_causal_ref(c.x.data(), ch, n, ch, c.w.data(), K, wb.data(), ch, yb.data(), ch, silu);
                    ASSERT_TRUE(same_bits(ya, yb)) << "K " << K << " ch " << ch << " n " << n << " silu " << silu;
                    ASSERT_TRUE(same_bits(wa, wb)) << "K " << K << " ch " << ch << " n " << n;
                }
}

// A prompt's rows in one call and the same rows one at a time (decode), or in uneven
// pieces, give the same bits: each output is the same fmas in the same order.
TEST(Conv1d, RowsOneAtATimeGiveTheBatchsBits) {
    for (int64_t K : {3, 4}) {
        const int64_t n = 11, ch = 130;
        const Case c = make(n, ch, K, (uint32_t)K);
        std::vector<float> wa = c.window, ya((size_t)(n * ch));
        conv1d_causal(c.x.data(), ch, n, ch, c.w.data(), K, wa.data(), ch, ya.data(), ch, true);
        for (const std::vector<int64_t>& pieces : {std::vector<int64_t>(11, 1), std::vector<int64_t>{1, 4, 2, 1, 3}}) {
            std::vector<float> wb = c.window, yb((size_t)(n * ch));
            int64_t at = 0;
            for (int64_t p : pieces) {
                conv1d_causal(c.x.data() + at * ch, ch, p, ch, c.w.data(), K, wb.data(), ch,
                              yb.data() + at * ch, ch, true);
                at += p;
            }
            ASSERT_EQ(at, n);
            EXPECT_TRUE(same_bits(ya, yb)) << "K " << K;
            EXPECT_TRUE(same_bits(wa, wb)) << "K " << K;
        }
    }
}

// Threads take channel ranges of rows wider than the range (strides apart from the count).
TEST(Conv1d, ChannelRangesGiveTheWholeCallsBits) {
    const int64_t n = 5, ch = 200, K = 3;
    const Case c = make(n, ch, K, 99);
    std::vector<float> wa = c.window, ya((size_t)(n * ch));
    conv1d_causal(c.x.data(), ch, n, ch, c.w.data(), K, wa.data(), ch, ya.data(), ch, false);
    std::vector<float> wb = c.window, yb((size_t)(n * ch));
    for (int64_t c0 : {0, 37, 100, 163}) {
        const int64_t c1 = c0 == 163 ? ch : (c0 == 0 ? 37 : c0 == 37 ? 100 : 163);
        conv1d_causal(c.x.data() + c0, ch, n, c1 - c0, c.w.data() + c0 * K, K, wb.data() + c0, ch,
                      yb.data() + c0, ch, false);
    }
    EXPECT_TRUE(same_bits(ya, yb));
    EXPECT_TRUE(same_bits(wa, wb));
}
