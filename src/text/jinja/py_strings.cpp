// Python's text semantics (py_strings.h): code points, whitespace and case mapping, str's
// methods, float repr, int() and float() of text, and `%` formatting.
#include "text/jinja/py_strings.h"

#include "text/jinja/value.h"
#include "text/unicode.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace edgellm::jinja::detail {

// Decodes the code point at s[i] and advances i (unicode::decode). Bytes that are not
// valid UTF-8 (which it decodes to U+FFFD, one byte consumed) become U+DC80..U+DCFF
// instead (Python's surrogateescape), which append_utf8 writes back unchanged, so any byte
// string survives a round trip.
uint32_t next_code_point(std::string_view s, size_t& i) {
    const size_t start = i;
    const uint32_t cp = unicode::decode(s, &i);
    if (cp == 0xFFFD && i == start + 1) return 0xDC00u + static_cast<unsigned char>(s[start]);
    return cp;
}

void append_utf8(std::string& out, uint32_t cp) {
    if (cp >= 0xDC80 && cp <= 0xDCFF)
        out += static_cast<char>(cp - 0xDC00);
    else
        unicode::append_utf8(cp, &out);
}

std::vector<uint32_t> code_points(std::string_view s) {
    work(s.size());
    std::vector<uint32_t> cps;
    cps.reserve(s.size());
    for (size_t i = 0; i < s.size();) cps.push_back(next_code_point(s, i));
    return cps;
}

std::string encode(const std::vector<uint32_t>& cps, size_t begin, size_t end) {
    std::string out;
    for (size_t k = begin; k < end; ++k) append_utf8(out, cps[k]);
    return out;
}

size_t count_code_points(std::string_view s) {
    work(s.size());
    size_t n = 0;
    for (size_t i = 0; i < s.size(); ++n) next_code_point(s, i);
    return n;
}

// s.find(needle, from) and s.rfind(needle, pos), searching as std::string does (the first
// byte, then the rest) but charging the bytes compared to work(): a needle that almost
// matches everywhere makes the search quadratic.
size_t find_text(std::string_view s, std::string_view needle, size_t from) {
    if (needle.empty()) return from <= s.size() ? from : std::string_view::npos;
    for (size_t at = from; at < s.size() && needle.size() <= s.size() - at; ++at) {
        const size_t span = s.size() - needle.size() + 1 - at;
        const void* p = std::memchr(s.data() + at, needle[0], span);
        if (!p) {
            work(span / 8);
            return std::string_view::npos;
        }
        const auto hit = static_cast<size_t>(static_cast<const char*>(p) - s.data());
        const auto same = static_cast<size_t>(
            std::mismatch(needle.begin(), needle.end(), s.begin() + hit).first - needle.begin());
        work((hit - at) / 8 + same + 1);
        if (same == needle.size()) return hit;
        at = hit;
    }
    return std::string_view::npos;
}

size_t rfind_text(std::string_view s, std::string_view needle, size_t pos) {
    if (needle.size() > s.size()) return std::string_view::npos;
    for (size_t at = std::min(pos, s.size() - needle.size()) + 1; at-- > 0;) {
        const auto same = static_cast<size_t>(
            std::mismatch(needle.begin(), needle.end(), s.begin() + at).first - needle.begin());
        work(same + 1);
        if (same == needle.size()) return at;
    }
    return std::string_view::npos;
}

// Python's str.isspace() (and `\s` of its re module).
bool is_py_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

// Simple case mapping: ASCII, Latin-1, Latin Extended-A, basic Greek and Cyrillic.
namespace {
uint32_t cp_upper(uint32_t c) {
    if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
    if (c == 0xB5) return 0x39C;
    if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
    if (c == 0xFF) return 0x178;
    if (c == 0x131) return 'I';
    if (c == 0x17F) return 'S';
    if ((c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177)) return c & ~1u;
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c & 1u) ? c : c - 1;
    if (c >= 0x3B1 && c <= 0x3C9) return c == 0x3C2 ? 0x3A3 : c - 32;
    if (c == 0x3AC) return 0x386;
    if (c >= 0x3AD && c <= 0x3AF) return c - 37;
    if (c == 0x3CC) return 0x38C;
    if (c == 0x3CD || c == 0x3CE) return c - 63;
    if (c >= 0x430 && c <= 0x44F) return c - 32;
    if (c >= 0x450 && c <= 0x45F) return c - 80;
    return c;
}
}  // namespace

uint32_t cp_lower(uint32_t c) {
    if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
    if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
    if (c == 0x178) return 0xFF;
    if (c == 0x130) return 'i';
    if ((c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177)) return c | 1u;
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c & 1u) ? c + 1 : c;
    if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
    if (c == 0x386) return 0x3AC;
    if (c >= 0x388 && c <= 0x38A) return c + 37;
    if (c == 0x38C) return 0x3CC;
    if (c == 0x38E || c == 0x38F) return c + 63;
    if (c >= 0x410 && c <= 0x42F) return c + 32;
    if (c >= 0x400 && c <= 0x40F) return c + 80;
    return c;
}

bool is_cased(uint32_t c) {
    return c == 0xDF || cp_upper(c) != c || cp_lower(c) != c;
}
bool is_upper_cp(uint32_t c) {
    return cp_lower(c) != c;
}
bool is_lower_cp(uint32_t c) {
    return c == 0xDF || cp_upper(c) != c;
}

void append_upper(std::string& out, uint32_t c) {
    if (c == 0xDF) {
        out += "SS";  // Python's full mapping of ß
        return;
    }
    append_utf8(out, cp_upper(c));
}

std::string str_upper(std::string_view s) {
    std::string out;
    for (size_t i = 0; i < s.size();) append_upper(out, next_code_point(s, i));
    return out;
}

std::string str_lower(std::string_view s) {
    std::string out;
    for (size_t i = 0; i < s.size();) append_utf8(out, cp_lower(next_code_point(s, i)));
    return out;
}

// Python's str.title(): a cased character after a cased one is lowered, others raised.
std::string str_title(std::string_view s) {
    std::string out;
    bool prev_cased = false;
    for (size_t i = 0; i < s.size();) {
        const uint32_t c = next_code_point(s, i);
        if (is_cased(c)) {
            if (prev_cased)
                append_utf8(out, cp_lower(c));
            else
                append_upper(out, c);
            prev_cased = true;
        } else {
            append_utf8(out, c);
            prev_cased = false;
        }
    }
    return out;
}

// Python's str.capitalize(): the first character raised, the rest lowered.
std::string str_capitalize(std::string_view s) {
    std::string out;
    bool first = true;
    for (size_t i = 0; i < s.size(); first = false) {
        const uint32_t c = next_code_point(s, i);
        if (first)
            append_upper(out, c);
        else
            append_utf8(out, cp_lower(c));
    }
    return out;
}

// Jinja2's `title` filter: words start after '-', whitespace, '(', '{', '[' or '<'.
std::string jinja_title(std::string_view s) {
    std::string out;
    bool word_start = true;
    for (size_t i = 0; i < s.size();) {
        const uint32_t c = next_code_point(s, i);
        const bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || is_py_space(c);
        if (sep)
            append_utf8(out, c);
        else if (word_start)
            append_upper(out, c);
        else
            append_utf8(out, cp_lower(c));
        word_start = sep;
    }
    return out;
}

// Python's str.strip/lstrip/rstrip: whitespace, or any of the code points of `chars`.
std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right) {
    const std::vector<uint32_t> set = chars ? code_points(*chars) : std::vector<uint32_t>{};
    auto strip_it = [&](uint32_t c) {
        return chars ? std::find(set.begin(), set.end(), c) != set.end() : is_py_space(c);
    };
    size_t begin = 0;
    while (left && begin < s.size()) {
        size_t k = begin;
        if (!strip_it(next_code_point(s, k))) break;
        begin = k;
    }
    size_t end = s.size();
    if (right) {
        end = begin;  // the end of the last code point that is kept
        for (size_t i = begin; i < s.size();)
            if (!strip_it(next_code_point(s, i))) end = i;
    }
    return std::string(s.substr(begin, end - begin));
}

bool all_py_space(std::string_view s) {
    for (size_t i = 0; i < s.size();)
        if (!is_py_space(next_code_point(s, i))) return false;
    return true;
}

namespace {
// split() and splitlines() make one Value per part: bounded like range().
void check_parts(size_t n) {
    if (n > static_cast<size_t>(kMaxListLength))
        throw EvalError("too many parts (more than " + std::to_string(kMaxListLength) + ")");
}
}  // namespace

// Python's str.split(sep, maxsplit) (sep empty: whitespace runs) and str.rsplit.
std::vector<std::string> py_split(std::string_view s, const std::string* sep, int64_t maxsplit) {
    std::vector<std::string> parts;
    if (sep) {
        size_t pos = 0;
        for (int64_t n = 0; maxsplit < 0 || n < maxsplit; ++n) {
            const size_t at = find_text(s, *sep, pos);
            if (at == std::string_view::npos) break;
            parts.emplace_back(s.substr(pos, at - pos));
            check_parts(parts.size());
            pos = at + sep->size();
        }
        parts.emplace_back(s.substr(pos));
        return parts;
    }
    size_t i = 0;
    int64_t n = 0;
    while (i < s.size()) {
        size_t j = i;
        while (j < s.size()) {  // skip whitespace
            size_t k = j;
            if (!is_py_space(next_code_point(s, k))) break;
            j = k;
        }
        i = j;
        if (i >= s.size()) break;
        if (maxsplit >= 0 && n >= maxsplit) {
            parts.emplace_back(s.substr(i));
            break;
        }
        size_t word_end = i;
        while (word_end < s.size()) {
            size_t k = word_end;
            if (is_py_space(next_code_point(s, k))) break;
            word_end = k;
        }
        parts.emplace_back(s.substr(i, word_end - i));
        check_parts(parts.size());
        ++n;
        i = word_end;
    }
    return parts;
}

std::vector<std::string> py_rsplit(std::string_view s, const std::string* sep, int64_t maxsplit) {
    std::vector<std::string> parts;
    if (sep) {
        size_t end = s.size();
        for (int64_t n = 0; maxsplit < 0 || n < maxsplit; ++n) {
            if (end < sep->size()) break;
            const size_t at = rfind_text(s, *sep, end - sep->size());
            if (at == std::string_view::npos) break;
            parts.emplace_back(s.substr(at + sep->size(), end - at - sep->size()));
            check_parts(parts.size());
            end = at;
        }
        parts.emplace_back(s.substr(0, end));
        std::reverse(parts.begin(), parts.end());
        return parts;
    }
    const std::vector<uint32_t> cps = code_points(s);
    size_t end = cps.size();
    int64_t n = 0;
    while (end > 0) {
        while (end > 0 && is_py_space(cps[end - 1])) --end;
        if (end == 0) break;
        if (maxsplit >= 0 && n >= maxsplit) {
            parts.push_back(encode(cps, 0, end));
            break;
        }
        size_t begin = end;
        while (begin > 0 && !is_py_space(cps[begin - 1])) --begin;
        parts.push_back(encode(cps, begin, end));
        check_parts(parts.size());
        ++n;
        end = begin;
    }
    std::reverse(parts.begin(), parts.end());
    return parts;
}

// Python's str.replace(old, new, count); an empty `old` inserts `new` between code points.
std::string py_replace(std::string_view s, std::string_view old, std::string_view repl,
                       int64_t count) {
    std::string out;
    int64_t n = 0;
    if (old.empty()) {
        size_t i = 0;
        while (count < 0 || n < count) {
            out += repl;
            ++n;
            if (i >= s.size()) break;
            const size_t start = i;
            next_code_point(s, i);
            out += s.substr(start, i - start);
            if (out.size() > kMaxStringBytes) throw EvalError("string too long");
        }
        out += s.substr(std::min(i, s.size()));
        return out;
    }
    size_t pos = 0;
    while (count < 0 || n < count) {
        const size_t at = find_text(s, old, pos);
        if (at == std::string_view::npos) break;
        out += s.substr(pos, at - pos);
        out += repl;
        pos = at + old.size();
        ++n;
        if (out.size() > kMaxStringBytes) throw EvalError("string too long");
    }
    out += s.substr(pos);
    return out;
}

// Python's str.splitlines(): \n, \r, \r\n, \v, \f, \x1c-\x1e, \x85, U+2028, U+2029.
std::vector<std::string> py_splitlines(std::string_view s, bool keepends) {
    std::vector<std::string> lines;
    size_t start = 0;
    for (size_t i = 0; i < s.size();) {
        const size_t at = i;
        const uint32_t c = next_code_point(s, i);
        const bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C ||
                         c == 0x1D || c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
        if (!brk) continue;
        if (c == '\r' && i < s.size() && s[i] == '\n') ++i;
        lines.emplace_back(s.substr(start, (keepends ? i : at) - start));
        check_parts(lines.size());
        start = i;
    }
    if (start < s.size()) lines.emplace_back(s.substr(start));
    return lines;
}

std::string html_escape(std::string_view s) {
    std::string out;
    for (char c : s) {
        switch (c) {
            case '&':
                out += "&amp;";
                break;
            case '<':
                out += "&lt;";
                break;
            case '>':
                out += "&gt;";
                break;
            case '"':
                out += "&#34;";
                break;
            case '\'':
                out += "&#39;";
                break;
            default:
                out += c;
        }
    }
    return out;
}

// Python's repr() of a float: the shortest digits that read back as the same double, in
// fixed notation when the decimal exponent is in [-4, 16), else as 1.5e-05 / 1e+16.
std::string float_repr(double x) {
    if (std::isnan(x)) return "nan";
    if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
    if (x == 0) return std::signbit(x) ? "-0.0" : "0.0";
    char buf[48];
    for (int prec = 1; prec <= 17; ++prec) {
        std::snprintf(buf, sizeof(buf), "%.*e", prec - 1, x);
        if (std::strtod(buf, nullptr) == x) break;
    }
    std::string s(buf);
    std::string out;
    if (s[0] == '-') {
        out = "-";
        s.erase(0, 1);
    }
    const size_t epos = s.find('e');
    const int exp10 = std::atoi(s.c_str() + epos + 1);
    std::string digits;
    for (size_t k = 0; k < epos; ++k)
        if (s[k] != '.') digits += s[k];
    while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
    const int decpt = exp10 + 1;  // value = 0.DIGITS * 10^decpt
    if (decpt > -4 && decpt <= 16) {
        const auto nd = static_cast<int>(digits.size());
        if (decpt <= 0)
            out += "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
        else if (decpt >= nd)
            out += digits + std::string(static_cast<size_t>(decpt - nd), '0') + ".0";
        else
            out += digits.substr(0, static_cast<size_t>(decpt)) + "." +
                   digits.substr(static_cast<size_t>(decpt));
    } else {
        out += digits[0];
        if (digits.size() > 1) out += "." + digits.substr(1);
        const int e = decpt - 1;
        out += e < 0 ? "e-" : "e+";
        if (std::abs(e) < 10) out += '0';
        out += std::to_string(std::abs(e));
    }
    return out;
}

// Python's int(str, base): whitespace around, a sign, digits with single underscores.
std::optional<int64_t> parse_py_int(const std::string& text, int base) {
    std::string s = py_strip(text, nullptr, true, true);
    bool neg = false;
    if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
        neg = s[0] == '-';
        s.erase(0, 1);
    }
    if (base == 16 && s.size() > 2 && s[0] == '0' && (s[1] | 0x20) == 'x') s.erase(0, 2);
    if (base == 8 && s.size() > 2 && s[0] == '0' && (s[1] | 0x20) == 'o') s.erase(0, 2);
    if (base == 2 && s.size() > 2 && s[0] == '0' && (s[1] | 0x20) == 'b') s.erase(0, 2);
    if (s.empty() || s[0] == '_' || s.back() == '_' || s.find("__") != std::string::npos) return {};
    s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
    for (char c : s) {
        const int d = std::isdigit(static_cast<unsigned char>(c))   ? c - '0'
                      : std::isalpha(static_cast<unsigned char>(c)) ? (c | 0x20) - 'a' + 10
                                                                    : 99;
        if (d >= base) return {};
    }
    errno = 0;
    const unsigned long long v = std::strtoull(s.c_str(), nullptr, base);
    if (errno == ERANGE || v > static_cast<unsigned long long>(INT64_MAX)) return {};
    return neg ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
}

// Python's float(str).
std::optional<double> parse_py_float(const std::string& text) {
    std::string s = py_strip(text, nullptr, true, true);
    std::string lower = str_lower(s);
    const size_t sign = !lower.empty() && (lower[0] == '+' || lower[0] == '-') ? 1 : 0;
    const std::string body = lower.substr(sign);
    const double sgn = sign && lower[0] == '-' ? -1.0 : 1.0;
    if (body == "inf" || body == "infinity") return sgn * HUGE_VAL;
    if (body == "nan") return std::nan("");
    if (body.empty() || body.find_first_not_of("0123456789._e+-") != std::string::npos) return {};
    if (body[0] == '_' || body.back() == '_' || body.find("__") != std::string::npos) return {};
    s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (end == s.c_str() || *end != '\0') return {};
    return v;
}

// Python's `%` string formatting (Jinja2's `format` filter and the % operator).
std::string percent_format(const std::string& fmt, const Value& arg) {
    std::vector<Value> args;
    const ObjectData* mapping = arg.kind == Kind::Object ? arg.obj.get() : nullptr;
    if (arg.kind == Kind::Array && arg.arr->is_tuple)
        args = arg.arr->items;
    else
        args.push_back(arg);
    size_t next = 0;
    bool used_mapping = false;
    std::string out;
    for (size_t i = 0; i < fmt.size(); ++i) {
        if (fmt[i] != '%') {
            out += fmt[i];
            continue;
        }
        if (++i >= fmt.size()) throw EvalError("incomplete format");
        std::string key;
        if (fmt[i] == '(') {
            const size_t close = fmt.find(')', i);
            if (close == std::string::npos) throw EvalError("incomplete format key");
            key = fmt.substr(i + 1, close - i - 1);
            i = close + 1;
        }
        std::string spec = "%";
        while (i < fmt.size() && std::string_view("-+ #0").find(fmt[i]) != std::string_view::npos)
            spec += fmt[i++];
        // Widths and precisions of more than 7 digits would make more than 32 MiB (and
        // overflow the int they are read into).
        auto digits = [&]() {
            const size_t begin = i;
            while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i])))
                spec += fmt[i++];
            if (i - begin > 7) throw EvalError("format width too large");
            return std::atoi(fmt.substr(begin, i - begin).c_str());
        };
        digits();
        int precision = -1;
        if (i < fmt.size() && fmt[i] == '.') {
            spec += fmt[i++];
            precision = digits();
        }
        while (i < fmt.size() && (fmt[i] == 'h' || fmt[i] == 'l' || fmt[i] == 'L')) ++i;
        if (i >= fmt.size()) throw EvalError("incomplete format");
        const char conv = fmt[i];
        if (conv == '%') {
            out += '%';
            continue;
        }
        Value v;
        if (!key.empty()) {
            if (!mapping) throw EvalError("format requires a mapping");
            const Value* found = mapping->find(std::string_view(key));
            if (!found) throw EvalError("KeyError: '" + key + "'");
            v = *found;
            used_mapping = true;
        } else {
            if (next >= args.size()) throw EvalError("not enough arguments for format string");
            v = args[next++];
        }
        if (conv == 's' || conv == 'r' || conv == 'a') {
            std::string text = conv == 's' ? to_str(v) : to_repr(v);
            if (precision >= 0 && text.size() > static_cast<size_t>(precision))
                text.resize(static_cast<size_t>(precision));
            // width and the '-' flag
            size_t w = 0;
            bool left = spec.find('-') != std::string::npos;
            for (size_t k = 1; k < spec.size() && spec[k] != '.'; ++k)
                if (std::isdigit(static_cast<unsigned char>(spec[k])))
                    w = w * 10 + static_cast<size_t>(spec[k] - '0');
            const size_t len = count_code_points(text);
            if (w > kMaxStringBytes) throw EvalError("format width too large");
            if (len < w)
                text = left ? text + std::string(w - len, ' ') : std::string(w - len, ' ') + text;
            out += text;
        } else if (std::string_view("diouxXc").find(conv) != std::string_view::npos) {
            int64_t n;
            if (is_integral(v))
                n = int_of(v);
            else if (v.kind == Kind::Float && conv != 'c' && conv != 'x' && conv != 'X' &&
                     conv != 'o')
                n = static_cast<int64_t>(v.f);
            else
                throw EvalError(std::string("%") + conv + " format: a number is required, not " +
                                type_name(v));
            if (conv == 'c') {
                if (n < 0 || n > 0x10FFFF) throw EvalError("%c arg not in range(0x110000)");
                append_utf8(out, static_cast<uint32_t>(n));
                continue;
            }
            out += format_c(spec + "ll" + (conv == 'i' || conv == 'u' ? 'd' : conv),
                            static_cast<long long>(n));
        } else if (std::string_view("eEfFgG").find(conv) != std::string_view::npos) {
            if (!is_number(v))
                throw EvalError(std::string("%") + conv + " format: a number is required, not " +
                                type_name(v));
            out += format_c(spec + conv, double_of(v));
        } else {
            throw EvalError(std::string("unsupported format character '") + conv + "'");
        }
        if (out.size() > kMaxStringBytes) throw EvalError("string too long");
    }
    if (!used_mapping && !mapping && next < args.size())
        throw EvalError("not all arguments converted during string formatting");
    return out;
}

}  // namespace edgellm::jinja::detail
