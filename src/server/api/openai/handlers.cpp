// OpenAI's routes beyond one generation: a prompt list answered as one (completions),
// and the chat prompt's token count.
#include "server/server_impl.h"

#include <algorithm>

namespace edgellm::server {

namespace {

// Several prompts in one request: an array of strings, token arrays or prompt objects (a
// flat array of ids is one prompt, as is an array of one string).
bool is_prompt_batch(const json& p) {
    if (!p.is_array() || p.empty()) return false;
    if (std::all_of(p.begin(), p.end(), [](const json& e) { return e.is_number(); })) return false;
    if (p.size() == 1 && p[0].is_string()) return false;
    return std::all_of(p.begin(), p.end(),
                       [](const json& e) { return e.is_string() || e.is_array() || e.is_object(); });
}

}  // namespace

// POST /v1/completions (OpenAI), /completion and /completions (llama.cpp): one prompt, or a
// batch of them answered in turn.
void Server::Impl::completions(Api api, const http::Request& req, http::Response& res, std::string* log_extra) {
    const json body = json::parse(req.body, nullptr, false);
    if (body.is_object() && body.contains("prompt") && is_prompt_batch(body["prompt"]))
        return generate_batch(api, req, res, log_extra, body);
    if (body.is_object()) return generate(api, req, res, log_extra, nullptr, &body);
    generate(api, req, res, log_extra);
}

std::optional<int64_t> Server::Impl::count_chat_tokens(const json& body, ApiError* err) {
    GenRequest g;
    g.prefill_assistant = cfg.prefill_assistant;
    g.cache_prompt = cfg.cache_prompt;
    if (auto bad = parse_gen_json(Api::Chat, body, cfg.defaults, &g)) {
        *err = *bad;
        return std::nullopt;
    }
    // (counted, not run: a prompt longer than a slot's context is counted too)
    bool bos_in_text = false;
    const std::string text = render(g, &bos_in_text);
    return (int64_t)live.tok->tokenize(text, !bos_in_text, true).size();
}

void Server::Impl::input_tokens_count(const http::Request& req, http::Response& res) {
    const json body = json::parse(req.body, nullptr, false);
    if (body.is_discarded()) return send_error(res, bad_request("the request body is not valid JSON"));
    ApiError err;
    const auto n = count_chat_tokens(body, &err);
    if (!n) return send_error(res, err);
    send_json(res, 200, {{"input_tokens", *n}});
}

int Server::Impl::generate_captured(Api api, const http::Request& req, const json& body,
                                   http::Response& res, json* answer, std::string* log_extra) {
    int status = 0;
    ReplyAdapter a;
    a.capture = [&](int st, const json& j) {
        status = st;
        *answer = j;
    };
    generate(api, req, res, log_extra, &a, &body);
    return status;
}

void Server::Impl::generate_batch(Api api, const http::Request& req, http::Response& res,
                                  std::string* log_extra, const json& body) {
    if (body.contains("stream") && !body["stream"].is_boolean() && !body["stream"].is_null())
        return send_error(res, bad_request("stream must be true or false"));
    if (body.contains("stream") && body["stream"].is_boolean() && body["stream"].get<bool>())
        return send_error(res, bad_request("stream with several prompts is not supported: "
                                           "send one request per prompt"));
    const json& prompts = body["prompt"];
    std::vector<json> answers;
    std::string extra;
    for (size_t i = 0; i < prompts.size(); ++i) {
        json one = body;
        one["prompt"] = prompts[i];
        json answer;
        std::string note;
        const int status = generate_captured(api, req, one, res, &answer, &note);
        extra += note;
        if (status == 0) {  // cancelled: the client went away
            *log_extra = extra;
            return;
        }
        if (status != 200) {  // the first failure answers for the batch, naming the prompt
            json e = answer;
            if (e.contains("error") && e["error"].contains("message"))
                e["error"]["message"] = "prompt " + std::to_string(i) + ": " +
                                        e["error"]["message"].get<std::string>();
            *log_extra = extra;
            return send_json(res, status, e);
        }
        answers.push_back(std::move(answer));
    }
    *log_extra = " | " + std::to_string(prompts.size()) + " prompts" + extra;
    if (api == Api::Native && answers.size() == 1) return send_json(res, 200, answers[0]);
    if (api == Api::Native) {
        json out = json::array();
        for (size_t i = 0; i < answers.size(); ++i) {
            answers[i]["index"] = i;
            out.push_back(std::move(answers[i]));
        }
        return send_json(res, 200, out);
    }
    // OpenAI: one answer, a choice per prompt (and per n), usage summed.
    json out = answers[0];
    out["choices"] = json::array();
    int64_t prompt_tokens = 0, completion_tokens = 0;
    const int64_t n = body.contains("n") && body["n"].is_number_integer() ? body["n"].get<int64_t>() : 1;
    for (size_t i = 0; i < answers.size(); ++i) {
        for (json c : answers[i]["choices"]) {
            c["index"] = (int64_t)i * std::max<int64_t>(1, n) + c.value("index", 0);
            out["choices"].push_back(std::move(c));
        }
        prompt_tokens += answers[i]["usage"].value("prompt_tokens", 0);
        completion_tokens += answers[i]["usage"].value("completion_tokens", 0);
    }
    out["usage"] = {{"prompt_tokens", prompt_tokens},
                    {"completion_tokens", completion_tokens},
                    {"total_tokens", prompt_tokens + completion_tokens}};
    send_json(res, 200, out);
}

}  // namespace edgellm::server
