// edgellm serve [-m MODEL] [--host H] [--port P] [-np N] [-c CTX] ... — the HTTP server,
// with llama-server's flags: the seeds' command lines work with the binary name replaced.
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "args.h"
#include "commands.h"
#include "edgellm/chat.h"
#include "edgellm/server.h"

namespace edgellm::cli {

namespace {

// systemd's readiness protocol (sd_notify without libsystemd): a datagram to the socket
// in $NOTIFY_SOCKET ('@' at the start: the abstract namespace). Nothing when it is unset.
void notify_service_manager(const std::string& state) {
    const char* path = std::getenv("NOTIFY_SOCKET");
    if (!path || !*path) return;
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    const size_t len = std::strlen(path);
    if (len >= sizeof addr.sun_path) return;
    std::memcpy(addr.sun_path, path, len);
    if (addr.sun_path[0] == '@') addr.sun_path[0] = '\0';
    const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return;
    (void)::sendto(fd, state.data(), state.size(), MSG_NOSIGNAL, (const sockaddr*)&addr,
                   (socklen_t)(offsetof(sockaddr_un, sun_path) + len));
    ::close(fd);
}

// The pid file, written atomically (a temporary file renamed into place).
bool write_pid_file(const std::string& path) {
    const std::string tmp = path + ".tmp";
    std::FILE* f = std::fopen(tmp.c_str(), "w");
    if (!f) return false;
    const bool ok = std::fprintf(f, "%d\n", (int)::getpid()) > 0 && std::fclose(f) == 0;
    return ok && std::rename(tmp.c_str(), path.c_str()) == 0;
}

// "1500000000", "1.7G", "1700M", "1.5GiB": bytes (decimal suffixes as powers of 1024, as
// llama.cpp and ollama read them).
std::optional<int64_t> parse_bytes(const std::string& text) {
    size_t used = 0;
    double v = 0;
    try {
        v = std::stod(text, &used);
    } catch (...) {
        return std::nullopt;
    }
    std::string unit = text.substr(used);
    for (char& c : unit) c = (char)std::toupper((unsigned char)c);
    double mul = 1;
    if (unit.empty() || unit == "B")
        mul = 1;
    else if (unit == "K" || unit == "KB" || unit == "KIB")
        mul = 1024.0;
    else if (unit == "M" || unit == "MB" || unit == "MIB")
        mul = 1048576.0;
    else if (unit == "G" || unit == "GB" || unit == "GIB")
        mul = 1073741824.0;
    else
        return std::nullopt;
    if (!(v > 0) || v * mul > 9e18) return std::nullopt;
    return (int64_t)(v * mul);
}

}  // namespace

namespace {

bool read_file(const std::string& path, std::string* out) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return false;
    out->assign(std::istreambuf_iterator<char>(in), {});
    return true;
}

// Speculative decoding's options (llama-server's names, old and new).
void add_spec_options(ArgParser& p) {
    p.option({"-md", "--model-draft", "--spec-draft-model"}, "FILE",
             "draft model for speculative decoding: a small model with the same vocabulary");
    p.option({"--spec-type"}, "LIST",
             "speculative decoding: draft (draft-simple), ngram (ngram-simple, ngram-map-k, "
             "ngram-map-k4v, ngram-mod, ngram-cache: prompt lookup), both comma-separated, or "
             "none (default: draft with -md, else none)");
    p.option({"--draft-max", "--draft", "--draft-n", "--spec-draft-n-max"}, "N",
             "most tokens drafted per step (default 3 with a draft model, 16 for lookup)");
    p.option({"--draft-min", "--draft-n-min", "--spec-draft-n-min"}, "N",
             "fewer tokens drafted than this: the step goes without them (default 0)");
    p.option({"--draft-p-min", "--spec-draft-p-min"}, "P",
             "the draft model drafts while its most likely token has at least this probability "
             "(default 0)");
    p.option({"--spec-ngram-simple-size-n", "--spec-ngram-size-n"}, "N",
             "longest run of tokens prompt lookup matches (default 5; it tries down to 3)");
    p.option({"--spec-ngram-simple-size-m", "--spec-ngram-size-m", "--spec-ngram-mod-n-max"}, "N",
             "most tokens prompt lookup drafts per step (default: --draft-max, else 16)");
    p.option({"-cd", "--ctx-size-draft", "--spec-draft-ctx-size"}, "N",
             "the draft model's context, shared by the slots (default: the same as -c)");
    p.option({"-td", "--threads-draft", "--spec-draft-threads"}, "N",
             "threads for the draft model (default: -t)");
    p.option({"-tbd", "--threads-batch-draft", "--spec-draft-threads-batch"}, "N",
             "accepted: the draft model uses -td for prompts too");
    p.option({"-ctkd", "--cache-type-k-draft", "--spec-draft-type-k"}, "T",
             "the draft model's KV cache type of the keys (default f16; the types of -ctk)");
    p.option({"-ctvd", "--cache-type-v-draft", "--spec-draft-type-v"}, "T",
             "the draft model's KV cache type of the values (default f16)");
    p.option({"-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft", "--spec-draft-ngl"}, "N",
             "accepted: edgellm runs the draft model on the CPU too");
    p.option({"-devd", "--device-draft", "--spec-draft-device"}, "LIST",
             "none or cpu: the draft model runs on the CPU");
    p.flag({"--spec-fixed"},
           "always draft up to --draft-max (default: per slot, the draft length that the "
           "measured accept rate and costs say is fastest, 0 when drafting does not pay)");
}

// Notes for the log in *notes (accepted flags that change nothing on the CPU).
bool read_spec_options(const ArgParser& p, server::SpecConfig* sc, std::vector<std::string>* notes,
                       std::string* err) {
    sc->draft_model = p.get_or("-md", "");
    std::string types = p.get_or("--spec-type", sc->draft_model.empty() ? "none" : "draft");
    size_t at = 0;
    bool none = false;
    while (at <= types.size()) {
        const size_t comma = std::min(types.find(',', at), types.size());
        const std::string t = types.substr(at, comma - at);
        at = comma + 1;
        if (t == "draft" || t == "draft-simple") {
            sc->draft = true;
        } else if (t == "ngram" || t == "ngram-simple" || t == "ngram-map-k" ||
                   t == "ngram-map-k4v" || t == "ngram-mod" || t == "ngram-cache" ||
                   t == "lookup") {
            sc->ngram = true;
        } else if (t == "none") {
            none = true;
        } else if (t == "draft-eagle3" || t == "draft-mtp" || t == "draft-dflash" ||
                   t == "draft-dspark") {
            *err = "--spec-type " + t + " needs a model-specific draft head, which edgellm does "
                   "not run; use draft (with -md) or ngram";
            return false;
        } else if (!t.empty()) {
            *err = "--spec-type: unknown type \"" + t + "\" (none, draft, ngram)";
            return false;
        }
    }
    if (none && (sc->draft || sc->ngram)) {
        *err = "--spec-type: none together with another type";
        return false;
    }
    if (sc->draft && sc->draft_model.empty()) {
        *err = "--spec-type draft needs a draft model (-md FILE)";
        return false;
    }
    if (!sc->draft && !sc->draft_model.empty()) {
        *err = "-md is given but --spec-type " + types + " does not use a draft model (add draft)";
        return false;
    }
    int64_t n_max = 3, n_min = 0, ctx = 0, td = 0, ngld = 0, size_n = NgramDrafter::kMaxLookup,
            size_m = -1;
    float p_min = 0.0f;
    if (!p.get_int("--draft-max", 0, 64, &n_max, err) || !p.get_int("--draft-min", 0, 64, &n_min, err) ||
        !p.get_int("-cd", 0, 1 << 24, &ctx, err) || !p.get_int("-td", 1, 1024, &td, err) ||
        !p.get_int("-ngld", -1, 1 << 20, &ngld, err) ||
        !p.get_int("--spec-ngram-simple-size-n", 1, 64, &size_n, err) ||
        !p.get_int("--spec-ngram-simple-size-m", 1, 64, &size_m, err) ||
        !p.get_float("--draft-p-min", 0.0, 1.0, &p_min, err))
        return false;
    const bool spec = sc->draft || sc->ngram;
    for (const char* f : {"--draft-max", "--draft-min", "--draft-p-min", "-cd", "-td", "-tbd", "-ctkd",
                          "-ctvd", "-ngld", "-devd", "--spec-fixed", "--spec-ngram-simple-size-n",
                          "--spec-ngram-simple-size-m"})
        if (p.has(f) && !spec) {
            *err = std::string(f) + " is for speculative decoding, which is off: give -md DRAFT_MODEL "
                   "or --spec-type ngram";
            return false;
        }
    for (const char* f : {"--draft-p-min", "-cd", "-td", "-tbd", "-ctkd", "-ctvd", "-ngld", "-devd"})
        if (p.has(f) && spec && !sc->draft) {
            *err = std::string(f) + " is for the draft model, and there is none (-md)";
            return false;
        }
    // Lookup drafts up to --spec-ngram-simple-size-m, else --draft-max when given, else 16;
    // the draft model up to --draft-max (default 3, llama-server's).
    const int64_t ngram_n_max = size_m > 0 ? size_m : p.has("--draft-max") ? n_max : 16;
    const int64_t most = std::max(sc->draft ? n_max : 0, sc->ngram ? ngram_n_max : 0);
    if (n_min > most) {
        *err = "--draft-min " + std::to_string(n_min) + " is above the most drafted per step (" +
               std::to_string(most) + ", --draft-max)";
        return false;
    }
    sc->draft_n_max = (int)n_max;
    sc->ngram_n_max = (int)ngram_n_max;
    sc->n_max = (int)most;
    sc->n_min = (int)n_min;
    sc->p_min = p_min;
    sc->ngram_max = (int)size_n;
    sc->ngram_min = (int)std::min<int64_t>(NgramDrafter::kMinLookup, size_n);
    sc->n_ctx = ctx;
    sc->n_threads = (int)td;
    sc->adaptive = !p.has("--spec-fixed");
    for (const char* f : {"-ctkd", "-ctvd"}) {
        if (!p.has(f)) continue;
        const std::string name = p.get_or(f, "");
        const auto t = parse_kv_type(name);
        if (!t) {
            *err = std::string(f) + " takes " + kv_type_names() + ", got \"" + name + "\"";
            return false;
        }
        (std::string(f) == "-ctkd" ? sc->type_k : sc->type_v) = *t;
    }
    if (auto dev = p.get("-devd"); dev && *dev != "none" && *dev != "cpu" && *dev != "CPU") {
        *err = "-devd " + *dev + ": edgellm runs the draft model on the CPU (none or cpu)";
        return false;
    }
    if (p.has("-ngld") && ngld != 0)
        notes->push_back("-ngld " + std::to_string(ngld) +
                         ": the draft model runs on the CPU; no layers are offloaded");
    if (p.has("-tbd")) notes->push_back("-tbd: the draft model uses -td (or -t) threads for prompts too");
    return true;
}

}  // namespace

namespace {

// SIGINT / SIGTERM stop the server: blocked (every thread inherits the mask, so call this
// before the server starts threads) and taken by one thread with sigtimedwait.
void block_stop_signals() {
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
    signal(SIGPIPE, SIG_IGN);
}

// A listening server (Server or Router) run until a stop signal, with its pid file.
template <class S>
int run_until_stopped(S& srv, bool log, const std::string& pid_file, const std::string& listening) {
    if (!pid_file.empty() && !write_pid_file(pid_file))
        return fail("serve", "cannot write the pid file " + pid_file + ": " + std::strerror(errno), 2);
    if (log) std::fprintf(stderr, "edgellm serve: %s\n", listening.c_str());
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    std::atomic<bool> done{false};
    std::thread signals([&] {
        const timespec tick{0, 200 * 1000 * 1000};
        while (!done) {
            const int sig = sigtimedwait(&stop_signals, nullptr, &tick);
            if (sig == SIGINT || sig == SIGTERM) {
                if (log) std::fprintf(stderr, "edgellm serve: stopping (signal %d)\n", sig);
                notify_service_manager("STOPPING=1");
                srv.stop();
                return;
            }
        }
    });
    const int code = srv.run();
    done = true;
    signals.join();
    if (!pid_file.empty()) std::remove(pid_file.c_str());
    return code;
}

// Router mode (serve without -m): the flags that are the router's own stay here; every other
// flag is given to each model's `edgellm serve` child as it was written.
int serve_router(const ArgParser& p, const std::vector<std::string>& args, const server::ServerConfig& cfg,
                 const std::string& default_model) {
    server::RouterConfig rc;
    rc.http = cfg.http;
    rc.cors = cfg.cors;
    rc.api_keys = cfg.api_keys;
    rc.api_prefix = cfg.api_prefix;
    rc.webui = cfg.webui;
    rc.log = cfg.log;
    rc.tools = {cfg.tools, cfg.tools_runtime, cfg.mcp_config_path, cfg.mcp_json, cfg.cors.origins};
    rc.ui_mcp_proxy = cfg.ui_mcp_proxy;
    rc.models_dir = p.get_or("--models-dir", "");
    rc.models_preset = p.get_or("--models-preset", "");
    rc.autoload = !p.has("--no-models-autoload");
    rc.default_model = default_model;
    std::error_code exe_ec;
    if (auto exe = std::filesystem::read_symlink("/proc/self/exe", exe_ec); !exe_ec) rc.self_exe = exe.string();
    std::string err;
    int64_t mm = 4;
    if (!p.get_int("--models-max", 0, 1024, &mm, &err)) return fail("serve", err, 2);
    rc.models_max = (int)mm;
    if (!rc.models_dir.empty() && !std::filesystem::is_directory(rc.models_dir))
        return fail("serve", "--models-dir " + rc.models_dir + " is not a directory", 2);
    if (!rc.models_preset.empty()) {
        std::ifstream f(rc.models_preset);
        if (!f) return fail("serve", "cannot read --models-preset " + rc.models_preset, 2);
        std::stringstream ss;
        ss << f.rdbuf();
        if (auto parsed = server::parse_preset_ini(ss.str()); !parsed)
            return fail("serve", "--models-preset " + rc.models_preset + ": " + parsed.error(), 2);
    }
    if (p.has("-a"))
        return fail("serve", "--alias names the one model of -m FILE; a router's models are named by "
                             "their files or by --models-preset sections", 2);
    // edgellm's model directory, and $EDGELLM_MODEL
    std::error_code ec;
    std::vector<std::string> cache;
    for (std::filesystem::directory_iterator it(models_dir(), ec), end; !ec && it != end; it.increment(ec))
        if (it->is_regular_file() && it->path().extension() == ".gguf" &&
            it->path().filename().string().rfind("mmproj", 0) != 0)
            cache.push_back(it->path().string());
    std::sort(cache.begin(), cache.end());
    if (const char* env = std::getenv("EDGELLM_MODEL"); env && *env &&
        std::find(cache.begin(), cache.end(), std::string(env)) == cache.end())
        cache.insert(cache.begin(), env);
    rc.cache_files = cache;
    static const std::set<std::string> own = {
        "-m", "--models-dir", "--models-preset", "--models-max", "--models-autoload", "--no-models-autoload",
        "--host", "--port", "--pid-file", "--log-file", "--cors-origins", "--cors-methods", "--cors-headers",
        "--cors-credentials", "--no-cors-credentials", "--api-prefix", "--webui", "--no-webui",
        "--tools", "--tools-runtime", "--mcp-servers-config", "--mcp-servers-json", "--ui-mcp-proxy",
        "--no-ui-mcp-proxy"};
    for (size_t i = 0; i < args.size(); ++i) {
        std::string a = args[i];
        bool inline_value = false;
        if (a.rfind("--", 0) == 0 && a.find('=') != std::string::npos) {
            inline_value = true;
            a = a.substr(0, a.find('='));
        }
        bool has_value = false;
        const std::string name = p.canonical(a, &has_value);
        const bool takes_next = has_value && !inline_value && i + 1 < args.size();
        if (own.count(name)) {
            if (takes_next) ++i;
            continue;
        }
        rc.child_args.push_back(args[i]);
        if (takes_next) rc.child_args.push_back(args[++i]);
    }
    rc.on_ready = [] { notify_service_manager("READY=1\nSTATUS=serving (router)"); };
    rc.flag_kind = [&p](const std::string& flag) {
        bool has_value = false;
        const std::string name = p.canonical(flag, &has_value);
        if (name.empty() || own.count(name)) return -1;  // (the router's own are not per model)
        return has_value ? 1 : 0;
    };

    server::Router router(rc);
    auto bound = router.listen();
    if (!bound) return fail("serve", bound.error());
    return run_until_stopped(router, rc.log, p.get_or("--pid-file", ""),
                             "router listening on http://" + rc.http.host + ":" + std::to_string(*bound));
}

}  // namespace

int cmd_serve(const std::vector<std::string>& given) {
    // llama.cpp's --fit takes on|off; a bare --fit means on.
    std::vector<std::string> args;
    for (size_t i = 0; i < given.size(); ++i) {
        args.push_back(given[i]);
        if ((given[i] == "--fit" || given[i] == "-fit") &&
            (i + 1 == given.size() || (given[i + 1] != "on" && given[i + 1] != "off")))
            args.push_back("on");
    }
    std::shared_ptr<const Grammar> cfg_grammar;
    server::SpecConfig cfg_spec;
    ArgParser p("serve", "edgellm serve [-m MODEL] [--host HOST] [--port PORT] [options]");
    p.option({"-m", "--model"}, "FILE",
             "GGUF model; without it the server is a router: every model it knows is served, "
             "each in its own process, the request's \"model\" choosing (a request naming none "
             "gets the default model, the one scripts/fetch-models.sh installed)");
    p.option({"-hf", "-hfr", "--hf-repo"}, "ORG/NAME[:QUANT]",
             "the model llama.cpp downloaded with -hf (its cache: $LLAMA_CACHE, else Hugging Face's); "
             "edgellm never downloads");
    p.option({"-hff", "--hf-file"}, "FILE", "with -hf: that file of the repository");
    p.option({"-hfd", "-hfrd", "--hf-repo-draft"}, "ORG/NAME[:QUANT]", "the draft model (-md) from the same cache");
    p.option({"--spec-synth-len"}, "L",
             "refused: synthetic draft acceptance (llama-server's benchmarking mode, whose output is "
             "not the model's) is not built; every draft is checked by the model");
    p.option({"--spec-synth-rates"}, "P0,P1,...", "refused: the same");
    p.option({"--models-dir"}, "DIR",
             "router: every GGUF in DIR is a model (id: the file name without .gguf; a "
             "subdirectory: its name), besides edgellm's model directory");
    p.option({"--models-preset"}, "FILE",
             "router: an INI file of models, [ID] sections of `model = FILE` and serve flags as "
             "`ctx-size = 4096` ([*]: for every model; load-on-startup = true)");
    p.option({"--models-max"}, "N",
             "router: models running at once (default 4; 0: no limit); one more evicts the least "
             "recently used idle one");
    p.flag({"--models-autoload"}, "router: a request naming a model that is not running starts it (the default)");
    p.flag({"--no-models-autoload"},
           "router: only POST /models/load starts a model (and nothing at start-up)");
    p.option({"-a", "--alias"}, "NAME[,NAME...]",
             "the model's name in responses (default: the file name); several: all listed in "
             "/models, the first in sorted order is its id");
    p.option({"--tags"}, "LIST", "comma-separated labels of the model, listed in GET /models");
    p.option({"--host"}, "HOST", "address to listen on (default 127.0.0.1: this machine only)");
    p.option({"--port"}, "N", "port to listen on (default 8080; 0: any free port)");
    p.option({"-np", "--parallel"}, "N",
             "slots: requests generated at the same time, sharing the context (default 1)");
    p.flag({"-kvu", "--kv-unified"},
           "each slot may use the whole -c instead of -c / -np; KV memory follows the positions "
           "in use (up to -np x -c)");
    p.flag({"-no-kvu", "--no-kv-unified"}, "each slot holds -c / -np positions (the default)");
    p.flag({"-cb", "--cont-batching"}, "accepted (slots always decode together)");
    p.flag({"-nocb", "--no-cont-batching"}, "accepted (with -np 1 there is nothing to batch)");
    p.option({"-c", "--ctx-size"}, "N",
             "context size, shared by the slots (default: training context, at most 4096)");
    p.option({"-t", "--threads"}, "N", "threads (default: all cores, or the big cores)");
    p.option({"-tb", "--threads-batch"}, "N", "threads for prompts (edgellm uses -t for both)");
    p.option({"-b", "--batch-size"}, "N", "prompt tokens per forward step (default 512)");
    p.option({"-ub", "--ubatch-size"}, "N", "physical batch; the smaller of -b and -ub is used");
    p.option({"-n", "--n-predict"}, "N", "default most tokens per reply; -1 = no limit (default -1)");
    p.option({"-fa", "--flash-attn"}, "on|off|auto",
             "accepted: attention is always fused (q8_0 KV needs nothing more)");
    add_kv_options(p, false);
    p.flag({"--no-mmap"}, "accepted: the file is mapped read-only either way");
    p.option({"-ngl", "--gpu-layers", "--n-gpu-layers"}, "N", "accepted: edgellm runs on the CPU");
    p.option({"--api-key"}, "KEY", "require this key (Authorization: Bearer KEY); comma-separated for several");
    p.option({"--api-key-file"}, "FILE", "require one of the keys in FILE (one per line)");
    p.flag({"--metrics"}, "serve Prometheus metrics at GET /metrics");
    p.flag({"--slots"}, "serve GET /slots (the default)");
    p.flag({"--no-slots"}, "do not serve GET /slots");
    p.option({"--slot-save-path"}, "DIR", "directory for POST /slots/N?action=save|restore");
    p.option({"--memory-limit"}, "BYTES",
             "weights + KV cache + scratch + --cache-ram (+ the draft model) must fit this "
             "(suffixes K, M, G; KiB, MiB, GiB), else the model is refused with the bill");
    p.option({"-fit", "--fit"}, "on|off",
             "with --memory-limit: shrink the context until it fits, and say what it chose "
             "(a bare --fit means on)");
    p.option({"--fallback-model"}, "FILE",
             "serve this model (GET /health: degraded) when -m cannot be loaded or does not fit");
    p.option({"--timeout-first-token"}, "MS",
             "a reply whose first token is not ready MS after the request arrived is stopped "
             "and answered with --fallback-reply");
    p.option({"--fallback-reply"}, "TEXT", "the answer when --timeout-first-token runs out");
    p.option({"--prompt-cache"}, "DIR",
             "keep the KV of each conversation's prefix in DIR, so it survives a restart; the "
             "newest go back into the slots at start-up");
    p.option({"--prompt-cache-max-mib"}, "N", "disk budget of --prompt-cache (default 1024)");
    p.flag({"--cache-idle-slots"}, "keep a slot's conversation in --cache-ram when a new prompt "
                                   "replaces it (the default)");
    p.flag({"--no-cache-idle-slots"}, "do not (a returning conversation is evaluated again)");
    p.option({"-cram", "--cache-ram"}, "N",
             "MiB of earlier prompts' KV kept in RAM to restore into a slot (default 64; "
             "-1: no limit, 0: off)");
    p.option({"--chat-template"}, "NAME|JINJA",
             "chat template: a llama.cpp built-in name (chatml, llama3, gemma, llama2, mistral-v7, "
             "phi3, phi4, command-r, deepseek3, ...: the error lists them) or Jinja source "
             "(default: the model's)");
    p.option({"--chat-template-file"}, "FILE", "chat template from a Jinja file");
    p.option({"--chat-template-kwargs"}, "JSON",
             "default template variables, e.g. '{\"enable_thinking\":false}'");
    p.flag({"--jinja"}, "render the model's Jinja chat template (the default)");
    p.option({"--reasoning-format"}, "auto|deepseek|none",
             "a thinking model's <think> text: as reasoning_content (auto, deepseek; the "
             "default) or left in the content (none)");
    p.option({"-rea", "--reasoning"}, "on|off|auto",
             "thinking: the templates' enable_thinking is true (on, auto: the default) or "
             "false (off)");
    p.flag({"--no-prefill-assistant"},
           "an assistant message last is a finished turn (default: the reply continues it)");
    p.flag({"--no-jinja"}, "accepted (templates are rendered with Jinja)");
    p.option({"-to", "--timeout"}, "SECONDS", "read and write timeout of a connection (default 600)");
    p.option({"--threads-http"}, "N", "most concurrent connections (default 64)");
    p.option({"--max-queue"}, "N",
             "most requests waiting for a busy slot; more get 503 (default 16)");
    p.flag({"--no-webui", "--no-ui"}, "do not serve the chat page at /");
    p.flag({"--embedding", "--embeddings"},
           "serve embeddings: POST /embedding and /v1/embeddings (the model's final hidden "
           "states, pooled by --pooling)");
    p.flag({"--reranking", "--rerank"},
           "serve POST /rerank (implies --embedding): documents scored by the cosine "
           "similarity of their embeddings to the query's");
    p.option({"--pooling"}, "none|mean|cls|last|rank",
             "how a text's token vectors become one embedding (default: the model's, else "
             "last); rank: --reranking");
    p.option({"--cors-origins"}, "ORIGINS",
             "origins browsers may call from: * (any: the request's echoed; the default), "
             "localhost (only localhost, 127.0.0.1, [::1] pages), or a comma-separated list");
    p.option({"--cors-methods"}, "METHODS", "methods a preflight allows (default \"GET, POST, DELETE, OPTIONS\")");
    p.option({"--cors-headers"}, "HEADERS", "headers a preflight allows (default *)");
    p.flag({"--cors-credentials"}, "a preflight allows credentials (the default)");
    p.flag({"--no-cors-credentials"}, "it does not (with --cors-origins *: Access-Control-Allow-Origin *)");
    p.option({"--sleep-idle-seconds"}, "N",
             "unload the model after N seconds without a request (its memory goes back to the "
             "system); the next request loads it again (default 0: never)");
    p.flag({"--ui-mcp-proxy", "--webui-mcp-proxy"},
           "serve /cors-proxy?url=http://...: the chat page's requests to other servers (MCP over "
           "HTTP) forwarded, with only the headers it names");
    p.flag({"--no-ui-mcp-proxy", "--no-webui-mcp-proxy"}, "no /cors-proxy (the default: it answers 403)");
    // llama-server's offload and device flags: a CPU has nothing to offload to.
    p.option({"-dev", "--device"}, "LIST", "none or cpu: edgellm runs on the CPU");
    p.flag({"--list-devices"}, "print the devices (the CPU) and exit");
    p.option({"-sm", "--split-mode"}, "MODE", "accepted: one CPU, nothing to split");
    p.option({"-ts", "--tensor-split"}, "LIST", "accepted: one CPU, nothing to split");
    p.option({"-mg", "--main-gpu"}, "N", "accepted: there is no GPU");
    p.flag({"-nkvo", "--no-kv-offload"}, "accepted: the KV cache is in RAM");
    p.flag({"-kvo", "--kv-offload"}, "accepted: the KV cache is in RAM");
    p.flag({"--op-offload"}, "accepted: no GPU to offload to");
    p.flag({"--no-op-offload"}, "accepted: no GPU to offload to");
    p.flag({"-cmoe", "--cpu-moe"}, "accepted: every expert is on the CPU");
    p.option({"-ncmoe", "--n-cpu-moe"}, "N", "accepted: every expert is on the CPU");
    p.option({"--rpc"}, "SERVERS", "accepted: edgellm runs on this machine only (no RPC backends)");
    // multimodal projectors: this build has no image or audio encoder
    p.option({"-mm", "--mmproj"}, "FILE", "accepted, no effect: no image or audio encoder (images are refused with a 400)");
    p.option({"-mmu", "--mmproj-url"}, "URL", "accepted, no effect (nothing is downloaded, no image encoder)");
    p.flag({"--no-mmproj"}, "accepted: no projector is loaded (never is)");
    p.flag({"--mmproj-auto"}, "accepted, no effect: no image encoder");
    p.flag({"--no-mmproj-auto"}, "accepted: no projector is loaded");
    p.flag({"--mmproj-offload"}, "accepted, no effect");
    p.flag({"--no-mmproj-offload"}, "accepted, no effect");
    p.option({"--media-path"}, "DIR", "accepted, no effect: no image encoder to read local media for");
    p.option({"-mu", "--model-url"}, "URL", "refused: edgellm never downloads (fetch the file, pass -m)");
    p.option({"-gan", "--grp-attn-n"}, "N", "group-attention (self-extend) factor: only 1 (off)");
    p.option({"-gaw", "--grp-attn-w"}, "N", "group-attention width: only with --grp-attn-n above 1 (refused)");
    p.flag({"--no-cache-prompt"}, "a request's cache_prompt defaults to false (its prefix is evaluated again)");
    p.flag({"--cache-prompt"}, "a request's cache_prompt defaults to true (the default)");
    p.flag({"--ignore-eos"}, "requests ignore end-of-generation tokens unless they say otherwise");
    p.flag({"--warmup"}, "read every weight page and run one step before serving (the default)");
    p.flag({"--webui", "--ui"}, "serve the chat page at / (the default)");
    p.option({"--api-prefix"}, "PREFIX", "serve every route under PREFIX (e.g. /llm), without the trailing slash");
    p.option({"--reasoning-budget"}, "N", "thinking tokens allowed: -1 no limit (the default), 0 none (as --reasoning off)");
    p.option({"--reasoning-effort"}, "LEVEL", "the templates' reasoning_effort (minimal, low, medium, high, ...; default: the template's)");
    p.option({"--tools"}, "all|NAMES",
             "serve GET/POST /tools: the built-in agent tools (read_file, write_file, edit_file, "
             "grep_search, file_glob_search, exec_shell_command, get_info), all or a comma-separated "
             "list; they act on this machine with the server's rights (CORS then defaults to localhost)");
    p.option({"--tools-runtime"}, "RUNTIME",
             "where the tools act: ssh:HOST, docker-container:ID, podman-container:ID, docker:IMAGE "
             "(default: this machine)");
    p.option({"--mcp-servers-config"}, "FILE", "MCP servers ({\"mcpServers\": {NAME: {command, args, env}}}) whose tools /tools offers as NAME_TOOL");
    p.option({"--mcp-servers-json"}, "JSON", "the same, inline");
    p.flag({"--offline"}, "accepted: edgellm never downloads anything (models are local files)");
    p.option({"--lora"}, "FILE[,FILE...]",
             "LoRA adapter (llama.cpp's GGUF adapter file) applied at scale 1; repeatable; ids in the "
             "order given (GET /lora-adapters, a request's \"lora\": [{\"id\", \"scale\"}])");
    p.option({"--lora-scaled"}, "FILE:SCALE[,...]", "LoRA adapter applied at SCALE; repeatable");
    p.flag({"--lora-init-without-apply"}, "load the adapters at scale 0 (POST /lora-adapters sets the scales)");
    p.flag({"--context-shift"},
           "when the context fills while generating, drop the oldest tokens after the first "
           "--keep and go on (default: the reply ends, finish_reason length)");
    p.flag({"--no-context-shift"}, "a full context ends the reply (the default)");
    p.option({"--context-policy"}, "error|shift|summarize",
             "a conversation longer than the context: refused with both counts (error, the "
             "default), shifted while generating (shift: --context-shift), or its oldest turns "
             "summarized by the model into the system prompt (summarize; chat only)");
    p.option({"--keep"}, "N",
             "tokens a context shift keeps at the start (default 0; -1: the whole prompt)");
    p.flag({"--log-disable"}, "no log lines");
    p.option({"--log-file"}, "FILE", "append the log to FILE instead of stderr (log rotation: copytruncate)");
    p.flag({"-v", "--verbose"}, "also log each request's prompt and output");
    p.option({"--pid-file"}, "FILE", "write the process id to FILE once listening (removed at exit)");
    p.option({"--kernels"}, "NAME", "kernel set (default: the best that is not opt-in; amx-bf16 is opt-in)");
    add_spec_options(p);
    add_sampling_options(p);
    add_grammar_options(p);
    add_cpu_options(p);
    if (auto done = parse_command_line(p, args)) return *done;
    std::string err;
    if (!read_grammar_options(p, &cfg_grammar, &err)) return fail("serve", err, 2);
    if (!p.positional().empty()) return fail("serve", "unexpected argument " + p.positional()[0], 2);
    std::vector<std::string> spec_notes;
    if (!read_spec_options(p, &cfg_spec, &spec_notes, &err)) return fail("serve", err, 2);

    server::ServerConfig cfg;
    for (const char* f : {"--spec-synth-len", "--spec-synth-rates"})
        if (p.has(f))
            return fail("serve", std::string(f) + ": synthetic draft acceptance (a benchmarking mode whose "
                        "output is not the model's) is not built; edgellm checks every draft with the model", 2);
    // -hf: a model llama.cpp downloaded (never a download here)
    std::vector<std::string> hf_args;
    auto from_cache = [&](const char* flag, const char* as, const std::string& file) -> std::string {
        const std::string repo = *p.get(flag);
        const std::string path = server::find_cached_hf_model(repo, file);
        if (path.empty())
            return std::string(flag) + " " + repo + (file.empty() ? "" : " --hf-file " + file) + ": not in llama.cpp's "
                   "download cache " + server::hf_cache_directory() + "; edgellm never downloads (fetch the GGUF "
                   "file and pass " + as + " FILE)";
        hf_args = {as, path};
        return "";
    };
    // The arguments without -hf, -hff and -hfd (and their values).
    auto without_hf = [&p](const std::vector<std::string>& in) {
        std::vector<std::string> out;
        for (size_t i = 0; i < in.size(); ++i) {
            const std::string name = p.canonical(in[i].substr(0, in[i].find('=')));
            if (name == "-hf" || name == "-hff" || name == "-hfd") {
                if (in[i].find('=') == std::string::npos) ++i;
                continue;
            }
            out.push_back(in[i]);
        }
        return out;
    };
    if (p.has("-hf")) {
        if (p.has("-m")) return fail("serve", "-m and -hf both name the model: give one", 2);
        if (std::string e = from_cache("-hf", "-m", p.get_or("-hff", "")); !e.empty()) return fail("serve", e, 2);
        std::vector<std::string> again = args;
        again.insert(again.end(), hf_args.begin(), hf_args.end());
        if (p.has("-hfd")) {
            if (std::string e = from_cache("-hfd", "-md", ""); !e.empty()) return fail("serve", e, 2);
            again.insert(again.end(), hf_args.begin(), hf_args.end());
        }
        return cmd_serve(without_hf(again));  // serve again with the files in their place
    }
    if (p.has("-hff")) return fail("serve", "--hf-file needs -hf ORG/NAME", 2);
    if (p.has("-hfd")) {
        if (p.has("-md")) return fail("serve", "-md and -hfd both name the draft model: give one", 2);
        if (std::string e = from_cache("-hfd", "-md", ""); !e.empty()) return fail("serve", e, 2);
        std::vector<std::string> out = without_hf(args);
        out.insert(out.end(), hf_args.begin(), hf_args.end());
        return cmd_serve(out);
    }
    const bool router = !p.has("-m");
    for (const char* f : {"--models-dir", "--models-preset", "--models-max", "--no-models-autoload", "--models-autoload"})
        if (!router && p.has(f))
            return fail("serve", std::string(f) + " is for router mode (no -m): with -m FILE one model is served", 2);
    if (p.has("--models-autoload") && p.has("--no-models-autoload"))
        return fail("serve", "--models-autoload and --no-models-autoload contradict each other", 2);
    auto model_path = model_path_or_default(p);
    if (!router && !model_path) return fail("serve", model_path.error(), 2);
    if (model_path) cfg.model_path = *model_path;
    // --alias a,b,c: names the model answers to (llama-server: the first in sorted order is
    // its id); --tags: labels listed in /models.
    auto split_list = [](const std::string& text) {
        std::set<std::string> items;
        size_t at = 0;
        while (at <= text.size()) {
            const size_t comma = std::min(text.find(',', at), text.size());
            std::string item = text.substr(at, comma - at);
            while (!item.empty() && item.front() == ' ') item.erase(item.begin());
            while (!item.empty() && item.back() == ' ') item.pop_back();
            if (!item.empty()) items.insert(item);
            at = comma + 1;
        }
        return std::vector<std::string>(items.begin(), items.end());
    };
    cfg.aliases = split_list(p.get_or("--alias", ""));
    cfg.alias = cfg.aliases.empty() ? "" : cfg.aliases.front();
    cfg.tags = split_list(p.get_or("--tags", ""));
    cfg.http.host = p.get_or("--host", "127.0.0.1");
    int64_t port = 8080, np = 1, n_ctx = 0, threads = 0, tb = 0, n_batch = 512, n_ubatch = 512,
            n_predict = -1, timeout = 600, conns = 64, ngl = 0, keep = 0, max_queue = 16;
    if (!p.get_int("--port", 0, 65535, &port, &err) || !p.get_int("-np", 1, 256, &np, &err) ||
        !p.get_int("-c", 0, 1 << 24, &n_ctx, &err) || !p.get_int("-t", 1, 1024, &threads, &err) ||
        !p.get_int("-tb", 1, 1024, &tb, &err) || !p.get_int("-b", 1, 1 << 20, &n_batch, &err) ||
        !p.get_int("-ub", 1, 1 << 20, &n_ubatch, &err) ||
        !p.get_int("-n", -1, 1 << 30, &n_predict, &err) ||
        !p.get_int("--timeout", 1, 86400, &timeout, &err) ||
        !p.get_int("--threads-http", 1, 4096, &conns, &err) ||
        !p.get_int("--max-queue", 0, 1 << 16, &max_queue, &err) ||
        !p.get_int("-ngl", -1, 1 << 20, &ngl, &err) || !p.get_int("--keep", -1, 1 << 30, &keep, &err) ||
        !p.get_int("--cache-ram", -1, 1 << 30, &cfg.cache_ram_mib, &err) ||
        !p.get_int("--prompt-cache-max-mib", 1, 1 << 30, &cfg.prompt_cache_max_mib, &err))
        return fail("serve", err, 2);
    cfg.http.port = (int)port;
    cfg.http.read_timeout_ms = (int)timeout * 1000;
    cfg.http.write_timeout_ms = (int)timeout * 1000;
    cfg.http.max_connections = (int)conns;
    cfg.n_parallel = (int)np;
    if (p.has("--kv-unified") && p.has("--no-kv-unified"))
        return fail("serve", "--kv-unified and --no-kv-unified contradict each other", 2);
    cfg.kv_unified = p.has("--kv-unified");
    cfg.max_queue = (int)max_queue;
    cfg.defaults.n_predict = (int32_t)n_predict;
    if (p.has("--context-shift") && p.has("--no-context-shift"))
        return fail("serve", "--context-shift and --no-context-shift contradict each other", 2);
    {
        const std::string cp = p.get_or("--context-policy", p.has("--context-shift") ? "shift" : "error");
        if (cp == "error")
            cfg.context_policy = server::ContextPolicy::Error;
        else if (cp == "shift")
            cfg.context_policy = server::ContextPolicy::Shift;
        else if (cp == "summarize")
            cfg.context_policy = server::ContextPolicy::Summarize;
        else
            return fail("serve", "--context-policy takes error, shift or summarize, got \"" + cp + "\"", 2);
        if (p.has("--context-shift") && cp != "shift")
            return fail("serve", "--context-shift contradicts --context-policy " + cp, 2);
        if (p.has("--no-context-shift") && cp == "shift")
            return fail("serve", "--no-context-shift contradicts --context-policy shift", 2);
    }
    cfg.defaults.context_shift = cfg.context_policy == server::ContextPolicy::Shift;
    cfg.defaults.n_keep = keep;
    if (p.has("--keep") && !cfg.defaults.context_shift)
        return fail("serve", "--keep needs --context-shift or --context-policy shift (without it "
                             "the context is never shifted)", 2);
    if (!read_sampling_options(p, &cfg.defaults.sampling, &err)) return fail("serve", err, 2);
    if (auto fa = p.get("--flash-attn"); fa && *fa != "on" && *fa != "off" && *fa != "auto")
        return fail("serve", "--flash-attn takes on, off or auto, got \"" + *fa + "\"", 2);
    if (!read_kv_options(p, &cfg.ctx.type_k, &cfg.ctx.type_v, &err)) return fail("serve", err, 2);
    cfg.ctx.n_ctx = n_ctx;
    cfg.ctx.n_batch = std::min(n_batch, n_ubatch);
    cfg.ctx.n_threads = (int)threads;
    if (!read_cpu_options(p, &cfg.ctx, &err)) return fail("serve", err, 2);
    cfg.load = load_options(p);
    cfg.mlock = p.has("--mlock");
    cfg.warmup = !p.has("--no-warmup");
    cfg.metrics = p.has("--metrics");
    cfg.slots_endpoint = !p.has("--no-slots");
    cfg.slot_save_path = p.get_or("--slot-save-path", "");
    cfg.prompt_cache_dir = p.get_or("--prompt-cache", "");
    if (p.has("--cache-idle-slots") && p.has("--no-cache-idle-slots"))
        return fail("serve", "--cache-idle-slots and --no-cache-idle-slots contradict each other", 2);
    cfg.cache_idle_slots = !p.has("--no-cache-idle-slots");
    cfg.fallback_model = p.get_or("--fallback-model", "");
    cfg.fallback_reply = p.get_or("--fallback-reply", "");
    if (!p.get_int("--timeout-first-token", 1, 86400000, &cfg.timeout_first_token_ms, &err))
        return fail("serve", err, 2);
    if (p.has("--timeout-first-token") != p.has("--fallback-reply"))
        return fail("serve", "--timeout-first-token and --fallback-reply go together (what to "
                             "answer, and when)", 2);
    if (p.has("--fallback-reply") && cfg.fallback_reply.empty())
        return fail("serve", "--fallback-reply must not be empty", 2);
    if (auto ml = p.get("--memory-limit")) {
        auto bytes = parse_bytes(*ml);
        if (!bytes || *bytes <= 0)
            return fail("serve", "--memory-limit takes a size in bytes (suffixes K, M, G, KiB, MiB, "
                                 "GiB), got \"" + *ml + "\"", 2);
        cfg.memory_limit = *bytes;
    }
    if (auto f = p.get("--fit")) {
        if (*f != "on" && *f != "off")
            return fail("serve", "--fit takes on or off, got \"" + *f + "\"", 2);
        cfg.fit = *f == "on";
        if (cfg.fit && cfg.memory_limit == 0)
            return fail("serve", "--fit needs --memory-limit (edgellm does not guess the memory "
                                 "it may take)", 2);
    }
    if (p.has("--prompt-cache-max-mib") && cfg.prompt_cache_dir.empty())
        return fail("serve", "--prompt-cache-max-mib needs --prompt-cache DIR", 2);
    cfg.embeddings = p.has("--embedding") || p.has("--reranking");
    cfg.reranking = p.has("--reranking");
    if (auto pl = p.get("--pooling")) {
        if (*pl == "none") cfg.pooling = Context::Pooling::None;
        else if (*pl == "mean") cfg.pooling = Context::Pooling::Mean;
        else if (*pl == "cls") cfg.pooling = Context::Pooling::Cls;
        else if (*pl == "last") cfg.pooling = Context::Pooling::Last;
        else if (*pl == "rank") cfg.reranking = cfg.embeddings = true;
        else
            return fail("serve", "--pooling takes none, mean, cls, last or rank, got \"" + *pl + "\"", 2);
        if (!cfg.embeddings)
            return fail("serve", "--pooling needs --embedding or --reranking (it shapes their "
                                 "vectors)", 2);
    }
    cfg.cors.origins = p.get_or("--cors-origins", cfg.cors.origins);
    cfg.cors.methods = p.get_or("--cors-methods", cfg.cors.methods);
    cfg.cors.headers = p.get_or("--cors-headers", cfg.cors.headers);
    if (p.has("--cors-credentials") && p.has("--no-cors-credentials"))
        return fail("serve", "--cors-credentials and --no-cors-credentials contradict each other", 2);
    cfg.cors.credentials = !p.has("--no-cors-credentials");
    if (cfg.cors.origins.empty()) return fail("serve", "--cors-origins must not be empty", 2);
    {
        int64_t sleep_s = 0;
        if (!p.get_int("--sleep-idle-seconds", 0, 1 << 30, &sleep_s, &err)) return fail("serve", err, 2);
        cfg.sleep_idle_seconds = (int)sleep_s;
    }
    if (p.has("--ui-mcp-proxy") && p.has("--no-ui-mcp-proxy"))
        return fail("serve", "--ui-mcp-proxy and --no-ui-mcp-proxy contradict each other", 2);
    cfg.ui_mcp_proxy = p.has("--ui-mcp-proxy");
    if (p.has("--list-devices")) {
        std::printf("Available devices:\n  CPU (edgellm's own kernels)\n");
        return 0;
    }
    if (auto dev = p.get("--device"); dev && *dev != "none" && *dev != "cpu" && *dev != "CPU")
        return fail("serve", "--device " + *dev + ": edgellm runs on the CPU (none or cpu)", 2);
    for (const char* f : {"-sm", "-ts", "-mg", "-nkvo", "-kvo", "--op-offload", "--no-op-offload",
                          "-cmoe", "-ncmoe", "--rpc"})
        if (p.has(f)) spec_notes.push_back(std::string(f) + ": no effect on the CPU (nothing to offload or split)");
    for (const char* f : {"-mm", "-mmu", "--mmproj-auto", "--mmproj-offload", "--no-mmproj-offload",
                          "--media-path"})
        if (p.has(f)) spec_notes.push_back(std::string(f) + ": no effect: this build has no image or audio "
                                                      "encoder (such requests get a 400)");
    if (p.has("--model-url"))
        return fail("serve", "--model-url: edgellm never downloads; fetch the file and pass -m FILE", 2);
    {
        int64_t ga_n = 1, ga_w = 512;
        if (!p.get_int("--grp-attn-n", 1, 1 << 20, &ga_n, &err) || !p.get_int("--grp-attn-w", 1, 1 << 24, &ga_w, &err))
            return fail("serve", err, 2);
        if (ga_n > 1)
            return fail("serve", "--grp-attn-n " + std::to_string(ga_n) + ": group attention (self-extend) "
                                 "is not supported; use a model trained for the context, or --context-shift", 2);
        if (p.has("--grp-attn-w"))
            spec_notes.push_back("--grp-attn-w: no effect without --grp-attn-n above 1");
    }
    if (p.has("--cache-prompt") && p.has("--no-cache-prompt"))
        return fail("serve", "--cache-prompt and --no-cache-prompt contradict each other", 2);
    cfg.cache_prompt = !p.has("--no-cache-prompt");
    if (p.has("--ignore-eos")) cfg.defaults.ignore_eos = true;
    if (p.has("--warmup") && p.has("--no-warmup"))
        return fail("serve", "--warmup and --no-warmup contradict each other", 2);
    if (p.has("--webui") && p.has("--no-webui"))
        return fail("serve", "--webui and --no-webui contradict each other", 2);
    if (auto pre = p.get("--api-prefix")) {
        std::string v = *pre;
        while (!v.empty() && v.back() == '/') v.pop_back();
        if (!v.empty() && v[0] != '/') return fail("serve", "--api-prefix must start with /, got \"" + *pre + "\"", 2);
        cfg.api_prefix = v;
    }
    if (const char* mode = std::getenv("AIP_MODE"); mode && std::string(mode) == "PREDICTION") {
        const char* route = std::getenv("AIP_PREDICT_ROUTE");
        const char* health = std::getenv("AIP_HEALTH_ROUTE");
        const char* port_env = std::getenv("AIP_HTTP_PORT");
        cfg.predict_route = route && *route ? route : "/predict";
        cfg.health_route = health ? health : "";
        if (port_env && *port_env) {
            char* end = nullptr;
            const long v = std::strtol(port_env, &end, 10);
            if (!end || *end || v < 0 || v > 65535)
                return fail("serve", std::string("AIP_HTTP_PORT is not a port: ") + port_env, 2);
            cfg.http.port = (int)v;
        }
    }
    cfg.tools = p.get_or("--tools", "");
    cfg.tools_runtime = p.get_or("--tools-runtime", "");
    cfg.mcp_config_path = p.get_or("--mcp-servers-config", "");
    cfg.mcp_json = p.get_or("--mcp-servers-json", "");
    if ((p.has("--tools") || p.has("--mcp-servers-config") || p.has("--mcp-servers-json")) &&
        !p.has("--cors-origins"))
        cfg.cors.origins = "localhost";  // (tools act on this machine: no page of another origin)
    cfg.webui = !p.has("--no-webui");
    cfg.log = !p.has("--log-disable");
    cfg.verbose = p.has("--verbose");
    if (auto lf = p.get("--log-file")) {
        const int fd = ::open(lf->c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd < 0) return fail("serve", "cannot open the log file " + *lf + ": " + std::strerror(errno), 2);
        ::dup2(fd, STDERR_FILENO);  // every log line, the start-up's too
        ::close(fd);
        std::setvbuf(stderr, nullptr, _IOLBF, 0);
    }
    // --lora / --lora-scaled in the order given (their ids), as llama-server numbers them
    for (size_t i = 0; i < args.size(); ++i) {
        std::string a = args[i], value;
        if (a.rfind("--lora", 0) != 0) continue;
        const size_t eq = a.find('=');
        if (eq != std::string::npos) {
            value = a.substr(eq + 1);
            a = a.substr(0, eq);
        } else if (a == "--lora" || a == "--lora-scaled") {
            if (i + 1 >= args.size()) continue;  // (the parser said so already)
            value = args[++i];
        }
        if (a != "--lora" && a != "--lora-scaled") continue;
        size_t at = 0;
        while (at <= value.size()) {
            const size_t comma = std::min(value.find(',', at), value.size());
            std::string item = value.substr(at, comma - at);
            at = comma + 1;
            if (item.empty()) continue;
            float scale = 1.0f;
            if (a == "--lora-scaled") {
                const size_t colon = item.rfind(':');
                char* end = nullptr;
                const double v = colon == std::string::npos ? 0 : std::strtod(item.c_str() + colon + 1, &end);
                if (colon == std::string::npos || colon + 1 >= item.size() || *end != '\0' || !std::isfinite(v))
                    return fail("serve", "--lora-scaled takes FILE:SCALE, got \"" + item + "\"", 2);
                scale = (float)v;
                item = item.substr(0, colon);
            }
            if (!std::filesystem::is_regular_file(item))
                return fail("serve", "LoRA adapter " + item + ": no such file", 2);
            cfg.lora.emplace_back(item, scale);
        }
    }
    cfg.lora_init_without_apply = p.has("--lora-init-without-apply");
    cfg.chat_template_kwargs = p.get_or("--chat-template-kwargs", "");
    cfg.grammar = cfg_grammar;
    cfg.spec = cfg_spec;
    {
        const std::string rf = p.get_or("--reasoning-format", "auto");
        if (rf != "auto" && rf != "deepseek" && rf != "none" && rf != "deepseek-legacy")
            return fail("serve", "--reasoning-format takes auto, deepseek or none, got \"" + rf + "\"", 2);
        cfg.reasoning = rf != "none";
    }
    if (auto r = p.get("--reasoning")) {
        if (*r == "on" || *r == "auto" || *r == "true" || *r == "1" || *r == "enabled")
            cfg.enable_thinking = true;
        else if (*r == "off" || *r == "false" || *r == "0" || *r == "disabled")
            cfg.enable_thinking = false;
        else
            return fail("serve", "--reasoning takes on, off or auto, got \"" + *r + "\"", 2);
    }
    cfg.prefill_assistant = !p.has("--no-prefill-assistant");
    {
        int64_t budget = -1;
        if (!p.get_int("--reasoning-budget", -1, 1 << 30, &budget, &err)) return fail("serve", err, 2);
        if (budget > 0)
            return fail("serve", "--reasoning-budget " + std::to_string(budget) + ": only -1 (no limit) or 0 "
                                 "(no thinking) are supported", 2);
        if (budget == 0) cfg.enable_thinking = false;
    }
    if (auto effort = p.get("--reasoning-effort"); effort && *effort != "default") {
        nlohmann::ordered_json kw = cfg.chat_template_kwargs.empty() ? nlohmann::ordered_json::object()
                                                   : nlohmann::ordered_json::parse(cfg.chat_template_kwargs, nullptr, false);
        if (!kw.is_object()) return fail("serve", "--chat-template-kwargs must be a JSON object", 2);
        if (!kw.contains("reasoning_effort")) kw["reasoning_effort"] = *effort;
        cfg.chat_template_kwargs = kw.dump();
    }
    if (auto t = p.get("--chat-template")) {
        if (auto fmt = chat_format_from_name(*t)) {
            cfg.chat_format = fmt;
        } else if (auto src = builtin_chat_template(*t)) {
            cfg.chat_template = *src;  // llama.cpp's other built-in names, as Jinja
        } else if (t->find("{%") != std::string::npos || t->find("{{") != std::string::npos) {
            cfg.chat_template = *t;
        } else {
            std::string names = "chatml, llama3, gemma";
            for (const std::string& n : builtin_chat_template_names()) names += ", " + n;
            return fail("serve", "--chat-template \"" + *t +
                                     "\" is neither a known name (" + names + ") nor a Jinja template",
                        2);
        }
    }
    if (auto f = p.get("--chat-template-file"))
        if (!read_file(*f, &cfg.chat_template))
            return fail("serve", "cannot read the chat template " + *f, 2);
    if (auto k = p.get("--api-key")) {
        size_t at = 0;
        while (at <= k->size()) {
            const size_t comma = std::min(k->find(',', at), k->size());
            if (comma > at) cfg.api_keys.push_back(k->substr(at, comma - at));
            at = comma + 1;
        }
    }
    if (auto f = p.get("--api-key-file")) {
        std::ifstream in(*f);
        if (!in) return fail("serve", "cannot read the API key file " + *f, 2);
        std::string line;
        while (std::getline(in, line)) {
            while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
            if (!line.empty() && line[0] != '#') cfg.api_keys.push_back(line);
        }
        if (cfg.api_keys.empty()) return fail("serve", "the API key file " + *f + " has no key", 2);
    }
    err = choose_kernels(p.get_or("--kernels", ""));
    if (!err.empty()) return fail("serve", err, 2);

    auto note = [&](const std::string& s) {
        if (cfg.log) std::fprintf(stderr, "edgellm serve: %s\n", s.c_str());
    };
    if (p.has("-ngl") && ngl != 0) note("-ngl: edgellm runs on the CPU; no layers are offloaded");
    if (p.has("-tb") && tb != threads)
        note("-tb: prompts and decoding use the same " +
             (threads > 0 ? std::to_string(threads) : std::string("default")) + " threads (-t)");
    for (const std::string& n : spec_notes) note(n);
    if (p.has("--no-mmap")) note("--no-mmap: the file is mapped read-only and warmed up instead");
    const auto hosts = split_list(cfg.http.host);
    const bool loopback_only = std::all_of(hosts.begin(), hosts.end(), [](const std::string& h) {
        return h == "127.0.0.1" || h == "localhost" || h == "::1";
    });
    if (!loopback_only && cfg.api_keys.empty())
        std::fprintf(stderr,
                     "edgellm serve: WARNING: listening on %s without --api-key: anyone who can "
                     "reach this port can use the model\n",
                     cfg.http.host.c_str());

    block_stop_signals();
    if (router) return serve_router(p, args, cfg, model_path ? *model_path : std::string());

    cfg.on_ready = [] { notify_service_manager("READY=1\nSTATUS=serving"); };
    server::Server srv(cfg);
    auto bound = srv.listen();
    if (!bound) return fail("serve", bound.error());
    return run_until_stopped(srv, cfg.log, p.get_or("--pid-file", ""),
                             "listening on http://" + cfg.http.host + ":" + std::to_string(*bound));
}

}  // namespace edgellm::cli
