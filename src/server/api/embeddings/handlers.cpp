// Embeddings (OpenAI's and llama.cpp's shapes) and reranking on the model's slots.
#include "server/server_impl.h"

#include "server/api/embeddings/embeddings.h"
#include "server/http/disconnect_watch.h"

namespace edgellm::server {

Context::Pooling Server::Impl::pooling() const {
    if (cfg.pooling) return *cfg.pooling;
    const HParams& h = live.model->hparams();
    // llama.cpp's LLAMA_POOLING_TYPE_*: 0 none, 1 mean, 2 cls, 3 last (4 rank: a
    // classifier head, which the supported architectures do not have).
    switch (live.model->file().get_int(h.arch + ".pooling_type").value_or(3)) {
        case 0: return Context::Pooling::None;
        case 1: return Context::Pooling::Mean;
        case 2: return Context::Pooling::Cls;
        default: return Context::Pooling::Last;
    }
}

std::optional<ApiError> Server::Impl::input_tokens(const std::vector<InputPrompt>& in,
                                                   std::vector<std::vector<int32_t>>* out) const {
    const int64_t n_ctx = n_ctx_slot();
    for (size_t i = 0; i < in.size(); ++i) {
        std::vector<int32_t> ids;
        bool first_text = true;
        for (const InputPiece& piece : in[i]) {
            if (piece.is_text) {
                auto t = live.tok->tokenize(piece.text, first_text, true);
                first_text = false;
                ids.insert(ids.end(), t.begin(), t.end());
            } else {
                for (int32_t id : piece.ids)
                    if (id >= live.tok->n_vocab())
                        return bad_request("token id " + std::to_string(id) +
                                           " is outside the vocabulary of " +
                                           std::to_string(live.tok->n_vocab()));
                ids.insert(ids.end(), piece.ids.begin(), piece.ids.end());
            }
        }
        const std::string which = in.size() > 1 ? "input " + std::to_string(i) : "the input";
        if (ids.empty()) return bad_request(which + " is empty (no tokens)");
        if ((int64_t)ids.size() > n_ctx)
            return bad_request(which + " (" + std::to_string(ids.size()) +
                               " tokens) is too large to process: a slot's context holds " +
                               std::to_string(n_ctx) + " (-c / -np)");
        out->push_back(std::move(ids));
    }
    return std::nullopt;
}

bool Server::Impl::embed_all(const std::vector<std::vector<int32_t>>& prompts,
                             const std::vector<float>& lora_scales_now, Context::Pooling pooling,
                             const http::Request& req, http::Response& res, std::string* log_extra,
                             std::vector<std::vector<float>>* out) {
    auto answer = [&](const ApiError& e) {
        if (e.status == 499) {
            metrics.cancelled++;
            *log_extra = " | cancelled";
        } else {
            send_error(res, e);
        }
        return false;
    };
    ApiError err;
    Slot* slot = acquire({}, -1, req, res, &err, log_extra);
    if (!slot) return answer(err);
    metrics.processing++;
    (void)use_lora(slot, lora_scales_now);  // (embedding replaces what the slot held anyway)
    std::optional<ApiError> failed;
    {
        DisconnectWatch watch(res, slot->cancel);
        for (const auto& ids : prompts) {
            auto v = slot->session->cache().embed(ids, pooling, &slot->cancel, live.batcher.get());
            if (!v) {
                if (slot->cancel || res.peer_gone())
                    failed = ApiError{499, "cancelled", "the client went away", {}};
                else
                    failed = ApiError{500, "server_error", v.error(), {}};
                break;
            }
            out->push_back(std::move(*v));
        }
    }
    metrics.processing--;
    live.pool->release(slot->id);
    return failed ? answer(*failed) : true;
}

void Server::Impl::embeddings(bool oai, const http::Request& req, http::Response& res,
                              std::string* log_extra) {
    if (!cfg.embeddings)
        return send_error(res, {400, "not_supported_error",
                                "This server does not serve embeddings: start it with --embedding", {}});
    const json body = json::parse(req.body, nullptr, false);
    EmbeddingRequest er;
    if (auto e = parse_embedding_request(body, oai, live.model->hparams().n_embd, &er))
        return send_error(res, *e);
    std::optional<std::vector<std::pair<int, float>>> lora;
    std::vector<float> scales;
    if (auto e = body_lora(body, &lora)) return send_error(res, *e);
    if (auto e = lora_scales_for(lora, &scales)) return send_error(res, *e);
    const Context::Pooling pool_type = pooling();
    if (oai && pool_type == Context::Pooling::None)
        return send_error(res, bad_request("pooling 'none' (one vector per token) is not "
                                           "OpenAI-compatible: use /embedding, or start the "
                                           "server with another --pooling"));
    std::vector<std::vector<int32_t>> prompts;
    if (auto e = input_tokens(er.inputs, &prompts)) return send_error(res, *e);
    std::vector<std::vector<float>> vecs;
    if (!embed_all(prompts, scales, pool_type, req, res, log_extra, &vecs)) return;
    const int64_t n_embd = live.model->hparams().n_embd;
    int64_t n_tokens = 0;
    for (const auto& p : prompts) n_tokens += (int64_t)p.size();
    *log_extra = " | " + std::to_string(prompts.size()) + " input(s), " + std::to_string(n_tokens) + " tokens";
    json data = json::array();
    for (size_t i = 0; i < vecs.size(); ++i) {
        if (pool_type == Context::Pooling::None) {  // one vector per token, not normalized
            json rows = json::array();
            for (size_t t = 0; t < prompts[i].size(); ++t)
                rows.push_back(std::vector<float>(vecs[i].begin() + (int64_t)t * n_embd,
                                                  vecs[i].begin() + (int64_t)(t + 1) * n_embd));
            data.push_back({{"index", i}, {"embedding", rows}});
            continue;
        }
        normalize_embedding(&vecs[i], er.normalize);
        if (oai)
            data.push_back({{"embedding", er.base64 ? json(base64_floats(vecs[i])) : json(vecs[i])},
                            {"index", i},
                            {"object", "embedding"}});
        else
            data.push_back({{"index", i}, {"embedding", json::array({vecs[i]})}});
    }
    if (!oai) return send_json(res, 200, data);
    send_json(res, 200,
              {{"model", live.model_name},
               {"object", "list"},
               {"usage", {{"prompt_tokens", n_tokens}, {"total_tokens", n_tokens}}},
               {"data", data}});
}

// Relevance without a classifier head: the cosine similarity of the query's and each
// document's embeddings (pooled as --pooling says; none and rank pool the last token).
void Server::Impl::rerank(const http::Request& req, http::Response& res, std::string* log_extra) {
    if (!cfg.reranking)
        return send_error(res, {400, "not_supported_error",
                                "This server does not rerank: start it with --reranking", {}});
    const json body = json::parse(req.body, nullptr, false);
    RerankRequest rr;
    if (auto e = parse_rerank_request(body, &rr)) return send_error(res, *e);
    std::optional<std::vector<std::pair<int, float>>> lora;
    std::vector<float> scales;
    if (auto e = body_lora(body, &lora)) return send_error(res, *e);
    if (auto e = lora_scales_for(lora, &scales)) return send_error(res, *e);
    std::vector<InputPrompt> in;
    in.push_back({{true, rr.query, {}}});
    for (const std::string& d : rr.documents) in.push_back({{true, d, {}}});
    std::vector<std::vector<int32_t>> prompts;
    if (auto e = input_tokens(in, &prompts)) return send_error(res, *e);
    Context::Pooling pool_type = pooling();
    if (pool_type == Context::Pooling::None) pool_type = Context::Pooling::Last;
    std::vector<std::vector<float>> vecs;
    if (!embed_all(prompts, scales, pool_type, req, res, log_extra, &vecs)) return;
    std::vector<float> scores;
    for (size_t i = 1; i < vecs.size(); ++i) scores.push_back(cosine(vecs[0], vecs[i]));
    int64_t n_tokens = 0;
    for (const auto& p : prompts) n_tokens += (int64_t)p.size();
    *log_extra = " | " + std::to_string(rr.documents.size()) + " document(s), " +
                 std::to_string(n_tokens) + " tokens";
    send_json(res, 200, rerank_response(rr, scores, n_tokens, live.model_name));
}

}  // namespace edgellm::server
