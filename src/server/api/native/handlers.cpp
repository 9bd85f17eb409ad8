// llama.cpp's native routes that are not a generation (tokenize, detokenize,
// apply-template) and Vertex AI's prediction route.
#include "server/server_impl.h"

namespace edgellm::server {

void Server::Impl::tokenize(const http::Request& req, http::Response& res) {
    json j = json::parse(req.body, nullptr, false);
    if (!j.is_object()) return send_error(res, bad_request("the request body must be a JSON object"));
    if (!j.contains("content") || !j["content"].is_string())
        return send_error(res, bad_request("content must be a string"));
    bool add_special = false, with_pieces = false;
    if (j.contains("add_special") && j["add_special"].is_boolean()) add_special = j["add_special"];
    if (j.contains("with_pieces") && j["with_pieces"].is_boolean()) with_pieces = j["with_pieces"];
    bool parse_special = true;
    if (j.contains("parse_special") && j["parse_special"].is_boolean()) parse_special = j["parse_special"];
    const auto ids = live.tok->tokenize(j["content"].get<std::string>(), add_special, parse_special);
    json out = json::array();
    for (int32_t id : ids) {
        if (!with_pieces) {
            out.push_back(id);
            continue;
        }
        const std::string piece = live.tok->token_to_piece(id, true);
        // A piece that is not valid UTF-8 on its own (part of a character) goes as bytes,
        // as llama.cpp sends it.
        bool valid = true;
        try {
            (void)json(piece).dump();
        } catch (const json::exception&) {
            valid = false;
        }
        if (valid) {
            out.push_back({{"id", id}, {"piece", piece}});
        } else {
            std::vector<int> bytes;
            for (unsigned char c : piece) bytes.push_back(c);
            out.push_back({{"id", id}, {"piece", bytes}});
        }
    }
    send_json(res, 200, {{"tokens", out}});
}

void Server::Impl::detokenize(const http::Request& req, http::Response& res) {
    json j = json::parse(req.body, nullptr, false);
    if (!j.is_object()) return send_error(res, bad_request("the request body must be a JSON object"));
    std::vector<int32_t> ids;
    if (j.contains("tokens")) {
        if (!j["tokens"].is_array()) return send_error(res, bad_request("tokens must be an array of ids"));
        for (const json& t : j["tokens"]) {
            if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= live.tok->n_vocab())
                return send_error(res, bad_request("tokens must be ids in [0, " +
                                                   std::to_string(live.tok->n_vocab()) + ")"));
            ids.push_back(t.get<int32_t>());
        }
    }
    send_json(res, 200, {{"content", live.tok->detokenize(ids, true)}});
}

void Server::Impl::apply_template(const http::Request& req, http::Response& res) {
    GenRequest g;
    g.prefill_assistant = cfg.prefill_assistant;
    g.cache_prompt = cfg.cache_prompt;
    if (auto e = parse_gen_request(Api::Chat, req.body, cfg.defaults, &g)) return send_error(res, *e);
    bool bos = false;
    send_json(res, 200, {{"prompt", render(g, &bos)}});
}

void Server::Impl::predict(const http::Request& req, http::Response& res, std::string* log_extra) {
    const json body = json::parse(req.body, nullptr, false);
    if (!body.is_object()) return send_error(res, bad_request("the request body must be a JSON object"));
    if (!body.contains("instances") || !body["instances"].is_array())
        return send_error(res, bad_request("\"instances\" must be an array"));
    json predictions = json::array();
    for (const json& inst : body["instances"]) {
        if (!inst.is_object() || !inst.contains("@requestFormat") || !inst["@requestFormat"].is_string()) {
            predictions.push_back({{"error", json::parse(error_body(bad_request(
                                                 "each instance needs \"@requestFormat\"")))["error"]}});
            continue;
        }
        const std::string format = inst["@requestFormat"];
        Api api;
        if (format == "chatCompletions") api = Api::Chat;
        else if (format == "completions") api = Api::Completions;
        else if (format == "completion") api = Api::Native;
        else {
            predictions.push_back({{"error", json::parse(error_body(bad_request(
                "@requestFormat \"" + format + "\": chatCompletions, completions or completion")))["error"]}});
            continue;
        }
        json one = inst;
        one.erase("@requestFormat");
        if (one.contains("stream") && !(one["stream"].is_boolean() && !one["stream"].get<bool>()) &&
            !one["stream"].is_null()) {
            predictions.push_back({{"error", json::parse(error_body(bad_request(
                                                 "the predict route does not stream")))["error"]}});
            continue;
        }
        json answer;
        std::string note;
        const int status = generate_captured(api, req, one, res, &answer, &note);
        if (status == 0) return;  // the client went away
        predictions.push_back(status == 200 ? answer : json{{"error", answer.value("error", answer)}});
    }
    *log_extra = " | " + std::to_string(predictions.size()) + " instance(s)";
    send_json(res, 200, {{"predictions", predictions}});
}

}  // namespace edgellm::server
