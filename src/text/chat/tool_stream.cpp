#include "text/chat/tool_stream.h"

#include "text/chat/call_tags.h"
#include "text/chat/text_scan.h"

#include <algorithm>
#include <cctype>

namespace edgellm {

namespace {

using Kind = ToolStreamEvent::Kind;

using namespace call_tags;

// The longest function name a Gemma 4 call may have before it counts as no call.
constexpr size_t kMaxGemmaName = 256;

bool starts(std::string_view word, std::string_view s) {
    return s.size() <= word.size() && word.substr(0, s.size()) == s;
}

void append_utf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
        *out += (char)cp;
    } else if (cp < 0x800) {
        *out += (char)(0xC0 | (cp >> 6));
        *out += (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        *out += (char)(0xE0 | (cp >> 12));
        *out += (char)(0x80 | ((cp >> 6) & 0x3F));
        *out += (char)(0x80 | (cp & 0x3F));
    } else {
        *out += (char)(0xF0 | (cp >> 18));
        *out += (char)(0x80 | ((cp >> 12) & 0x3F));
        *out += (char)(0x80 | ((cp >> 6) & 0x3F));
        *out += (char)(0x80 | (cp & 0x3F));
    }
}

constexpr uint32_t kReplacement = 0xFFFD;

}  // namespace

// ---- StringDecoder ----------------------------------------------------------------------

ToolCallStreamer::StringDecoder::Step ToolCallStreamer::StringDecoder::feed(char c,
                                                                            std::string* out) {
    if (esc_.empty()) {
        if (c == '\\') {
            esc_ = "\\";
            return Step::More;
        }
        if (high_) {  // a high surrogate not followed by \uDC00-\uDFFF
            append_utf8(kReplacement, out);
            high_ = 0;
        }
        if (c == '"') return Step::Done;
        *out += c;
        return Step::More;
    }
    esc_ += c;
    if (esc_.size() == 2) {
        if (c == 'u') return Step::More;
        if (high_) {
            append_utf8(kReplacement, out);
            high_ = 0;
        }
        esc_.clear();
        switch (c) {
            case '"':
                *out += '"';
                break;
            case '\\':
                *out += '\\';
                break;
            case '/':
                *out += '/';
                break;
            case 'b':
                *out += '\b';
                break;
            case 'f':
                *out += '\f';
                break;
            case 'n':
                *out += '\n';
                break;
            case 'r':
                *out += '\r';
                break;
            case 't':
                *out += '\t';
                break;
            default:
                return Step::Bad;
        }
        return Step::More;
    }
    if (!std::isxdigit((unsigned char)c)) return Step::Bad;
    if (esc_.size() < 6) return Step::More;
    const uint32_t cp = (uint32_t)std::stoul(esc_.substr(2), nullptr, 16);
    esc_.clear();
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        if (high_) append_utf8(kReplacement, out);
        high_ = cp;
    } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
        append_utf8(high_ ? 0x10000 + ((high_ - 0xD800) << 10) + (cp - 0xDC00) : kReplacement, out);
        high_ = 0;
    } else {
        if (high_) append_utf8(kReplacement, out);
        high_ = 0;
        append_utf8(cp, out);
    }
    return Step::More;
}

// ---- ValueScanner -----------------------------------------------------------------------

ToolCallStreamer::ValueScanner::Step ToolCallStreamer::ValueScanner::feed(char c) {
    const auto scalar_char = [](char x) {
        return std::isalnum((unsigned char)x) || x == '.' || x == '+' || x == '-';
    };
    if (!started_) {
        started_ = true;
        if (c == '{' || c == '[') {
            depth_ = 1;
        } else if (c == '"') {
            in_string_ = true;
        } else if (scalar_char(c)) {
            scalar_ = true;
        } else {
            return Step::Bad;
        }
        return Step::More;
    }
    if (in_string_) {
        if (escape_) {
            escape_ = false;
        } else if (c == '\\') {
            escape_ = true;
        } else if (c == '"') {
            in_string_ = false;
            if (depth_ == 0) return Step::End;
        }
        return Step::More;
    }
    if (scalar_) return scalar_char(c) ? Step::More : Step::Before;
    if (c == '"') {
        in_string_ = true;
    } else if (c == '{' || c == '[') {
        ++depth_;
    } else if (c == '}' || c == ']') {
        if (--depth_ == 0) return Step::End;
    }
    return Step::More;
}

// ---- ToolCallStreamer -------------------------------------------------------------------

ToolCallStreamer::ToolCallStreamer(std::vector<std::string> names, bool llama3,
                                   const nlohmann::ordered_json* tools)
    : names_(std::move(names)), llama3_(llama3), bare_start_(llama3),
      types_(tools ? XmlToolTypes(*tools) : XmlToolTypes()) {}

void ToolCallStreamer::push(std::string_view piece, std::vector<ToolStreamEvent>* out) {
    out_ = out;
    out_from_ = out->size();
    for (char c : piece) step(c);
    out_ = nullptr;
}

void ToolCallStreamer::finish(std::vector<ToolStreamEvent>* out) {
    out_ = out;
    out_from_ = out->size();
    if (state_ == State::Text) {
        if (!tag_.empty()) {
            emit(Kind::Content, lead_);
            emit(Kind::Content, tag_);
        } else if (calls_ == 0) {
            emit(Kind::Content, lead_);  // blanks after a call are dropped, else they are text
        }
    } else if (state_ != State::AfterObject && state_ != State::ArrayNext && !started_ &&
               !(in_array_ && trim(raw_).empty())) {
        emit(Kind::Content, lead_);  // a block that never became a call
        emit(Kind::Content, raw_);
    }
    // else: a call cut off (or ended) here; nothing more for it.
    lead_.clear();
    tag_.clear();
    raw_.clear();
    args_held_.clear();
    started_ = in_array_ = false;
    state_ = State::Text;
    bare_start_ = false;
    out_ = nullptr;
}

void ToolCallStreamer::step(char c) {
    // Each state either uses c or moves to one that does; Text always uses it.
    while (!consume(c)) {
    }
}

void ToolCallStreamer::emit(Kind kind, std::string_view text) {
    if (text.empty() && kind != Kind::CallStart) return;
    const int index = kind == Kind::Content ? 0 : calls_ - 1;
    if (kind != Kind::CallStart && out_->size() > out_from_ && out_->back().kind == kind &&
        out_->back().index == index) {
        out_->back().text.append(text);
        return;
    }
    out_->push_back({kind, index, std::string(text)});
}

void ToolCallStreamer::hold(char c) {
    if (!started_) raw_ += c;
}

void ToolCallStreamer::args_out(std::string_view text) {
    if (started_)
        emit(Kind::Arguments, text);
    else
        args_held_.append(text);
}

void ToolCallStreamer::start_object(bool bare) {
    state_ = State::Open;
    bare_ = bare;
    fence_ok_ = !bare;
    in_array_ = false;
    next_object();
}

void ToolCallStreamer::next_object() {
    started_ = named_ = args_seen_ = false;
    args_held_.clear();
}

void ToolCallStreamer::commit() {
    lead_.clear();
    raw_.clear();
    started_ = true;
    ++calls_;
    emit(Kind::CallStart, name_);
    emit(Kind::Arguments, args_held_);
    args_held_.clear();
}

void ToolCallStreamer::not_a_call() {
    emit(Kind::Content, lead_);
    emit(Kind::Content, raw_);
    lead_.clear();
    raw_.clear();
    args_held_.clear();
    state_ = State::Text;
    bare_start_ = in_array_ = false;
}

bool ToolCallStreamer::bad(bool used) {
    if (started_)
        end_object();
    else
        not_a_call();
    return used;
}

void ToolCallStreamer::end_object() {
    if (!started_) {  // the object closed without a declared tool's name
        not_a_call();
        return;
    }
    if (!args_seen_) emit(Kind::Arguments, "{}");
    started_ = false;
    if (in_array_) {
        state_ = State::ArrayNext;
    } else if (bare_) {
        state_ = State::Text;
        bare_start_ = true;  // Llama 3 writes parallel calls as objects one after another
    } else {
        state_ = State::AfterObject;
        tag_.clear();
    }
}

bool ToolCallStreamer::text(char c) {
    if (!tag_.empty() || c == '<') {
        const std::string t = tag_ + c;
        if (t == kOpen || t == kPhiOpen || (bare_start_ && t == kPythonTag)) {
            raw_ = t;
            tag_.clear();
            start_object(t == kPythonTag);
            close_ = t == kOpen ? kClose : kPhiClose;
            return true;
        }
        if (t == kGemmaOpen) {
            raw_ = t;
            tag_.clear();
            start_object(false);
            close_ = kGemmaClose;
            name_.clear();
            state_ = State::GemmaHead;
            return true;
        }
        if (t == kFunction) {  // Qwen3.5's call without its <tool_call>
            raw_.clear();
            tag_.clear();
            start_object(false);
            close_ = {};
            xml_ = XmlCall(&types_);
            state_ = State::Xml;
            for (char x : t) xml(x);
            return true;
        }
        if (starts(kOpen, t) || starts(kPhiOpen, t) || starts(kGemmaOpen, t) || starts(kFunction, t) ||
            (bare_start_ && starts(kPythonTag, t))) {
            tag_ = t;
            return true;
        }
        // Not a tag after all: what was held is text, and c starts afresh (no tag has
        // another '<', so no later start of one can begin inside tag_).
        emit(Kind::Content, lead_);
        emit(Kind::Content, tag_);
        lead_.clear();
        tag_.clear();
        bare_start_ = false;
        return false;
    }
    if (is_blank(c)) {
        lead_ += c;
        return true;
    }
    if (bare_start_ && (c == '{' || c == '[')) {
        raw_.clear();
        start_object(true);
        return false;
    }
    emit(Kind::Content, lead_);
    lead_.clear();
    emit(Kind::Content, std::string_view(&c, 1));
    bare_start_ = false;
    return true;
}

bool ToolCallStreamer::after_object(char c) {
    if (tag_.empty()) {
        if (is_blank(c) || c == '`' || c == '}') return true;  // dropped
        if (c == '<') {
            tag_ = "<";
            return true;
        }
        state_ = State::Text;  // no </tool_call>: what follows is text
        return false;
    }
    const std::string t = tag_ + c;
    if (t == close_) {
        tag_.clear();
        state_ = State::Text;
        return true;
    }
    if (starts(close_, t)) {
        tag_ = t;
        return true;
    }
    // Not the closing tag (perhaps the next block's opening tag without one): the held
    // bytes are read again as text.
    state_ = State::Text;
    const std::string again = std::move(tag_);
    tag_.clear();
    for (char x : again) step(x);
    return false;
}

bool ToolCallStreamer::array_next(char c) {
    if (is_blank(c)) return true;  // (separators are dropped)
    if (c == ',') {
        next_object();
        state_ = State::Open;
        return true;
    }
    in_array_ = false;
    if (c == ']') {
        if (bare_) {
            state_ = State::Text;
            bare_start_ = true;
        } else {
            state_ = State::AfterObject;
            tag_.clear();
        }
        return true;
    }
    state_ = State::Text;  // an unclosed array: what follows is text
    bare_start_ = false;
    return false;
}

bool ToolCallStreamer::gemma(char c) {
    if (state_ == State::GemmaHead) {
        hold(c);
        if (c != '{') {
            // call:NAME, short, without blanks or tags in it
            name_ += c;
            const size_t n = std::min(name_.size(), kGemmaCall.size());
            if (name_.compare(0, n, kGemmaCall, 0, n) != 0 || is_blank(c) || c == '<' ||
                name_.size() > kGemmaCall.size() + kMaxGemmaName)
                return bad(true);
            return true;
        }
        if (name_.size() <= kGemmaCall.size()) return bad(true);
        name_.erase(0, kGemmaCall.size());
        if (std::find(names_.begin(), names_.end(), name_) == names_.end()) return bad(true);
        commit();
        args_seen_ = true;
        gemma_.reset();
        state_ = State::GemmaArgs;
    }
    std::string json;
    const Gemma4Args::Step step = gemma_.feed(c, &json);
    emit(Kind::Arguments, json);
    if (step == Gemma4Args::Step::Bad) return bad(true);
    if (step == Gemma4Args::Step::End) end_object();
    return true;
}

bool ToolCallStreamer::xml(char c) {
    hold(c);
    std::string json;
    const XmlCall::Step got = xml_.feed(c, &json);
    if (got == XmlCall::Step::Bad && !started_ && close_ == kClose) {
        // Not a call of Qwen3.5's: the opening tag is text, and what follows it is read
        // again (it may open another block).
        const std::string again = raw_.substr(kOpen.size());
        raw_.resize(kOpen.size());
        not_a_call();
        for (char x : again) step(x);
        return true;
    }
    if (got == XmlCall::Step::Bad) return bad(true);
    if (got == XmlCall::Step::Named) {
        name_ = xml_.name();
        if (std::find(names_.begin(), names_.end(), name_) == names_.end()) return bad(true);
        commit();
        args_seen_ = true;
    }
    emit(Kind::Arguments, json);
    if (got == XmlCall::Step::End) end_object();
    return true;
}

bool ToolCallStreamer::consume(char c) {
    switch (state_) {
        case State::Text:
            return text(c);
        case State::AfterObject:
            return after_object(c);
        case State::ArrayNext:
            return array_next(c);
        case State::GemmaHead:
        case State::GemmaArgs:
            return gemma(c);
        case State::Xml:
            return xml(c);
        case State::Open:
            if (is_blank(c)) {
                hold(c);
            } else if (c == '{') {
                hold(c);
                state_ = State::KeyOrEnd;
            } else if (c == '[' && !in_array_) {
                hold(c);
                in_array_ = true;
                fence_ok_ = false;
            } else if (c == ']' && in_array_ && trim(raw_).empty()) {
                return array_next(c);  // after a trailing ','
            } else if (c == '`' && fence_ok_) {
                hold(c);
                state_ = State::Fence;
            } else if (c == '<' && close_ == kClose && !bare_ && !in_array_) {
                xml_ = XmlCall(&types_);
                state_ = State::Xml;
                return false;
            } else {
                return bad(false);
            }
            return true;
        case State::Fence:
            hold(c);
            if (c == '\n') {
                state_ = State::Open;
                fence_ok_ = false;
            }
            return true;
        case State::KeyOrEnd:
            if (is_blank(c)) {
                hold(c);
            } else if (c == '"') {
                hold(c);
                key_.clear();
                str_.reset();
                state_ = State::Key;
            } else if (c == '}') {
                hold(c);
                end_object();
            } else {
                return bad(false);
            }
            return true;
        case State::Key: {
            hold(c);
            const auto s = str_.feed(c, &key_);
            if (s == StringDecoder::Step::Bad) return bad(true);
            if (s == StringDecoder::Step::Done) state_ = State::Colon;
            return true;
        }
        case State::Colon:
            if (!is_blank(c) && c != ':') return bad(false);
            hold(c);
            if (c == ':') state_ = State::Value;
            return true;
        case State::Value:
            if (is_blank(c)) {
                hold(c);
                return true;
            }
            if (key_ == "name" && !named_) {
                if (c != '"') return bad(false);
                hold(c);
                named_ = true;
                name_.clear();
                str_.reset();
                state_ = State::Name;
                return true;
            }
            if ((key_ == "arguments" || key_ == "parameters") && !args_seen_) {
                if (c == '{') {
                    args_seen_ = true;
                    scan_.reset();
                    state_ = State::ArgsJson;
                    return false;
                }
                if (c == '"') {
                    args_seen_ = true;
                    hold(c);
                    str_.reset();
                    state_ = State::ArgsString;
                    return true;
                }
                // Not arguments a call can have: not a call, or (the call started) no
                // arguments, "{}" at the object's end.
                if (!started_) return bad(false);
            }
            scan_.reset();
            state_ = State::Skip;
            return false;
        case State::Name: {
            hold(c);
            const auto s = str_.feed(c, &name_);
            if (s == StringDecoder::Step::Bad) return bad(true);
            if (s == StringDecoder::Step::Done) {
                if (std::find(names_.begin(), names_.end(), name_) == names_.end())
                    return bad(true);  // an undeclared tool: not a call
                commit();
                state_ = State::AfterValue;
            }
            return true;
        }
        case State::ArgsJson: {
            hold(c);
            args_out(std::string_view(&c, 1));
            if (scan_.feed(c) == ValueScanner::Step::End) state_ = State::AfterValue;
            return true;
        }
        case State::ArgsString: {
            hold(c);
            std::string decoded;
            const auto s = str_.feed(c, &decoded);
            args_out(decoded);
            if (s == StringDecoder::Step::Bad) return bad(true);
            if (s == StringDecoder::Step::Done) state_ = State::AfterValue;
            return true;
        }
        case State::Skip: {
            const auto s = scan_.feed(c);
            if (s == ValueScanner::Step::Bad) return bad(false);
            if (s == ValueScanner::Step::Before) {
                state_ = State::AfterValue;
                return false;
            }
            hold(c);
            if (s == ValueScanner::Step::End) state_ = State::AfterValue;
            return true;
        }
        case State::AfterValue:
            if (is_blank(c) || c == ',') {
                hold(c);
                if (c == ',') state_ = State::KeyOrEnd;
            } else if (c == '}') {
                hold(c);
                end_object();
            } else {
                return bad(false);
            }
            return true;
    }
    return true;
}

}  // namespace edgellm
