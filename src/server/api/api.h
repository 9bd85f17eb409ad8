// The JSON side of the server: requests of the OpenAI API and of llama.cpp's native API,
// validated into one typed request, and the response bodies and SSE chunks each API sends
// back. No sockets and no model here, so every mapping is unit-testable.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "edgellm/chat.h"
#include "edgellm/grammar.h"
#include "edgellm/session.h"
#include "server/http/errors.h"
#include "text/chat/tool_calls.h"

namespace edgellm::server {

// The shape of a generation's answer: the three generation dialects the engine answers in.
// The other two dialects served, Anthropic's messages (api/anthropic/) and OpenAI's
// Responses (api/responses/), are translated into a Chat request and their answers and
// streams out of the Chat ones; embeddings and rerank are no generation (api/embeddings/).
enum class Api {
    Chat,        // POST /v1/chat/completions (also /chat/completions)
    Completions, // POST /v1/completions
    Native,      // POST /completion (llama.cpp)
};

// What a client asked for, validated. Defaults come from the server's flags.
struct GenRequest {
    Api api = Api::Chat;
    std::string model;  // as sent (echoed back); empty: the server's alias
    // Chat: the messages, tools and template variables.
    std::vector<ChatMessage> messages;
    std::string tools_json;             // JSON array, or empty
    std::vector<std::string> tool_names;  // the tools the reply may call (none: plain text)
    std::string template_kwargs_json;   // JSON object, or empty
    // Thinking: reasoning_effort as given (empty: none given; "none" and "minimal" turn
    // thinking off, the others on), and reasoning_budget_tokens / thinking_budget_tokens,
    // the tokens a thinking block may take (-1: the server's --reasoning-budget).
    std::string reasoning_effort;
    int32_t reasoning_budget = -1;
    // The chat prompt ends where the assistant's reply begins (add_generation_prompt); or,
    // continuing the last message (continue_final_message, or an assistant message last
    // when prefill_assistant), it ends with that message's text, taken out of messages.
    bool add_generation_prompt = true;
    bool continue_final = false;
    std::string continue_text;
    bool prefill_assistant = true;  // set by the server before parsing (--no-prefill-assistant)
    bool timings_per_token = false;  // every streamed chunk carries the timings so far
    bool return_progress = false;    // streamed prompt_progress events while prefilling
    bool verbose = false;  // "verbose": the answer carries __verbose (the prompt, the output)
    // Completions: the prompt as text, or as token ids (native API).
    std::string prompt;
    std::vector<int32_t> prompt_tokens;
    bool prompt_is_tokens = false;
    // Ids and text in one prompt ([1, 2, "text", 3]): the pieces in order, tokenized by the
    // server (the first text piece with the model's BOS).
    std::vector<std::pair<std::string, std::vector<int32_t>>> prompt_mixed;
    GenerateParams gen;
    bool stream = false;
    bool include_usage = false;  // stream_options.include_usage
    bool cache_prompt = true;    // reuse the slot's cached prefix (native API's cache_prompt;
                                 // the server's default set before parsing: --no-cache-prompt)
    int id_slot = -1;            // native API: ask for this slot; -1: the best one
    // "lora": [{"id", "scale"}]: the LoRA adapters (by their place in --lora) for this request,
    // those not listed at scale 0; unset: the server's scales (POST /lora-adapters).
    std::optional<std::vector<std::pair<int, float>>> lora;
    bool return_tokens = false;  // native API: ids of the generated tokens in the answer

    // Constrained output: a grammar from `grammar`, `json_schema` or `response_format`
    // (compiled here; null: none). The tool-call grammar is built by the server, which knows
    // the model's call format, from `tools` and the choice below.
    std::shared_ptr<const Grammar> grammar;
    std::string grammar_source;  // which field gave it ("grammar", "response_format", ...)
    // The schema behind it when it came from json_schema or response_format (json_object:
    // {"type": "object"}): with tools, the reply is then tool calls or an answer valid
    // against it, one grammar for both (the server's, which knows the call format).
    std::optional<nlohmann::ordered_json> answer_schema;
    nlohmann::ordered_json tools = nlohmann::ordered_json::array();  // declared tools
    // "auto", "none", "required", or the name of the one function to call.
    std::string tool_choice = "auto";
    bool tool_choice_named = false;
    bool parallel_tool_calls = true;
    // edgellm's extension: false skips every grammar (for measuring what they add); tool
    // calls are still parsed from the text.
    bool constrain = true;
    // logit_bias: by token id (checked against the vocabulary by the server) and by text
    // (tokenized by the server; every token of the text gets the bias).
    std::vector<std::pair<int64_t, float>> bias_ids;
    std::vector<std::pair<std::string, float>> bias_texts;
    // Probabilities: OpenAI's logprobs / top_logprobs, llama.cpp's n_probs.
    bool logprobs = false;
    int top_logprobs = 0;
    int n_choices = 1;  // OpenAI's n
    // llama-server's speculative.n_max / n_min / p_min (-1: the server's).
    int spec_n_max = -1, spec_n_min = -1;
    float spec_p_min = -1.0f;
};

// A "lora" list ([{"id": N, "scale": X}, ...], as a request and POST /lora-adapters give it).
std::optional<ApiError> parse_lora_list(const json& j, std::vector<std::pair<int, float>>* out);

// The levels of reasoning_effort (OpenAI's, and DeepSeek V4's max): none and minimal turn
// thinking off, the others on (and reach the template as reasoning_effort).
inline constexpr const char* kReasoningEfforts = "none, minimal, low, medium, high, xhigh, max";
bool reasoning_effort_known(const json& effort);

// /props build_info, in llama-server's shape ("b<build>-<source>").
std::string build_info();

// Parse and validate a request body for `api`. `defaults` carries the server's sampling
// flags and -n. Errors: malformed JSON, wrong types, unknown roles, values out of range.
std::optional<ApiError> parse_gen_request(Api api, const std::string& body,
                                          const GenerateParams& defaults, GenRequest* out);
// The same for a body already parsed (the other dialects translate theirs into a chat body).
std::optional<ApiError> parse_gen_json(Api api, const json& body, const GenerateParams& defaults,
                                       GenRequest* out);

// Everything a finished (or cancelled) generation reports.
struct GenOutcome {
    int index = 0;        // the choice (OpenAI's n)
    json logprobs = nullptr;  // the choice's logprobs (logprobs_json), null when not asked
    std::string id;       // "chatcmpl-..." / "cmpl-..."
    std::string model;    // name to report
    int64_t created = 0;  // unix seconds
    int slot = 0;
    GenerateResult result;
    std::string prompt_text;  // the rendered prompt (native API echoes it)
    int64_t n_ctx = 0;
    json logit_bias = json::array();  // generation_settings.logit_bias (native API)
    // Chat with tools: the reply's tool calls (then finish_reason "tool_calls"), with their
    // ids ("call_...").
    std::optional<ParsedReply> parsed;
    std::vector<std::string> call_ids;  // (also of calls streamed as they were written)
    // Chat: the answer, and the reasoning a thinking model wrote before it (<think>).
    std::string content;
    std::string reasoning;
    // What a context policy did to fit the conversation (a shift while generating, older
    // turns summarized); null when nothing was needed.
    json context = nullptr;
    // --fallback-reply took over (no first token within --timeout-first-token): why.
    json fallback = nullptr;
};
// The "context" field for a shift, from the result (null when there was none).
json context_shift_json(const GenerateResult& r);

// finish_reason of the OpenAI APIs: "stop", "length" (or null while streaming).
const char* finish_reason(StopReason r);
json timings_json(const GenerateResult& r);
// The sampling settings as llama.cpp reports them (generation_settings, /props, /slots).
json sampling_json(const GenerateParams& g);
json usage_json(const GenerateResult& r);

// Whole responses.
json chat_response(const GenOutcome& o);
json completions_response(const GenOutcome& o);
json native_response(const GenOutcome& o, const GenRequest& req);

// Streaming: one SSE event ("data: {...}\n\n").
std::string sse(const json& j);
// SSE bytes back into events, as they arrive in any pieces: each complete event's data (its
// data lines joined with newlines, as the SSE rule says); events without data are skipped.
// The other dialects read the chat stream's events with it.
class SseReader {
  public:
    std::vector<std::string> feed(std::string_view bytes);

  private:
    std::string pending_;  // an event not yet ended by a blank line
};
// The chat stream's SSE bytes replayed into another dialect's translator (its on_chunk and
// on_done): what it sends for them.
template <class Translator>
std::string replay_chat_sse(SseReader& reader, std::string_view bytes, Translator& t) {
    std::string out;
    for (const std::string& data : reader.feed(bytes)) {
        if (data == "[DONE]") {
            out += t.on_done();
            continue;
        }
        const json chunk = json::parse(data, nullptr, false);
        if (!chunk.is_discarded()) out += t.on_chunk(chunk);
    }
    return out;
}
// The chunks of each API: the first (chat: the assistant role), each piece of text, the
// last (finish_reason, timings), and the usage-only chunk (chat / completions with
// stream_options.include_usage).
json chat_chunk_role(const GenOutcome& o);
json chat_chunk_text(const GenOutcome& o, const std::string& text, const json& logprobs = nullptr);
json chat_chunk_reasoning(const GenOutcome& o, const std::string& text);
json chat_chunk_final(const GenOutcome& o);
// A call streamed as it is written: its start (index, id, name, empty arguments), then
// fragments of its arguments.
json chat_chunk_call_start(const GenOutcome& o, int index, const std::string& id,
                           const std::string& name);
json chat_chunk_call_arguments(const GenOutcome& o, int index, const std::string& fragment);
// The calls of o.parsed as one delta (index, id, type, function name and arguments).
json chat_chunk_tool_calls(const GenOutcome& o);
json completions_chunk_text(const GenOutcome& o, const std::string& text,
                            const json& logprobs = nullptr);
json completions_chunk_final(const GenOutcome& o);
json usage_chunk(const GenOutcome& o, bool chat);
json native_chunk_text(const GenOutcome& o, const std::string& text, const json& probs = nullptr);

// Token probabilities probs[from, to) in each API's shape: chat {"content": [{token, logprob,
// bytes, top_logprobs}]}, completions {tokens, token_logprobs, top_logprobs, text_offset}
// (offsets from text_offset), native llama.cpp's completion_probabilities array.
json logprobs_json(Api api, const std::vector<TokenProbs>& probs, size_t from, size_t to,
                   const Tokenizer& tok, size_t text_offset = 0, bool post_sampling = false);

// A random id with the API's prefix ("chatcmpl-" + 32 alphanumerics).
std::string make_id(const char* prefix);

}  // namespace edgellm::server
