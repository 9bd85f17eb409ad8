// Anthropic's messages API through the chat path: the request translated into a chat
// request, the answer and the stream translated back.
#include "server/server_impl.h"

#include <memory>

#include "server/api/anthropic/anthropic.h"

namespace edgellm::server {

void Server::Impl::anthropic_messages(const http::Request& req, http::Response& res,
                                      std::string* log_extra) {
    auto refuse = [&](const ApiError& e) { send_json(res, e.status, anthropic_error_json(e)); };
    const json body = json::parse(req.body, nullptr, false);
    if (!body.is_object()) return refuse(bad_request("the request body must be a JSON object"));
    json chat;
    if (auto e = anthropic_to_chat(body, &chat)) return refuse(*e);
    auto stop_text = [](const GenOutcome& o) {
        return o.result.stop == StopReason::StopString ? o.result.stop_string : std::string();
    };
    // The stream's translator, made when the stream starts, told the stop string at its end.
    auto stream = std::make_shared<std::shared_ptr<AnthropicStream>>();
    ReplyAdapter a;
    a.body = [&](const json& b, const GenOutcome& o) { return chat_to_anthropic(b, stop_text(o)); };
    a.error = [](const ApiError& e) { return anthropic_error_json(e); };
    a.stream = [stream](int64_t n_prompt, const std::string& model) {
        auto tr = std::make_shared<AnthropicStream>(model, n_prompt);
        *stream = tr;
        return [tr](const json* c) { return c ? tr->on_chunk(*c) : tr->on_done(); };
    };
    a.before_end = [&, stream](const GenOutcome& o) {
        if (*stream && !stop_text(o).empty()) (*stream)->set_stop_sequence(stop_text(o));
    };
    generate(Api::Chat, req, res, log_extra, &a, &chat);
}

void Server::Impl::anthropic_count_tokens(const http::Request& req, http::Response& res) {
    auto refuse = [&](const ApiError& e) { send_json(res, e.status, anthropic_error_json(e)); };
    const json body = json::parse(req.body, nullptr, false);
    if (!body.is_object()) return refuse(bad_request("the request body must be a JSON object"));
    json chat;
    if (auto e = anthropic_count_tokens_to_chat(body, &chat)) return refuse(*e);
    ApiError err;
    const auto n = count_chat_tokens(chat, &err);
    if (!n) return refuse(err);
    send_json(res, 200, anthropic_count_tokens_response(*n));
}

}  // namespace edgellm::server
