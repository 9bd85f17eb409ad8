// The server's route table, and the request gate around every handler.
//
// One row per endpoint: method, path, flags (kPublic: no API key; kQuiet: not in the access
// log; kAdmin: Host and Origin checked), what it needs of the model (Needs, in http/front.h), and its handler. The front
// (http/front.cpp) answers CORS, --api-prefix, OPTIONS and the API key before a row's
// handler runs; gate() below runs around it.
#include "server/server_impl.h"

#include "server/api/webui.h"

namespace edgellm::server {

std::vector<Route> Server::Impl::routes() {
    std::vector<Route> t;
    auto add = [&t](const char* method, std::initializer_list<std::string> paths, unsigned flags, Needs needs,
                    const Handler& h) {
        for (const std::string& p : paths) t.push_back({method, p, flags, needs, h});
    };
    constexpr Needs kNothing = Needs::Nothing, kModel = Needs::Model, kAwake = Needs::AwakeModel;

    // health and the chat page: no key, no model (everything else needs the key: the model
    // list too, as llama-server)
    std::vector<std::string> health_paths = {"/health", "/v1/health"};
    if (!cfg.health_route.empty()) health_paths.push_back(cfg.health_route);
    for (const std::string& p : health_paths)
        add("*", {p}, kPublic | kQuiet, kNothing, [this](Call& c) {
            if (!is_get(c.req)) return send_error(c.res, {405, "invalid_request_error", "use GET", {}});
            health(c.res);
        });
    add("GET", {"/", "/index.html"}, kPublic, kNothing, webui_handler(cfg.webui));

    // the agent tools and resumable streams: no model needed
    add("*", {"/tools"}, kAdmin, kNothing,
        [this](Call& c) { agent::ToolService::route(tools.get(), c.req, c.res, c.log_extra); });
    add("GET", {"/v1/stream"}, kNone, kNothing, [this](Call& c) { stream_get(c.req, c.res); });
    add("DELETE", {"/v1/stream"}, kNone, kNothing, [this](Call& c) { stream_delete(c.req, c.res); });
    add("POST", {"/v1/streams/lookup"}, kNone, kNothing, [this](Call& c) { streams_lookup(c.req, c.res); });

    // generation, in each dialect (api/)
    add("POST", {"/v1/chat/completions", "/chat/completions"}, kNone, kAwake,
        [this](Call& c) { generate(Api::Chat, c.req, c.res, c.log_extra); });
    // (llama-server: /completions without /v1 is its own API, as /completion)
    add("POST", {"/v1/completions"}, kNone, kAwake,
        [this](Call& c) { completions(Api::Completions, c.req, c.res, c.log_extra); });
    add("POST", {"/completion", "/completions"}, kNone, kAwake,
        [this](Call& c) { completions(Api::Native, c.req, c.res, c.log_extra); });
    add("POST", {"/v1/messages"}, kNone, kAwake, [this](Call& c) { anthropic_messages(c.req, c.res, c.log_extra); });
    add("POST", {"/v1/messages/count_tokens"}, kNone, kAwake,
        [this](Call& c) { anthropic_count_tokens(c.req, c.res); });
    add("POST", {"/v1/responses", "/responses"}, kNone, kAwake,
        [this](Call& c) { responses(c.req, c.res, c.log_extra); });
    add("POST", {"/v1/responses/input_tokens", "/responses/input_tokens"}, kNone, kAwake,
        [this](Call& c) { responses_input_tokens(c.req, c.res); });
    add("POST", {"/v1/chat/completions/input_tokens", "/chat/completions/input_tokens"}, kNone, kAwake,
        [this](Call& c) { input_tokens_count(c.req, c.res); });
    if (!cfg.predict_route.empty())
        add("POST", {cfg.predict_route}, kNone, kAwake, [this](Call& c) { predict(c.req, c.res, c.log_extra); });

    // embeddings and reranking
    add("POST", {"/embedding", "/embeddings"}, kNone, kAwake,
        [this](Call& c) { embeddings(false, c.req, c.res, c.log_extra); });
    add("POST", {"/v1/embeddings"}, kNone, kAwake, [this](Call& c) { embeddings(true, c.req, c.res, c.log_extra); });
    add("POST", {"/rerank", "/reranking", "/v1/rerank", "/v1/reranking"}, kNone, kAwake,
        [this](Call& c) { rerank(c.req, c.res, c.log_extra); });

    // llama.cpp's tokens and templates
    add("POST", {"/tokenize"}, kNone, kAwake, [this](Call& c) { tokenize(c.req, c.res); });
    add("POST", {"/detokenize"}, kNone, kAwake, [this](Call& c) { detokenize(c.req, c.res); });
    add("POST", {"/apply-template"}, kNone, kAwake, [this](Call& c) { apply_template(c.req, c.res); });

    // admin: what is served (answered from what was there while the model sleeps)
    add("GET", {"/v1/models", "/models"}, kQuiet, kModel, [this](Call& c) { models(c.res); });
    add("GET", {"/props"}, kNone, kModel, [this](Call& c) { props(c.res); });
    add("GET", {"/metrics"}, kQuiet, kModel, [this](Call& c) {
        if (!cfg.metrics)
            return send_error(c.res, {501, "not_supported_error",
                                      "This server does not support metrics endpoint. Start it with `--metrics`", {}});
        metrics_get(c.res);
    });
    add("GET", {"/slots"}, kAdmin, kModel, [this](Call& c) {
        if (!cfg.slots_endpoint)
            return send_error(c.res, {501, "not_supported_error", "This server does not support slots endpoint.", {}});
        slots_get(c.res);
    });
    add("POST", {"/slots/*"}, kAdmin, kAwake, [this](Call& c) { slots_post(c.req, c.res); });
    add("DELETE", {"/slots/*"}, kAdmin, kAwake, [this](Call& c) { slots_post(c.req, c.res); });
    add("GET", {"/lora-adapters"}, kAdmin, kAwake, [this](Call& c) { lora_adapters_get(c.res); });
    add("POST", {"/lora-adapters"}, kAdmin, kAwake, [this](Call& c) { lora_adapters_post(c.req, c.res, c.log_extra); });
    add("POST", {"/models/load"}, kAdmin, Needs::ModelSwap,
        [this](Call& c) { models_load(c.req, c.res, c.log_extra); });
    add("*", {"/cors-proxy"}, kAdmin, kModel, [this](Call& c) { cors_proxy(c.req, c.res, c.log_extra); });
    return t;
}

void Server::Impl::gate(const Route& route, Call& c, const Handler& run) {
    if (route.needs == Needs::ModelSwap) {  // (takes the gate itself, to swap)
        if (!ready()) return send_error(c.res, {503, "unavailable_error", "Loading model", {}});
        run(c);
        last_active_ms = steady_ms();
        return;
    }
    // What needs no model answers while the server sleeps; anything else loads it first.
    const bool wakes = route.needs == Needs::AwakeModel;
    // Every request holds the gate: a model swap (or sleep) waits for those in flight, and
    // new ones wait for it. A request that needs the model and finds it asleep once it
    // holds the gate lets go, wakes it, and tries again.
    for (;;) {
        if (sleeping && wakes) {
            if (const std::string e = wake(); !e.empty())
                return send_error(c.res, {503, "unavailable_error",
                                          "the model could not be loaded again after sleeping: " + e, {}});
        }
        std::unique_lock<std::mutex> lock(gate_mu);
        gate_cv.wait(lock, [&] { return !swapping; });
        if (sleeping && wakes) continue;  // it fell asleep meanwhile
        ++in_flight;
        requests_busy->fetch_add(1);
        break;
    }
    // (released however the handler ends, an exception included)
    struct Release {
        Impl* d;
        ~Release() {
            {
                std::lock_guard<std::mutex> lock(d->gate_mu);
                --d->in_flight;
                d->requests_busy->fetch_sub(1);
            }
            d->gate_cv.notify_all();
        }
    } release{this};
    if (route.needs != Needs::Nothing && !ready())
        send_error(c.res, {503, "unavailable_error", "Loading model", {}});
    else
        run(c);
    if (wakes) last_active_ms = steady_ms();
}

}  // namespace edgellm::server
