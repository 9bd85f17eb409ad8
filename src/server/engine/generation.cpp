// One generation on a slot: the prompt rendered and tokenized, the request prepared against
// the model (grammar, tool-call grammar, logit bias, speculation), the choices generated with
// the client watched, and the answer (or stream) in the request's dialect.
#include "server/server_impl.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "edgellm/chat.h"
#include "server/api/openai/stream_writer.h"
#include "server/http/disconnect_watch.h"
#include "text/chat/reasoning.h"
#include "text/chat/tool_calls.h"
#include "text/chat/tool_prompt.h"

namespace edgellm::server {

// Whether each call's arguments match its tool's `parameters` (checked with the schema's
// grammar; a schema that cannot be written as one is not checked).
bool arguments_valid(const json& tools, const ParsedReply& parsed) {
    auto vocab = GrammarVocab::from_pieces({}, {});
    for (const ToolCall& c : parsed.calls)
        for (const json& t : tools) {
            const json& fn = t["function"];
            if (fn["name"] != c.name || !fn.contains("parameters") || !fn["parameters"].is_object())
                continue;
            SchemaRefusal why;
            auto gbnf = json_schema_to_gbnf(fn["parameters"], &why);
            if (!gbnf) break;
            auto g = Grammar::parse(*gbnf);
            if (!g) break;
            GrammarMatcher m(*g, vocab);
            if (!m.accept_bytes(c.arguments) || !m.can_end()) return false;
            break;
        }
    return true;
}

std::string Server::Impl::render(const GenRequest& g, bool* bos_in_text) const {
    if (cfg.chat_format) {  // --chat-template NAME: the built-in format
        *bos_in_text = false;
        return render_chat(*cfg.chat_format, g.messages, g.add_generation_prompt || g.continue_final,
                           default_system_prompt(live.model->file())) +
               g.continue_text;
    }
    // Template variables: --chat-template-kwargs, the effort, the request's; enable_thinking
    // as thinking_enabled() decides from all of them (always given, as llama.cpp does).
    json kw = json::object();
    // Today's date as llama.cpp gives templates (Llama 3.x prints date_string, FireFunction
    // datetime); they fall back to a date of their own without it.
    {
        const std::time_t now = std::time(nullptr);
        std::tm tm{};
        localtime_r(&now, &tm);
        char d1[32], d2[32];
        std::strftime(d1, sizeof d1, "%d %b %Y", &tm);
        std::strftime(d2, sizeof d2, "%b %d %Y", &tm);
        kw["date_string"] = d1;
        kw["datetime"] = d2;
    }
    // FireFunction v2's template reads the tools as `functions`, a JSON string (llama.cpp
    // gives it that way; empty without tools).
    if (template_text().find("functools") != std::string::npos)
        kw["functions"] = g.tools.empty() ? std::string() : g.tools.dump(2);
    // The tools and earlier results as the template takes them (a system prompt of ours for
    // one that takes none, Gemma 3).
    std::vector<ChatMessage> messages = g.messages;
    prepare_tool_prompt(template_text(), g.tools_json.empty() ? json::array() : g.tools, &messages, &kw);
    auto merge = [&kw](const std::string& src) {
        const json given = src.empty() ? json() : json::parse(src, nullptr, false);
        if (given.is_object())
            for (const auto& [k, v] : given.items()) kw[k] = v;
    };
    merge(cfg.chat_template_kwargs);
    // (for the templates that read it, gpt-oss's and DeepSeek V4's; "none" means no thinking
    // and no level, as in llama.cpp)
    const std::string& effort = g.reasoning_effort.empty() ? cfg.reasoning_effort : g.reasoning_effort;
    if (effort == "none")
        kw.erase("reasoning_effort");
    else if (!effort.empty())
        kw["reasoning_effort"] = effort;
    merge(g.template_kwargs_json);
    kw["enable_thinking"] = thinking_enabled(g);
    const std::string kwargs = kw.dump();
    if (!g.tool_names.empty() && g.answer_schema && g.tool_choice == "auto") {
        // tools and a typed answer: the grammar allows a call or the answer; the model is told
        // the answer's form (as OpenAI does)
        const std::string note = answer_schema_prompt(*g.answer_schema);
        if (!messages.empty() && messages[0].role == "system")
            messages[0].content = messages[0].content + "\n\n" + note;
        else
            messages.insert(messages.begin(), ChatMessage("system", note));
    }
    const ChatPrompt cp =
        chat_prompt(live.model->file(), *live.tok, messages, g.add_generation_prompt || g.continue_final,
                    kwargs, g.tools_json, cfg.chat_template);
    if (!cp.warning.empty()) log("warning: %s; using the %s format", cp.warning.c_str(), cp.how.c_str());
    *bos_in_text = cp.bos_in_text;
    if (g.add_generation_prompt && !g.continue_final && cp.how == "template")
        return complete_generation_prompt(template_text(), cp.text);
    return cp.text + g.continue_text;
}

std::string Server::Impl::template_text() const {
    if (!cfg.chat_template.empty()) return cfg.chat_template;
    if (cfg.chat_format) return "";
    return live.model->file().get_string("tokenizer.chat_template").value_or("");
}

ToolFormat Server::Impl::tool_format() const {
    if (cfg.chat_format) return cfg.chat_format == ChatFormat::Llama3 ? ToolFormat::Llama3 : ToolFormat::Hermes;
    return tool_format_for_template(template_text());
}

Slot* Server::Impl::acquire(const std::vector<int32_t>& prompt, int want, const http::Request& req,
                            http::Response& res, ApiError* err, std::string* log_extra) {
    const SlotPool::Acquired a = live.pool->acquire(
        want, [&](int id) {
            return live.slots[(size_t)id]->session->cache().reusable_prefix(prompt, (int64_t)prompt.size());
        },
        [&] { return stopping.load() || res.peer_gone(); });
    if (a.outcome == SlotPool::Outcome::Acquired) {
        Slot* s = live.slots[(size_t)a.slot].get();
        s->cancel = false;
        return s;
    }
    if (a.outcome == SlotPool::Outcome::QueueFull) {
        // A place in the queue frees when a slot does: when a reply ends, seconds away.
        res.add_header("Retry-After", "5");
        const std::string waiting = std::to_string(a.queued_ahead) + " requests are already waiting for a slot";
        *err = {503, "unavailable_error", "the server is busy: " + waiting, {}};
        *log_extra = " | refused " + req.remote_addr + ": " + waiting + " (503, --max-queue)";
    } else {
        *err = {499, "cancelled", stopping ? "the server is stopping" : "the client went away", {}};
    }
    return nullptr;
}

std::optional<ApiError> Server::Impl::prepare(Api api, GenRequest& g, Prepared* p) {
    if (api == Api::Chat) {
        bool bos_in_text = false;
        p->prompt_text = render(g, &bos_in_text);
        p->prompt = live.tok->tokenize(p->prompt_text, !bos_in_text, true);
    } else if (!g.prompt_mixed.empty()) {
        // (the model's BOS only when the prompt starts with text, as llama.cpp)
        bool first_text = g.prompt_mixed.front().second.empty();
        for (const auto& [text, ids] : g.prompt_mixed) {
            if (ids.empty()) {
                const auto t = live.tok->tokenize(text, first_text, true);
                first_text = false;
                p->prompt.insert(p->prompt.end(), t.begin(), t.end());
                p->prompt_text += text;
            } else {
                for (int32_t t : ids)
                    if (t >= live.tok->n_vocab())
                        return bad_request("token id " + std::to_string(t) + " is outside the vocabulary of " +
                                           std::to_string(live.tok->n_vocab()));
                p->prompt.insert(p->prompt.end(), ids.begin(), ids.end());
            }
        }
    } else if (g.prompt_is_tokens) {
        p->prompt = g.prompt_tokens;
        for (int32_t t : p->prompt)
            if (t >= live.tok->n_vocab())
                return bad_request("token id " + std::to_string(t) +
                                   " is outside the vocabulary of " + std::to_string(live.tok->n_vocab()));
    } else {
        p->prompt_text = g.prompt;
        p->prompt = live.tok->tokenize(p->prompt_text, true, true);
    }
    if (p->prompt.empty()) return bad_request("the prompt is empty");
    if (api == Api::Chat && cfg.context_policy == ContextPolicy::Summarize) {
        // Room for the reply: its max_tokens, else a quarter of the context.
        const int64_t n = n_ctx_slot();
        p->reserve = std::clamp<int64_t>(g.gen.n_predict > 0 ? g.gen.n_predict : n / 4, 1, n / 2);
        p->condense = (int64_t)p->prompt.size() + p->reserve > n &&
                      !condense_points(g.messages, pinned_messages(g.messages)).empty();
    }
    if ((int64_t)p->prompt.size() >= n_ctx_slot() && !p->condense)
        return ApiError{400, "exceed_context_size_error",
                        "the request exceeds the available context size: the prompt has " +
                            std::to_string(p->prompt.size()) + " tokens and a slot holds " +
                            std::to_string(n_ctx_slot()) + " (at most " +
                            std::to_string(n_ctx_slot() - 1) +
                            " prompt tokens, leaving room for one generated token)",
                        {{"n_prompt_tokens", p->prompt.size()}, {"n_ctx", n_ctx_slot()}}};
    // (n_keep / n_discard only say what a context shift keeps and drops)
    const bool shift_asked = g.gen.n_keep != cfg.defaults.n_keep || g.gen.n_discard != 0;
    if (!cfg.defaults.context_shift && shift_asked)
        return bad_request(std::string(g.gen.n_discard != 0 ? "n_discard" : "n_keep") +
                           " needs a server started with --context-shift (this one never shifts "
                           "the context: a full context ends the reply)");
    if (const char* why = live.ctx->recurrent_reason(); why && cfg.defaults.context_shift) {
        // A context shift cannot apply to a recurrent state: a request that asks for one, or
        // whose max_tokens needs one, is refused; without max_tokens a full context ends the
        // reply.
        const int64_t room = n_ctx_slot() - (int64_t)p->prompt.size();
        if (shift_asked)
            return bad_request(std::string("context shift (") + (g.gen.n_discard != 0 ? "n_discard" : "n_keep") +
                               ") cannot apply to this model: " + why);
        if (g.gen.n_predict > room)
            return bad_request("max_tokens " + std::to_string(g.gen.n_predict) + " needs a context "
                               "shift past the context of " + std::to_string(n_ctx_slot()) +
                               " tokens (the prompt has " + std::to_string(p->prompt.size()) +
                               "), which cannot apply to this model: " + why);
    }
    if (g.id_slot >= (int)live.slots.size())
        return bad_request("id_slot " + std::to_string(g.id_slot) + " does not exist (slots: 0.." +
                           std::to_string(live.slots.size() - 1) + ")");
    p->gp = g.gen;
    SamplerParams& s = p->gp.sampling;
    // logit_bias: ids checked, texts tokenized (each of their tokens gets the bias).
    for (const auto& [id, bias] : g.bias_ids) {
        if (id < 0 || id >= live.tok->n_vocab())
            return bad_request("logit_bias: token " + std::to_string(id) +
                               " is outside the vocabulary of " + std::to_string(live.tok->n_vocab()));
        s.logit_bias.push_back({(int32_t)id, bias});
    }
    for (const auto& [text, bias] : g.bias_texts) {
        const auto ids = live.tok->tokenize(text, false, false);
        if (ids.empty()) return bad_request("logit_bias: \"" + text + "\" has no tokens");
        for (int32_t id : ids) s.logit_bias.push_back({id, bias});
    }
    // The reply's thinking blocks: counted, cut at the budget, kept out of the grammar.
    s.thinking = thinking_params(api, g, p->prompt_text);
    // The grammar: the tool calls' (with the request's schema as the other answer), else the
    // request's own, else the server's default. (A block the prompt opened is the grammar's
    // only when the thinking blocks are not already kept out of it.)
    if (g.constrain) {
        if (!g.tool_names.empty()) {
            SchemaRefusal why;
            const std::string choice = g.tool_choice_named ? g.tool_choice
                                       : g.tool_choice == "required" ? "required"
                                                                     : "auto";
            const json* answer = g.answer_schema ? &*g.answer_schema : nullptr;
            auto tg = tool_call_grammar(g.tools, tool_format(), choice, g.parallel_tool_calls, &why, answer,
                                        !s.thinking.on && prompt_opens_thinking(p->prompt_text));
            if (!tg) {
                ApiError e = bad_request(why.message + (why.path.empty() ? "" : " (keyword \"" +
                                                        why.keyword + "\" at " + why.path + ")"));
                e.extra["param"] = why.path.rfind("$.response_format", 0) == 0 ? g.grammar_source : "tools";
                if (!why.keyword.empty()) e.extra["keyword"] = why.keyword;
                if (!why.path.empty()) e.extra["path"] = why.path;
                return e;
            }
            auto compiled = Grammar::parse(tg->gbnf);
            if (!compiled)  // our own grammar: a bug, but the client's request is fine
                return ApiError{400, "invalid_request_error",
                                "the tool-call grammar for these tools did not compile: " +
                                    compiled.error(),
                                {}};
            s.grammar = std::move(*compiled);
            s.grammar_triggers = std::move(tg->triggers);
            p->constraint = "tool calls (" + choice + ")" +
                            (answer && choice == "auto" ? " or " + g.grammar_source : "");
            p->tool_grammar = true;
            p->tool_args_typed = tg->arguments_typed;
        } else if (g.grammar) {
            s.grammar = g.grammar;
            p->constraint = g.grammar_source;
        } else if (cfg.grammar) {
            s.grammar = cfg.grammar;
            p->constraint = "--grammar";
        }
        if (s.grammar) {
            s.grammar_vocab = live.grammar_vocab.get();
            GrammarMatcher probe(s.grammar, s.grammar_vocab);
            if (probe.overflowed())
                return bad_request(p->constraint + ": the grammar is too ambiguous to follow "
                                                   "(more than 4096 parses at its start; nested "
                                                   "optional repetitions?)");
        }
    }
    if (s.thinking.on) s.grammar_vocab = live.grammar_vocab.get();
    p->gp.n_probs = g.logprobs ? g.top_logprobs : 0;
    if (g.spec_n_max > 0 && !cfg.spec.on())
        return bad_request("speculative.n_max: speculative decoding is off on this server (start "
                           "it with -md DRAFT_MODEL or --spec-type ngram)");
    if (g.spec_n_min > 0 && !cfg.spec.on())
        return bad_request("speculative.n_min: speculative decoding is off on this server (start "
                           "it with -md DRAFT_MODEL or --spec-type ngram)");
    if (g.spec_n_max > cfg.spec.n_max)
        return bad_request("speculative.n_max " + std::to_string(g.spec_n_max) +
                           " is above the most this server drafts per step (" +
                           std::to_string(cfg.spec.n_max) + ", --draft-max)");
    if (g.spec_p_min >= 0 && !cfg.spec.draft)
        return bad_request("speculative.p_min: this server has no draft model (-md)");
    return std::nullopt;
}

// One choice of a request on a slot: generate, streaming as the API frames it when asked.
struct Server::Impl::Choice {
    GenOutcome o;
    Result<GenerateResult> r = Result<GenerateResult>::fail("not run");
    std::vector<TokenProbs> probs;
    bool client_gone = false;
    double ttft_ms = -1.0;
    std::shared_ptr<StreamSession> resumable;  // X-Conversation-Id: goes on without its client
};

// llama-server's generation_settings.logit_bias: the request's biases, and with ignore_eos
// every end-of-generation token at -inf (null).
json Server::Impl::logit_bias_json(const GenerateParams& gp) const {
    json out = json::array();
    for (const auto& [id, bias] : gp.sampling.logit_bias)
        out.push_back({{"token", id}, {"bias", std::isfinite(bias) ? json(bias) : json(nullptr)}});
    if (gp.ignore_eos)
        for (int32_t id : live.tok->eog_tokens()) out.push_back({{"token", id}, {"bias", nullptr}});
    return out;
}

void Server::Impl::run_choice(Api api, const GenRequest& g, const Prepared& p, Slot* slot,
                              http::Response& res, StreamWriter* w, Clock::time_point t_start,
                              Choice* c) {
    GenOutcome& o = c->o;
    GenerateParams gp = p.gp;
    gp.cancel = &slot->cancel;
    gp.batcher = live.batcher.get();
    slot->n_decoded = 0;
    slot->n_predict = gp.n_predict;
    gp.progress = &slot->n_decoded;
    if (g.logprobs) gp.probs = &c->probs;
    if (slot->drafter && g.spec_n_max != 0) {
        gp.spec.drafter = slot->drafter;
        gp.spec.n_max = g.spec_n_max > 0 ? g.spec_n_max : cfg.spec.n_max;
        gp.spec.n_min = g.spec_n_min >= 0 ? g.spec_n_min : cfg.spec.n_min;
        if (slot->model_drafter)
            slot->model_drafter->set_p_min(g.spec_p_min >= 0 ? g.spec_p_min : cfg.spec.p_min);
    }
    if (c->o.index > 0 && gp.sampling.seed != kRandomSeed) gp.sampling.seed += (uint64_t)c->o.index;
    Session& session = *slot->session;
    if (w) w->begin(o, g.logprobs ? &c->probs : nullptr, p.prompt_text);
    const bool think = api == Api::Chat && cfg.reasoning;
    const bool opened = think && prompt_opens_thinking(p.prompt_text);
    bool timed_out = false;
    {
        std::optional<Clock::time_point> deadline;
        if (cfg.timeout_first_token_ms > 0 && c->o.index == 0)
            deadline = t_start + std::chrono::milliseconds(cfg.timeout_first_token_ms);
        std::function<bool()> gone_when;
        if (c->resumable) gone_when = [s = c->resumable] { return s->cancelled(); };
        DisconnectWatch watch(res, slot->cancel, deadline, &slot->n_decoded, gone_when);
        // timings_per_token / return_progress: what the prefill and the decoding have done
        // so far, for the stream.
        int64_t live_prompt_n = 0;
        double live_prompt_ms = 0.0;
        std::optional<Clock::time_point> first_piece;
        auto live_timings = [&](int64_t predicted_n, double predicted_ms) {
            auto rate = [](double ms, int64_t n) { return ms > 0 ? 1000.0 * (double)n / ms : 0.0; };
            return json{{"prompt_n", live_prompt_n},
                        {"prompt_ms", live_prompt_ms},
                        {"prompt_per_second", rate(live_prompt_ms, live_prompt_n)},
                        {"predicted_n", predicted_n},
                        {"predicted_ms", predicted_ms},
                        {"predicted_per_second", rate(predicted_ms, predicted_n)}};
        };
        if (w && (g.timings_per_token || g.return_progress))
            gp.on_prompt_progress = [&](int64_t processed, int64_t total, int64_t cached, double ms) {
                live_prompt_n = processed - cached;
                live_prompt_ms = ms;
                w->set_timings(live_timings(0, 0.0));
                if (g.return_progress)
                    w->progress(o, {{"total", total}, {"cache", cached}, {"processed", processed},
                                    {"time_ms", ms}});
            };
        auto on_text = [&](std::string_view piece) {
            if (c->ttft_ms < 0) c->ttft_ms = ms_between(t_start, Clock::now());
            if (!w) return true;
            if (g.timings_per_token) {
                const auto now = Clock::now();
                if (!first_piece) first_piece = now;
                w->set_timings(live_timings(slot->n_decoded.load(), ms_between(*first_piece, now)));
            }
            w->piece(o, piece);
            return w->ok();
        };
        if (!w || w->ok()) c->r = session.generate(p.prompt, gp, on_text);
        c->client_gone = watch.gone() || (w && !w->ok());
        timed_out = watch.timed_out() && !c->client_gone;
    }
    if (!c->r) return;
    o.result = std::move(*c->r);
    if (timed_out && o.result.stop == StopReason::Cancelled && o.result.n_generated == 0) {
        // The head unit must say something in time: the canned reply, as the reply.
        o.result.text = cfg.fallback_reply;
        o.result.stop = StopReason::Eos;
        o.fallback = {{"reason", "no first token within --timeout-first-token " +
                                     std::to_string(cfg.timeout_first_token_ms) + " ms"},
                      {"after_ms", ms_between(t_start, Clock::now())}};
        c->ttft_ms = ms_between(t_start, Clock::now());
        if (w) w->piece(o, cfg.fallback_reply);
    }
    o.context = p.context;
    if (const json shift = context_shift_json(o.result); !shift.is_null()) {
        if (o.context.is_null())
            o.context = shift;
        else
            o.context["shift"] = shift;
    }
    c->r = Result<GenerateResult>(o.result);
    std::erase_if(c->probs, [&](const TokenProbs& tp) { return live.tok->is_eog(tp.id); });
    if (api == Api::Chat) {
        ReasoningSplit split;
        if (think)
            split = split_reasoning(o.result.text, opened);
        else
            split.content = o.result.text;
        o.reasoning = std::move(split.reasoning);
        o.content = std::move(split.content);
    }
    const bool cut = o.result.stop == StopReason::Length || o.result.stop == StopReason::ContextFull;
    // Tool calls from the finished reply, unless they went out as they were written. Without
    // a grammar that types them (constrain: false; Gemma 4's notation) a call whose
    // arguments do not fit its tool's parameters is sent as content.
    if (!g.tool_names.empty() && !(w && w->streamed_calls())) {
        o.parsed = parse_tool_calls(o.content, g.tool_names, cut, &g.tools);
        if (o.parsed && !p.tool_args_typed && !arguments_valid(g.tools, *o.parsed)) {
            log("tool call with arguments that do not match the tool's parameters: sent as content");
            o.parsed.reset();
        }
        if (o.parsed)
            for (size_t i = 0; i < o.parsed->calls.size(); ++i) o.call_ids.push_back(make_id("call_"));
    }
    if (g.logprobs)
        o.logprobs = logprobs_json(api, c->probs, 0, c->probs.size(), *live.tok, 0, g.gen.post_sampling_probs);
    const bool cancelled = o.result.stop == StopReason::Cancelled || c->client_gone;
    if (w && !cancelled && w->ok()) w->end_choice(o);
}

void Server::Impl::generate(Api api, const http::Request& req, http::Response& res,
                            std::string* log_extra, const ReplyAdapter* adapter, const json* parsed) {
    // Every answer goes out through these (or to the adapter's capture).
    auto send_error = [&](http::Response& r, const ApiError& e) {
        if (adapter && adapter->capture) return adapter->capture(e.status, json::parse(error_body(e)));
        if (adapter && adapter->error) return Impl::send_json(r, e.status, adapter->error(e));
        Impl::send_error(r, e);
    };
    auto send_json = [&](http::Response& r, int status, const json& j) {
        if (adapter && adapter->capture) return adapter->capture(status, j);
        Impl::send_json(r, status, j);
    };
    const auto t_start = Clock::now();
    GenRequest g;
    Prepared p;
    g.prefill_assistant = cfg.prefill_assistant;
    g.cache_prompt = cfg.cache_prompt;
    std::optional<ApiError> bad = parsed ? parse_gen_json(api, *parsed, cfg.defaults, &g)
                                       : parse_gen_request(api, req.body, cfg.defaults, &g);
    if (!bad) bad = prepare(api, g, &p);
    std::vector<float> lora_now;
    if (!bad) bad = lora_scales_for(g.lora, &lora_now);
    if (bad) {
        metrics.requests_failed++;
        return send_error(res, *bad);
    }

    ApiError err;
    Slot* slot = acquire(p.prompt, g.id_slot, req, res, &err, log_extra);
    if (!slot) {
        if (err.status == 499 && stopping && !res.peer_gone()) {
            metrics.cancelled++;
            *log_extra = " | the server is stopping";
            return send_error(res, {503, "unavailable_error", "the server is stopping", {}});
        }
        if (err.status == 499) {
            metrics.cancelled++;
            *log_extra = " | cancelled while waiting for a slot";
            return;
        }
        metrics.requests_failed++;
        return send_error(res, err);
    }
    metrics.processing++;
    // The request's LoRA scales on its slot; with other than the start-up ones nothing goes
    // to or comes from the prompt cache (its states were computed with those).
    const bool lora_cacheable = use_lora(slot, lora_now);
    std::string cache_note;
    if (p.condense) {
        if (auto e = condense(slot, g, &p, res)) {
            metrics.processing--;
            live.pool->release(slot->id);
            if (e->status == 499) {
                metrics.cancelled++;
                *log_extra = " | cancelled while condensing the history";
                return;
            }
            metrics.requests_failed++;
            return send_error(res, *e);
        }
        cache_note = p.context_note;
    }
    if (lora_cacheable) cache_note += reuse_prefix(slot, p.prompt, g.cache_prompt);
    if (!g.cache_prompt) slot->session->clear();

    const std::string id = make_id(api == Api::Chat ? "chatcmpl-" : "cmpl-");
    const int64_t created = (int64_t)std::time(nullptr);
    std::unique_ptr<StreamWriter> writer;
    // X-Conversation-Id: the stream also goes into a session that outlives the client (a page
    // reload resumes it with GET /v1/stream); only DELETE /v1/stream stops it then.
    std::shared_ptr<StreamSession> resumable;
    if (const std::string* cid = req.header("x-conversation-id"); g.stream && cid && !cid->empty())
        resumable = stream_sessions.create(*cid);
    struct Finalize {
        std::shared_ptr<StreamSession> s;
        ~Finalize() {
            if (s) s->finalize();
        }
    } finalize{resumable};
    auto client_alive = std::make_shared<std::atomic<bool>>(true);
    auto out = [&res, resumable, client_alive](std::string_view b) -> bool {
        if (!resumable) return res.write(std::string(b));
        resumable->append(b);
        if (client_alive->load() && !res.write(std::string(b))) *client_alive = false;
        return !resumable->cancelled();
    };
    if (g.stream) {
        const bool started = res.begin_stream(200, "text/event-stream",
                                              {{"Cache-Control", "no-cache"}});
        StreamSettings ss;
        ss.request = &g;
        ss.tok = live.tok.get();
        ss.reasoning = api == Api::Chat && cfg.reasoning;
        ss.tool_grammar = api == Api::Chat && p.tool_grammar;
        if (adapter && adapter->stream)
            ss.chunks = [out, tr = adapter->stream((int64_t)p.prompt.size(),
                                                   g.model.empty() ? live.model_name : g.model)](const json* c) {
                const std::string bytes = tr(c);
                return bytes.empty() || out(bytes);
            };
        writer = make_stream_writer(api, out, ss);
        if (!started && !resumable) writer->lost();
    }
    const auto t_gen = Clock::now();
    // n choices, one after the other on the slot: each after the first finds the prompt in
    // the slot's cache and evaluates only its last token.
    std::vector<Choice> choices((size_t)g.n_choices);
    std::string failure;
    for (int i = 0; i < g.n_choices; ++i) {
        Choice& c = choices[(size_t)i];
        c.o.index = i;
        c.o.id = id;
        c.o.model = g.model.empty() ? live.model_name : g.model;
        c.o.created = created;
        c.o.slot = slot->id;
        c.o.prompt_text = p.prompt_text;
        c.o.n_ctx = n_ctx_slot();
        c.resumable = resumable;
        c.o.logit_bias = logit_bias_json(p.gp);
        run_choice(api, g, p, slot, res, writer.get(), t_start, &c);
        if (!c.r) {
            failure = c.r.error();
            break;
        }
        if (c.client_gone || c.o.result.stop == StopReason::Cancelled) break;
    }
    metrics.processing--;
    // What the slot now holds goes to the disk cache (on its own thread), so it survives
    // a restart; a request that asked for no caching leaves no trace.
    if (live.prompt_cache && g.cache_prompt && failure.empty() && lora_cacheable)
        live.prompt_cache->store(slot->session->cache(), false, true);
    live.pool->release(slot->id);

    const Choice& first = choices[0];
    // An error once the slot ran: the stream's last event, or the whole answer.
    auto answer_error = [&](const ApiError& e) {
        if (!writer || !res.started()) return send_error(res, e);
        if (!writer->ok()) return;
        writer->fail(e);
        res.end_stream();
    };
    const bool client_gone = std::any_of(choices.begin(), choices.end(), [](const Choice& c) {
        return c.client_gone || (c.r && c.o.result.stop == StopReason::Cancelled);
    });
    // Cut by the server's shutdown, with the client still there: tell it so.
    if (client_gone && stopping && !res.peer_gone() &&
        std::none_of(choices.begin(), choices.end(), [](const Choice& c) { return c.client_gone; })) {
        metrics.cancelled++;
        *log_extra = " | cut: the server is stopping";
        return answer_error({503, "unavailable_error", "the server is stopping: the reply was cut", {}});
    }
    if (!failure.empty() && client_gone) {  // the stream could not even start: nobody to answer
        metrics.cancelled++;
        *log_extra = " | cancelled: the client went away";
        return;
    }
    if (!failure.empty()) {
        metrics.requests_failed++;
        *log_extra = " | error: " + failure;
        return answer_error({500, "server_error", failure, {}});
    }
    // Usage over every choice: the prompt once, the generated tokens of all.
    GenerateResult total = first.o.result;
    for (size_t i = 1; i < choices.size(); ++i) total.n_generated += choices[i].o.result.n_generated;
    double ttft_ms = first.ttft_ms;
    const GenerateResult& gr = first.o.result;
    if (ttft_ms < 0 && gr.n_generated > 0) ttft_ms = ms_between(t_start, Clock::now());
    metrics.requests++;
    metrics.prompt_tokens += (uint64_t)gr.n_prompt;
    metrics.cached_tokens += (uint64_t)gr.n_cached;
    for (const Choice& c : choices) {
        metrics.generated_tokens += (uint64_t)c.o.result.n_generated;
        metrics.prompt_us += (uint64_t)(c.o.result.prompt_ms * 1000.0);
        metrics.generate_us += (uint64_t)(c.o.result.generate_ms * 1000.0);
    }
    if (gr.first_token_ms > 0)
        metrics.observe_ttft((ms_between(t_start, t_gen) + gr.first_token_ms) / 1000.0);
    if (client_gone) metrics.cancelled++;

    int64_t drafted = 0, accepted = 0;
    for (const Choice& c : choices) {
        drafted += c.o.result.n_drafted;
        accepted += c.o.result.n_accepted;
    }
    metrics.drafted_tokens += (uint64_t)drafted;
    metrics.accepted_tokens += (uint64_t)accepted;
    for (const Choice& c : choices) metrics.draft_steps += (uint64_t)c.o.result.n_draft_steps;
    std::string spec_note;
    int64_t shifts = 0, discarded = 0;
    for (const Choice& c : choices) {
        shifts += c.o.result.n_shifts;
        discarded += c.o.result.n_discarded;
    }
    if (!first.o.fallback.is_null())
        spec_note += " | fallback reply: no first token within " +
                     std::to_string(cfg.timeout_first_token_ms) + " ms";
    if (shifts > 0)
        spec_note += " | context shift: " + std::to_string(shifts) + "x, dropped " +
                     std::to_string(discarded) + " tokens after the first " +
                     std::to_string(first.o.result.n_kept);
    if (slot->drafter && g.spec_n_max == 0) {
        spec_note += " | speculation off for this request (speculative.n_max 0)";
    } else if (slot->drafter) {
        char sb[160];
        if (drafted > 0)
            std::snprintf(sb, sizeof sb, " | draft %lld, accepted %lld, accept rate %.2f",
                          (long long)drafted, (long long)accepted, (double)accepted / (double)drafted);
        else
            std::snprintf(sb, sizeof sb, " | draft 0 (speculation did not pay here)");
        spec_note += sb;
    }
    char buf[600];
    std::snprintf(buf, sizeof buf,
                  " | slot %d | prompt %lld (cached %lld) %.1f ms | generated %lld%s, %.1f t/s%s | "
                  "ttft %.0f ms%s%s | %s",
                  slot->id, (long long)gr.n_prompt, (long long)gr.n_cached, gr.prompt_ms,
                  (long long)total.n_generated,
                  choices.size() > 1 ? (" in " + std::to_string(choices.size()) + " choices").c_str() : "",
                  gr.generate_per_second(), spec_note.c_str(), std::max(0.0, ttft_ms),
                  p.constraint.empty() ? "" : " | constrained: ", p.constraint.c_str(),
                  client_gone ? "cancelled: the client went away" : stop_reason_name(gr.stop));
    *log_extra = buf + cache_note;
    if (cfg.verbose) {
        // One line each, newlines shown as \n, long texts cut in the middle.
        auto shown = [](std::string t) {
            if (t.size() > 4000) t = t.substr(0, 2000) + " [...] " + t.substr(t.size() - 2000);
            std::string out;
            for (char ch : t) out += ch == '\n' ? std::string("\\n") : std::string(1, ch);
            return out;
        };
        log("request %s prompt: %s", first.o.id.c_str(), shown(p.prompt_text.empty()
                                                                    ? live.tok->detokenize(p.prompt, false)
                                                                    : p.prompt_text).c_str());
        for (const Choice& c : choices)
            log("request %s output %d: %s", first.o.id.c_str(), c.o.index, shown(c.o.result.text).c_str());
    }
    if (client_gone) return;  // nobody to answer

    GenOutcome summary = first.o;
    summary.result = total;
    if (writer) {
        if (adapter && adapter->before_end) adapter->before_end(first.o);
        writer->end(summary, first.o);
        res.end_stream();
        return;
    }
    json body;
    switch (api) {
        case Api::Chat:
            body = chat_response(first.o);
            for (size_t i = 1; i < choices.size(); ++i)
                body["choices"].push_back(chat_response(choices[i].o)["choices"][0]);
            break;
        case Api::Completions:
            body = completions_response(first.o);
            for (size_t i = 1; i < choices.size(); ++i)
                body["choices"].push_back(completions_response(choices[i].o)["choices"][0]);
            break;
        case Api::Native:
            body = native_response(first.o, g);
            break;
    }
    if (api != Api::Native) body["usage"] = usage_json(total);
    if (adapter && adapter->body) return send_json(res, 200, adapter->body(body, first.o));
    if (cfg.verbose || g.verbose)  // llama-server's __verbose: what the model saw and wrote
        body["__verbose"] = {{"prompt", p.prompt_text.empty() ? live.tok->detokenize(p.prompt, true)
                                                               : p.prompt_text},
                             {"content", first.o.result.text},
                             {"tokens_evaluated", first.o.result.n_prompt},
                             {"tokens_predicted", first.o.result.n_generated},
                             {"tokens_cached", first.o.result.n_cached}};
    send_json(res, 200, body);
}

}  // namespace edgellm::server
