// The Responses API's answers: a chat answer as a Response object, and the chat stream as
// the Responses stream's typed events.
#include "server/api/responses/responses.h"

#include <cmath>
#include <ctime>
#include <map>
#include <set>

namespace edgellm::server {

using namespace responses_detail;

namespace {

// ---- the Response object ----------------------------------------------------------------

std::string response_id(const json& chat_id) {
    if (chat_id.is_string()) {
        const std::string id = chat_id.get<std::string>();
        // (the chat id's random part, so a log line of either names the same request)
        if (id.rfind("chatcmpl-", 0) == 0 && id.size() > 9) return "resp_" + id.substr(9);
    }
    return make_id("resp_");
}

json echo(const json& request, const char* key, json otherwise) {
    const json* v = given(request, key);
    return v ? *v : otherwise;
}

json responses_usage(const json& u) {
    if (!u.is_object()) return nullptr;
    const int64_t in = u.value("prompt_tokens", (int64_t)0),
                  out = u.value("completion_tokens", (int64_t)0);
    int64_t cached = 0, reasoning = 0;
    if (const json* d = given(u, "prompt_tokens_details"))
        cached = d->value("cached_tokens", (int64_t)0);
    if (const json* d = given(u, "completion_tokens_details"))
        reasoning = d->value("reasoning_tokens", (int64_t)0);
    // (the reasoning tokens are also counted in output_tokens)
    return json{{"input_tokens", in},
                {"input_tokens_details", {{"cached_tokens", cached}}},
                {"output_tokens", out},
                {"output_tokens_details", {{"reasoning_tokens", reasoning}}},
                {"total_tokens", u.value("total_tokens", in + out)}};
}

// A Response with the request's settings echoed; output [] and usage null, for the caller
// to fill.
json response_base(const json& request, const std::string& id, int64_t created_at,
                   const std::string& model, const std::string& status) {
    json reasoning = {{"effort", nullptr}, {"summary", nullptr}};
    if (const json* r = given(request, "reasoning"); r && r->is_object()) {
        reasoning["effort"] = echo(*r, "effort", nullptr);
        reasoning["summary"] = echo(*r, "summary", nullptr);
    }
    json text = {{"format", {{"type", "text"}}}};
    if (const json* t = given(request, "text"); t && t->is_object())
        for (const auto& [k, v] : t->items()) text[k] = v;
    json r = {{"id", id},
              {"object", "response"},
              {"created_at", created_at},
              {"status", status},
              {"background", false},
              {"error", nullptr},
              {"incomplete_details", nullptr},
              {"instructions", echo(request, "instructions", nullptr)},
              {"max_output_tokens", echo(request, "max_output_tokens", nullptr)},
              {"model", model},
              {"output", json::array()},
              {"parallel_tool_calls", echo(request, "parallel_tool_calls", true)},
              {"previous_response_id", nullptr},
              {"reasoning", std::move(reasoning)},
              // Nothing is kept, whatever the request's store said.
              {"store", false},
              {"temperature", echo(request, "temperature", nullptr)},
              {"text", std::move(text)},
              {"tool_choice", echo(request, "tool_choice", "auto")},
              {"tools", echo(request, "tools", json::array())},
              {"top_p", echo(request, "top_p", nullptr)},
              {"truncation", echo(request, "truncation", "disabled")},
              {"usage", nullptr},
              {"metadata", echo(request, "metadata", json::object())}};
    if (status == "incomplete") r["incomplete_details"] = {{"reason", "max_output_tokens"}};
    return r;
}

json reasoning_item(const std::string& id, const std::string& text, const char* status) {
    json content = json::array();
    if (!text.empty()) content.push_back({{"type", "reasoning_text"}, {"text", text}});
    return json{{"id", id},
                {"type", "reasoning"},
                {"summary", json::array()},
                {"content", std::move(content)},
                {"status", status}};
}

json output_text_part(const std::string& text, json logprobs) {
    return json{{"type", "output_text"},
                {"annotations", json::array()},
                {"logprobs", std::move(logprobs)},
                {"text", text}};
}

json message_item(const std::string& id, const std::string& text, json logprobs,
                  const char* status) {
    return json{{"id", id},
                {"type", "message"},
                {"status", status},
                {"role", "assistant"},
                {"content", json::array({output_text_part(text, std::move(logprobs))})}};
}

json call_item(const std::string& id, const std::string& call_id, const std::string& name,
               const std::string& arguments, const char* status) {
    return json{{"id", id},           {"type", "function_call"},
                {"status", status},   {"arguments", arguments},
                {"call_id", call_id}, {"name", name}};
}

// The chat logprobs ({"content": [{token, logprob, bytes, top_logprobs}]}) as Responses'
// (the same entries).
json logprobs_of(const json& chat_logprobs) {
    if (const json* c = given(chat_logprobs, "content"); c && c->is_array()) return *c;
    return json::array();
}

std::string sse_event(const json& e) {
    return "event: " + e["type"].get<std::string>() +
           "\ndata: " + e.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

}  // namespace

json chat_to_responses(const json& chat, const json& request) {
    static const json kNone = json::object();
    const json* choices = given(chat, "choices");
    const json& choice =
        choices && choices->is_array() && !choices->empty() ? (*choices)[0] : kNone;
    const json* message = given(choice, "message");
    const json& msg = message ? *message : kNone;
    const bool cut = choice.value("finish_reason", json()) == "length";

    json output = json::array();
    if (is_string_field(msg, "reasoning_content") &&
        !msg["reasoning_content"].get<std::string>().empty())
        output.push_back(reasoning_item(make_id("rs_"), msg["reasoning_content"], "completed"));
    if (is_string_field(msg, "content") && !msg["content"].get<std::string>().empty())
        output.push_back(message_item(make_id("msg_"), msg["content"],
                                      logprobs_of(choice.value("logprobs", json())), "completed"));
    if (const json* calls = given(msg, "tool_calls"); calls && calls->is_array())
        for (const json& c : *calls) {
            const json fn = c.value("function", json::object());
            const json args = fn.value("arguments", json(""));
            output.push_back(
                call_item(make_id("fc_"), c.value("id", make_id("call_")), fn.value("name", ""),
                          args.is_string() ? args.get<std::string>() : args.dump(), "completed"));
        }
    // Cut by max_output_tokens: the last item is unfinished, unless it is a call (a cut
    // reply keeps only its complete calls).
    if (cut && !output.empty() && output.back()["type"] != "function_call")
        output.back()["status"] = "incomplete";

    const std::string model = chat.value("model", "");
    json r = response_base(request, response_id(chat.value("id", json())),
                           chat.value("created", (int64_t)std::time(nullptr)), model,
                           cut ? "incomplete" : "completed");
    r["output"] = std::move(output);
    r["usage"] = responses_usage(chat.value("usage", json()));
    // edgellm's and llama.cpp's extras, as the chat answer has them
    for (const char* k : {"timings", "context", "fallback"})
        if (const json* v = given(chat, k)) r[k] = *v;
    return r;
}

// ---- the stream -------------------------------------------------------------------------

ResponsesStream::ResponsesStream(std::string model, json request)
    : model_(std::move(model)), request_(std::move(request)) {}

void ResponsesStream::emit(const char* type, json fields) {
    json e = {{"type", type}};
    for (auto& [k, v] : fields.items()) e[k] = std::move(v);
    e["sequence_number"] = seq_++;
    pending_.push_back(std::move(e));
}

std::string ResponsesStream::flush(const json& timings, const json& prompt_progress) {
    if (!pending_.empty()) {
        if (!prompt_progress.is_null()) pending_.back()["prompt_progress"] = prompt_progress;
        if (!timings.is_null()) pending_.back()["timings"] = timings;
    }
    std::string out;
    for (const json& e : pending_) out += sse_event(e);
    pending_.clear();
    return out;
}

json ResponsesStream::response_object(const char* status) const {
    json r = response_base(request_, id_, created_at_, model_, status);
    r["output"] = output_;
    const bool terminal = std::string(status) != "in_progress";
    if (terminal) {
        r["usage"] = responses_usage(usage_);
        if (!context_.is_null()) r["context"] = context_;
        if (!fallback_.is_null()) r["fallback"] = fallback_;
    }
    return r;
}

void ResponsesStream::start(const json& chunk) {
    started_ = true;
    id_ = response_id(chunk.value("id", json()));
    created_at_ = chunk.value("created", (int64_t)std::time(nullptr));
    if (model_.empty()) model_ = chunk.value("model", "");
    emit("response.created", {{"response", response_object("in_progress")}});
    emit("response.in_progress", {{"response", response_object("in_progress")}});
}

void ResponsesStream::open_item(Open kind, const std::string& call_id, const std::string& name) {
    close_item(false);
    open_ = kind;
    open_text_.clear();
    open_logprobs_ = json::array();
    const size_t index = output_.size();
    if (kind == Open::Reasoning) {
        open_id_ = make_id("rs_");
        json item = reasoning_item(open_id_, "", "in_progress");
        emit("response.output_item.added", {{"output_index", index}, {"item", std::move(item)}});
        emit("response.content_part.added", {{"item_id", open_id_},
                                             {"output_index", index},
                                             {"content_index", 0},
                                             {"part", {{"type", "reasoning_text"}, {"text", ""}}}});
    } else if (kind == Open::Message) {
        open_id_ = make_id("msg_");
        json item = message_item(open_id_, "", json::array(), "in_progress");
        item["content"] = json::array();
        emit("response.output_item.added", {{"output_index", index}, {"item", std::move(item)}});
        emit("response.content_part.added", {{"item_id", open_id_},
                                             {"output_index", index},
                                             {"content_index", 0},
                                             {"part", output_text_part("", json::array())}});
    } else if (kind == Open::Call) {
        open_id_ = make_id("fc_");
        call_id_ = call_id;
        call_name_ = name;
        emit("response.output_item.added",
             {{"output_index", index},
              {"item", call_item(open_id_, call_id_, call_name_, "", "in_progress")}});
    }
}

void ResponsesStream::close_item(bool cut) {
    if (open_ == Open::None) return;
    const size_t index = output_.size();
    json item;
    if (open_ == Open::Reasoning) {
        const char* status = cut ? "incomplete" : "completed";
        emit("response.reasoning_text.done", {{"item_id", open_id_},
                                              {"output_index", index},
                                              {"content_index", 0},
                                              {"text", open_text_}});
        emit("response.content_part.done",
             {{"item_id", open_id_},
              {"output_index", index},
              {"content_index", 0},
              {"part", {{"type", "reasoning_text"}, {"text", open_text_}}}});
        item = reasoning_item(open_id_, open_text_, status);
    } else if (open_ == Open::Message) {
        const char* status = cut ? "incomplete" : "completed";
        emit("response.output_text.done", {{"item_id", open_id_},
                                           {"output_index", index},
                                           {"content_index", 0},
                                           {"text", open_text_},
                                           {"logprobs", open_logprobs_}});
        emit("response.content_part.done",
             {{"item_id", open_id_},
              {"output_index", index},
              {"content_index", 0},
              {"part", output_text_part(open_text_, open_logprobs_)}});
        item = message_item(open_id_, open_text_, open_logprobs_, status);
    } else {
        // Streamed as written: a call the limit cut is one whose arguments do not parse.
        const json args = json::parse(open_text_, nullptr, false);
        const char* status = cut && !args.is_object() ? "incomplete" : "completed";
        emit("response.function_call_arguments.done", {{"item_id", open_id_},
                                                       {"output_index", index},
                                                       {"name", call_name_},
                                                       {"arguments", open_text_}});
        item = call_item(open_id_, call_id_, call_name_, open_text_, status);
    }
    emit("response.output_item.done", {{"output_index", index}, {"item", item}});
    output_.push_back(std::move(item));
    open_ = Open::None;
    call_index_ = -1;
}

void ResponsesStream::text_delta(Open kind, const std::string& text, const json& logprobs) {
    if (text.empty()) return;
    if (open_ != kind) open_item(kind);
    open_text_ += text;
    const size_t index = output_.size();
    if (kind == Open::Reasoning) {
        emit("response.reasoning_text.delta", {{"item_id", open_id_},
                                               {"output_index", index},
                                               {"content_index", 0},
                                               {"delta", text}});
        return;
    }
    json lp = logprobs_of(logprobs);
    for (const json& t : lp) open_logprobs_.push_back(t);
    emit("response.output_text.delta", {{"item_id", open_id_},
                                        {"output_index", index},
                                        {"content_index", 0},
                                        {"delta", text},
                                        {"logprobs", std::move(lp)}});
}

void ResponsesStream::call_delta(const json& call) {
    if (!call.is_object()) return;
    const int64_t index = call.contains("index") && call["index"].is_number_integer()
                              ? call["index"].get<int64_t>()
                              : call_index_;
    const json fn = call.value("function", json::object());
    // A call starts with its id and name (chat_chunk_call_start, chat_chunk_tool_calls);
    // fragments of its arguments follow with only its index.
    if (open_ != Open::Call || is_string_field(call, "id") || index != call_index_) {
        open_item(Open::Call, call.value("id", make_id("call_")), fn.value("name", ""));
        call_index_ = index;
    }
    const json args = fn.value("arguments", json(""));
    const std::string fragment = args.is_string() ? args.get<std::string>() : args.dump();
    if (fragment.empty()) return;
    open_text_ += fragment;
    emit("response.function_call_arguments.delta",
         {{"item_id", open_id_}, {"output_index", output_.size()}, {"delta", fragment}});
}

std::string ResponsesStream::on_chunk(const json& chunk) {
    if (finished_ || !chunk.is_object()) return "";
    if (const json* err = given(chunk, "error")) {
        if (!started_) start(json::object());
        const std::string message = err->is_object()   ? err->value("message", "error")
                                    : err->is_string() ? err->get<std::string>()
                                                       : err->dump();
        const int64_t status = err->is_object() && (*err)["code"].is_number_integer()
                                   ? (*err)["code"].get<int64_t>()
                                   : 500;
        emit("error", {{"code", err->is_object() ? echo(*err, "type", nullptr) : json(nullptr)},
                       {"message", message},
                       {"param", err->is_object() ? echo(*err, "param", nullptr) : json(nullptr)}});
        // What was being written goes into the failed response as it stood, unfinished.
        if (open_ == Open::Reasoning)
            output_.push_back(reasoning_item(open_id_, open_text_, "incomplete"));
        if (open_ == Open::Message)
            output_.push_back(message_item(open_id_, open_text_, open_logprobs_, "incomplete"));
        if (open_ == Open::Call)
            output_.push_back(call_item(open_id_, call_id_, call_name_, open_text_, "incomplete"));
        open_ = Open::None;
        json r = response_object("failed");
        r["error"] = {{"code", status >= 400 && status < 500 ? "invalid_prompt" : "server_error"},
                      {"message", message}};
        emit("response.failed", {{"response", std::move(r)}});
        finished_ = true;
        return flush(nullptr, nullptr);
    }
    if (!started_) start(chunk);
    const json timings = chunk.value("timings", json());
    if (const json* progress = given(chunk, "prompt_progress")) {
        emit("response.in_progress", {{"response", response_object("in_progress")}});
        return flush(timings, *progress);
    }
    bool ended = false;
    if (const json* u = given(chunk, "usage")) {
        usage_ = *u;
        if (!timings.is_null()) timings_ = timings;
        ended = true;
    }
    if (const json* choices = given(chunk, "choices"); choices && choices->is_array())
        for (const json& c : *choices) {
            if (c.value("index", 0) != 0) continue;  // (one output: n is refused)
            if (const json* delta = given(c, "delta")) {
                if (is_string_field(*delta, "reasoning_content"))
                    text_delta(Open::Reasoning, (*delta)["reasoning_content"], nullptr);
                if (is_string_field(*delta, "content"))
                    text_delta(Open::Message, (*delta)["content"], c.value("logprobs", json()));
                if (const json* calls = given(*delta, "tool_calls"); calls && calls->is_array())
                    for (const json& call : *calls) call_delta(call);
            }
            if (const json* finish = given(c, "finish_reason"); finish && finish->is_string()) {
                finish_reason_ = finish->get<std::string>();
                close_item(finish_reason_ == "length");
                if (!timings.is_null()) timings_ = timings;
                context_ = chunk.value("context", json());
                fallback_ = chunk.value("fallback", json());
                ended = true;
            }
        }
    // The final chunks' timings go with response.completed; a delta's (timings_per_token)
    // with its last event.
    return flush(ended ? json() : timings, nullptr);
}

std::string ResponsesStream::on_done() {
    if (finished_) return "";
    if (!started_) start(json::object());
    const bool cut = finish_reason_ == "length";
    close_item(cut);
    emit(cut ? "response.incomplete" : "response.completed",
         {{"response", response_object(cut ? "incomplete" : "completed")}});
    finished_ = true;
    return flush(timings_, nullptr);
}

std::string ResponsesStream::on_sse(std::string_view bytes) {
    return replay_chat_sse(sse_reader_, bytes, *this);
}

}  // namespace edgellm::server
