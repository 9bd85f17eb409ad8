// The admin routes: health, the model list, props, slots (and their save / restore /
// erase), LoRA adapters.
#include "server/server_impl.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>

#include "edgellm/chat.h"

namespace edgellm::server {

namespace {

// Why a slot file's name is refused (null: it is a plain file name in --slot-save-path).
const char* slot_file_name_fault(const std::string& name) {
    if (name.empty() || name.size() > 200) return "1 to 200 bytes";
    if (name.find('/') != std::string::npos || name.find('\\') != std::string::npos)
        return "without directories";
    if (name[0] == '.') return "not hidden (no leading .), not . or ..";
    auto control = [](char c) { return (unsigned char)c < 0x20 || c == 0x7f; };
    if (std::any_of(name.begin(), name.end(), control)) return "without control characters";
    return nullptr;
}

uintmax_t file_bytes(const std::string& path) {
    std::error_code ec;
    const uintmax_t n = std::filesystem::file_size(path, ec);
    return ec ? 0 : n;
}

}  // namespace

void Server::Impl::health(http::Response& res) {
    const Phase ph = phase.load();
    if (ph != Phase::Ready) {
        ApiError e{503, "unavailable_error", ph == Phase::Loading ? "Loading model" : "Warming up the model", {}};
        json body = json::parse(error_body(e));
        body["status"] = ph == Phase::Loading ? "loading" : "warming";
        return send_json(res, 503, body);
    }
    std::vector<std::string> why;
    {
        std::lock_guard<std::mutex> lock(health_mu);
        why = degraded;
    }
    if (live.prompt_cache && !live.prompt_cache->options().dir.empty()) {
        const auto st = live.prompt_cache->stats();
        if (st.write_errors > 0)
            why.push_back("prompt cache: " + std::to_string(st.write_errors) +
                          " KV files could not be written to " + live.prompt_cache->options().dir);
    }
    if (why.empty()) return send_json(res, 200, {{"status", "ok"}, {"state", "ready"}});
    std::string reason;
    for (const std::string& w : why) reason += (reason.empty() ? "" : "; ") + w;
    send_json(res, 200, {{"status", "ok"}, {"state", "degraded"}, {"reason", reason}});
}

void Server::Impl::models(http::Response& res) {
    if (sleeping) return send_json(res, 200, models_asleep);
    send_json(res, 200, models_json());
}

json Server::Impl::models_json() const {
    const HParams& h = live.model->hparams();
    // llama.cpp's LLAMA_VOCAB_TYPE_*: SPM 1, BPE 2, WPM 3
    const Tokenizer::Kind kind = live.tok->kind();
    json meta = {{"vocab_type", kind == Tokenizer::Kind::Spm   ? 1
                                : kind == Tokenizer::Kind::Bpe ? 2
                                                               : 3},
                 {"n_vocab", h.n_vocab},
                 {"n_ctx_train", h.n_ctx_train},
                 {"n_embd", h.n_embd},
                 {"size", live.model->weight_bytes()}};
    json m = {{"id", live.model_name}, {"object", "model"}, {"created", live.created},
              {"owned_by", "edgellm"}, {"meta", meta}, {"path", live.serving_path},
              {"status", {{"value", "loaded"}}}};
    m["aliases"] = cfg.aliases.empty() ? json::array({live.model_name}) : json(cfg.aliases);
    m["tags"] = cfg.tags;
    json data = json::array({m});
    {
        std::lock_guard<std::mutex> lock(loading_mu);
        if (!loading_path.empty())
            data.push_back({{"id", std::filesystem::path(loading_path).filename().string()},
                            {"object", "model"}, {"owned_by", "edgellm"}, {"path", loading_path},
                            {"status", {{"value", "loading"}}}});
    }
    return {{"object", "list"}, {"data", data}};
}

void Server::Impl::props(http::Response& res) {
    if (sleeping) return send_json(res, 200, props_asleep);
    send_json(res, 200, props_json());
}

json Server::Impl::props_json() const {
    const std::string tmpl = cfg.chat_template.empty()
                                 ? live.model->file().get_string("tokenizer.chat_template").value_or("")
                                 : cfg.chat_template;
    json j = {{"default_generation_settings",
               {{"id", 0}, {"n_ctx", n_ctx_slot()}, {"params", sampling_json(cfg.defaults)},
                {"model", live.model_name}}},
              {"total_slots", live.slots.size()},
              {"model_alias", live.model_name},
              {"model_path", live.serving_path},
              {"chat_template", tmpl},
              {"chat_format",
               cfg.chat_format ? "built-in " + std::string(chat_format_name(*cfg.chat_format))
               : tmpl.empty()  ? "built-in " + std::string(chat_format_name(
                                                  detect_chat_format(live.model->file(), *live.tok)))
                               : std::string("jinja")},
              {"bos_token", live.tok->bos() >= 0 ? live.tok->token_to_piece(live.tok->bos(), true) : ""},
              {"eos_token", live.tok->eos() >= 0 ? live.tok->token_to_piece(live.tok->eos(), true) : ""},
              {"modalities", {{"vision", false}, {"audio", false}}},
              {"build_info", build_info()},
              {"is_sleeping", false}};
    return j;
}

void Server::Impl::slots_get(http::Response& res) {
    if (sleeping) return send_json(res, 200, slots_asleep);
    send_json(res, 200, slots_json());
}

json Server::Impl::slots_json() const {
    json arr = json::array();
    for (const auto& s : live.slots) {
        const bool busy = live.pool->busy(s->id);
        const int64_t decoded = s->n_decoded;
        const int64_t n_predict = s->n_predict;
        arr.push_back({{"id", s->id},
                       {"n_ctx", n_ctx_slot()},
                       {"is_processing", busy},
                       {"n_cached", s->session->n_cached()},
                       // (llama-server's shape: a list; an idle slot's budget is not kept)
                       {"next_token",
                        json::array({{{"has_next_token", busy},
                                      {"n_decoded", busy ? decoded : 0},
                                      {"n_remain", !busy || n_predict < 0
                                                       ? -1
                                                       : std::max<int64_t>(0, n_predict - decoded)}}})}});
    }
    return arr;
}

// POST /slots/N?action=save|restore|erase, DELETE /slots/N (erase).
void Server::Impl::slots_post(const http::Request& req, http::Response& res) {
    const std::string id_text = req.path.substr(7);
    int id = -1;
    if (!id_text.empty() && id_text.size() < 6 && std::all_of(id_text.begin(), id_text.end(), ::isdigit))
        id = std::stoi(id_text);
    if (id < 0 || id >= (int)live.slots.size())
        return send_error(res, {404, "not_found_error",
                                "there is no slot " + id_text + " (slots: 0.." +
                                    std::to_string(live.slots.size() - 1) + ")", {}});
    std::string action = "erase";
    if (req.method == "POST") {
        auto it = req.query.find("action");
        if (it == req.query.end()) return send_error(res, bad_request("give ?action=save, restore or erase"));
        action = it->second;
    }
    slot_action(req, res, id, action);
}

void Server::Impl::slot_action(const http::Request& req, http::Response& res, int id,
                               std::string action) {
    Slot& s = *live.slots[(size_t)id];
    if (action == "erase") {
        // A generation still running on the slot (a client that just dropped its stream)
        // is stopped first; then the slot's cache is emptied.
        if (!live.pool->hold(id, std::chrono::seconds(10), [&] { s.cancel = true; }))
            return send_error(res, {503, "unavailable_error", "the slot is still busy", {}});
        const int64_t n = (int64_t)s.session->cached_tokens().size();
        s.session->clear();
        if (s.model_drafter) s.model_drafter->clear();
        live.pool->release(id);
        return send_json(res, 200, {{"id_slot", id}, {"n_erased", n}});
    }
    if (action == "save" || action == "restore") {
        if (cfg.slot_save_path.empty())
            return send_error(res, {501, "not_supported_error",
                                    "slot save and restore need --slot-save-path DIR", {}});
        const json j = json::parse(req.body, nullptr, false);
        if (!j.is_object() || !j.contains("filename") || !j["filename"].is_string())
            return send_error(res, bad_request("give {\"filename\": \"NAME\"}"));
        const std::string name = j["filename"].get<std::string>();
        if (auto why = slot_file_name_fault(name))
            return send_error(res, bad_request(std::string("filename must be a plain file name: ") + why));
        const std::string path = (std::filesystem::path(cfg.slot_save_path) / name).string();
        // A name that is a link in the directory (wherever it points) or not a regular file
        // is neither read nor written (the reads also open it without following a link).
        if (struct stat st; ::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
            const char* what = S_ISLNK(st.st_mode) ? "a symbolic link" : "not a regular file";
            return send_error(res, {403, "permission_error",
                                    "filename " + name + " in --slot-save-path is " + what +
                                        ": slot files are never read or written through one", {}});
        }
        if (!live.pool->hold(id, std::chrono::seconds(10), nullptr))
            return send_error(res, {503, "unavailable_error", "the slot is busy", {}});
        const auto t0 = Clock::now();
        json out;
        std::optional<ApiError> fail;
        if (action == "save") {
            auto r = write_kv_file(path, live.cache_key, save_state(s.session->cache()));
            if (!r)
                fail = ApiError{500, "server_error", r.error(), {}};
            else
                out = {{"id_slot", id}, {"filename", name},
                       {"n_saved", s.session->cached_tokens().size()}, {"n_written", *r},
                       {"timings", {{"save_ms", ms_between(t0, Clock::now())}}}};
        } else {
            auto st = read_kv_file(path, live.cache_key);
            auto r = st ? restore_state(s.session->cache(), *st) : Result<int64_t>::fail(st.error());
            if (s.model_drafter) s.model_drafter->clear();
            if (!r)
                fail = ApiError{400, "invalid_request_error", r.error(), {}};
            else
                out = {{"id_slot", id}, {"filename", name}, {"n_restored", *r},
                       {"n_read", file_bytes(path)},
                       {"timings", {{"restore_ms", ms_between(t0, Clock::now())}}}};
        }
        live.pool->release(id);
        if (fail) return send_error(res, *fail);
        return send_json(res, 200, out);
    }
    send_error(res, bad_request("unknown slot action \"" + action + "\" (save, restore, erase)"));
}

void Server::Impl::lora_adapters_get(http::Response& res) {
    json out = json::array();
    std::lock_guard<std::mutex> lk(lora_mu);
    for (size_t i = 0; i < live.adapters.size(); ++i)
        out.push_back({{"id", i}, {"path", cfg.lora[i].first}, {"scale", lora_scales[i]},
                       {"alpha", live.adapters[i]->alpha()}, {"n_matrices", live.adapters[i]->n_matrices()}});
    send_json(res, 200, out);
}

// [{"id", "scale"}]: the scales of requests without "lora" from now on (those not listed: 0),
// as llama-server's POST /lora-adapters.
void Server::Impl::lora_adapters_post(const http::Request& req, http::Response& res, std::string* log_extra) {
    const json body = json::parse(req.body, nullptr, false);
    if (body.is_discarded()) return send_error(res, bad_request("the request body is not JSON"));
    std::optional<std::vector<std::pair<int, float>>> list;
    list.emplace();
    if (auto e = parse_lora_list(body, &*list)) return send_error(res, *e);
    std::vector<float> scales;
    if (auto e = lora_scales_for(list, &scales)) return send_error(res, *e);
    {
        std::lock_guard<std::mutex> lk(lora_mu);
        lora_scales = scales;
    }
    std::string shown;
    for (size_t i = 0; i < scales.size(); ++i) shown += (i ? ", " : "") + std::to_string(i) + ": " + std::to_string(scales[i]).substr(0, 5);
    *log_extra = " | scales " + shown;
    send_json(res, 200, {{"success", true}});
}

}  // namespace edgellm::server
