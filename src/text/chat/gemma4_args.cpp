#include "text/chat/gemma4_args.h"

#include "text/chat/text_scan.h"

#include <cctype>
#include <cstdio>

namespace edgellm {

namespace {

constexpr std::string_view kQuote = "<|\"|>";
// Bounds on what is held before it is written: a key and a bare word are short.
constexpr size_t kMaxKey = 256;
constexpr size_t kMaxWord = 64;
constexpr size_t kMaxDepth = 64;

void append_escaped(char c, std::string* out) {
    switch (c) {
        case '"':
            *out += "\\\"";
            return;
        case '\\':
            *out += "\\\\";
            return;
        case '\n':
            *out += "\\n";
            return;
        case '\r':
            *out += "\\r";
            return;
        case '\t':
            *out += "\\t";
            return;
        default:
            break;
    }
    if ((unsigned char)c < 0x20) {
        char esc[8];
        std::snprintf(esc, sizeof esc, "\\u%04x", (unsigned)(unsigned char)c);
        *out += esc;
        return;
    }
    *out += c;
}

bool word_char(char c) {
    return std::isalnum((unsigned char)c) || c == '.' || c == '+' || c == '-' || c == '_';
}

// A JSON number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
bool json_number(std::string_view s) {
    size_t i = 0;
    auto digits = [&] {
        const size_t from = i;
        while (i < s.size() && std::isdigit((unsigned char)s[i])) ++i;
        return i > from;
    };
    if (i < s.size() && s[i] == '-') ++i;
    if (i < s.size() && s[i] == '0') {
        ++i;
    } else if (!digits()) {
        return false;
    }
    if (i < s.size() && s[i] == '.') {
        ++i;
        if (!digits()) return false;
    }
    if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
        ++i;
        if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
        if (!digits()) return false;
    }
    return i == s.size();
}

}  // namespace

Gemma4Args::Step Gemma4Args::end_word(std::string* out) {
    // (the template prints Python's True / False / None where a value is not JSON's)
    if (buf_ == "true" || buf_ == "True") {
        *out += "true";
    } else if (buf_ == "false" || buf_ == "False") {
        *out += "false";
    } else if (buf_ == "null" || buf_ == "None") {
        *out += "null";
    } else if (json_number(buf_)) {
        *out += buf_;
    } else {
        return Step::Bad;
    }
    buf_.clear();
    at_ = At::AfterValue;
    return Step::More;
}

Gemma4Args::Step Gemma4Args::close(char c, std::string* out) {
    if (levels_.empty() || levels_.back().open != (c == '}' ? '{' : '[')) return Step::Bad;
    levels_.pop_back();
    *out += c;
    at_ = At::AfterValue;
    return levels_.empty() ? Step::End : Step::More;
}

Gemma4Args::Step Gemma4Args::feed(char c, std::string* out) {
    switch (at_) {
        case At::Start:
            if (is_blank(c)) return Step::More;
            if (c != '{') return Step::Bad;
            *out += '{';
            levels_.push_back({'{', true});
            at_ = At::KeyOrClose;
            return Step::More;
        case At::KeyOrClose:
            if (is_blank(c)) return Step::More;
            if (c == '}') return close(c, out);
            if (c == ':' || c == ',' || c == '{' || c == '[' || c == ']') return Step::Bad;
            buf_.assign(1, c);
            at_ = At::Key;
            return Step::More;
        case At::Key: {
            if (c == '}' || buf_.size() >= kMaxKey) return Step::Bad;
            if (c != ':') {
                buf_ += c;
                return Step::More;
            }
            // A key written as a string (<|"|>k<|"|> or "k") is its text.
            std::string_view key = trim(buf_);
            if (key.size() >= 2 * kQuote.size() && key.substr(0, kQuote.size()) == kQuote &&
                key.substr(key.size() - kQuote.size()) == kQuote)
                key = key.substr(kQuote.size(), key.size() - 2 * kQuote.size());
            else if (key.size() >= 2 && key.front() == '"' && key.back() == '"')
                key = key.substr(1, key.size() - 2);
            if (key.empty()) return Step::Bad;
            Level& level = levels_.back();
            if (!level.first) *out += ',';
            level.first = false;
            *out += '"';
            for (char k : key) append_escaped(k, out);
            *out += "\":";
            buf_.clear();
            at_ = At::Value;
            return Step::More;
        }
        case At::Value: {
            if (is_blank(c)) return Step::More;
            Level& level = levels_.back();
            if (level.open == '[' && c == ']') return close(c, out);
            if (c == '}' || c == ']' || c == ',' || c == ':') return Step::Bad;
            if (level.open == '[') {
                if (!level.first) *out += ',';
                level.first = false;
            }
            if (c == '<') {
                buf_.assign(1, c);
                at_ = At::Mark;
            } else if (c == '{' || c == '[') {
                if (levels_.size() >= kMaxDepth) return Step::Bad;
                *out += c;
                levels_.push_back({c, true});
                at_ = c == '{' ? At::KeyOrClose : At::Value;
            } else if (word_char(c)) {
                buf_.assign(1, c);
                at_ = At::Word;
            } else {
                return Step::Bad;
            }
            return Step::More;
        }
        case At::Mark:
            buf_ += c;
            if (buf_ == kQuote) {
                *out += '"';
                buf_.clear();
                at_ = At::String;
                return Step::More;
            }
            return kQuote.substr(0, buf_.size()) == buf_ ? Step::More : Step::Bad;
        case At::String:
            if (buf_.empty() && c != '<') {
                append_escaped(c, out);
                return Step::More;
            }
            buf_ += c;
            if (buf_ == kQuote) {
                *out += '"';
                buf_.clear();
                at_ = At::AfterValue;
                return Step::More;
            }
            // What cannot begin the closing mark is text (the mark has one '<', at its start).
            while (!buf_.empty() && kQuote.substr(0, buf_.size()) != buf_) {
                append_escaped(buf_[0], out);
                buf_.erase(0, 1);
            }
            return Step::More;
        case At::Word:
            if (word_char(c)) {
                if (buf_.size() >= kMaxWord) return Step::Bad;
                buf_ += c;
                return Step::More;
            }
            if (end_word(out) == Step::Bad) return Step::Bad;
            return feed(c, out);  // the byte after the word, in AfterValue
        case At::AfterValue:
            if (is_blank(c)) return Step::More;
            if (c == '}' || c == ']') return close(c, out);
            if (c != ',') return Step::Bad;
            at_ = levels_.back().open == '{' ? At::KeyOrClose : At::Value;
            return Step::More;
    }
    return Step::Bad;
}

std::optional<std::string> gemma4_args_to_json(std::string_view s, size_t* used) {
    Gemma4Args args;
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
        const Gemma4Args::Step step = args.feed(s[i], &out);
        if (step == Gemma4Args::Step::Bad) return std::nullopt;
        if (step == Gemma4Args::Step::End) {
            *used = i + 1;
            return out;
        }
    }
    return std::nullopt;
}

}  // namespace edgellm
