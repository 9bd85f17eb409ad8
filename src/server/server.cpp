// `edgellm serve` with one model: the composition of the HTTP transport, the front with the
// server's route table (routes.cpp), the model host and the engine (engine/), and the API
// dialects (api/). Start-up, run until stop(), stop.
#include "server/server_impl.h"

#include "server/http/refusal_log.h"
#include "sys/paths.h"
#include "sys/strings.h"

#include <malloc.h>

#include <cstdarg>
#include <cstdio>
#include <ctime>
#include <filesystem>

namespace edgellm::server {

Server::Server(ServerConfig cfg) : impl_(std::make_unique<Impl>()) {
    impl_->cfg = std::move(cfg);
    Impl* d = impl_.get();
    for (const auto& [lpath, lscale] : d->cfg.lora) d->lora_startup.push_back(d->cfg.lora_init_without_apply ? 0.0f : lscale);
    d->lora_scales = d->lora_startup;
    d->set_load_dirs();
    // (a link given as the directory is followed now, once: the files go where it led then)
    if (std::string& dir = d->cfg.slot_save_path; !dir.empty())
        if (std::string real = sys::real_path(dir); !real.empty()) dir = real;
    http::Options o = impl_->cfg.http;
    o.error_body = [](int status, const std::string& message) {
        ApiError e;
        e.status = status;
        e.message = message;
        e.type = status == 503   ? "unavailable_error"
                 : status >= 500 ? "server_error"
                                 : "invalid_request_error";
        return std::make_pair(std::string("application/json; charset=utf-8"), error_body(e));
    };
    o.on_refusal = refusal_logger([d](const std::string& line) { d->log("%s", line.c_str()); });
    FrontOptions fo;
    fo.cors = d->cfg.cors;
    fo.api_keys = d->cfg.api_keys;
    fo.api_prefix = d->cfg.api_prefix;
    fo.hosts = host_policy(d->cfg.http.host, d->cfg.allowed_hosts);
    fo.guard_all = !d->cfg.tools.empty() || !d->cfg.mcp_config_path.empty() || !d->cfg.mcp_json.empty() ||
                   d->cfg.ui_mcp_proxy;
    fo.log = [d](const std::string& line) { d->log("%s", line.c_str()); };
    d->front = std::make_unique<Front>(std::move(fo), d->routes());
    d->front->set_around([d](const Route& r, Call& c, const Handler& run) { d->gate(r, c, run); });
    impl_->http = std::make_unique<http::Server>(
        o, [d](const http::Request& req, http::Response& res) { d->front->handle(req, res); });
}

Server::~Server() {
    stop();
    if (impl_->http_thread.joinable()) impl_->http_thread.join();
}

Result<int> Server::listen() {
    auto port = impl_->http->listen();
    if (port) impl_->port = *port;
    return port;
}

void Server::stop() {
    Impl& d = *impl_;
    const bool first = !d.stopping.exchange(true);
    // Tool calls in flight end now (an MCP call returns "cancelled", a shell command is
    // killed), so they do not hold the stop up.
    if (d.tools) d.tools->stop();
    if (first && d.ready()) {
        // Generations stop at their next step; their clients are told (a stream gets an
        // error event, a request still waiting a 503) before the connections close: the
        // requests in flight get up to 3 s for it.
        {
            std::lock_guard<std::mutex> lock(d.gate_mu);
            for (auto& s : d.live.slots) s->cancel = true;
        }
        std::unique_lock<std::mutex> lock(d.gate_mu);
        d.gate_cv.wait_for(lock, std::chrono::seconds(3), [&] { return d.in_flight == 0; });
    }
    d.http->stop();
    d.stop_cv.notify_all();
    // (the HTTP layer's stop also makes every handler's peer_gone() true, which raises its
    // slot's cancel flag through the watcher)
    if (d.ready()) {
        std::lock_guard<std::mutex> lock(d.gate_mu);
        for (auto& s : d.live.slots) s->cancel = true;
    }
}

void Server::Impl::log(const char* fmt, ...) const {
    if (!cfg.log) return;
    va_list ap;
    va_start(ap, fmt);
    const std::string line = sys::vformat(fmt, ap);
    va_end(ap);
    std::time_t t = std::time(nullptr);
    std::tm local{};
    localtime_r(&t, &local);  // (std::localtime's buffer is shared by every thread)
    char ts[32];
    std::strftime(ts, sizeof ts, "%H:%M:%S", &local);
    std::fprintf(stderr, "%s edgellm serve: %s\n", ts, line.c_str());
}

int Server::run() {
    Impl& d = *impl_;
    if (const std::string e = d.start_tools(); !e.empty()) {
        d.log("error: %s", e.c_str());
        return 2;
    }
    d.http_thread = std::thread([&d] { d.http->run(); });
    const auto t0 = Clock::now();
    Loaded first;
    std::string err = d.load_main(d.cfg.model_path, &first);
    if (!err.empty() && !d.cfg.fallback_model.empty()) {
        d.log("error: cannot use the model %s: %s; serving the fallback model %s", d.cfg.model_path.c_str(),
              err.c_str(), d.cfg.fallback_model.c_str());
        const std::string main_err = err;
        err = d.load_main(d.cfg.fallback_model, &first);
        if (err.empty())
            d.degrade("serving the fallback model " +
                      std::filesystem::path(d.cfg.fallback_model).filename().string() + ": " +
                      d.cfg.model_path + " could not be used (" + main_err + ")");
    }
    if (!err.empty()) {
        d.log("error: cannot load the model: %s", err.c_str());
        d.http->stop();
        d.http_thread.join();
        return 1;
    }
    d.build_slots(&first);
    d.swap_loaded(&first);
    if (const int64_t train = d.live.model->hparams().n_ctx_train; train > 0 && d.cfg.ctx.n_ctx > train) {
        d.log("warning: -c %lld is above the %lld tokens the model was trained with: past %lld "
              "tokens its answers may fall apart", (long long)d.cfg.ctx.n_ctx, (long long)train,
              (long long)train);
        d.degrade("-c " + std::to_string(d.cfg.ctx.n_ctx) + " is above the model's training context of " +
                  std::to_string(train) + " tokens");
    }
    if (d.live.serving_path != d.cfg.model_path && d.cfg.spec.on()) {
        d.cfg.spec = SpecConfig{};  // drafts were chosen for the main model
        d.degrade("speculative decoding is off with the fallback model");
    }
    // Drafts on a hybrid would be taken back through its recurrent state, which cannot drop
    // positions yet: the flag asked for what this server cannot do, so it does not start.
    if (const char* why = d.live.ctx->recurrent_reason(); why && d.cfg.spec.on()) {
        d.log("error: %s: speculative decoding is not supported on this model: %s",
              d.cfg.spec.draft ? "-md" : "--spec-type ngram", why);
        d.http->stop();
        d.http_thread.join();
        return 2;
    }
    auto tp = Clock::now();
    err = d.load_speculation();
    if (!err.empty()) {
        d.log("error: %s", err.c_str());
        d.http->stop();
        d.http_thread.join();
        return 1;
    }
    tp = Clock::now();
    if (d.cfg.warmup) {
        d.warm_step(&d.live);
        d.startup_phase("warm-up step", &tp);
    }
    d.live.cache_key = kv_cache_key(*d.live.ctx, d.template_text());
    d.open_prompt_cache();
    if (d.live.prompt_cache) d.startup_phase("prompt cache", &tp);
    if (d.live.pinning.valid())  // --mlock, done beside the context and the warm-up step
        d.startup.emplace_back("mlock (beside the context and the warm-up)", d.live.pinning.get());
    const auto bill = Context::memory_bill(*d.live.model, d.live.ctx->params());
    d.log("model %s: %s, %lld slot%s of %lld tokens, KV %s, %s; ready in %.0f ms",
          d.live.model_name.c_str(), d.live.model->hparams().arch.c_str(), (long long)d.live.slots.size(),
          d.live.slots.size() > 1 ? "s" : "", (long long)d.n_ctx_slot(),
          kv_types_name(d.live.ctx->params()).c_str(), d.live.ctx->affinity_report().c_str(),
          ms_between(t0, Clock::now()));
    {
        std::string where;
        for (const auto& [what, ms] : d.startup) {
            char b[96];
            std::snprintf(b, sizeof b, "%s%s %.0f ms", where.empty() ? "" : ", ", what.c_str(), ms);
            where += b;
        }
        d.log("start-up: %s", where.c_str());
        d.starting = false;
    }
    d.keep_repacked(*d.live.model);
    if (d.live.draft_model) d.keep_repacked(*d.live.draft_model);
    if (bill) d.log("memory: weights %.0f MiB, KV cache %.0f MiB, %sscratch %.0f MiB",
                    (double)bill->weights / 1048576.0, (double)bill->kv_cache / 1048576.0,
                    bill->recurrent ? ("recurrent state " + size_text(bill->recurrent) + " (" +
                                       std::to_string(bill->recurrent_layers) + " layers), ")
                                          .c_str()
                                    : "",
                    (double)bill->scratch / 1048576.0);
    if (d.live.draft_ctx) {
        const auto db = Context::memory_bill(*d.live.draft_model, d.live.draft_ctx->params());
        if (db) d.log("memory of the draft model: weights %.0f MiB, KV cache %.0f MiB (%s, %lld "
                      "tokens a slot), scratch %.0f MiB; both models %.0f MiB",
                      (double)db->weights / 1048576.0, (double)db->kv_cache / 1048576.0,
                      kv_types_name(d.live.draft_ctx->params()).c_str(),
                      (long long)d.live.draft_ctx->params().n_ctx,
                      (double)db->scratch / 1048576.0,
                      (double)(db->total() + (bill ? bill->total() : 0)) / 1048576.0);
    }
    if (d.cfg.spec.on()) {
        const SpecConfig& sc = d.cfg.spec;
        std::string what;
        if (sc.ngram)
            what = "prompt lookup of " + std::to_string(sc.ngram_max) + ".." +
                   std::to_string(sc.ngram_min) + " tokens (up to " +
                   std::to_string(sc.ngram_n_max) + " per step)";
        if (sc.draft) {
            char pm[16];
            std::snprintf(pm, sizeof pm, "%.2f", sc.p_min);
            what += (what.empty() ? "" : " then ") + std::string("draft model ") +
                    std::filesystem::path(sc.draft_model).filename().string() + " (p_min " + pm +
                    ", up to " + std::to_string(sc.draft_n_max) + " per step)";
        }
        d.log("speculative decoding: %s, at least %d drafts, %s", what.c_str(), sc.n_min,
              sc.adaptive ? "draft length chosen per slot from the measured accept rate and costs"
                          : "always the most (--spec-fixed)");
    }
    // A hybrid's recurrent state cannot drop positions: no context shift (until checkpoints
    // can take positions back).
    if (const char* why = d.live.ctx->recurrent_reason()) {
        if (d.cfg.defaults.context_shift)
            d.log("warning: context shift is off: %s (a full context ends the reply; "
                  "--context-policy summarize works)", why);
    }
    // What loading allocated and freed (the draft model's tokenizer, parse buffers) goes
    // back to the system instead of staying resident in the heap.
    malloc_trim(0);
    d.phase = Impl::Phase::Ready;
    if (d.cfg.on_ready) d.cfg.on_ready();
    d.last_active_ms = steady_ms();
    {
        std::unique_lock<std::mutex> lock(d.stop_mu);
        while (!d.stopping.load()) {
            d.stop_cv.wait_for(lock, std::chrono::milliseconds(100));
            if (d.cfg.sleep_idle_seconds > 0 && !d.sleeping && !d.stopping &&
                steady_ms() - d.last_active_ms >= (int64_t)d.cfg.sleep_idle_seconds * 1000) {
                lock.unlock();
                d.go_to_sleep();
                lock.lock();
            }
        }
    }
    d.http_thread.join();
    d.log("stopped");
    return 0;
}

std::string Server::Impl::start_tools() {
    auto t = agent::ToolService::create({cfg.tools, cfg.tools_runtime, cfg.mcp_config_path, cfg.mcp_json, cfg.cors.origins,
                                         cfg.tools_exposed_on},
                                 [this](const std::string& line) { log("%s", line.c_str()); });
    if (!t) return t.error();
    tools = std::move(*t);
    return "";
}

void Server::Impl::cors_proxy(const http::Request& req, http::Response& res, std::string* log_extra) {
    if (!cfg.ui_mcp_proxy)
        return send_error(res, {403, "permission_error", "the CORS proxy is off (--ui-mcp-proxy turns it on)", {}});
    agent::forward_cors_proxy(req, res, log_extra, port);
}

}  // namespace edgellm::server
