// The model host: loading a model within --memory-limit (--fit), pinning and warming it,
// its slots, the draft model of speculative decoding, LoRA adapters, a model swap
// (POST /models/load) and sleeping / waking (--sleep-idle-seconds).
#include "server/server_impl.h"

#include "sys/paths.h"

#include <malloc.h>
#include <unistd.h>
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <future>
#include <span>

namespace edgellm::server {

namespace fs = std::filesystem;

size_t resident_bytes() {
    std::ifstream in("/proc/self/statm");
    size_t pages = 0, resident = 0;
    if (!(in >> pages >> resident)) return 0;
    return resident * (size_t)sysconf(_SC_PAGESIZE);
}

std::string kv_types_name(const ContextParams& p) {
    if (p.type_k == p.type_v) return tensor_type_name(p.type_k);
    return std::string("K ") + tensor_type_name(p.type_k) + " / V " + tensor_type_name(p.type_v);
}

void Server::Impl::warm_step(Loaded* l) {
    const int32_t t = l->tok->bos() >= 0 ? l->tok->bos() : 0;
    (void)l->ctx->eval(std::span<const int32_t>(&t, 1), false, 0);
    l->ctx->truncate(0, 0);
}

// ---- LoRA adapters ----------------------------------------------------------------------

std::string Server::Impl::lora_key_of(const std::vector<float>& scales) const {
    std::string key;
    for (size_t i = 0; i < scales.size() && i < cfg.lora.size(); ++i)
        if (scales[i] != 0.0f) {
            char buf[32];
            std::snprintf(buf, sizeof buf, "%.9g", (double)scales[i]);
            key += "|lora:" + cfg.lora[i].first + "@" + buf;
        }
    return key;
}

std::vector<std::pair<std::shared_ptr<const LoraAdapter>, float>> Server::Impl::lora_config(
    const std::vector<std::shared_ptr<const LoraAdapter>>& as, const std::vector<float>& scales) {
    std::vector<std::pair<std::shared_ptr<const LoraAdapter>, float>> out;
    for (size_t i = 0; i < as.size() && i < scales.size(); ++i)
        if (scales[i] != 0.0f) out.emplace_back(as[i], scales[i]);
    return out;
}

std::optional<ApiError> Server::Impl::lora_scales_for(const std::optional<std::vector<std::pair<int, float>>>& list,
                                                      std::vector<float>* out) {
    {
        std::lock_guard<std::mutex> lk(lora_mu);
        *out = lora_scales;
    }
    if (!list) return std::nullopt;
    if (!list->empty() && live.adapters.empty())
        return bad_request("\"lora\": the server has no LoRA adapters (start it with --lora FILE)");
    std::fill(out->begin(), out->end(), 0.0f);
    for (const auto& [id, scale] : *list) {
        if (id < 0 || id >= (int)live.adapters.size())
            return bad_request("lora id " + std::to_string(id) + " does not exist (the server has " +
                               std::to_string(live.adapters.size()) + " adapter" + (live.adapters.size() == 1 ? "" : "s") +
                               ", ids 0.." + std::to_string((int)live.adapters.size() - 1) + ")");
        (*out)[(size_t)id] = scale;
    }
    return std::nullopt;
}

std::optional<ApiError> Server::Impl::body_lora(const json& body, std::optional<std::vector<std::pair<int, float>>>* out) {
    if (!body.is_object() || !body.contains("lora") || body["lora"].is_null()) return std::nullopt;
    out->emplace();
    return parse_lora_list(body["lora"], &**out);
}

bool Server::Impl::use_lora(Slot* slot, const std::vector<float>& scales) {
    const std::string key = lora_key_of(scales);
    if (slot->lora_key != key) {
        slot->session->clear();
        if (slot->model_drafter) slot->model_drafter->clear();
        (void)live.ctx->set_lora(slot->id, lora_config(live.adapters, scales));
        slot->lora_key = key;
    }
    return key == lora_key_of(lora_startup);
}

// ---- loading ----------------------------------------------------------------------------

std::string Server::Impl::load_main(const std::string& path, Loaded* l, size_t in_use) {
    log("loading %s", path.c_str());
    auto tp = Clock::now();
    auto file = GgufFile::open(path);
    if (!file) return file.error();
    // The tokenizer read from the file on a thread of its own while the weights are bound
    // and repacked (the file is shared: it lives until both are done).
    std::shared_ptr<const GgufFile> shared(std::move(*file));
    double tok_ms = 0;
    std::unique_ptr<Tokenizer> tok;
    std::string tok_error;
    auto tok_done = std::async(std::launch::async, [&shared, &tok, &tok_error, &tok_ms] {
        const auto t0 = Clock::now();
        auto r = Tokenizer::load(*shared);
        if (r)
            tok = std::move(*r);
        else
            tok_error = r.error();
        tok_ms = ms_between(t0, Clock::now());
    });
    auto loaded = Model::load(shared, load_options());
    tok_done.get();
    if (!loaded) return loaded.error();
    startup_phase("model", &tp);
    if (starting && (*loaded)->repack_ms() > 0) startup.emplace_back("(of which repacking)", (*loaded)->repack_ms());
    if (!(*loaded)->repack_note().empty()) log("%s", (*loaded)->repack_note().c_str());
    // (the first model only: a model loaded for a swap does not change what /health says
    // about the one serving)
    Phase loading = Phase::Loading;
    phase.compare_exchange_strong(loading, Phase::Warming);
    if (!tok) return tok_error;
    // what the tokenizer still took once the model was loaded, then all it took
    startup_phase("tokenizer", &tp);
    if (starting) startup.emplace_back("(the tokenizer, read beside the model)", tok_ms);
    ContextParams cp = cfg.ctx;
    if (cp.n_ctx <= 0) cp.n_ctx = std::min<int64_t>((*loaded)->hparams().n_ctx_train, 4096);
    // --kv-unified: every slot may hold the whole context, its pages taken as used.
    if (cfg.kv_unified)
        cp.kv_lazy = true;
    else
        cp.n_ctx = std::max<int64_t>(1, cp.n_ctx / std::max(1, cfg.n_parallel));
    cp.n_seq = std::max(1, cfg.n_parallel);
    // Speculation checks a step's drafts with the logits of every position.
    if (cfg.spec.on()) cp.n_outputs = (int64_t)cp.n_seq * (cfg.spec.n_max + 1);
    if (cfg.memory_limit > 0) {
        std::string why = fit_memory(**loaded, &cp, in_use);
        if (!why.empty()) return why;
    }
    // (declared after `loaded`: an early return waits for it before the model goes)
    std::future<double> pinning;
    if (starting && cfg.mlock) {
        pinning = std::async(std::launch::async, [this, m = loaded->get()] {
            const auto t0 = Clock::now();
            pin_and_warm(*m, "the weights");
            return ms_between(t0, Clock::now());
        });
    } else {
        pin_and_warm(**loaded, "the weights");
        startup_phase(cfg.mlock ? "mlock" : "page warm-up", &tp);
    }
    auto c = Context::create(**loaded, cp);
    if (!c) return c.error();
    startup_phase("context", &tp);
    l->adapters.clear();
    for (const auto& [lpath, lscale] : cfg.lora) {
        auto a = LoraAdapter::load(lpath, **loaded);
        if (!a) return "LoRA adapter: " + a.error();
        log("LoRA adapter %zu: %s, %lld matrices, %.1f MiB, scale %g", l->adapters.size(), lpath.c_str(),
            (long long)(*a)->n_matrices(), (double)(*a)->bytes() / (1 << 20),
            cfg.lora_init_without_apply ? 0.0 : (double)lscale);
        l->adapters.push_back(std::move(*a));
    }
    l->ctx = std::move(*c);
    l->pinning = std::move(pinning);
    l->model = std::move(*loaded);
    l->tok = std::move(tok);
    l->serving_path = path;
    l->model_name = cfg.alias.empty() ? std::filesystem::path(path).filename().string() : cfg.alias;
    l->created = (int64_t)std::time(nullptr);
    return "";
}

void Server::Impl::pin_and_warm(const Model& m, const char* what) {
    bool locked = false;
    if (cfg.mlock) {
        auto r = m.lock_memory();
        locked = (bool)r;
        if (!r) {
            log("warning: --mlock failed, %s may be paged out: %s", what, r.error().c_str());
            degrade(std::string("--mlock failed, ") + what + " may be paged out: " + r.error());
        }
    }
    // (mlock faulted every page in already: no second pass over them)
    if (cfg.warmup && !locked) m.warm_up();
}

void Server::Impl::build_slots(Loaded* l) {
    auto tp = Clock::now();
    l->grammar_vocab = std::async(std::launch::async, [t = l->tok.get()] { return GrammarVocab::build(*t); }).share();
    startup_phase("grammar vocabulary (started)", &tp);
    if (l->ctx->n_seq() > 1) l->batcher = std::make_unique<StepBatcher>(*l->ctx);
    for (int i = 0; i < l->ctx->n_seq(); ++i) {
        auto s = std::make_unique<Slot>();
        s->id = i;
        s->session = std::make_unique<Session>(*l->model, *l->tok, *l->ctx, i);
        s->lora_key = lora_key_of(lora_startup);
        (void)l->ctx->set_lora(i, lora_config(l->adapters, lora_startup));
        l->slots.push_back(std::move(s));
    }
    l->pool = std::make_unique<SlotPool>((int)l->slots.size(), cfg.max_queue);
}

void Server::Impl::swap_loaded(Loaded* l, const std::function<void()>& under_gate) {
    std::unique_lock<std::mutex> lock(gate_mu);
    swapping = true;
    gate_cv.wait(lock, [&] { return in_flight == 0; });
    exchange(l);
    if (under_gate) under_gate();
    swapping = false;
    lock.unlock();
    gate_cv.notify_all();
}

void Server::Impl::go_to_sleep() {
    std::unique_lock<std::mutex> one(swap_mu, std::try_to_lock);
    if (!one.owns_lock() || sleeping || !ready()) return;
    {
        std::lock_guard<std::mutex> lock(gate_mu);
        if (in_flight > 0) return;  // busy after all: later
        swapping = true;
    }
    // Nothing runs now and new requests wait: keep what the read-only endpoints show.
    props_asleep = props_json();
    props_asleep["is_sleeping"] = true;
    models_asleep = models_json();
    for (json& m : models_asleep["data"]) m["status"] = {{"value", "sleeping"}};
    slots_asleep = slots_json();
    for (json& sl : slots_asleep) sl["n_cached"] = 0;
    steps_before += live.ctx->n_steps();
    most_tokens_before = std::max(most_tokens_before, live.ctx->most_tokens_per_step());
    const size_t rss_before = resident_bytes();
    Loaded out;
    {
        std::lock_guard<std::mutex> lock(gate_mu);  // (stop() walks the slots under it)
        exchange(&out);
        live.model_name = out.model_name;  // (still the name it answers to)
        live.serving_path = out.serving_path;
        live.created = out.created;
        sleeping = true;
        swapping = false;
    }
    gate_cv.notify_all();
    out = Loaded{};  // the model, its context, slots, prompt cache (writes finished) go
    malloc_trim(0);
    log("sleeping after %d s without a request: the model is unloaded (resident %.0f -> %.0f MiB)",
        cfg.sleep_idle_seconds, (double)rss_before / 1048576.0, (double)resident_bytes() / 1048576.0);
}

std::string Server::Impl::wake() {
    std::lock_guard<std::mutex> one(swap_mu);
    if (!sleeping) return "";
    const auto t0 = Clock::now();
    Loaded next;
    std::string err = load_main(live.serving_path, &next);
    if (!err.empty()) {
        log("error: cannot load %s again after sleeping: %s", live.serving_path.c_str(), err.c_str());
        return err;
    }
    build_slots(&next);
    if (cfg.warmup) warm_step(&next);
    std::unique_lock<std::mutex> lock(gate_mu);
    swapping = true;
    gate_cv.wait(lock, [&] { return in_flight == 0; });
    exchange(&next);
    live.cache_key = kv_cache_key(*live.ctx, template_text());
    open_prompt_cache();
    if (cfg.spec.on()) err = load_speculation();
    if (!err.empty()) {
        degrade("speculative decoding is off after sleeping: " + err);
        cfg.spec = SpecConfig{};
    }
    sleeping = false;
    swapping = false;
    lock.unlock();
    gate_cv.notify_all();
    last_active_ms = steady_ms();
    log("awake: the model is loaded again in %.0f ms", ms_between(t0, Clock::now()));
    // (a first repack cache write that the sleep stopped, again)
    keep_repacked(*live.model);
    if (live.draft_model) keep_repacked(*live.draft_model);
    return "";
}

std::string Server::Impl::fit_memory(const Model& m, ContextParams* cp, size_t in_use) {
    const size_t limit = (size_t)cfg.memory_limit - std::min<size_t>(in_use, (size_t)cfg.memory_limit);
    if (in_use > 0) {  // a model swap: both models at once, and no --fit
        auto b = Context::memory_bill(m, *cp);
        if (!b) return b.error();
        if (b->total() > limit)
            return "it needs " + std::to_string(b->total() >> 20) + " MiB beside the " +
                   std::to_string(in_use >> 20) + " MiB of the model serving now, more than "
                   "--memory-limit " + std::to_string(cfg.memory_limit >> 20) + " MiB allows";
        return "";
    }
    const size_t cache = cfg.cache_ram_mib > 0 ? (size_t)cfg.cache_ram_mib << 20 : 0;
    auto bill_text = [&](const MemoryBill& b) {
        char buf[460];
        std::snprintf(buf, sizeof buf,
                      "weights %.0f MiB + KV cache %.0f MiB (%lld tokens x %d slot%s, %s) + %sscratch "
                      "%.0f MiB + --cache-ram %.0f MiB = %.0f MiB",
                      (double)b.weights / 1048576.0, (double)b.kv_cache / 1048576.0,
                      (long long)cp->n_ctx, cp->n_seq, cp->n_seq > 1 ? "s" : "",
                      kv_types_name(*cp).c_str(),
                      b.recurrent ? ("recurrent state " + size_text(b.recurrent) + " + ").c_str() : "",
                      (double)b.scratch / 1048576.0,
                      (double)cache / 1048576.0, (double)(b.total() + cache) / 1048576.0);
        return std::string(buf);
    };
    auto bill = Context::memory_bill(m, *cp);
    if (!bill) return bill.error();
    if (bill->total() + cache <= limit) {
        log("memory: %s, within --memory-limit %.0f MiB", bill_text(*bill).c_str(), (double)limit / 1048576.0);
        return "";
    }
    const std::string asked = bill_text(*bill);
    if (!cfg.fit)
        return "it needs " + asked + ", more than --memory-limit " +
               std::to_string(limit >> 20) + " MiB (--fit shrinks the context to fit)";
    // The largest context per slot that fits, down to 128 tokens.
    const int64_t want = cp->n_ctx;
    int64_t lo = std::min<int64_t>(128, want), hi = want;
    ContextParams t = *cp;
    auto fits = [&](int64_t n) {
        t.n_ctx = n;
        auto b = Context::memory_bill(m, t);
        return b && b->total() + cache <= limit;
    };
    if (!fits(lo))
        return "it needs " + asked + "; even a context of " + std::to_string(lo) +
               " tokens does not fit --memory-limit " + std::to_string(limit >> 20) + " MiB";
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo + 1) / 2;
        if (fits(mid))
            lo = mid;
        else
            hi = mid - 1;
    }
    cp->n_ctx = lo;
    const auto b = Context::memory_bill(m, *cp);
    log("--fit: a context of %lld tokens a slot instead of %lld, to fit --memory-limit %.0f MiB: %s",
        (long long)lo, (long long)want, (double)limit / 1048576.0, bill_text(*b).c_str());
    fitted = "--fit: the context is " + std::to_string(lo * cp->n_seq) + " tokens, not the " +
             std::to_string(want * cp->n_seq) + " asked, to fit --memory-limit";
    degrade(fitted);
    return "";
}

std::string Server::Impl::load_speculation() {
    const SpecConfig& sc = cfg.spec;
    if (!sc.on()) return "";
    if (sc.draft) {
        log("loading the draft model %s", sc.draft_model.c_str());
        auto tp = Clock::now();
        auto m = Model::load(sc.draft_model, load_options());
        if (!m) return "cannot load the draft model: " + m.error();
        startup_phase("draft model", &tp);
        if (starting && (*m)->repack_ms() > 0) startup.emplace_back("(of which repacking)", (*m)->repack_ms());
        if (!(*m)->repack_note().empty()) log("draft model: %s", (*m)->repack_note().c_str());
        auto t = Tokenizer::load((*m)->file());
        if (!t) return "cannot load the draft model's tokenizer: " + t.error();
        const std::string why = draft_vocab_mismatch(*live.tok, **t);
        if (!why.empty())
            return "the draft model " + sc.draft_model + " cannot draft for " + cfg.model_path +
                   ": " + why;
        startup_phase("its tokenizer and vocabulary check", &tp);
        pin_and_warm(**m, "the draft model's weights");
        startup_phase(cfg.mlock ? "its mlock" : "its page warm-up", &tp);
        ContextParams cp = live.ctx->params();
        cp.n_ctx = sc.n_ctx > 0 ? std::max<int64_t>(1, sc.n_ctx / live.ctx->n_seq()) : n_ctx_slot();
        cp.n_outputs = cp.n_seq;
        // The draft evaluates a token at a time, and a new prompt in chunks: a small batch
        // keeps its scratch small (seed 000's memory budget).
        cp.n_batch = std::min<int64_t>(cp.n_batch, 64);
        cp.type_k = sc.type_k;
        cp.type_v = sc.type_v;
        cp.n_threads = sc.n_threads > 0 ? sc.n_threads : cfg.ctx.n_threads;
        if (cfg.memory_limit > 0) {
            const auto mb = Context::memory_bill(*live.model, live.ctx->params());
            const auto db = Context::memory_bill(**m, cp);
            const size_t cache = cfg.cache_ram_mib > 0 ? (size_t)cfg.cache_ram_mib << 20 : 0;
            if (mb && db && mb->total() + db->total() + cache > (size_t)cfg.memory_limit)
                return "the draft model does not fit --memory-limit " +
                       std::to_string(cfg.memory_limit >> 20) + " MiB: the model " +
                       std::to_string(mb->total() >> 20) + " MiB + the draft model " +
                       std::to_string(db->total() >> 20) + " MiB + --cache-ram " +
                       std::to_string(cache >> 20) + " MiB";
        }
        auto c = Context::create(**m, cp);
        if (!c) return "cannot make the draft model's context: " + c.error();
        live.draft_model = std::move(*m);
        live.draft_ctx = std::move(*c);
        if (live.draft_ctx->n_seq() > 1) live.draft_batcher = std::make_unique<StepBatcher>(*live.draft_ctx);
        startup_phase("its context", &tp);
        if (cfg.warmup) {  // (the draft's tokenizer is not kept: the vocabularies are the same)
            const int32_t t0 = live.tok->bos() >= 0 ? live.tok->bos() : 0;
            (void)live.draft_ctx->eval(std::span<const int32_t>(&t0, 1), false, 0);
            live.draft_ctx->truncate(0, 0);
            startup_phase("its warm-up step", &tp);
        }
    }
    for (auto& s : live.slots) {
        std::vector<Drafter*> chain;
        auto add = [&](Drafter* d, int n_max) {
            if (!sc.adaptive) return chain.push_back(d);
            s->adaptive.push_back(std::make_unique<AdaptiveDrafter>(*d, n_max, sc.n_min));
            chain.push_back(s->adaptive.back().get());
        };
        if (sc.ngram) {
            s->ngram_drafter =
                std::make_unique<NgramDrafter>(sc.ngram_min, sc.ngram_max, sc.ngram_n_max);
            add(s->ngram_drafter.get(), sc.ngram_n_max);
        }
        if (sc.draft) {
            s->model_drafter = std::make_unique<ModelDrafter>(*live.draft_model, *live.draft_ctx, s->id,
                                                              sc.p_min, live.model->hparams().n_vocab,
                                                              live.draft_batcher.get());
            s->model_drafter->set_max_draft(sc.draft_n_max);
            add(s->model_drafter.get(), sc.draft_n_max);
        }
        if (chain.size() > 1) {
            s->chain = std::make_unique<ChainDrafter>(chain);
            s->drafter = s->chain.get();
        } else {
            s->drafter = chain[0];
        }
    }
    return "";
}

void Server::Impl::set_load_dirs() {
    load_dirs.clear();
    auto add = [&](const std::string& dir) {
        const std::string real = sys::real_path(dir);
        if (!real.empty() && std::find(load_dirs.begin(), load_dirs.end(), real) == load_dirs.end())
            load_dirs.push_back(real);
    };
    for (const std::string* model : {&cfg.model_path, &cfg.fallback_model}) {
        if (model->empty()) continue;
        add(fs::path(*model).parent_path().string());
        if (const std::string real = sys::real_path(*model); !real.empty())
            add(fs::path(real).parent_path().string());  // (a link's target's)
    }
    for (const std::string& dir : cfg.models_allow_dirs) add(dir);
}

std::optional<ApiError> Server::Impl::model_to_load(std::string* path) const {
    const fs::path given(*path);
    if (std::any_of(given.begin(), given.end(), [](const fs::path& c) { return c == ".."; }))
        return ApiError{403, "permission_error",
                        "cannot load " + *path + ": a model path does not step up (..)", {}};
    // (a bare name is a file beside the model serving now)
    const bool bare = path->find('/') == std::string::npos;
    const std::string file = bare ? (fs::path(live.serving_path).parent_path() / *path).string() : *path;
    // Judged by where it leads, before anything says whether it exists there.
    if (sys::real_path_within(file, load_dirs).empty())
        return ApiError{403, "permission_error",
                        "cannot load " + *path + ": it leads outside the directories models are "
                        "loaded from (the served model's, edgellm's model directory and "
                        "--models-allow-dir)", {}};
    std::error_code ec;
    if (!fs::is_regular_file(file, ec)) return bad_request("no model file " + *path);
    *path = file;
    return std::nullopt;
}

void Server::Impl::models_load(const http::Request& req, http::Response& res, std::string* log_extra) {
    if (sleeping)
        if (const std::string e = wake(); !e.empty())
            return send_error(res, {503, "unavailable_error", "the model could not be loaded again: " + e, {}});
    const json j = json::parse(req.body, nullptr, false);
    if (!j.is_object() || !j.contains("model") || !j["model"].is_string() || j["model"].get<std::string>().empty())
        return send_error(res, bad_request("give {\"model\": \"FILE\"}: a GGUF file, or the name of one "
                                           "beside the model serving now"));
    std::string path = j["model"].get<std::string>();
    for (const auto& [k, v] : j.items())
        if (k != "model")
            return send_error(res, bad_request("/models/load takes only \"model\" (the server's flags "
                                               "apply to the new model too), got \"" + k + "\""));
    if (auto e = model_to_load(&path)) return send_error(res, *e);
    std::unique_lock<std::mutex> one(swap_mu, std::try_to_lock);
    if (!one.owns_lock())
        return send_error(res, {409, "conflict_error", "another model is being loaded", {}});
    {
        std::lock_guard<std::mutex> lock(loading_mu);
        loading_path = path;
    }
    const auto t0 = Clock::now();
    // Both models are resident for a moment: the new one must fit beside the current one.
    size_t in_use = 0;
    if (auto b = Context::memory_bill(*live.model, live.ctx->params())) in_use += b->total();
    if (live.draft_ctx)
        if (auto b = Context::memory_bill(*live.draft_model, live.draft_ctx->params())) in_use += b->total();
    if (cfg.cache_ram_mib > 0) in_use += (size_t)cfg.cache_ram_mib << 20;
    Loaded next;
    std::string err = load_main(path, &next, cfg.memory_limit > 0 ? std::max<size_t>(in_use, 1) : 0);
    if (err.empty()) {
        build_slots(&next);
        if (cfg.warmup) warm_step(&next);
    }
    {
        std::lock_guard<std::mutex> lock(loading_mu);
        loading_path.clear();
    }
    if (!err.empty()) {
        log("model swap to %s failed, %s keeps serving: %s", path.c_str(), live.model_name.c_str(), err.c_str());
        *log_extra = " | failed, rolled back";
        return send_error(res, bad_request("cannot switch to " + path + ": " + err + " (" + live.model_name +
                                           " keeps serving)"));
    }
    const double load_ms = ms_between(t0, Clock::now());
    const std::string previous = live.model_name;
    const bool had_draft = live.draft_ctx != nullptr;
    const auto t_swap = Clock::now();
    swap_loaded(&next, [&] {
        // (under the gate: no request sees the new model without its prompt cache)
        live.cache_key = kv_cache_key(*live.ctx, template_text());
        open_prompt_cache();
        if (had_draft) cfg.spec = SpecConfig{};
    });
    const double swap_ms = ms_between(t_swap, Clock::now());
    log("switched from %s to %s (loaded in %.0f ms, switched in %.1f ms)%s", previous.c_str(),
        live.model_name.c_str(), load_ms, swap_ms,
        had_draft ? "; speculative decoding is off: the draft model was chosen for the previous model" : "");
    send_json(res, 200, {{"success", true}, {"model", live.model_name}, {"path", live.serving_path},
                         {"previous", previous}, {"load_ms", load_ms}, {"switch_ms", swap_ms}});
    keep_repacked(*live.model);
    // (next now holds the previous model; it is freed here, after the answer)
}

}  // namespace edgellm::server
