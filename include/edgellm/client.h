// The client SDK: how an application on the device talks to `edgellm serve` (or any
// llama-server / OpenAI-compatible server) by seed 000's rules for a head unit:
//
//   - one call at a time: a second concurrent call waits for the first, or is refused;
//   - streaming (SSE) with a callback per piece of text;
//   - timeouts: connect 2 s, first token 3 s, whole reply 30 s;
//   - a broken stream resets the server's slot (DELETE /slots/N) and says so;
//   - degradation: a second OpenAI-compatible endpoint, then a canned reply;
//   - the conversation kept under a token budget (~700 tokens): the oldest turns are
//     summarized by the server into one user message, counted with /tokenize;
//   - an intent hook that answers an utterance without the LLM (car control, navigation).
//
// Its own library (edgellm_client): POSIX sockets and the standard library, no part of
// the engine. Plain HTTP/1.1 only (the server runs on the device, on 127.0.0.1); an
// https:// endpoint is refused at construction — put a TLS proxy in front of a cloud one.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace edgellm::client {

// Where a server is: "http://127.0.0.1:8899" (a path after the port is kept as a prefix:
// "http://gw:80/llm" sends /llm/v1/chat/completions). `model` and `api_key` are sent to an
// OpenAI-compatible endpoint that wants them (Authorization: Bearer).
struct Endpoint {
    Endpoint() = default;
    Endpoint(std::string url_, std::string api_key_ = "", std::string model_ = "")
        : url(std::move(url_)), api_key(std::move(api_key_)), model(std::move(model_)) {}

    std::string url;
    std::string api_key;
    std::string model;
};

struct Timeouts {
    int connect_ms = 2000;      // TCP connection established
    int first_token_ms = 3000;  // request sent -> first piece of text (streamed calls)
    int total_ms = 30000;       // request sent -> reply complete
};

// Why a call did not give a reply from the endpoint it was sent to.
enum class Failure {
    none,
    busy,                 // another call was in progress (Concurrency::refuse)
    bad_endpoint,         // the URL cannot be used (https, no host, bad port)
    connect,              // no connection (refused, unreachable, connect timeout)
    first_token_timeout,  // connected, but no text within Timeouts::first_token_ms
    total_timeout,        // the reply did not end within Timeouts::total_ms
    broken_stream,        // the connection closed before the reply ended
    http_status,          // the server answered with an error status (4xx / 5xx)
    server_error,         // a stream ended with an error event
    bad_response,         // not the HTTP / JSON / SSE the API promises
    cancelled,            // Client::cancel() from another thread
};
const char* failure_name(Failure f);

// ---- one HTTP exchange ----------------------------------------------------------------

struct HttpResult {
    int status = 0;  // 0 when no response arrived
    std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
    std::string body;  // the whole body, unless on_body took it
    Failure failure = Failure::none;
    std::string error;  // what went wrong, for a person
    double first_byte_ms = -1;  // request sent -> first body byte
    double total_ms = 0;
};

// Control of an exchange (a streamed one shares it with the body callback): set `progress` once the
// first real piece of output arrived (the first-token deadline then no longer applies);
// raise `stop` (or return false from the callback) to close the connection.
struct StreamControl {
    bool progress = false;
    bool stop = false;
    const std::atomic<bool>* cancel = nullptr;  // polled every 50 ms when set
    // Filled in before the body callback's first call: the response's status and headers
    // (names lower-cased), and whether it is chunked (else it has a length, or ends with the
    // connection).
    int status = 0;
    std::vector<std::pair<std::string, std::string>> headers;
    bool chunked = false;
    // Asked before each connect with an address the host name resolved to, numeric
    // ("10.0.0.5", "::1"; an IPv4-mapped IPv6 address as written), and the port: "" to
    // connect, else why not (the address is skipped; none left: Failure::connect with that
    // reason). It sees the very address then connected to: a second DNS answer cannot slip
    // in between the check and the connect.
    std::function<std::string(const std::string& address, int port)> vet_address;
};

using BodyCallback = std::function<bool(std::string_view bytes, StreamControl& ctl)>;

// One request on a fresh connection. With on_body the body is handed over as it arrives
// (chunked framing removed) and the first-token deadline applies until ctl.progress;
// without it the body is collected into HttpResult::body and only the total deadline
// applies. `headers` are sent as well (one with CR or LF in it is left out). Never throws.
HttpResult http_request(const Endpoint& ep, std::string_view method, std::string_view path,
                        std::string_view body, const Timeouts& t,
                        const BodyCallback& on_body = {}, StreamControl* ctl = nullptr,
                        std::string_view content_type = "application/json",
                        const std::vector<std::pair<std::string, std::string>>& headers = {});

// Server-sent events: feed bytes as they arrive, get each event's data (multi-line data
// joined with '\n'; comments and other fields ignored; CRLF or LF line ends).
class SseParser {
  public:
    // The callback returns false to stop; feed() then returns false too.
    bool feed(std::string_view bytes, const std::function<bool(const std::string& data)>& on_event);

  private:
    std::string line_;
    std::string data_;
    bool has_data_ = false;
};

// ---- the conversation client ----------------------------------------------------------

struct Message {
    std::string role;  // "system", "user", "assistant"
    std::string content;
};

// Where a reply came from.
enum class Source { none, llm, fallback_endpoint, canned_reply, router };
const char* source_name(Source s);

struct Reply {
    bool ok() const { return source != Source::none; }

    std::string text;
    Source source = Source::none;
    std::string finish_reason;  // "stop", "length", ... (from an endpoint)

    // What happened on the primary endpoint (none when it answered; also none for a reply
    // from the router), and on the fallback endpoint when one was tried.
    Failure failure = Failure::none;
    std::string error;
    int http_status = 0;
    Failure fallback_failure = Failure::none;
    std::string fallback_error;
    std::string partial_text;  // what the primary streamed before it failed

    // A broken or timed-out stream on the primary, once the server had started on the
    // request (its response headers came): whether DELETE /slots/N, sent after the reply
    // from the fallback or the canned one, answered 200 (slot_reset), else why not.
    bool slot_reset = false;
    std::string slot_reset_error;

    // From the endpoint that answered (-1 when it did not say).
    int prompt_tokens = -1;
    int cached_tokens = -1;
    int completion_tokens = -1;
    double decode_tokens_per_second = -1;  // the server's timings.predicted_per_second
    int draft_tokens = -1;                 // speculative decoding: drafted / accepted
    int draft_accepted = -1;
    double first_token_ms = -1;  // measured here: request sent -> first piece of text
    double total_ms = 0;         // the whole call, including trimming and fallbacks

    // History trimming before this call.
    int history_tokens = -1;     // the request's tokens as counted (-1: not counted)
    int turns_summarized = 0;    // oldest turns condensed into the summary this time
    int turns_dropped = 0;       // turns dropped because even the summary did not fit
    std::string trim_error;      // counting or summarizing failed (the call still went)
};

struct ClientOptions {
    Endpoint primary{"http://127.0.0.1:8899", "", ""};
    Timeouts timeouts;
    std::optional<Endpoint> fallback;  // a second OpenAI-compatible endpoint
    Timeouts fallback_timeouts{2000, 5000, 30000};
    std::string canned_reply;          // the last resort ("" = none: the call fails)

    enum class Concurrency { wait, refuse };
    Concurrency concurrency = Concurrency::wait;

    // The server slot this client's conversation lives in (sent as id_slot; the one reset
    // after a broken stream). -1: let the server choose (then no reset is possible).
    int slot = 0;

    std::string system_prompt;
    int max_tokens = 128;       // seed 000: 128 for chat, 64 for a navigation rewrite
    double temperature = -1;    // < 0: the server's default
    // Extra fields merged into each chat request body, as a JSON object ("{\"top_p\":0.8}").
    std::string extra_json;

    // History: when system prompt + history + the new utterance exceed this many tokens,
    // the oldest turns (all but the last keep_turns) are summarized through the primary
    // endpoint into one user message. 0: never trim.
    int history_token_budget = 700;
    int keep_turns = 2;
    int summary_max_tokens = 96;

    // Called when the primary had already streamed some text to on_text and another
    // source's reply (the fallback endpoint's or the canned one) is about to follow, so a
    // voice application can stop speaking the partial answer first.
    std::function<void(Source next)> on_restart;

    // Intent split: return a reply to answer without the LLM (nothing is sent, the history
    // is not touched), or nullopt to go on to the LLM.
    std::function<std::optional<std::string>(std::string_view utterance)> router;
};

using TextCallback = std::function<void(std::string_view piece)>;

class Client {
  public:
    explicit Client(ClientOptions opt);
    ~Client();
    Client(const Client&) = delete;
    Client& operator=(const Client&) = delete;

    // One conversational turn: route, trim, stream from the primary (on_text gets each
    // piece), fall back. A reply from an endpoint is appended to the history with the
    // utterance; router, canned and failed turns are not.
    Reply chat(std::string_view utterance, const TextCallback& on_text = {});

    // One stateless chat call with these messages (no history, no trimming, no router),
    // with the same timeouts, slot reset and fallbacks.
    Reply complete(const std::vector<Message>& messages, const TextCallback& on_text = {});

    // Tokens of these messages as the primary's chat template renders them
    // (/apply-template + /tokenize); nullopt with *why when the server cannot say.
    std::optional<int> count_tokens(const std::vector<Message>& messages, std::string* why = nullptr);

    // Stops the call in progress (from another thread): it returns Failure::cancelled.
    void cancel();

    // The conversation kept so far (without the system prompt); the running summary of the
    // turns condensed away ("" when none).
    std::vector<Message> history() const;
    std::string summary() const;
    void reset();  // forget the history and the summary

    const ClientOptions& options() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace edgellm::client
