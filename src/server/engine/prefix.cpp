// Prefixes: the prompt cache (RAM and disk, restored into the slots at start-up), the reuse
// of what a slot holds, and the summarize context policy (the oldest turns condensed by the
// model itself).
#include "server/server_impl.h"

#include <algorithm>
#include <cstdio>

#include "server/http/disconnect_watch.h"

namespace edgellm::server {

void Server::Impl::open_prompt_cache() {
    if (cfg.cache_ram_mib == 0 && cfg.prompt_cache_dir.empty()) return;
    PromptCacheOptions o;
    o.key = live.cache_key + lora_key_of(lora_startup);  // (what a state was computed with, adapters too)
    o.ram_bytes = cfg.cache_ram_mib < 0 ? SIZE_MAX : (size_t)cfg.cache_ram_mib << 20;
    o.dir = cfg.prompt_cache_dir;
    o.disk_bytes = (size_t)std::max<int64_t>(0, cfg.prompt_cache_max_mib) << 20;
    o.whole_entries = live.ctx->recurrent_reason() != nullptr;
    live.prompt_cache = std::make_unique<PromptCache>(o);
    for (const std::string& w : live.prompt_cache->open()) {
        log("warning: prompt cache: %s", w.c_str());
        if (w.rfind("cannot create", 0) == 0) degrade("prompt cache: " + w);
    }
    if (o.dir.empty()) return;
    const auto st = live.prompt_cache->stats();
    log("prompt cache: %zu entries, %.1f MiB of %lld MiB in %s", st.disk_entries,
        (double)st.disk_bytes / 1048576.0, (long long)cfg.prompt_cache_max_mib, o.dir.c_str());
    // The newest entries go straight into the slots: the first request after a restart
    // finds its prefix there.
    const auto newest = live.prompt_cache->newest(live.slots.size());
    for (size_t i = 0; i < newest.size(); ++i) {
        const auto t0 = Clock::now();
        auto r = live.prompt_cache->restore(newest[i].id, live.slots[i]->session->cache(), {});
        if (r)
            log("prompt cache: slot %zu holds %lld tokens from %s (%.0f ms)", i, (long long)*r,
                newest[i].file.c_str(), ms_between(t0, Clock::now()));
        else
            log("warning: prompt cache: %s", r.error().c_str());
    }
    for (const std::string& w : live.prompt_cache->take_warnings()) (void)w;  // logged above
}

std::optional<ApiError> Server::Impl::condense(Slot* slot, GenRequest& g, Prepared* p,
                                               http::Response& res) {
    const auto t0 = Clock::now();
    const int64_t n_ctx = n_ctx_slot(), n_before = (int64_t)p->prompt.size();
    const int summary_cap = std::max(16, std::min<int>(cfg.summary_max_tokens, (int)(n_ctx / 4)));
    const size_t pinned = pinned_messages(g.messages);
    const std::vector<size_t> points = condense_points(g.messages, pinned);
    auto tokens_of = [&](const std::vector<ChatMessage>& m, std::string* text) {
        GenRequest r = g;
        r.messages = m;
        bool bos_in_text = false;
        *text = render(r, &bos_in_text);
        return live.tok->tokenize(*text, !bos_in_text, true);
    };
    // The fewest turns whose summary (at most summary_cap tokens) leaves room for the reply.
    const std::string placeholder(4, ' ');
    size_t k = 0;
    for (size_t at : points) {
        std::string text;
        const auto t = tokens_of(with_summary(g.messages, pinned, at, placeholder), &text);
        k = at;
        if ((int64_t)t.size() + summary_cap + p->reserve <= n_ctx) break;
    }
    std::span<const ChatMessage> turns(g.messages.data() + pinned, k);
    // A kept summary of these turns, or of the longest run of them that has one.
    std::string summary;
    size_t done = 0;
    bool cached = true;
    for (size_t j = k; j > 0 && done == 0; --j)
        if (auto s = summaries.get(SummaryCache::key(turns.first(j)))) {
            summary = *s;
            done = j;
        }
    int64_t summary_ms_tokens = 0;
    while (done < k) {
        cached = false;
        // As many of the remaining turns as the summarizer's own prompt can hold.
        size_t upto = k;
        std::vector<int32_t> prompt;
        std::string text;
        for (;;) {
            prompt = tokens_of(summary_request(turns.subspan(done, upto - done), summary), &text);
            if ((int64_t)prompt.size() + summary_cap < n_ctx || upto == done + 1) break;
            --upto;
        }
        if ((int64_t)prompt.size() + summary_cap >= n_ctx)
            return ApiError{400, "exceed_context_size_error",
                            "--context-policy summarize: one message alone (" +
                                std::to_string(prompt.size()) + " tokens to summarize) does not fit "
                                "the context of " + std::to_string(n_ctx),
                            {{"n_ctx", n_ctx}}};
        GenerateParams gp;
        gp.n_predict = summary_cap;
        gp.sampling.temperature = 0.0f;
        gp.sampling.repeat_penalty = 1.15f;  // small models loop on the turns' phrases
        gp.sampling.repeat_last_n = 128;
        gp.cancel = &slot->cancel;
        gp.batcher = live.batcher.get();
        slot->cancel = false;
        (void)reuse_prefix(slot, prompt, true);
        Result<GenerateResult> r = Result<GenerateResult>::fail("not run");
        {
            StepBatcher::Generating active(live.batcher.get());
            DisconnectWatch watch(res, slot->cancel);
            r = slot->session->generate(prompt, gp, nullptr);
        }
        if (!r) return ApiError{500, "server_error", "summarizing the history failed: " + r.error(), {}};
        if (r->stop == StopReason::Cancelled) return ApiError{499, "", "", {}};
        summary_ms_tokens += r->n_generated;
        std::string s = r->text;
        while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
        summary = s;
        done = upto;
        summaries.put(SummaryCache::key(turns.first(done)), summary);
    }
    std::vector<ChatMessage> condensed = with_summary(g.messages, pinned, k, summary);
    std::string text;
    std::vector<int32_t> prompt = tokens_of(condensed, &text);
    if ((int64_t)prompt.size() >= n_ctx)
        return ApiError{400, "exceed_context_size_error",
                        "the request exceeds the available context size even with its oldest "
                        "turns summarized: the prompt has " + std::to_string(prompt.size()) +
                            " tokens and a slot holds " + std::to_string(n_ctx),
                        {{"n_prompt_tokens", prompt.size()}, {"n_ctx", n_ctx}}};
    g.messages = std::move(condensed);
    p->prompt = std::move(prompt);
    p->prompt_text = std::move(text);
    p->context = {{"policy", "summarize"},
                  {"summarized_messages", k},
                  {"prompt_tokens_before", n_before},
                  {"prompt_tokens", p->prompt.size()},
                  {"summary", summary},
                  {"summary_cached", cached}};
    char buf[200];
    std::snprintf(buf, sizeof buf, " | context: summarized the %zu oldest messages (%lld -> %zu prompt tokens; "
                  "summary %s in %.0f ms)", k, (long long)n_before, p->prompt.size(),
                  cached ? "kept from an earlier turn" : (std::to_string(summary_ms_tokens) + " tokens").c_str(),
                  ms_between(t0, Clock::now()));
    p->context_note = buf;
    return std::nullopt;
}

std::string Server::Impl::reuse_prefix(Slot* slot, const std::vector<int32_t>& prompt,
                                       bool cache_prompt) {
    if (!live.prompt_cache) return "";
    KvSequence& seq = slot->session->cache();
    // At least the prompt's last token is evaluated (its logits start the reply).
    const int64_t limit = (int64_t)prompt.size() - 1;
    const int64_t have = cache_prompt ? seq.reusable_prefix(prompt, limit) : 0;
    // A cached prefix is worth restoring when it saves more than a few tokens' prefill.
    constexpr int64_t kMinGain = 8;
    std::optional<PromptCache::Hit> hit;
    if (cache_prompt) hit = live.prompt_cache->find(prompt, have + kMinGain);
    // What the slot holds beyond the part this prompt keeps would be lost: keep it.
    if (cfg.cache_idle_slots && seq.size() - have >= live.prompt_cache->options().min_tokens)
        live.prompt_cache->store(seq, true, false);
    std::string note;
    if (hit) {
        const auto t0 = Clock::now();
        auto r = live.prompt_cache->restore(hit->id, seq, std::span(prompt).first((size_t)std::max<int64_t>(1, limit)));
        if (slot->model_drafter) slot->model_drafter->clear();
        char buf[256];
        if (r)
            std::snprintf(buf, sizeof buf, " | restored %lld cached tokens from %s in %.0f ms",
                          (long long)*r,
                          hit->in_ram ? "RAM" : ("disk " + hit->file).c_str(), ms_between(t0, Clock::now()));
        else
            std::snprintf(buf, sizeof buf, " | prompt cache: %s", r.error().c_str());
        note = buf;
    }
    for (const std::string& w : live.prompt_cache->take_warnings()) log("warning: prompt cache: %s", w.c_str());
    return note;
}

}  // namespace edgellm::server
