// OpenAI's Responses API (POST /v1/responses) served on the chat-completions path: the
// request becomes a chat body for parse_gen_request, the chat answer becomes a Response
// object, and the chat stream's chunks become the Responses stream's typed events. JSON in,
// JSON out: no model and no sockets, so every mapping is unit-testable.
//
//   Responses request                        chat body
//   instructions                             a system message first (merged with a leading
//                                            system / developer message of the input)
//   input "text"                             one user message
//   input [{role, content}]                  messages; input_text / output_text / refusal
//                                            parts as text parts
//   input [{type: reasoning}]                reasoning_content of the assistant message
//                                            that follows it
//   input [{type: function_call}, ...]       tool_calls of one assistant message (after its
//                                            text, when a message item comes first)
//   input [{type: function_call_output}]     a tool message (tool_call_id; name when the
//                                            call is in the input)
//   tools [{type: function, name, ...}]      tools [{type: function, function: {...}}]
//   tool_choice {type: function, name}       tool_choice {type: function, function: {name}}
//   tool_choice {type: allowed_tools, ...}   the tools cut to those listed; its mode
//   max_output_tokens                        max_tokens
//   text.format                              response_format
//   reasoning.effort                         reasoning_effort (none, minimal: no thinking)
//   include message.output_text.logprobs     logprobs (top_logprobs with it)
//   stream                                   stream, stream_options.include_usage
// Every other field passes through unchanged (temperature, top_p, and llama.cpp's extras:
// top_k, seed, timings_per_token, return_progress, ...), so parse_gen_request validates
// them and its errors name them as the client sent them.
//
// Stream events, in order, for a reply that reasons, answers and calls a tool:
//   response.created, response.in_progress          (response.in_progress again per
//                                                     prompt_progress chunk)
//   output_item.added (reasoning) content_part.added reasoning_text.delta...
//     reasoning_text.done content_part.done output_item.done
//   output_item.added (message) content_part.added output_text.delta...
//     output_text.done content_part.done output_item.done
//   output_item.added (function_call) function_call_arguments.delta...
//     function_call_arguments.done output_item.done
//   response.completed | response.incomplete (max_output_tokens) | error + response.failed
// every one "event: TYPE\ndata: {...}\n\n" with a sequence_number from 0; no [DONE].
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/api/api.h"

namespace edgellm::server {

// The chat-completions body for a Responses request, or a 400 naming the field that cannot
// be honoured: state kept between requests (previous_response_id, conversation, stored
// prompts, item references), background runs, non-text inputs (input_image, input_file,
// input_audio) and built-in tools (web_search, file_search, computer use, ...: only
// function tools run here).
std::optional<ApiError> responses_to_chat(const json& body, json* chat);

// Our non-streamed chat answer (chat_response) as a Response object. request: the
// Responses request, whose settings the Response echoes (instructions, tools, tool_choice,
// temperature, ...; defaults when empty). finish_reason "length" makes it "incomplete"
// (incomplete_details.reason "max_output_tokens"). There is no output_text field: that is
// a property the SDKs compute from the output items.
json chat_to_responses(const json& chat_response, const json& request = json::object());

// The chat stream (the chunks of ChatStream, each decoded from its "data: " line) turned
// into the Responses stream's events.
class ResponsesStream {
  public:
    // model: the name to report (empty: the chunks' model); request: as chat_to_responses.
    explicit ResponsesStream(std::string model, json request = json::object());

    // One chat chunk: the role chunk, a reasoning_content / content / tool_calls delta, the
    // final chunk (finish_reason), the usage chunk (choices [], usage), a prompt_progress
    // chunk, or an {"error": {...}} object. Returns the SSE bytes of the events it makes
    // (possibly none). A chunk's "timings" (timings_per_token) ride on its last event.
    std::string on_chunk(const json& chunk);
    // The chat stream's "data: [DONE]": closes what is open and sends response.completed
    // (or response.incomplete), with the usage and, at the event's top level, the timings.
    std::string on_done();
    // The chat stream's SSE bytes as its writer sinks them ("data: {...}\n\n" events, a
    // partial event kept until its end arrives), each event through on_chunk or on_done:
    // what a StreamWriter's sink can return to the client instead.
    std::string on_sse(std::string_view bytes);
    // A terminal event (completed, incomplete, failed) has been sent; later calls send
    // nothing.
    bool finished() const { return finished_; }

  private:
    enum class Open { None, Reasoning, Message, Call };

    void start(const json& chunk);
    void open_item(Open kind, const std::string& call_id = {}, const std::string& name = {});
    void close_item(bool cut);
    void text_delta(Open kind, const std::string& text, const json& logprobs);
    void call_delta(const json& call);
    json response_object(const char* status) const;
    void emit(const char* type, json fields);
    std::string flush(const json& timings, const json& prompt_progress);

    std::string model_;
    json request_;
    int64_t seq_ = 0;
    bool started_ = false, finished_ = false;
    std::string id_;
    int64_t created_at_ = 0;
    json output_ = json::array();  // the items closed so far
    std::vector<json> pending_;    // events of the current call, not yet written
    // The item being written: its kind, id, text (or arguments) and logprobs so far.
    Open open_ = Open::None;
    std::string open_id_, open_text_, call_id_, call_name_;
    int64_t call_index_ = -1;  // the chat stream's index of the open call
    json open_logprobs_ = json::array();
    std::string finish_reason_;
    json usage_ = nullptr, timings_ = nullptr, context_ = nullptr, fallback_ = nullptr;
    SseReader sse_reader_;  // on_sse
};

// (shared by the request and the answer translators, nobody else)
namespace responses_detail {

// A field that is present and not null, else nullptr.
inline const json* given(const json& obj, const char* name) {
    if (!obj.is_object()) return nullptr;
    auto it = obj.find(name);
    if (it == obj.end() || it->is_null()) return nullptr;
    return &*it;
}

inline bool is_string_field(const json& obj, const char* name) {
    const json* v = given(obj, name);
    return v && v->is_string();
}

}  // namespace responses_detail

}  // namespace edgellm::server
