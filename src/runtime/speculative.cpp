#include "edgellm/speculative.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>

#include <nlohmann/json.hpp>

namespace edgellm {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// The most likely token of a row and its probability (softmax over the whole row). NaN
// counts as -inf.
std::pair<int32_t, float> best_token(std::span<const float> row) {
    int32_t best = -1;
    float top = -std::numeric_limits<float>::infinity();
    for (size_t i = 0; i < row.size(); ++i)
        if (row[i] > top) {
            top = row[i];
            best = (int32_t)i;
        }
    if (best < 0 || !std::isfinite(top)) return {best, best < 0 ? 0.0f : 1.0f};
    double sum = 0.0;
    for (float v : row)
        if (v > -std::numeric_limits<float>::infinity()) sum += std::exp((double)(v - top));
    return {best, (float)(1.0 / sum)};
}

// A token's text for a message: a JSON string (quoted, control bytes escaped, bytes that
// are not UTF-8 replaced).
std::string shown(const std::string& s) {
    return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

std::string draft_vocab_mismatch(const Tokenizer& main, const Tokenizer& draft) {
    if (main.kind() != draft.kind())
        return std::string("the draft model's tokenizer is ") + Tokenizer::kind_name(draft.kind()) +
               ", the model's is " + Tokenizer::kind_name(main.kind());
    if (main.add_bos() != draft.add_bos() || (main.add_bos() && main.bos() != draft.bos()))
        return "the draft model's BOS token (" + std::to_string(draft.bos()) + ", added: " +
               (draft.add_bos() ? "yes" : "no") + ") is not the model's (" +
               std::to_string(main.bos()) + ", added: " + (main.add_bos() ? "yes" : "no") + ")";
    if (main.add_eos() != draft.add_eos() || main.eos() != draft.eos())
        return "the draft model's EOS token (" + std::to_string(draft.eos()) +
               ") is not the model's (" + std::to_string(main.eos()) + ")";
    const int32_t n_main = main.n_vocab(), n_draft = draft.n_vocab();
    if (std::abs(n_main - n_draft) > 128)
        return "the draft model has " + std::to_string(n_draft) + " tokens, the model " +
               std::to_string(n_main) + " (they may differ by at most 128)";
    for (int32_t id = 5; id < std::min(n_main, n_draft); ++id) {
        const std::string a = main.token_to_piece(id, true), b = draft.token_to_piece(id, true);
        if (a != b)
            return "token " + std::to_string(id) + " is " + shown(a) + " in the model but " +
                   shown(b) + " in the draft model";
    }
    return "";
}

ModelDrafter::ModelDrafter(const Model& model, Context& ctx, int seq, float p_min,
                           int64_t main_n_vocab, StepBatcher* batcher)
    : ctx_(ctx), cache_(ctx, seq), p_min_(p_min), main_n_vocab_(main_n_vocab), batcher_(batcher) {
    row_.resize((size_t)model.hparams().n_vocab);
}

Result<DraftCost> ModelDrafter::draft(std::span<const int32_t> history, int max,
                                      GrammarMatcher* grammar, const std::atomic<bool>* cancel,
                                      std::vector<int32_t>* out) {
    using R = Result<DraftCost>;
    DraftCost cost;
    if (max_draft_ > 0) max = std::min(max, max_draft_);
    if (history.empty() || max <= 0) return cost;
    const int64_t n_ctx = ctx_.params().n_ctx;
    // The draft model's context may be smaller than the sequence: then it cannot draft.
    if ((int64_t)history.size() + max > n_ctx) return cost;
    StepBatcher::Generating drafting(batcher_);  // (on the shared draft context)
    auto raised = [&] { return cancel && cancel->load(std::memory_order_relaxed); };

    // Bring the cache up to the history (at least its last token is evaluated: its logits
    // give the first draft).
    auto t0 = Clock::now();
    const int64_t keep = cache_.keep_prefix(history, (int64_t)history.size() - 1);
    const int64_t n_batch = std::max<int64_t>(1, ctx_.params().n_batch);
    std::span<const float> logits;
    for (int64_t done = keep; done < (int64_t)history.size();) {
        const int64_t n = std::min<int64_t>(n_batch, (int64_t)history.size() - done);
        auto r = cache_.eval(history.subspan((size_t)done, (size_t)n), false, cancel, batcher_);
        if (!r) {
            if (raised() && r.error() == Context::kAborted) return cost;
            return R::fail(r.error());
        }
        logits = *r;
        done += n;
    }
    // (a step or two is part of drafting; more is a new prompt reaching the draft model)
    if ((int64_t)history.size() - keep > 2) {
        cost.catch_up_ms = ms_since(t0);
        t0 = Clock::now();
    }
    const size_t n_vocab = row_.size();
    for (int i = 0; i < max; ++i) {
        auto [tok, p] = best_token(logits);
        if (tok >= 0 && grammar && !grammar->allows(tok)) {
            std::copy(logits.begin(), logits.end(), row_.begin());
            grammar->mask(std::span<float>(row_.data(), n_vocab));
            std::tie(tok, p) = best_token(row_);
        }
        if (tok < 0 || tok >= main_n_vocab_ || p < p_min_) break;
        if (grammar && !grammar->accept(tok)) break;
        out->push_back(tok);
        if (i + 1 == max || raised()) break;
        auto r = cache_.eval(std::span<const int32_t>(&tok, 1), false, cancel, batcher_);
        if (!r) {
            if (raised() && r.error() == Context::kAborted) break;
            return R::fail(r.error());
        }
        logits = *r;
    }
    cost.ms = ms_since(t0);
    return cost;
}

Result<DraftCost> NgramDrafter::draft(std::span<const int32_t> history, int max,
                                      GrammarMatcher* grammar, const std::atomic<bool>*,
                                      std::vector<int32_t>* out) {
    const auto t0 = Clock::now();
    DraftCost cost;
    const int64_t n_hist = (int64_t)history.size();
    if (max_draft_ > 0) max = std::min(max, max_draft_);
    if (max <= 0) return cost;
    for (int n = n_max_; n >= n_min_ && n >= 1; --n) {
        if (n_hist < n + 1) continue;
        const int32_t* key = history.data() + n_hist - n;
        // The latest earlier occurrence with at least one token after it.
        for (int64_t j = n_hist - n - 1; j >= 0; --j) {
            if (!std::equal(key, key + n, history.data() + j)) continue;
            const int64_t from = j + n;
            const int64_t upto = std::min<int64_t>(n_hist, from + max);
            for (int64_t k = from; k < upto; ++k) {
                if (grammar && !grammar->accept(history[(size_t)k])) break;
                out->push_back(history[(size_t)k]);
            }
            cost.ms = ms_since(t0);
            return cost;
        }
    }
    cost.ms = ms_since(t0);
    return cost;
}

Result<DraftCost> ChainDrafter::draft(std::span<const int32_t> history, int max,
                                      GrammarMatcher* grammar, const std::atomic<bool>* cancel,
                                      std::vector<int32_t>* out) {
    DraftCost total;
    used_ = -1;
    for (size_t i = 0; i < d_.size(); ++i) {
        Drafter* d = d_[i];
        const size_t before = out->size();
        std::optional<GrammarMatcher> g;  // each drafter from the same grammar position
        if (grammar) g = *grammar;
        auto r = d->draft(history, max, g ? &*g : nullptr, cancel, out);
        if (!r) return r;
        total.ms += r->ms;
        total.catch_up_ms += r->catch_up_ms;
        if (out->size() > before) {
            if (grammar) *grammar = *g;
            used_ = (int)i;
            break;
        }
        if (cancel && cancel->load(std::memory_order_relaxed)) break;
    }
    return total;
}

void ChainDrafter::observe(int step_tokens, double step_ms, int n_drafted, int n_kept) {
    for (size_t i = 0; i < d_.size(); ++i)
        if ((int)i == used_)
            d_[i]->observe(step_tokens, step_ms, n_drafted, n_kept);
        else
            d_[i]->observe(step_tokens, step_ms, 0, 0);
}

Result<DraftCost> AdaptiveDrafter::draft(std::span<const int32_t> history, int max,
                                         GrammarMatcher* grammar, const std::atomic<bool>* cancel,
                                         std::vector<int32_t>* out) {
    const int k = std::min(max, ctl_.choose());
    if (k <= 0) return DraftCost{};
    const size_t before = out->size();
    auto r = inner_.draft(history, k, grammar, cancel, out);
    // (a draft model's catch-up with a new prompt counts: on a short reply it is most of
    // what drafting costs)
    if (r) ctl_.observe_draft((int)(out->size() - before), r->ms + r->catch_up_ms);
    return r;
}

double AdaptiveDrafter::expected_gain() const {
    double best = ctl_.expected_gain(1);
    if (best <= 0) return -1.0;
    for (int k = 2; k <= ctl_.n_max(); ++k) best = std::max(best, ctl_.expected_gain(k));
    return best;
}

void AdaptiveDrafter::observe(int step_tokens, double step_ms, int n_drafted, int n_kept) {
    ctl_.observe_step(step_tokens, step_ms);
    if (n_drafted > 0) ctl_.observe_accept(n_drafted, n_kept);
}

SpecController::SpecController(int n_max, int n_min)
    : n_max_(std::max(0, n_max)), n_min_(std::clamp(n_min, 0, std::max(0, n_max))),
      step_ms_((size_t)std::max(0, n_max) + 2, 0.0) {}

double SpecController::step_ms(int n) const {
    if (n < 1 || n >= (int)step_ms_.size()) return -1.0;
    if (step_ms_[(size_t)n] > 0) return step_ms_[(size_t)n];
    int lo = -1, hi = -1;
    for (int i = n - 1; i >= 1 && lo < 0; --i)
        if (step_ms_[(size_t)i] > 0) lo = i;
    for (int i = n + 1; i < (int)step_ms_.size() && hi < 0; ++i)
        if (step_ms_[(size_t)i] > 0) hi = i;
    if (lo > 0 && hi > 0) {
        const double f = (double)(n - lo) / (double)(hi - lo);
        return step_ms_[(size_t)lo] * (1.0 - f) + step_ms_[(size_t)hi] * f;
    }
    if (lo > 0) {
        // Beyond the largest measured: the slope between the two largest, else 10 % of a
        // step per token (a step is mostly reading the weights, shared by its tokens).
        double slope = 0.1 * step_ms_[(size_t)lo];
        for (int i = lo - 1; i >= 1; --i)
            if (step_ms_[(size_t)i] > 0) {
                slope = std::max(0.0, (step_ms_[(size_t)lo] - step_ms_[(size_t)i]) / (lo - i));
                break;
            }
        return step_ms_[(size_t)lo] + slope * (n - lo);
    }
    if (hi > 0) return step_ms_[(size_t)hi];
    return -1.0;
}

double SpecController::accept_rate() const {
    return trials_ > 0 ? hits_ / trials_ : 0.0;
}

double SpecController::tokens_per_ms(int k) const {
    const double t = step_ms(k + 1);
    if (t <= 0) return 0.0;
    if (k == 0) return 1.0 / t;
    const double a = std::clamp(accept_rate(), 0.0, 0.999);
    const double expected = (1.0 - std::pow(a, k + 1)) / (1.0 - a);
    return expected / (k * std::max(0.0, draft_ms_) + empty_share_ * std::max(0.0, empty_ms_) + t);
}

bool SpecController::could_pay() const {
    const double plain = tokens_per_ms(0);
    for (int k = std::max(1, n_min_); k <= n_max_; ++k) {
        const double t = step_ms(k + 1);
        if (t > 0 && (double)(k + 1) / (k * std::max(0.0, draft_ms_) + t) > plain) return true;
    }
    return false;
}

double SpecController::expected_gain(int k) const {
    const double plain = tokens_per_ms(0);
    if (plain <= 0 || draft_ms_ < 0 || trials_ <= 0) return 0.0;
    return tokens_per_ms(k) / plain;
}

int SpecController::choose() {
    if (n_max_ == 0) return 0;
    // Until there is something to go on: draft the most (to measure drafting and checking),
    // and measure one plain step.
    if (n_observed_ < 2 || draft_ms_ < 0) return n_max_;
    if (step_ms_[1] <= 0) return 0;
    int best_k = 0;
    double best = tokens_per_ms(0);
    for (int k = std::max(1, n_min_); k <= n_max_; ++k) {
        const double r = tokens_per_ms(k);
        if (r > best) {
            best = r;
            best_k = k;
        }
    }
    if (best_k > 0) {
        if (off_) probe_every_ = 16;
        off_ = false;
        return best_k;
    }
    // Plain decoding wins: off, with a probe now and then (the text may have changed). When
    // drafting could not pay even if every draft were kept (drafting and checking cost too
    // much on this machine), the text does not matter: probes only re-measure, rarely.
    if (!off_) {
        off_ = true;
        plain_steps_ = 0;
        if (!could_pay()) probe_every_ = 512;
    }
    if (costly()) {
        // A draft model that is off falls behind the text; a probe would first have to
        // catch up with all of it. So it stays off for the rest of the request and probes
        // once at the start of a later one (new_request()).
        if (!probe_pending_) return 0;
        probe_pending_ = false;
    } else {
        if (++plain_steps_ < probe_every_) return 0;
        plain_steps_ = 0;
        probe_every_ = std::min(probe_every_ * 2, 512);
    }
    int probe = std::max(1, n_min_);
    double probe_rate = 0.0;
    for (int k = std::max(1, n_min_); k <= n_max_; ++k)
        if (tokens_per_ms(k) > probe_rate) {
            probe_rate = tokens_per_ms(k);
            probe = k;
        }
    return probe;
}

void SpecController::observe_draft(int n_drafted, double ms) {
    // Drafts that came out: their cost per token. Attempts that drafted nothing (no match,
    // a first token below p_min): a cost per step of their own, weighted by how often they
    // happen — folding them into the per-token cost would make it grow without bound while
    // a drafter keeps finding nothing.
    ms = std::max(0.0, ms);
    empty_share_ = 0.9 * empty_share_ + (n_drafted > 0 ? 0.0 : 0.1);
    if (n_drafted > 0) {
        const double per = ms / n_drafted;
        draft_ms_ = draft_ms_ < 0 ? per : 0.8 * draft_ms_ + 0.2 * per;
    } else {
        empty_ms_ = empty_ms_ < 0 ? ms : 0.8 * empty_ms_ + 0.2 * ms;
        if (draft_ms_ < 0) draft_ms_ = ms;  // (a cost to go on until drafts come out)
    }
}

bool SpecController::costly() const {
    const double t1 = step_ms(1);
    return draft_ms_ > 0 && t1 > 0 && draft_ms_ > 0.05 * t1;
}

void SpecController::new_request() {
    if (draft_ms_ < 0 || step_ms(1) <= 0) return;
    if (costly()) {
        // A draft model: one probe at the start of this request if it is off (it catches
        // up with the new prompt once), after 1, 2, 4, then every 8 requests while probes
        // keep failing; a request that ends with it on resets that.
        if (!off_) {
            probe_requests_ = 1;
            requests_off_ = 0;
            return;
        }
        if (++requests_off_ >= probe_requests_ && could_pay()) {
            probe_pending_ = true;
            requests_off_ = 0;
            probe_requests_ = std::min(probe_requests_ * 2, 8);
        }
        return;
    }
    // Lookup, whose drafts cost next to nothing: what was learnt of the acceptance counts
    // half, and if it is off it probes again soon.
    trials_ *= 0.5;
    hits_ *= 0.5;
    if (off_ && could_pay()) {
        probe_every_ = 16;
        plain_steps_ = std::min(plain_steps_, 8);  // the first probe after 8 steps
    }
}

void SpecController::observe_step(int n_tokens, double ms) {
    if (n_tokens < 1 || n_tokens >= (int)step_ms_.size() || ms <= 0) return;
    double& t = step_ms_[(size_t)n_tokens];
    t = t > 0 ? 0.8 * t + 0.2 * ms : ms;
}

void SpecController::observe_accept(int n_drafted, int n_kept) {
    if (n_drafted <= 0) return;
    drafted_ += n_drafted;
    accepted_ += n_kept;
    ++n_observed_;
    // Positions tried: every kept draft and the first rejected one.
    trials_ = trials_ * 0.9 + n_kept + (n_kept < n_drafted ? 1 : 0);
    hits_ = hits_ * 0.9 + n_kept;
}

}  // namespace edgellm
