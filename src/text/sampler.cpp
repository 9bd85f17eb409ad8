// The sampler chain (see include/edgellm/sampler.h). Each stage is a small function. The
// first ones work on a dense row of logits, the rest on a list of candidates; both buffers
// are sized n_vocab at construction:
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

namespace edgellm {
namespace {

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

// One candidate token; `p` holds a weight for the stages that need one.
struct TokenData {
    int32_t id;
    float logit;
    float p;
};

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

}  // namespace

struct Sampler::Impl {
    SamplerParams params;
    int32_t n_vocab = 0;
    // The chain: which stages run (in the fixed order of the header).
    bool penalties = false;
    bool greedy = false;
    bool top_k = false;
    bool top_p = false;
    bool min_p = false;
    bool temperature = false;

    std::vector<float> row;             // [n_vocab] working logits
    std::vector<TokenData> candidates;  // [n_vocab]
    PenaltyHistory history;             // sized only when penalties run
    uint64_t seed_used = 0;
    std::mt19937_64 rng;
};

Sampler::Sampler(const SamplerParams& params, int32_t n_vocab) : impl_(std::make_unique<Impl>()) {
    EDGELLM_ASSERT(n_vocab > 0, "sampler needs a vocabulary");
    Impl& s = *impl_;
    s.params = normalize(params);
    s.n_vocab = n_vocab;
    const SamplerParams& p = s.params;

    s.penalties =
        p.repeat_last_n != 0 &&
        (p.repeat_penalty != 1.0f || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f);
    s.greedy = !(p.temperature > 0.0f);
    s.top_k = !s.greedy && p.top_k > 0 && p.top_k < n_vocab;
    s.top_p = !s.greedy && p.top_p < 1.0f;
    s.min_p = !s.greedy && p.min_p > 0.0f;
    s.temperature = !s.greedy && p.temperature != 1.0f;

    s.row.resize((size_t)n_vocab);
    s.candidates.resize(s.greedy ? 0 : (size_t)n_vocab);
    if (s.penalties) {
        PenaltyHistory& h = s.history;
        h.counts.assign((size_t)n_vocab, 0);
        h.distinct.resize((size_t)n_vocab);
        h.slot.resize((size_t)n_vocab);
        if (p.repeat_last_n > 0) h.window.resize((size_t)p.repeat_last_n);
    }
    reset();
}

Sampler::~Sampler() = default;
Sampler::Sampler(Sampler&&) noexcept = default;
Sampler& Sampler::operator=(Sampler&&) noexcept = default;

int32_t Sampler::sample(std::span<const float> logits) {
    Impl& s = *impl_;
    EDGELLM_ASSERT(logits.size() == (size_t)s.n_vocab, "logits row is not n_vocab long");
    const SamplerParams& p = s.params;
    const size_t n = logits.size();
    float* row = s.row.data();

    if (!copy_logits(logits, row)) return 0;  // every logit NaN or -inf
    if (s.penalties) apply_penalties(row, s.history, p);
    if (s.greedy) return argmax(row, n);

    Candidates c = s.top_k ? top_k_candidates(row, n, (size_t)p.top_k, s.candidates.data())
                           : all_candidates(row, n, s.candidates.data());
    if (s.top_p) keep_top_p(c, p.top_p);
    if (s.min_p) keep_min_p(c, p.min_p);
    if (s.temperature) scale_logits(c, 1.0f / p.temperature);
    return pick_random(c, s.rng);
}

void Sampler::accept(int32_t token) {
    Impl& s = *impl_;
    if (!s.penalties || token < 0 || token >= s.n_vocab) return;
    s.history.push(token);
}

void Sampler::reset() {
    Impl& s = *impl_;
    if (s.penalties) s.history.clear();
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
    const SamplerParams& p = s.params;
    std::string out = "logits";
    char buf[160];
    if (s.penalties) {
        std::snprintf(buf, sizeof buf,
                      " -> penalties (last %d, repeat %.3f, frequency %.3f, presence %.3f)",
                      (int)p.repeat_last_n, (double)p.repeat_penalty, (double)p.frequency_penalty,
                      (double)p.presence_penalty);
        out += buf;
    }
    if (s.greedy) return out + " -> greedy";
    if (s.top_k) {
        std::snprintf(buf, sizeof buf, " -> top-k %d", (int)p.top_k);
        out += buf;
    }
    if (s.top_p) {
        std::snprintf(buf, sizeof buf, " -> top-p %.3f", (double)p.top_p);
        out += buf;
    }
    if (s.min_p) {
        std::snprintf(buf, sizeof buf, " -> min-p %.3f", (double)p.min_p);
        out += buf;
    }
    if (s.temperature) {
        std::snprintf(buf, sizeof buf, " -> temp %.3f", (double)p.temperature);
        out += buf;
    }
    std::snprintf(buf, sizeof buf, " -> dist (seed %llu)", (unsigned long long)s.seed_used);
    return out + buf;
}

}  // namespace edgellm
