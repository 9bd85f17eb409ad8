#include "edgellm/session.h"

#include <algorithm>
#include <array>
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
    return generate_ms > 0 && n_generated > 1 ? (double)n_generated * 1000.0 / generate_ms : 0.0;
}

struct StepBatcher::Request {
    int seq;
    std::span<const int32_t> tokens;
    std::span<float> out;
    const std::atomic<bool>* cancel;
    Clock::time_point since;
    bool done = false;
    std::string error;
};

StepBatcher::StepBatcher(Context& ctx, std::chrono::microseconds gather)
    : ctx_(ctx), gather_(gather) {
    pending_.reserve(256);  // a session has at most one step waiting; at most 256 sequences
}

void StepBatcher::enter() {
    std::lock_guard<std::mutex> lock(mu_);
    ++active_;
}

void StepBatcher::leave() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        --active_;
    }
    cv_.notify_all();  // a step waiting for this session's may run now
}

int StepBatcher::active() const {
    std::lock_guard<std::mutex> lock(mu_);
    return active_;
}

int64_t StepBatcher::n_batch() const {
    return ctx_.params().n_batch;
}

uint64_t StepBatcher::passes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return passes_;
}

uint64_t StepBatcher::steps() const {
    std::lock_guard<std::mutex> lock(mu_);
    return steps_;
}

Result<std::monostate> StepBatcher::eval(int seq, std::span<const int32_t> tokens,
                                         std::span<float> out, const std::atomic<bool>* cancel) {
    using R = Result<std::monostate>;
    const int64_t n_batch = ctx_.params().n_batch;
    if (tokens.empty() || (int64_t)tokens.size() > n_batch)
        return R::fail("a step of " + std::to_string(tokens.size()) + " tokens (1.." +
                       std::to_string(n_batch) + ")");
    Request me{seq, tokens, out, cancel, Clock::now(), false, {}};
    std::unique_lock<std::mutex> lock(mu_);
    pending_.push_back(&me);
    cv_.notify_all();
    while (!me.done) {
        // A pass runs when every generating session has a step waiting, or when the oldest
        // step has waited `gather` (another session may be busy writing to its client).
        if (running_ || pending_.empty()) {
            cv_.wait(lock);
            continue;
        }
        const auto deadline = pending_.front()->since + gather_;
        if ((int)pending_.size() < active_ && Clock::now() < deadline) {
            cv_.wait_until(lock, deadline);
            continue;
        }
        // This thread runs the pass: the pending steps in order, as many as fit the batch,
        // one per sequence.
        std::array<Request*, 256> batch;
        std::array<Context::SeqTokens, 256> parts;
        size_t n = 0;
        int64_t total = 0;
        for (auto it = pending_.begin(); it != pending_.end() && n < batch.size();) {
            Request* r = *it;
            bool dup = false;
            for (size_t i = 0; i < n; ++i) dup |= batch[i]->seq == r->seq;
            if (dup || total + (int64_t)r->tokens.size() > n_batch) {
                ++it;
                continue;
            }
            batch[n] = r;
            parts[n] = {r->seq, r->tokens};
            total += (int64_t)r->tokens.size();
            ++n;
            it = pending_.erase(it);
        }
        running_ = true;
        lock.unlock();
        ctx_.set_abort_flag(n == 1 ? batch[0]->cancel : nullptr);
        auto logits = ctx_.eval_batch(std::span<const Context::SeqTokens>(parts.data(), n));
        ctx_.set_abort_flag(nullptr);
        if (logits) {
            const size_t n_vocab = logits->size() / n;
            for (size_t i = 0; i < n; ++i)
                std::copy_n(logits->data() + i * n_vocab, std::min(n_vocab, batch[i]->out.size()),
                            batch[i]->out.data());
        }
        lock.lock();
        for (size_t i = 0; i < n; ++i) {
            if (!logits) batch[i]->error = logits.error();
            batch[i]->done = true;
        }
        ++passes_;
        steps_ += n;
        running_ = false;
        cv_.notify_all();
    }
    if (!me.error.empty()) return R::fail(me.error);
    return std::monostate{};
}

namespace {

// A session counted as generating by the batcher while it lives.
class Generating {
  public:
    explicit Generating(StepBatcher* b) : b_(b) {
        if (b_) b_->enter();
    }
    ~Generating() {
        if (b_) b_->leave();
    }
    Generating(const Generating&) = delete;
    Generating& operator=(const Generating&) = delete;

  private:
    StepBatcher* b_;
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
    n_cached_.store((int64_t)cached_.size(), std::memory_order_relaxed);
    ctx_.truncate(0, seq_);
}

Result<size_t> Session::save(const std::string& path) const {
    return ctx_.save_sequence(seq_, path, cached_);
}

Result<int64_t> Session::restore(const std::string& path) {
    cached_.clear();
    n_cached_.store((int64_t)cached_.size(), std::memory_order_relaxed);
    auto tokens = ctx_.load_sequence(seq_, path);
    if (!tokens) return Result<int64_t>::fail(tokens.error());
    cached_ = std::move(*tokens);
    n_cached_.store((int64_t)cached_.size(), std::memory_order_relaxed);
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
    n_cached_.store((int64_t)cached_.size(), std::memory_order_relaxed);
    res.n_cached = (int64_t)common;

    Sampler sampler(p.sampling, model_.hparams().n_vocab);
    for (int32_t t : prompt) sampler.accept_prompt(t);
    auto sample = [&](std::span<const float> logits) {
        const int32_t t = sampler.sample(logits);
        if (p.probs) {
            TokenProbs tp;
            tp.id = t;
            tp.logprob = token_logprobs(logits, t, (size_t)std::max(0, p.n_probs), &tp.top);
            p.probs->push_back(std::move(tp));
        }
        return t;
    };

    // Prefill in batches. The first token is sampled from the last batch's logits.
    Generating generating(p.batcher);
    std::vector<float> own_logits;  // a batched step's logits, copied out for this session
    if (p.batcher) own_logits.resize((size_t)model_.hparams().n_vocab);
    // One step: through the batcher (with the other sessions' steps) or straight on the
    // context. The logits stay valid until this session's next step.
    auto step = [&](std::span<const int32_t> toks, const std::atomic<bool>* abort_flag)
        -> Result<std::span<const float>> {
        if (!p.batcher) {
            AbortScope scope(ctx_, abort_flag);
            return ctx_.eval(toks, false, seq_);
        }
        auto r = p.batcher->eval(seq_, toks, own_logits, abort_flag);
        if (!r) return Result<std::span<const float>>::fail(r.error());
        return std::span<const float>(own_logits);
    };
    const auto t0 = Clock::now();
    int32_t next = -1;
    bool cancelled = false;
    for (size_t done = common; done < prompt.size();) {
        // With other sessions, leave room in the batch for their decoded tokens.
        size_t n_batch = (size_t)std::max<int64_t>(1, ctx_.params().n_batch);
        if (p.batcher)
            n_batch = (size_t)std::max<int64_t>(1, (int64_t)n_batch - (p.batcher->active() - 1));
        const size_t n = std::min(n_batch, prompt.size() - done);
        if (cancel_raised()) {
            cancelled = true;
            break;
        }
        auto logits = step(prompt.subspan(done, n), p.cancel);
        if (!logits) {
            cached_.resize((size_t)ctx_.n_past(seq_));  // what the cache still holds
            n_cached_.store((int64_t)cached_.size(), std::memory_order_relaxed);
            if (cancel_raised() && logits.error() == Context::kAborted) {
                cancelled = true;
                break;
            }
            return R::fail(logits.error());
        }
        cached_.insert(cached_.end(), prompt.begin() + (long)done, prompt.begin() + (long)(done + n));
        n_cached_.store((int64_t)cached_.size(), std::memory_order_relaxed);
        done += n;
        if (done == prompt.size()) next = sample(*logits);
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
        if (p.progress) p.progress->store(res.n_generated, std::memory_order_relaxed);
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
        if (p.ignore_eos && sampler.grammar_done()) {  // nothing but the end can follow
            res.stop = StopReason::Eos;
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
        if (cancel_raised()) {
            cancelled = true;
            break;
        }
        auto logits = step(std::span<const int32_t>(&tok, 1), nullptr);
        if (!logits) return R::fail(logits.error());
        cached_.push_back(tok);
        n_cached_.store((int64_t)cached_.size(), std::memory_order_relaxed);
        next = sample(*logits);
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
