// `edgellm serve`: a resident single-user LLM server with llama-server's HTTP API (OpenAI
// chat and completions, llama.cpp's /completion, tokenize, slots, props, metrics).
//
// Threads: the HTTP layer runs one thread per connection, and a generation runs on its
// request's thread. Slots are the context's sequences; a request waits (in a bounded FIFO
// queue) for an idle slot, the one with the longest common prefix with its prompt, and
// sessions that run at the same time take turns per forward step. A watcher polls the
// client's socket while a request is generating and raises the slot's cancel flag when the
// client goes away, which stops prefill at the next layer and decode before the next step.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "edgellm/agent.h"
#include "edgellm/chat.h"
#include "edgellm/error.h"
#include "edgellm/grammar.h"
#include "edgellm/http.h"
#include "edgellm/model.h"
#include "edgellm/prompt_cache.h"
#include "edgellm/session.h"
#include "edgellm/speculative.h"

namespace edgellm::server {

// Speculative decoding (llama-server's -md and --spec-type): off unless a draft model or
// prompt lookup is asked for.
struct SpecConfig {
    std::string draft_model;  // -md: a small model with the same vocabulary
    bool draft = false;       // the draft model drafts
    bool ngram = false;       // prompt lookup drafts (before the draft model, when both)
    int draft_n_max = 3;      // most draft-model tokens per step (--draft-max)
    int ngram_n_max = 16;     // most lookup tokens per step (--spec-ngram-simple-size-m,
                              // else --draft-max)
    int n_max = 16;           // the larger of those in use: most drafts a step checks
    int n_min = 0;            // fewer drafted: the step goes alone (--draft-min)
    float p_min = 0.0f;       // the draft model drafts while its top probability >= this
    int ngram_min = NgramDrafter::kMinLookup, ngram_max = NgramDrafter::kMaxLookup;  // lookup
                                                          // lengths tried, longest first
    int64_t n_ctx = 0;        // the draft's context (-cd); 0: the model's
    int n_threads = 0;        // -td; 0: -t
    TensorType type_k = TensorType::F16, type_v = TensorType::F16;  // -ctkd / -ctvd
    bool adaptive = true;     // choose the draft length per slot (off: always up to n_max)
    bool on() const { return draft || ngram; }
};

// What happens to a request that does not fit the context (its prompt, or the prompt and
// room for the reply): refused with both counts (Error); shifted while generating
// (Shift: llama-server's --context-shift); or, for chat, its oldest turns summarized by the
// model (Summarize).
enum class ContextPolicy { Error, Shift, Summarize };

struct ServerConfig {
    http::Options http;
    CorsPolicy cors;  // --cors-origins and friends
    // --allowed-hosts: names the Host header may give besides loopback, --host and the
    // address reached (comma-separated; "*": any). Checked on the admin routes, and on every
    // route when tools, MCP or the CORS proxy are on.
    std::string allowed_hosts;
    std::string model_path;
    std::string alias;  // the model's name in responses; default: the file name
    std::vector<std::string> aliases;  // --alias a,b,c: every name (alias is the first, sorted)
    std::vector<std::string> tags;     // --tags: listed in /models
    LoadOptions load;
    ContextParams ctx;  // ctx.n_ctx is the total: each of the n_parallel slots gets n_ctx / n_parallel
    int n_parallel = 1;
    // --kv-unified: each slot may hold up to the whole n_ctx (not n_ctx / n_parallel); the KV
    // pages are taken as positions are used, so memory follows what the slots hold (the
    // bill counts the worst case, every slot full).
    bool kv_unified = false;
    int max_queue = 16;       // requests waiting for a slot; more get 503
    GenerateParams defaults;  // -n and the sampling flags
    std::vector<std::string> api_keys;  // empty: no key needed
    bool metrics = false;     // GET /metrics
    bool slots_endpoint = true;
    // The directory of POST /slots/N?action=save|restore (empty: off), resolved once at
    // start-up when it is a symbolic link; a file name in it that is a link is refused.
    std::string slot_save_path;
    // POST /models/load loads only GGUF files under these directories (links resolved: one
    // that leads out is refused) and the served model's (-m's, --fallback-model's): the
    // command line gives edgellm's model directory and every --models-allow-dir.
    std::vector<std::string> models_allow_dirs;
    // Prefixes of earlier prompts kept to restore into a slot instead of evaluating again:
    // in RAM (--cache-ram MiB; 0: off, < 0: no limit) and in a directory that survives a
    // restart (--prompt-cache DIR, bounded by --prompt-cache-max-mib), whose newest
    // entries are restored into the slots at start-up.
    int64_t cache_ram_mib = 64;
    bool cache_idle_slots = true;  // llama-server's --cache-idle-slots: keep what a new prompt cuts
    std::string prompt_cache_dir;
    int64_t prompt_cache_max_mib = 1024;
    std::string chat_template;   // Jinja source to use instead of the model's; empty: the model's
    std::optional<ChatFormat> chat_format;  // a built-in format instead (--chat-template NAME)
    std::string chat_template_kwargs;  // JSON object, default template variables
    bool webui = true;
    bool warmup = true;
    bool mlock = false;
    bool log = true;  // one line per request on stderr (--log-disable turns it off)
    // A thinking model's <think>...</think> goes out as reasoning_content (llama-server's
    // --reasoning-format auto / deepseek); false: left in the content (none).
    bool reasoning = true;
    // --reasoning on|auto (true) or off (false): the templates' enable_thinking variable
    // (--chat-template-kwargs and a request's reasoning_effort, budget and
    // chat_template_kwargs override it); off also closes a thinking block the model opens.
    bool enable_thinking = true;
    // --reasoning-budget: tokens a thinking block may take before its end is forced (-1: no
    // limit, 0: no thinking); a request's reasoning_budget_tokens overrides it.
    int32_t reasoning_budget = -1;
    // --reasoning-effort: the effort of a request that gives none (empty: none given), as
    // a request's reasoning_effort acts.
    std::string reasoning_effort;
    // A chat whose last message is the assistant's continues it (--no-prefill-assistant: off).
    bool prefill_assistant = true;
    // --grammar / --json-schema: constrains every request that brings no grammar, schema or
    // tools of its own (null: none).
    std::shared_ptr<const Grammar> grammar;
    SpecConfig spec;
    ContextPolicy context_policy = ContextPolicy::Error;
    // -v: each request's prompt and output in the log (seed 002's debugging advice).
    bool verbose = false;
    // Called once, when /health first says ok (the service manager's readiness).
    std::function<void()> on_ready;
    // --memory-limit: weights + KV cache + scratch + --cache-ram (and the draft model's) must
    // fit in this many bytes, else the model is refused with the bill; with --fit the
    // context shrinks until it fits. 0: no limit.
    int64_t memory_limit = 0;
    bool fit = false;
    // --fallback-model: served (and /health says degraded) when the model cannot be loaded
    // or does not fit.
    std::string fallback_model;
    // --timeout-first-token with --fallback-reply: a reply whose first token is not ready
    // this long after the request arrived is stopped and answered with the text instead.
    int64_t timeout_first_token_ms = 0;
    std::string fallback_reply;
    // --sleep-idle-seconds: unload the model after this long without a request, load it
    // again on the next one (0: never).
    int sleep_idle_seconds = 0;
    bool cache_prompt = true;   // a request's cache_prompt default (--no-cache-prompt: false)
    std::string api_prefix;     // --api-prefix: the routes live under it ("/llm")
    // Vertex AI's prediction protocol ($AIP_MODE=PREDICTION): POST predict_route takes
    // {"instances": [...]}, each with "@requestFormat" (chatCompletions, completions,
    // completion), and answers {"predictions": [...]}; health_route answers as /health.
    std::string predict_route, health_route;
    // GET/POST /tools: llama-server's built-in agent tools (--tools all|NAMES, run on the
    // host or --tools-runtime) and the tools of MCP servers (--mcp-servers-config FILE,
    // --mcp-servers-json JSON). Neither: /tools answers 403.
    std::string tools, tools_runtime, mcp_config_path, mcp_json;
    // Not empty: the host listened on, reachable from other machines with no API key and no
    // --tools-allow-remote: tools that write are refused at start-up (ToolConfig::exposed_on).
    std::string tools_exposed_on;
    bool ui_mcp_proxy = false;  // --ui-mcp-proxy: /cors-proxy for the chat page
    int summary_max_tokens = 160;
    // --embedding: POST /embedding, /embeddings and /v1/embeddings (the final hidden
    // states, pooled); --reranking (implies it): POST /rerank. Without them those answer 400
    // naming the flag, as llama-server refuses them.
    bool embeddings = false;
    bool reranking = false;
    // --pooling none|mean|cls|last (rank: --reranking); unset: the model's
    // <arch>.pooling_type, else last (the token that has seen the whole input).
    std::optional<Context::Pooling> pooling;  // the longest summary (--context-policy summarize)
    // --lora FILE / --lora-scaled FILE:SCALE: LoRA adapters loaded with the model and applied
    // at these scales (--lora-init-without-apply: all 0 until POST /lora-adapters); a
    // request's "lora" sets its own. Their ids are their places in this list.
    std::vector<std::pair<std::string, float>> lora;
    bool lora_init_without_apply = false;
};

class Server {
  public:
    explicit Server(ServerConfig cfg);
    ~Server();
    // Bind the port (fails with the reason, e.g. the address is in use). Returns the port.
    Result<int> listen();
    // Load the model (GET /health answers 503 meanwhile), then serve until stop(). Returns
    // the process exit code: 0 after stop(), 1 when the model could not be loaded.
    int run();
    // Thread-safe; also from a signal handler.
    void stop();

    struct Impl;

  private:
    std::unique_ptr<Impl> impl_;
};

// ---- router mode ------------------------------------------------------------------------
//
// Router mode (`edgellm serve` without -m): one HTTP front for several models, as
// llama-server's router. Each model runs in its own `edgellm serve -m FILE` child process on
// a loopback port, started when a request names it (or POST /models/load) and stopped when
// it is unloaded, evicted (the least recently used idle one, once --models-max are up) or the
// router stops; a child's memory goes back to the system with it, and a child that crashes
// takes no other model with it. Requests are forwarded as they came (streams pass through
// as they arrive) and the request's "model" (or ?model=) chooses the child.
//
// The models: every GGUF in edgellm's model directory (~/.cache/edgellm/models, its file
// name is the id) and $EDGELLM_MODEL, every GGUF in --models-dir (id: the file name without
// .gguf; a subdirectory: its name), and the sections of a --models-preset INI file (id: the
// section; `model = FILE` and any serve flag as `name = value`; [*] applies to all).

// One model the router can start.
struct RouterModel {
    std::string id;
    std::string path;                // the GGUF; empty: cannot be started (`why` says why)
    std::string why;                 // e.g. a preset naming only a Hugging Face repository
    std::vector<std::string> args;   // serve flags of its own (from the preset)
    std::string source;              // "cache", "dir" or "preset"
    bool load_on_startup = false;    // preset: load-on-startup = true
    bool hidden = false;             // not listed (a preset with dedup-cache-models uses it)
};

struct RouterConfig {
    http::Options http;
    CorsPolicy cors;
    std::string allowed_hosts;  // as ServerConfig's
    std::vector<std::string> api_keys;
    std::string api_prefix;
    bool webui = true;
    bool log = true;
    std::string self_exe = "/proc/self/exe";  // the edgellm binary the children run
    std::vector<std::string> child_args;      // serve flags every child gets
    std::vector<std::string> cache_files;     // GGUFs of the model directory (+ $EDGELLM_MODEL)
    std::string default_model;                // its path: what a request naming no model gets
    std::string models_dir;                   // --models-dir
    std::string models_preset;                // --models-preset
    int models_max = 4;                       // children running at once (0: no limit)
    bool autoload = true;                     // a request may start its model
    int load_timeout_s = 600;                 // a child not healthy by then is stopped
    std::function<void()> on_ready;           // the default model is up (or there is none)
    agent::ToolConfig tools;                         // /tools: the router's own (no model needed)
    bool ui_mcp_proxy = false;                // /cors-proxy
    // What serve makes of a flag (a preset key with dashes): -1 unknown, 0 takes no value,
    // 1 takes one. Unset: a key is a flag when its value is true/false, else takes it.
    std::function<int(const std::string& flag)> flag_kind;
};

// The catalogue as the files say now (warnings: entries skipped, with the reason).
std::vector<RouterModel> scan_router_models(const RouterConfig& cfg, std::vector<std::string>* warnings);

// A --models-preset file: sections [NAME] of `key = value` lines (`;` or `#` comments);
// [*] (or keys before any section) are defaults for every section. Errors: a line that is
// neither. Keys are given without leading dashes.
struct PresetSection {
    std::string name;
    std::vector<std::pair<std::string, std::string>> keys;
};
Result<std::vector<PresetSection>> parse_preset_ini(const std::string& text);

// llama.cpp's download cache ($LLAMA_CACHE, else Hugging Face's hub cache): the directory,
// and the file of ORG/NAME[:TAG] there (with `file`: that file of the repository; without a
// tag: Q4_K_M, else the first), or "" when it is not there. Read only: nothing is downloaded.
std::string hf_cache_directory();
std::string find_cached_hf_model(const std::string& repo_tag, const std::string& file = "");

class Router {
  public:
    explicit Router(RouterConfig cfg);
    ~Router();  // stops every child
    Router(const Router&) = delete;
    Router& operator=(const Router&) = delete;

    // /tools: the tools of RouterConfig::tools started (MCP servers too); "" or why not (a
    // bad tool list, runtime or MCP config, or tools that write offered off this machine
    // without a key: ToolConfig::exposed_on). Before listen().
    std::string start_tools();
    Result<int> listen();
    int run();   // until stop(); 0
    void stop();  // async-signal-safe

  private:
    struct Impl;
    std::unique_ptr<Impl> d_;
};

}  // namespace edgellm::server
