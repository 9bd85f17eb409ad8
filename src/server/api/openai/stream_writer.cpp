#include "server/api/openai/stream_writer.h"

#include "text/chat/tool_calls.h"

namespace edgellm::server {

// ---- the common part ----------------------------------------------------------------

void StreamWriter::begin(GenOutcome&, const std::vector<TokenProbs>* probs, const std::string&) {
    probs_ = probs;
    probs_sent_ = text_sent_ = 0;
}

bool StreamWriter::write(const json& chunk) {
    if (s_.chunks) {
        if (!timings_.is_null() && s_.request && s_.request->timings_per_token && chunk.is_object() &&
            !chunk.contains("timings") && !chunk.contains("error")) {
            json with = chunk;
            with["timings"] = timings_;
            return ok_ = ok_ && s_.chunks(&with);
        }
        return ok_ = ok_ && s_.chunks(&chunk);
    }
    if (!timings_.is_null() && s_.request && s_.request->timings_per_token && chunk.is_object() &&
        !chunk.contains("timings") && !chunk.contains("error")) {
        json with = chunk;
        with["timings"] = timings_;
        return write_raw(sse(with));
    }
    return write_raw(sse(chunk));
}

void StreamWriter::progress(const GenOutcome& o, const json& prompt_progress) {
    json chunk;
    if (s_.request->api == Api::Native) {
        chunk = native_chunk_text(o, "", nullptr);
    } else {
        chunk = usage_chunk(o, s_.request->api == Api::Chat);
        chunk.erase("usage");
        chunk.erase("timings");
    }
    chunk["prompt_progress"] = prompt_progress;
    if (!timings_.is_null()) chunk["timings"] = timings_;
    write(chunk);
}

bool StreamWriter::write_raw(std::string_view bytes) {
    ok_ = ok_ && sink_(bytes);
    return ok_;
}

bool StreamWriter::done() {
    if (s_.chunks) return ok_ = ok_ && s_.chunks(nullptr);
    return write_raw("data: [DONE]\n\n");
}

void StreamWriter::fail(const ApiError& e) {
    write(json::parse(error_body(e)));
}

bool StreamWriter::write_piece(GenOutcome& o, std::string_view text,
                               json (*make)(const GenOutcome&, const std::string&, const json&)) {
    const std::string t(text);
    const json lp = take_logprobs(t);
    return write(make(o, t, lp));
}

void StreamWriter::end_with_usage(const GenOutcome& summary, bool chat) {
    if (s_.request->include_usage) write(usage_chunk(summary, chat));
    done();
}

json StreamWriter::take_logprobs(const std::string& text) {
    if (!probs_ || !s_.request || !s_.request->logprobs) return nullptr;
    size_t upto = probs_->size();
    while (upto > probs_sent_ && s_.tok->is_eog((*probs_)[upto - 1].id)) --upto;
    json lp = logprobs_json(s_.request->api, *probs_, probs_sent_, upto, *s_.tok, text_sent_,
                            s_.request->gen.post_sampling_probs);
    probs_sent_ = upto;
    text_sent_ += text.size();
    return lp;
}

// ---- chat ---------------------------------------------------------------------------

void ChatStream::begin(GenOutcome& o, const std::vector<TokenProbs>* probs,
                       const std::string& prompt_text) {
    StreamWriter::begin(o, probs, prompt_text);
    thinking_.reset();
    if (s_.reasoning) thinking_.emplace(prompt_opens_thinking(prompt_text));
    // With a tool-call grammar the calls are valid as they are written, so they stream as
    // OpenAI streams them; without one (constrain: false) a call is checked first, so what
    // may become one is held back until the reply ends. (The streamer reads tagged blocks,
    // Gemma 4's and Qwen3.5's calls, bare objects and arrays of them; a fenced call is held
    // whole. The request's tools type Qwen3.5's raw values.)
    calls_.reset();
    if (s_.tool_grammar) calls_.emplace(s_.request->tool_names, true, &s_.request->tools);
    events_.clear();
    reply_.clear();
    streamed_ = 0;
    fenced_ = opened_reply_ = false;
    write(chat_chunk_role(o));
}

void ChatStream::send_text(const GenOutcome& o, const std::string& text) {
    const json lp = take_logprobs(text);
    write(chat_chunk_text(o, text, lp));
}

void ChatStream::send_events(GenOutcome& o) {
    for (const ToolStreamEvent& e : events_) {
        if (e.kind == ToolStreamEvent::Kind::Content) {
            send_text(o, e.text);
        } else if (e.kind == ToolStreamEvent::Kind::CallStart) {
            o.call_ids.push_back(make_id("call_"));
            write(chat_chunk_call_start(o, e.index, o.call_ids.back(), e.text));
        } else {
            write(chat_chunk_call_arguments(o, e.index, e.text));
        }
    }
    events_.clear();
}

void ChatStream::content(GenOutcome& o, std::string_view text) {
    reply_.append(text);
    if (calls_ && !opened_reply_) {
        const size_t lead = reply_.find_first_not_of(" \t\r\n");
        if (lead != std::string::npos) {
            opened_reply_ = true;
            fenced_ = reply_[lead] == '`';
            if (fenced_) calls_.reset();
        }
    }
    if (calls_) {
        calls_->push(text, &events_);
        return send_events(o);
    }
    if (fenced_) return;  // parsed when the reply ends
    const size_t safe = s_.request->tool_names.empty() ? reply_.size() : tool_safe_prefix(reply_);
    if (safe <= streamed_) return;
    send_text(o, reply_.substr(streamed_, safe - streamed_));
    streamed_ = safe;
}

void ChatStream::piece(GenOutcome& o, std::string_view text) {
    if (!thinking_) return content(o, text);
    std::string reasoning, answer;
    thinking_->push(text, &reasoning, &answer);
    if (!reasoning.empty()) write(chat_chunk_reasoning(o, reasoning));
    content(o, answer);
}

void ChatStream::end_choice(GenOutcome& o) {
    if (thinking_) {  // what the reasoning splitter still held
        std::string reasoning, answer;
        thinking_->finish(&reasoning, &answer);
        if (!reasoning.empty()) write(chat_chunk_reasoning(o, reasoning));
        reply_.append(answer);
    }
    if (calls_ && !fenced_) {
        calls_->finish(&events_);
        send_events(o);
    } else if (o.parsed) {
        write(chat_chunk_tool_calls(o));
    } else if (streamed_ < reply_.size()) {
        send_text(o, reply_.substr(streamed_));
    }
    write(chat_chunk_final(o));
}

void ChatStream::end(const GenOutcome& summary, const GenOutcome&) { end_with_usage(summary, true); }

// ---- completions --------------------------------------------------------------------

void CompletionsStream::piece(GenOutcome& o, std::string_view text) {
    write_piece(o, text, completions_chunk_text);
}

void CompletionsStream::end_choice(GenOutcome& o) {
    write(completions_chunk_final(o));
}

void CompletionsStream::end(const GenOutcome& summary, const GenOutcome&) {
    end_with_usage(summary, false);
}

// ---- llama.cpp's /completion --------------------------------------------------------

void NativeStream::piece(GenOutcome& o, std::string_view text) { write_piece(o, text, native_chunk_text); }

void NativeStream::end(const GenOutcome&, const GenOutcome& first) {
    json last = native_response(first, *s_.request);
    last["content"] = "";
    last.erase("completion_probabilities");  // (sent with the text)
    write(last);
}

std::unique_ptr<StreamWriter> make_stream_writer(Api api, StreamWriter::Sink sink,
                                                 StreamSettings s) {
    switch (api) {
        case Api::Chat:
            return std::make_unique<ChatStream>(std::move(sink), s);
        case Api::Completions:
            return std::make_unique<CompletionsStream>(std::move(sink), s);
        case Api::Native:
            break;
    }
    return std::make_unique<NativeStream>(std::move(sink), s);
}

}  // namespace edgellm::server
