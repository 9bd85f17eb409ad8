// The single-model server's inside: its state, and its member functions grouped by the
// room that defines them. Nothing outside src/server/ includes this.
//
//   server.cpp                 composition: the transport, the front, start-up, run, stop
//   routes.cpp                 the route table and the request gate around every handler
//   engine/model_host.cpp      load, fit, warm, swap, sleep and wake, the draft model, LoRA
//   engine/prefix.cpp          the prompt cache, prefix reuse, the summarize policy
//   engine/generation.cpp      a generation on a slot: render, prepare, run, answer
//   api/openai/handlers.cpp    prompt batches, token counts (OpenAI's extra routes)
//   api/native/handlers.cpp    llama.cpp's tokenize, detokenize, apply-template; Vertex /predict
//   api/embeddings/handlers.cpp  embeddings and rerank
//   api/anthropic/handlers.cpp, api/responses/handlers.cpp  the other dialects over the chat path
//   api/admin/*.cpp            health, models, props, slots, LoRA, resumable streams, metrics
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "agent/cors_proxy.h"
#include "agent/tool_service.h"
#include "server/api/api.h"
#include "server/api/embeddings/embeddings.h"
#include "server/engine/context_policy.h"
#include "server/engine/metrics.h"
#include "server/engine/model_host.h"
#include "server/engine/stream_sessions.h"
#include "server/http/front.h"
#include "server/http/respond.h"
#include "edgellm/server.h"

namespace edgellm::server {

class StreamWriter;

// Whether each call's arguments match its tool's `parameters` (checked with the schema's
// grammar; a schema that cannot be written as one is not checked).
bool arguments_valid(const json& tools, const ParsedReply& parsed);

// What a validated request needs to run: its prompt and its generation settings with the
// grammar, logit bias and probabilities resolved against the model.
struct Prepared {
    std::string prompt_text;
    std::vector<int32_t> prompt;
    bool condense = false;  // --context-policy summarize: the history must be condensed
    int64_t reserve = 0;    // room the reply needs (for condensing)
    json context = nullptr; // what the context policy did (the response's "context")
    std::string context_note;  // and for the log
    GenerateParams gp;
    std::string constraint;  // what constrains the output, for the log ("" for nothing)
    bool tool_grammar = false;  // the constraint is the tool calls' grammar
    bool tool_args_typed = false;  // ... and it holds the calls' arguments to their schemas
};

struct Server::Impl {
    ServerConfig cfg;

    // ---- composition (server.cpp, routes.cpp) ----
    std::unique_ptr<Front> front;
    std::unique_ptr<http::Server> http;
    std::atomic<int> port{0};  // the port listened on (the CORS proxy never reaches it)
    std::thread http_thread;
    std::atomic<bool> stopping{false};
    std::mutex stop_mu;
    std::condition_variable stop_cv;
    void log(const char* fmt, ...) const __attribute__((format(printf, 2, 3)));
    // The route table: every endpoint, its flags and its handler.
    std::vector<Route> routes();
    // Around every handler: the readiness check, waking a sleeping model, and the request
    // gate (a model swap or sleep waits for the requests in flight, new ones wait for it).
    void gate(const Route& route, Call& call, const Handler& run);
    void send_json(http::Response& res, int status, const json& j) { respond_json(res, status, j); }
    void send_error(http::Response& res, const ApiError& e) { respond_error(res, e); }

    // GET /health: loading the model, warming it (its pages, one forward, the prompt
    // cache), ready; ready with reasons is degraded (it serves, with less than was asked).
    enum class Phase { Loading, Warming, Ready };
    std::atomic<Phase> phase{Phase::Loading};
    bool ready() const { return phase.load() == Phase::Ready; }
    mutable std::mutex health_mu;
    std::vector<std::string> degraded;
    void degrade(const std::string& why) {
        std::lock_guard<std::mutex> lock(health_mu);
        if (std::find(degraded.begin(), degraded.end(), why) == degraded.end()) degraded.push_back(why);
    }
    // Where the start-up's time went (logged once ready): (phase, ms), in order.
    std::vector<std::pair<std::string, double>> startup;
    bool starting = true;
    void startup_phase(const char* what, Clock::time_point* t) {
        const auto now = Clock::now();
        if (starting) startup.emplace_back(what, ms_between(*t, now));
        *t = now;
    }

    // ---- the model host (engine/model_host.cpp) ----
    Loaded live;  // the model serving now and everything built on it
    // Positions each slot holds: the context's per-sequence size.
    int64_t n_ctx_slot() const { return live.ctx->params().n_ctx; }
    // The model, its tokenizer and context, within --memory-limit (--fit: a smaller
    // context); "" or why not (nothing is kept then).
    std::string load_main(const std::string& path, Loaded* l, size_t in_use = 0);
    std::string fit_memory(const Model& m, ContextParams* cp, size_t in_use);
    std::string fitted;  // what --fit chose ("" : nothing)
    // --mlock (a failure is a warning and makes the server degraded) and the warm-up read
    // of every weight page.
    void pin_and_warm(const Model& m, const char* what);
    // The draft model and each slot's drafter (cfg.spec); "" or why not.
    std::string load_speculation();
    // Once serving, on a thread of its own: the repacking for decode that the model's load
    // left for later (LoadOptions::repack_later: healthy without waiting for it), done
    // while no request is in flight; then a repack cache file the load did not find, at the
    // lowest priority (a GB goes at the disk's speed). Each logged when done.
    void keep_repacked(const Model& m) {
        m.finish_in_background([this](const std::string& note) { log("%s", note.c_str()); },
                               [busy = requests_busy] { return busy->load() > 0; });
    }
    // The load options of every model the server loads: repacking left for later.
    LoadOptions load_options() const {
        LoadOptions o = cfg.load;
        o.repack_later = true;
        return o;
    }
    // The slots (sessions), their pool and the step batcher over l's context.
    void build_slots(Loaded* l);
    // One step through every layer of l's context, so the first request runs warm code.
    void warm_step(Loaded* l);
    // Exchange the live model and everything built on it with l's (under the gate: no
    // request in flight), so that l then holds the old ones.
    void swap_loaded(Loaded* l, const std::function<void()>& under_gate = nullptr);
    // Exchange the live model with l's (the caller holds the gate).
    void exchange(Loaded* l) { std::swap(live, *l); }
    std::string loading_path;  // a model being loaded for a swap (under swap_mu's owner)
    mutable std::mutex loading_mu;
    // POST /models/load: another model, loaded while the current one serves, then switched
    // to between requests; on any failure the current one stays.
    void models_load(const http::Request& req, http::Response& res, std::string* log_extra);
    // Where it may load from (real paths, fixed at start-up): the served model's directory,
    // as given and with its links resolved (-m's and --fallback-model's), and
    // cfg.models_allow_dirs.
    std::vector<std::string> load_dirs;
    void set_load_dirs();
    // Its "model" as the file to load (a bare name: the one beside the model serving now),
    // or why it is refused: a step up (..), outside load_dirs once its links are resolved
    // (403), no such file (400).
    std::optional<ApiError> model_to_load(std::string* path) const;
    // Requests in flight, and a swap waiting for them (new requests wait for the swap).
    std::mutex gate_mu;
    std::condition_variable gate_cv;
    int in_flight = 0;
    // The same count for the models' background threads (shared: they may outlive this).
    std::shared_ptr<std::atomic<int>> requests_busy = std::make_shared<std::atomic<int>>(0);
    bool swapping = false;
    std::mutex swap_mu;  // one swap at a time
    // --sleep-idle-seconds: after that long without a request the model and everything
    // built on it are unloaded (the memory goes back to the system); /health, /props,
    // /models, /slots and /metrics answer from what was there, any other request loads it
    // again first.
    std::atomic<bool> sleeping{false};
    std::atomic<int64_t> last_active_ms{0};  // steady-clock ms when the last request ended
    json props_asleep, models_asleep, slots_asleep;
    uint64_t steps_before = 0;      // forward steps of the contexts unloaded by sleeping
    int64_t most_tokens_before = 0;
    void go_to_sleep();
    std::string wake();

    // LoRA adapters (--lora, loaded with the model; their ids are their places) and the
    // scales a request without "lora" gets (POST /lora-adapters changes them). A slot whose
    // KV was computed with other adapters or scales starts again; only what was computed with
    // the start-up scales goes to (and comes from) the prompt cache, whose key says so.
    std::mutex lora_mu;
    std::vector<float> lora_scales;   // now
    std::vector<float> lora_startup;  // at start-up
    std::string lora_key_of(const std::vector<float>& scales) const;
    static std::vector<std::pair<std::shared_ptr<const LoraAdapter>, float>> lora_config(
        const std::vector<std::shared_ptr<const LoraAdapter>>& as, const std::vector<float>& scales);
    // The scales a "lora" list asks for (those it does not list at 0; the ids checked
    // against the adapters); no list: the server's scales. For requests and POST /lora-adapters.
    std::optional<ApiError> lora_scales_for(const std::optional<std::vector<std::pair<int, float>>>& list,
                                            std::vector<float>* out);
    // A request body's "lora" (absent or null: none).
    static std::optional<ApiError> body_lora(const json& body, std::optional<std::vector<std::pair<int, float>>>* out);
    // Puts the slot's sequence on these scales (emptied when its KV was computed with others).
    // True when they are the start-up scales (the prompt cache's).
    bool use_lora(Slot* slot, const std::vector<float>& scales);

    // ---- prefixes (engine/prefix.cpp) ----
    // The prompt cache, and its newest entries restored into the slots.
    void open_prompt_cache();
    // Before a request runs on a slot: keep what the slot holds (when the prompt would cut
    // it), and restore a cached prefix longer than the slot's own. "" or a note for the log.
    std::string reuse_prefix(Slot* slot, const std::vector<int32_t>& prompt, bool cache_prompt);
    // --context-policy summarize: condense the oldest turns of g's chat until the prompt and
    // p.reserve fit, summarizing on the slot (or taking a kept summary), and render again.
    std::optional<ApiError> condense(Slot* slot, GenRequest& g, Prepared* p, http::Response& res);
    SummaryCache summaries;

    // ---- generation (engine/generation.cpp) ----
    Metrics metrics;
    const int64_t process_start_unix = (int64_t)std::time(nullptr);
    // Another API answered through the chat path (Anthropic's messages, OpenAI's
    // responses): the reply's shape, and the stream's events made from the chat chunks.
    struct ReplyAdapter {
        std::function<json(const json& chat_body, const GenOutcome& first)> body;
        // An error's body in the API's shape (unset: OpenAI's).
        std::function<json(const ApiError&)> error;
        // Told the first choice's outcome before the stream's end (a stop string matched...).
        std::function<void(const GenOutcome& first)> before_end;
        // (prompt tokens, model name) -> a translator: a chat chunk (nullptr: the end) in,
        // the API's SSE bytes out.
        std::function<std::function<std::string(const json*)>(int64_t, const std::string&)> stream;
        // When set (not streaming): the answer, or the error, goes here instead of out.
        std::function<void(int status, const json& body)> capture;
    };
    // One generation request, its body parsed from req.body (or given: `parsed`, what another
    // dialect translated into a chat request); the answer in api's shape, or through the
    // adapter.
    void generate(Api api, const http::Request& req, http::Response& res, std::string* log_extra,
                  const ReplyAdapter* adapter = nullptr, const json* parsed = nullptr);
    // The prompt of a chat request, rendered by the model's template.
    std::string render(const GenRequest& g, bool* bos_in_text) const;
    // Whether a chat request asks to think (the templates' enable_thinking), and the
    // thinking blocks its reply may write (engine/thinking.cpp).
    bool thinking_enabled(const GenRequest& g) const;
    ThinkingParams thinking_params(Api api, const GenRequest& g, const std::string& prompt_text) const;
    // How the model writes tool calls (from its chat template).
    ToolFormat tool_format() const;
    std::string template_text() const;  // the chat template in use (empty: a built-in format)
    // The slot for a request (the one whose cache shares most with `prompt`; `want`: that
    // slot, -1 any), waiting in the queue while every slot is busy. Null with *err: 503 with
    // Retry-After when --max-queue requests already wait (said in *log_extra, with the peer),
    // 499 when the client went away or the server stops.
    Slot* acquire(const std::vector<int32_t>& prompt, int want, const http::Request& req,
                  http::Response& res, ApiError* err, std::string* log_extra);
    struct Choice;
    std::optional<ApiError> prepare(Api api, GenRequest& g, Prepared* p);
    void run_choice(Api api, const GenRequest& g, const Prepared& p, Slot* slot,
                    http::Response& res, StreamWriter* w, Clock::time_point t_start, Choice* c);
    json logit_bias_json(const GenerateParams& gp) const;

    // ---- the API dialects (api/*/handlers.cpp) ----
    // A prompt array of several prompts (llama-server's batch, OpenAI's prompt list): each
    // answered in turn, the answers gathered.
    void generate_batch(Api api, const http::Request& req, http::Response& res,
                        std::string* log_extra, const json& body);
    // One generation with this body, its answer (or error) kept instead of sent: the status
    // (0: the client went away).
    int generate_captured(Api api, const http::Request& req, const json& body, http::Response& res,
                          json* answer, std::string* log_extra);
    void completions(Api api, const http::Request& req, http::Response& res, std::string* log_extra);
    // The chat prompt's token count of a chat request (nullopt: *err says why).
    std::optional<int64_t> count_chat_tokens(const json& body, ApiError* err);
    // POST /v1/chat/completions/input_tokens: the prompt's token count, nothing generated.
    void input_tokens_count(const http::Request& req, http::Response& res);
    void tokenize(const http::Request& req, http::Response& res);
    void detokenize(const http::Request& req, http::Response& res);
    void apply_template(const http::Request& req, http::Response& res);
    void predict(const http::Request& req, http::Response& res, std::string* log_extra);
    // POST /embedding, /embeddings (llama.cpp's shape) and /v1/embeddings (oai).
    void embeddings(bool oai, const http::Request& req, http::Response& res, std::string* log_extra);
    void rerank(const http::Request& req, http::Response& res, std::string* log_extra);
    Context::Pooling pooling() const;
    // Each input's tokens (the first text piece with the model's BOS/EOS), checked against
    // the vocabulary and the slot's context.
    std::optional<ApiError> input_tokens(const std::vector<InputPrompt>& in,
                                         std::vector<std::vector<int32_t>>* out) const;
    // Each prompt's pooled hidden states, on one slot; false when they could not be made
    // (the error answered, or the client gone: logged).
    bool embed_all(const std::vector<std::vector<int32_t>>& prompts, const std::vector<float>& lora_scales_now,
                   Context::Pooling pooling, const http::Request& req, http::Response& res, std::string* log_extra,
                   std::vector<std::vector<float>>* out);
    void anthropic_messages(const http::Request& req, http::Response& res, std::string* log_extra);
    void anthropic_count_tokens(const http::Request& req, http::Response& res);
    void responses(const http::Request& req, http::Response& res, std::string* log_extra);
    void responses_input_tokens(const http::Request& req, http::Response& res);

    // ---- admin (api/admin/*.cpp) ----
    void health(http::Response& res);
    void props(http::Response& res);
    void models(http::Response& res);
    void slots_get(http::Response& res);
    json props_json() const;
    json models_json() const;
    json slots_json() const;
    void slots_post(const http::Request& req, http::Response& res);
    void slot_action(const http::Request& req, http::Response& res, int id, std::string action);
    void lora_adapters_get(http::Response& res);
    void lora_adapters_post(const http::Request& req, http::Response& res, std::string* log_extra);
    void metrics_get(http::Response& res);
    StreamSessions stream_sessions;  // resumable streams (X-Conversation-Id)
    void stream_get(const http::Request& req, http::Response& res);
    void stream_delete(const http::Request& req, http::Response& res);
    void streams_lookup(const http::Request& req, http::Response& res);

    // ---- agent tools (src/agent) ----
    std::unique_ptr<agent::ToolService> tools;  // GET/POST /tools (null: none configured)
    // The tools of --tools and the MCP servers; "" or why not (a bad flag).
    std::string start_tools();
    // --ui-mcp-proxy: GET/POST /cors-proxy?url=http://... forwarded for the chat page (which
    // a browser would stop from calling other origins), with only the headers the page names
    // (x-llama-server-proxy-header-NAME: VALUE is sent as NAME: VALUE).
    void cors_proxy(const http::Request& req, http::Response& res, std::string* log_extra);
};

}  // namespace edgellm::server
