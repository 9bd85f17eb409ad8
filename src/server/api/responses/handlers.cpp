// OpenAI's Responses API through the chat path.
#include "server/server_impl.h"

#include <memory>

#include "server/api/responses/responses.h"

namespace edgellm::server {

void Server::Impl::responses(const http::Request& req, http::Response& res, std::string* log_extra) {
    const json body = json::parse(req.body, nullptr, false);
    if (!body.is_object()) return send_error(res, bad_request("the request body must be a JSON object"));
    json chat;
    if (auto e = responses_to_chat(body, &chat)) return send_error(res, *e);
    ReplyAdapter a;
    a.body = [body](const json& b, const GenOutcome&) { return chat_to_responses(b, body); };
    a.stream = [body](int64_t, const std::string& model) {
        auto tr = std::make_shared<ResponsesStream>(model, body);
        return [tr](const json* c) { return c ? tr->on_chunk(*c) : tr->on_done(); };
    };
    generate(Api::Chat, req, res, log_extra, &a, &chat);
}

// POST /v1/responses/input_tokens: the prompt's token count, nothing generated.
void Server::Impl::responses_input_tokens(const http::Request& req, http::Response& res) {
    const json body = json::parse(req.body, nullptr, false);
    if (!body.is_object()) return send_error(res, bad_request("the request body must be a JSON object"));
    json chat;
    if (auto e = responses_to_chat(body, &chat)) return send_error(res, *e);
    ApiError err;
    const auto n = count_chat_tokens(chat, &err);
    if (!n) return send_error(res, err);
    return send_json(res, 200, {{"object", "response.input_tokens"}, {"input_tokens", *n}});
}

}  // namespace edgellm::server
