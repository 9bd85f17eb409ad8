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

Session::Session(const Model& model, const Tokenizer& tok, Context& ctx)
    : model_(model), tok_(tok), ctx_(ctx) {
    ctx_.truncate(0);
}

void Session::clear() {
    cached_.clear();
    ctx_.truncate(0);
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

    // Reuse the longest common prefix; at least the last prompt token is evaluated, since
    // its logits start the generation.
    size_t common = 0;
    while (common < cached_.size() && common < prompt.size() && cached_[common] == prompt[common])
        ++common;
    if (common == prompt.size()) --common;
    common = (size_t)ctx_.truncate((int64_t)common);
    cached_.resize(common);
    res.n_cached = (int64_t)common;

    const auto t0 = Clock::now();
    auto logits = ctx_.eval(prompt.subspan(common), false);
    if (!logits) return R::fail(logits.error());
    cached_.insert(cached_.end(), prompt.begin() + (long)common, prompt.end());
    res.prompt_ms = ms_since(t0);

    Sampler sampler(p.sampling, model_.hparams().n_vocab);
    for (int32_t t : prompt) sampler.accept(t);
    StreamingDetokenizer detok(tok_);
    std::string pending;  // text produced but not yet emitted (a stop string may be starting)
    bool cancelled = false;
    auto emit = [&](std::string_view s) {
        if (s.empty() || cancelled) return;
        res.text.append(s);
        if (on_text && !on_text(s)) cancelled = true;
    };

    const auto t1 = Clock::now();
    std::span<const float> cur = *logits;
    while (p.n_predict != 0) {
        const int32_t tok = sampler.sample(cur);
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
        if (cancelled) {
            res.stop = StopReason::Cancelled;
            break;
        }
        if (p.n_predict > 0 && res.n_generated >= p.n_predict) {
            res.stop = StopReason::Length;
            break;
        }
        if (ctx_.n_past() >= n_ctx) {
            res.stop = StopReason::ContextFull;
            break;
        }
        auto next = ctx_.eval(std::span<const int32_t>(&tok, 1), false);
        if (!next) return R::fail(next.error());
        cached_.push_back(tok);
        cur = *next;
    }
    if (res.stop != StopReason::StopString && res.stop != StopReason::Cancelled) {
        pending += detok.flush();
        emit(pending);
    }
    if (cancelled) res.stop = StopReason::Cancelled;
    res.generate_ms = ms_since(t1);
    return res;
}

}  // namespace edgellm
