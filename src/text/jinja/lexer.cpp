// The lexer (lexer.h): Jinja2's, with trim_blocks and lstrip_blocks on.
#include "text/jinja/lexer.h"

#include "text/jinja/internal.h"
#include "text/jinja/py_strings.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace edgellm::jinja::detail {

std::string describe(const Token& t) {
    switch (t.type) {
        case Tok::Text:
            return "template text";
        case Tok::VarBegin:
            return "'{{'";
        case Tok::VarEnd:
            return "end of print statement '}}'";
        case Tok::BlockBegin:
            return "'{%'";
        case Tok::BlockEnd:
            return "end of statement block '%}'";
        case Tok::Name:
        case Tok::Op:
            return "'" + t.text + "'";
        case Tok::String:
            return "a string";
        case Tok::Int:
        case Tok::Float:
            return "a number";
        case Tok::Eof:
            return "end of template";
    }
    return "?";
}

namespace {

// Splits a template into text and tag tokens as Jinja2's lexer does with trim_blocks and
// lstrip_blocks on: `-` next to a delimiter strips all whitespace on that side; a block or
// comment tag alone on its line loses the indentation before it (lstrip_blocks, unless
// `{%+`); the newline right after a `%}` or `#}` is dropped (trim_blocks, unless `+%}`).
// Inside tags, end delimiters only count outside brackets, so `{{ {'a': {}}}}` works.
class Lexer {
  public:
    explicit Lexer(const std::string& source) {
        // Jinja2 normalizes \r\n and \r to \n and drops one trailing newline.
        src_.reserve(source.size());
        for (size_t i = 0; i < source.size(); ++i) {
            if (source[i] == '\r') {
                src_ += '\n';
                if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
            } else {
                src_ += source[i];
            }
        }
        if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    }

    std::vector<Token> run() {
        while (pos_ < src_.size()) {
            const size_t p = find_tag_start(pos_);
            if (p == std::string::npos) {
                push_text(src_.substr(pos_), line_);
                break;
            }
            std::string text = src_.substr(pos_, p - pos_);
            const int text_line = line_;
            const char kind = src_[p + 1];
            const char sign =
                p + 2 < src_.size() && (src_[p + 2] == '-' || src_[p + 2] == '+') ? src_[p + 2] : 0;
            line_ += count_newlines(text);
            const int tag_line = line_;
            emit_text(std::move(text), text_line, kind, sign);
            if (kind == '%' && lex_raw(p, tag_line)) continue;
            pos_ = p + 2 + (sign ? 1 : 0);
            if (kind == '#')
                lex_comment(tag_line);
            else
                lex_tag(kind, tag_line);
        }
        Token eof;
        eof.type = Tok::Eof;
        eof.line = line_;
        out_.push_back(eof);
        return std::move(out_);
    }

  private:
    std::string src_;
    size_t pos_ = 0;
    int line_ = 1;
    bool line_starting_ = true;  // the last thing consumed ended a line
    std::vector<Token> out_;
    std::vector<char> brackets_;

    static int count_newlines(std::string_view s) {
        return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
    }

    size_t find_tag_start(size_t from) const {
        for (size_t p = src_.find('{', from); p != std::string::npos; p = src_.find('{', p + 1)) {
            if (p + 1 < src_.size() &&
                (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#'))
                return p;
        }
        return std::string::npos;
    }

    bool starts_with(size_t at, std::string_view s) const {
        return src_.compare(at, s.size(), s) == 0;
    }

    void push_text(std::string text, int line) {
        if (text.empty()) return;
        Token t;
        t.type = Tok::Text;
        t.line = line;
        t.text = std::move(text);
        out_.push_back(std::move(t));
    }

    void push(Tok type, int line, std::string text = {}) {
        Token t;
        t.type = type;
        t.line = line;
        t.text = std::move(text);
        out_.push_back(std::move(t));
    }

    // The text before a tag, trimmed as the tag asks.
    void emit_text(std::string text, int text_line, char kind, char sign) {
        if (sign == '-') {
            text = py_strip(text, nullptr, false, true);
        } else if (sign != '+' && kind != '{') {
            const size_t nl = text.rfind('\n');
            const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
            if ((l_pos > 0 || line_starting_) && l_pos < text.size() &&
                all_py_space(std::string_view(text).substr(l_pos)))
                text.resize(l_pos);
        }
        push_text(std::move(text), text_line);
    }

    // After an end delimiter: `-` strips the whitespace that follows, a plain block or
    // comment end drops one newline (trim_blocks), `+` (and `}}`) keeps everything.
    void trim_after(char sign) {
        if (sign == '-') {
            while (pos_ < src_.size()) {
                size_t k = pos_;
                const uint32_t c = next_code_point(src_, k);
                if (!is_py_space(c)) break;
                if (c == '\n') ++line_;
                pos_ = k;
            }
        } else if (sign == 0 && pos_ < src_.size() && src_[pos_] == '\n') {
            ++pos_;
            ++line_;
        }
        line_starting_ = pos_ > 0 && src_[pos_ - 1] == '\n';
    }

    size_t skip_spaces(size_t at) const {
        while (at < src_.size()) {
            size_t k = at;
            if (!is_py_space(next_code_point(src_, k))) break;
            at = k;
        }
        return at;
    }

    void lex_comment(int tag_line) {
        const size_t q = src_.find("#}", pos_);
        if (q == std::string::npos)
            throw TemplateError(tag_line, "unclosed comment: '{#' without '#}'");
        const char sign = q > pos_ && (src_[q - 1] == '-' || src_[q - 1] == '+') ? src_[q - 1] : 0;
        line_ += count_newlines(std::string_view(src_).substr(pos_, q + 2 - pos_));
        pos_ = q + 2;
        trim_after(sign);
    }

    // {% raw %}...{% endraw %}: the text in between is not interpreted.
    bool lex_raw(size_t p, int tag_line) {
        size_t at = p + 2;
        if (at < src_.size() && (src_[at] == '-' || src_[at] == '+')) ++at;
        at = skip_spaces(at);
        if (!starts_with(at, "raw")) return false;
        at = skip_spaces(at + 3);
        char begin_sign = 0;
        if (starts_with(at, "-%}"))
            begin_sign = '-';
        else if (!starts_with(at, "%}"))
            return false;
        line_ += count_newlines(std::string_view(src_).substr(p, at - p));
        pos_ = at + (begin_sign ? 3 : 2);
        trim_after(begin_sign ? '-' : '+');  // Jinja2 applies no trim_blocks after `raw %}`
        for (size_t q = src_.find("{%", pos_); q != std::string::npos; q = src_.find("{%", q + 1)) {
            size_t k = q + 2;
            const char sign = k < src_.size() && (src_[k] == '-' || src_[k] == '+') ? src_[k] : 0;
            if (sign) ++k;
            k = skip_spaces(k);
            if (!starts_with(k, "endraw")) continue;
            k = skip_spaces(k + 6);
            char end_sign;
            if (starts_with(k, "+%}"))
                end_sign = '+';
            else if (starts_with(k, "-%}"))
                end_sign = '-';
            else if (starts_with(k, "%}"))
                end_sign = 0;
            else
                continue;
            std::string body = src_.substr(pos_, q - pos_);
            const int body_line = line_;
            line_ += count_newlines(body);
            emit_text(std::move(body), body_line, '%', sign);
            line_ += count_newlines(std::string_view(src_).substr(q, k - q));
            pos_ = k + (end_sign ? 3 : 2);
            trim_after(end_sign);
            return true;
        }
        throw TemplateError(tag_line, "unclosed 'raw' block: no '{% endraw %}'");
    }

    void lex_tag(char kind, int tag_line) {
        push(kind == '{' ? Tok::VarBegin : Tok::BlockBegin, tag_line);
        brackets_.clear();
        for (;;) {
            // whitespace
            while (pos_ < src_.size()) {
                size_t k = pos_;
                const uint32_t c = next_code_point(src_, k);
                if (!is_py_space(c)) break;
                if (c == '\n') ++line_;
                pos_ = k;
            }
            if (pos_ >= src_.size())
                throw TemplateError(tag_line, kind == '{' ? "unclosed tag: '{{' without '}}'"
                                                          : "unclosed tag: '{%' without '%}'");
            if (brackets_.empty()) {
                if (kind == '%') {
                    char sign = 1;
                    if (starts_with(pos_, "+%}"))
                        sign = '+';
                    else if (starts_with(pos_, "-%}"))
                        sign = '-';
                    else if (starts_with(pos_, "%}"))
                        sign = 0;
                    if (sign != 1) {
                        push(Tok::BlockEnd, line_);
                        pos_ += sign ? 3 : 2;
                        trim_after(sign);
                        return;
                    }
                } else {
                    const bool strip = starts_with(pos_, "-}}");
                    if (strip || starts_with(pos_, "}}")) {
                        push(Tok::VarEnd, line_);
                        pos_ += strip ? 3 : 2;
                        trim_after(strip ? '-' : '+');
                        return;
                    }
                }
            }
            const char c = src_[pos_];
            if (c >= '0' && c <= '9')
                lex_number();
            else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_')
                lex_name();
            else if (c == '\'' || c == '"')
                lex_string();
            else
                lex_operator();
        }
    }

    // (\d+_)*\d+ at `at`; returns the end, or `at` when there is no digit.
    size_t digits_end(size_t at) const {
        size_t k = at;
        while (k < src_.size() && std::isdigit(static_cast<unsigned char>(src_[k]))) {
            ++k;
            if (k + 1 < src_.size() && src_[k] == '_' &&
                std::isdigit(static_cast<unsigned char>(src_[k + 1])))
                ++k;
        }
        return k;
    }

    void lex_number() {
        const size_t start = pos_;
        auto without_underscores = [](std::string s) {
            s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
            return s;
        };
        // Float: digits then `.digits`, an exponent, or both (not right after a '.').
        if (start == 0 || src_[start - 1] != '.') {
            const size_t int_end = digits_end(start);
            size_t end = int_end;
            if (end < src_.size() && src_[end] == '.' && digits_end(end + 1) > end + 1)
                end = digits_end(end + 1);
            if (end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
                size_t k = end + 1;
                if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
                if (digits_end(k) > k) end = digits_end(k);
            }
            if (end > int_end) {
                Token t;
                t.type = Tok::Float;
                t.line = line_;
                t.text = src_.substr(start, end - start);
                t.float_value = std::strtod(without_underscores(t.text).c_str(), nullptr);
                out_.push_back(std::move(t));
                pos_ = end;
                return;
            }
        }
        int base = 10;
        size_t digits = start;
        size_t end;
        const char x = start + 1 < src_.size() ? static_cast<char>(src_[start + 1] | 0x20) : 0;
        auto base_digit = [&](char ch) {
            ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
            if (base == 16) return std::isxdigit(static_cast<unsigned char>(ch)) != 0;
            return ch >= '0' && ch < static_cast<char>('0' + base);
        };
        if (src_[start] == '0' && (x == 'x' || x == 'o' || x == 'b')) {
            base = x == 'x' ? 16 : (x == 'o' ? 8 : 2);
            digits = start + 2;
            end = digits;
            while (end < src_.size() &&
                   (base_digit(src_[end]) ||
                    (src_[end] == '_' && end + 1 < src_.size() && base_digit(src_[end + 1]))))
                ++end;
            if (end == digits) throw TemplateError(line_, "invalid number literal");
        } else if (src_[start] == '0') {
            end = start + 1;
            while (end < src_.size() &&
                   (src_[end] == '0' ||
                    (src_[end] == '_' && end + 1 < src_.size() && src_[end + 1] == '0')))
                ++end;
        } else {
            end = digits_end(start);
        }
        Token t;
        t.type = Tok::Int;
        t.line = line_;
        t.text = src_.substr(start, end - start);
        const std::string plain = without_underscores(src_.substr(digits, end - digits));
        errno = 0;
        const unsigned long long v = std::strtoull(plain.c_str(), nullptr, base);
        if (errno == ERANGE || v > static_cast<unsigned long long>(INT64_MAX))
            throw TemplateError(line_, "integer literal too large: " + t.text);
        t.int_value = static_cast<int64_t>(v);
        out_.push_back(std::move(t));
        pos_ = end;
    }

    void lex_name() {
        const size_t start = pos_;
        while (pos_ < src_.size() &&
               (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_'))
            ++pos_;
        push(Tok::Name, line_, src_.substr(start, pos_ - start));
    }

    static int hex_value(char c) {
        if (c >= '0' && c <= '9') return c - '0';
        c = static_cast<char>(c | 0x20);
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        return -1;
    }

    // A quoted string with Python's escapes (Jinja2 decodes them with unicode-escape).
    void lex_string() {
        const char quote = src_[pos_];
        const int start_line = line_;
        size_t k = pos_ + 1;
        std::string value;
        for (;;) {
            if (k >= src_.size()) throw TemplateError(start_line, "unterminated string literal");
            const char c = src_[k];
            if (c == quote) break;
            if (c == '\n') ++line_;
            if (c != '\\') {
                value += c;
                ++k;
                continue;
            }
            if (k + 1 >= src_.size())
                throw TemplateError(start_line, "unterminated string literal");
            const char e = src_[k + 1];
            k += 2;
            switch (e) {
                case '\n':
                    ++line_;
                    break;  // line continuation
                case '\\':
                    value += '\\';
                    break;
                case '\'':
                    value += '\'';
                    break;
                case '"':
                    value += '"';
                    break;
                case 'a':
                    value += '\a';
                    break;
                case 'b':
                    value += '\b';
                    break;
                case 'f':
                    value += '\f';
                    break;
                case 'n':
                    value += '\n';
                    break;
                case 'r':
                    value += '\r';
                    break;
                case 't':
                    value += '\t';
                    break;
                case 'v':
                    value += '\v';
                    break;
                case 'x':
                case 'u':
                case 'U': {
                    const size_t n = e == 'x' ? 2 : (e == 'u' ? 4 : 8);
                    uint32_t cp = 0;
                    for (size_t d = 0; d < n; ++d) {
                        const int h = k + d < src_.size() ? hex_value(src_[k + d]) : -1;
                        if (h < 0)
                            throw TemplateError(line_, std::string("truncated \\") + e +
                                                           " escape in a string literal");
                        cp = cp * 16 + static_cast<uint32_t>(h);
                    }
                    if (cp > 0x10FFFF)
                        throw TemplateError(line_, "illegal Unicode character in a string literal");
                    k += n;
                    append_utf8(value, cp);
                    break;
                }
                case 'N':
                    throw TemplateError(line_, "unsupported \\N{...} escape in a string literal");
                default:
                    if (e >= '0' && e <= '7') {  // up to three octal digits
                        uint32_t cp = static_cast<uint32_t>(e - '0');
                        for (int d = 0;
                             d < 2 && k < src_.size() && src_[k] >= '0' && src_[k] <= '7'; ++d, ++k)
                            cp = cp * 8 + static_cast<uint32_t>(src_[k] - '0');
                        append_utf8(value, cp);
                    } else {  // unknown escapes stay as written
                        value += '\\';
                        value += e;
                        if (e == '\n') ++line_;
                    }
            }
        }
        Token t;
        t.type = Tok::String;
        t.line = start_line;
        t.text = std::move(value);
        out_.push_back(std::move(t));
        pos_ = k + 1;
    }

    void lex_operator() {
        static const char* const two[] = {"//", "**", "==", "!=", ">=", "<="};
        for (const char* op : two) {
            if (starts_with(pos_, op)) {
                push(Tok::Op, line_, op);
                pos_ += 2;
                return;
            }
        }
        const char c = src_[pos_];
        if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos) {
            size_t k = pos_;
            std::string ch;
            append_utf8(ch, next_code_point(src_, k));
            throw TemplateError(line_, "unexpected character '" + ch + "'");
        }
        if (c == '(' || c == '[' || c == '{') {
            if (brackets_.size() > static_cast<size_t>(kMaxParseDepth))
                throw TemplateError(line_, "brackets nested too deeply");
            brackets_.push_back(c == '(' ? ')' : (c == '[' ? ']' : '}'));
        } else if (c == ')' || c == ']' || c == '}') {
            if (brackets_.empty())
                throw TemplateError(line_, std::string("unexpected '") + c + "'");
            if (brackets_.back() != c)
                throw TemplateError(line_, std::string("unexpected '") + c + "', expected '" +
                                               brackets_.back() + "'");
            brackets_.pop_back();
        }
        push(Tok::Op, line_, std::string(1, c));
        ++pos_;
    }
};

}  // namespace

std::vector<Token> tokenize(const std::string& source) {
    return Lexer(source).run();
}

}  // namespace edgellm::jinja::detail
