// The answers each API sends back: whole bodies (OpenAI's chat and completions, llama.cpp's
// native completion), SSE chunks, usage and timings, token probabilities.
#include "server/api/api.h"

#include <random>

namespace edgellm::server {

const char* finish_reason(StopReason r) {
    switch (r) {
        case StopReason::Length:
        case StopReason::ContextFull:
            return "length";
        default:
            return "stop";
    }
}

json timings_json(const GenerateResult& r) {
    const int64_t prompt_n = r.n_prompt - r.n_cached;
    auto per_token = [](double ms, int64_t n) { return n > 0 ? ms / (double)n : 0.0; };
    auto per_second = [](double ms, int64_t n) { return ms > 0 ? 1000.0 * (double)n / ms : 0.0; };
    // (one generated token took no decode step: its speed is not measured, 0)
    json t = json{{"cache_n", r.n_cached},
                {"prompt_n", prompt_n},
                {"prompt_ms", r.prompt_ms},
                {"prompt_per_token_ms", per_token(r.prompt_ms, prompt_n)},
                {"prompt_per_second", per_second(r.prompt_ms, prompt_n)},
                {"predicted_n", r.n_generated},
                {"predicted_ms", r.generate_ms},
                {"predicted_per_token_ms", r.n_generated > 1 ? per_token(r.generate_ms, r.n_generated - 1) : 0.0},
                {"predicted_per_second", r.generate_per_second()}};
    if (r.n_drafted > 0) {  // (llama-server's names)
        t["draft_n"] = r.n_drafted;
        t["draft_n_accepted"] = r.n_accepted;
    }
    return t;
}

json context_shift_json(const GenerateResult& r) {
    if (r.n_shifts == 0) return nullptr;
    return json{{"policy", "shift"}, {"shifts", r.n_shifts}, {"n_discarded", r.n_discarded},
                {"n_keep", r.n_kept}};
}

json usage_json(const GenerateResult& r) {
    return json{{"completion_tokens", r.n_generated},
                {"prompt_tokens", r.n_prompt},
                {"total_tokens", r.n_prompt + r.n_generated},
                {"prompt_tokens_details", {{"cached_tokens", r.n_cached}}},
                {"completion_tokens_details", {{"reasoning_tokens", r.n_reasoning}}}};
}

namespace {

json envelope(const GenOutcome& o, const char* object, json choices) {
    return json{{"choices", std::move(choices)},
                {"created", o.created},
                {"model", o.model},
                {"system_fingerprint", "edgellm"},
                {"object", object},
                {"id", o.id}};
}

const char* native_stop_type(StopReason r) {
    switch (r) {
        case StopReason::Eos:
            return "eos";
        case StopReason::StopString:
            return "word";
        case StopReason::Length:
        case StopReason::ContextFull:
            return "limit";
        case StopReason::Cancelled:
            return "none";
    }
    return "none";
}

}  // namespace

namespace {

json tool_calls_json(const GenOutcome& o, bool with_index) {
    json calls = json::array();
    for (size_t i = 0; i < o.parsed->calls.size(); ++i) {
        json c;
        if (with_index) c["index"] = i;
        c["id"] = i < o.call_ids.size() ? o.call_ids[i] : "call_" + std::to_string(i);
        c["type"] = "function";
        c["function"] = {{"name", o.parsed->calls[i].name},
                         {"arguments", o.parsed->calls[i].arguments}};
        calls.push_back(std::move(c));
    }
    return calls;
}

}  // namespace

namespace {

// A whole (not streamed) OpenAI answer of one choice: the envelope, usage and timings, and
// what a context policy or the fallback reply did.
json whole_answer(const GenOutcome& o, const char* object, const json& choice) {
    json j = envelope(o, object, json::array({choice}));
    j["usage"] = usage_json(o.result);
    j["timings"] = timings_json(o.result);
    if (!o.context.is_null()) j["context"] = o.context;
    if (!o.fallback.is_null()) j["fallback"] = o.fallback;
    return j;
}

}  // namespace

json chat_response(const GenOutcome& o) {
    json message = {{"role", "assistant"}, {"content", o.content}};
    if (!o.reasoning.empty()) message["reasoning_content"] = o.reasoning;
    const char* finish = finish_reason(o.result.stop);
    if (o.parsed) {
        message["content"] = o.parsed->content.empty() ? json(nullptr) : json(o.parsed->content);
        message["tool_calls"] = tool_calls_json(o, false);
        // (cut by max_tokens: the complete calls go out, and the reason says it was cut)
        if (o.result.stop != StopReason::Length && o.result.stop != StopReason::ContextFull)
            finish = "tool_calls";
    }
    json choice = {{"finish_reason", finish}, {"index", o.index}, {"message", message}};
    choice["logprobs"] = o.logprobs;
    return whole_answer(o, "chat.completion", choice);
}

json completions_response(const GenOutcome& o) {
    json choice = {{"text", o.result.text},
                   {"index", o.index},
                   {"logprobs", o.logprobs},
                   {"finish_reason", finish_reason(o.result.stop)}};
    return whole_answer(o, "text_completion", choice);
}

json sampling_json(const GenerateParams& g) {
    const SamplerParams& s = g.sampling;
    return json{{"n_predict", g.n_predict},
                {"seed", s.seed == kRandomSeed ? -1 : (int64_t)s.seed},
                {"temperature", s.temperature},
                {"top_k", s.top_k},
                {"top_p", s.top_p},
                {"min_p", s.min_p},
                {"repeat_last_n", s.repeat_last_n},
                {"repeat_penalty", s.repeat_penalty},
                {"presence_penalty", s.presence_penalty},
                {"frequency_penalty", s.frequency_penalty},
                {"stop", g.stop},
                {"ignore_eos", g.ignore_eos}};
}

json native_response(const GenOutcome& o, const GenRequest& req) {
    const GenerateResult& r = o.result;
    json settings = sampling_json(req.gen);
    settings["n_ctx"] = o.n_ctx;
    settings["logit_bias"] = o.logit_bias;
    json j = {{"index", o.index},
              {"content", r.text},
              {"tokens", req.return_tokens ? json(r.tokens) : json::array()},
              {"id_slot", o.slot},
              {"stop", true},
              {"model", o.model},
              {"tokens_predicted", r.n_generated},
              {"tokens_evaluated", r.n_prompt},
              {"generation_settings", settings},
              {"prompt", o.prompt_text},
              {"has_new_line", r.text.find('\n') != std::string::npos},
              {"truncated", r.n_shifts > 0},
              {"stop_type", native_stop_type(r.stop)},
              {"stopping_word", r.stop_string},
              {"tokens_cached", r.n_prompt + r.n_generated},
              {"timings", timings_json(r)}};
    if (!o.logprobs.is_null()) j["completion_probabilities"] = o.logprobs;
    if (!o.context.is_null()) j["context"] = o.context;
    if (!o.fallback.is_null()) j["fallback"] = o.fallback;
    // Not in llama.cpp's answer, but read by clients written against it (seed 001's Rust
    // client): the decode speed at the top level.
    j["tokens_per_second"] = r.generate_per_second();
    return j;
}

std::string sse(const json& j) {
    return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

std::vector<std::string> SseReader::feed(std::string_view bytes) {
    std::vector<std::string> out;
    pending_.append(bytes);
    size_t at = 0;
    for (;;) {
        const size_t end = pending_.find("\n\n", at);
        if (end == std::string::npos) break;
        const std::string ev = pending_.substr(at, end - at);
        at = end + 2;
        // An event's data lines, joined with newlines (the SSE rule).
        std::string data;
        bool has_data = false;
        size_t line_at = 0;
        while (line_at <= ev.size()) {
            size_t nl = ev.find('\n', line_at);
            if (nl == std::string::npos) nl = ev.size();
            std::string_view line(ev.data() + line_at, nl - line_at);
            if (line.substr(0, 5) == "data:") {
                line.remove_prefix(5);
                if (!line.empty() && line[0] == ' ') line.remove_prefix(1);
                if (has_data) data.push_back('\n');
                data.append(line);
                has_data = true;
            }
            line_at = nl + 1;
        }
        if (has_data) out.push_back(std::move(data));
    }
    pending_.erase(0, at);
    return out;
}

json chat_chunk_role(const GenOutcome& o) {
    json choice = {{"finish_reason", nullptr},
                   {"index", o.index},
                   {"delta", {{"role", "assistant"}, {"content", nullptr}}}};
    return envelope(o, "chat.completion.chunk", json::array({choice}));
}

json chat_chunk_text(const GenOutcome& o, const std::string& text, const json& logprobs) {
    json choice = {{"finish_reason", nullptr}, {"index", o.index}, {"delta", {{"content", text}}}};
    if (!logprobs.is_null()) choice["logprobs"] = logprobs;
    return envelope(o, "chat.completion.chunk", json::array({choice}));
}

json chat_chunk_reasoning(const GenOutcome& o, const std::string& text) {
    json choice = {{"finish_reason", nullptr},
                   {"index", o.index},
                   {"delta", {{"reasoning_content", text}}}};
    return envelope(o, "chat.completion.chunk", json::array({choice}));
}

namespace {

// A chunk whose delta is tool calls (all of them, or one call's start or fragment).
json tool_calls_chunk(const GenOutcome& o, json calls) {
    json choice = {{"finish_reason", nullptr},
                   {"index", o.index},
                   {"delta", {{"tool_calls", std::move(calls)}}}};
    return envelope(o, "chat.completion.chunk", json::array({choice}));
}

}  // namespace

json chat_chunk_tool_calls(const GenOutcome& o) {
    return tool_calls_chunk(o, tool_calls_json(o, true));
}

json chat_chunk_call_start(const GenOutcome& o, int index, const std::string& id,
                           const std::string& name) {
    return tool_calls_chunk(o, json::array({{{"index", index},
                                             {"id", id},
                                             {"type", "function"},
                                             {"function", {{"name", name}, {"arguments", ""}}}}}));
}

json chat_chunk_call_arguments(const GenOutcome& o, int index, const std::string& fragment) {
    return tool_calls_chunk(o, json::array({{{"index", index}, {"function", {{"arguments", fragment}}}}}));
}

json chat_chunk_final(const GenOutcome& o) {
    const bool cut = o.result.stop == StopReason::Length || o.result.stop == StopReason::ContextFull;
    json choice = {{"finish_reason", (o.parsed || !o.call_ids.empty()) && !cut
                                         ? "tool_calls"
                                         : finish_reason(o.result.stop)},
                   {"index", o.index},
                   {"delta", json::object()}};
    json j = envelope(o, "chat.completion.chunk", json::array({choice}));
    j["timings"] = timings_json(o.result);
    if (!o.context.is_null()) j["context"] = o.context;
    if (!o.fallback.is_null()) j["fallback"] = o.fallback;
    return j;
}

json completions_chunk_text(const GenOutcome& o, const std::string& text, const json& logprobs) {
    json choice = {{"text", text}, {"index", o.index}, {"logprobs", logprobs}, {"finish_reason", nullptr}};
    return envelope(o, "text_completion", json::array({choice}));
}

json completions_chunk_final(const GenOutcome& o) {
    json choice = {{"text", ""},
                   {"index", o.index},
                   {"logprobs", nullptr},
                   {"finish_reason", finish_reason(o.result.stop)}};
    json j = envelope(o, "text_completion", json::array({choice}));
    j["timings"] = timings_json(o.result);
    if (!o.context.is_null()) j["context"] = o.context;
    if (!o.fallback.is_null()) j["fallback"] = o.fallback;
    return j;
}

json usage_chunk(const GenOutcome& o, bool chat) {
    json j = envelope(o, chat ? "chat.completion.chunk" : "text_completion", json::array());
    j["usage"] = usage_json(o.result);
    j["timings"] = timings_json(o.result);
    return j;
}

json native_chunk_text(const GenOutcome& o, const std::string& text, const json& probs) {
    json j{{"index", o.index}, {"content", text}, {"tokens", json::array()}, {"stop", false},
           {"id_slot", o.slot}};
    if (!probs.is_null()) j["completion_probabilities"] = probs;
    return j;
}

namespace {

json bytes_of(const std::string& s) {
    json b = json::array();
    for (unsigned char c : s) b.push_back((int)c);
    return b;
}

std::string piece_of(const Tokenizer& tok, int32_t id) {
    std::string p = tok.token_to_piece(id, false);
    if (p.empty()) p = tok.token_to_piece(id, true);  // a control token: its name
    return p;
}

// A token's top alternatives, each as `shape` makes it of the alternative and its text.
template <class Shape>
json alternatives(const Tokenizer& tok, const TokenProbs& tp, Shape shape) {
    json top = json::array();
    for (const TokenLogprob& t : tp.top) top.push_back(shape(t, piece_of(tok, t.id)));
    return top;
}

}  // namespace

json logprobs_json(Api api, const std::vector<TokenProbs>& probs, size_t from, size_t to,
                   const Tokenizer& tok, size_t text_offset, bool post_sampling) {
    to = std::min(to, probs.size());
    if (api == Api::Chat) {
        json content = json::array();
        for (size_t i = from; i < to; ++i) {
            const TokenProbs& tp = probs[i];
            const std::string piece = piece_of(tok, tp.id);
            const json top = alternatives(tok, tp, [](const TokenLogprob& t, const std::string& alt) {
                return json{{"token", alt}, {"logprob", t.logprob}, {"bytes", bytes_of(alt)}};
            });
            content.push_back({{"token", piece},
                               {"logprob", tp.logprob},
                               {"bytes", bytes_of(piece)},
                               {"top_logprobs", top}});
        }
        return json{{"content", content}, {"refusal", nullptr}};
    }
    if (api == Api::Completions) {
        json tokens = json::array(), lps = json::array(), tops = json::array(),
             offsets = json::array();
        size_t at = text_offset;
        for (size_t i = from; i < to; ++i) {
            const TokenProbs& tp = probs[i];
            const std::string piece = piece_of(tok, tp.id);
            tokens.push_back(piece);
            lps.push_back(tp.logprob);
            json top = json::object();
            for (const TokenLogprob& t : tp.top) top[piece_of(tok, t.id)] = t.logprob;
            tops.push_back(top);
            offsets.push_back(at);
            at += piece.size();
        }
        return json{{"tokens", tokens},
                    {"token_logprobs", lps},
                    {"top_logprobs", tops},
                    {"text_offset", offsets}};
    }
    // llama.cpp's completion_probabilities: log-probabilities under the model, or with
    // post_sampling_probs the probabilities ("prob", "top_probs") the token was drawn with
    const char* value = post_sampling ? "prob" : "logprob";
    auto v = [&](float lp) { return post_sampling ? json(std::exp(lp)) : json(lp); };
    json out = json::array();
    for (size_t i = from; i < to; ++i) {
        const TokenProbs& tp = probs[i];
        const std::string piece = piece_of(tok, tp.id);
        const json top = alternatives(tok, tp, [&](const TokenLogprob& t, const std::string& alt) {
            return json{{"id", t.id}, {"token", alt}, {"bytes", bytes_of(alt)}, {value, v(t.logprob)}};
        });
        out.push_back({{"id", tp.id},
                       {"token", piece},
                       {"bytes", bytes_of(piece)},
                       {value, v(tp.logprob)},
                       {post_sampling ? "top_probs" : "top_logprobs", top}});
    }
    return out;
}

std::string make_id(const char* prefix) {
    static const char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    thread_local std::mt19937_64 rng{std::random_device{}()};
    std::string id = prefix;
    for (int i = 0; i < 32; ++i) id.push_back(kChars[rng() % (sizeof(kChars) - 1)]);
    return id;
}

}  // namespace edgellm::server
