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
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "edgellm/error.h"
#include "server/api/api.h"
#include "server/http/access.h"
#include "server/http/transport.h"
#include "agent/tool_service.h"

namespace edgellm::server {

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

    Result<int> listen();
    int run();   // until stop(); 0
    void stop();  // async-signal-safe

  private:
    struct Impl;
    std::unique_ptr<Impl> d_;
};

}  // namespace edgellm::server
