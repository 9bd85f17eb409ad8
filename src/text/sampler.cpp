// The sampler chain (see include/edgellm/sampler.h and src/text/sampler_chain.h). Each
// stage is a small class over a few functions. The first ones work on a dense row of
// logits, the rest on a list of candidates; both buffers are sized n_vocab at construction:
//
//   stage        works on                                                       cost
//   copy         logits -> row[n_vocab], NaN read as -inf                        O(n_vocab)
//   penalties    row, only the distinct tokens in the window                     O(window)
//   (greedy)     argmax of the row                                               O(n_vocab)
//   top_k        row -> the k best candidates {id, logit} (heap or nth_element)  O(n_vocab)
//     or all     row -> every token as a candidate                               O(n_vocab)
//   top_p        weights, a band histogram pre-cut, a quickselect on mass        O(n) expected
//   min_p        keep logit >= max logit + log(min_p)                            O(n)
//   temperature  logit /= T
//   draw         softmax weights, one uniform draw on the cumulative             O(n)
//
// The row is a plain float array because memory traffic, not arithmetic, is the cost at
// n_vocab ~ 152k-262k: with top-k on, the candidate list only ever holds k entries.
// Candidates are never sorted in full. Every selection uses one total order (higher logit
// first, lower id on ties), so the result does not depend on the order the list is in, and
// the random stream is std::mt19937_64 (fully specified by the standard) read as 53-bit
// uniform doubles: one seed gives one token sequence for one input on one build.
#include "edgellm/sampler.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "edgellm/error.h"
#include "text/chat/thinking.h"
#include "text/sampler_chain.h"

namespace edgellm {
namespace {

using sampling::TokenData;
using sampling::Work;
using sampling::Rng;

constexpr float kInf = std::numeric_limits<float>::infinity();
// The penalty window is a ring buffer allocated up front; longer windows act as this one.
constexpr int32_t kMaxPenaltyWindow = 1 << 20;
// top_k keeps a heap up to this k, above it uses nth_element; the heap scan looks at the
// row in blocks of kTopKBlock logits.
constexpr size_t kHeapTopKMax = 1024;
constexpr size_t kTopKBlock = 64;
// top_p pre-cuts candidate lists this long by bands of logit below the best: 64 bands of
// 1/4 (a power of 2, so band edges are exact), so the cut happens when the top-p set lies
// within 16 of the best logit.
constexpr size_t kTopPBandsFrom = 4096;
constexpr size_t kTopPBands = 64;
constexpr float kTopPBandsPerLogit = 4.0f;
// top_p's quickselect sorts a range once it is this small, or after this many rounds
// (a guard against quadratic pivots).
constexpr size_t kSortBelow = 16;
constexpr int kMaxSelectRounds = 64;

// The total order every stage ranks by: higher logit first, lower id on ties.
inline bool ranks_before(const TokenData& a, const TokenData& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// The tokens still in the running: data[0, size), in no particular order. Logits are never
// NaN; they may be +-inf (a -inf token has weight 0 and ranks last).
struct Candidates {
    TokenData* data;
    size_t size;
};

// Penalty history: how often each token occurs among the last repeat_last_n accepted tokens
// (all of them when repeat_last_n = -1), and the list of the distinct ones, so applying
// the penalties costs O(distinct tokens), not O(n_vocab).
struct PenaltyHistory {
    std::vector<int32_t> counts;    // [n_vocab] occurrences in the window
    std::vector<int32_t> distinct;  // [n_vocab] capacity; [0, n_distinct): ids with counts > 0
    std::vector<int32_t> slot;      // [n_vocab] slot[id] = index of id in `distinct`
    size_t n_distinct = 0;
    std::vector<int32_t> window;  // [repeat_last_n] ring of the window, when bounded
    size_t window_next = 0;
    size_t window_size = 0;

    void add(int32_t t) {
        if (counts[(size_t)t]++ > 0) return;
        slot[(size_t)t] = (int32_t)n_distinct;
        distinct[n_distinct++] = t;
    }
    void remove(int32_t t) {
        if (--counts[(size_t)t] > 0) return;
        const int32_t moved = distinct[--n_distinct];  // fill the hole with the last one
        distinct[(size_t)slot[(size_t)t]] = moved;
        slot[(size_t)moved] = slot[(size_t)t];
    }
    void push(int32_t t) {
        if (window.empty()) return add(t);  // unbounded
        if (window_size == window.size()) {
            remove(window[window_next]);  // the oldest leaves the window
        } else {
            ++window_size;
        }
        window[window_next] = t;
        add(t);
        window_next = (window_next + 1) % window.size();
    }
    void clear() {
        for (size_t i = 0; i < n_distinct; ++i) counts[(size_t)distinct[i]] = 0;
        n_distinct = 0;
        window_next = 0;
        window_size = 0;
    }
};

// ---- stages on the dense row ------------------------------------------------------------

// The largest of x[0, n) (-inf for none). Eight running maxima: not one long dependency
// chain, and the compiler turns each group of four into one vector max (without fast-math
// it vectorises no plain float max reduction).
float max_of(const float* x, size_t n) {
    float m[8] = {-kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf};
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        for (size_t j = 0; j < 8; ++j) m[j] = x[i + j] > m[j] ? x[i + j] : m[j];
    }
    for (; i < n; ++i) m[0] = x[i] > m[0] ? x[i] : m[0];
    for (size_t j = 1; j < 8; ++j) m[0] = m[j] > m[0] ? m[j] : m[0];
    return m[0];
}

// row = logits with NaN read as -inf. Returns false when no logit is above -inf.
bool copy_logits(std::span<const float> logits, float* row) {
    for (size_t i = 0; i < logits.size(); ++i) {
        const float x = logits[i];
        row[i] = x == x ? x : -kInf;
    }
    return max_of(row, logits.size()) > -kInf;
}

// CTRL repetition penalty with llama.cpp's sign fix (divide a positive logit, multiply a
// negative one), then the OpenAI frequency and presence penalties, as llama.cpp applies
// them (llama_sampler_penalties_apply).
void apply_penalties(float* row, const PenaltyHistory& h, const SamplerParams& sp) {
    for (size_t i = 0; i < h.n_distinct; ++i) {
        const int32_t t = h.distinct[i];
        float& l = row[(size_t)t];
        l = l > 0.0f ? l / sp.repeat_penalty : l * sp.repeat_penalty;
        l -= (float)h.counts[(size_t)t] * sp.frequency_penalty + sp.presence_penalty;
        if (std::isnan(l)) l = -kInf;  // inf - inf, with absurd penalties
    }
}

// The lowest id among the largest logits: a vectorisable max, then the first match.
int32_t argmax(const float* row, size_t n) {
    const float max = max_of(row, n);
    size_t i = 0;
    while (i + 1 < n && row[i] != max) ++i;
    return (int32_t)i;
}

Candidates all_candidates(const float* row, size_t n, TokenData* out) {
    for (size_t i = 0; i < n; ++i) out[i] = {(int32_t)i, row[i], 0.0f};
    return {out, n};
}

// The k best-ranked tokens of the row, unordered. PRECONDITION: 0 < k < n.
// A small k keeps a heap of the best k so far (worst on top) and compares each logit with
// the current k-th best: one pass over floats, about k * ln(n / k) replacements on input in
// random order. A large k uses nth_element on the full list.
Candidates top_k_candidates(const float* row, size_t n, size_t k, TokenData* out) {
    if (k > kHeapTopKMax) {
        all_candidates(row, n, out);
        std::nth_element(out, out + (k - 1), out + n, ranks_before);
        return {out, k};
    }
    for (size_t i = 0; i < k; ++i) out[i] = {(int32_t)i, row[i], 0.0f};
    std::make_heap(out, out + k, ranks_before);  // "largest" under ranks_before = worst
    float worst = out[0].logit;
    for (size_t i = k; i < n;) {
        // Skip whole blocks that cannot enter (the vectorised max is cheaper than a branch
        // per token).
        const size_t block = std::min(kTopKBlock, n - i);
        if (!(max_of(row + i, block) > worst)) {
            i += block;
            continue;
        }
        for (const size_t end = i + block; i < end; ++i) {
            // The heap holds lower ids only, so an equal logit never displaces its worst.
            if (!(row[i] > worst)) continue;
            std::pop_heap(out, out + k, ranks_before);
            out[k - 1] = {(int32_t)i, row[i], 0.0f};
            std::push_heap(out, out + k, ranks_before);
            worst = out[0].logit;
        }
    }
    return {out, k};
}

// ---- stages on the candidate list ---------------------------------------------------------

// The largest logit (-inf for none). Four running maxima, so the loop is not one long
// dependency chain.
float max_logit(const Candidates& c) {
    float m[4] = {-kInf, -kInf, -kInf, -kInf};
    size_t i = 0;
    for (; i + 4 <= c.size; i += 4) {
        for (size_t j = 0; j < 4; ++j) m[j] = std::max(m[j], c.data[i + j].logit);
    }
    for (; i < c.size; ++i) m[0] = std::max(m[0], c.data[i].logit);
    return std::max(std::max(m[0], m[1]), std::max(m[2], m[3]));
}

// p = exp(logit - max logit), unnormalised; returns their sum (>= 1) and the max. A +inf
// logit takes all the weight (shared among equals); if every logit is -inf they share it
// evenly.
double exp_weights(Candidates& c, float* max_out = nullptr) {
    const float max = max_logit(c);
    if (max_out) *max_out = max;
    if (std::isinf(max)) {
        double sum = 0.0;
        for (size_t i = 0; i < c.size; ++i) {
            c.data[i].p = c.data[i].logit == max ? 1.0f : 0.0f;
            sum += c.data[i].p;
        }
        return sum;
    }
    double sum[4] = {0.0, 0.0, 0.0, 0.0};
    size_t i = 0;
    for (; i + 4 <= c.size; i += 4) {
        for (size_t j = 0; j < 4; ++j) {
            TokenData& t = c.data[i + j];
            t.p = std::exp(t.logit - max);
            sum[j] += t.p;
        }
    }
    for (; i < c.size; ++i) {
        c.data[i].p = std::exp(c.data[i].logit - max);
        sum[0] += c.data[i].p;
    }
    return (sum[0] + sum[1]) + (sum[2] + sum[3]);
}

// A linear pre-cut for top-p over many candidates. Sums the weight per band of logit below
// the best (kTopPBandsPerLogit bands per unit, kTopPBands of them); if the cumulative
// weight reaches `target` within them, moves the candidates of the bands up to that one to
// the front and returns their count: a prefix of the ranking that reaches the target, so
// the quickselect need only look at it. Else returns c.size.
// PRECONDITION: .p holds weights (exp_weights); max = the largest logit, finite.
size_t keep_top_bands(Candidates& c, float max, double target) {
    constexpr float kReach = (float)kTopPBands / kTopPBandsPerLogit;
    std::array<double, kTopPBands> weight{};
    for (size_t i = 0; i < c.size; ++i) {
        const float below = max - c.data[i].logit;  // >= 0, +inf for -inf
        if (below < kReach) weight[(size_t)(below * kTopPBandsPerLogit)] += c.data[i].p;
    }
    size_t last = 0;
    for (double cum = 0.0; last < kTopPBands; ++last) {
        cum += weight[last];
        if (cum >= target) break;
    }
    if (last == kTopPBands) return c.size;
    // Band index <= last  <=>  below < (last + 1) / kTopPBandsPerLogit (exact: a power of 2).
    const float limit = (float)(last + 1) / kTopPBandsPerLogit;
    size_t n = 0;
    for (size_t i = 0; i < c.size; ++i) {
        if (max - c.data[i].logit < limit) std::swap(c.data[n++], c.data[i]);
    }
    return n;
}

// PRECONDITION: d[0, n) hold weights in .p, n >= 1, target > 0.
// Moves the m best-ranked candidates to d[0, m) for the smallest m whose weights sum to
// >= target, and returns m (n when the whole set falls short). A quickselect that descends
// into the side where the cumulative weight crosses the target: expected O(n), and only
// the last small range is sorted.
size_t select_top_mass(TokenData* d, size_t n, double target) {
    // Invariant: d[0, lo) rank before d[lo, hi), which rank before d[hi, n);
    // mass_lo = weight of d[0, lo) < target; d[0, hi) reaches the target, or hi == n.
    size_t lo = 0, hi = n;
    double mass_lo = 0.0;
    for (int round = 0; hi - lo > kSortBelow && round < kMaxSelectRounds; ++round) {
        // Median of three as the pivot, parked at hi - 1.
        TokenData* a = d + lo;
        TokenData* m = d + lo + (hi - lo) / 2;
        TokenData* b = d + hi - 1;
        if (ranks_before(*m, *a)) std::swap(*m, *a);
        if (ranks_before(*b, *a)) std::swap(*b, *a);
        if (ranks_before(*b, *m)) std::swap(*b, *m);
        std::swap(*m, *b);
        const TokenData pivot = *b;
        size_t store = lo;
        double mass = 0.0;  // of the candidates ranked before the pivot
        for (size_t i = lo; i < hi - 1; ++i) {
            if (ranks_before(d[i], pivot)) {
                mass += d[i].p;
                std::swap(d[i], d[store++]);
            }
        }
        std::swap(d[store], d[hi - 1]);  // the pivot lands between the two sides
        if (mass_lo + mass >= target) {
            hi = store;
        } else {
            mass_lo += mass + d[store].p;
            if (mass_lo >= target) return store + 1;
            lo = store + 1;
        }
    }
    std::sort(d + lo, d + hi, ranks_before);
    for (size_t i = lo; i < hi; ++i) {
        mass_lo += d[i].p;
        if (mass_lo >= target) return i + 1;
    }
    // Only by rounding (the same weights summed in another order) or a total below target.
    return hi;
}

// llama.cpp's top-p: the smallest set of best-ranked tokens whose probability (at
// temperature 1, over the current candidates) sums to >= p; at least one token.
void keep_top_p(Candidates& c, float p) {
    if (p <= 0.0f) {
        std::nth_element(c.data, c.data, c.data + c.size, ranks_before);
        c.size = 1;
        return;
    }
    float max = 0.0f;
    const double target = p * exp_weights(c, &max);  // in unnormalised weights
    size_t n = c.size;
    if (n >= kTopPBandsFrom && std::isfinite(max)) n = keep_top_bands(c, max, target);
    c.size = select_top_mass(c.data, n, target);
}

// llama.cpp's min-p: p_i >= min_p * p_max  <=>  logit_i >= max logit + log(min_p).
// PRECONDITION: 0 < min_p <= 1 (the best token always stays).
void keep_min_p(Candidates& c, float min_p) {
    const float threshold = max_logit(c) + std::log(min_p);
    size_t n = 0;
    for (size_t i = 0; i < c.size; ++i) {
        if (c.data[i].logit >= threshold) c.data[n++] = c.data[i];
    }
    c.size = n;
}

void scale_logits(Candidates& c, float inv_temperature) {
    for (size_t i = 0; i < c.size; ++i) c.data[i].logit *= inv_temperature;
}

// One draw from softmax(logits) of the candidates: the first whose cumulative weight
// exceeds u * total, u uniform in [0, 1) with 53 random bits.
int32_t pick_random(Candidates& c, std::mt19937_64& rng) {
    const double total = exp_weights(c);
    const double u = (double)(rng() >> 11) * 0x1.0p-53;
    const double target = u * total;
    double cum = 0.0;
    for (size_t i = 0; i < c.size; ++i) {
        cum += c.data[i].p;
        if (cum > target) return c.data[i].id;
    }
    // Rounding (total was summed in another order): the last candidate with any weight.
    for (size_t i = c.size; i-- > 0;) {
        if (c.data[i].p > 0.0f) return c.data[i].id;
    }
    return c.data[0].id;
}

// ---- set-up -------------------------------------------------------------------------------

SamplerParams normalize(SamplerParams p) {
    if (std::isnan(p.temperature)) p.temperature = 0.0f;
    if (p.temperature == kInf) p.temperature = std::numeric_limits<float>::max();
    if (p.temperature > 0.0f && std::isinf(1.0f / p.temperature)) p.temperature = 0.0f;
    if (std::isnan(p.top_p)) p.top_p = 1.0f;
    if (std::isnan(p.min_p)) p.min_p = 0.0f;
    p.min_p = std::min(p.min_p, 1.0f);
    if (!(std::isfinite(p.repeat_penalty) && p.repeat_penalty > 0.0f)) p.repeat_penalty = 1.0f;
    if (!std::isfinite(p.presence_penalty)) p.presence_penalty = 0.0f;
    if (!std::isfinite(p.frequency_penalty)) p.frequency_penalty = 0.0f;
    if (p.repeat_last_n < 0) p.repeat_last_n = -1;
    p.repeat_last_n = std::min(p.repeat_last_n, kMaxPenaltyWindow);
    if (std::isnan(p.typical_p)) p.typical_p = 1.0f;
    if (!std::isfinite(p.xtc_probability)) p.xtc_probability = 0.0f;
    if (std::isnan(p.xtc_threshold)) p.xtc_threshold = 1.0f;
    if (!std::isfinite(p.top_n_sigma)) p.top_n_sigma = -1.0f;
    if (!std::isfinite(p.mirostat_tau)) p.mirostat_tau = 5.0f;
    if (!std::isfinite(p.mirostat_eta)) p.mirostat_eta = 0.1f;
    for (auto& b : p.logit_bias)
        if (std::isnan(b.second)) b.second = 0.0f;
    return p;
}

// A random seed as llama.cpp draws one: 32 bits (so it survives a JSON round trip), from
// std::random_device, else the clock; never kRandomSeed itself.
uint64_t resolve_seed(uint64_t seed) {
    if (seed != kRandomSeed) return seed;
    uint64_t s = kRandomSeed;
    while (s == kRandomSeed) {
        try {
            std::random_device rd;
            s = rd();
        } catch (const std::exception&) {
            s = (uint64_t)std::chrono::steady_clock::now().time_since_epoch().count() & 0xFFFFFFFFu;
        }
    }
    return s;
}

std::string fmt3(const char* prefix, float v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s%.3f", prefix, (double)v);
    return buf;
}

// ---- stages ---------------------------------------------------------------------------

inline Candidates as_candidates(Work& w) {
    return {w.cand, w.n};
}

class BiasStage final : public sampling::Stage {
  public:
    explicit BiasStage(std::vector<std::pair<int32_t, float>> bias) : bias_(std::move(bias)) {}
    void apply(Work& w, Rng&) override {
        if (!w.is_list) {
            for (const auto& [id, b] : bias_) w.row[(size_t)id] += b;
            return;
        }
        for (size_t i = 0; i < w.n; ++i)
            for (const auto& [id, b] : bias_)
                if (w.cand[i].id == id) w.cand[i].logit += b;
    }
    std::unique_ptr<Stage> clone() const override { return std::make_unique<BiasStage>(*this); }
    std::string describe() const override {
        return " -> logit-bias (" + std::to_string(bias_.size()) + " tokens)";
    }

  private:
    std::vector<std::pair<int32_t, float>> bias_;  // ids in [0, n_vocab); NaN sums read as -inf
};

class PenaltiesStage final : public sampling::Stage {
  public:
    PenaltiesStage(const SamplerParams& p, int32_t n_vocab) : p_(p) {
        h_.counts.assign((size_t)n_vocab, 0);
        h_.distinct.resize((size_t)n_vocab);
        h_.slot.resize((size_t)n_vocab);
        if (p.repeat_last_n > 0) h_.window.resize((size_t)p.repeat_last_n);
    }
    void apply(Work& w, Rng&) override {
        if (!w.is_list) return apply_penalties(w.row, h_, p_);
        for (size_t i = 0; i < w.n; ++i) {
            const int32_t t = w.cand[i].id;
            const int32_t c = h_.counts[(size_t)t];
            if (c == 0) continue;
            float& l = w.cand[i].logit;
            l = l > 0.0f ? l / p_.repeat_penalty : l * p_.repeat_penalty;
            l -= (float)c * p_.frequency_penalty + p_.presence_penalty;
            if (std::isnan(l)) l = -kInf;
        }
    }
    void accept(int32_t token, bool) override { h_.push(token); }
    void reset() override { h_.clear(); }
    std::unique_ptr<Stage> clone() const override { return std::make_unique<PenaltiesStage>(*this); }
    std::string describe() const override {
        char buf[160];
        std::snprintf(buf, sizeof buf,
                      " -> penalties (last %d, repeat %.3f, frequency %.3f, presence %.3f)",
                      (int)p_.repeat_last_n, (double)p_.repeat_penalty,
                      (double)p_.frequency_penalty, (double)p_.presence_penalty);
        return buf;
    }

  private:
    SamplerParams p_;
    PenaltyHistory h_;
};

class TopKStage final : public sampling::Stage {
  public:
    explicit TopKStage(size_t k) : k_(k) {}
    void apply(Work& w, Rng&) override {
        if (!w.is_list) {
            const Candidates c = top_k_candidates(w.row, w.n_vocab, k_, w.cand);
            w.n = c.size;
            w.is_list = true;
            return;
        }
        if (w.n <= k_) return;
        std::nth_element(w.cand, w.cand + (k_ - 1), w.cand + w.n, ranks_before);
        w.n = k_;
    }
    std::unique_ptr<Stage> clone() const override { return std::make_unique<TopKStage>(*this); }
    std::string describe() const override { return " -> top-k " + std::to_string(k_); }

  private:
    size_t k_;  // 0 < k < n_vocab
};

class TopPStage final : public sampling::Stage {
  public:
    explicit TopPStage(float p) : p_(p) {}
    void apply(Work& w, Rng&) override {
        w.to_list();
        Candidates c = as_candidates(w);
        keep_top_p(c, p_);
        w.n = c.size;
    }
    std::unique_ptr<Stage> clone() const override { return std::make_unique<TopPStage>(*this); }
    std::string describe() const override { return fmt3(" -> top-p ", p_); }

  private:
    float p_;
};

class MinPStage final : public sampling::Stage {
  public:
    explicit MinPStage(float p) : p_(p) {}
    void apply(Work& w, Rng&) override {
        w.to_list();
        Candidates c = as_candidates(w);
        keep_min_p(c, p_);
        w.n = c.size;
    }
    std::unique_ptr<Stage> clone() const override { return std::make_unique<MinPStage>(*this); }
    std::string describe() const override { return fmt3(" -> min-p ", p_); }

  private:
    float p_;
};

// Locally typical sampling: rank by |surprise - entropy|, keep up to mass p (at least one).
class TypicalStage final : public sampling::Stage {
  public:
    explicit TypicalStage(float p) : p_(p) {}
    void apply(Work& w, Rng&) override {
        w.to_list();
        Candidates c = as_candidates(w);
        if (c.size <= 1) return;
        const double total = exp_weights(c);
        double entropy = 0.0;
        for (size_t i = 0; i < c.size; ++i) {
            const double q = c.data[i].p / total;
            if (q > 0) entropy -= q * std::log(q);
        }
        // sort by the distance of each surprise from the entropy; p keeps the weight
        auto score = [&](const TokenData& t) {
            const double q = t.p / total;
            return q > 0 ? std::fabs(-std::log(q) - entropy) : std::numeric_limits<double>::infinity();
        };
        std::sort(c.data, c.data + c.size, [&](const TokenData& a, const TokenData& b) {
            const double sa = score(a), sb = score(b);
            return sa < sb || (sa == sb && ranks_before(a, b));
        });
        double cum = 0.0;
        size_t keep = c.size;
        for (size_t i = 0; i < c.size; ++i) {
            cum += c.data[i].p / total;
            if (cum >= p_) {
                keep = i + 1;
                break;
            }
        }
        w.n = keep;
    }
    std::unique_ptr<Stage> clone() const override { return std::make_unique<TypicalStage>(*this); }
    std::string describe() const override { return fmt3(" -> typical ", p_); }

  private:
    float p_;
};

// XTC: sometimes drop the most likely tokens, keeping the least likely one above threshold.
class XtcStage final : public sampling::Stage {
  public:
    XtcStage(float probability, float threshold) : probability_(probability), threshold_(threshold) {}
    void apply(Work& w, Rng& rng) override {
        const double u = (double)(rng() >> 11) * 0x1.0p-53;
        if (u >= probability_) return;
        w.to_list();
        Candidates c = as_candidates(w);
        if (c.size < 2) return;
        const double total = exp_weights(c);
        size_t above = 0;
        const TokenData* last = nullptr;  // the least likely token above the threshold
        for (size_t i = 0; i < c.size; ++i)
            if (c.data[i].p / total >= threshold_) {
                ++above;
                if (!last || ranks_before(*last, c.data[i])) last = &c.data[i];
            }
        if (above < 2) return;
        const TokenData keep = *last;
        size_t n = 0;
        for (size_t i = 0; i < c.size; ++i)
            if (c.data[i].p / total < threshold_) c.data[n++] = c.data[i];
        c.data[n++] = keep;
        w.n = n;
    }
    std::unique_ptr<Stage> clone() const override { return std::make_unique<XtcStage>(*this); }
    std::string describe() const override {
        char buf[80];
        std::snprintf(buf, sizeof buf, " -> xtc (p %.3f, threshold %.3f)", (double)probability_,
                      (double)threshold_);
        return buf;
    }

  private:
    float probability_, threshold_;
};

class TopNSigmaStage final : public sampling::Stage {
  public:
    explicit TopNSigmaStage(float n) : n_(n) {}
    void apply(Work& w, Rng&) override {
        w.to_list();
        double sum = 0.0, sq = 0.0;
        size_t count = 0;
        float max = -kInf;
        for (size_t i = 0; i < w.n; ++i) {
            const float l = w.cand[i].logit;
            if (!std::isfinite(l)) continue;
            sum += l;
            sq += (double)l * l;
            ++count;
            max = std::max(max, l);
        }
        if (count < 2) return;
        const double mean = sum / (double)count;
        const double sd = std::sqrt(std::max(0.0, sq / (double)count - mean * mean));
        const float threshold = (float)(max - n_ * sd);
        size_t n = 0;
        for (size_t i = 0; i < w.n; ++i)
            if (w.cand[i].logit >= threshold) w.cand[n++] = w.cand[i];
        w.n = n;
    }
    std::unique_ptr<Stage> clone() const override { return std::make_unique<TopNSigmaStage>(*this); }
    std::string describe() const override { return fmt3(" -> top-n-sigma ", n_); }

  private:
    float n_;
};

class TemperatureStage final : public sampling::Stage {
  public:
    explicit TemperatureStage(float t) : t_(t) {}
    void apply(Work& w, Rng&) override {
        w.to_list();
        Candidates c = as_candidates(w);
        scale_logits(c, 1.0f / t_);
    }
    std::unique_ptr<Stage> clone() const override { return std::make_unique<TemperatureStage>(*this); }
    std::string describe() const override { return fmt3(" -> temp ", t_); }

  private:
    float t_;
};

// ---- selectors ------------------------------------------------------------------------

class GreedySelector final : public sampling::Selector {
  public:
    int32_t select(Work& w, Rng&) override {
        if (!w.is_list) return argmax(w.row, w.n_vocab);
        const TokenData* best = w.cand;
        for (size_t i = 1; i < w.n; ++i)
            if (ranks_before(w.cand[i], *best)) best = &w.cand[i];
        return best->id;
    }
    std::unique_ptr<Selector> clone() const override { return std::make_unique<GreedySelector>(*this); }
    std::string describe() const override { return " -> greedy"; }
};

class DistSelector final : public sampling::Selector {
  public:
    explicit DistSelector(const uint64_t* seed) : seed_(seed) {}
    int32_t select(Work& w, Rng& rng) override {
        w.to_list();
        Candidates c = as_candidates(w);
        return pick_random(c, rng);
    }
    std::unique_ptr<Selector> clone() const override { return std::make_unique<DistSelector>(*this); }
    std::string describe() const override {
        return " -> dist (seed " + std::to_string((unsigned long long)*seed_) + ")";
    }
    const uint64_t* seed_;  // the sampler's seed_used (re-pointed on clone)
};

// Mirostat 1 and 2: choose among the tokens whose surprise (-log2 p) stays below mu, and
// move mu towards the target surprise tau after each token (Basu et al. 2021; llama.cpp's
// llama_sampler_mirostat*). mu changes in accept(), for the token actually kept.
class MirostatSelector final : public sampling::Selector {
  public:
    MirostatSelector(int version, float tau, float eta, int32_t n_vocab)
        : version_(version), tau_(tau), eta_(eta), n_vocab_(n_vocab), mu_(2.0f * tau) {}
    int32_t select(Work& w, Rng& rng) override {
        w.to_list();
        Candidates c = as_candidates(w);
        double total = exp_weights(c);
        if (version_ == 2) {
            // keep p >= 2^-mu (at least the best), then draw
            const double floor_p = std::exp2(-(double)mu_) * total;
            size_t n = 0;
            const TokenData* best = c.data;
            for (size_t i = 0; i < c.size; ++i) {
                if (ranks_before(c.data[i], *best)) best = &c.data[i];
            }
            const TokenData top = *best;
            for (size_t i = 0; i < c.size; ++i)
                if (c.data[i].p >= floor_p) c.data[n++] = c.data[i];
            if (n == 0) c.data[n++] = top;
            c.size = n;
        } else {
            // estimate the Zipf exponent from the top 100, then top-k with the k it implies
            const size_t m = std::min<size_t>(100, c.size);
            std::partial_sort(c.data, c.data + m, c.data + c.size, ranks_before);
            double num = 0.0, den = 0.0;
            for (size_t i = 0; i + 1 < m; ++i) {
                const double t = std::log((double)(i + 2) / (double)(i + 1));
                if (!(c.data[i + 1].p > 0.0f) || !(c.data[i].p > 0.0f)) break;
                const double b = std::log((double)c.data[i].p / (double)c.data[i + 1].p);
                num += t * b;
                den += t * t;
            }
            const double s_hat = den > 0 ? num / den : 1.0;
            const double eps = s_hat - 1.0;
            double k = 1.0;
            if (s_hat > 0 && std::fabs(eps) > 1e-9)
                k = std::pow(eps * std::exp2((double)mu_) / (1.0 - std::pow((double)n_vocab_, -eps)),
                             1.0 / s_hat);
            if (!std::isfinite(k) || k < 1.0) k = 1.0;
            const size_t kk = std::min(c.size, (size_t)k);
            if (kk < c.size) {
                std::nth_element(c.data, c.data + (kk - 1), c.data + c.size, ranks_before);
                c.size = kk;
            }
        }
        total = exp_weights(c);
        const int32_t id = pick_random(c, rng);
        double p_id = 0.0;
        for (size_t i = 0; i < c.size; ++i)
            if (c.data[i].id == id) p_id = c.data[i].p / total;
        pending_ = id;
        pending_surprise_ = p_id > 0 ? (float)-std::log2(p_id) : tau_;
        return id;
    }
    void accept(int32_t token) override {
        if (token == pending_) mu_ -= eta_ * (pending_surprise_ - tau_);
        pending_ = -1;
    }
    void reset() override {
        mu_ = 2.0f * tau_;
        pending_ = -1;
    }
    std::unique_ptr<Selector> clone() const override { return std::make_unique<MirostatSelector>(*this); }
    std::string describe() const override {
        char buf[96];
        std::snprintf(buf, sizeof buf, " -> mirostat%s (tau %.3f, eta %.3f)",
                      version_ == 2 ? " v2" : "", (double)tau_, (double)eta_);
        return buf;
    }

  private:
    int version_;
    float tau_, eta_;
    int32_t n_vocab_;
    float mu_;
    int32_t pending_ = -1;
    float pending_surprise_ = 0.0f;
};

// The grammar: masks the row to the tokens that fit. Lazy with triggers: inactive until a
// trigger appears in the generated text, then constraining from the trigger's first byte.
class GrammarStage {
  public:
    GrammarStage(const SamplerParams& p)
        : vocab_(p.grammar_vocab), matcher_(p.grammar, p.grammar_vocab),
          triggers_(p.grammar_triggers), active_(p.grammar_triggers.empty()) {}
    bool active() const { return active_; }
    const GrammarMatcher& matcher() const { return matcher_; }
    bool allows(int32_t token) const { return !active_ || matcher_.allows(token); }
    void mask(float* row, size_t n) const {
        if (active_) matcher_.mask(std::span<float>(row, n));
    }
    bool done() const { return active_ && (matcher_.must_end() || matcher_.finished()); }
    void accept(int32_t token) {
        if (token < 0 || token >= vocab_->n_vocab()) return;
        if (active_) {
            (void)matcher_.accept(token);  // a token the grammar rejected cannot be chosen
            return;
        }
        if (gave_up_) return;
        text_ += vocab_->piece(token);
        size_t at = std::string::npos;
        for (const GrammarTrigger& t : triggers_) {
            size_t pos = std::string::npos;
            if (t.at_start) {
                const size_t lead = text_.find_first_not_of(" \t\r\n");
                if (lead != std::string::npos && text_.compare(lead, t.word.size(), t.word) == 0)
                    pos = lead;
            } else {
                pos = text_.find(t.word);
            }
            at = std::min(at, pos);
        }
        if (at == std::string::npos) return;
        active_ = true;
        // The text from the trigger on is the grammar's; if it does not fit (the trigger
        // token carried text the grammar cannot start with), the grammar stays off.
        if (!matcher_.accept_bytes(std::string_view(text_).substr(at))) {
            active_ = false;
            gave_up_ = true;
        }
        text_.clear();
    }
    void reset() {
        matcher_.reset();
        active_ = triggers_.empty();
        gave_up_ = false;
        text_.clear();
    }
    std::string describe() const { return triggers_.empty() ? " -> grammar" : " -> grammar (lazy)"; }
    int32_t fallback() const {  // a token when nothing fits: the first end-of-generation token
        for (int32_t t = 0; t < vocab_->n_vocab(); ++t)
            if (vocab_->is_eog(t)) return t;
        return 0;
    }

  private:
    std::shared_ptr<const GrammarVocab> vocab_;
    GrammarMatcher matcher_;
    std::vector<GrammarTrigger> triggers_;
    bool active_ = true;
    bool gave_up_ = false;
    std::string text_;  // generated text while waiting for a trigger
};

}  // namespace

void sampling::Work::to_list() {
    if (is_list) return;
    all_candidates(row, n_vocab, cand);
    n = n_vocab;
    is_list = true;
}

namespace {
struct NameCode {
    const char* name;
    char letter;
    SamplerStageKind kind;
};
constexpr NameCode kStageNames[] = {
    {"penalties", 'e', SamplerStageKind::Penalties},  {"dry", 'd', SamplerStageKind::Dry},
    {"top_n_sigma", 's', SamplerStageKind::TopNSigma}, {"top_k", 'k', SamplerStageKind::TopK},
    {"typ_p", 'y', SamplerStageKind::TypicalP},       {"top_p", 'p', SamplerStageKind::TopP},
    {"min_p", 'm', SamplerStageKind::MinP},           {"xtc", 'x', SamplerStageKind::Xtc},
    {"temperature", 't', SamplerStageKind::Temperature},
};
}  // namespace

std::optional<SamplerStageKind> sampler_stage_from_name(std::string_view name) {
    if (name == "typical_p") return SamplerStageKind::TypicalP;
    if (name == "temp") return SamplerStageKind::Temperature;
    for (const NameCode& n : kStageNames)
        if (name == n.name) return n.kind;
    return std::nullopt;
}

std::optional<SamplerStageKind> sampler_stage_from_letter(char c) {
    for (const NameCode& n : kStageNames)
        if (c == n.letter) return n.kind;
    return std::nullopt;
}

const char* sampler_stage_name(SamplerStageKind k) {
    for (const NameCode& n : kStageNames)
        if (k == n.kind) return n.name;
    return "?";
}

float token_logprobs(std::span<const float> logits, int32_t chosen, size_t n,
                     std::vector<TokenLogprob>* top) {
    const size_t nv = logits.size();
    float max = -kInf;
    for (float x : logits)
        if (x == x && x > max) max = x;
    double sum = 0.0;
    if (std::isfinite(max))
        for (float x : logits)
            if (x == x) sum += std::exp((double)x - max);
    const double log_z = std::isfinite(max) ? (double)max + std::log(sum) : 0.0;
    auto lp = [&](size_t i) {
        const float x = logits[i];
        return x == x ? (float)((double)x - log_z) : -kInf;
    };
    if (top) {
        top->clear();
        n = std::min(n, nv);
        std::vector<TokenLogprob> best;
        best.reserve(n + 1);
        auto worse = [](const TokenLogprob& a, const TokenLogprob& b) {
            return a.logprob > b.logprob || (a.logprob == b.logprob && a.id < b.id);
        };
        for (size_t i = 0; i < nv && n > 0; ++i) {
            const TokenLogprob t{(int32_t)i, lp(i)};
            if (best.size() == n && !worse(t, best.front())) continue;
            best.push_back(t);
            std::push_heap(best.begin(), best.end(), worse);
            if (best.size() > n) {
                std::pop_heap(best.begin(), best.end(), worse);
                best.pop_back();
            }
        }
        std::sort_heap(best.begin(), best.end(), worse);
        *top = std::move(best);
    }
    return chosen >= 0 && (size_t)chosen < nv ? lp((size_t)chosen) : -kInf;
}

struct Sampler::Impl {
    SamplerParams params;
    int32_t n_vocab = 0;
    std::vector<std::unique_ptr<sampling::Stage>> stages;  // in order
    std::unique_ptr<sampling::Selector> selector;
    std::optional<GrammarStage> grammar;
    // The reply's thinking blocks; the grammar as it was before text that may open one (it
    // goes back to that when a block opens).
    std::optional<ThinkingBudget> thinking;
    std::optional<GrammarStage> grammar_before;

    std::vector<float> row;             // [n_vocab] working logits
    std::vector<TokenData> candidates;  // [n_vocab] (empty when no stage makes a list)
    uint64_t seed_used = 0;
    Rng rng;

    Impl() = default;
    Impl(const Impl& o)
        : params(o.params), n_vocab(o.n_vocab), grammar(o.grammar), thinking(o.thinking),
          grammar_before(o.grammar_before), row(o.row),
          candidates(o.candidates), seed_used(o.seed_used), rng(o.rng) {
        for (const auto& s : o.stages) stages.push_back(s->clone());
        selector = o.selector->clone();
        if (auto* d = dynamic_cast<DistSelector*>(selector.get())) d->seed_ = &seed_used;
    }

    // One pass of the chain over logits; grammar_mask: mask the row by the grammar first.
    // Returns -1 when no token is left.
    int32_t run(std::span<const float> logits, bool grammar_mask) {
        float* r = row.data();
        if (!copy_logits(logits, r)) return -1;
        if (grammar_mask) {
            grammar->mask(r, (size_t)n_vocab);
            if (!(max_of(r, (size_t)n_vocab) > -kInf)) return -1;
        }
        Work w;
        w.row = r;
        w.n_vocab = (size_t)n_vocab;
        w.cand = candidates.data();
        for (auto& s : stages) s->apply(w, rng);
        if (post) keep_post(w);
        return selector->select(w, rng);
    }

    // Post-sampling probabilities (llama.cpp's post_sampling_probs): the softmax over what the
    // chain left (after the filters and the temperature), kept before the selector draws.
    std::vector<TokenLogprob>* post = nullptr;
    size_t n_post = 0;
    std::vector<TokenLogprob> post_all;  // every candidate with p > 0 (to find the chosen one)
    void keep_post(const Work& w) {
        post_all.clear();
        auto add_all = [&](auto&& each) {
            float hi = -kInf;
            each([&](int32_t, float l) { hi = std::max(hi, l); });
            if (!(hi > -kInf)) return;
            double sum = 0.0;
            each([&](int32_t, float l) { if (l > -kInf) sum += std::exp((double)(l - hi)); });
            each([&](int32_t id, float l) {
                if (!(l > -kInf)) return;
                const double pr = std::exp((double)(l - hi)) / sum;
                if (pr > 0.0) post_all.push_back({id, (float)std::log(pr)});
            });
        };
        if (w.is_list)
            add_all([&](auto&& f) { for (size_t i = 0; i < w.n; ++i) f(w.cand[i].id, w.cand[i].logit); });
        else
            add_all([&](auto&& f) { for (size_t i = 0; i < w.n_vocab; ++i) f((int32_t)i, w.row[i]); });
        const size_t k = std::min(n_post, post_all.size());
        std::partial_sort(post_all.begin(), post_all.begin() + (ptrdiff_t)k, post_all.end(),
                          [](const TokenLogprob& a, const TokenLogprob& b) {
                              return a.logprob > b.logprob || (a.logprob == b.logprob && a.id < b.id);
                          });
        post->assign(post_all.begin(), post_all.begin() + (ptrdiff_t)k);
    }
};

Sampler::Sampler(const SamplerParams& params, int32_t n_vocab) : impl_(std::make_unique<Impl>()) {
    EDGELLM_ASSERT(n_vocab > 0, "sampler needs a vocabulary");
    Impl& s = *impl_;
    s.params = normalize(params);
    s.n_vocab = n_vocab;
    SamplerParams& p = s.params;
    std::erase_if(p.logit_bias, [&](const auto& b) { return b.first < 0 || b.first >= n_vocab; });

    const bool penalties =
        p.repeat_last_n != 0 &&
        (p.repeat_penalty != 1.0f || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f);
    const bool greedy = !(p.temperature > 0.0f);
    std::vector<SamplerStageKind> order = p.order;
    if (order.empty())
        order = {SamplerStageKind::Penalties, SamplerStageKind::Dry, SamplerStageKind::TopNSigma,
                 SamplerStageKind::TopK,      SamplerStageKind::TypicalP, SamplerStageKind::TopP,
                 SamplerStageKind::MinP,      SamplerStageKind::Xtc,
                 SamplerStageKind::Temperature};
    if (p.mirostat != 0 && !greedy)  // mirostat replaces the filters
        order = {SamplerStageKind::Penalties, SamplerStageKind::Temperature};
    if (greedy) std::erase_if(order, [](SamplerStageKind k) { return k != SamplerStageKind::Penalties; });

    if (!p.logit_bias.empty()) s.stages.push_back(std::make_unique<BiasStage>(p.logit_bias));
    bool makes_list = false;
    for (SamplerStageKind k : order) {
        std::unique_ptr<sampling::Stage> st;
        switch (k) {
            case SamplerStageKind::Penalties:
                if (penalties) st = std::make_unique<PenaltiesStage>(p, n_vocab);
                break;
            case SamplerStageKind::Dry:  // refused by the API layers; never built here
                break;
            case SamplerStageKind::TopNSigma:
                if (p.top_n_sigma > 0.0f && std::isfinite(p.top_n_sigma))
                    st = std::make_unique<TopNSigmaStage>(p.top_n_sigma);
                break;
            case SamplerStageKind::TopK:
                if (p.top_k > 0 && p.top_k < n_vocab) st = std::make_unique<TopKStage>((size_t)p.top_k);
                break;
            case SamplerStageKind::TypicalP:
                if (p.typical_p < 1.0f && p.typical_p > 0.0f) st = std::make_unique<TypicalStage>(p.typical_p);
                break;
            case SamplerStageKind::TopP:
                if (p.top_p < 1.0f) st = std::make_unique<TopPStage>(p.top_p);
                break;
            case SamplerStageKind::MinP:
                if (p.min_p > 0.0f) st = std::make_unique<MinPStage>(p.min_p);
                break;
            case SamplerStageKind::Xtc:
                if (p.xtc_probability > 0.0f && p.xtc_threshold <= 0.5f)
                    st = std::make_unique<XtcStage>(p.xtc_probability, p.xtc_threshold);
                break;
            case SamplerStageKind::Temperature:
                if (p.temperature != 1.0f) st = std::make_unique<TemperatureStage>(p.temperature);
                break;
        }
        if (!st) continue;
        makes_list |= k != SamplerStageKind::Penalties;
        s.stages.push_back(std::move(st));
    }
    if (greedy)
        s.selector = std::make_unique<GreedySelector>();
    else if (p.mirostat == 1 || p.mirostat == 2)
        s.selector = std::make_unique<MirostatSelector>(p.mirostat, p.mirostat_tau,
                                                        p.mirostat_eta, n_vocab);
    else
        s.selector = std::make_unique<DistSelector>(&s.seed_used);
    makes_list |= !greedy;
    if (p.grammar && p.grammar_vocab && p.grammar_vocab->n_vocab() == n_vocab) s.grammar.emplace(p);
    if (p.thinking.on && p.grammar_vocab && p.grammar_vocab->n_vocab() == n_vocab)
        s.thinking.emplace(p.thinking, p.grammar_vocab);

    s.row.resize((size_t)n_vocab);
    s.candidates.resize(makes_list ? (size_t)n_vocab : 0);
    reset();
}

Sampler::~Sampler() = default;
Sampler::Sampler(Sampler&&) noexcept = default;
Sampler& Sampler::operator=(Sampler&&) noexcept = default;

Sampler Sampler::clone() const {
    Sampler out(std::unique_ptr<Impl>(new Impl(*impl_)));
    return out;
}

Sampler::Sampler(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

int32_t Sampler::sample(std::span<const float> logits, size_t n_probs,
                        std::vector<TokenLogprob>* top, float* chosen_logprob) {
    Impl& s = *impl_;
    s.post = top;
    s.n_post = n_probs;
    s.post_all.clear();
    top->clear();
    const int32_t t = sample(logits);
    s.post = nullptr;
    // greedy, or a forced close: the token was drawn with certainty
    if (!(s.params.temperature > 0.0f) || (s.thinking && s.thinking->forced() == t)) {
        top->assign(1, TokenLogprob{t, 0.0f});
        *chosen_logprob = 0.0f;
        return t;
    }
    *chosen_logprob = -kInf;
    for (const TokenLogprob& c : s.post_all)
        if (c.id == t) *chosen_logprob = c.logprob;
    return t;
}

int32_t Sampler::sample(std::span<const float> logits) {
    Impl& s = *impl_;
    EDGELLM_ASSERT(logits.size() == (size_t)s.n_vocab, "logits row is not n_vocab long");
    if (s.thinking)
        if (const int32_t f = s.thinking->forced(); f >= 0) return f;
    const bool constrained = grammar_active();
    int32_t tok = s.run(logits, false);
    if (!constrained) return tok < 0 ? 0 : tok;
    // The grammar checks the chain's choice; only a miss pays for the mask.
    if (tok >= 0 && (s.grammar->allows(tok) || (s.thinking && s.thinking->passes_grammar(tok))))
        return tok;
    tok = s.run(logits, true);
    return tok < 0 ? s.grammar->fallback() : tok;
}

void Sampler::accept(int32_t token) {
    Impl& s = *impl_;
    if (token < 0 || token >= s.n_vocab) return;
    for (auto& st : s.stages) st->accept(token, true);
    s.selector->accept(token);
    using Step = ThinkingBudget::Step;
    const Step step = s.thinking ? s.thinking->accept(token) : Step::Answer;
    if (!s.grammar) return;
    switch (step) {
        case Step::Answer:
            s.grammar_before.reset();
            s.grammar->accept(token);
            break;
        case Step::MayOpen:
            if (!s.grammar_before) s.grammar_before = s.grammar;
            s.grammar->accept(token);
            break;
        case Step::Opened:  // what led up to the opening was no answer
            if (s.grammar_before) s.grammar = std::move(s.grammar_before);
            s.grammar_before.reset();
            break;
        case Step::Block:
        case Step::Blank:
            break;
    }
}

void Sampler::accept_prompt(int32_t token) {
    Impl& s = *impl_;
    if (token < 0 || token >= s.n_vocab) return;
    for (auto& st : s.stages) st->accept(token, false);
}

bool Sampler::grammar_active() const {
    return impl_->grammar && impl_->grammar->active() && !(impl_->thinking && impl_->thinking->inside());
}

std::optional<GrammarMatcher> Sampler::grammar_matcher() const {
    if (!grammar_active()) return std::nullopt;
    return impl_->grammar->matcher();
}

bool Sampler::grammar_done() const {
    return grammar_active() && impl_->grammar->done();
}

int64_t Sampler::thinking_tokens() const {
    return impl_->thinking ? impl_->thinking->tokens() : 0;
}

void Sampler::reset() {
    Impl& s = *impl_;
    for (auto& st : s.stages) st->reset();
    s.selector->reset();
    if (s.grammar) s.grammar->reset();
    if (s.thinking) s.thinking->reset();
    s.grammar_before.reset();
    s.seed_used = resolve_seed(s.params.seed);
    s.rng.seed(s.seed_used);
}

const SamplerParams& Sampler::params() const {
    return impl_->params;
}
uint64_t Sampler::seed_used() const {
    return impl_->seed_used;
}
int32_t Sampler::n_vocab() const {
    return impl_->n_vocab;
}

std::string Sampler::describe() const {
    const Impl& s = *impl_;
    std::string out = "logits";
    if (s.grammar) out += s.grammar->describe();
    if (s.thinking && s.params.thinking.budget >= 0)
        out += " -> thinking budget " + std::to_string(s.params.thinking.budget);
    for (const auto& st : s.stages) out += st->describe();
    return out + s.selector->describe();
}

}  // namespace edgellm
