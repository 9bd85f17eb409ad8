// The option table, part 4: the server (serve) and the router (serve without -m).
#include <filesystem>
#include <fstream>

#include "options.h"

namespace edgellm::cli {

namespace {

// --models-allow-dir: every DIR given, each a directory.
bool models_allow_dir(const Arg& a, Settings& s, std::string* err) {
    for (const std::string& dir : a.values) {
        std::error_code ec;
        if (!std::filesystem::is_directory(dir, ec)) {
            *err = a.name + " " + dir + " is not a directory";
            return false;
        }
        s.server.models_allow_dirs.push_back(dir);
    }
    return true;
}

// --api-key-file: one key a line ('#': a comment); after --api-key, whose keys count too.
bool api_key_file(const Arg& a, Settings& s, std::string* err) {
    std::ifstream in(a.value);
    if (!in) {
        *err = "cannot read the API key file " + a.value;
        return false;
    }
    std::string line;
    while (std::getline(in, line)) {
        while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
        if (!line.empty() && line[0] != '#') s.server.api_keys.push_back(line);
    }
    if (!s.server.api_keys.empty()) return true;
    *err = "the API key file " + a.value + " has no key";
    return false;
}

}  // namespace

void add_api_keys(const std::string& list, std::vector<std::string>* keys) {
    size_t at = 0;
    while (at <= list.size()) {
        const size_t comma = std::min(list.find(',', at), list.size());
        if (comma > at) keys->push_back(list.substr(at, comma - at));
        at = comma + 1;
    }
}

// (a row an option, laid out by hand)
// clang-format off
std::vector<Option> server_options() {
    return {
        // ---- the server ----
        {.names = {"--host"}, .metavar = "HOST", .scope = kServeAll, .group = Group::Server,
         .help = "address to listen on (default 127.0.0.1: this machine only)",
         .apply = store([](Settings& s, const std::string& v) { s.server.http.host = v; })},
        {.names = {"--allowed-hosts"}, .metavar = "HOSTS", .scope = kServeAll, .group = Group::Server,
         .help = "names the Host header may give besides localhost, loopback addresses, --host and "
                 "the address reached (comma-separated; * for any): the admin routes, and every "
                 "route with tools, MCP or the CORS proxy on, refuse other names with 403 (DNS "
                 "rebinding)",
         .apply = store([](Settings& s, const std::string& v) { s.server.allowed_hosts = v; })},
        {.names = {"--port"}, .metavar = "N", .scope = kServeAll, .group = Group::Server,
         .help = "port to listen on (default 8080; 0: any free port)",
         .apply = integer(0, 65535, [](Settings& s, int64_t v) { s.server.http.port = (int)v; })},
        {.names = {"--api-key"}, .metavar = "KEY", .scope = kServe, .group = Group::Server,
         .help = "require this key (Authorization: Bearer KEY); comma-separated for several",
         .apply = store([](Settings& s, const std::string& k) { add_api_keys(k, &s.server.api_keys); }),
         .env = "EDGELLM_API_KEY"},
        {.names = {"--api-key-file"}, .metavar = "FILE", .scope = kServe, .group = Group::Server,
         .help = "require one of the keys in FILE (one per line)",
         .apply = api_key_file},
        {.names = {"--api-prefix"}, .metavar = "PREFIX", .scope = kServeAll, .group = Group::Server,
         .help = "serve every route under PREFIX (e.g. /llm), without the trailing slash",
         .apply = [](const Arg& a, Settings& s, std::string* err) {
             std::string v = a.value;
             while (!v.empty() && v.back() == '/') v.pop_back();
             if (!v.empty() && v[0] != '/') {
                 *err = "--api-prefix must start with /, got \"" + a.value + "\"";
                 return false;
             }
             s.server.api_prefix = v;
             return true;
         }},
        // The limits against slow and greedy clients (docs/commands.md, "Limits"). kServe: a
        // router applies them to its own connections and passes them on to its models'.
        {.names = {"--max-header-bytes"}, .metavar = "BYTES", .scope = kServe, .group = Group::Server,
         .help = "largest request head (request line and headers; suffixes K, M, KiB, MiB); a "
                 "larger one gets 431 (default 32 KiB)",
         .apply = bytes(1 << 10, 16 << 20, [](Settings& s, int64_t v) {
             s.server.http.max_header_bytes = (size_t)v;
         })},
        {.names = {"--max-header-count"}, .metavar = "N", .scope = kServe, .group = Group::Server,
         .help = "most header lines in a request; more get 431 (default 100)",
         .apply = integer(8, 10000, [](Settings& s, int64_t v) {
             s.server.http.max_header_count = (int)v;
         })},
        {.names = {"--max-body-bytes"}, .metavar = "BYTES", .scope = kServe, .group = Group::Server,
         .help = "largest request body, declared or chunked (suffixes K, M, G, KiB, MiB, GiB); a "
                 "larger one gets 413 (default 8 MiB)",
         .apply = bytes(1 << 10, int64_t(4) << 30, [](Settings& s, int64_t v) {
             s.server.http.max_body_bytes = (size_t)v;
         })},
        {.names = {"--header-timeout"}, .metavar = "SECONDS", .scope = kServe, .group = Group::Server,
         .help = "a request's head must arrive whole within SECONDS of its first byte (of the "
                 "connection's opening for its first request), however it trickles; else 408 "
                 "and the connection closes (default 10)",
         .apply = integer(1, 86400, [](Settings& s, int64_t v) {
             s.server.http.header_timeout_ms = (int)v * 1000;
         })},
        {.names = {"--body-timeout"}, .metavar = "SECONDS", .scope = kServe, .group = Group::Server,
         .help = "a request's body must arrive whole within SECONDS of its head; else 408 and the "
                 "connection closes (default 60)",
         .apply = integer(1, 86400, [](Settings& s, int64_t v) {
             s.server.http.body_timeout_ms = (int)v * 1000;
         })},
        {.names = {"--idle-timeout"}, .metavar = "SECONDS", .scope = kServe, .group = Group::Server,
         .help = "a kept-alive connection closes after SECONDS without a new request (default 30)",
         .apply = integer(1, 86400, [](Settings& s, int64_t v) {
             s.server.http.idle_timeout_ms = (int)v * 1000;
         })},
        {.names = {"-to", "--timeout"}, .metavar = "SECONDS",
         .scope = kServe, .group = Group::Server,
         .help = "llama-server's: the longest one read or write of a connection may wait "
                 "(default 600); a stalled request gets 408, a client that stops reading is "
                 "dropped. Within --header-timeout and --body-timeout: the first to run out counts",
         .apply = integer(1, 86400,
                          [](Settings& s, int64_t v) {
                              s.server.http.read_timeout_ms = (int)v * 1000;
                              s.server.http.write_timeout_ms = (int)v * 1000;
                          }),
         .label = "--timeout"},
        {.names = {"--max-connections", "--threads-http"}, .metavar = "N",
         .scope = kServe, .group = Group::Server,
         .help = "most open connections, a thread each (so also llama-server's --threads-http); "
                 "the next gets 503 with Retry-After (default 64)",
         .apply = integer(1, 4096, [](Settings& s, int64_t v) {
             s.server.http.max_connections = (int)v;
         })},
        {.names = {"--max-queue"}, .metavar = "N", .scope = kServe, .group = Group::Server,
         .help = "most requests waiting for a busy slot; more get 503 with Retry-After "
                 "(default 16)",
         .apply = integer(0, 1 << 16, [](Settings& s, int64_t v) { s.server.max_queue = (int)v; })},
        {.names = {"--metrics"}, .scope = kServe, .group = Group::Server,
         .help = "serve Prometheus metrics at GET /metrics",
         .apply = set_flag([](Settings& s) { s.server.metrics = true; })},
        {.names = {"--slots"}, .scope = kServe, .group = Group::Server,
         .help = "serve GET /slots (the default)"},
        {.names = {"--no-slots"}, .scope = kServe, .group = Group::Server,
         .help = "do not serve GET /slots",
         .apply = set_flag([](Settings& s) { s.server.slots_endpoint = false; })},
        {.names = {"--slot-save-path"}, .metavar = "DIR", .scope = kServe, .group = Group::Server,
         .help = "directory for POST /slots/N?action=save|restore (a link given as DIR is "
                 "followed once, at start-up; a file name that is a link in it is refused)",
         .apply = store([](Settings& s, const std::string& v) { s.server.slot_save_path = v; })},
        {.names = {"--models-allow-dir"}, .metavar = "DIR", .scope = kServe, .group = Group::Server,
         .help = "POST /models/load may also load GGUF files under DIR; repeatable (without it: "
                 "only under the served model's directory and edgellm's model directory)",
         .apply = models_allow_dir},
        {.names = {"--memory-limit"}, .metavar = "BYTES", .scope = kServe, .group = Group::Server,
         .help = "weights + KV cache + scratch + --cache-ram (+ the draft model) must fit this "
                 "(suffixes K, M, G; KiB, MiB, GiB), else the model is refused with the bill",
         .apply = bytes(1, INT64_MAX, [](Settings& s, int64_t v) { s.server.memory_limit = v; })},
        {.names = {"-fit", "--fit"}, .metavar = "on|off", .scope = kServe, .group = Group::Server,
         .help = "with --memory-limit: shrink the context until it fits, and say what it chose (a "
                 "bare --fit means on)",
         .apply = takes({"on", "off"}, "on or off", [](Settings& s, const std::string& v) {
             s.server.fit = v == "on";
         }),
         .label = "--fit"},
        {.names = {"--timeout-first-token"}, .metavar = "MS",
         .scope = kServe, .group = Group::Server,
         .help = "a reply whose first token is not ready MS after the request arrived is stopped "
                 "and answered with --fallback-reply",
         .apply = integer(1, 86400000, [](Settings& s, int64_t v) {
             s.server.timeout_first_token_ms = v;
         })},
        {.names = {"--fallback-reply"}, .metavar = "TEXT", .scope = kServe, .group = Group::Server,
         .help = "the answer when --timeout-first-token runs out",
         .apply = store([](Settings& s, const std::string& v) { s.server.fallback_reply = v; })},
        {.names = {"--sleep-idle-seconds"}, .metavar = "N", .scope = kServe, .group = Group::Server,
         .help = "unload the model after N seconds without a request (its memory goes back to the "
                 "system); the next request loads it again (default 0: never)",
         .apply = integer(0, 1 << 30, [](Settings& s, int64_t v) {
             s.server.sleep_idle_seconds = (int)v;
         })},
        {.names = {"--embedding", "--embeddings"}, .scope = kServe, .group = Group::Server,
         .help = "serve embeddings: POST /embedding and /v1/embeddings (the model's final hidden "
                 "states, pooled by --pooling)",
         .apply = set_flag([](Settings& s) { s.server.embeddings = true; })},
        {.names = {"--reranking", "--rerank"}, .scope = kServe, .group = Group::Server,
         .help = "serve POST /rerank (implies --embedding): documents scored by the cosine "
                 "similarity of their embeddings to the query's",
         .apply = set_flag([](Settings& s) { s.server.reranking = s.server.embeddings = true; })},
        {.names = {"--pooling"}, .metavar = "none|mean|cls|last|rank",
         .scope = kServe, .group = Group::Server,
         .help = "how a text's token vectors become one embedding (default: the model's, else "
                 "last); rank: --reranking",
         .apply = takes({"none", "mean", "cls", "last", "rank"}, "none, mean, cls, last or rank",
                        [](Settings& s, const std::string& v) {
                            using P = Context::Pooling;
                            if (v == "rank")
                                s.server.reranking = s.server.embeddings = true;
                            else
                                s.server.pooling = v == "none"   ? P::None
                                                   : v == "mean" ? P::Mean
                                                   : v == "cls"  ? P::Cls
                                                                 : P::Last;
                        })},
        {.names = {"--cors-origins"}, .metavar = "ORIGINS",
         .scope = kServeAll, .group = Group::Server,
         .help = "origins browsers may call from: * (any: the request's echoed; the default), "
                 "localhost (only localhost, 127.0.0.1, [::1] pages), or a comma-separated list",
         .apply = [](const Arg& a, Settings& s, std::string* err) {
             if (a.value.empty()) {
                 *err = "--cors-origins must not be empty";
                 return false;
             }
             s.server.cors.origins = a.value;
             return true;
         }},
        {.names = {"--cors-methods"}, .metavar = "METHODS",
         .scope = kServeAll, .group = Group::Server,
         .help = "methods a preflight allows (default \"GET, POST, DELETE, OPTIONS\")",
         .apply = store([](Settings& s, const std::string& v) { s.server.cors.methods = v; })},
        {.names = {"--cors-headers"}, .metavar = "HEADERS",
         .scope = kServeAll, .group = Group::Server,
         .help = "headers a preflight allows (default *)",
         .apply = store([](Settings& s, const std::string& v) { s.server.cors.headers = v; })},
        {.names = {"--cors-credentials"}, .scope = kServeAll, .group = Group::Server,
         .help = "a preflight allows credentials (the default)",
         .contradicts = "--no-cors-credentials"},
        {.names = {"--no-cors-credentials"}, .scope = kServeAll, .group = Group::Server,
         .help = "it does not (with --cors-origins *: Access-Control-Allow-Origin *)",
         .apply = set_flag([](Settings& s) { s.server.cors.credentials = false; })},
        {.names = {"--webui", "--ui"}, .scope = kServeAll, .group = Group::Server,
         .help = "serve the chat page at / (the default)",
         .contradicts = "--no-webui"},
        {.names = {"--no-webui", "--no-ui"}, .scope = kServeAll, .group = Group::Server,
         .help = "do not serve the chat page at /",
         .apply = set_flag([](Settings& s) { s.server.webui = false; })},
        {.names = {"--ui-mcp-proxy", "--webui-mcp-proxy"},
         .scope = kServeAll, .group = Group::Server,
         .help = "serve /cors-proxy?url=http://...: the chat page's requests to other servers "
                 "(MCP over HTTP) forwarded, with only the headers it names",
         .apply = set_flag([](Settings& s) { s.server.ui_mcp_proxy = true; }),
         .contradicts = "--no-ui-mcp-proxy"},
        {.names = {"--no-ui-mcp-proxy", "--no-webui-mcp-proxy"},
         .scope = kServeAll, .group = Group::Server,
         .help = "no /cors-proxy (the default: it answers 403)"},
        {.names = {"--tools"}, .metavar = "all|NAMES", .scope = kServeAll, .group = Group::Server,
         .help = "serve GET/POST /tools: the built-in agent tools (read_file, write_file, "
                 "edit_file, grep_search, file_glob_search, exec_shell_command, get_info), all or "
                 "a comma-separated list; they act on this machine with the server's rights, the "
                 "file tools only inside its working directory (CORS then defaults to localhost)",
         .apply = store([](Settings& s, const std::string& v) { s.server.tools = v; })},
        {.names = {"--tools-allow-remote"}, .scope = kServeAll, .group = Group::Server,
         .help = "offer tools that write (write_file, edit_file, exec_shell_command, MCP tools "
                 "not declared read-only) on a --host other machines reach without --api-key "
                 "(refused otherwise: anyone who reaches the port could use them)"},
        {.names = {"--tools-runtime"}, .metavar = "RUNTIME",
         .scope = kServeAll, .group = Group::Server,
         .help = "where the tools act: ssh:HOST, docker-container:ID, podman-container:ID, "
                 "docker:IMAGE (default: this machine)",
         .apply = store([](Settings& s, const std::string& v) { s.server.tools_runtime = v; })},
        {.names = {"--mcp-servers-config"}, .metavar = "FILE",
         .scope = kServeAll, .group = Group::Server,
         .help = "MCP servers ({\"mcpServers\": {NAME: {command, args, env}}}) whose tools /tools "
                 "offers as NAME_TOOL",
         .apply = store([](Settings& s, const std::string& v) { s.server.mcp_config_path = v; })},
        {.names = {"--mcp-servers-json"}, .metavar = "JSON",
         .scope = kServeAll, .group = Group::Server,
         .help = "the same, inline",
         .apply = store([](Settings& s, const std::string& v) { s.server.mcp_json = v; })},
        {.names = {"--log-disable"}, .scope = kServe, .group = Group::Server,
         .help = "no log lines",
         .apply = set_flag([](Settings& s) { s.server.log = false; })},
        {.names = {"--log-file"}, .metavar = "FILE", .scope = kServeAll, .group = Group::Server,
         .help = "append the log to FILE instead of stderr (log rotation: copytruncate)",
         .apply = store([](Settings& s, const std::string& v) { s.serve.log_file = v; })},
        {.names = {"-v", "--verbose"}, .scope = kServe, .group = Group::Server,
         .help = "also log each request's prompt and output",
         .apply = set_flag([](Settings& s) { s.server.verbose = true; })},
        {.names = {"--pid-file"}, .metavar = "FILE", .scope = kServeAll, .group = Group::Server,
         .help = "write the process id to FILE once listening (removed at exit)",
         .apply = store([](Settings& s, const std::string& v) { s.serve.pid_file = v; })},

        // ---- the router's own (serve without -m) ----
        {.names = {"--models-dir"}, .metavar = "DIR", .scope = kRouter, .group = Group::Router,
         .help = "router: every GGUF in DIR is a model (id: the file name without .gguf; a "
                 "subdirectory: its name), besides edgellm's model directory",
         .apply = store([](Settings& s, const std::string& v) { s.serve.models_dir = v; })},
        {.names = {"--models-preset"}, .metavar = "FILE", .scope = kRouter, .group = Group::Router,
         .help = "router: an INI file of models, [ID] sections of `model = FILE` and serve flags "
                 "as `ctx-size = 4096` ([*]: for every model; load-on-startup = true)",
         .apply = store([](Settings& s, const std::string& v) { s.serve.models_preset = v; })},
        {.names = {"--models-max"}, .metavar = "N", .scope = kRouter, .group = Group::Router,
         .help = "router: models running at once (default 4; 0: no limit); one more evicts the "
                 "least recently used idle one",
         .apply = integer(0, 1024, [](Settings& s, int64_t v) { s.serve.models_max = (int)v; })},
        {.names = {"--no-models-autoload"}, .scope = kRouter, .group = Group::Router,
         .help = "router: only POST /models/load starts a model (and nothing at start-up)",
         .apply = set_flag([](Settings& s) { s.serve.autoload = false; })},
        {.names = {"--models-autoload"}, .scope = kRouter, .group = Group::Router,
         .help = "router: a request naming a model that is not running starts it (the default)",
         .contradicts = "--no-models-autoload"},
    };
}
// clang-format on

}  // namespace edgellm::cli
