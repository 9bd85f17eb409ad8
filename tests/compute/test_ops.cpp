// The compute layer against plain, independently written implementations: the thread
// pool (every thread runs once per run, no lost wake-ups, exact splits), the element-wise
// ops (rms_norm, swiglu, add, rope), matmul for every weight type against a double
// product of the dequantized weights, and causal grouped-query attention over an F16 /
// Q8_0 KV cache against a full-softmax attention in double.
#include <gtest/gtest.h>

#include <optional>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "compute/attention.h"
#include "compute/matmul.h"
#include "compute/ops.h"
#include "compute/tensor_view.h"
#include "compute/thread_pool.h"
#include "kernels/block_formats.h"
#include "kernels/fp16.h"
#include "kernels/kernel_check.h"
#include "kernels/kernels.h"
#include "kernels/panel.h"
#include "kernels/x16.h"

using namespace edgellm;

namespace {

// A hang (a lost wake-up) should fail loudly instead of stalling the test run until an
// outer timeout: abort with a message when the guarded scope takes longer than `seconds`.
class Watchdog {
  public:
    Watchdog(const char* what, int seconds) : what_(what) {
        thread_ = std::thread([this, seconds] {
            std::unique_lock<std::mutex> lock(mu_);
            if (!cv_.wait_for(lock, std::chrono::seconds(seconds), [this] { return done_; })) {
                std::fprintf(stderr, "WATCHDOG: '%s' did not finish in %d s (lost wake-up?)\n",
                             what_, seconds);
                std::fflush(stderr);
                std::abort();
            }
        });
    }
    ~Watchdog() {
        {
            std::lock_guard<std::mutex> lock(mu_);
            done_ = true;
        }
        cv_.notify_all();
        thread_.join();
    }

  private:
    const char* what_;
    std::mutex mu_;
    std::condition_variable cv_;
    bool done_ = false;
    std::thread thread_;
};

// A weight matrix of n_rows rows of n elements of type t at data, in the file's layout.
TensorView matrix_view(TensorType t, int64_t n, int64_t n_rows, const void* data) {
    TensorView w;
    w.type = t;
    w.ne[0] = n;
    w.ne[1] = n_rows;
    w.data = data;
    return w;
}

std::vector<float> random_floats(size_t n, uint64_t seed, float stddev = 1.0f) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, stddev);
    std::vector<float> v(n);
    for (auto& x : v) x = normal(rng);
    return v;
}

// Make every kernel set this machine has take a turn, then restore the best one.
class KernelSetGuard {
  public:
    KernelSetGuard() : sets_(available_kernel_sets()) {}
    ~KernelSetGuard() { select_kernel_set(default_kernel_set()); }
    const std::vector<std::string>& sets() const { return sets_; }

  private:
    std::vector<std::string> sets_;
};

}  // namespace

// ======================================= ThreadPool =====================================

namespace {

// Runs `fn` once through the pool and checks that every ith in [0, nth) ran exactly once,
// with nth == pool.size(), and that plain (non-atomic) writes of the workers are visible
// to the caller once run() returns.
void run_and_check_once(ThreadPool& pool, int iteration) {
    const int n = pool.size();
    std::vector<std::atomic<int>> hits(n);
    for (auto& h : hits) h.store(0);
    std::vector<int> written(n, -1);
    std::atomic<int> bad_nth{0}, bad_ith{0};
    pool.run([&](int ith, int nth) {
        if (nth != n) bad_nth.fetch_add(1);
        if (ith < 0 || ith >= n) {
            bad_ith.fetch_add(1);
            return;
        }
        hits[ith].fetch_add(1);
        written[ith] = iteration;
    });
    ASSERT_EQ(bad_nth.load(), 0) << "iteration " << iteration;
    ASSERT_EQ(bad_ith.load(), 0) << "iteration " << iteration;
    for (int i = 0; i < n; ++i) {
        ASSERT_EQ(hits[i].load(), 1)
            << "thread " << i << " of " << n << ", iteration " << iteration;
        ASSERT_EQ(written[i], iteration) << "thread " << i << ", iteration " << iteration;
    }
}

}  // namespace

TEST(ThreadPool, EveryThreadRunsExactlyOncePerRun) {
    Watchdog dog("EveryThreadRunsExactlyOncePerRun", 60);
    for (int n : {1, 2, 3, 4}) {
        ThreadPool pool(n);
        ASSERT_EQ(pool.size(), n);
        for (int it = 0; it < 50; ++it) ASSERT_NO_FATAL_FAILURE(run_and_check_once(pool, it));
    }
}

TEST(ThreadPool, CallerIsThreadZeroAndThreadsAreDistinct) {
    Watchdog dog("CallerIsThreadZeroAndThreadsAreDistinct", 60);
    ThreadPool pool(3);
    std::vector<std::thread::id> ids(3);
    pool.run([&](int ith, int) { ids[ith] = std::this_thread::get_id(); });
    EXPECT_EQ(ids[0], std::this_thread::get_id());
    EXPECT_NE(ids[1], ids[0]);
    EXPECT_NE(ids[2], ids[0]);
    EXPECT_NE(ids[1], ids[2]);
}

TEST(ThreadPool, TenThousandConsecutiveRuns) {
    // 10000 back-to-back runs with as many threads as cores, and 2000 oversubscribed (3
    // threads on a 2-core machine: slow when cores are busy, so fewer).
    Watchdog dog("TenThousandConsecutiveRuns", 180);
    for (const auto& [n, runs] : {std::pair<int, int64_t>{2, 10000}, {3, 2000}}) {
        ThreadPool pool(n);
        std::vector<std::atomic<int64_t>> hits(n);
        for (auto& h : hits) h.store(0);
        int64_t sum = 0;
        std::vector<int64_t> partial(n, 0);  // plain writes of each thread
        for (int64_t it = 0; it < runs; ++it) {
            pool.run([&](int ith, int) {
                hits[ith].fetch_add(1, std::memory_order_relaxed);
                partial[ith] = it * n + ith;
            });
            // The workers' plain writes must be complete and visible when run() returns.
            for (int i = 0; i < n; ++i) {
                ASSERT_EQ(partial[i], it * n + i) << "thread " << i << ", run " << it;
                sum += partial[i];
            }
        }
        for (int i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), runs) << "thread " << i;
        // sum over runs of (it*n*n + n(n-1)/2)
        EXPECT_EQ(sum, (int64_t)n * n * (runs * (runs - 1) / 2) + runs * n * (n - 1) / 2);
    }
}

TEST(ThreadPool, RunsAfterWorkersHaveGoneToSleep) {
    Watchdog dog("RunsAfterWorkersHaveGoneToSleep", 120);
    ThreadPool pool(2);
    // Long pauses: the workers exhaust their spin and sleep on the condition variable.
    for (int it = 0; it < 40; ++it) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        ASSERT_NO_FATAL_FAILURE(run_and_check_once(pool, it));
        // ... and a burst right after waking, while they spin.
        for (int k = 0; k < 20; ++k)
            ASSERT_NO_FATAL_FAILURE(run_and_check_once(pool, 1000 + it * 20 + k));
    }
}

TEST(ThreadPool, RunsAfterPausesAroundTheSpinLimit) {
    // Pauses of 0..400 us land on both sides of the spin-then-sleep transition, where a
    // lost wake-up would hide.
    Watchdog dog("RunsAfterPausesAroundTheSpinLimit", 120);
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> pause_us(0, 400);
    for (int n : {2, 3}) {
        ThreadPool pool(n);
        for (int it = 0; it < 600; ++it) {
            const int us = pause_us(rng);
            if (us > 0) std::this_thread::sleep_for(std::chrono::microseconds(us));
            ASSERT_NO_FATAL_FAILURE(run_and_check_once(pool, it));
        }
    }
}

TEST(ThreadPool, ConstructAndDestroyRepeatedly) {
    // Destruction must wake and join workers whether they are spinning or asleep.
    Watchdog dog("ConstructAndDestroyRepeatedly", 120);
    for (int it = 0; it < 100; ++it) {
        ThreadPool pool(3);
        if (it % 2) {
            ASSERT_NO_FATAL_FAILURE(run_and_check_once(pool, it));
        }
    }
    for (int it = 0; it < 5; ++it) {
        ThreadPool pool(2);
        ASSERT_NO_FATAL_FAILURE(run_and_check_once(pool, it));
        std::this_thread::sleep_for(std::chrono::milliseconds(5));  // workers asleep
    }
}

TEST(ThreadPool, SingleThreadPoolRunsOnCaller) {
    for (int requested : {1, 0, -3}) {
        ThreadPool pool(requested);
        ASSERT_EQ(pool.size(), 1) << "requested " << requested;
        int calls = 0;
        std::thread::id id;
        pool.run([&](int ith, int nth) {
            EXPECT_EQ(ith, 0);
            EXPECT_EQ(nth, 1);
            id = std::this_thread::get_id();
            ++calls;
        });
        EXPECT_EQ(calls, 1);
        EXPECT_EQ(id, std::this_thread::get_id());
        for (int it = 0; it < 1000; ++it) ASSERT_NO_FATAL_FAILURE(run_and_check_once(pool, it));
    }
}

TEST(ThreadPool, SplitCoversRangeExactlyOnce) {
    for (int64_t n : {0, 1, 2, 3, 5, 7, 15, 16, 17, 37, 100, 1000, 4097}) {
        for (int nth : {1, 2, 3, 4, 5, 7, 8, 16, 33}) {
            std::vector<int> covered((size_t)n, 0);
            int64_t prev_end = 0;
            const int64_t max_chunk = (n + nth - 1) / nth;
            for (int ith = 0; ith < nth; ++ith) {
                int64_t b = -1, e = -1;
                ThreadPool::split(n, ith, nth, &b, &e);
                ASSERT_LE(0, b) << "n=" << n << " nth=" << nth << " ith=" << ith;
                ASSERT_LE(b, e) << "n=" << n << " nth=" << nth << " ith=" << ith;
                ASSERT_LE(e, n) << "n=" << n << " nth=" << nth << " ith=" << ith;
                // contiguous, in thread order
                ASSERT_EQ(b, prev_end) << "n=" << n << " nth=" << nth << " ith=" << ith;
                ASSERT_LE(e - b, max_chunk) << "n=" << n << " nth=" << nth << " ith=" << ith;
                prev_end = e;
                for (int64_t i = b; i < e; ++i) ++covered[(size_t)i];
            }
            EXPECT_EQ(prev_end, n) << "n=" << n << " nth=" << nth;
            for (int64_t i = 0; i < n; ++i)
                ASSERT_EQ(covered[(size_t)i], 1) << "n=" << n << " nth=" << nth << " i=" << i;
        }
    }
}

TEST(ThreadPool, SplitInsideRunSumsARange) {
    // The usual pattern: each thread sums its chunk; the total must be exact.
    Watchdog dog("SplitInsideRunSumsARange", 60);
    for (int n_threads : {1, 2, 3}) {
        ThreadPool pool(n_threads);
        for (int64_t n : {0, 1, 5, 37, 1001}) {
            std::vector<int64_t> part(pool.size(), 0);
            pool.run([&](int ith, int nth) {
                int64_t b, e;
                ThreadPool::split(n, ith, nth, &b, &e);
                for (int64_t i = b; i < e; ++i) part[ith] += i + 1;
            });
            int64_t total = 0;
            for (int64_t p : part) total += p;
            EXPECT_EQ(total, n * (n + 1) / 2) << "n=" << n << " threads=" << n_threads;
        }
    }
}

// ===================================== element-wise ops =================================

namespace {

std::vector<double> naive_rms_norm(const std::vector<float>& x, const std::vector<float>& w,
                                   double eps) {
    double ss = 0.0;
    for (float v : x) ss += (double)v * v;
    const double inv = 1.0 / std::sqrt(ss / (double)x.size() + eps);
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = (double)x[i] * inv * (double)w[i];
    return y;
}

double naive_silu_mul(double g, double u) {
    return g / (1.0 + std::exp(-g)) * u;
}

// theta_i = pos * freq_scale * base^(-2i/n_rot) / freq_factor_i, pairs (i, i + n_rot/2)
// for NEOX, (2i, 2i+1) otherwise; elements from n_rot on untouched.
std::vector<double> naive_rope(const std::vector<float>& x, int64_t pos, int n_rot, double base,
                               double freq_scale, bool neox, const float* freq_factors) {
    std::vector<double> y(x.begin(), x.end());
    for (int i = 0; i < n_rot / 2; ++i) {
        double theta = (double)pos * freq_scale * std::pow(base, -2.0 * i / n_rot);
        if (freq_factors) theta /= (double)freq_factors[i];
        const int a = neox ? i : 2 * i;
        const int b = neox ? i + n_rot / 2 : 2 * i + 1;
        const double x0 = x[a], x1 = x[b];
        y[a] = x0 * std::cos(theta) - x1 * std::sin(theta);
        y[b] = x0 * std::sin(theta) + x1 * std::cos(theta);
    }
    return y;
}

}  // namespace

TEST(Ops, RmsNormMatchesNaive) {
    uint64_t seed = 100;
    double worst = 0.0;  // relative error; budget 2e-6
    for (int64_t n : {1, 7, 64, 896, 4096}) {
        for (float mag : {1e-3f, 1.0f, 300.0f}) {
            for (float eps : {1e-6f, 1e-5f, 1e-2f}) {
                std::vector<float> x = random_floats((size_t)n, ++seed, mag);
                std::vector<float> w = random_floats((size_t)n, ++seed, 1.0f);
                std::vector<float> y((size_t)n, std::numeric_limits<float>::quiet_NaN());
                rms_norm(x.data(), w.data(), y.data(), n, eps);
                const std::vector<double> ref = naive_rms_norm(x, w, eps);
                for (int64_t i = 0; i < n; ++i) {
                    // a few float roundings of the product x * scale * w
                    const double tol = 2e-6 * std::fabs(ref[i]) + 1e-30;
                    worst = std::max(worst,
                                     std::fabs(y[i] - ref[i]) / std::max(std::fabs(ref[i]), 1e-30));
                    ASSERT_LE(std::fabs(y[i] - ref[i]), tol)
                        << "n=" << n << " mag=" << mag << " eps=" << eps << " i=" << i << " got "
                        << y[i] << " want " << ref[i];
                }
            }
        }
    }
    std::printf("[ rms_norm ] max relative error %.3g\n", worst);
}

TEST(Ops, RmsNormOfZerosIsZeroAndEpsMatters) {
    std::vector<float> x(64, 0.0f), w(64, 1.0f), y(64, 1.0f);
    rms_norm(x.data(), w.data(), y.data(), 64, 1e-5f);
    for (float v : y) EXPECT_EQ(v, 0.0f);
    // constant 1e-3 input: without eps the output would be w; with eps 1e-6 it is
    // 1e-3 / sqrt(1e-6 + 1e-6) = 1/sqrt(2).
    std::fill(x.begin(), x.end(), 1e-3f);
    rms_norm(x.data(), w.data(), y.data(), 64, 1e-6f);
    for (float v : y) EXPECT_NEAR(v, 1.0 / std::sqrt(2.0), 1e-5);
}

TEST(Ops, SwigluMatchesNaive) {
    std::vector<float> g = random_floats(4096, 11, 4.0f);
    const std::vector<float> u = random_floats(4096, 12, 2.0f);
    // extremes: silu(-100) -> 0 (no NaN from exp overflow), silu(+100) -> 100
    g[0] = -100.0f;
    g[1] = 100.0f;
    g[2] = 0.0f;
    g[3] = -88.0f;
    g[4] = 30.0f;
    const std::vector<float> g0 = g;
    swiglu(g.data(), u.data(), (int64_t)g.size());
    double worst = 0.0;  // relative error; budget 3e-6
    for (size_t i = 0; i < g.size(); ++i) {
        const double ref = naive_silu_mul(g0[i], u[i]);
        // (silu(g) for g < -40 is g / (1 + e^40) in swiglu, off from g e^g by < |g| e^-40)
        const double tol = 3e-6 * std::fabs(ref) + 1e-16 * std::fabs((double)g0[i] * u[i]) + 1e-30;
        worst = std::max(worst, std::fabs(g[i] - ref) / std::max(std::fabs(ref), 1e-30));
        ASSERT_LE(std::fabs(g[i] - ref), tol) << "i=" << i << " gate=" << g0[i] << " up=" << u[i]
                                              << " got " << g[i] << " want " << ref;
    }
    std::printf("[ swiglu ] max relative error %.3g\n", worst);
}

// geglu's GELU is ggml's: the tanh formula on the gate rounded to f16, the result rounded
// to f16 (its lookup table), 0 at or below -10 and the gate itself at or above 10. For
// every f16 value as a gate, and gates between two f16 values, times the up value.
TEST(Ops, GegluIsGgmlsGeluOfTheHalfRoundedGate) {
    auto want = [](float x) -> float {
        if (x <= -10.0f) return 0.0f;
        if (x >= 10.0f) return x;
        const float h = fp16_to_f32(f32_to_fp16(x));
        const float g = 0.5f * h * (1.0f + std::tanh(0.79788456080286535587989211986876f * h *
                                                      (1.0f + 0.044715f * h * h)));
        return fp16_to_f32(f32_to_fp16(g));
    };
    std::vector<float> gate, up;
    for (uint32_t b = 0; b < 65536; ++b) {
        const float x = fp16_to_f32((fp16_t)b);
        if (!std::isfinite(x)) continue;
        gate.push_back(x);
        gate.push_back(std::nextafter(x, 1e9f));  // (rounds back to x or to its neighbour)
    }
    for (size_t i = 0; i < gate.size(); ++i) up.push_back(i % 3 == 0 ? 1.0f : -0.75f);
    std::vector<float> got = gate;
    geglu(got.data(), up.data(), (int64_t)got.size());
    for (size_t i = 0; i < gate.size(); ++i) {
        const float w = want(gate[i]) * up[i];
        ASSERT_EQ(std::memcmp(&got[i], &w, sizeof w), 0)
            << "gate " << gate[i] << ": " << got[i] << ", not " << w;
    }
}

TEST(Ops, AddMatchesNaive) {
    std::vector<float> x = random_floats(1001, 21);
    const std::vector<float> b = random_floats(1001, 22);
    const std::vector<float> x0 = x;
    add(x.data(), b.data(), (int64_t)x.size());
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], x0[i] + b[i]) << "i=" << i;
}

namespace {

struct RopeCase {
    int head_dim;
    int n_rot;
    bool neox;
    float base;
    float freq_scale;
    bool factors;
};

std::string describe(const RopeCase& c, int64_t pos) {
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  "head_dim=%d n_rot=%d %s base=%g freq_scale=%g factors=%d pos=%lld", c.head_dim,
                  c.n_rot, c.neox ? "NEOX" : "NORMAL", c.base, c.freq_scale, (int)c.factors,
                  (long long)pos);
    return buf;
}

const RopeCase kRopeCases[] = {
    {64, 64, false, 10000.0f, 1.0f, false},   {64, 64, true, 10000.0f, 1.0f, false},
    {128, 128, false, 500000.0f, 1.0f, true}, {128, 128, true, 1000000.0f, 1.0f, false},
    {64, 32, false, 10000.0f, 1.0f, false},   {64, 32, true, 10000.0f, 1.0f, false},
    {128, 64, true, 10000.0f, 0.25f, true},   {80, 40, false, 10000.0f, 0.5f, false},
};

}  // namespace

TEST(Ops, RopeMatchesNaiveFormula) {
    // rope advances theta by repeated float multiplication (as ggml does), so its angle
    // error grows with the position: about pos * (a few ulp) radians. Budget per element,
    // relative to the pair's norm: 2e-6 + 2e-7 * pos (at pos 32767: 6.6e-3). A wrong
    // pairing, exponent or sign gives O(1) errors.
    double worst_ratio = 0.0;  // max error / budget
    uint64_t seed = 500;
    for (const RopeCase& c : kRopeCases) {
        std::vector<float> ff((size_t)c.n_rot / 2);
        {
            std::mt19937 rng((unsigned)c.head_dim + c.n_rot);
            std::uniform_real_distribution<float> u(1.0f, 8.0f);
            for (auto& f : ff) f = u(rng);
        }
        for (int64_t pos : {0, 1, 2, 7, 100, 1000, 4095, 32767}) {
            const std::vector<float> x = random_floats((size_t)c.head_dim, ++seed);
            std::vector<float> y = x;
            RopeParams p;
            p.n_rot = c.n_rot;
            p.freq_base = c.base;
            p.freq_scale = c.freq_scale;
            p.neox = c.neox;
            p.freq_factors = c.factors ? ff.data() : nullptr;
            rope(y.data(), pos, p);
            const std::vector<double> ref =
                naive_rope(x, pos, c.n_rot, c.base, c.freq_scale, c.neox, p.freq_factors);
            const double budget = 2e-6 + 2e-7 * (double)pos;
            for (int i = 0; i < c.head_dim; ++i) {
                if (i >= c.n_rot) {
                    ASSERT_EQ(y[i], x[i])
                        << describe(c, pos) << ": tail element " << i << " changed";
                    continue;
                }
                // the pair this element belongs to
                const int half = c.n_rot / 2;
                const int a = c.neox ? (i % half) : (i & ~1);
                const int b = c.neox ? a + half : a + 1;
                const double norm = std::hypot((double)x[a], (double)x[b]);
                const double err = std::fabs(y[i] - ref[i]) / (norm + 1e-30);
                worst_ratio = std::max(worst_ratio, err / budget);
                ASSERT_LE(err, budget) << describe(c, pos) << ": element " << i << " got " << y[i]
                                       << " want " << ref[i];
            }
        }
    }
    std::printf("[ rope ] worst error is %.2f of its budget\n", worst_ratio);
}

TEST(Ops, RopeNeoxAndNormalPairDifferentElements) {
    // Rotating only by the first frequency (pos 1, n_rot 4 so the second pair is slow):
    // NORMAL mixes (0,1), NEOX mixes (0,2). A unit vector e0 moves into e1 or e2.
    for (bool neox : {false, true}) {
        std::vector<float> x = {1.0f, 0.0f, 0.0f, 0.0f};
        RopeParams p;
        p.n_rot = 4;
        p.freq_base = 10000.0f;
        p.neox = neox;
        rope(x.data(), 1, p);
        EXPECT_NEAR(x[0], std::cos(1.0), 1e-6);
        EXPECT_NEAR(x[neox ? 2 : 1], std::sin(1.0), 1e-6);
        EXPECT_EQ(x[neox ? 1 : 2], 0.0f);
        EXPECT_EQ(x[3], 0.0f);
    }
}

TEST(Ops, RopeAtPositionZeroIsIdentity) {
    for (const RopeCase& c : kRopeCases) {
        std::vector<float> ff((size_t)c.n_rot / 2, 3.0f);
        const std::vector<float> x = random_floats((size_t)c.head_dim, 77);
        std::vector<float> y = x;
        RopeParams p;
        p.n_rot = c.n_rot;
        p.freq_base = c.base;
        p.freq_scale = c.freq_scale;
        p.neox = c.neox;
        p.freq_factors = c.factors ? ff.data() : nullptr;
        rope(y.data(), 0, p);
        for (int i = 0; i < c.head_dim; ++i) ASSERT_EQ(y[i], x[i]) << describe(c, 0) << " i=" << i;
    }
}

TEST(Ops, RopePreservesPairNorms) {
    for (const RopeCase& c : kRopeCases) {
        std::vector<float> ff((size_t)c.n_rot / 2, 2.0f);
        for (int64_t pos : {1, 13, 511, 8191, 131071}) {
            const std::vector<float> x = random_floats((size_t)c.head_dim, 900 + (uint64_t)pos);
            std::vector<float> y = x;
            RopeParams p;
            p.n_rot = c.n_rot;
            p.freq_base = c.base;
            p.freq_scale = c.freq_scale;
            p.neox = c.neox;
            p.freq_factors = c.factors ? ff.data() : nullptr;
            rope(y.data(), pos, p);
            const int half = c.n_rot / 2;
            for (int i = 0; i < half; ++i) {
                const int a = c.neox ? i : 2 * i;
                const int b = c.neox ? i + half : 2 * i + 1;
                const double before = std::hypot((double)x[a], (double)x[b]);
                const double after = std::hypot((double)y[a], (double)y[b]);
                ASSERT_NEAR(after, before, 1e-6 * before + 1e-30)
                    << describe(c, pos) << " pair " << i;
            }
        }
    }
}

// ========================================= matmul =======================================

namespace {

const TensorType kWeightTypes[] = {
    TensorType::F32,  TensorType::F16,  TensorType::BF16, TensorType::Q8_0, TensorType::Q4_0,
    TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1, TensorType::Q2_K, TensorType::Q3_K,
    TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K,
};

// Two references for y = x W^T, both double products of the reference dequantization of
// the weights:
//
// (1) "rounded": with the activations rounded to the vec_dot type by the reference
//     quantizer and dequantized again -- what the engine documents it computes. Only the
//     float summation order (and for q8_1 the f16 block sum `s`) differs, so each element
//     must be within a tight budget of the magnitude sum_k |w_rk * x_k|:
//       q4_1 / q5_1 (q8_1 activations with an f16 block sum): measured 9e-6, budget 1e-4
//       every other type: measured <= 5e-8, budget 1e-5
//     Any wrong row, column, stride or token fails this by orders of magnitude.
//
// (2) "float": with the float activations, i.e. what a user comparing against an f32
//     model sees. The error is the activations' rounding carried through the dot; as a
//     normalized RMSE over the whole y (37 rows x all tokens):
//       f32  measured 1e-7   budget 1e-5
//       f16  measured 2.2e-4 budget 1e-3
//       bf16 measured 1.7e-3 budget 5e-3
//       8-bit activations (q8_0 / q8_1 / q8_K) measured 5.5e-3 .. 1.1e-2 (q2_K) budget 3e-2
//     One wrong row out of 37 already gives ~0.2, a wrong column / stride ~1.4.
double matmul_float_budget(TensorType act) {
    switch (act) {
        case TensorType::F32:
            return 1e-5;
        case TensorType::F16:
            return 1e-3;
        case TensorType::BF16:
            return 5e-3;
        default:
            return 3e-2;
    }
}

double matmul_rounded_budget(TensorType weight) {
    switch (weight) {
        case TensorType::Q4_1:
        case TensorType::Q5_1:
            return 1e-4;
        default:
            return 1e-5;
    }
}

struct MatmulError {
    double rounded = 0.0;  // worst |y - ref_rounded| / sum_k |w x|
    double nrmse = 0.0;    // ||y - ref_float|| / ||ref_float|| over all of y
};

// y = x W^T through edgellm::matmul. x rows have a stride larger than n, y rows a stride
// larger than n_rows with guard values that must stay untouched, y starts as NaN, and
// the activation buffer has guard bytes after activation_buffer_size().
MatmulError check_matmul(ThreadPool& pool, TensorType type, int64_t n, int64_t n_rows,
                         int64_t n_tokens, uint64_t seed, const std::string& what,
                         bool check_float, bool x16 = false) {
    MatmulError res;
    const std::vector<uint8_t> wdata = random_tensor_data(type, n * n_rows, seed);
    EXPECT_EQ(wdata.size(), row_size(type, n) * (size_t)n_rows);
    std::vector<float> wf((size_t)(n * n_rows));
    reference_kernels(type).to_float(wdata.data(), wf.data(), n * n_rows);

    TensorView w = matrix_view(type, n, n_rows, wdata.data());
    std::vector<uint8_t> packed;
    if (x16) {  // the same weights in the row-interleaved layout
        packed.resize(wdata.size());
        w = repack_x16(&pool, w, packed.data());
    }

    const int64_t x_stride = n + 24;
    const int64_t y_stride = n_rows + 5;
    const std::vector<float> x = random_floats((size_t)(x_stride * n_tokens), seed + 1);

    const TensorType act = type_kernels(type).vec_dot_type;
    const size_t xq_bytes = activation_buffer_size(w, n_tokens, pool.size());
    EXPECT_GE(xq_bytes, row_size(act, n) * (size_t)n_tokens) << what;
    constexpr size_t kGuard = 256;
    std::vector<uint8_t> xq(xq_bytes + kGuard, 0xA5);

    // the activations as the reference quantizer rounds them
    std::vector<float> xr((size_t)(n * n_tokens));
    {
        std::vector<uint8_t> tmp(row_size(act, n));
        for (int64_t t = 0; t < n_tokens; ++t) {
            reference_kernels(act).from_float(&x[(size_t)(t * x_stride)], tmp.data(), n);
            reference_kernels(act).to_float(tmp.data(), &xr[(size_t)(t * n)], n);
        }
    }

    const float kSentinel = -12345.5f;
    std::vector<float> y((size_t)(y_stride * n_tokens), kSentinel);
    for (int64_t t = 0; t < n_tokens; ++t)
        for (int64_t r = 0; r < n_rows; ++r)
            y[(size_t)(t * y_stride + r)] = std::numeric_limits<float>::quiet_NaN();

    matmul(pool, w, x.data(), x_stride, n_tokens, xq.data(), y.data(), y_stride);

    for (size_t i = xq_bytes; i < xq.size(); ++i)
        if (xq[i] != 0xA5) {
            ADD_FAILURE() << what << ": activation buffer overrun at byte " << i << " of "
                          << xq_bytes;
            break;
        }
    for (int64_t t = 0; t < n_tokens; ++t)
        for (int64_t r = n_rows; r < y_stride; ++r)
            if (y[(size_t)(t * y_stride + r)] != kSentinel) {
                ADD_FAILURE() << what << ": wrote y padding at token " << t << " column " << r;
                return res;
            }

    double ss_ref = 0.0, ss_err = 0.0;
    int reported = 0;
    for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t r = 0; r < n_rows; ++r) {
            double sf = 0.0, sr = 0.0, mag = 0.0;
            for (int64_t k = 0; k < n; ++k) {
                const double wk = wf[(size_t)(r * n + k)];
                sf += wk * (double)x[(size_t)(t * x_stride + k)];
                sr += wk * (double)xr[(size_t)(t * n + k)];
                mag += std::fabs(wk * (double)xr[(size_t)(t * n + k)]);
            }
            const double got = y[(size_t)(t * y_stride + r)];
            const double rel = std::fabs(got - sr) / (mag + 1e-30);
            if (!(rel <= matmul_rounded_budget(type))) {
                if (reported++ < 5) {
                    ADD_FAILURE() << what << ": y[token " << t << "][row " << r << "] = " << got
                                  << ", expected " << sr << " (error " << rel << " of magnitude "
                                  << mag << ", budget " << matmul_rounded_budget(type) << ")";
                }
                res.rounded = INFINITY;
            } else {
                res.rounded = std::max(res.rounded, rel);
            }
            ss_ref += sf * sf;
            ss_err += (got - sf) * (got - sf);
        }
    }
    res.nrmse = std::sqrt(ss_err / ss_ref);
    if (check_float) {
        EXPECT_LE(res.nrmse, matmul_float_budget(act)) << what;
    }
    return res;
}

}  // namespace

TEST(Matmul, EveryWeightTypeMatchesDoubleProduct) {
    KernelSetGuard guard;
    ThreadPool pool(2);
    const int64_t n = 512;      // two K-quant super-blocks, 16 blocks of 32
    const int64_t n_rows = 37;  // not a multiple of the 16-row blocks of matmul
    for (const std::string& set : guard.sets()) {
        ASSERT_TRUE(select_kernel_set(set)) << set;
        for (TensorType type : kWeightTypes) {
            MatmulError worst;
            uint64_t seed = 1000 + (uint64_t)type * 10;
            for (int64_t n_tokens : {1, 3, 17}) {
                const std::string what = std::string(set) + " " + tensor_type_name(type) +
                                         " tokens=" + std::to_string(n_tokens);
                const MatmulError e =
                    check_matmul(pool, type, n, n_rows, n_tokens, ++seed, what, true);
                worst.nrmse = std::max(worst.nrmse, e.nrmse);
                worst.rounded = std::max(worst.rounded, e.rounded);
            }
            const TensorType act = type_kernels(type).vec_dot_type;
            std::printf(
                "[ matmul %-4s ] %-5s (act %-4s) vs float x: nrmse %.3g (budget %.0e); "
                "vs rounded x: %.3g of magnitude (budget %.0e)\n",
                set.c_str(), tensor_type_name(type), tensor_type_name(act), worst.nrmse,
                matmul_float_budget(act), worst.rounded, matmul_rounded_budget(type));
        }
    }
}

TEST(Matmul, OddShapesAndPoolSizes) {
    // Fewer rows than threads x 16, exactly 16, one row; float types with n not a multiple
    // of any SIMD width; pools of 1 and 3 threads.
    struct Case {
        TensorType type;
        int64_t n;
        int64_t rows;
        int64_t tokens;
    };
    const Case cases[] = {
        {TensorType::F32, 100, 1, 2},   {TensorType::F32, 37, 33, 5},
        {TensorType::F16, 100, 16, 3},  {TensorType::BF16, 52, 17, 1},
        {TensorType::Q4_0, 64, 1, 4},   {TensorType::Q8_0, 96, 16, 2},
        {TensorType::Q5_1, 32, 48, 3},  {TensorType::Q4_K, 256, 3, 2},
        {TensorType::Q6_K, 768, 18, 1},
        // batches that take the panel GEMM (8 tokens and more): partial last panels, tails
        // of the column tiles
        {TensorType::Q4_0, 64, 1, 9},   {TensorType::Q5_0, 96, 17, 13},
        {TensorType::Q8_0, 32, 33, 8},  {TensorType::Q4_1, 64, 5, 11},
        {TensorType::Q2_K, 256, 19, 10}, {TensorType::Q3_K, 512, 7, 9},
        {TensorType::Q4_K, 256, 40, 21}, {TensorType::Q5_K, 256, 3, 8},
        {TensorType::Q6_K, 768, 18, 16},
    };
    for (int n_threads : {1, 3}) {
        ThreadPool pool(n_threads);
        uint64_t seed = 7000;
        for (const Case& c : cases) {
            const std::string what =
                std::string(tensor_type_name(c.type)) + " n=" + std::to_string(c.n) +
                " rows=" + std::to_string(c.rows) + " tokens=" + std::to_string(c.tokens) +
                " threads=" + std::to_string(n_threads);
            // too few outputs for a meaningful RMSE: the per-element check only
            check_matmul(pool, c.type, c.n, c.rows, c.tokens, ++seed, what, false);
        }
    }
}

TEST(Matmul, QuantizedStepsEqualTheCombinedCall) {
    // quantize_activations + matmul_quantized, the two steps callers use to share one
    // quantized activation buffer between weight matrices, give exactly what matmul gives.
    ThreadPool pool(2);
    for (const int64_t tokens : {3, 12}) {  // per-row dots, and the panel GEMM
    const int64_t n = 256, rows = 21;
    const std::vector<uint8_t> wd = random_tensor_data(TensorType::Q4_K, n * rows, 31);
    TensorView w = matrix_view(TensorType::Q4_K, n, rows, wd.data());
    const std::vector<float> x = random_floats((size_t)(n * tokens), 32);
    std::vector<uint8_t> xq1(activation_buffer_size(w, tokens, pool.size()));
    std::vector<uint8_t> xq2(xq1.size());
    std::vector<float> y1((size_t)(rows * tokens)), y2((size_t)(rows * tokens));
    matmul(pool, w, x.data(), n, tokens, xq1.data(), y1.data(), rows);
    quantize_activations(pool, w, x.data(), n, tokens, xq2.data());
    // (the quantized rows; past them the panel GEMM keeps its per-thread weight panels)
    const size_t q_bytes = row_size(type_kernels(w.type).vec_dot_type, n) * (size_t)tokens;
    EXPECT_EQ(0, std::memcmp(xq1.data(), xq2.data(), q_bytes));
    matmul_quantized(pool, w, xq2.data(), tokens, y2.data(), rows);
    EXPECT_EQ(y1, y2) << tokens << " tokens";
    }
}

// Weights repacked into the row-interleaved layout (kernels/x16.h) give the reference's
// products within the same budget, for one token and batches up to x16_gemv_max_tokens (the
// GEMV, four, two and one columns at a time) and larger batches (the panel GEMM reading
// the rows back), with one and two threads; and a row reads back as floats.
TEST(Matmul, RowInterleavedWeightsGiveTheReferenceProducts) {
    int64_t seed = 900;
    for (const int n_threads : {1, 2}) {
        ThreadPool pool(n_threads);
        for (TensorType t : {TensorType::Q4_0, TensorType::Q5_0, TensorType::Q8_0,
                             TensorType::Q2_K, TensorType::Q4_K, TensorType::Q6_K}) {
            const int64_t n = 512;
            for (const int64_t rows : {16, 48})
                for (const int64_t tokens : {int64_t(1), int64_t(3), int64_t(6), int64_t(13),
                                             x16_gemv_max_tokens(t), x16_gemv_max_tokens(t) + 1}) {
                    const std::string what = std::string("x16 ") + tensor_type_name(t) +
                                             " rows=" + std::to_string(rows) +
                                             " tokens=" + std::to_string(tokens) +
                                             " threads=" + std::to_string(n_threads);
                    check_matmul(pool, t, n, rows, tokens, ++seed, what, false, true);
                }
            const std::vector<uint8_t> wd = random_tensor_data(t, n * 32, 77);
            TensorView w = matrix_view(t, n, 32, wd.data());
            std::vector<uint8_t> packed(wd.size());
            const TensorView p = repack_x16(&pool, w, packed.data());
            EXPECT_TRUE(p.x16);
            std::vector<float> a((size_t)n), b((size_t)n);
            for (const int64_t r : {0, 5, 16, 31}) {
                row_to_float(w, r, a.data());
                row_to_float(p, r, b.data());
                EXPECT_EQ(a, b) << tensor_type_name(t) << " row " << r;
            }
        }
    }
}

// Every panel kernel gives the bits of panel_gemm_ref, so kernel sets whose panels meet
// a q8_K block's scale the same way (PanelKernel::runs) give the same matmul bits: here
// through the whole prefill path (activation blocks, AMX's tiles of 16 tokens built per
// batch, x16 weights straight to panels), with a last tile of tokens partly filled and
// two threads. Fewer than two such sets on this machine: said, and only one is run.
TEST(Matmul, PanelKernelSetsGiveTheSameBits) {
    KernelSetGuard guard;
    std::vector<std::string> sets;
    for (const std::string& set : guard.sets()) {
        ASSERT_TRUE(select_kernel_set(set));
        // (bf16 GEMM batches are bf16 sums: Matmul.Bf16GemmIsTheRoundedProducts; they are
        // left out below, per weight)
        if (panel_kernel().gemm && panel_kernel().runs) sets.push_back(set);
    }
    if (sets.size() < 2)
        std::printf("PanelKernelSetsGiveTheSameBits: %zu set(s) with q8_K runs here; nothing to "
                    "compare with\n", sets.size());
    ThreadPool pool(2);
    const int64_t n = 512, n_rows = 48, n_tokens = 37;
    for (TensorType t : {TensorType::Q4_0, TensorType::Q5_0, TensorType::Q8_0, TensorType::Q2_K,
                         TensorType::Q4_K, TensorType::Q6_K, TensorType::Q5_K, TensorType::Q3_K})
        for (bool x16 : {false, true}) {
            if (x16 && !x16_layout(t)) continue;
            const std::vector<uint8_t> wd = random_tensor_data(t, n * n_rows, 500 + (uint64_t)t);
            TensorView w = matrix_view(t, n, n_rows, wd.data());
            std::vector<uint8_t> packed(wd.size());
            if (x16) w = repack_x16(&pool, w, packed.data());
            const std::vector<float> x = random_floats((size_t)(n * n_tokens), 600 + (uint64_t)t);
            std::vector<float> first;
            std::string first_set;
            for (const std::string& set : sets) {
                ASSERT_TRUE(select_kernel_set(set));
                // (the exact x16 GEMM gives the GEMV's bits instead:
                // Matmul.BatchesKeepEachTokensBitsWherePanelsPromiseIt)
                if (takes_bf16(w, n_tokens) || takes_exact_x16(w, n_tokens)) continue;
                std::vector<uint8_t> xq(activation_buffer_size(w, n_tokens, pool.size()));
                std::vector<float> y((size_t)(n_rows * n_tokens), -1.0f);
                matmul(pool, w, x.data(), n, n_tokens, xq.data(), y.data(), n_rows);
                if (first.empty()) {
                    first = y;
                    first_set = set;
                    continue;
                }
                for (size_t i = 0; i < y.size(); ++i)
                    ASSERT_EQ(std::memcmp(&y[i], &first[i], sizeof(float)), 0)
                        << tensor_type_name(t) << (x16 ? " x16" : "") << ": " << set << " and "
                        << first_set << " differ at token " << i / n_rows << " row " << i % n_rows
                        << " (" << y[i] << " vs " << first[i] << ")";
            }
        }
}

// A batch gives each token the bits it gets alone (the decode GEMV, or vec_dot in the
// file's layout) where compute/matmul.h promises it (int8 panels of q4_0, q5_0 and q8_0
// in the x16 layout and of iq4_nl; the exact x16 GEMM of q2_K, q4_K and q6_K, AMX), with every
// kernel set: a restored prompt prefix continues as the fresh prompt would.
// (Measured while writing it: q4_K, q6_K, q2_K, q3_K, q5_K, q4_1 and q5_1 batches differ
// from one token in most results, and so do legacy weights left in the file's layout.)
TEST(Matmul, BatchesKeepEachTokensBitsWherePanelsPromiseIt) {
    KernelSetGuard guard;
    ThreadPool pool(2);
    const int64_t n = 512, n_rows = 48, n_tokens = 40;
    int checked = 0;
    for (const std::string& set : guard.sets()) {
        ASSERT_TRUE(select_kernel_set(set));
        for (TensorType t : {TensorType::Q4_0, TensorType::Q5_0, TensorType::Q8_0, TensorType::IQ4_NL,
                             TensorType::Q2_K, TensorType::Q4_K, TensorType::Q6_K})
            for (bool x16 : {false, true}) {
                if (x16 && !x16_layout(t)) continue;
                const std::vector<uint8_t> wd = random_tensor_data(t, n * n_rows, 900 + (uint64_t)t);
                TensorView w = matrix_view(t, n, n_rows, wd.data());
                std::vector<uint8_t> packed(wd.size());
                if (x16) {
                    if (!x16_pays(w)) continue;
                    w = repack_x16(&pool, w, packed.data());
                }
                const bool legacy = t != TensorType::Q2_K && t != TensorType::Q4_K && t != TensorType::Q6_K;
                if (takes_bf16(w, n_tokens)) continue;
                if (!legacy && x16 && set == "amx") {
                    EXPECT_TRUE(takes_exact_x16(w, n_tokens))
                        << tensor_type_name(t) << ": amx's exact x16 GEMM dropped (self-test?)";
                }
                if (legacy ? (!x16 && t != TensorType::IQ4_NL) : !takes_exact_x16(w, n_tokens)) continue;
                const std::vector<float> x = random_floats((size_t)(n * n_tokens), 950 + (uint64_t)t);
                std::vector<uint8_t> xq(activation_buffer_size(w, n_tokens, pool.size()));
                std::vector<float> batch((size_t)(n_rows * n_tokens)), one((size_t)n_rows);
                matmul(pool, w, x.data(), n, n_tokens, xq.data(), batch.data(), n_rows);
                int differ = 0;
                for (int64_t tok = 0; tok < n_tokens; ++tok) {
                    matmul(pool, w, x.data() + tok * n, n, 1, xq.data(), one.data(), n_rows);
                    for (int64_t r = 0; r < n_rows; ++r)
                        differ += std::memcmp(&one[(size_t)r], &batch[(size_t)(tok * n_rows + r)], 4) != 0;
                }
                EXPECT_EQ(differ, 0) << tensor_type_name(t) << (x16 ? " x16" : "") << " with " << set
                                     << ": results of the batch that differ from the token alone";
                ++checked;
            }
    }
    EXPECT_GT(checked, 0);
}

// Gate and up joined tile by tile (matmul_glu) give the bits of the two matmuls and the GLU
// applied to each row afterwards, with every kernel set, for x16 and plain weights and a
// last tile of tokens partly filled; and weights that differ in type are refused (false,
// nothing written), so the caller takes the separate path.
TEST(Matmul, JoinedGateAndUpEqualTheSeparateSteps) {
    KernelSetGuard guard;
    ThreadPool pool(2);
    const int64_t n = 512, n_rows = 48, n_tokens = 37;
    const std::vector<float> x = random_floats((size_t)(n * n_tokens), 700);
    int joined_runs = 0;
    for (const std::string& set : guard.sets()) {
        ASSERT_TRUE(select_kernel_set(set));
        for (TensorType t : {TensorType::Q5_0, TensorType::Q4_K, TensorType::Q6_K})
            for (bool x16 : {false, true})
                for (GluFn glu : {GluFn(swiglu), GluFn(geglu)}) {
                    const std::vector<uint8_t> gd = random_tensor_data(t, n * n_rows, 710),
                                               ud = random_tensor_data(t, n * n_rows, 711);
                    std::vector<uint8_t> gp(gd.size()), up_packed(ud.size());
                    TensorView wg, wu;
                    wg.type = wu.type = t;
                    wg.ne[0] = wu.ne[0] = n;
                    wg.ne[1] = wu.ne[1] = n_rows;
                    wg.data = gd.data();
                    wu.data = ud.data();
                    if (x16) {
                        wg = repack_x16(&pool, wg, gp.data());
                        wu = repack_x16(&pool, wu, up_packed.data());
                    }
                    std::vector<uint8_t> xq(activation_buffer_size(wg, n_tokens, pool.size()));
                    quantize_activations(pool, wg, x.data(), n, n_tokens, xq.data());
                    std::vector<float> want((size_t)(n_rows * n_tokens)), up(want.size());
                    matmul_quantized(pool, wg, xq.data(), n_tokens, want.data(), n_rows);
                    matmul_quantized(pool, wu, xq.data(), n_tokens, up.data(), n_rows);
                    for (int64_t r = 0; r < n_tokens; ++r)
                        glu(want.data() + r * n_rows, up.data() + r * n_rows, n_rows);
                    std::vector<float> got(want.size(), -1.0f);
                    if (!matmul_glu(pool, wg, wu, glu, xq.data(), n_tokens, got.data(), n_rows))
                        continue;  // this set has no panel GEMM for the batch
                    ++joined_runs;
                    for (size_t i = 0; i < got.size(); ++i)
                        ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
                            << set << " " << tensor_type_name(t) << (x16 ? " x16" : "")
                            << ": token " << i / n_rows << " row " << i % n_rows << " ("
                            << got[i] << " vs " << want[i] << ")";
                }
        // weights of two types: refused, nothing written
        const std::vector<uint8_t> a = random_tensor_data(TensorType::Q4_0, n * n_rows, 720),
                                   b = random_tensor_data(TensorType::Q8_0, n * n_rows, 721);
        TensorView wa, wb;
        wa.type = TensorType::Q4_0;
        wb.type = TensorType::Q8_0;
        wa.ne[0] = wb.ne[0] = n;
        wa.ne[1] = wb.ne[1] = n_rows;
        wa.data = a.data();
        wb.data = b.data();
        std::vector<uint8_t> xq(activation_buffer_size(wa, n_tokens, pool.size()));
        quantize_activations(pool, wa, x.data(), n, n_tokens, xq.data());
        std::vector<float> y((size_t)(n_rows * n_tokens), -1.0f);
        EXPECT_FALSE(matmul_glu(pool, wa, wb, swiglu, xq.data(), n_tokens, y.data(), n_rows)) << set;
        EXPECT_TRUE(std::all_of(y.begin(), y.end(), [](float v) { return v == -1.0f; })) << set;
    }
    // the panel GEMM sets here took the joined path at least once
    EXPECT_GT(joined_runs, 0);
}

// The Walsh-Hadamard turn: Sylvester's matrix scaled by 1/sqrt(n), applied per run of n;
// twice is the identity, and it keeps lengths and dot products.
TEST(Ops, HadamardIsSylvestersOrthonormalMatrix) {
    for (int n : {64, 128, 256}) {
        // H's rows: H[i][j] = (-1)^popcount(i & j) / sqrt(n)
        for (int j = 0; j < n; j += 37) {
            std::vector<float> e((size_t)n, 0.0f);
            e[(size_t)j] = 1.0f;
            hadamard(e.data(), n, n);  // column j of H
            for (int i = 0; i < n; ++i) {
                const float want = (__builtin_popcount((unsigned)(i & j)) % 2 ? -1.0f : 1.0f) / std::sqrt((float)n);
                ASSERT_NEAR(e[(size_t)i], want, 1e-6f) << n << " " << i << " " << j;
            }
        }
        std::vector<float> x = random_floats((size_t)(3 * n), 77 + n), y = random_floats((size_t)(3 * n), 78 + n);
        double dot0 = 0, dot1 = 0;
        for (size_t i = 0; i < x.size(); ++i) dot0 += (double)x[i] * y[i];
        std::vector<float> hx = x, hy = y;
        hadamard(hx.data(), (int64_t)hx.size(), n);
        hadamard(hy.data(), (int64_t)hy.size(), n);
        for (size_t i = 0; i < x.size(); ++i) dot1 += (double)hx[i] * hy[i];
        EXPECT_NEAR(dot1, dot0, 1e-4 * std::fabs(dot0) + 1e-4);
        hadamard(hx.data(), (int64_t)hx.size(), n);
        for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(hx[i], x[i], 1e-5f);
    }
}

// ======================================== attention =====================================

namespace {

struct AttnCase {
    TensorType kv_type;
    int head_dim;
    int n_threads;
    size_t row_pad;        // extra bytes per cache row beyond the n_head_kv * head_dim elements
    bool shuffled;         // cell_pos a permutation of 0..n_cells-1 instead of in order
    bool holes;            // some cells empty (cell_pos -1)
    size_t scratch_extra;  // scratch_per_thread passed larger than the minimum
    bool head_major = false;  // the model's layout: each KV head's cells contiguous
    std::optional<TensorType> v_type = std::nullopt;  // the values' type (default: kv_type)
};

struct AttnError {
    double vs_documented = 0.0;  // against the reference doing the documented roundings
    double vs_exact_q = 0.0;     // against plain attention with the float query
};

// A q8_0 V cache as codes and scales: code[c * row + i], scale[c * row / 32 + i / 32].
struct Q8Values {
    std::vector<int8_t> code;
    std::vector<float> scale;
};

// Full softmax attention in double over the dequantized cache. Cell c is visible to token
// t when 0 <= cell_pos[c] <= q_pos[t]. With round_p_f16 each probability is rounded to
// f16 before weighting V (what the engine documents for an F16 cache). With q8v (a q8_0 V
// cache) the weights are rounded as mad_rows_q8 documents (kernels.h), in chunks of cells
// 32 c .. 32 c + 31: a weight within float round-off of a rounding boundary may round
// either way in the engine, so *slack gets, per output, what such weights could move it.
void naive_attention(const std::vector<double>& q, int n_head, int n_head_kv, int hd, double scale,
                     const std::vector<int32_t>& q_pos, const std::vector<float>& K,
                     const std::vector<float>& V, const std::vector<int32_t>& cell_pos,
                     bool round_p_f16, std::vector<double>& out, const Q8Values* q8v = nullptr,
                     std::vector<double>* slack = nullptr) {
    const int64_t n_tokens = (int64_t)q_pos.size();
    const int64_t n_cells = (int64_t)cell_pos.size();
    const int row = n_head_kv * hd;
    const int group = n_head / n_head_kv;
    out.assign((size_t)(n_tokens * n_head * hd), 0.0);
    for (int64_t t = 0; t < n_tokens; ++t)
        for (int h = 0; h < n_head; ++h) {
            const int hk = h / group;
            const double* qv = &q[(size_t)((t * n_head + h) * hd)];
            std::vector<double> s((size_t)n_cells, -INFINITY);
            double mx = -INFINITY;
            for (int64_t c = 0; c < n_cells; ++c) {
                const int32_t cp = cell_pos[(size_t)c];
                if (cp < 0 || cp > q_pos[(size_t)t]) continue;
                double d = 0.0;
                for (int i = 0; i < hd; ++i) d += qv[i] * K[(size_t)(c * row + hk * hd + i)];
                s[(size_t)c] = d * scale;
                mx = std::max(mx, s[(size_t)c]);
            }
            double den = 0.0;
            for (int64_t c = 0; c < n_cells; ++c)
                if (s[(size_t)c] > -INFINITY) den += std::exp(s[(size_t)c] - mx);
            double* o = &out[(size_t)((t * n_head + h) * hd)];
            if (q8v) {
                double* sl = &(*slack)[(size_t)((t * n_head + h) * hd)];
                for (int64_t c0 = 0; c0 < n_cells; c0 += 32)
                    for (int b = 0; b < hd / 32; ++b) {
                        const int64_t c1 = std::min<int64_t>(n_cells, c0 + 32);
                        float w[32] = {}, dmax = 0.0f;
                        for (int64_t c = c0; c < c1; ++c)
                            if (s[(size_t)c] > -INFINITY) {
                                const float e = (float)std::exp(s[(size_t)c] - mx);
                                w[c - c0] = e * q8v->scale[(size_t)(c * row + hk * hd) / 32 + (size_t)b];
                                dmax = std::max(dmax, w[c - c0]);
                            }
                        if (!(dmax > 0.0f)) continue;
                        const float up = 127.0f / dmax, down = dmax / 127.0f;
                        for (int64_t c = c0; c < c1; ++c) {
                            const float x = w[c - c0] * up;
                            const double pc = std::min(std::nearbyint((double)x), 127.0);
                            const bool near_half = std::fabs(x - std::floor(x) - 0.5) < 2e-4;
                            for (int i = 0; i < 32; ++i) {
                                const int8_t qc = q8v->code[(size_t)(c * row + hk * hd + 32 * b + i)];
                                o[32 * b + i] += pc * qc * down / den;
                                if (near_half) sl[32 * b + i] += std::fabs((double)qc) * down / den;
                            }
                        }
                    }
                continue;
            }
            for (int64_t c = 0; c < n_cells; ++c) {
                if (!(s[(size_t)c] > -INFINITY)) continue;
                double p = std::exp(s[(size_t)c] - mx) / den;
                if (round_p_f16) p = fp16_to_f32(f32_to_fp16((float)p));
                for (int i = 0; i < hd; ++i) o[i] += p * V[(size_t)(c * row + hk * hd + i)];
            }
        }
}

// Budgets, as max |out - ref| over all outputs (values are ~N(0,1)):
// vs the documented-rounding reference (query rounded to f16 / q8_0, and for F16 the
//   probabilities rounded to f16): only float summation and exp differ. Measured
//   <= 9e-7 for both types; budget 1e-5 (Q8_0) and 1e-4 (F16: a probability next to an
//   f16 rounding boundary may round the other way, ~5e-4 * p).
// vs plain attention with the float query (what a user comparing with an exact model
//   sees): grows with the score spread q_std. Measured F16 1.1e-3 (q_std 1) / 2.6e-3
//   (q_std 3), Q8_0 1.2e-2 / 4.0e-2; budget 3e-3 * q_std (F16), 3e-2 * q_std (Q8_0).
// A causal mask off by one cell, a wrong KV head or a missing softmax rescale moves
// outputs by ~0.05..1.
// f16 cache: the probabilities are rounded to f16 (2^-11 relative), and a score that is
// off by one float ulp can round its probability the other way: one such flip moves an
// output by up to 2^-11 * p * |v| (p <= 1, |v| <= ~1 here), so the budget is 5e-4, not
// the float round-off of the sums.
double attn_budget_documented(TensorType kv) {
    return kv == TensorType::F16 ? 5e-4 : 1e-5;
}
double attn_budget_exact(TensorType kv, double q_std) {
    return (kv == TensorType::F16 ? 3e-3 : 3e-2) * q_std;
}

AttnError check_attention(const AttnCase& ac, const std::vector<int32_t>& q_pos, int64_t n_cells,
                          float q_std, uint64_t seed) {
    AttnError res;
    const int n_head = 8, n_head_kv = 2, hd = ac.head_dim;
    const int row = n_head_kv * hd;
    const int64_t n_tokens = (int64_t)q_pos.size();
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "%s head_dim=%d threads=%d row_pad=%zu shuffled=%d holes=%d scratch_extra=%zu "
                  "head_major=%d q_std=%g",
                  tensor_type_name(ac.kv_type), hd, ac.n_threads, ac.row_pad, (int)ac.shuffled,
                  (int)ac.holes, ac.scratch_extra, (int)ac.head_major, q_std);
    const std::string what = buf;

    // The cache, filled with the reference quantizer from random floats.
    const TensorType vt = ac.v_type.value_or(ac.kv_type);
    const TypeKernels& ref = reference_kernels(ac.kv_type);
    const TypeKernels& vref = reference_kernels(vt);
    const size_t row_bytes = row_size(ac.kv_type, row) + ac.row_pad;
    const size_t v_row_bytes = row_size(vt, row) + ac.row_pad;
    std::vector<uint8_t> kc(row_bytes * (size_t)n_cells, 0xEE),
        vc(v_row_bytes * (size_t)n_cells, 0xEE);
    const std::vector<float> kf = random_floats((size_t)(row * n_cells), seed);
    const std::vector<float> vf = random_floats((size_t)(row * n_cells), seed + 1);
    std::vector<float> K((size_t)(row * n_cells)), V((size_t)(row * n_cells));
    for (int64_t c = 0; c < n_cells; ++c) {
        ref.from_float(&kf[(size_t)(c * row)], &kc[(size_t)c * row_bytes], row);
        vref.from_float(&vf[(size_t)(c * row)], &vc[(size_t)c * v_row_bytes], row);
        ref.to_float(&kc[(size_t)c * row_bytes], &K[(size_t)(c * row)], row);
        vref.to_float(&vc[(size_t)c * v_row_bytes], &V[(size_t)(c * row)], row);
    }
    std::vector<int32_t> cell_pos((size_t)n_cells);
    for (int64_t c = 0; c < n_cells; ++c) cell_pos[(size_t)c] = (int32_t)c;
    if (ac.shuffled) {
        // permute cells together with their positions
        std::mt19937 rng((unsigned)seed);
        std::vector<int64_t> perm((size_t)n_cells);
        for (int64_t c = 0; c < n_cells; ++c) perm[(size_t)c] = c;
        std::shuffle(perm.begin(), perm.end(), rng);
        std::vector<uint8_t> kc2 = kc, vc2 = vc;
        std::vector<float> K2 = K, V2 = V;
        for (int64_t c = 0; c < n_cells; ++c) {
            const int64_t src = perm[(size_t)c];
            std::memcpy(&kc2[(size_t)c * row_bytes], &kc[(size_t)src * row_bytes], row_bytes);
            std::memcpy(&vc2[(size_t)c * v_row_bytes], &vc[(size_t)src * v_row_bytes], v_row_bytes);
            std::memcpy(&K2[(size_t)(c * row)], &K[(size_t)(src * row)], sizeof(float) * row);
            std::memcpy(&V2[(size_t)(c * row)], &V[(size_t)(src * row)], sizeof(float) * row);
            cell_pos[(size_t)c] = (int32_t)src;
        }
        kc.swap(kc2);
        vc.swap(vc2);
        K.swap(K2);
        V.swap(V2);
    }
    if (ac.holes)
        for (int64_t c = 0; c < n_cells; ++c)
            if (c % 5 == 3) cell_pos[(size_t)c] = -1;

    const std::vector<float> q = random_floats((size_t)(n_tokens * n_head * hd), seed + 2, q_std);
    // The query as the engine documents using it: rounded to the key's dot-product type.
    const TensorType qt = type_kernels(ac.kv_type).vec_dot_type;
    std::vector<double> q_exact(q.begin(), q.end()), q_rounded(q.size());
    {
        std::vector<uint8_t> tmp(row_size(qt, hd));
        std::vector<float> back((size_t)hd);
        for (int64_t j = 0; j < n_tokens * n_head; ++j) {
            reference_kernels(qt).from_float(&q[(size_t)(j * hd)], tmp.data(), hd);
            reference_kernels(qt).to_float(tmp.data(), back.data(), hd);
            for (int i = 0; i < hd; ++i) q_rounded[(size_t)(j * hd + i)] = back[(size_t)i];
        }
    }

    AttentionShape s;
    s.n_head = n_head;
    s.n_head_kv = n_head_kv;
    s.head_dim = hd;
    s.scale = 1.0f / std::sqrt((float)hd);

    ThreadPool pool(ac.n_threads);
    const size_t per_thread =
        attention_scratch_per_thread(s, ac.kv_type, n_cells) + ac.scratch_extra;
    const size_t scratch_bytes = per_thread * (size_t)pool.size();
    constexpr size_t kGuard = 128;
    std::vector<uint8_t> scratch(scratch_bytes + kGuard, 0x5A);
    std::vector<float> out((size_t)(n_tokens * n_head * hd),
                           std::numeric_limits<float>::quiet_NaN());
    KvLayerView kv{ac.kv_type, vt, kc.data(), vc.data(), row_bytes, v_row_bytes};
    std::vector<uint8_t> kh, vh;
    if (ac.head_major) {
        // The same cells regrouped per KV head, heads a padded block apart.
        const size_t hb = row_size(ac.kv_type, hd), stride = hb * (size_t)n_cells + 96;
        const size_t vhb = row_size(vt, hd), vstride = vhb * (size_t)n_cells + 96;
        kh.assign(stride * n_head_kv, 0xEE);
        vh.assign(vstride * n_head_kv, 0xEE);
        for (int h = 0; h < n_head_kv; ++h)
            for (int64_t c = 0; c < n_cells; ++c) {
                std::memcpy(&kh[stride * h + hb * (size_t)c], &kc[(size_t)c * row_bytes + hb * h], hb);
                std::memcpy(&vh[vstride * h + vhb * (size_t)c], &vc[(size_t)c * v_row_bytes + vhb * h], vhb);
            }
        kv = KvLayerView{ac.kv_type, vt, kh.data(), vh.data(), hb, vhb, stride, vstride};
    }
    attention(pool, s, q.data(), q_pos.data(), n_tokens, kv, cell_pos.data(), n_cells, out.data(),
              scratch.data(), per_thread);
    for (size_t i = scratch_bytes; i < scratch.size(); ++i)
        if (scratch[i] != 0x5A) {
            ADD_FAILURE() << what << ": scratch overrun at byte " << i << " of " << scratch_bytes;
            break;
        }

    std::vector<double> ref_d, ref_e, slack((size_t)(n_tokens * n_head * hd), 0.0);
    // q8_0 values: weighted in integers (kernels.h, mad_rows_q8) by every kernel set
    Q8Values q8v;
    if (vt == TensorType::Q8_0) {
        q8v.code.resize((size_t)(row * n_cells));
        q8v.scale.resize((size_t)(row * n_cells) / 32);
        for (int64_t c = 0; c < n_cells; ++c)
            for (int b = 0; b < row / 32; ++b) {
                const block_q8_0* blk = (const block_q8_0*)&vc[(size_t)c * v_row_bytes] + b;
                q8v.scale[(size_t)(c * row / 32 + b)] = fp16_to_f32(blk->d);
                std::memcpy(&q8v.code[(size_t)(c * row + 32 * b)], blk->qs, 32);
            }
    }
    naive_attention(q_rounded, n_head, n_head_kv, hd, s.scale, q_pos, K, V, cell_pos,
                    ac.kv_type == TensorType::F16 && vt == TensorType::F16, ref_d,
                    vt == TensorType::Q8_0 ? &q8v : nullptr, &slack);
    naive_attention(q_exact, n_head, n_head_kv, hd, s.scale, q_pos, K, V, cell_pos, false, ref_e);

    for (int64_t t = 0; t < n_tokens; ++t)
        for (int h = 0; h < n_head; ++h)
            for (int i = 0; i < hd; ++i) {
                const size_t k = (size_t)((t * n_head + h) * hd + i);
                if (!std::isfinite(out[k])) {
                    ADD_FAILURE() << what << ": out[t=" << t << "][h=" << h << "][" << i
                                  << "] = " << out[k];
                    return res;
                }
                // (beyond what weights next to a rounding boundary may move it)
                res.vs_documented =
                    std::max(res.vs_documented, std::max(0.0, std::fabs(out[k] - ref_d[k]) - slack[k]));
                res.vs_exact_q = std::max(res.vs_exact_q, std::fabs(out[k] - ref_e[k]));
            }
    const double budget_d = attn_budget_documented(ac.kv_type);
    const double budget_e = attn_budget_exact(ac.kv_type, q_std);
    EXPECT_LE(res.vs_documented, budget_d) << what;
    EXPECT_LE(res.vs_exact_q, budget_e) << what;
    if (res.vs_documented > budget_d) {
        // say which query was off
        for (int64_t t = 0; t < n_tokens; ++t)
            for (int h = 0; h < n_head; ++h)
                for (int i = 0; i < hd; ++i) {
                    const size_t k = (size_t)((t * n_head + h) * hd + i);
                    if (std::fabs(out[k] - ref_d[k]) - slack[k] > budget_d) {
                        ADD_FAILURE() << what << ": first bad element token " << t << " (pos "
                                      << q_pos[(size_t)t] << ") head " << h << " i " << i
                                      << ": got " << out[k] << ", want " << ref_d[k];
                        return res;
                    }
                }
    }
    return res;
}

}  // namespace

TEST(Attention, MatchesNaiveFullSoftmax) {
    // GQA 8 query heads over 2 KV heads, 19 cells at positions 0..18. Budgets and
    // measurements: see attn_budget_documented / attn_budget_exact.
    const int64_t n_cells = 19;
    // positions: the last cell, earlier cells (masked tail), 0 (only cell 0), and past the end
    const std::vector<int32_t> q_pos = {18, 0, 7, 3, 12, 17, 1, 100};
    KernelSetGuard guard;
    for (const std::string& set : guard.sets()) {
        ASSERT_TRUE(select_kernel_set(set)) << set;
        uint64_t seed = 40000;
        for (TensorType kvt : {TensorType::F32, TensorType::F16, TensorType::BF16, TensorType::Q8_0,
                               TensorType::Q4_0, TensorType::Q4_1, TensorType::IQ4_NL,
                               TensorType::Q5_0, TensorType::Q5_1})
            for (int hd : {32, 64})
                for (float q_std : {1.0f, 3.0f}) {
                    const AttnCase ac{kvt, hd, 2, 0, false, false, 0};
                    const AttnError e = check_attention(ac, q_pos, n_cells, q_std, seed += 10);
                    std::printf(
                        "[ attention %-4s ] %-4s head_dim %d q_std %g: max err vs "
                        "documented-rounding ref %.3g (budget %.0e), vs float-q ref %.3g "
                        "(budget %.1e)\n",
                        set.c_str(), tensor_type_name(kvt), hd, q_std, e.vs_documented,
                        attn_budget_documented(kvt), e.vs_exact_q, attn_budget_exact(kvt, q_std));
                }
    }
}

TEST(Attention, ThreadCountsPaddedRowsUnorderedAndEmptyCells) {
    const std::vector<int32_t> q_pos = {5, 30, 0, 11, 2};
    uint64_t seed = 50000;
    for (TensorType kvt : {TensorType::F16, TensorType::Q8_0})
        for (int hd : {32, 64}) {
            check_attention({kvt, hd, 1, 0, false, false, 0}, q_pos, 31, 1.5f, seed += 10);
            check_attention({kvt, hd, 3, 0, false, false, 0}, q_pos, 31, 1.5f, seed += 10);
            check_attention({kvt, hd, 2, 64, false, false, 0}, q_pos, 31, 1.5f, seed += 10);
            check_attention({kvt, hd, 2, 0, true, false, 0}, q_pos, 31, 1.5f, seed += 10);
            check_attention({kvt, hd, 2, 0, false, true, 0}, q_pos, 31, 1.5f, seed += 10);
            check_attention({kvt, hd, 2, 0, true, true, 0}, q_pos, 31, 1.5f, seed += 10);
            check_attention({kvt, hd, 3, 0, false, false, 256}, q_pos, 31, 1.5f, seed += 10);
            check_attention({kvt, hd, 2, 0, false, false, 0, true}, q_pos, 31, 1.5f, seed += 10);
            check_attention({kvt, hd, 2, 0, true, true, 0, true}, q_pos, 31, 1.5f, seed += 10);
        }
}

// Spans longer than a block of keys (q8_0 keys and values go 128 cells at a time, each
// row's softmax kept online): against the documented-rounding reference across three
// blocks, for tokens at and around the blocks' edges, in order, shuffled and with holes.
TEST(Attention, LongSpansAcrossKeyBlocks) {
    const std::vector<int32_t> q_pos = {299, 127, 128, 0, 200, 255, 256, 150, 31, 298, 64};
    KernelSetGuard guard;
    for (const std::string& set : guard.sets()) {
        ASSERT_TRUE(select_kernel_set(set)) << set;
        uint64_t seed = 56000;
        for (int hd : {32, 64})
            for (float q_std : {1.5f, 3.0f}) {
                check_attention({TensorType::Q8_0, hd, 2, 0, false, false, 0, true}, q_pos, 300,
                                q_std, seed += 10);
                check_attention({TensorType::Q8_0, hd, 2, 0, true, true, 0, true}, q_pos, 300,
                                q_std, seed += 10);
            }
    }
}

// A token gets the same bits alone as among a block of prompt tokens: speculative
// decoding checks a draft's batch against single steps.
TEST(Attention, ATokenAloneGetsItsBatchsBits) {
    KernelSetGuard guard;
    for (const std::string& set : guard.sets()) {
        ASSERT_TRUE(select_kernel_set(set)) << set;
        for (TensorType kvt : {TensorType::F16, TensorType::Q8_0})
        for (int32_t window : {0, 100}) {  // a window starts tokens' spans at different cells
            const int n_head = 14, n_head_kv = 2, hd = 64, row = n_head_kv * hd;
            const int64_t n_cells = 300;
            const TypeKernels& ref = reference_kernels(kvt);
            const size_t rb = row_size(kvt, row);
            std::vector<uint8_t> kc(rb * n_cells), vc(rb * n_cells);
            const std::vector<float> kf = random_floats((size_t)(row * n_cells), 81, 2.0f);
            const std::vector<float> vf = random_floats((size_t)(row * n_cells), 82);
            for (int64_t c = 0; c < n_cells; ++c) {
                ref.from_float(&kf[(size_t)(c * row)], &kc[c * rb], row);
                ref.from_float(&vf[(size_t)(c * row)], &vc[c * rb], row);
            }
            std::vector<int32_t> cell_pos((size_t)n_cells);
            for (int64_t c = 0; c < n_cells; ++c) cell_pos[(size_t)c] = (int32_t)c;
            std::vector<int32_t> q_pos;
            for (int32_t p = 120; p < 136; ++p) q_pos.push_back(p);
            for (int32_t p = 288; p < 300; ++p) q_pos.push_back(p);
            const int64_t n_tokens = (int64_t)q_pos.size();
            const std::vector<float> q = random_floats((size_t)(n_tokens * n_head * hd), 83, 3.0f);
            AttentionShape s{n_head, n_head_kv, hd, 1.0f / std::sqrt((float)hd), window};
            ThreadPool pool(2);
            const size_t per_thread = attention_scratch_per_thread(s, kvt, n_cells);
            std::vector<uint8_t> scratch(per_thread * pool.size());
            const KvLayerView kv = KvLayerView::same(kvt, kc.data(), vc.data(), rb);
            std::vector<float> batch((size_t)(n_tokens * n_head * hd)), one((size_t)(n_head * hd));
            attention(pool, s, q.data(), q_pos.data(), n_tokens, kv, cell_pos.data(), n_cells,
                      batch.data(), scratch.data(), per_thread);
            for (int64_t t = 0; t < n_tokens; ++t) {
                attention(pool, s, q.data() + t * n_head * hd, &q_pos[(size_t)t], 1, kv,
                          cell_pos.data(), n_cells, one.data(), scratch.data(), per_thread);
                EXPECT_EQ(std::memcmp(one.data(), batch.data() + t * n_head * hd,
                                      sizeof(float) * one.size()),
                          0)
                    << set << " " << tensor_type_name(kvt) << " window " << window << " position "
                    << q_pos[(size_t)t];
            }
        }
    }
}

// Keys and values of different types (llama.cpp's -ctk / -ctv): each read with its own kernels.
TEST(Attention, KeysAndValuesOfDifferentTypes) {
    const std::vector<int32_t> q_pos = {5, 30, 0, 11, 2};
    uint64_t seed = 52000;
    using T = TensorType;
    for (auto [k, v] : std::vector<std::pair<T, T>>{{T::Q8_0, T::F16}, {T::F16, T::Q4_0},
                                                    {T::Q4_1, T::Q5_0}, {T::IQ4_NL, T::Q8_0},
                                                    {T::BF16, T::Q5_1}, {T::F32, T::F16}}) {
        AttnCase ac{k, 64, 2, 0, false, true, 0, true};
        ac.v_type = v;
        const AttnError e = check_attention(ac, q_pos, 31, 1.5f, seed += 10);
        EXPECT_LE(e.vs_documented, 1e-5) << tensor_type_name(k) << "/" << tensor_type_name(v);
    }
}

TEST(Attention, QuerySeeingOnlyCellZeroReturnsItsValues) {
    for (TensorType kvt : {TensorType::F16, TensorType::Q8_0})
        for (int hd : {32, 64}) {
            const int n_head = 8, n_head_kv = 2, row = n_head_kv * hd;
            const int64_t n_cells = 6;
            const TypeKernels& ref = reference_kernels(kvt);
            const size_t rb = row_size(kvt, row);
            std::vector<uint8_t> kc(rb * n_cells), vc(rb * n_cells);
            const std::vector<float> kf = random_floats((size_t)(row * n_cells), 61);
            const std::vector<float> vf = random_floats((size_t)(row * n_cells), 62);
            for (int64_t c = 0; c < n_cells; ++c) {
                ref.from_float(&kf[(size_t)(c * row)], &kc[c * rb], row);
                ref.from_float(&vf[(size_t)(c * row)], &vc[c * rb], row);
            }
            std::vector<float> v0((size_t)row);
            ref.to_float(vc.data(), v0.data(), row);
            const std::vector<int32_t> cell_pos = {0, 1, 2, 3, 4, 5};
            const std::vector<int32_t> q_pos = {0, 0};
            // large queries: a sharp softmax would pull strongly towards other cells were
            // they (wrongly) visible
            const std::vector<float> q = random_floats((size_t)(2 * n_head * hd), 63, 10.0f);
            AttentionShape s{n_head, n_head_kv, hd, 1.0f / std::sqrt((float)hd)};
            ThreadPool pool(2);
            const size_t per_thread = attention_scratch_per_thread(s, kvt, n_cells);
            std::vector<uint8_t> scratch(per_thread * pool.size());
            std::vector<float> out((size_t)(2 * n_head * hd), -1.0f);
            attention(pool, s, q.data(), q_pos.data(), 2, KvLayerView::same(kvt, kc.data(), vc.data(), rb),
                      cell_pos.data(), n_cells, out.data(), scratch.data(), per_thread);
            for (int t = 0; t < 2; ++t)
                for (int h = 0; h < n_head; ++h) {
                    const int hk = h / (n_head / n_head_kv);
                    for (int i = 0; i < hd; ++i) {
                        const float want = v0[(size_t)(hk * hd + i)];
                        const float got = out[(size_t)((t * n_head + h) * hd + i)];
                        ASSERT_NEAR(got, want, 1e-6f * std::fabs(want))
                            << tensor_type_name(kvt) << " head_dim " << hd << " token " << t
                            << " head " << h << " i " << i;
                    }
                }
        }
}

// The bf16 GEMM (amx-bf16) through the matmul, for every weight type it takes, the file's
// layout and the repacked one, batches with a partial tile of tokens and an odd number of
// panels: each result is the sum of the products of the bf16-rounded weights (the type's
// own dequantization) and activations, within 1e-5 of the sum of their magnitudes (the
// tile unit's own order of additions), and both threads give the same bits.
TEST(Matmul, Bf16GemmIsTheRoundedProducts) {
    KernelSetGuard guard;
    if (guard.sets().back() != "amx-bf16")
        GTEST_SKIP() << "no amx-bf16 kernel set here (AMX-BF16 and AVX512-BF16): sets up to "
                     << guard.sets().back();
    ASSERT_TRUE(select_kernel_set("amx-bf16"));
    auto bf = [](float f) {
        const uint16_t h = bf16_round(f);
        const uint32_t b = (uint32_t)h << 16;
        float o;
        std::memcpy(&o, &b, 4);
        return (double)o;
    };
    int checked = 0;
    for (TensorType t : {TensorType::Q4_0, TensorType::Q5_0, TensorType::Q8_0, TensorType::Q2_K,
                         TensorType::Q4_K, TensorType::Q6_K}) {
        const int64_t n = 512, n_rows = 48, n_tokens = 300;
        std::vector<uint8_t> wq = random_tensor_data(t, n * n_rows, 700 + (uint64_t)t);
        std::vector<uint8_t> packed(wq.size());
        std::vector<float> deq((size_t)(n * n_rows));
        for (int64_t r = 0; r < n_rows; ++r)
            type_kernels(t).to_float(wq.data() + (size_t)r * row_size(t, n), deq.data() + r * n, n);
        const std::vector<float> x = random_floats((size_t)(n * n_tokens), 800 + (uint64_t)t);
        for (bool x16 : {false, true}) {
            TensorView w = matrix_view(t, n, n_rows, wq.data());
            ThreadPool one(1), two(2);
            if (x16) {
                if (!x16_pays(w)) continue;
                w = repack_x16(&one, w, packed.data());
            }
            ASSERT_TRUE(takes_bf16(w, n_tokens)) << tensor_type_name(t) << " x16 " << x16;
            std::vector<float> y1((size_t)(n_rows * n_tokens)), y2(y1.size());
            for (auto [pool, y] : {std::pair{&one, &y1}, std::pair{&two, &y2}}) {
                std::vector<uint8_t> xq(activation_buffer_size(w, n_tokens, pool->size()));
                matmul(*pool, w, x.data(), n, n_tokens, xq.data(), y->data(), n_rows);
            }
            EXPECT_EQ(y1, y2) << tensor_type_name(t) << ": the threads' split changed bits";
            for (int64_t tok = 0; tok < n_tokens; tok += 13)
                for (int64_t r = 0; r < n_rows; ++r) {
                    double exact = 0.0, mag = 0.0;
                    for (int64_t i = 0; i < n; ++i) {
                        const double p = bf(deq[(size_t)(r * n + i)]) * bf(x[(size_t)(tok * n + i)]);
                        exact += p;
                        mag += std::fabs(p);
                    }
                    const double got = y1[(size_t)(tok * n_rows + r)];
                    ASSERT_LE(std::fabs(got - exact), 1e-5 * mag)
                        << tensor_type_name(t) << " x16 " << x16 << " token " << tok << " row " << r;
                }
            ++checked;
        }
    }
    EXPECT_GE(checked, 6);
}

// Cells that hold consecutive positions in order (from any first position) have each
// token's visible cells found as a range, without a scan: the same bits as the scan gives
// (the same cells with one empty cell after them, which turns the range off), with and
// without a sliding window, for tokens that see all, some or none of the cells.
TEST(Attention, CellsInOrderGiveTheScansBits) {
    for (TensorType kvt : {TensorType::F16, TensorType::Q8_0})
        for (int64_t window : {int64_t(0), int64_t(5)}) {
            const int n_head = 4, n_head_kv = 2, hd = 32, row = n_head_kv * hd;
            const int64_t n_cells = 40, base = 100;
            const TypeKernels& ref = reference_kernels(kvt);
            const size_t rb = row_size(kvt, row);
            std::vector<uint8_t> kc(rb * (n_cells + 1)), vc(rb * (n_cells + 1));
            const std::vector<float> kf = random_floats((size_t)(row * (n_cells + 1)), 71);
            const std::vector<float> vf = random_floats((size_t)(row * (n_cells + 1)), 72);
            for (int64_t c = 0; c <= n_cells; ++c) {
                ref.from_float(&kf[(size_t)(c * row)], &kc[c * rb], row);
                ref.from_float(&vf[(size_t)(c * row)], &vc[c * rb], row);
            }
            std::vector<int32_t> cell_pos((size_t)n_cells + 1);
            for (int64_t c = 0; c < n_cells; ++c) cell_pos[(size_t)c] = (int32_t)(base + c);
            cell_pos[(size_t)n_cells] = -1;
            // before the first cell, at it, inside, at the last one, past it
            const std::vector<int32_t> q_pos = {90, 100, 101, 117, 120, 123, 139, 150};
            const int64_t n_tokens = (int64_t)q_pos.size();
            const std::vector<float> q = random_floats((size_t)(n_tokens * n_head * hd), 73);
            AttentionShape s{n_head, n_head_kv, hd, 1.0f / std::sqrt((float)hd), window};
            ThreadPool pool(2);
            const size_t per_thread = attention_scratch_per_thread(s, kvt, n_cells + 1);
            std::vector<uint8_t> scratch(per_thread * pool.size());
            std::vector<float> ranged((size_t)(n_tokens * n_head * hd), -1.0f), scanned = ranged;
            const KvLayerView kv = KvLayerView::same(kvt, kc.data(), vc.data(), rb);
            attention(pool, s, q.data(), q_pos.data(), n_tokens, kv, cell_pos.data(), n_cells,
                      ranged.data(), scratch.data(), per_thread);
            attention(pool, s, q.data(), q_pos.data(), n_tokens, kv, cell_pos.data(), n_cells + 1,
                      scanned.data(), scratch.data(), per_thread);
            EXPECT_EQ(ranged, scanned) << tensor_type_name(kvt) << " window " << window;
            // a token that sees cells got their values' mix, not the -1 written before
            EXPECT_NE(ranged[(size_t)(3 * n_head * hd)], -1.0f);
        }
}

// The vectorized transform gives the plain butterfly loop's bits (the KV cache's rotated
// values must not depend on the CPU), for every size from 8 up and the scalar sizes below.
TEST(Ops, HadamardIsTheButterflyLoopBitForBit) {
    for (int n : {2, 4, 8, 16, 32, 64, 128, 256}) {
        const int64_t len = 3 * (int64_t)n;
        const std::vector<float> x = random_floats((size_t)len, 900 + (uint64_t)n, 3.0f);
        std::vector<float> want = x, got = x;
        const float norm = 1.0f / std::sqrt((float)n);
        for (int64_t at = 0; at < len; at += n) {
            float* v = want.data() + at;
            for (int h = 1; h < n; h *= 2)
                for (int i = 0; i < n; i += 2 * h)
                    for (int j = i; j < i + h; ++j) {
                        const float a = v[j], b = v[j + h];
                        v[j] = a + b;
                        v[j + h] = a - b;
                    }
            for (int i = 0; i < n; ++i) v[i] *= norm;
        }
        hadamard(got.data(), len, n);
        EXPECT_EQ(std::memcmp(want.data(), got.data(), sizeof(float) * (size_t)len), 0) << "n " << n;
    }
}
