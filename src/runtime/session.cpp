#include "edgellm/session.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <optional>

#include "edgellm/speculative.h"
#include "model/digest.h"

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
    return generate_ms > 0 && n_generated > 1 ? (double)(n_generated - 1) * 1000.0 / generate_ms
                                              : 0.0;
}

struct StepBatcher::Request {
    int seq;
    std::span<const int32_t> tokens;
    std::span<float> out;
    const std::atomic<bool>* cancel;
    bool all_logits;
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

void StepBatcher::exclusive(const std::function<void()>& fn) {
    {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return !running_; });
        running_ = true;
    }
    struct Done {
        StepBatcher* b;
        ~Done() {
            {
                std::lock_guard<std::mutex> lock(b->mu_);
                b->running_ = false;
            }
            b->cv_.notify_all();
        }
    } done{this};
    fn();
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
                                         std::span<float> out, const std::atomic<bool>* cancel,
                                         bool all_logits) {
    using R = Result<std::monostate>;
    const int64_t n_batch = ctx_.params().n_batch;
    if (tokens.empty() || (int64_t)tokens.size() > n_batch)
        return R::fail("a step of " + std::to_string(tokens.size()) + " tokens (1.." +
                       std::to_string(n_batch) + ")");
    Request me{seq, tokens, out, cancel, all_logits, Clock::now(), false, {}};
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
        int64_t total = 0, rows = 0;
        const int64_t max_rows = ctx_.params().n_outputs;
        for (auto it = pending_.begin(); it != pending_.end() && n < batch.size();) {
            Request* r = *it;
            bool dup = false;
            for (size_t i = 0; i < n; ++i) dup |= batch[i]->seq == r->seq;
            const int64_t r_rows = r->all_logits ? (int64_t)r->tokens.size() : 1;
            if (dup || total + (int64_t)r->tokens.size() > n_batch ||
                (n > 0 && rows + r_rows > max_rows)) {
                ++it;
                continue;
            }
            batch[n] = r;
            parts[n] = {r->seq, r->tokens, r->all_logits};
            total += (int64_t)r->tokens.size();
            rows += r_rows;
            ++n;
            it = pending_.erase(it);
        }
        running_ = true;
        lock.unlock();
        ctx_.set_abort_flag(n == 1 ? batch[0]->cancel : nullptr);
        auto logits = ctx_.eval_batch(std::span<const Context::SeqTokens>(parts.data(), n));
        ctx_.set_abort_flag(nullptr);
        if (logits) {
            const size_t n_vocab = logits->size() / (size_t)rows;
            size_t at = 0;
            for (size_t i = 0; i < n; ++i) {
                const size_t k = batch[i]->all_logits ? batch[i]->tokens.size() : 1;
                std::copy_n(logits->data() + at * n_vocab,
                            std::min(k * n_vocab, batch[i]->out.size()), batch[i]->out.data());
                at += k;
            }
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

KvSequence::KvSequence(Context& ctx, int seq) : ctx_(ctx), seq_(seq) {
    EDGELLM_ASSERT(seq >= 0 && seq < ctx.n_seq(), "the sequence is in the context");
    ctx_.truncate(0, seq_);
}

void KvSequence::sync() {
    tokens_.resize((size_t)std::min<int64_t>((int64_t)tokens_.size(), ctx_.n_past(seq_)));
    n_.store((int64_t)tokens_.size(), std::memory_order_relaxed);
}

Result<std::span<const float>> KvSequence::eval(std::span<const int32_t> tokens, bool all_logits,
                                                const std::atomic<bool>* cancel,
                                                StepBatcher* batcher) {
    using R = Result<std::span<const float>>;
    std::span<const float> out;
    if (!batcher) {
        AbortScope scope(ctx_, cancel);
        auto r = ctx_.eval(tokens, all_logits, seq_);
        if (!r) {
            sync();
            return r;
        }
        out = *r;
    } else {
        const size_t n_vocab = (size_t)ctx_.n_vocab();
        const size_t need = (all_logits ? tokens.size() : 1) * n_vocab;
        if (logits_.size() < need) logits_.resize(need);
        auto r = batcher->eval(seq_, tokens, std::span<float>(logits_.data(), need), cancel,
                               all_logits);
        if (!r) {
            sync();
            return R::fail(r.error());
        }
        out = std::span<const float>(logits_.data(), need);
    }
    tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
    n_.store((int64_t)tokens_.size(), std::memory_order_relaxed);
    return out;
}

Result<std::vector<float>> KvSequence::embed(std::span<const int32_t> tokens,
                                             Context::Pooling pooling,
                                             const std::atomic<bool>* cancel,
                                             StepBatcher* batcher) {
    Result<std::vector<float>> r = Result<std::vector<float>>::fail("not run");
    auto run = [&] {
        AbortScope scope(ctx_, cancel);
        r = ctx_.embed(tokens, pooling, seq_);
    };
    if (batcher)
        batcher->exclusive(run);
    else
        run();
    if (r)
        tokens_.assign(tokens.begin(), tokens.end());
    else
        tokens_.clear();
    n_.store((int64_t)tokens_.size(), std::memory_order_relaxed);
    return r;
}

int64_t KvSequence::rollback(int64_t n_keep) {
    n_keep = std::clamp<int64_t>(n_keep, 0, (int64_t)tokens_.size());
    const int64_t kept = ctx_.truncate(n_keep, seq_);
    tokens_.resize((size_t)kept);
    n_.store(kept, std::memory_order_relaxed);
    return kept;
}

void KvSequence::save_checkpoint(Checkpoint* into) const {
    into->n = (int64_t)tokens_.size();
    Digest d;
    d.add(tokens_.data(), tokens_.size() * sizeof(int32_t));
    into->digest = d.value();
    ctx_.save_recurrent(&into->state, seq_);
}

Result<int64_t> KvSequence::rollback_to(const Checkpoint& cp) {
    using R = Result<int64_t>;
    if (cp.n < 0) return R::fail("the checkpoint was never taken");
    if (cp.n > (int64_t)tokens_.size())
        return R::fail("the sequence holds " + std::to_string(tokens_.size()) +
                       " tokens, fewer than the checkpoint's " + std::to_string(cp.n));
    Digest d;
    d.add(tokens_.data(), (size_t)cp.n * sizeof(int32_t));
    if (d.value() != cp.digest)
        return R::fail("the sequence no longer starts with the checkpoint's tokens");
    auto n = ctx_.restore_recurrent(cp.state, seq_);
    if (!n) {
        sync();  // (a ring that could not go back empties the sequence)
        return n;
    }
    tokens_.resize((size_t)*n);
    n_.store(*n, std::memory_order_relaxed);
    return n;
}

namespace {

int64_t common_part(std::span<const int32_t> held, std::span<const int32_t> tokens, int64_t max_keep) {
    int64_t common = 0;
    const int64_t limit = std::min<int64_t>({(int64_t)held.size(), (int64_t)tokens.size(), max_keep});
    while (common < limit && held[(size_t)common] == tokens[(size_t)common]) ++common;
    return common;
}

}  // namespace

int64_t KvSequence::keep_prefix(std::span<const int32_t> tokens, int64_t max_keep) {
    const int64_t common = common_part(tokens_, tokens, max_keep);
    if (common == (int64_t)tokens_.size()) return common;
    return rollback(common);
}

int64_t KvSequence::reusable_prefix(std::span<const int32_t> tokens, int64_t max_keep) const {
    const int64_t common = common_part(tokens_, tokens, max_keep);
    return common == (int64_t)tokens_.size() || can_rollback() ? common : 0;
}

int64_t KvSequence::shift(int64_t n_keep, int64_t n_discard) {
    n_keep = std::clamp<int64_t>(n_keep, 0, (int64_t)tokens_.size());
    n_discard = std::clamp<int64_t>(n_discard, 0, (int64_t)tokens_.size() - n_keep);
    const int64_t dropped = ctx_.shift(n_keep, n_discard, seq_);
    tokens_.erase(tokens_.begin() + n_keep, tokens_.begin() + n_keep + dropped);
    n_.store((int64_t)tokens_.size(), std::memory_order_relaxed);
    return dropped;
}

Result<int64_t> KvSequence::restore(std::span<const int32_t> tokens, std::span<const uint8_t> kv) {
    using R = Result<int64_t>;
    tokens_.clear();
    n_.store(0, std::memory_order_relaxed);
    const int64_t n_vocab = ctx_.model().hparams().n_vocab;
    for (int32_t t : tokens)
        if (t < 0 || t >= n_vocab) {
            ctx_.truncate(0, seq_);
            return R::fail("it is damaged (token id " + std::to_string(t) + " is outside the vocabulary)");
        }
    auto n = ctx_.restore(kv, seq_);
    if (!n) return n;
    if (*n != (int64_t)tokens.size()) {
        ctx_.truncate(0, seq_);
        return R::fail("it is damaged (its cache holds " + std::to_string(*n) + " positions for " +
                       std::to_string(tokens.size()) + " tokens)");
    }
    tokens_.assign(tokens.begin(), tokens.end());
    n_.store(*n, std::memory_order_relaxed);
    return *n;
}

Session::Session(const Model& model, const Tokenizer& tok, Context& ctx, int seq)
    : model_(model), tok_(tok), ctx_(ctx), cache_(ctx, seq) {}

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
    const size_t common = (size_t)cache_.keep_prefix(prompt, (int64_t)prompt.size() - 1);
    res.n_cached = (int64_t)common;

    Sampler sampler(p.sampling, model_.hparams().n_vocab);
    for (int32_t t : prompt) sampler.accept_prompt(t);
    auto sample = [&](std::span<const float> logits) {
        if (p.probs && p.post_sampling_probs) {
            TokenProbs tp;
            tp.id = sampler.sample(logits, (size_t)std::max(0, p.n_probs), &tp.top, &tp.logprob);
            p.probs->push_back(std::move(tp));
            return p.probs->back().id;
        }
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
    StepBatcher::Generating generating(p.batcher);
    const auto t0 = Clock::now();
    int32_t next = -1;
    bool cancelled = false;
    auto report = [&](size_t done, bool start) {
        if (p.on_prompt_progress)
            p.on_prompt_progress((int64_t)done, (int64_t)prompt.size(), (int64_t)common,
                                 start ? 0.0 : ms_since(t0));
    };
    report(common, true);
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
        auto logits = cache_.eval(prompt.subspan(done, n), false, p.cancel, p.batcher);
        if (!logits) {
            if (cancel_raised() && logits.error() == Context::kAborted) {
                cancelled = true;
                break;
            }
            return R::fail(logits.error());
        }
        done += n;
        report(done, false);
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
    // Takes a sampled token into the reply: true when generation goes on after it.
    bool stopped = false;
    auto take = [&](int32_t tok) {
        sampler.accept(tok);
        res.tokens.push_back(tok);
        ++res.n_generated;
        if (p.progress) p.progress->store(res.n_generated, std::memory_order_relaxed);
        if (!p.ignore_eos && tok_.is_eog(tok)) {
            res.stop = StopReason::Eos;
            return false;
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
            return false;
        }
        const size_t keep = held_back(pending, p.stop);
        emit(std::string_view(pending).substr(0, pending.size() - keep));
        pending.erase(0, pending.size() - keep);
        if (cancelled || cancel_raised()) {
            cancelled = true;
            return false;
        }
        if (p.ignore_eos && sampler.grammar_done()) {  // nothing but the end can follow
            res.stop = StopReason::Eos;
            return false;
        }
        if (p.n_predict > 0 && res.n_generated >= p.n_predict) {
            res.stop = StopReason::Length;
            return false;
        }
        return true;
    };

    // Speculation: the drafter's proposals for what follows `next`, checked in the step
    // that evaluates it.
    const SpeculativeParams& sp = p.spec;
    if (sp.drafter) sp.drafter->begin_request();
    std::vector<int32_t> history, drafts, step;
    if (sp.drafter) {
        history.reserve((size_t)n_ctx);
        drafts.reserve((size_t)std::max(0, sp.n_max));
        step.reserve((size_t)std::max(0, sp.n_max) + 1);
    }
    const auto t1 = Clock::now();
    while (p.n_predict != 0 && !stopped) {
        if (!take(next)) break;
        if (cache_.size() >= n_ctx && p.context_shift && cache_.can_rollback()) {
            // llama-server's context shift: keep the first n_keep, drop half of the rest.
            int64_t n_keep = p.n_keep < 0 ? (int64_t)prompt.size() : p.n_keep;
            if (tok_.bos() >= 0 && !prompt.empty() && prompt[0] == tok_.bos()) n_keep += 1;
            n_keep = std::min<int64_t>(n_keep, n_ctx - 4);
            const int64_t n_left = cache_.size() - n_keep;
            const int64_t n_discard = std::clamp<int64_t>(p.n_discard > 0 ? p.n_discard : n_left / 2,
                                                          1, std::max<int64_t>(1, n_left - 1));
            res.n_discarded += cache_.shift(n_keep, n_discard);
            res.n_kept = n_keep;
            res.n_shifts++;
        }
        const int64_t held = cache_.size();
        if (held >= n_ctx) {
            res.stop = StopReason::ContextFull;
            break;
        }
        if (cancel_raised()) {
            cancelled = true;
            break;
        }
        // How many drafts this step may carry: within the context and the tokens still to
        // generate (the step's own sample is one of them); the drafter may draft fewer.
        drafts.clear();
        int max_draft = 0;
        if (sp.drafter && cache_.can_rollback()) {
            max_draft = sp.n_max;
            max_draft = (int)std::min<int64_t>(max_draft, n_ctx - held - 1);
            if (p.n_predict > 0)
                max_draft = (int)std::min<int64_t>(max_draft, p.n_predict - res.n_generated - 1);
        }
        if (max_draft > 0 && max_draft >= sp.n_min) {
            history.assign(cache_.tokens().begin(), cache_.tokens().end());
            history.push_back(next);
            std::optional<GrammarMatcher> g = sampler.grammar_matcher();
            auto d = sp.drafter->draft(history, max_draft, g ? &*g : nullptr, p.cancel, &drafts);
            if (!d) return R::fail("drafting: " + d.error());
            if ((int)drafts.size() < sp.n_min) drafts.clear();
            if (cancel_raised()) {
                cancelled = true;
                break;
            }
        }
        step.assign(1, next);
        step.insert(step.end(), drafts.begin(), drafts.end());
        const auto ts = Clock::now();
        auto logits = cache_.eval(step, !drafts.empty(), nullptr, p.batcher);
        if (!logits) return R::fail(logits.error());
        const double step_ms = ms_since(ts);
        const size_t n_vocab = (size_t)model_.hparams().n_vocab;
        // Each position's logits in turn: a draft the sampler also chooses is kept (it is
        // evaluated already), the first one it does not choose ends the step.
        size_t kept = 0;
        for (size_t i = 0;; ++i) {
            const int32_t t = sample(logits->subspan(i * n_vocab, n_vocab));
            if (i < drafts.size() && t == drafts[i]) {
                ++kept;
                if (!take(t)) {
                    stopped = true;
                    break;
                }
                continue;
            }
            next = t;
            break;
        }
        if (sp.drafter) sp.drafter->observe((int)step.size(), step_ms, (int)drafts.size(), (int)kept);
        if (!drafts.empty()) {
            // Forget the K/V of the drafts that were not kept.
            const int64_t want = held + 1 + (int64_t)kept;
            if (cache_.rollback(want) != want)
                return R::fail("the KV cache could not drop the drafts that were not kept");
            res.n_drafted += (int64_t)drafts.size();
            res.n_accepted += (int64_t)kept;
            res.n_draft_steps++;
        }
    }
    if (!cancelled && res.stop != StopReason::StopString) {
        pending += detok.flush();
        emit(pending);
    }
    if (cancelled) res.stop = StopReason::Cancelled;
    res.n_reasoning = sampler.thinking_tokens();
    res.generate_ms = ms_since(t1);
    return res;
}

}  // namespace edgellm
