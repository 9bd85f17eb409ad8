// Anthropic's Messages API (POST /v1/messages, POST /v1/messages/count_tokens) as a
// translation over the OpenAI chat path: a request becomes a chat request body (then
// parse_gen_request as usual), the chat response becomes a message, and the chat stream's
// chunks become Anthropic's events. No sockets and no model here.
//
//   Anthropic request                       OpenAI chat request
//   system (string | text blocks)      ->   {"role": "system"} first
//   user: text blocks                  ->   {"role": "user", content: text parts}
//   user: tool_result blocks           ->   {"role": "tool", tool_call_id}, one each, in
//                                           order, before the user's text (if any)
//   assistant: text / thinking /       ->   content / reasoning_content /
//              tool_use blocks              tool_calls (arguments: input as JSON text)
//   tools {name, description,          ->   {"type": "function", function: {name,
//          input_schema}                    description, parameters}}
//   tool_choice auto|any|tool|none     ->   "auto" | "required" | the named one | "none"
//   stop_sequences, max_tokens,        ->   stop, max_tokens, temperature, top_p, top_k,
//   temperature, top_p, top_k, stream       stream (+ stream_options.include_usage)
//   thinking enabled|adaptive|disabled ->   chat_template_kwargs.enable_thinking
//   thinking.budget_tokens             ->   thinking_budget_tokens
//
// Refused (400, the field named): image and document blocks (this model has no image
// encoder, and we read no PDFs), unknown block types, Anthropic's server-side tools
// (web search, code execution, ...), and top-level fields that would change the answer
// but mean nothing here (mcp_servers, container, ...). Accepted and ignored because they
// change nothing a user sees: metadata, service_tier "auto"/"standard_only",
// cache_control on any block and at the top level (the server caches prompt prefixes by
// itself, and says so in usage.cache_read_input_tokens), citations on
// text blocks, redacted_thinking blocks (Anthropic's encrypted reasoning; no local model
// can read it).
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "server/api/api.h"

namespace edgellm::server {

// POST /v1/messages: body -> *chat, an OpenAI chat request body for parse_gen_request(
// Api::Chat, ...). max_tokens is required (as Anthropic requires it); a streamed request
// gets stream_options.include_usage, which AnthropicStream needs for output_tokens.
// *chat is left alone on error.
std::optional<ApiError> anthropic_to_chat(const json& body, json* chat);
// POST /v1/messages/count_tokens: the same conversion without max_tokens, never streamed
// (the server renders the prompt and counts it).
std::optional<ApiError> anthropic_count_tokens_to_chat(const json& body, json* chat);
// count_tokens' answer: {"input_tokens": n}.
json anthropic_count_tokens_response(int64_t input_tokens);

// Errors in Anthropic's shape: {"type": "error", "error": {"type", "message"}}, the type
// one of Anthropic's (invalid_request_error, authentication_error, not_found_error,
// rate_limit_error, api_error, overloaded_error, ...) taken from ours and the status.
json anthropic_error_json(const ApiError& e);
std::string anthropic_error_body(const ApiError& e);

// A whole chat response (chat_response()) -> an Anthropic message. The chat response says
// "stop" both for the end of the turn and for a stop string; stop_sequence is the string
// that matched (GenerateResult::stop_string when stop == StopString), empty for none.
// usage: input_tokens counts the prompt tokens not read from the cache (Anthropic's
// meaning: input + cache_read + cache_creation = the whole prompt).
json chat_to_anthropic(const json& chat_response, const std::string& stop_sequence = "");

// The chat stream (ChatStream's chunks, in order) -> Anthropic's events:
//
//   message_start                                   (on the first chunk that is no error)
//   ( content_block_start i                         (i = 0, 1, 2, ... one block at a time)
//     content_block_delta i *                       text_delta | thinking_delta |
//                                                   input_json_delta
//     [content_block_delta i signature_delta]       (thinking blocks, signature "")
//     content_block_stop i ) *
//   message_delta {stop_reason, stop_sequence}, usage
//   message_stop                                    (on [DONE])
//
// A block opens when a delta of another kind (or another tool call) arrives, so
// reasoning, text and calls may come in any order and any number; with no block at all
// the message gets one empty text block. An {"error": ...} chunk becomes an "error"
// event and ends the stream (nothing is written after it, as Anthropic does). A fragment
// of a call's arguments that arrives after its block was closed cannot be sent (Anthropic
// blocks do not reopen) and is dropped; ChatStream never writes one.
class AnthropicStream {
  public:
    // model: the name to report (empty: the chunks' "model"); input_tokens: the prompt's
    // tokens as known when the stream starts (message_start's usage). message_delta
    // carries the final count from the usage chunk.
    AnthropicStream(std::string model, int64_t input_tokens);

    // One chat chunk object (role, deltas, the final chunk, the usage chunk, an error):
    // the SSE bytes to send, possibly none.
    std::string on_chunk(const json& chunk);
    // The "[DONE]" marker: the closing events (none after an error).
    std::string on_done();
    // The raw SSE bytes a chat stream writes ("data: {...}\n\n" and "data: [DONE]\n\n",
    // any number of events, split anywhere): each complete event through on_chunk or
    // on_done. Lines other than "data:" are ignored.
    std::string on_sse(std::string_view bytes);
    // The stop string that ended the reply (the chat chunks do not carry it); call before
    // on_done. Empty: none.
    void set_stop_sequence(std::string s) { stop_sequence_ = std::move(s); }
    // A keep-alive event, for a writer that has nothing else to send for a while.
    static std::string ping();
    // message_stop or an error was written: nothing more will be.
    bool ended() const { return ended_; }

  private:
    enum class Block { None, Thinking, Text, ToolUse };
    void start(const json& chunk, std::string* out);
    void open(Block kind, json content_block, std::string* out);
    void close(std::string* out);
    void delta(json d, std::string* out);
    void tool_calls(const json& calls, std::string* out);

    std::string model_;
    int64_t input_tokens_ = 0;
    bool started_ = false, ended_ = false;
    Block open_ = Block::None;
    int64_t open_call_ = -1;     // the chat call index of the open tool_use block
    int64_t index_ = -1;         // the open (or last) block's index; -1: none yet
    std::set<int64_t> calls_;    // chat call indices whose block has been opened
    std::string finish_reason_;  // the final chunk's; empty until it came
    std::string stop_sequence_;
    json usage_;              // the usage chunk's usage; null until it came
    SseReader sse_reader_;  // on_sse
};

}  // namespace edgellm::server
