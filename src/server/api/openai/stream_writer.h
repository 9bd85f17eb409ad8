// One stream writer per API: the bytes of a streamed (SSE) response in the order each API
// sends them, written to a sink that knows nothing else (the HTTP response in the server, a
// string in the tests).
//
//   ChatStream         OpenAI chat: a role chunk per choice, content deltas (a thinking
//                      model's reasoning as reasoning_content; with tools, tool_calls deltas
//                      or text held back until it cannot become a call), the finish chunk,
//                      the usage chunk when asked, [DONE].
//   CompletionsStream  OpenAI completions: text deltas, the finish chunk, usage, [DONE].
//   NativeStream       llama.cpp's /completion: content chunks, then the final object with
//                      stop, timings and settings (no [DONE]).
//
// Per choice: begin(), piece() for each piece of text as the session emits it, end_choice()
// once the finished reply has been parsed (tool calls, finish reason). After the last
// choice: end(). A failed sink write (the client went away) makes ok() false and every
// later write a no-op.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "edgellm/session.h"
#include "edgellm/tokenizer.h"
#include "server/api/api.h"
#include "text/chat/reasoning.h"
#include "text/chat/tool_stream.h"

namespace edgellm::server {

// What a writer needs of the request beyond the outcome it writes.
struct StreamSettings {
    const GenRequest* request = nullptr;
    const Tokenizer* tok = nullptr;
    bool reasoning = false;         // split <think> into reasoning_content (chat)
    bool tool_grammar = false;      // the tool-call grammar constrains the reply (chat)
    // When set, each chunk goes here as JSON instead of out as an SSE event, and the end
    // ([DONE]) as nullptr: another API's events are made from them (Anthropic's messages,
    // OpenAI's responses). False: the client is gone.
    std::function<bool(const json*)> chunks;
};

class StreamWriter {
  public:
    using Sink = std::function<bool(std::string_view)>;
    StreamWriter(Sink sink, StreamSettings s) : sink_(std::move(sink)), s_(s) {}
    virtual ~StreamWriter() = default;

    // A choice starts. probs: the choice's token probabilities as the session appends them
    // (when the request asked for logprobs); prompt_text: the rendered prompt (chat: does
    // it open a thinking block?).
    virtual void begin(GenOutcome& o, const std::vector<TokenProbs>* probs,
                       const std::string& prompt_text);
    // The next piece of the reply, as the session emits it.
    virtual void piece(GenOutcome& o, std::string_view text) = 0;
    // Whether the reply's tool calls went out as they were written (then the server does not
    // parse them from the finished text).
    virtual bool streamed_calls() const { return false; }
    // The choice ended; o is complete (parsed calls, logprobs, the result).
    virtual void end_choice(GenOutcome& o) = 0;
    // The response ends: summary has the usage over every choice, first is choice 0.
    virtual void end(const GenOutcome& summary, const GenOutcome& first) = 0;
    // timings_per_token: the timings so far, added to every chunk written after this.
    void set_timings(json t) { timings_ = std::move(t); }
    // return_progress: a prompt_progress event ({total, cache, processed, time_ms}) with the
    // timings so far, in the API's chunk shape.
    void progress(const GenOutcome& o, const json& prompt_progress);
    // An error after the stream started: an error event.
    void fail(const ApiError& e);
    bool ok() const { return ok_; }
    // The stream could not even start: nothing will be written.
    void lost() { ok_ = false; }

  protected:
    bool write(const json& chunk);
    bool write_raw(std::string_view bytes);
    bool done();  // the [DONE] marker
    // The logprobs of the tokens sampled since the last call (end-of-generation tokens
    // held back), for the text about to be sent; null without logprobs.
    json take_logprobs(const std::string& text);
    // A piece of text as the chunk `make` frames it, with the logprobs of its tokens.
    bool write_piece(GenOutcome& o, std::string_view text,
                     json (*make)(const GenOutcome&, const std::string&, const json&));
    // The stream's end: the usage chunk when stream_options.include_usage asked for it, then
    // [DONE].
    void end_with_usage(const GenOutcome& summary, bool chat);

    Sink sink_;
    StreamSettings s_;
    bool ok_ = true;
    const std::vector<TokenProbs>* probs_ = nullptr;
    size_t probs_sent_ = 0, text_sent_ = 0;
    json timings_;  // null until set_timings
};

class ChatStream final : public StreamWriter {
  public:
    using StreamWriter::StreamWriter;
    void begin(GenOutcome& o, const std::vector<TokenProbs>* probs,
               const std::string& prompt_text) override;
    void piece(GenOutcome& o, std::string_view text) override;
    bool streamed_calls() const override { return calls_.has_value() && !fenced_; }
    void end_choice(GenOutcome& o) override;
    void end(const GenOutcome& summary, const GenOutcome& first) override;

  private:
    void content(GenOutcome& o, std::string_view text);
    void send_text(const GenOutcome& o, const std::string& text);
    void send_events(GenOutcome& o);
    std::optional<ReasoningStream> thinking_;
    std::optional<ToolCallStreamer> calls_;
    std::vector<ToolStreamEvent> events_;
    std::string reply_;  // the answer's content so far
    size_t streamed_ = 0;  // of it, sent
    bool fenced_ = false, opened_reply_ = false;
};

class CompletionsStream final : public StreamWriter {
  public:
    using StreamWriter::StreamWriter;
    void piece(GenOutcome& o, std::string_view text) override;
    void end_choice(GenOutcome& o) override;
    void end(const GenOutcome& summary, const GenOutcome& first) override;
};

class NativeStream final : public StreamWriter {
  public:
    using StreamWriter::StreamWriter;
    void piece(GenOutcome& o, std::string_view text) override;
    void end_choice(GenOutcome&) override {}
    void end(const GenOutcome& summary, const GenOutcome& first) override;
};

std::unique_ptr<StreamWriter> make_stream_writer(Api api, StreamWriter::Sink sink,
                                                 StreamSettings s);

}  // namespace edgellm::server
