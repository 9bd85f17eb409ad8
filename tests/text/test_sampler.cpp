// The sampler chain against independent references: greedy = argmax; penalties measured
// exactly by bisection on a competing logit; top-k / top-p / min-p survivor sets compared
// with a sort-based reference (a huge temperature after the filters makes the survivors
// equally likely, so enough draws reveal the whole set); the empirical distribution
// against softmax; seeds; the penalty window; NaN / inf logits; a 151936-token vocabulary;
// and no allocation inside sample().
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <new>
#include <numeric>
#include <random>
#include <set>
#include <span>
#include <vector>

#include "edgellm/sampler.h"

// Every global allocation counts, so a test can check that sample() makes none.
static std::atomic<long> g_allocations{0};

void* operator new(std::size_t n) {
    g_allocations.fetch_add(1, std::memory_order_relaxed);
    if (void* p = std::malloc(n ? n : 1)) return p;
    throw std::bad_alloc();
}
// GCC inlines these into callers, sees free() on memory from operator new and calls it a
// mismatch; here operator new is malloc.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void operator delete(void* p) noexcept {
    std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
    std::free(p);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

using namespace edgellm;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Temperature 1, every filter and penalty off, a fixed seed.
SamplerParams plain_params(uint64_t seed = 1234) {
    SamplerParams p;
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repeat_penalty = 1.0f;
    p.seed = seed;
    return p;
}

SamplerParams greedy_params() {
    SamplerParams p = plain_params();
    p.temperature = 0.0f;
    return p;
}

std::vector<float> log_probs(const std::vector<double>& probs) {
    std::vector<float> l;
    for (double p : probs) l.push_back((float)std::log(p));
    return l;
}

std::vector<float> random_logits(size_t n, uint64_t seed, float stddev) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, stddev);
    std::vector<float> v(n);
    for (auto& x : v) x = normal(rng);
    return v;
}

// softmax(logits / temperature) in double.
std::vector<double> softmax_ref(const std::vector<float>& logits, double temperature = 1.0) {
    const double max = *std::max_element(logits.begin(), logits.end());
    std::vector<double> p(logits.size());
    double sum = 0.0;
    for (size_t i = 0; i < p.size(); ++i) sum += p[i] = std::exp((logits[i] - max) / temperature);
    for (auto& x : p) x /= sum;
    return p;
}

// Token ids best first: higher logit, then lower id.
std::vector<int32_t> ranked_ids(const std::vector<float>& logits) {
    std::vector<int32_t> ids(logits.size());
    std::iota(ids.begin(), ids.end(), 0);
    std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
        return logits[(size_t)a] > logits[(size_t)b] ||
               (logits[(size_t)a] == logits[(size_t)b] && a < b);
    });
    return ids;
}

std::vector<int> draw_counts(Sampler& s, const std::vector<float>& logits, int n_draws) {
    std::vector<int> counts(logits.size(), 0);
    for (int i = 0; i < n_draws; ++i) {
        const int32_t t = s.sample(logits);
        EXPECT_GE(t, 0);
        EXPECT_LT(t, (int32_t)logits.size());
        if (t >= 0 && t < (int32_t)logits.size()) ++counts[(size_t)t];
    }
    return counts;
}

std::set<int32_t> drawn_set(Sampler& s, const std::vector<float>& logits, int n_draws) {
    std::set<int32_t> out;
    for (int i = 0; i < n_draws; ++i) out.insert(s.sample(logits));
    return out;
}

// The logit token 0 has after the penalties, found by bisection on a competing token 1:
// greedy keeps token 0 exactly while its penalised logit >= the competitor's (ties go to
// the lower id). Token 0 starts at `logit0`; `history` (tokens 0 and 2, never the
// competitor) is accepted first. Token 2 is -inf, out of the running.
float penalised_logit(SamplerParams p, float logit0, const std::vector<int32_t>& history) {
    p.temperature = 0.0f;
    Sampler s(p, 3);
    for (int32_t t : history) s.accept(t);
    float lo = -1000.0f, hi = 1000.0f;  // token 0 wins at lo, loses at hi
    for (int i = 0; i < 60; ++i) {
        const float mid = 0.5f * (lo + hi);
        const std::vector<float> logits = {logit0, mid, -kInf};
        (s.sample(logits) == 0 ? lo : hi) = mid;
    }
    return lo;
}

// ---- greedy and penalties -------------------------------------------------------------------

TEST(Sampler, GreedyPicksArgmax) {
    for (float temp : {0.0f, -1.0f}) {
        SamplerParams p = greedy_params();
        p.temperature = temp;
        p.top_k = 40;  // filters do not matter when greedy
        p.top_p = 0.1f;
        Sampler s(p, 5);
        const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 3.5f, 3.4f};
        for (int i = 0; i < 10; ++i) EXPECT_EQ(s.sample(logits), 3);
        const std::vector<float> ties = {1.0f, 5.0f, 5.0f, 2.0f, 5.0f};
        EXPECT_EQ(s.sample(ties), 1) << "ties go to the lowest id";
    }
    Sampler s(greedy_params(), 1000);
    const auto logits = random_logits(1000, 7, 3.0f);
    EXPECT_EQ(s.sample(logits), std::max_element(logits.begin(), logits.end()) - logits.begin());
}

TEST(Sampler, GreedyRepeatPenaltyMovesThePick) {
    SamplerParams p = greedy_params();
    p.repeat_penalty = 2.0f;
    {
        Sampler s(p, 3);
        const std::vector<float> logits = {3.0f, 2.0f, 0.0f};
        EXPECT_EQ(s.sample(logits), 0);
        s.accept(0);  // 3.0 / 2 = 1.5 < 2.0
        EXPECT_EQ(s.sample(logits), 1);
        s.reset();
        EXPECT_EQ(s.sample(logits), 0) << "reset forgets the history";
    }
    {
        // A negative logit is multiplied: -1 * 2 = -2 < -1.5 (dividing would give -0.5).
        Sampler s(p, 3);
        const std::vector<float> logits = {-1.0f, -1.5f, -5.0f};
        s.accept(0);
        EXPECT_EQ(s.sample(logits), 1);
    }
}

TEST(Sampler, PenaltyArithmetic) {
    SamplerParams p = greedy_params();
    const std::vector<int32_t> three = {0, 0, 0, 2};
    // No penalties: unchanged.
    EXPECT_NEAR(penalised_logit(p, 5.0f, three), 5.0f, 1e-4);

    p.presence_penalty = 1.0f;  // once, however many times it occurred
    EXPECT_NEAR(penalised_logit(p, 5.0f, three), 4.0f, 1e-4);

    p.presence_penalty = 0.0f;
    p.frequency_penalty = 0.5f;  // per occurrence
    EXPECT_NEAR(penalised_logit(p, 5.0f, three), 3.5f, 1e-4);

    p.presence_penalty = 1.0f;
    EXPECT_NEAR(penalised_logit(p, 5.0f, three), 2.5f, 1e-4);

    // Repeat penalty first, then the subtraction: 5 / 2 - 1.5 - 1 = 0.
    p.repeat_penalty = 2.0f;
    EXPECT_NEAR(penalised_logit(p, 5.0f, three), 0.0f, 1e-4);
    // Negative: -1 * 2 - 1.5 - 1 = -4.5.
    EXPECT_NEAR(penalised_logit(p, -1.0f, three), -4.5f, 1e-4);
    // Not in the history: untouched.
    EXPECT_NEAR(penalised_logit(p, 5.0f, {2, 2}), 5.0f, 1e-4);
    // A repeat penalty below 1 rewards repetition: 5 / 0.5 = 10.
    SamplerParams r = greedy_params();
    r.repeat_penalty = 0.5f;
    EXPECT_NEAR(penalised_logit(r, 5.0f, {0}), 10.0f, 1e-4);
}

TEST(Sampler, PenaltyWindow) {
    SamplerParams p = greedy_params();
    p.repeat_penalty = 1.5f;
    const std::vector<float> logits = {3.0f, 2.9f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    auto pick_after = [&](int32_t last_n, const std::vector<int32_t>& history) {
        SamplerParams q = p;
        q.repeat_last_n = last_n;
        Sampler s(q, (int32_t)logits.size());
        for (int32_t t : history) s.accept(t);
        return s.sample(logits);
    };
    const std::vector<int32_t> history = {0, 5, 6, 7};
    EXPECT_EQ(pick_after(3, history), 0) << "token 0 is older than the window";
    EXPECT_EQ(pick_after(4, history), 1) << "token 0 is the oldest in the window";
    EXPECT_EQ(pick_after(64, history), 1);
    EXPECT_EQ(pick_after(-1, history), 1) << "-1: the whole history";
    EXPECT_EQ(pick_after(0, history), 0) << "0: penalties off";
    EXPECT_EQ(pick_after(3, {0, 5, 6, 7, 0}), 1) << "token 0 came back into the window";
    // Long histories wrap the ring many times.
    std::vector<int32_t> long_history;
    for (int i = 0; i < 1000; ++i) long_history.push_back(i % 2 ? 0 : 5);
    for (int i = 0; i < 10; ++i) long_history.push_back(6);
    EXPECT_EQ(pick_after(10, long_history), 0);
    EXPECT_EQ(pick_after(11, long_history), 1);

    // Counts follow the window: of {0, 0, 0, 5, 6} the last 4 hold token 0 twice.
    SamplerParams f = greedy_params();
    f.frequency_penalty = 1.0f;
    f.repeat_last_n = 4;
    EXPECT_NEAR(penalised_logit(f, 5.0f, {0, 0, 0, 2, 2}), 3.0f, 1e-4);
    f.repeat_last_n = -1;
    EXPECT_NEAR(penalised_logit(f, 5.0f, {0, 0, 0, 2, 2}), 2.0f, 1e-4);
}

TEST(Sampler, AcceptIgnoresOutOfRangeIds) {
    SamplerParams p = greedy_params();
    p.repeat_penalty = 2.0f;
    Sampler s(p, 3);
    s.accept(-1);
    s.accept(3);
    s.accept(1 << 30);
    EXPECT_EQ(s.sample(std::vector<float>{3.0f, 2.0f, 0.0f}), 0);
}

// ---- filters --------------------------------------------------------------------------------

TEST(Sampler, TopK1IsGreedyAtAnyTemperature) {
    const int32_t n_vocab = 1000;
    for (float temp : {0.1f, 1.0f, 3.0f, 100.0f}) {
        for (uint64_t seed = 0; seed < 5; ++seed) {
            SamplerParams p = plain_params(seed);
            p.temperature = temp;
            p.top_k = 1;
            p.repeat_penalty = 1.3f;
            SamplerParams g = p;
            g.temperature = 0.0f;
            Sampler s(p, n_vocab), greedy(g, n_vocab);
            std::mt19937_64 rng(seed);
            for (int step = 0; step < 20; ++step) {
                auto logits = random_logits((size_t)n_vocab, seed * 100 + (uint64_t)step, 2.0f);
                logits[(size_t)(rng() % (uint64_t)n_vocab)] = logits[0];  // a tie somewhere
                const int32_t t = s.sample(logits);
                ASSERT_EQ(t, greedy.sample(logits)) << "temp " << temp << " seed " << seed;
                s.accept(t);
                greedy.accept(t);
            }
        }
    }
}

TEST(Sampler, TopKKeepsExactlyTheKBest) {
    auto logits = random_logits(1000, 11, 2.0f);
    for (size_t i = 500; i < 1000; ++i) logits[i] = std::round(logits[i]);  // many ties
    logits[700] = logits[800] = logits[900] = *std::max_element(logits.begin(), logits.end());
    const auto ranked = ranked_ids(logits);  // ties: lower id first
    for (int32_t k : {1, 2, 25, 999}) {
        SamplerParams p = plain_params();
        p.top_k = k;
        p.temperature = 1e4f;  // survivors almost equally likely
        Sampler s(p, 1000);
        const std::set<int32_t> want(ranked.begin(), ranked.begin() + k);
        EXPECT_EQ(drawn_set(s, logits, 40 * k + 100), want) << "k = " << k;
    }
}

TEST(Sampler, TopKLargeKKeepsExactlyTheKBest) {
    // k above the heap's limit takes the nth_element path.
    const auto logits = random_logits(2000, 12, 2.0f);
    const auto ranked = ranked_ids(logits);
    SamplerParams p = plain_params();
    p.top_k = 1100;
    p.temperature = 1e4f;
    Sampler s(p, 2000);
    const std::set<int32_t> want(ranked.begin(), ranked.begin() + 1100);
    EXPECT_EQ(drawn_set(s, logits, 20 * 1100), want);
}

TEST(Sampler, TopPCraftedDistribution) {
    // p(id) = {0.15, 0.5, 0.05, 0.3}: best first the ids are 1, 3, 0, 2 (cum 0.5, 0.8, 0.95).
    const auto logits = log_probs({0.15, 0.5, 0.05, 0.3});
    {
        SamplerParams p = plain_params();
        p.top_p = 0.75f;  // {1, 3}
        Sampler s(p, 4);
        const auto counts = draw_counts(s, logits, 5000);
        EXPECT_EQ(counts[0], 0);
        EXPECT_EQ(counts[2], 0);
        // Renormalised over the survivors: 0.5 / 0.8.
        EXPECT_NEAR(counts[1] / 5000.0, 0.625, 0.03);
        EXPECT_NEAR(counts[3] / 5000.0, 0.375, 0.03);
    }
    {
        SamplerParams p = plain_params();
        p.top_p = 0.85f;  // {1, 3, 0}
        p.temperature = 1e4f;
        Sampler s(p, 4);
        EXPECT_EQ(drawn_set(s, logits, 2000), (std::set<int32_t>{0, 1, 3}));
    }
    {
        SamplerParams p = plain_params();
        p.top_p = 0.3f;  // the best alone reaches 0.5
        p.temperature = 1e4f;
        Sampler s(p, 4);
        EXPECT_EQ(drawn_set(s, logits, 500), (std::set<int32_t>{1}));
    }
    {
        SamplerParams p = plain_params();
        p.top_p = 0.0f;  // still keeps one
        Sampler s(p, 4);
        EXPECT_EQ(drawn_set(s, logits, 500), (std::set<int32_t>{1}));
    }
}

// The top-p set from a sort in double. p is put halfway between two cumulative sums so the
// set does not hang on rounding; returns {p, set}.
std::pair<float, std::set<int32_t>> top_p_reference(const std::vector<float>& logits, double p0) {
    const auto probs = softmax_ref(logits);
    const auto ranked = ranked_ids(logits);
    double cum = 0.0;
    size_t m = 0;
    while (m < ranked.size() && cum < p0) cum += probs[(size_t)ranked[m++]];
    const double before = cum - probs[(size_t)ranked[m - 1]];
    return {(float)(0.5 * (before + cum)),
            std::set<int32_t>(ranked.begin(), ranked.begin() + (long)m)};
}

TEST(Sampler, TopPMatchesSortedReference) {
    // Small and medium vocabularies, many targets: the quickselect on mass against a sort.
    std::mt19937_64 rng(5);
    for (int trial = 0; trial < 40; ++trial) {
        const size_t n = trial < 20 ? 40 : 1000;
        auto logits = random_logits(n, 1000 + (uint64_t)trial, trial % 2 ? 3.0f : 1.0f);
        for (size_t i = 0; i < n / 10; ++i) logits[rng() % n] = logits[rng() % n];  // ties
        const double p0 = std::uniform_real_distribution<double>(0.02, 0.98)(rng);
        const auto [p, want] = top_p_reference(logits, p0);
        if (want.size() > 300) continue;  // too many draws needed to see every survivor
        SamplerParams sp = plain_params((uint64_t)trial);
        sp.top_p = p;
        sp.temperature = 1e4f;
        Sampler s(sp, (int32_t)n);
        EXPECT_EQ(drawn_set(s, logits, 30 * (int)want.size() + 100), want)
            << "trial " << trial << " n " << n << " p " << p;
    }
}

TEST(Sampler, TopPOnLargeVocabulary) {
    // 151936 tokens: a noise floor and 40 strong tokens scattered over the ids.
    const size_t n = 151936;
    auto logits = random_logits(n, 3, 1.0f);
    std::mt19937_64 rng(9);
    for (int i = 0; i < 40; ++i) {
        logits[rng() % n] = 12.0f + std::uniform_real_distribution<float>(0.0f, 2.0f)(rng);
    }
    const auto [p, want] = top_p_reference(logits, 0.9);
    ASSERT_GT(want.size(), 10u);
    ASSERT_LT(want.size(), 40u);
    SamplerParams sp = plain_params();
    sp.top_p = p;
    sp.temperature = 1e4f;
    Sampler s(sp, (int32_t)n);
    EXPECT_EQ(drawn_set(s, logits, 30 * (int)want.size()), want);
}

TEST(Sampler, MinPCraftedDistribution) {
    // p(id) = {0.04, 0.5, 0.2, 0.26}; relative to the best: 0.08, 1, 0.4, 0.52.
    const auto logits = log_probs({0.04, 0.5, 0.2, 0.26});
    auto survivors = [&](float min_p) {
        SamplerParams p = plain_params();
        p.min_p = min_p;
        p.temperature = 1e4f;
        Sampler s(p, 4);
        return drawn_set(s, logits, 2000);
    };
    EXPECT_EQ(survivors(0.1f), (std::set<int32_t>{1, 2, 3}));
    EXPECT_EQ(survivors(0.45f), (std::set<int32_t>{1, 3}));
    EXPECT_EQ(survivors(0.05f), (std::set<int32_t>{0, 1, 2, 3}));
    EXPECT_EQ(survivors(1.0f), (std::set<int32_t>{1}));
    EXPECT_EQ(survivors(5.0f), (std::set<int32_t>{1})) << "min_p > 1 acts as 1";

    // At temperature 1 the survivors keep their relative weights: 0.5 : 0.2 : 0.26.
    SamplerParams p = plain_params();
    p.min_p = 0.1f;
    Sampler s(p, 4);
    const auto counts = draw_counts(s, logits, 10000);
    EXPECT_EQ(counts[0], 0);
    EXPECT_NEAR(counts[1] / 10000.0, 0.5 / 0.96, 0.03);
}

TEST(Sampler, MinPMatchesReference) {
    const auto logits = random_logits(1000, 21, 2.0f);
    const auto ranked = ranked_ids(logits);
    const float max = logits[(size_t)ranked[0]];
    for (size_t m : {1u, 5u, 30u, 120u}) {
        // Cut between ranked[m - 1] and the next clearly lower logit, halfway in log space.
        size_t next = m;
        while (logits[(size_t)ranked[m - 1]] - logits[(size_t)ranked[next]] < 1e-3f) ++next;
        const double mid = 0.5 * (logits[(size_t)ranked[m - 1]] + logits[(size_t)ranked[next]]);
        SamplerParams p = plain_params();
        p.min_p = (float)std::exp(mid - max);
        p.temperature = 1e4f;
        Sampler s(p, 1000);
        const std::set<int32_t> want(ranked.begin(), ranked.begin() + (long)next);
        EXPECT_EQ(drawn_set(s, logits, 30 * (int)next + 100), want) << "m " << m;
    }
}

TEST(Sampler, ChainOrderFiltersBeforeTemperature) {
    // top_p works on the temperature-1 distribution: p = {0.5, 0.3, 0.15, 0.05} with
    // top_p 0.75 keeps {0, 1} even at a high temperature that would flatten it first.
    SamplerParams p = plain_params();
    p.top_p = 0.75f;
    p.temperature = 50.0f;
    Sampler s(p, 4);
    EXPECT_EQ(drawn_set(s, log_probs({0.5, 0.3, 0.15, 0.05}), 2000), (std::set<int32_t>{0, 1}));
}

// ---- the draw --------------------------------------------------------------------------------

TEST(Sampler, EmpiricalDistributionMatchesSoftmax) {
    const std::vector<float> logits = {1.0f, 2.0f, 0.5f, -1.0f, 1.5f};
    const int n_draws = 20000;
    for (float temp : {1.0f, 0.5f, 2.0f}) {
        SamplerParams p = plain_params(77);
        p.temperature = temp;
        Sampler s(p, 5);
        const auto counts = draw_counts(s, logits, n_draws);
        const auto want = softmax_ref(logits, temp);
        for (size_t i = 0; i < 5; ++i) {
            // The standard error is at most 0.0036; 0.015 is over four of them.
            EXPECT_NEAR(counts[i] / (double)n_draws, want[i], 0.015)
                << "temp " << temp << " token " << i;
        }
    }
}

TEST(Sampler, Seeds) {
    const auto logits = random_logits(50, 4, 0.5f);  // flat enough that draws vary
    auto run = [&](Sampler& s) {
        std::vector<int32_t> out;
        for (int i = 0; i < 200; ++i) {
            out.push_back(s.sample(logits));
            s.accept(out.back());
        }
        return out;
    };
    SamplerParams p = plain_params(42);
    p.repeat_penalty = 1.1f;
    Sampler a(p, 50), b(p, 50);
    const auto seq_a = run(a);
    EXPECT_EQ(seq_a, run(b)) << "same seed, same tokens";
    EXPECT_EQ(a.seed_used(), 42u);
    EXPECT_GT(std::set<int32_t>(seq_a.begin(), seq_a.end()).size(), 10u);

    a.reset();
    EXPECT_EQ(run(a), seq_a) << "reset replays a fixed seed";

    p.seed = 43;
    Sampler c(p, 50);
    EXPECT_NE(run(c), seq_a) << "another seed, other tokens";

    // A random seed is drawn, reported, and replays when given back.
    p.seed = kRandomSeed;
    Sampler r1(p, 50), r2(p, 50);
    EXPECT_NE(r1.seed_used(), kRandomSeed);
    EXPECT_LT(r1.seed_used(), 1ull << 32);
    EXPECT_NE(r1.seed_used(), r2.seed_used());
    EXPECT_EQ(r1.params().seed, kRandomSeed);
    const auto seq_r = run(r1);
    p.seed = r1.seed_used();
    Sampler replay(p, 50);
    EXPECT_EQ(run(replay), seq_r);
}

// ---- bad numbers -----------------------------------------------------------------------------

TEST(Sampler, NanAndInfLogits) {
    const std::vector<float> some_nan = {kNaN, 1.0f, kNaN, 0.5f};
    EXPECT_EQ(Sampler(greedy_params(), 4).sample(some_nan), 1);
    {
        SamplerParams p = plain_params();
        p.top_p = 0.99f;
        p.min_p = 0.01f;
        p.top_k = 3;
        Sampler s(p, 4);
        const auto counts = draw_counts(s, some_nan, 2000);
        EXPECT_EQ(counts[0] + counts[2], 0) << "NaN is never drawn";
        EXPECT_GT(counts[1], 0);
        EXPECT_GT(counts[3], 0);
    }
    const std::vector<float> all_nan(4, kNaN), all_ninf(4, -kInf);
    const std::vector<float> mixed = {kNaN, -kInf, kNaN, -kInf};
    for (const SamplerParams& p : {greedy_params(), plain_params(), SamplerParams{}}) {
        Sampler s(p, 4);
        EXPECT_EQ(s.sample(all_nan), 0);
        EXPECT_EQ(s.sample(all_ninf), 0);
        EXPECT_EQ(s.sample(mixed), 0);
    }
    // +inf beats every finite logit; several +inf share the draw.
    const std::vector<float> pinf = {1.0f, kInf, 1e30f, kInf, kNaN};
    EXPECT_EQ(Sampler(greedy_params(), 5).sample(pinf), 1);
    for (const SamplerParams& p : {plain_params(), SamplerParams{}}) {
        Sampler s(p, 5);
        EXPECT_EQ(drawn_set(s, pinf, 500), (std::set<int32_t>{1, 3}));
    }
    // -inf logits are never drawn.
    Sampler s(plain_params(), 3);
    const auto counts = draw_counts(s, std::vector<float>{-kInf, 0.0f, -kInf}, 200);
    EXPECT_EQ(counts[1], 200);
}

TEST(Sampler, BadParamsAreNormalised) {
    SamplerParams p;
    p.temperature = kNaN;
    p.top_p = kNaN;
    p.min_p = 5.0f;
    p.repeat_penalty = -1.0f;
    p.presence_penalty = kInf;
    p.frequency_penalty = kNaN;
    p.repeat_last_n = -7;
    Sampler s(p, 4);
    EXPECT_EQ(s.params().temperature, 0.0f);
    EXPECT_EQ(s.params().top_p, 1.0f);
    EXPECT_EQ(s.params().min_p, 1.0f);
    EXPECT_EQ(s.params().repeat_penalty, 1.0f);
    EXPECT_EQ(s.params().presence_penalty, 0.0f);
    EXPECT_EQ(s.params().frequency_penalty, 0.0f);
    EXPECT_EQ(s.params().repeat_last_n, -1);
    EXPECT_EQ(s.sample(std::vector<float>{0.0f, 3.0f, 1.0f, kNaN}), 1);

    // Extreme but finite values do not produce NaN picks.
    SamplerParams q = plain_params();
    q.temperature = 1e-38f;
    q.presence_penalty = 3e38f;
    q.frequency_penalty = -3e38f;
    q.repeat_penalty = 1e-30f;
    Sampler e(q, 4);
    e.accept(1);
    e.accept(1);
    for (int i = 0; i < 50; ++i) {
        const int32_t t = e.sample(std::vector<float>{0.0f, kInf, 1e30f, -1e30f});
        EXPECT_GE(t, 0);
        EXPECT_LT(t, 4);
    }
    SamplerParams hot = plain_params();
    hot.temperature = kInf;
    Sampler h(hot, 3);
    EXPECT_EQ(drawn_set(h, std::vector<float>{0.0f, 5.0f, -5.0f}, 500),
              (std::set<int32_t>{0, 1, 2}));
}

// ---- scale and allocation -------------------------------------------------------------------

TEST(Sampler, LargeVocabulary) {
    const size_t n = 151936;
    const auto logits = random_logits(n, 8, 2.0f);
    const auto ranked = ranked_ids(logits);
    EXPECT_EQ(Sampler(greedy_params(), (int32_t)n).sample(logits), ranked[0]);

    SamplerParams p;  // llama.cpp's defaults: top-k 40, top-p 0.95, min-p 0.05, temp 0.8
    p.seed = 3;
    Sampler s(p, (int32_t)n);
    const std::set<int32_t> top40(ranked.begin(), ranked.begin() + 40);
    for (int i = 0; i < 50; ++i) {
        const int32_t t = s.sample(logits);
        EXPECT_TRUE(top40.count(t)) << t;
        s.accept(t);
    }
    // No top-k: top-p and min-p over the whole vocabulary.
    p.top_k = 0;
    Sampler u(p, (int32_t)n);
    for (int i = 0; i < 20; ++i) {
        const int32_t t = u.sample(logits);
        ASSERT_GE(t, 0);
        // min-p 0.05: within log(20) of the best logit.
        EXPECT_GE(logits[(size_t)t], logits[(size_t)ranked[0]] - std::log(20.0f) - 1e-4f);
    }
}

TEST(Sampler, SampleDoesNotAllocate) {
    const size_t n = 151936;
    const auto logits = random_logits(n, 8, 2.0f);
    SamplerParams no_k;
    no_k.top_k = 0;
    SamplerParams penalised;
    penalised.repeat_penalty = 1.1f;
    penalised.frequency_penalty = 0.1f;
    for (const SamplerParams& p : {SamplerParams{}, no_k, penalised, greedy_params()}) {
        Sampler s(p, (int32_t)n);
        const long before = g_allocations.load();
        for (int i = 0; i < 5; ++i) s.accept(s.sample(logits));
        EXPECT_EQ(g_allocations.load() - before, 0);
    }
}

TEST(Sampler, Describe) {
    SamplerParams p;
    p.seed = 7;
    EXPECT_EQ(Sampler(p, 1000).describe(),
              "logits -> top-k 40 -> top-p 0.950 -> min-p 0.050 -> temp 0.800 -> dist (seed 7)");
    SamplerParams g = greedy_params();
    g.repeat_penalty = 1.1f;
    EXPECT_EQ(Sampler(g, 10).describe(),
              "logits -> penalties (last 64, repeat 1.100, frequency 0.000, presence 0.000) -> "
              "greedy");
    EXPECT_EQ(Sampler(plain_params(5), 10).describe(), "logits -> dist (seed 5)");
    p.top_k = 1000;  // no-op at this vocabulary size: left out
    EXPECT_EQ(Sampler(p, 1000).describe(),
              "logits -> top-p 0.950 -> min-p 0.050 -> temp 0.800 -> dist (seed 7)");
}

}  // namespace

TEST(Sampler, PostSamplingProbabilitiesAreWhatTheTokenWasDrawnFrom) {
    // logits 3, 2, 1, 0: top-k 2 at temperature 1 leaves tokens 0 and 1 with p = e/(e+1), 1/(e+1)
    SamplerParams p;
    p.temperature = 1.0f;
    p.top_k = 2;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = 7;
    Sampler s(p, 4);
    const std::vector<float> logits = {3.0f, 2.0f, 1.0f, 0.0f};
    std::vector<TokenLogprob> top;
    float chosen = 0.0f;
    const int32_t t = s.sample(logits, 10, &top, &chosen);
    ASSERT_EQ(top.size(), 2u) << "tokens the filters removed have no probability";
    EXPECT_EQ(top[0].id, 0);
    EXPECT_EQ(top[1].id, 1);
    const double e = std::exp(1.0);
    EXPECT_NEAR(std::exp(top[0].logprob), e / (e + 1.0), 1e-5);
    EXPECT_NEAR(std::exp(top[1].logprob), 1.0 / (e + 1.0), 1e-5);
    ASSERT_TRUE(t == 0 || t == 1);
    EXPECT_FLOAT_EQ(chosen, top[(size_t)t].logprob);
    // the same stream as sample() without probabilities
    Sampler a(p, 4), b(p, 4);
    for (int i = 0; i < 20; ++i) {
        float c;
        std::vector<TokenLogprob> tp;
        EXPECT_EQ(a.sample(logits), b.sample(logits, 1, &tp, &c));
    }
    // a higher temperature flattens the reported distribution
    p.temperature = 2.0f;
    Sampler hot(p, 4);
    (void)hot.sample(logits, 10, &top, &chosen);
    EXPECT_NEAR(std::exp(top[0].logprob), std::exp(0.5) / (std::exp(0.5) + 1.0), 1e-5);
}

TEST(Sampler, PostSamplingProbabilityOfAGreedyPickIsOne) {
    Sampler s(greedy_params(), 4);
    const std::vector<float> logits = {0.5f, 2.0f, 1.0f, 0.0f};
    std::vector<TokenLogprob> top = {{3, -1.0f}};  // (stale entries are replaced)
    float chosen = -5.0f;
    EXPECT_EQ(s.sample(logits, 5, &top, &chosen), 1);
    ASSERT_EQ(top.size(), 1u);
    EXPECT_EQ(top[0].id, 1);
    EXPECT_EQ(top[0].logprob, 0.0f);
    EXPECT_EQ(chosen, 0.0f);
}
