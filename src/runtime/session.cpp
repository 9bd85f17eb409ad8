#include "edgellm/session.h"

#include <algorithm>
#include <chrono>

namespace edgellm {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Length of the longest suffix of `text` that is a proper prefix of some stop string:
// those bytes might still become a stop string and are held back.
size_t held_back(std::string_view text, const std::vector<std::string>& stops) {
    size_t keep = 0;
    for (const std::string& s : stops)
        for (size_t k = std::min(s.size() - 1, text.size()); k > keep; --k)
            if (text.substr(text.size() - k) == std::string_view(s).substr(0, k)) {
                keep = k;
                break;
            }
    return keep;
}

}  // namespace

const char* stop_reason_name(StopReason r) {
    switch (r) {
        case StopReason::Eos:
            return "eos";
        case StopReason::StopString:
            return "stop";
        case StopReason::Length:
            return "length";
        case StopReason::ContextFull:
            return "context";
        case StopReason::Cancelled:
            return "cancelled";
    }
    return "?";
}

double GenerateResult::prompt_per_second() const {
    const int64_t n = n_prompt - n_cached;
    return prompt_ms > 0 ? (double)n * 1000.0 / prompt_ms : 0.0;
}

double GenerateResult::generate_per_second() const {
    return generate_ms > 0 ? (double)n_generated * 1000.0 / generate_ms : 0.0;
}

void StepTurns::acquire() {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t ticket = next_++;
    cv_.wait(lock, [&] { return serving_ == ticket; });
}

void StepTurns::release() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        ++serving_;
    }
    cv_.notify_all();
}

namespace {

// Holds a turn for one forward step (nothing to do without turns).
class Turn {
  public:
    explicit Turn(StepTurns* t) : t_(t) {
        if (t_) t_->acquire();
    }
    ~Turn() {
        if (t_) t_->release();
    }
    Turn(const Turn&) = delete;
    Turn& operator=(const Turn&) = delete;

  private:
    StepTurns* t_;
};

// Raises the context's abort flag source for the duration of one evaluation.
class AbortScope {
  public:
    AbortScope(Context& ctx, const std::atomic<bool>* flag) : ctx_(ctx) {
        ctx_.set_abort_flag(flag);
    }
    ~AbortScope() { ctx_.set_abort_flag(nullptr); }
    AbortScope(const AbortScope&) = delete;
    AbortScope& operator=(const AbortScope&) = delete;

  private:
    Context& ctx_;
};

}  // namespace

Session::Session(const Model& model, const Tokenizer& tok, Context& ctx, int seq)
    : model_(model), tok_(tok), ctx_(ctx), seq_(seq) {
    EDGELLM_ASSERT(seq >= 0 && seq < ctx.n_seq(), "the session's sequence is in the context");
    ctx_.truncate(0, seq_);
}

void Session::clear() {
    cached_.clear();
    ctx_.truncate(0, seq_);
}

Result<size_t> Session::save(const std::string& path) const {
    return ctx_.save_sequence(seq_, path, cached_);
}

Result<int64_t> Session::restore(const std::string& path) {
    cached_.clear();
    auto tokens = ctx_.load_sequence(seq_, path);
    if (!tokens) return Result<int64_t>::fail(tokens.error());
    cached_ = std::move(*tokens);
    return (int64_t)cached_.size();
}

Result<GenerateResult> Session::generate(std::span<const int32_t> prompt, const GenerateParams& p,
                                         const std::function<bool(std::string_view)>& on_text) {
    using R = Result<GenerateResult>;
    GenerateResult res;
    if (prompt.empty()) return R::fail("empty prompt");
    const int64_t n_ctx = ctx_.params().n_ctx;
    if ((int64_t)prompt.size() >= n_ctx)
        return R::fail("prompt of " + std::to_string(prompt.size()) +
                       " tokens does not fit the context of " + std::to_string(n_ctx));
    res.n_prompt = (int64_t)prompt.size();
    auto cancel_raised = [&] { return p.cancel && p.cancel->load(std::memory_order_relaxed); };

    // Reuse the longest common prefix; at least the last prompt token is evaluated, since
    // its logits start the generation.
    size_t common = 0;
    while (common < cached_.size() && common < prompt.size() && cached_[common] == prompt[common])
        ++common;
    if (common == prompt.size()) --common;
    common = (size_t)ctx_.truncate((int64_t)common, seq_);
    cached_.resize(common);
    res.n_cached = (int64_t)common;

    Sampler sampler(p.sampling, model_.hparams().n_vocab);
    for (int32_t t : prompt) sampler.accept(t);

    // Prefill, one batch per turn. The first token is sampled inside the last batch's turn:
    // the logits live in the context's scratch, which the next session's step overwrites.
    const auto t0 = Clock::now();
    const size_t n_batch = (size_t)std::max<int64_t>(1, ctx_.params().n_batch);
    int32_t next = -1;
    bool cancelled = false;
    for (size_t done = common; done < prompt.size() && !cancelled;) {
        const size_t n = std::min(n_batch, prompt.size() - done);
        Turn turn(p.turns);
        if (cancel_raised()) {
            cancelled = true;
            break;
        }
        Result<std::span<const float>> logits = [&] {
            AbortScope scope(ctx_, p.cancel);
            return ctx_.eval(prompt.subspan(done, n), false, seq_);
        }();
        if (!logits) {
            cached_.resize((size_t)ctx_.n_past(seq_));  // what the cache still holds
            if (cancel_raised() && logits.error() == Context::kAborted) {
                cancelled = true;
                break;
            }
            return R::fail(logits.error());
        }
        cached_.insert(cached_.end(), prompt.begin() + (long)done, prompt.begin() + (long)(done + n));
        done += n;
        if (done == prompt.size()) next = sampler.sample(*logits);
    }
    res.prompt_ms = ms_since(t0);
    if (cancelled) {
        res.stop = StopReason::Cancelled;
        return res;
    }
    res.first_token_ms = ms_since(t0);

    StreamingDetokenizer detok(tok_);
    std::string pending;  // text produced but not yet emitted (a stop string may be starting)
    auto emit = [&](std::string_view s) {
        if (s.empty() || cancelled) return;
        res.text.append(s);
        if (on_text && !on_text(s)) cancelled = true;
    };

    const auto t1 = Clock::now();
    while (p.n_predict != 0) {
        const int32_t tok = next;
        sampler.accept(tok);
        res.tokens.push_back(tok);
        ++res.n_generated;
        if (!p.ignore_eos && tok_.is_eog(tok)) {
            res.stop = StopReason::Eos;
            break;
        }
        pending += detok.push(tok);
        // A stop string ends the reply; the text before it is emitted, the rest dropped.
        size_t hit = std::string::npos;
        for (const std::string& s : p.stop) {
            const size_t at = s.empty() ? std::string::npos : pending.find(s);
            if (at != std::string::npos && at < hit) {
                hit = at;
                res.stop_string = s;
            }
        }
        if (hit != std::string::npos) {
            emit(std::string_view(pending).substr(0, hit));
            pending.clear();
            res.stop = StopReason::StopString;
            break;
        }
        const size_t keep = held_back(pending, p.stop);
        emit(std::string_view(pending).substr(0, pending.size() - keep));
        pending.erase(0, pending.size() - keep);
        if (cancelled || cancel_raised()) {
            cancelled = true;
            break;
        }
        if (p.n_predict > 0 && res.n_generated >= p.n_predict) {
            res.stop = StopReason::Length;
            break;
        }
        if (ctx_.n_past(seq_) >= n_ctx) {
            res.stop = StopReason::ContextFull;
            break;
        }
        Turn turn(p.turns);
        if (cancel_raised()) {
            cancelled = true;
            break;
        }
        auto logits = ctx_.eval(std::span<const int32_t>(&tok, 1), false, seq_);
        if (!logits) return R::fail(logits.error());
        cached_.push_back(tok);
        next = sampler.sample(*logits);
    }
    if (!cancelled && res.stop != StopReason::StopString) {
        pending += detok.flush();
        emit(pending);
    }
    if (cancelled) res.stop = StopReason::Cancelled;
    res.generate_ms = ms_since(t1);
    return res;
}

}  // namespace edgellm
