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
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "commands.h"
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
        return fail("serve", "cannot write the pid file " + pid_file + ": " + std::strerror(errno),
                    2);
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

// llama.cpp's --fit takes on|off; a bare --fit means on.
std::vector<std::string> bare_fit_means_on(const std::vector<std::string>& given) {
    std::vector<std::string> args;
    for (size_t i = 0; i < given.size(); ++i) {
        args.push_back(given[i]);
        if ((given[i] == "--fit" || given[i] == "-fit") &&
            (i + 1 == given.size() || (given[i + 1] != "on" && given[i + 1] != "off")))
            args.push_back("on");
    }
    return args;
}

// -hf / -hfd: the models llama.cpp downloaded (never a download here) in place of the flags,
// served by serving again with -m / -md FILE.
int serve_from_hf_cache(const Settings& s, const std::vector<std::string>& args) {
    std::vector<std::string> again = args;
    auto from_cache = [&](const char* flag, const char* as, const std::string& repo,
                          const std::string& file) -> std::string {
        const std::string path = server::find_cached_hf_model(repo, file);
        if (path.empty())
            return std::string(flag) + " " + repo + (file.empty() ? "" : " --hf-file " + file) +
                   ": not in llama.cpp's download cache " + server::hf_cache_directory() +
                   "; edgellm never downloads (fetch the GGUF file and pass " + as + " FILE)";
        again.insert(again.end(), {as, path});
        return "";
    };
    if (s.has("-hf"))
        if (std::string e = from_cache("-hf", "-m", s.serve.hf_repo, s.serve.hf_file); !e.empty())
            return fail("serve", e, 2);
    if (s.has("-hfd"))
        if (std::string e = from_cache("-hfd", "-md", s.serve.hf_draft, ""); !e.empty())
            return fail("serve", e, 2);
    // the arguments without -hf, -hff and -hfd (and their values)
    std::vector<std::string> out;
    for (size_t i = 0; i < again.size(); ++i) {
        const Option* o = find_option(kServeAll, again[i].substr(0, again[i].find('=')));
        if (o && (o->names[0] == "-hf" || o->names[0] == "-hff" || o->names[0] == "-hfd")) {
            if (again[i].find('=') == std::string::npos) ++i;
            continue;
        }
        out.push_back(again[i]);
    }
    return cmd_serve(out);
}

// What serve's command line has `flag` be for a router: -1 not a flag of serve's or the
// router's own (kRouter: it keeps it), 0 a flag, 1 an option that takes a value.
int flag_kind(const std::string& flag) {
    const Option* o = find_option(kServeAll, flag);
    if (!o || (o->scope & kRouter)) return -1;
    return o->metavar.empty() ? 0 : 1;
}

// Router mode (serve without -m): the flags that are the router's own (kRouter) stay here;
// every other flag is given to each model's `edgellm serve` child as it was written.
int serve_router(const Settings& s, const std::vector<std::string>& args,
                 const std::string& default_model) {
    const server::ServerConfig& cfg = s.server;
    server::RouterConfig rc;
    rc.http = cfg.http;
    rc.cors = cfg.cors;
    rc.allowed_hosts = cfg.allowed_hosts;
    rc.api_keys = cfg.api_keys;
    rc.api_prefix = cfg.api_prefix;
    rc.webui = cfg.webui;
    rc.log = cfg.log;
    rc.tools = {cfg.tools,    cfg.tools_runtime,   cfg.mcp_config_path,
                cfg.mcp_json, cfg.cors.origins, cfg.tools_exposed_on};
    rc.ui_mcp_proxy = cfg.ui_mcp_proxy;
    rc.models_dir = s.serve.models_dir;
    rc.models_preset = s.serve.models_preset;
    rc.autoload = s.serve.autoload;
    rc.default_model = default_model;
    std::error_code exe_ec;
    if (auto exe = std::filesystem::read_symlink("/proc/self/exe", exe_ec); !exe_ec)
        rc.self_exe = exe.string();
    rc.models_max = s.serve.models_max;
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
    // edgellm's model directory, and $EDGELLM_MODEL
    std::error_code ec;
    std::vector<std::string> cache;
    for (std::filesystem::directory_iterator it(models_dir(), ec), end; !ec && it != end;
         it.increment(ec))
        if (it->is_regular_file() && it->path().extension() == ".gguf" &&
            it->path().filename().string().rfind("mmproj", 0) != 0)
            cache.push_back(it->path().string());
    std::sort(cache.begin(), cache.end());
    if (const char* env = std::getenv("EDGELLM_MODEL");
        env && *env && std::find(cache.begin(), cache.end(), std::string(env)) == cache.end())
        cache.insert(cache.begin(), env);
    rc.cache_files = cache;
    for (size_t i = 0; i < args.size(); ++i) {
        std::string a = args[i];
        bool inline_value = false;
        if (a.rfind("--", 0) == 0 && a.find('=') != std::string::npos) {
            inline_value = true;
            a = a.substr(0, a.find('='));
        }
        const Option* o = find_option(kServeAll, a);
        const bool takes_next = o && !o->metavar.empty() && !inline_value && i + 1 < args.size();
        // (the router's own, and the key: the router checks it, each child requires the
        // router's, see router_impl.h)
        const bool key = o && (o->names[0] == "--api-key" || o->names[0] == "--api-key-file");
        if (o && ((o->scope & kRouter) || key)) {
            if (takes_next) ++i;
            continue;
        }
        rc.child_args.push_back(args[i]);
        if (takes_next) rc.child_args.push_back(args[++i]);
    }
    rc.on_ready = [] { notify_service_manager("READY=1\nSTATUS=serving (router)"); };
    rc.flag_kind = flag_kind;

    server::Router router(rc);
    if (const std::string why = router.start_tools(); !why.empty()) return fail("serve", why, 2);
    auto bound = router.listen();
    if (!bound) return fail("serve", bound.error());
    return run_until_stopped(
        router, rc.log, s.serve.pid_file,
        "router listening on http://" + rc.http.host + ":" + std::to_string(*bound));
}

}  // namespace

int cmd_serve(const std::vector<std::string>& given) {
    const std::vector<std::string> args = bare_fit_means_on(given);
    Settings s;
    if (auto done = parse_options("serve", args, &s)) return *done;
    if (s.has("-hf") || s.has("-hfd")) return serve_from_hf_cache(s, args);
    server::ServerConfig& cfg = s.server;
    const bool router = !s.model;
    const auto model_path = model_path_or_default(s);
    if (model_path) cfg.model_path = *model_path;
    if (s.serve.list_devices) {
        std::printf("Available devices:\n  CPU (edgellm's own kernels)\n");
        return 0;
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
    if (const auto& lf = s.serve.log_file) {
        const int fd = ::open(lf->c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd < 0)
            return fail("serve", "cannot open the log file " + *lf + ": " + std::strerror(errno), 2);
        ::dup2(fd, STDERR_FILENO);  // every log line, the start-up's too
        ::close(fd);
        std::setvbuf(stderr, nullptr, _IOLBF, 0);
    }
    if (std::string err = choose_kernels(s.kernels); !err.empty()) return fail("serve", err, 2);

    if (cfg.log)
        for (const std::string& n : s.notes) std::fprintf(stderr, "edgellm serve: %s\n", n.c_str());
    if (!loopback_only(cfg.http.host) && cfg.api_keys.empty()) {
        // (tools that write got here only with --tools-allow-remote)
        std::error_code ec;
        const std::string tools = agent::builtin_tools_exposure(
            cfg.tools, cfg.tools_runtime, std::filesystem::current_path(ec).string());
        std::string mcp;
        if (!cfg.mcp_config_path.empty() || !cfg.mcp_json.empty())
            mcp = s.has("--tools-allow-remote") ? ", call the MCP servers' tools"
                                                 : ", call the MCP tools declared read-only";
        std::fprintf(stderr,
                     "edgellm serve: WARNING: listening on %s without --api-key: anyone who can "
                     "reach this port can use the model%s%s\n",
                     cfg.http.host.c_str(), tools.empty() ? "" : (", " + tools).c_str(),
                     mcp.c_str());
    }

    block_stop_signals();
    if (router) return serve_router(s, args, model_path ? *model_path : std::string());

    cfg.on_ready = [] { notify_service_manager("READY=1\nSTATUS=serving"); };
    server::Server srv(cfg);
    auto bound = srv.listen();
    if (!bound) return fail("serve", bound.error());
    return run_until_stopped(srv, cfg.log, s.serve.pid_file,
                             "listening on http://" + cfg.http.host + ":" + std::to_string(*bound));
}

}  // namespace edgellm::cli
