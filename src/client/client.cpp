// The conversation client of the SDK (include/edgellm/client.h): serial calls, streamed
// chat, slot reset on a broken stream, fallbacks, history under a token budget.
#include <mutex>

#include <nlohmann/json.hpp>

#include "edgellm/client.h"

namespace edgellm::client {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

const char* source_name(Source s) {
    switch (s) {
        case Source::none: return "none";
        case Source::llm: return "llm";
        case Source::fallback_endpoint: return "fallback_endpoint";
        case Source::canned_reply: return "canned_reply";
        case Source::router: return "router";
    }
    return "?";
}

namespace {

double ms_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

json messages_json(const std::vector<Message>& msgs) {
    json a = json::array();
    for (const Message& m : msgs) a.push_back({{"role", m.role}, {"content", m.content}});
    return a;
}

// A number field, or def when it is absent, null or not a number (a gateway may send
// "cached_tokens": null).
template <class T>
T num(const json& j, const char* key, T def) {
    if (!j.is_object()) return def;
    auto it = j.find(key);
    if (it == j.end() || !it->is_number()) return def;
    return it->get<T>();
}

// The error message of an error body ({"error": {"message": ...}}), else the body's start.
std::string error_text(const std::string& body) {
    json j = json::parse(body, nullptr, false);
    if (j.is_object() && j.contains("error")) {
        const json& e = j["error"];
        if (e.is_object() && e.contains("message") && e["message"].is_string())
            return e["message"].get<std::string>();
        if (e.is_string()) return e.get<std::string>();
    }
    return body.substr(0, 200);
}

// What one streamed chat call gave.
struct Call {
    Failure failure = Failure::none;
    std::string error;
    int status = 0;
    bool answered = false;  // the server sent response headers: it was working on this request
    std::string text;
    std::string finish_reason;
    int prompt_tokens = -1, cached_tokens = -1, completion_tokens = -1;
    double tps = -1;
    int draft_n = -1, draft_accepted = -1;
    double first_token_ms = -1;
};

Call stream_chat(const Endpoint& ep, const Timeouts& t, const json& body,
                 const TextCallback& on_text, const std::atomic<bool>* cancel) {
    Call c;
    const Clock::time_point t0 = Clock::now();
    SseParser sse;
    bool done = false;
    Failure event_failure = Failure::none;
    std::string event_error;
    StreamControl ctl;
    ctl.cancel = cancel;
    auto on_event = [&](const std::string& data) -> bool {
        if (data == "[DONE]") {
            done = true;
            return false;
        }
        json j = json::parse(data, nullptr, false);
        if (!j.is_object()) {
            event_failure = Failure::bad_response;
            event_error = "a stream event is not JSON: " + data.substr(0, 80);
            return false;
        }
        if (j.contains("error")) {
            event_failure = Failure::server_error;
            event_error = error_text(data);
            if (num(j["error"], "code", 0) > 0) c.status = num(j["error"], "code", 0);
            return false;
        }
        if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
            const json& ch = j["choices"][0];
            if (ch.contains("delta") && ch["delta"].is_object()) {
                const json& d = ch["delta"];
                if (d.contains("reasoning_content") && d["reasoning_content"].is_string() &&
                    !d["reasoning_content"].get<std::string>().empty())
                    ctl.progress = true;  // a thinking model's first output (not spoken)
                if (d.contains("content") && d["content"].is_string()) {
                    const std::string piece = d["content"].get<std::string>();
                    if (!piece.empty()) {
                        if (c.first_token_ms < 0) c.first_token_ms = ms_since(t0);
                        ctl.progress = true;
                        c.text += piece;
                        if (on_text) on_text(piece);
                    }
                }
            }
            if (ch.contains("finish_reason") && ch["finish_reason"].is_string()) {
                c.finish_reason = ch["finish_reason"].get<std::string>();
                ctl.progress = true;
            }
        }
        if (j.contains("usage") && j["usage"].is_object()) {
            const json& u = j["usage"];
            c.prompt_tokens = num(u, "prompt_tokens", -1);
            c.completion_tokens = num(u, "completion_tokens", -1);
            if (u.contains("prompt_tokens_details"))
                c.cached_tokens = num(u["prompt_tokens_details"], "cached_tokens", -1);
        }
        if (j.contains("timings") && j["timings"].is_object()) {
            const json& tm = j["timings"];
            c.tps = num(tm, "predicted_per_second", -1.0);
            c.draft_n = num(tm, "draft_n", -1);
            c.draft_accepted = num(tm, "draft_n_accepted", -1);
            if (c.completion_tokens < 0) c.completion_tokens = num(tm, "predicted_n", -1);
            if (c.prompt_tokens < 0 && num(tm, "prompt_n", -1) >= 0 && num(tm, "cache_n", -1) >= 0)
                c.prompt_tokens = num(tm, "prompt_n", 0) + num(tm, "cache_n", 0);
        }
        return true;
    };
    HttpResult r = http_request(
        ep, "POST", "/v1/chat/completions", body.dump(), t,
        [&](std::string_view bytes, StreamControl&) { return sse.feed(bytes, on_event); }, &ctl);
    c.status = c.status ? c.status : r.status;
    c.answered = r.status > 0;
    if (r.failure != Failure::none) {
        c.failure = r.failure;
        c.error = r.error;
        if (r.failure == Failure::broken_stream && r.status > 0)
            c.error = "the stream broke before the reply ended (" + r.error + ")";
        return c;
    }
    if (r.status >= 400) {
        c.failure = Failure::http_status;
        c.error = "HTTP " + std::to_string(r.status) + ": " + error_text(r.body);
        return c;
    }
    if (event_failure != Failure::none) {
        c.failure = event_failure;
        c.error = event_error;
        return c;
    }
    bool is_sse = false;
    for (auto& [k, v] : r.headers)
        if (k == "content-type" && v.find("text/event-stream") != std::string::npos) is_sse = true;
    if (!is_sse) {
        c.failure = Failure::bad_response;
        c.error = "the endpoint did not answer with an event stream (HTTP " + std::to_string(r.status) + ")";
        return c;
    }
    if (!done && c.finish_reason.empty()) {
        c.failure = Failure::broken_stream;
        c.error = "the stream ended before the reply finished";
    }
    return c;
}

}  // namespace

struct Client::Impl {
    ClientOptions opt;
    json extra = json::object();
    std::string extra_error;

    std::mutex call_mu;                 // one call at a time
    mutable std::mutex state_mu;        // history, summary
    std::vector<Message> history;       // user / assistant turns kept
    std::string summary;                // condensed older turns
    std::atomic<bool> cancel{false};
    uint64_t generation = 0;            // bumped by reset(): a call's history is then dropped

    json chat_body(const std::vector<Message>& msgs, bool primary) const {
        json b = extra;
        b["messages"] = messages_json(msgs);
        b["stream"] = true;
        b["stream_options"] = {{"include_usage", true}};
        b["max_tokens"] = opt.max_tokens;
        if (opt.temperature >= 0) b["temperature"] = opt.temperature;
        const Endpoint& ep = primary ? opt.primary : *opt.fallback;
        if (!ep.model.empty()) b["model"] = ep.model;
        if (primary && opt.slot >= 0) b["id_slot"] = opt.slot;
        return b;
    }

    bool reset_slot(std::string* why) {
        if (opt.slot < 0) {
            *why = "no slot to reset (ClientOptions::slot is -1)";
            return false;
        }
        Timeouts t{opt.timeouts.connect_ms, 3000, 3000};
        HttpResult r = http_request(opt.primary, "DELETE", "/slots/" + std::to_string(opt.slot), "", t);
        if (r.failure != Failure::none) {
            *why = "DELETE /slots/" + std::to_string(opt.slot) + ": " + r.error;
            return false;
        }
        if (r.status != 200) {
            *why = "DELETE /slots/" + std::to_string(opt.slot) + ": HTTP " + std::to_string(r.status) +
                   " " + error_text(r.body);
            return false;
        }
        return true;
    }

    // Primary, then the fallback endpoint, then the canned reply.
    Reply run(const std::vector<Message>& msgs, const TextCallback& on_text, Reply reply) {
        const Clock::time_point t0 = Clock::now();
        auto take = [&](const Call& c, Source src) {
            reply.source = src;
            reply.text = c.text;
            reply.finish_reason = c.finish_reason;
            reply.prompt_tokens = c.prompt_tokens;
            reply.cached_tokens = c.cached_tokens;
            reply.completion_tokens = c.completion_tokens;
            reply.decode_tokens_per_second = c.tps;
            reply.draft_tokens = c.draft_n;
            reply.draft_accepted = c.draft_accepted;
            reply.first_token_ms = c.first_token_ms;
        };
        if (!extra_error.empty()) {
            reply.failure = Failure::bad_endpoint;
            reply.error = extra_error;
            return reply;
        }
        Call c = stream_chat(opt.primary, opt.timeouts, chat_body(msgs, true), on_text, &cancel);
        if (c.failure == Failure::none) {
            take(c, Source::llm);
            return reply;
        }
        reply.failure = c.failure;
        reply.error = c.error;
        reply.http_status = c.status;
        reply.partial_text = c.text;
        // The slot is reset only when the server had started on this request (its headers
        // came): a request still queued behind another client's must not cut that one.
        const bool dirty = c.answered && (c.failure == Failure::broken_stream ||
                                          c.failure == Failure::first_token_timeout ||
                                          c.failure == Failure::total_timeout ||
                                          c.failure == Failure::bad_response);
        auto restart = [&](Source next) {
            if (!c.text.empty() && opt.on_restart) opt.on_restart(next);
        };
        if (c.failure != Failure::cancelled) {  // (the user stopped it: no fallback)
            bool answered = false;
            if (opt.fallback) {
                const double offset = ms_since(t0);
                restart(Source::fallback_endpoint);
                Call f = stream_chat(*opt.fallback, opt.fallback_timeouts, chat_body(msgs, false),
                                     on_text, &cancel);
                if (f.failure == Failure::none) {
                    take(f, Source::fallback_endpoint);
                    reply.first_token_ms = f.first_token_ms < 0 ? -1 : offset + f.first_token_ms;
                    answered = true;
                } else {
                    reply.fallback_failure = f.failure;
                    reply.fallback_error = f.error;
                }
            }
            if (!answered && !opt.canned_reply.empty() && reply.fallback_failure != Failure::cancelled) {
                if (!opt.fallback) restart(Source::canned_reply);
                reply.source = Source::canned_reply;
                reply.text = opt.canned_reply;
                reply.first_token_ms = ms_since(t0);
                if (on_text) on_text(opt.canned_reply);
            }
        }
        // After the reply the user hears: the reset must not delay it.
        if (dirty) reply.slot_reset = reset_slot(&reply.slot_reset_error);
        else if (c.failure != Failure::cancelled && c.failure != Failure::connect &&
                 c.failure != Failure::bad_endpoint && c.failure != Failure::http_status &&
                 c.failure != Failure::server_error)
            reply.slot_reset_error = "not reset: the server had not started on this request";
        return reply;
    }

    // A JSON POST to the primary (cancellable) answered 200 with a JSON object; nullopt
    // with "PATH: why" in *why otherwise.
    std::optional<json> post_json(const char* path, const json& body, const Timeouts& t, std::string* why) {
        StreamControl ctl;
        ctl.cancel = &cancel;
        HttpResult r = http_request(opt.primary, "POST", path, body.dump(), t, {}, &ctl);
        std::string err;
        json j;
        if (r.failure != Failure::none) err = r.error;
        else if (r.status != 200) err = "HTTP " + std::to_string(r.status) + " " + error_text(r.body);
        else if (!(j = json::parse(r.body, nullptr, false)).is_object()) err = "the answer is not a JSON object";
        if (err.empty()) return j;
        if (why) *why = std::string(path) + ": " + err;
        return std::nullopt;
    }

    std::optional<int> count(const std::vector<Message>& msgs, std::string* why) {
        Timeouts t{opt.timeouts.connect_ms, 5000, 5000};
        std::optional<json> pj = post_json("/apply-template", json{{"messages", messages_json(msgs)}}, t, why);
        if (!pj) return std::nullopt;
        if (!pj->contains("prompt") || !(*pj)["prompt"].is_string()) {
            if (why) *why = "/apply-template answered without a prompt";
            return std::nullopt;
        }
        std::optional<json> kj =
            post_json("/tokenize", json{{"content", (*pj)["prompt"]}, {"add_special", true}}, t, why);
        if (!kj) return std::nullopt;
        if (!kj->contains("tokens") || !(*kj)["tokens"].is_array()) {
            if (why) *why = "/tokenize answered without tokens";
            return std::nullopt;
        }
        return (int)(*kj)["tokens"].size();
    }

    // The request's messages: system prompt, kept turns (the summary carried by the first
    // user message after it), the new utterance.
    std::vector<Message> build(const std::vector<Message>& turns, const std::string& sum,
                               std::string_view utterance) const {
        std::vector<Message> m;
        if (!opt.system_prompt.empty()) m.push_back({"system", opt.system_prompt});
        bool carried = sum.empty();
        auto with_summary = [&](std::string content) {
            if (carried) return content;
            carried = true;
            return "(Summary of our earlier conversation: " + sum + ")\n\n" + content;
        };
        for (const Message& t : turns)
            m.push_back({t.role, t.role == "user" ? with_summary(t.content) : t.content});
        m.push_back({"user", with_summary(std::string(utterance))});
        return m;
    }

    // Condenses the summary so far and these turns into a new summary, via the primary.
    std::optional<std::string> summarize(const std::string& sum, const std::vector<Message>& turns,
                                         std::string* why) {
        std::string transcript;
        if (!sum.empty()) transcript += "Earlier summary: " + sum + "\n\n";
        for (const Message& t : turns)
            transcript += (t.role == "user" ? "User: " : "Assistant: ") + t.content + "\n";
        json body = {{"messages",
                      json::array({{{"role", "system"},
                                    {"content",
                                     "Condense the conversation below into a few short notes "
                                     "that keep its facts: names, numbers, places, times and "
                                     "decisions. Write in the conversation's language. Answer "
                                     "with the notes only."}},
                                   {{"role", "user"}, {"content", transcript}}})},
                     {"max_tokens", opt.summary_max_tokens},
                     {"temperature", 0},
                     {"stream", false}};
        if (!opt.primary.model.empty()) body["model"] = opt.primary.model;
        Timeouts t{opt.timeouts.connect_ms, opt.timeouts.total_ms, opt.timeouts.total_ms};
        std::string err;
        std::optional<json> j = post_json("/v1/chat/completions", body, t, &err);
        if (!j) {
            *why = "summary: " + err;
            return std::nullopt;
        }
        try {
            std::string s = j->at("choices").at(0).at("message").at("content").get<std::string>();
            while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
            while (!s.empty() && (s.front() == '\n' || s.front() == ' ')) s.erase(0, 1);
            if (s.empty()) {
                *why = "summary: the model answered nothing";
                return std::nullopt;
            }
            return s;
        } catch (const std::exception&) {
            *why = "summary: the answer has no message content";
            return std::nullopt;
        }
    }

    // Fits system prompt + history + utterance into the budget; updates the history.
    std::vector<Message> trimmed(std::string_view utterance, Reply* reply) {
        std::vector<Message> turns;
        std::string sum;
        uint64_t gen;
        {
            std::lock_guard lk(state_mu);
            turns = history;
            sum = summary;
            gen = generation;
        }
        std::vector<Message> msgs = build(turns, sum, utterance);
        if (opt.history_token_budget <= 0) return msgs;
        std::string why;
        std::optional<int> n = count(msgs, &why);
        if (!n) {
            reply->trim_error = why;
            return msgs;
        }
        reply->history_tokens = *n;
        if (*n <= opt.history_token_budget) return msgs;

        const size_t whole = turns.size() / 2;
        const size_t keep = (size_t)std::max(0, opt.keep_turns);
        if (whole > keep) {
            const size_t cut = 2 * (whole - keep);
            std::vector<Message> old(turns.begin(), turns.begin() + (ptrdiff_t)cut);
            std::optional<std::string> s = summarize(sum, old, &why);
            turns.erase(turns.begin(), turns.begin() + (ptrdiff_t)cut);
            if (s) {
                sum = *s;
                reply->turns_summarized = (int)(cut / 2);
            } else {
                reply->trim_error = why;  // dropped instead: the request must still fit
                reply->turns_dropped += (int)(cut / 2);
            }
            msgs = build(turns, sum, utterance);
            n = count(msgs, &why);
        }
        while (n && *n > opt.history_token_budget && turns.size() >= 2) {
            turns.erase(turns.begin(), turns.begin() + 2);
            reply->turns_dropped++;
            msgs = build(turns, sum, utterance);
            n = count(msgs, &why);
        }
        if (!n) {
            reply->trim_error = why;
        } else {
            reply->history_tokens = *n;
            if (*n > opt.history_token_budget)
                reply->trim_error = "still " + std::to_string(*n) + " tokens, over the budget of " +
                                    std::to_string(opt.history_token_budget) +
                                    " with no turn left to condense (system prompt, summary and utterance)";
        }
        {
            std::lock_guard lk(state_mu);
            if (generation == gen) {  // (a reset() meanwhile wins)
                history = turns;
                summary = sum;
            }
        }
        return msgs;
    }
};

Client::Client(ClientOptions opt) : impl_(std::make_unique<Impl>()) {
    impl_->opt = std::move(opt);
    if (!impl_->opt.extra_json.empty()) {
        json e = json::parse(impl_->opt.extra_json, nullptr, false);
        if (!e.is_object()) impl_->extra_error = "ClientOptions::extra_json is not a JSON object";
        else impl_->extra = std::move(e);
    }
}

Client::~Client() = default;

const ClientOptions& Client::options() const { return impl_->opt; }

void Client::cancel() { impl_->cancel = true; }

std::vector<Message> Client::history() const {
    std::lock_guard lk(impl_->state_mu);
    return impl_->history;
}

std::string Client::summary() const {
    std::lock_guard lk(impl_->state_mu);
    return impl_->summary;
}

void Client::reset() {
    std::lock_guard lk(impl_->state_mu);
    impl_->history.clear();
    impl_->summary.clear();
    impl_->generation++;
}

std::optional<int> Client::count_tokens(const std::vector<Message>& messages, std::string* why) {
    return impl_->count(messages, why);
}

namespace {

// The call lock by the option: wait for it, or refuse at once.
std::unique_lock<std::mutex> take_turn(std::mutex& mu, ClientOptions::Concurrency c) {
    if (c == ClientOptions::Concurrency::refuse) return std::unique_lock<std::mutex>(mu, std::try_to_lock);
    return std::unique_lock<std::mutex>(mu);
}

Reply busy_reply(Clock::time_point t0) {
    Reply r;
    r.failure = Failure::busy;
    r.error = "another call is in progress (one call at a time)";
    r.total_ms = ms_since(t0);
    return r;
}

}  // namespace

Reply Client::chat(std::string_view utterance, const TextCallback& on_text) {
    const Clock::time_point t0 = Clock::now();
    if (impl_->opt.router) {
        if (std::optional<std::string> routed = impl_->opt.router(utterance)) {
            Reply r;
            r.source = Source::router;
            r.text = *routed;
            if (on_text) on_text(r.text);
            r.total_ms = ms_since(t0);
            return r;
        }
    }
    std::unique_lock<std::mutex> turn = take_turn(impl_->call_mu, impl_->opt.concurrency);
    if (!turn.owns_lock()) return busy_reply(t0);
    impl_->cancel = false;
    uint64_t gen;
    {
        std::lock_guard lk(impl_->state_mu);
        gen = impl_->generation;
    }
    Reply r;
    std::vector<Message> msgs = impl_->trimmed(utterance, &r);
    r = impl_->run(msgs, on_text, std::move(r));
    if (r.source == Source::llm || r.source == Source::fallback_endpoint) {
        std::lock_guard lk(impl_->state_mu);
        if (impl_->generation == gen) {
            impl_->history.push_back({"user", std::string(utterance)});
            impl_->history.push_back({"assistant", r.text});
        }
    }
    r.total_ms = ms_since(t0);
    return r;
}

Reply Client::complete(const std::vector<Message>& messages, const TextCallback& on_text) {
    const Clock::time_point t0 = Clock::now();
    std::unique_lock<std::mutex> turn = take_turn(impl_->call_mu, impl_->opt.concurrency);
    if (!turn.owns_lock()) return busy_reply(t0);
    impl_->cancel = false;
    Reply r = impl_->run(messages, on_text, Reply{});
    r.total_ms = ms_since(t0);
    return r;
}

}  // namespace edgellm::client
