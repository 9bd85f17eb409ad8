// Jinja2 for chat templates (see jinja.h). Top to bottom: text helpers (UTF-8, Python's
// whitespace and case mapping), the value type and its Python behaviour (str(), repr(),
// ==, <, json.dumps), the lexer, the parser (an AST of Expr and Node), and the tree-walking
// interpreter with its filters, tests, methods and globals.
//
// Errors: the lexer and parser throw TemplateError (with the line); the value helpers and
// the interpreter throw EvalError (message only), which the innermost expression or
// statement being evaluated turns into a TemplateError carrying its line. render() turns
// both into Result::fail; nothing escapes it.
#include "text/jinja.h"

#include "text/unicode.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace edgellm::jinja {
namespace {

// ---- limits: a bad template gets an error, never a crash or a hang ----------------------
constexpr int kMaxParseDepth = 100;        // nesting of expressions and of blocks
constexpr int kMaxCallDepth = 50;          // nested macro calls
constexpr int kMaxRunDepth = 400;          // nested evaluations at run time (~1 KiB of stack each)
constexpr int kMaxValueDepth = 256;        // nesting of lists and dicts
constexpr int64_t kMaxSteps = 10'000'000;  // evaluated expressions + statements + iterations
constexpr size_t kMaxStringBytes = 32u << 20;  // any one string (the output included)
constexpr size_t kMaxBuiltBytes = 256u << 20;  // all strings and lists built, summed
constexpr int64_t kMaxListLength = 100'000;    // range(), list repetition, split()

struct TemplateError : std::runtime_error {
    TemplateError(int l, const std::string& message) : std::runtime_error(message), line(l) {}
    int line;
};

struct EvalError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// Work done inside one step: one expression can do far more than the steps count (compare,
// copy or print a structure shared at every level, 2^60 leaves from 60 lists; search
// 32 MiB for a needle that almost matches everywhere; `x in big_list` in a loop). It is
// counted here, in items compared, copied or printed and bytes decoded or compared.
// render() runs on one thread from start to end and resets it.
constexpr int64_t kMaxWork = 250'000'000;  // ~1-4 s of the slowest units
thread_local int64_t t_work = 0;
void work(size_t units) {
    t_work += static_cast<int64_t>(std::min<size_t>(units, kMaxWork));
    if (t_work > kMaxWork)
        throw EvalError("template takes too long (more than " + std::to_string(kMaxWork) +
                        " units of work)");
}

// =========================================================================================
// Text helpers
// =========================================================================================

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

// split() and splitlines() make one Value per part: bounded like range().
void check_parts(size_t n) {
    if (n > static_cast<size_t>(kMaxListLength))
        throw EvalError("too many parts (more than " + std::to_string(kMaxListLength) + ")");
}

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

// =========================================================================================
// Values
// =========================================================================================

enum class Kind : uint8_t {
    Undefined,
    None,
    Bool,
    Int,
    Float,
    String,
    Array,      // a list, or a tuple (ArrayData::is_tuple)
    Object,     // a dict, keys in insertion order
    Namespace,  // namespace(): the one mutable object
    Callable,   // macros, bound methods, globals
};

struct ArrayData;
struct ObjectData;
struct Callable;

struct Value {
    Kind kind = Kind::Undefined;
    bool b = false;
    int64_t i = 0;
    double f = 0;
    std::string s;  // String: the text (UTF-8); Undefined: why, for the error when misused
    std::shared_ptr<ArrayData> arr;
    std::shared_ptr<ObjectData> obj;  // Object and Namespace
    std::shared_ptr<Callable> fn;

    static Value undefined(std::string why) {
        Value v;
        v.s = std::move(why);
        return v;
    }
    static Value none() {
        Value v;
        v.kind = Kind::None;
        return v;
    }
    static Value boolean(bool x) {
        Value v;
        v.kind = Kind::Bool;
        v.b = x;
        return v;
    }
    static Value integer(int64_t x) {
        Value v;
        v.kind = Kind::Int;
        v.i = x;
        return v;
    }
    static Value real(double x) {
        Value v;
        v.kind = Kind::Float;
        v.f = x;
        return v;
    }
    static Value string(std::string x) {
        Value v;
        v.kind = Kind::String;
        v.s = std::move(x);
        return v;
    }
    bool is(Kind k) const { return kind == k; }
};

struct ArrayData {
    std::vector<Value> items;
    bool is_tuple = false;
    // What Jinja2's map, select, reject, selectattr, rejectattr, unique, items and reverse
    // return: a Python generator. It iterates like a list but is always true, has no
    // len(), cannot be indexed and prints as an object.
    bool is_generator = false;
    int depth = 1;  // nesting of lists/dicts, this one included
};

struct ObjectData {
    std::vector<std::pair<Value, Value>> items;  // insertion order, as Python's dict
    int depth = 1;
    const Value* find(const Value& key) const;
    const Value* find(std::string_view key) const {
        work(items.size());
        for (const auto& [k, v] : items)
            if (k.kind == Kind::String && k.s == key) return &v;
        return nullptr;
    }
    void set(Value key, Value value);
};

class Interpreter;

struct Args {
    std::vector<Value> pos;
    std::vector<std::pair<std::string, Value>> kw;
};

struct Callable {
    std::string name;
    std::function<Value(Interpreter&, Args&)> call;
};

int depth_of(const Value& v) {
    if (v.kind == Kind::Array) return v.arr->depth;
    if (v.kind == Kind::Object) return v.obj->depth;
    return v.kind == Kind::Namespace ? 1 : 0;
}

// Lists, tuples and dicts are made here, so that nesting stays bounded (destroying and
// printing them recurse).
Value make_list(std::vector<Value> items, bool is_tuple = false) {
    work(items.size());
    int depth = 0;
    for (const Value& x : items) depth = std::max(depth, depth_of(x));
    if (depth + 1 > kMaxValueDepth)
        throw EvalError("lists and dicts nested too deeply (more than " +
                        std::to_string(kMaxValueDepth) + " levels)");
    Value v;
    v.kind = Kind::Array;
    v.arr = std::make_shared<ArrayData>();
    v.arr->items = std::move(items);
    v.arr->is_tuple = is_tuple;
    v.arr->depth = depth + 1;
    return v;
}

Value make_generator(std::vector<Value> items) {
    Value v = make_list(std::move(items));
    v.arr->is_generator = true;
    return v;
}

Value make_dict(std::shared_ptr<ObjectData> d) {
    work(d->items.size());
    int depth = 0;
    for (const auto& [k, x] : d->items) depth = std::max({depth, depth_of(k), depth_of(x)});
    if (depth + 1 > kMaxValueDepth)
        throw EvalError("lists and dicts nested too deeply (more than " +
                        std::to_string(kMaxValueDepth) + " levels)");
    d->depth = depth + 1;
    Value v;
    v.kind = Kind::Object;
    v.obj = std::move(d);
    return v;
}

Value make_callable(std::string name, std::function<Value(Interpreter&, Args&)> fn) {
    Value v;
    v.kind = Kind::Callable;
    v.fn = std::make_shared<Callable>(Callable{std::move(name), std::move(fn)});
    return v;
}

bool is_number(const Value& v) {
    return v.kind == Kind::Int || v.kind == Kind::Float || v.kind == Kind::Bool;
}
bool is_integral(const Value& v) {
    return v.kind == Kind::Int || v.kind == Kind::Bool;
}
int64_t int_of(const Value& v) {
    return v.kind == Kind::Bool ? (v.b ? 1 : 0) : v.i;
}
double double_of(const Value& v) {
    return v.kind == Kind::Float ? v.f : static_cast<double>(int_of(v));
}

// Python's type names, for error messages.
std::string type_name(const Value& v) {
    switch (v.kind) {
        case Kind::Undefined:
            return "Undefined";
        case Kind::None:
            return "NoneType";
        case Kind::Bool:
            return "bool";
        case Kind::Int:
            return "int";
        case Kind::Float:
            return "float";
        case Kind::String:
            return "str";
        case Kind::Array:
            return v.arr->is_generator ? "generator" : (v.arr->is_tuple ? "tuple" : "list");
        case Kind::Object:
            return "dict";
        case Kind::Namespace:
            return "Namespace";
        case Kind::Callable:
            return "function";
    }
    return "?";
}

// Jinja2's object_type_repr (in "'dict object' has no attribute 'x'").
std::string object_type_repr(const Value& v) {
    if (v.kind == Kind::None) return "None";
    if (v.kind == Kind::Namespace) return "jinja2.utils.Namespace object";
    return type_name(v) + " object";
}

bool truthy(const Value& v) {
    switch (v.kind) {
        case Kind::Undefined:
        case Kind::None:
            return false;
        case Kind::Bool:
            return v.b;
        case Kind::Int:
            return v.i != 0;
        case Kind::Float:
            return v.f != 0;
        case Kind::String:
            return !v.s.empty();
        case Kind::Array:
            return v.arr->is_generator || !v.arr->items.empty();
        case Kind::Object:
            return !v.obj->items.empty();
        case Kind::Namespace:
        case Kind::Callable:
            return true;
    }
    return false;
}

// Python's ==.
bool py_equal(const Value& a, const Value& b) {
    work(1);
    if (is_number(a) && is_number(b)) {
        if (is_integral(a) && is_integral(b)) return int_of(a) == int_of(b);
        return double_of(a) == double_of(b);
    }
    if (a.kind != b.kind) return false;
    switch (a.kind) {
        case Kind::Undefined:
        case Kind::None:
            return true;
        case Kind::String:
            work(std::min(a.s.size(), b.s.size()) / 8);
            return a.s == b.s;
        case Kind::Array: {
            if (a.arr->is_generator || b.arr->is_generator) return a.arr == b.arr;
            const auto& x = a.arr->items;
            const auto& y = b.arr->items;
            if (a.arr->is_tuple != b.arr->is_tuple || x.size() != y.size()) return false;
            for (size_t k = 0; k < x.size(); ++k)
                if (!py_equal(x[k], y[k])) return false;
            return true;
        }
        case Kind::Object: {
            if (a.obj->items.size() != b.obj->items.size()) return false;
            for (const auto& [k, v] : a.obj->items) {
                const Value* other = b.obj->find(k);
                if (!other || !py_equal(v, *other)) return false;
            }
            return true;
        }
        case Kind::Namespace:
            return a.obj == b.obj;
        case Kind::Callable:
            return a.fn == b.fn;
        default:
            return false;
    }
}

const Value* ObjectData::find(const Value& key) const {
    if (key.kind == Kind::String) return find(std::string_view(key.s));
    for (const auto& [k, v] : items)
        if (py_equal(k, key)) return &v;
    return nullptr;
}

void ObjectData::set(Value key, Value value) {
    for (auto& [k, v] : items) {
        if (py_equal(k, key)) {
            v = std::move(value);
            return;
        }
    }
    items.emplace_back(std::move(key), std::move(value));
}

// Python's ordering (<): numbers, strings (code point order = UTF-8 byte order), lists
// and tuples element by element. Returns <0, 0, >0.
int py_compare(const Value& a, const Value& b, const char* op) {
    work(1);
    if (a.kind == Kind::Undefined) throw EvalError(a.s);
    if (b.kind == Kind::Undefined) throw EvalError(b.s);
    if (is_number(a) && is_number(b)) {
        if (is_integral(a) && is_integral(b))
            return int_of(a) < int_of(b) ? -1 : (int_of(a) > int_of(b) ? 1 : 0);
        const double x = double_of(a), y = double_of(b);
        return x < y ? -1 : (x > y ? 1 : 0);
    }
    if (a.kind == Kind::String && b.kind == Kind::String) {
        work(std::min(a.s.size(), b.s.size()) / 8);
        return a.s.compare(b.s);
    }
    if (a.kind == Kind::Array && b.kind == Kind::Array && a.arr->is_tuple == b.arr->is_tuple &&
        !a.arr->is_generator && !b.arr->is_generator) {
        const auto& x = a.arr->items;
        const auto& y = b.arr->items;
        for (size_t k = 0; k < x.size() && k < y.size(); ++k) {
            if (py_equal(x[k], y[k])) continue;
            return py_compare(x[k], y[k], op);
        }
        return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
    }
    throw EvalError(std::string("'") + op + "' not supported between instances of '" +
                    type_name(a) + "' and '" + type_name(b) + "'");
}

// Python's repr() of a str: single quotes unless the text has ' and no ".
void repr_string(std::string& out, std::string_view s) {
    const bool has_single = s.find('\'') != std::string_view::npos;
    const bool has_double = s.find('"') != std::string_view::npos;
    const char quote = has_single && !has_double ? '"' : '\'';
    out += quote;
    char buf[16];
    for (size_t i = 0; i < s.size();) {
        const uint32_t c = next_code_point(s, i);
        if (c == static_cast<uint32_t>(quote) || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c == '\t') {
            out += "\\t";
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) {
            std::snprintf(buf, sizeof(buf), "\\x%02x", c);
            out += buf;
        } else if ((c >= 0xD800 && c <= 0xDFFF) || c == 0x1680 || (c >= 0x2000 && c <= 0x200F) ||
                   (c >= 0x2028 && c <= 0x202F) || (c >= 0x205F && c <= 0x2064) || c == 0x3000 ||
                   c == 0xFEFF || (c >= 0xE000 && c <= 0xF8FF) || (c >= 0xFFF9 && c <= 0xFFFB) ||
                   c == 0xFFFE || c == 0xFFFF) {
            std::snprintf(buf, sizeof(buf), "\\u%04x", c);
            out += buf;
        } else if (c >= 0xF0000) {
            std::snprintf(buf, sizeof(buf), "\\U%08x", c);
            out += buf;
        } else {
            append_utf8(out, c);
        }
    }
    out += quote;
}

void append_repr(std::string& out, const Value& v, int depth);

// Python's str(): what {{ value }} prints.
void append_str(std::string& out, const Value& v, int depth) {
    if (depth > kMaxValueDepth + 8) throw EvalError("value nested too deeply to print");
    if (out.size() > kMaxStringBytes) throw EvalError("string too long (more than 32 MiB)");
    work(1);
    switch (v.kind) {
        case Kind::Undefined:
            return;
        case Kind::None:
            out += "None";
            return;
        case Kind::Bool:
            out += v.b ? "True" : "False";
            return;
        case Kind::Int:
            out += std::to_string(v.i);
            return;
        case Kind::Float:
            out += float_repr(v.f);
            return;
        case Kind::String:
            out += v.s;
            return;
        case Kind::Array: {
            if (v.arr->is_generator) {
                out += "<generator object>";  // Python adds an address
                return;
            }
            const auto& items = v.arr->items;
            out += v.arr->is_tuple ? '(' : '[';
            for (size_t k = 0; k < items.size(); ++k) {
                if (k) out += ", ";
                append_repr(out, items[k], depth + 1);
            }
            if (v.arr->is_tuple && items.size() == 1) out += ',';
            out += v.arr->is_tuple ? ')' : ']';
            return;
        }
        case Kind::Object:
        case Kind::Namespace: {
            if (v.kind == Kind::Namespace) out += "<Namespace ";
            out += '{';
            bool first = true;
            for (const auto& [k, x] : v.obj->items) {
                if (!first) out += ", ";
                first = false;
                append_repr(out, k, depth + 1);
                out += ": ";
                append_repr(out, x, depth + 1);
            }
            out += '}';
            if (v.kind == Kind::Namespace) out += '>';
            return;
        }
        case Kind::Callable:
            out += "<function " + v.fn->name + ">";
            return;
    }
}

void append_repr(std::string& out, const Value& v, int depth) {
    if (v.kind == Kind::String)
        repr_string(out, v.s);
    else if (v.kind == Kind::Undefined)
        out += "Undefined";
    else
        append_str(out, v, depth);
}

std::string to_str(const Value& v) {
    if (v.kind == Kind::String) return v.s;
    std::string out;
    append_str(out, v, 0);
    return out;
}

std::string to_repr(const Value& v) {
    std::string out;
    append_repr(out, v, 0);
    return out;
}

// ---- json.dumps -------------------------------------------------------------------------

struct JsonStyle {
    std::optional<std::string> indent;  // none: one line
    std::string item_sep = ", ";
    std::string key_sep = ": ";
    bool sort_keys = false;
    bool ensure_ascii = false;
};

void json_quote(std::string& out, std::string_view s, bool ensure_ascii) {
    char buf[16];
    out += '"';
    for (size_t i = 0; i < s.size();) {
        const uint32_t c = next_code_point(s, i);
        switch (c) {
            case '"':
                out += "\\\"";
                break;
            case '\\':
                out += "\\\\";
                break;
            case '\n':
                out += "\\n";
                break;
            case '\r':
                out += "\\r";
                break;
            case '\t':
                out += "\\t";
                break;
            case '\b':
                out += "\\b";
                break;
            case '\f':
                out += "\\f";
                break;
            default:
                if (c < 0x20 || (ensure_ascii && c >= 0x7F)) {
                    if (c >= 0x10000) {
                        const uint32_t v = c - 0x10000;
                        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (v >> 10),
                                      0xDC00 + (v & 0x3FF));
                    } else {
                        std::snprintf(buf, sizeof(buf), "\\u%04x", c);
                    }
                    out += buf;
                } else {
                    append_utf8(out, c);
                }
        }
    }
    out += '"';
}

std::string json_number(const Value& v) {
    if (v.kind == Kind::Float) {
        if (std::isnan(v.f)) return "NaN";
        if (std::isinf(v.f)) return v.f > 0 ? "Infinity" : "-Infinity";
        return float_repr(v.f);
    }
    return std::to_string(int_of(v));
}

void json_dump(std::string& out, const Value& v, const JsonStyle& st, int level) {
    if (out.size() > kMaxStringBytes) throw EvalError("tojson output too long");
    auto newline = [&](int lvl) {
        out += '\n';
        for (int k = 0; k < lvl; ++k) out += *st.indent;
    };
    switch (v.kind) {
        case Kind::None:
            out += "null";
            return;
        case Kind::Bool:
            out += v.b ? "true" : "false";
            return;
        case Kind::Int:
        case Kind::Float:
            out += json_number(v);
            return;
        case Kind::String:
            json_quote(out, v.s, st.ensure_ascii);
            return;
        case Kind::Array: {
            if (v.arr->is_generator)
                throw EvalError("Object of type generator is not JSON serializable");
            const auto& items = v.arr->items;
            if (items.empty()) {
                out += "[]";
                return;
            }
            out += '[';
            if (st.indent) newline(level + 1);
            for (size_t k = 0; k < items.size(); ++k) {
                if (k) {
                    out += st.item_sep;
                    if (st.indent) newline(level + 1);
                }
                json_dump(out, items[k], st, level + 1);
            }
            if (st.indent) newline(level);
            out += ']';
            return;
        }
        case Kind::Object: {
            std::vector<std::pair<std::string, const Value*>> items;
            for (const auto& [k, x] : v.obj->items) {
                std::string key;
                if (k.kind == Kind::String)
                    key = k.s;
                else if (k.kind == Kind::Int || k.kind == Kind::Float)
                    key = json_number(k);
                else if (k.kind == Kind::Bool)
                    key = k.b ? "true" : "false";
                else if (k.kind == Kind::None)
                    key = "null";
                else
                    throw EvalError("keys must be str, int, float, bool or None, not " +
                                    type_name(k));
                items.emplace_back(std::move(key), &x);
            }
            if (items.empty()) {
                out += "{}";
                return;
            }
            if (st.sort_keys)
                std::stable_sort(items.begin(), items.end(),
                                 [](const auto& a, const auto& b) { return a.first < b.first; });
            out += '{';
            if (st.indent) newline(level + 1);
            for (size_t k = 0; k < items.size(); ++k) {
                if (k) {
                    out += st.item_sep;
                    if (st.indent) newline(level + 1);
                }
                json_quote(out, items[k].first, st.ensure_ascii);
                out += st.key_sep;
                json_dump(out, *items[k].second, st, level + 1);
            }
            if (st.indent) newline(level);
            out += '}';
            return;
        }
        case Kind::Undefined:
        case Kind::Namespace:
        case Kind::Callable:
            throw EvalError("Object of type " + type_name(v) + " is not JSON serializable");
    }
}

template <class Json>
Value from_json(const Json& j, int depth) {
    if (depth > kMaxValueDepth)
        throw EvalError("the context is nested too deeply (more than " +
                        std::to_string(kMaxValueDepth) + " levels)");
    if (j.is_null()) return Value::none();
    if (j.is_boolean()) return Value::boolean(j.template get<bool>());
    if (j.is_number_unsigned()) {
        const auto u = j.template get<uint64_t>();
        if (u <= static_cast<uint64_t>(INT64_MAX)) return Value::integer(static_cast<int64_t>(u));
        return Value::real(static_cast<double>(u));
    }
    if (j.is_number_integer()) return Value::integer(j.template get<int64_t>());
    if (j.is_number_float()) return Value::real(j.template get<double>());
    if (j.is_string()) return Value::string(j.template get<std::string>());
    if (j.is_array()) {
        std::vector<Value> items;
        items.reserve(j.size());
        for (const auto& x : j) items.push_back(from_json(x, depth + 1));
        return make_list(std::move(items));
    }
    if (j.is_object()) {
        auto d = std::make_shared<ObjectData>();
        d->items.reserve(j.size());
        for (auto it = j.begin(); it != j.end(); ++it)
            d->items.emplace_back(Value::string(it.key()), from_json(it.value(), depth + 1));
        return make_dict(std::move(d));
    }
    if (j.is_binary()) throw EvalError("the context holds a binary value");
    return Value::undefined("a discarded JSON value");
}

// =========================================================================================
// Lexer
// =========================================================================================

enum class Tok : uint8_t {
    Text,
    VarBegin,    // {{
    VarEnd,      // }}
    BlockBegin,  // {%
    BlockEnd,    // %}
    Name,
    String,
    Int,
    Float,
    Op,
    Eof,
};

struct Token {
    Tok type = Tok::Eof;
    int line = 0;
    std::string text;  // Text: the data; Name, Op: the spelling; String: the decoded value
    int64_t int_value = 0;
    double float_value = 0;
};

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

// =========================================================================================
// AST
// =========================================================================================

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
    enum class Kind {
        Literal,   // literal
        Name,      // name
        List,      // items
        Tuple,     // items
        Dict,      // items: key, value, key, value, ...
        GetAttr,   // items[0].name
        GetItem,   // items[0][items[1]]
        Slice,     // items[0][items[1]:items[2]:items[3]], each bound may be null
        Call,      // items[0](items[1..], kwargs)
        Filter,    // items[0] | name(items[1..], kwargs); items[0] null in filter blocks
        Test,      // items[0] is name(items[1..], kwargs)
        Neg,       // -items[0]
        Pos,       // +items[0]
        Not,       // not items[0]
        Binary,    // items[0] name items[1]: + - * / // % **
        Concat,    // items[0] ~ items[1] ~ ...
        Compare,   // items[0] ops[0] items[1] ops[1] items[2] ...
        And,       // items[0] and items[1]
        Or,        // items[0] or items[1]
        CondExpr,  // items[0] if items[1] else items[2] (items[2] may be null)
    };
    Kind kind;
    int line;
    int depth = 1;  // of the tree below, this node included (bounded: evaluation recurses)
    Value literal;
    std::string name;
    std::vector<ExprPtr> items;
    std::vector<std::string> ops;
    std::vector<std::pair<std::string, ExprPtr>> kwargs;

    Expr(Kind k, int l) : kind(k), line(l) {}
};

ExprPtr make_expr(Expr::Kind k, int line) {
    return std::make_unique<Expr>(k, line);
}

// Every node is finished here once its children are in: loops in the parser (a + b + c,
// long filter chains, x.a.b.c) build deep trees without recursing, and evaluating or
// destroying a tree recurses, so its depth is bounded where it is built.
constexpr int kMaxExprDepth = 200;

ExprPtr finish(ExprPtr e) {
    int depth = 0;
    for (const ExprPtr& c : e->items)
        if (c) depth = std::max(depth, c->depth);
    for (const auto& kv : e->kwargs) depth = std::max(depth, kv.second->depth);
    e->depth = depth + 1;
    if (e->depth > kMaxExprDepth)
        throw TemplateError(e->line, "expression nested too deeply (more than " +
                                         std::to_string(kMaxExprDepth) + " levels)");
    return e;
}

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
    enum class Kind {
        Text,      // text
        Output,    // {{ exprs[0] }}
        If,        // if exprs[k]: bodies[k]; else bodies[exprs.size()] when present
        For,       // for targets in exprs[0] [if exprs[1]]: bodies[0]; else bodies[1]
        Set,       // set targets (or targets[0].ns_attr) = exprs[0]
        SetBlock,  // set targets[0] | exprs (filters) = output of bodies[0]
        Macro,     // macro name(targets = defaults): bodies[0]
        Break,
        Continue,
        With,         // with targets = exprs: bodies[0] (also {% generation %})
        FilterBlock,  // filter exprs[0]: bodies[0]
    };
    Kind kind;
    int line;
    std::string text;
    std::string name;
    std::string ns_attr;
    bool target_is_tuple = false;
    std::vector<std::string> targets;
    std::vector<ExprPtr> exprs;
    std::vector<ExprPtr> defaults;  // Macro: one per parameter, null when required
    // Macro: its body names `varargs` / `kwargs`, so extra positional / keyword arguments
    // are taken into them (Jinja2's catch_varargs, catch_kwargs).
    bool catch_varargs = false;
    bool catch_kwargs = false;
    std::vector<Body> bodies;

    Node(Kind k, int l) : kind(k), line(l) {}
};

NodePtr make_node(Node::Kind k, int line) {
    return std::make_unique<Node>(k, line);
}

// =========================================================================================
// Parser (after Jinja2's parser.py, same precedence and the same quirks)
// =========================================================================================

class Parser {
  public:
    explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

    Body parse_template() {
        std::string found;
        return subparse({}, nullptr, 0, &found);
    }

  private:
    std::vector<Token> toks_;
    size_t i_ = 0;
    int depth_ = 0;
    int loop_depth_ = 0;
    bool saw_varargs_ = false;  // the names `varargs` and `kwargs` were read (macro bodies)
    bool saw_kwargs_ = false;

    struct DepthGuard {
        DepthGuard(int& d, int line) : depth(d) {
            if (++depth > kMaxParseDepth)
                throw TemplateError(line, "template nested too deeply (more than " +
                                              std::to_string(kMaxParseDepth) + " levels)");
        }
        ~DepthGuard() { --depth; }
        int& depth;
    };

    const Token& cur() const { return toks_[i_]; }
    const Token& peek() const { return toks_[std::min(i_ + 1, toks_.size() - 1)]; }
    void advance() {
        if (i_ + 1 < toks_.size()) ++i_;
    }
    bool at_op(std::string_view op) const { return cur().type == Tok::Op && cur().text == op; }
    bool at_name(std::string_view n) const { return cur().type == Tok::Name && cur().text == n; }
    bool skip_op(std::string_view op) {
        if (!at_op(op)) return false;
        advance();
        return true;
    }
    bool skip_name(std::string_view n) {
        if (!at_name(n)) return false;
        advance();
        return true;
    }
    [[noreturn]] void fail_expected(const std::string& what) const {
        throw TemplateError(cur().line, "expected " + what + ", got " + describe(cur()));
    }
    void expect_op(std::string_view op) {
        if (!skip_op(op)) fail_expected("'" + std::string(op) + "'");
    }
    std::string expect_name() {
        if (cur().type != Tok::Name) fail_expected("a name");
        std::string n = cur().text;
        advance();
        return n;
    }
    void expect(Tok type, const char* what) {
        if (cur().type != type) fail_expected(what);
        advance();
    }
    void expect_block_end() { expect(Tok::BlockEnd, "end of statement block '%}'"); }

    // Statements until one of `ends` (the end name is consumed and stored in *found).
    Body subparse(std::initializer_list<const char*> ends, const char* opener, int opener_line,
                  std::string* found) {
        Body body;
        for (;;) {
            const Token& t = cur();
            switch (t.type) {
                case Tok::Eof: {
                    if (!opener) return body;
                    std::string want;
                    for (const char* e : ends)
                        want += std::string(want.empty() ? "" : " or ") + "'" + e + "'";
                    throw TemplateError(t.line, std::string("unexpected end of template: '") +
                                                    opener + "' from line " +
                                                    std::to_string(opener_line) +
                                                    " is not closed (expected " + want + ")");
                }
                case Tok::Text: {
                    auto n = make_node(Node::Kind::Text, t.line);
                    n->text = t.text;
                    body.push_back(std::move(n));
                    advance();
                    break;
                }
                case Tok::VarBegin: {
                    auto n = make_node(Node::Kind::Output, t.line);
                    advance();
                    n->exprs.push_back(parse_tuple(true, nullptr, false));
                    expect(Tok::VarEnd, "end of print statement '}}'");
                    body.push_back(std::move(n));
                    break;
                }
                case Tok::BlockBegin: {
                    advance();
                    if (cur().type == Tok::Name) {
                        for (const char* e : ends) {
                            if (cur().text == e) {
                                *found = e;
                                advance();
                                return body;
                            }
                        }
                    }
                    body.push_back(parse_statement());
                    expect_block_end();
                    break;
                }
                default:
                    fail_expected("template text or a tag");
            }
        }
    }

    NodePtr parse_statement() {
        if (cur().type != Tok::Name) fail_expected("a statement name");
        const std::string name = cur().text;
        const int line = cur().line;
        DepthGuard guard(depth_, line);
        advance();
        if (name == "for") return parse_for(line);
        if (name == "if") return parse_if(line);
        if (name == "set") return parse_set(line);
        if (name == "macro") return parse_macro(line);
        if (name == "with") return parse_with(line);
        if (name == "filter") return parse_filter_block(line);
        if (name == "generation") {  // transformers' AssistantTracker: renders its body
            auto n = make_node(Node::Kind::With, line);
            expect_block_end();
            std::string found;
            n->bodies.push_back(subparse({"endgeneration"}, "generation", line, &found));
            return n;
        }
        if (name == "print") {
            auto n = make_node(Node::Kind::Output, line);
            n->exprs.push_back(parse_tuple(true, nullptr, false));
            return n;
        }
        if (name == "break" || name == "continue") {
            if (loop_depth_ == 0) throw TemplateError(line, "'" + name + "' outside of a for loop");
            return make_node(name == "break" ? Node::Kind::Break : Node::Kind::Continue, line);
        }
        static const char* const ends[] = {"endfor",        "endif",    "elif",    "else",
                                           "endset",        "endmacro", "endwith", "endfilter",
                                           "endgeneration", "endraw"};
        for (const char* e : ends)
            if (name == e)
                throw TemplateError(line, "unexpected '" + name + "' (no block to close)");
        throw TemplateError(line, "unsupported statement '" + name + "'");
    }

    // Names separated by commas (optionally in parentheses), or name.attr when allowed.
    void parse_assign_target(Node& n, bool allow_ns) {
        if (allow_ns && cur().type == Tok::Name && peek().type == Tok::Op && peek().text == ".") {
            n.targets.push_back(expect_name());
            advance();
            n.ns_attr = expect_name();
            return;
        }
        const bool parens = skip_op("(");
        for (;;) {
            n.targets.push_back(expect_name());
            if (!skip_op(",")) break;
            n.target_is_tuple = true;
            if (cur().type != Tok::Name) break;  // trailing comma
        }
        if (parens) {
            n.target_is_tuple = true;
            expect_op(")");
        }
    }

    NodePtr parse_for(int line) {
        auto n = make_node(Node::Kind::For, line);
        parse_assign_target(*n, false);
        if (!skip_name("in")) fail_expected("'in'");
        n->exprs.push_back(parse_tuple(false, "recursive", false));
        if (skip_name("if")) n->exprs.push_back(parse_expression(true));
        if (at_name("recursive"))
            throw TemplateError(cur().line, "unsupported: recursive for loops");
        expect_block_end();
        std::string found;
        ++loop_depth_;
        n->bodies.push_back(subparse({"endfor", "else"}, "for", line, &found));
        --loop_depth_;
        if (found == "else") {
            expect_block_end();
            n->bodies.push_back(subparse({"endfor"}, "for", line, &found));
        }
        return n;
    }

    NodePtr parse_if(int line) {
        auto n = make_node(Node::Kind::If, line);
        for (;;) {
            n->exprs.push_back(parse_tuple(false, nullptr, false));
            expect_block_end();
            std::string found;
            n->bodies.push_back(subparse({"elif", "else", "endif"}, "if", line, &found));
            if (found == "elif") continue;
            if (found == "else") {
                expect_block_end();
                n->bodies.push_back(subparse({"endif"}, "if", line, &found));
            }
            return n;
        }
    }

    NodePtr parse_set(int line) {
        auto n = make_node(Node::Kind::Set, line);
        parse_assign_target(*n, true);
        if (skip_op("=")) {
            n->exprs.push_back(parse_tuple(true, nullptr, false));
            return n;
        }
        if (!n->ns_attr.empty() || n->target_is_tuple)
            throw TemplateError(line, "a block 'set' takes a single name");
        n->kind = Node::Kind::SetBlock;
        if (at_op("|")) n->exprs.push_back(parse_filter(nullptr, false));
        expect_block_end();
        std::string found;
        n->bodies.push_back(subparse({"endset"}, "set", line, &found));
        return n;
    }

    NodePtr parse_macro(int line) {
        auto n = make_node(Node::Kind::Macro, line);
        n->name = expect_name();
        expect_op("(");
        while (!at_op(")")) {
            if (!n->targets.empty()) {
                expect_op(",");
                if (at_op(")")) break;
            }
            n->targets.push_back(expect_name());
            if (skip_op("=")) {
                n->defaults.push_back(parse_expression(true));
            } else {
                if (!n->defaults.empty() && n->defaults.back())
                    throw TemplateError(cur().line,
                                        "non-default argument follows default argument");
                n->defaults.push_back(nullptr);
            }
        }
        advance();
        expect_block_end();
        const int saved_loops = loop_depth_;
        const bool saved_varargs = saw_varargs_, saved_kwargs = saw_kwargs_;
        loop_depth_ = 0;
        saw_varargs_ = saw_kwargs_ = false;
        std::string found;
        n->bodies.push_back(subparse({"endmacro"}, "macro", line, &found));
        loop_depth_ = saved_loops;
        n->catch_varargs = saw_varargs_;
        n->catch_kwargs = saw_kwargs_;
        saw_varargs_ = saw_varargs_ || saved_varargs;
        saw_kwargs_ = saw_kwargs_ || saved_kwargs;
        return n;
    }

    NodePtr parse_with(int line) {
        auto n = make_node(Node::Kind::With, line);
        while (cur().type != Tok::BlockEnd) {
            if (!n->targets.empty()) expect_op(",");
            n->targets.push_back(expect_name());
            expect_op("=");
            n->exprs.push_back(parse_expression(true));
        }
        expect_block_end();
        std::string found;
        n->bodies.push_back(subparse({"endwith"}, "with", line, &found));
        return n;
    }

    NodePtr parse_filter_block(int line) {
        auto n = make_node(Node::Kind::FilterBlock, line);
        n->exprs.push_back(parse_filter(nullptr, true));
        expect_block_end();
        std::string found;
        n->bodies.push_back(subparse({"endfilter"}, "filter", line, &found));
        return n;
    }

    // ---- expressions ----

    bool is_tuple_end(const char* extra_end) const {
        return cur().type == Tok::VarEnd || cur().type == Tok::BlockEnd || at_op(")") ||
               (extra_end && at_name(extra_end));
    }

    ExprPtr parse_tuple(bool with_condexpr, const char* extra_end, bool explicit_parens) {
        const int line = cur().line;
        std::vector<ExprPtr> items;
        bool is_tuple = false;
        for (;;) {
            if (!items.empty()) expect_op(",");
            if (is_tuple_end(extra_end)) break;
            items.push_back(parse_expression(with_condexpr));
            if (at_op(","))
                is_tuple = true;
            else
                break;
        }
        if (!is_tuple) {
            if (!items.empty()) return std::move(items[0]);
            if (!explicit_parens) fail_expected("an expression");
        }
        auto e = make_expr(Expr::Kind::Tuple, line);
        e->items = std::move(items);
        return finish(std::move(e));
    }

    ExprPtr parse_expression(bool with_condexpr) {
        return with_condexpr ? parse_condexpr() : parse_or();
    }

    ExprPtr parse_condexpr() {
        int line = cur().line;
        ExprPtr expr1 = parse_or();
        while (skip_name("if")) {
            ExprPtr cond = parse_or();
            ExprPtr expr3;
            if (skip_name("else")) {  // a if b else c if d else ...: recursion
                DepthGuard guard(depth_, cur().line);
                expr3 = parse_condexpr();
            }
            auto e = make_expr(Expr::Kind::CondExpr, line);
            e->items.push_back(std::move(expr1));
            e->items.push_back(std::move(cond));
            e->items.push_back(std::move(expr3));
            expr1 = finish(std::move(e));
            line = cur().line;
        }
        return expr1;
    }

    ExprPtr binary(Expr::Kind k, int line, ExprPtr a, ExprPtr b, std::string op = {}) {
        auto e = make_expr(k, line);
        e->name = std::move(op);
        e->items.push_back(std::move(a));
        e->items.push_back(std::move(b));
        return finish(std::move(e));
    }

    ExprPtr parse_or() {
        const int line = cur().line;
        ExprPtr left = parse_and();
        while (skip_name("or")) left = binary(Expr::Kind::Or, line, std::move(left), parse_and());
        return left;
    }

    ExprPtr parse_and() {
        const int line = cur().line;
        ExprPtr left = parse_not();
        while (skip_name("and")) left = binary(Expr::Kind::And, line, std::move(left), parse_not());
        return left;
    }

    ExprPtr parse_not() {
        if (at_name("not")) {
            const int line = cur().line;
            DepthGuard guard(depth_, line);
            advance();
            auto e = make_expr(Expr::Kind::Not, line);
            e->items.push_back(parse_not());
            return finish(std::move(e));
        }
        return parse_compare();
    }

    ExprPtr parse_compare() {
        const int line = cur().line;
        ExprPtr first = parse_math1();
        std::vector<std::string> ops;
        std::vector<ExprPtr> operands;
        for (;;) {
            if (cur().type == Tok::Op &&
                (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                 cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
                ops.push_back(cur().text);
                advance();
            } else if (skip_name("in")) {
                ops.emplace_back("in");
            } else if (at_name("not") && peek().type == Tok::Name && peek().text == "in") {
                advance();
                advance();
                ops.emplace_back("not in");
            } else {
                break;
            }
            operands.push_back(parse_math1());
        }
        if (ops.empty()) return first;
        auto e = make_expr(Expr::Kind::Compare, line);
        e->items.push_back(std::move(first));
        for (auto& o : operands) e->items.push_back(std::move(o));
        e->ops = std::move(ops);
        return finish(std::move(e));
    }

    ExprPtr parse_math1() {
        const int line = cur().line;
        ExprPtr left = parse_concat();
        while (at_op("+") || at_op("-")) {
            std::string op = cur().text;
            advance();
            left = binary(Expr::Kind::Binary, line, std::move(left), parse_concat(), op);
        }
        return left;
    }

    ExprPtr parse_concat() {
        const int line = cur().line;
        ExprPtr first = parse_math2();
        if (!at_op("~")) return first;
        auto e = make_expr(Expr::Kind::Concat, line);
        e->items.push_back(std::move(first));
        while (skip_op("~")) e->items.push_back(parse_math2());
        return finish(std::move(e));
    }

    ExprPtr parse_math2() {
        const int line = cur().line;
        ExprPtr left = parse_pow();
        while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
            std::string op = cur().text;
            advance();
            left = binary(Expr::Kind::Binary, line, std::move(left), parse_pow(), op);
        }
        return left;
    }

    ExprPtr parse_pow() {  // left-associative in Jinja2: 2**3**2 == 64
        const int line = cur().line;
        ExprPtr left = parse_unary(true);
        while (skip_op("**"))
            left = binary(Expr::Kind::Binary, line, std::move(left), parse_unary(true), "**");
        return left;
    }

    ExprPtr parse_unary(bool with_filter) {
        const int line = cur().line;
        DepthGuard guard(depth_, line);
        ExprPtr node;
        if (at_op("-") || at_op("+")) {
            const bool neg = at_op("-");
            advance();
            node = make_expr(neg ? Expr::Kind::Neg : Expr::Kind::Pos, line);
            node->items.push_back(parse_unary(false));
            node = finish(std::move(node));
        } else {
            node = parse_primary();
        }
        node = parse_postfix(std::move(node));
        if (with_filter) node = parse_filter_expr(std::move(node));
        return node;
    }

    ExprPtr parse_primary() {
        const Token& t = cur();
        const int line = t.line;
        if (t.type == Tok::Name) {
            const std::string n = t.text;
            advance();
            auto e = make_expr(Expr::Kind::Literal, line);
            if (n == "true" || n == "True") {
                e->literal = Value::boolean(true);
            } else if (n == "false" || n == "False") {
                e->literal = Value::boolean(false);
            } else if (n == "none" || n == "None") {
                e->literal = Value::none();
            } else {
                e->kind = Expr::Kind::Name;
                e->name = n;
                saw_varargs_ = saw_varargs_ || n == "varargs";
                saw_kwargs_ = saw_kwargs_ || n == "kwargs";
            }
            return e;
        }
        if (t.type == Tok::String) {
            std::string s;
            while (cur().type == Tok::String) {  // adjacent literals concatenate
                s += cur().text;
                advance();
            }
            auto e = make_expr(Expr::Kind::Literal, line);
            e->literal = Value::string(std::move(s));
            return e;
        }
        if (t.type == Tok::Int || t.type == Tok::Float) {
            auto e = make_expr(Expr::Kind::Literal, line);
            e->literal =
                t.type == Tok::Int ? Value::integer(t.int_value) : Value::real(t.float_value);
            advance();
            return e;
        }
        if (skip_op("(")) {
            ExprPtr e = parse_tuple(true, nullptr, true);
            expect_op(")");
            return e;
        }
        if (skip_op("[")) {
            auto e = make_expr(Expr::Kind::List, line);
            while (!at_op("]")) {
                if (!e->items.empty()) {
                    expect_op(",");
                    if (at_op("]")) break;
                }
                e->items.push_back(parse_expression(true));
            }
            advance();
            return finish(std::move(e));
        }
        if (skip_op("{")) {
            auto e = make_expr(Expr::Kind::Dict, line);
            while (!at_op("}")) {
                if (!e->items.empty()) {
                    expect_op(",");
                    if (at_op("}")) break;
                }
                e->items.push_back(parse_expression(true));
                expect_op(":");
                e->items.push_back(parse_expression(true));
            }
            advance();
            return finish(std::move(e));
        }
        throw TemplateError(line, "unexpected " + describe(t));
    }

    ExprPtr parse_postfix(ExprPtr node) {
        for (;;) {
            const int line = cur().line;
            if (skip_op(".")) {
                if (cur().type == Tok::Name) {
                    auto e = make_expr(Expr::Kind::GetAttr, line);
                    e->name = cur().text;
                    advance();
                    e->items.push_back(std::move(node));
                    node = finish(std::move(e));
                } else if (cur().type == Tok::Int) {
                    auto key = make_expr(Expr::Kind::Literal, line);
                    key->literal = Value::integer(cur().int_value);
                    advance();
                    node = binary(Expr::Kind::GetItem, line, std::move(node), std::move(key));
                } else {
                    fail_expected("a name or a number after '.'");
                }
            } else if (skip_op("[")) {
                node = parse_subscript(std::move(node), line);
            } else if (at_op("(")) {
                node = parse_call(std::move(node));
            } else {
                return node;
            }
        }
    }

    ExprPtr parse_subscript(ExprPtr node, int line) {
        // One subscript: an expression or a slice; several make a tuple key.
        std::vector<ExprPtr> keys;
        ExprPtr slice;
        while (!at_op("]")) {
            if (!keys.empty() || slice) expect_op(",");
            ExprPtr start;
            if (!at_op(":")) {
                start = parse_expression(true);
                if (!at_op(":")) {
                    keys.push_back(std::move(start));
                    continue;
                }
            }
            advance();  // ':'
            auto s = make_expr(Expr::Kind::Slice, line);
            s->items.push_back(nullptr);  // the object, filled below
            s->items.push_back(std::move(start));
            s->items.push_back(at_op(":") || at_op("]") || at_op(",") ? nullptr
                                                                      : parse_expression(true));
            ExprPtr step;
            if (skip_op(":") && !at_op("]") && !at_op(",")) step = parse_expression(true);
            s->items.push_back(std::move(step));
            if (slice || !keys.empty()) throw TemplateError(line, "unsupported: tuples of slices");
            slice = std::move(s);
        }
        advance();  // ']'
        if (slice) {
            if (!keys.empty()) throw TemplateError(line, "unsupported: tuples of slices");
            slice->items[0] = std::move(node);
            return finish(std::move(slice));
        }
        if (keys.empty()) throw TemplateError(line, "expected a subscript expression");
        ExprPtr key;
        if (keys.size() == 1) {
            key = std::move(keys[0]);
        } else {
            key = make_expr(Expr::Kind::Tuple, line);
            key->items = std::move(keys);
            key = finish(std::move(key));
        }
        return binary(Expr::Kind::GetItem, line, std::move(node), std::move(key));
    }

    void parse_call_args(Expr& e) {
        expect_op("(");
        bool any = false;
        while (!at_op(")")) {
            if (any) {
                expect_op(",");
                if (at_op(")")) break;
            }
            any = true;
            if (at_op("*") || at_op("**"))
                throw TemplateError(cur().line, "unsupported: *args and **kwargs in calls");
            if (cur().type == Tok::Name && peek().type == Tok::Op && peek().text == "=") {
                std::string key = cur().text;
                advance();
                advance();
                e.kwargs.emplace_back(std::move(key), parse_expression(true));
            } else {
                if (!e.kwargs.empty())
                    throw TemplateError(cur().line, "positional argument follows keyword argument");
                e.items.push_back(parse_expression(true));
            }
        }
        advance();
    }

    ExprPtr parse_call(ExprPtr callee) {
        auto e = make_expr(Expr::Kind::Call, cur().line);
        e->items.push_back(std::move(callee));
        parse_call_args(*e);
        return finish(std::move(e));
    }

    std::string parse_dotted_name() {
        std::string n = expect_name();
        while (skip_op(".")) n += "." + expect_name();
        return n;
    }

    // `| name(args)` chains; with `start_inline` the first filter has no pipe.
    ExprPtr parse_filter(ExprPtr subject, bool start_inline) {
        while (at_op("|") || start_inline) {
            const int line = cur().line;
            if (!start_inline) advance();
            start_inline = false;
            auto e = make_expr(Expr::Kind::Filter, line);
            e->name = parse_dotted_name();
            e->items.push_back(std::move(subject));
            if (at_op("(")) parse_call_args(*e);
            subject = finish(std::move(e));
        }
        return subject;
    }

    ExprPtr parse_test(ExprPtr subject) {
        const int line = cur().line;
        advance();  // 'is'
        const bool negated = skip_name("not");
        auto e = make_expr(Expr::Kind::Test, line);
        e->name = parse_dotted_name();
        e->items.push_back(std::move(subject));
        if (at_op("(")) {
            parse_call_args(*e);
        } else if ((cur().type == Tok::Name || cur().type == Tok::String ||
                    cur().type == Tok::Int || cur().type == Tok::Float || at_op("(") ||
                    at_op("[") || at_op("{")) &&
                   !at_name("else") && !at_name("or") && !at_name("and")) {
            if (at_name("is"))
                throw TemplateError(cur().line, "you cannot chain multiple tests with is");
            e->items.push_back(parse_postfix(parse_primary()));
        }
        e = finish(std::move(e));
        if (!negated) return e;
        auto n = make_expr(Expr::Kind::Not, line);
        n->items.push_back(std::move(e));
        return finish(std::move(n));
    }

    ExprPtr parse_filter_expr(ExprPtr node) {
        for (;;) {
            if (at_op("|"))
                node = parse_filter(std::move(node), false);
            else if (at_name("is"))
                node = parse_test(std::move(node));
            else if (at_op("("))
                node = parse_call(std::move(node));
            else
                return node;
        }
    }
};

// =========================================================================================
// Interpreter
// =========================================================================================

enum class Flow { Normal, Break, Continue };

// One scope: the template's top level, a loop iteration, a macro call, a with block.
using Frame = std::unordered_map<std::string, Value>;
// The scopes a macro was defined in (it is a closure over them, as in Jinja2), held
// weakly: a macro stored in its own scope makes no reference cycle.
using Closure = std::vector<std::weak_ptr<Frame>>;

using Slots = std::vector<std::optional<Value>>;

// Binds call arguments to named parameters the way Python does: positional first, then
// by keyword. One slot per parameter, empty when not given.
Slots bind(const std::string& what, Args& a, std::initializer_list<const char*> params) {
    Slots out(params.size());
    if (a.pos.size() > params.size())
        throw EvalError(what + "() takes at most " + std::to_string(params.size()) +
                        " argument(s) (" + std::to_string(a.pos.size()) + " given)");
    for (size_t k = 0; k < a.pos.size(); ++k) out[k] = std::move(a.pos[k]);
    for (auto& [key, value] : a.kw) {
        size_t idx = 0;
        for (const char* p : params) {
            if (key == p) break;
            ++idx;
        }
        if (idx == params.size())
            throw EvalError(what + "() got an unexpected keyword argument '" + key + "'");
        if (out[idx]) throw EvalError(what + "() got multiple values for argument '" + key + "'");
        out[idx] = std::move(value);
    }
    return out;
}

bool given(const std::optional<Value>& v) {
    return v && v->kind != Kind::None;
}

int64_t int_arg(const std::optional<Value>& v, const char* what, int64_t fallback) {
    if (!given(v)) return fallback;
    if (!is_integral(*v))
        throw EvalError(std::string(what) + " must be an integer, not " + type_name(*v));
    return int_of(*v);
}

bool bool_arg(const std::optional<Value>& v, bool fallback) {
    return v ? truthy(*v) : fallback;
}

std::string str_arg(const std::optional<Value>& v, const char* what) {
    if (!v || v->kind != Kind::String)
        throw EvalError(std::string(what) + " must be a string" +
                        (v ? ", not " + type_name(*v) : std::string()));
    return v->s;
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

// snprintf into a string of the size it needs (widths and precisions come from templates).
template <class T>
std::string format_c(const std::string& spec, T value) {
    const int n = std::snprintf(nullptr, 0, spec.c_str(), value);
    if (n < 0) throw EvalError("bad format '" + spec + "'");
    if (static_cast<size_t>(n) > kMaxStringBytes) throw EvalError("format width too large");
    std::string out(static_cast<size_t>(n) + 1, '\0');
    std::snprintf(out.data(), out.size(), spec.c_str(), value);
    out.pop_back();
    return out;
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

class Interpreter {
  public:
    explicit Interpreter(const Value& context) {
        scopes_ = {std::make_shared<Frame>(), std::make_shared<Frame>()};
        Frame& globals = *scopes_[0];
        globals["range"] =
            make_callable("range", [](Interpreter&, Args& a) { return builtin_range(a); });
        globals["dict"] = make_callable("dict", [](Interpreter&, Args& a) {
            auto d = std::make_shared<ObjectData>();
            if (!a.pos.empty()) throw EvalError("dict() takes keyword arguments only here");
            for (auto& [k, v] : a.kw) d->set(Value::string(k), std::move(v));
            return make_dict(std::move(d));
        });
        globals["namespace"] = make_callable(
            "namespace", [](Interpreter& in, Args& a) { return in.make_namespace(a); });
        globals["raise_exception"] =
            make_callable("raise_exception", [](Interpreter&, Args& a) -> Value {
                auto p = bind("raise_exception", a, {"message"});
                throw EvalError("raise_exception: " + (p[0] ? to_str(*p[0]) : std::string()));
            });
        globals["strftime_now"] = make_callable("strftime_now", [](Interpreter&, Args& a) {
            auto p = bind("strftime_now", a, {"format"});
            const std::string fmt = str_arg(p[0], "strftime_now format");
            const std::time_t now = std::time(nullptr);
            std::tm tm{};
            localtime_r(&now, &tm);
            // strftime returns 0 when the buffer is too small (or the result is empty).
            for (size_t size = 256; size <= 65536; size *= 16) {
                std::string buf(size, '\0');
                const size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
                if (n > 0 || fmt.empty()) return Value::string(buf.substr(0, n));
            }
            return Value::string("");
        });
        for (const auto& [k, v] : context.obj->items) globals[k.s] = v;
    }

    std::string run(const Body& body) {
        std::string result;
        out_ = &result;
        exec_body(body);
        return result;
    }

    // namespace() objects are the only mutable values, so the only way to a reference cycle
    // (`set ns.me = ns`); emptying them all, whether the rendering succeeded or not, breaks any.
    ~Interpreter() {
        for (auto& ns : namespaces_) ns->items.clear();
    }
    Interpreter(const Interpreter&) = delete;
    Interpreter& operator=(const Interpreter&) = delete;

    // Runs with the scopes of the definition (not the caller's), plus its own.
    Value call_macro(const Node& m, const Closure& closure, Args& a) {
        if (call_depth_ >= kMaxCallDepth)
            throw EvalError("macro calls nested too deeply (more than " +
                            std::to_string(kMaxCallDepth) + ")");
        if (a.pos.size() > m.targets.size() && !m.catch_varargs)
            throw EvalError("macro '" + m.name + "' takes not more than " +
                            std::to_string(m.targets.size()) + " argument(s)");
        auto frame = std::make_shared<Frame>();
        std::vector<bool> bound(m.targets.size(), false);
        std::vector<Value> varargs;
        auto kwargs = std::make_shared<ObjectData>();
        for (size_t k = 0; k < a.pos.size(); ++k) {
            if (k >= m.targets.size()) {
                varargs.push_back(std::move(a.pos[k]));
                continue;
            }
            (*frame)[m.targets[k]] = std::move(a.pos[k]);
            bound[k] = true;
        }
        for (auto& [key, v] : a.kw) {
            const auto it = std::find(m.targets.begin(), m.targets.end(), key);
            if (it == m.targets.end() && m.catch_kwargs) {
                kwargs->set(Value::string(key), std::move(v));
                continue;
            }
            if (it == m.targets.end())
                throw EvalError("macro '" + m.name + "' takes no keyword argument '" + key + "'");
            const size_t idx = static_cast<size_t>(it - m.targets.begin());
            if (bound[idx])
                throw EvalError("macro '" + m.name + "' got multiple values for '" + key + "'");
            (*frame)[key] = std::move(v);
            bound[idx] = true;
        }
        if (m.catch_varargs) (*frame)["varargs"] = make_list(std::move(varargs), true);
        if (m.catch_kwargs) (*frame)["kwargs"] = make_dict(std::move(kwargs));
        std::vector<std::shared_ptr<Frame>> saved_scopes = {scopes_[0], scopes_[1]};
        saved_scopes.swap(scopes_);
        for (const auto& weak : closure)
            if (auto f = weak.lock()) scopes_.push_back(std::move(f));
        scopes_.push_back(frame);
        std::string* saved_out = out_;
        std::string buffer;
        ++call_depth_;
        for (size_t k = 0; k < m.targets.size(); ++k) {
            if (bound[k]) continue;
            (*frame)[m.targets[k]] =
                m.defaults[k]
                    ? eval(*m.defaults[k])
                    : Value::undefined("parameter '" + m.targets[k] + "' was not provided");
        }
        out_ = &buffer;
        exec_body(m.bodies[0]);
        out_ = saved_out;
        --call_depth_;
        scopes_.swap(saved_scopes);
        return Value::string(std::move(buffer));
    }

    Value call_method(const Value& self, const std::string& name, Args& a);

    Value make_namespace(Args& a) {
        auto d = std::make_shared<ObjectData>();
        if (a.pos.size() > 1) throw EvalError("namespace() takes at most one positional argument");
        if (!a.pos.empty()) {
            if (a.pos[0].kind != Kind::Object)
                throw EvalError("namespace() argument must be a dict");
            d->items = a.pos[0].obj->items;
        }
        for (auto& [k, v] : a.kw) d->set(Value::string(k), std::move(v));
        namespaces_.push_back(d);
        Value v;
        v.kind = Kind::Namespace;
        v.obj = std::move(d);
        return v;
    }

  private:
    std::vector<std::shared_ptr<Frame>> scopes_;  // [0] globals and context, [1] top level, ...
    std::string* out_ = nullptr;
    int64_t steps_ = 0;
    size_t built_bytes_ = 0;
    int call_depth_ = 0;
    int run_depth_ = 0;  // eval() and exec() frames on the stack

    // Counts one eval() or exec() frame: macros multiply the nesting of their bodies, so
    // the stack is bounded here, across all of them.
    struct RunDepth {
        explicit RunDepth(int& d) : depth(d) {
            if (++depth > kMaxRunDepth)
                throw EvalError("template nested too deeply at run time (more than " +
                                std::to_string(kMaxRunDepth) + " levels)");
        }
        ~RunDepth() { --depth; }
        int& depth;
    };
    std::vector<std::shared_ptr<ObjectData>> namespaces_;

    static Value builtin_range(Args& a) {
        auto p = bind("range", a, {"start", "stop", "step"});
        int64_t start = 0, stop, step = 1;
        if (!p[0]) throw EvalError("range expected at least 1 argument, got 0");
        if (!p[1]) {
            stop = int_arg(p[0], "range() argument", 0);
        } else {
            start = int_arg(p[0], "range() argument", 0);
            stop = int_arg(p[1], "range() argument", 0);
            step = int_arg(p[2], "range() argument", 1);
        }
        if (step == 0) throw EvalError("range() arg 3 must not be zero");
        // Python's length of a range, in 128 bits (stop - start overflows 64, doubles round).
        const __int128 span = static_cast<__int128>(stop) - start;
        __int128 n = 0;
        if (step > 0 && span > 0) n = (span - 1) / step + 1;
        if (step < 0 && span < 0) n = (-span - 1) / -static_cast<__int128>(step) + 1;
        if (n > kMaxListLength)
            throw EvalError("range() too long (more than " + std::to_string(kMaxListLength) +
                            " items)");
        std::vector<Value> items;
        items.reserve(static_cast<size_t>(n));
        for (int64_t k = 0; k < static_cast<int64_t>(n); ++k)
            items.push_back(
                Value::integer(static_cast<int64_t>(start + static_cast<__int128>(k) * step)));
        return make_list(std::move(items));
    }

    void step() {
        if (++steps_ > kMaxSteps)
            throw EvalError("template takes too long (more than " + std::to_string(kMaxSteps) +
                            " steps)");
    }

    void charge(size_t bytes) {
        built_bytes_ += bytes;
        if (built_bytes_ > kMaxBuiltBytes)
            throw EvalError(
                "template builds too much data (more than 256 MiB of strings and lists)");
    }

    static void check_size(size_t bytes) {
        if (bytes > kMaxStringBytes) throw EvalError("string too long (more than 32 MiB)");
    }

    void emit(std::string_view s) {
        check_size(out_->size() + s.size());
        charge(s.size());
        out_->append(s);
    }

    Value lookup(const std::string& name) const {
        for (size_t k = scopes_.size(); k-- > 0;) {
            const auto it = scopes_[k]->find(name);
            if (it != scopes_[k]->end()) return it->second;
        }
        return Value::undefined("'" + name + "' is undefined");
    }

    void assign(const std::string& name, Value v) { (*scopes_.back())[name] = std::move(v); }
    void push_scope() { scopes_.push_back(std::make_shared<Frame>()); }

    // ---- statements ----

    Flow exec_body(const Body& body) {
        for (const NodePtr& n : body) {
            const Flow f = exec(*n);
            if (f != Flow::Normal) return f;
        }
        return Flow::Normal;
    }

    Flow exec(const Node& n) {
        try {
            RunDepth guard(run_depth_);
            step();
            return exec_node(n);
        } catch (const EvalError& e) {
            throw TemplateError(n.line, e.what());
        }
    }

    Flow exec_scoped(const Body& body) {
        push_scope();
        const Flow f = exec_body(body);
        scopes_.pop_back();
        return f;
    }

    std::string capture(const Body& body) {
        std::string* saved = out_;
        std::string buffer;
        out_ = &buffer;
        exec_scoped(body);
        out_ = saved;
        return buffer;
    }

    // Binds loop or set targets: one name takes the value, several unpack it.
    void bind_targets(const Node& n, const Value& v) {
        if (n.targets.size() == 1 && !n.target_is_tuple) {
            assign(n.targets[0], v);
            return;
        }
        const std::vector<Value> parts = iterate(v);
        if (parts.size() != n.targets.size())
            throw EvalError(parts.size() > n.targets.size()
                                ? "too many values to unpack (expected " +
                                      std::to_string(n.targets.size()) + ")"
                                : "not enough values to unpack (expected " +
                                      std::to_string(n.targets.size()) + ", got " +
                                      std::to_string(parts.size()) + ")");
        for (size_t k = 0; k < parts.size(); ++k) assign(n.targets[k], parts[k]);
    }

    Flow exec_node(const Node& n) {
        switch (n.kind) {
            case Node::Kind::Text:
                emit(n.text);
                return Flow::Normal;
            case Node::Kind::Output: {
                const Value v = eval(*n.exprs[0]);
                if (v.kind == Kind::String)
                    emit(v.s);
                else
                    emit(to_str(v));
                return Flow::Normal;
            }
            case Node::Kind::If: {
                for (size_t k = 0; k < n.exprs.size(); ++k)
                    if (truthy(eval(*n.exprs[k]))) return exec_body(n.bodies[k]);
                if (n.bodies.size() > n.exprs.size()) return exec_body(n.bodies.back());
                return Flow::Normal;
            }
            case Node::Kind::For:
                return exec_for(n);
            case Node::Kind::Set: {
                Value v = eval(*n.exprs[0]);
                if (!n.ns_attr.empty()) {
                    const Value ns = lookup(n.targets[0]);
                    if (ns.kind != Kind::Namespace)
                        throw EvalError("cannot assign attribute on non-namespace object '" +
                                        n.targets[0] + "'");
                    ns.obj->set(Value::string(n.ns_attr), std::move(v));
                } else {
                    bind_targets(n, v);
                }
                return Flow::Normal;
            }
            case Node::Kind::SetBlock: {
                Value v = Value::string(capture(n.bodies[0]));
                if (!n.exprs.empty()) v = apply_filter_chain(*n.exprs[0], std::move(v));
                assign(n.targets[0], std::move(v));
                return Flow::Normal;
            }
            case Node::Kind::Macro: {
                const Node* m = &n;
                Closure closure(scopes_.begin() + 2, scopes_.end());
                assign(n.name, make_callable(n.name, [m, closure](Interpreter& in, Args& a) {
                           return in.call_macro(*m, closure, a);
                       }));
                return Flow::Normal;
            }
            case Node::Kind::Break:
                return Flow::Break;
            case Node::Kind::Continue:
                return Flow::Continue;
            case Node::Kind::With: {
                std::vector<Value> values;
                for (const ExprPtr& e : n.exprs) values.push_back(eval(*e));
                push_scope();
                for (size_t k = 0; k < values.size(); ++k)
                    assign(n.targets[k], std::move(values[k]));
                const Flow f = exec_body(n.bodies[0]);
                scopes_.pop_back();
                return f;
            }
            case Node::Kind::FilterBlock: {
                const Value v =
                    apply_filter_chain(*n.exprs[0], Value::string(capture(n.bodies[0])));
                emit(to_str(v));
                return Flow::Normal;
            }
        }
        return Flow::Normal;
    }

    // The `loop` variable: like Jinja2's LoopContext, one object per loop, advanced in
    // place at each iteration (update_loop).
    static Value make_loop(size_t length) {
        auto d = std::make_shared<ObjectData>();
        for (const char* key : {"index", "index0", "revindex", "revindex0", "first", "last",
                                "length", "depth", "depth0", "previtem", "nextitem", "cycle"})
            d->items.emplace_back(Value::string(key), Value());
        d->items[6].second = Value::integer(static_cast<int64_t>(length));
        d->items[7].second = Value::integer(1);
        d->items[8].second = Value::integer(0);
        std::weak_ptr<ObjectData> self = d;
        d->items[11].second = make_callable("cycle", [self](Interpreter&, Args& a) {
            if (a.pos.empty()) throw EvalError("no items for cycling given");
            const auto loop = self.lock();
            const int64_t idx = loop ? loop->items[1].second.i : 0;
            return a.pos[static_cast<size_t>(idx) % a.pos.size()];
        });
        Value v;
        v.kind = Kind::Object;
        v.obj = std::move(d);
        return v;
    }

    static void update_loop(ObjectData& loop, const std::vector<Value>& items, size_t k) {
        const auto n = static_cast<int64_t>(items.size());
        const auto idx = static_cast<int64_t>(k);
        loop.items[0].second = Value::integer(idx + 1);
        loop.items[1].second = Value::integer(idx);
        loop.items[2].second = Value::integer(n - idx);
        loop.items[3].second = Value::integer(n - idx - 1);
        loop.items[4].second = Value::boolean(idx == 0);
        loop.items[5].second = Value::boolean(idx == n - 1);
        loop.items[9].second = k > 0 ? items[k - 1] : Value::undefined("there is no previous item");
        loop.items[10].second =
            k + 1 < items.size() ? items[k + 1] : Value::undefined("there is no next item");
    }

    Flow exec_for(const Node& n) {
        std::vector<Value> items = iterate(eval(*n.exprs[0]));
        if (n.exprs.size() > 1) {  // for x in xs if cond: the loop only sees what passes
            std::vector<Value> kept;
            for (Value& item : items) {
                step();
                push_scope();
                bind_targets(n, item);
                const bool keep = truthy(eval(*n.exprs[1]));
                scopes_.pop_back();
                if (keep) kept.push_back(std::move(item));
            }
            items = std::move(kept);
        }
        if (items.empty()) return n.bodies.size() > 1 ? exec_scoped(n.bodies[1]) : Flow::Normal;
        const Value loop = make_loop(items.size());
        for (size_t k = 0; k < items.size(); ++k) {
            step();
            push_scope();  // each iteration has its own scope, as in Jinja2
            bind_targets(n, items[k]);
            update_loop(*loop.obj, items, k);
            assign("loop", loop);
            const Flow f = exec_body(n.bodies[0]);
            scopes_.pop_back();
            if (f == Flow::Break) break;
        }
        return Flow::Normal;
    }

    // ---- expressions ----

    Value eval(const Expr& e) {
        try {
            RunDepth guard(run_depth_);
            step();
            Value v = eval_node(e);
            if (e.kind != Expr::Kind::Name && e.kind != Expr::Kind::Literal &&
                e.kind != Expr::Kind::GetAttr && e.kind != Expr::Kind::GetItem) {
                if (v.kind == Kind::String) {
                    check_size(v.s.size());
                    charge(v.s.size());
                } else if (v.kind == Kind::Array) {
                    charge(v.arr->items.size() * sizeof(Value));
                }
            }
            return v;
        } catch (const EvalError& err) {
            throw TemplateError(e.line, err.what());
        }
    }

    Args eval_args(const Expr& e, size_t first) {
        Args a;
        for (size_t k = first; k < e.items.size(); ++k) a.pos.push_back(eval(*e.items[k]));
        for (const auto& [key, x] : e.kwargs) a.kw.emplace_back(key, eval(*x));
        return a;
    }

    Value apply_filter_chain(const Expr& f, Value v) {
        if (f.items[0]) v = apply_filter_chain(*f.items[0], std::move(v));
        Args a = eval_args(f, 1);
        return apply_filter(f.name, std::move(v), a);
    }

    Value eval_node(const Expr& e) {
        switch (e.kind) {
            case Expr::Kind::Literal:
                return e.literal;
            case Expr::Kind::Name:
                return lookup(e.name);
            case Expr::Kind::List:
            case Expr::Kind::Tuple: {
                std::vector<Value> items;
                items.reserve(e.items.size());
                for (const ExprPtr& x : e.items) items.push_back(eval(*x));
                return make_list(std::move(items), e.kind == Expr::Kind::Tuple);
            }
            case Expr::Kind::Dict: {
                auto d = std::make_shared<ObjectData>();
                for (size_t k = 0; k + 1 < e.items.size(); k += 2) {
                    Value key = eval(*e.items[k]);
                    d->set(std::move(key), eval(*e.items[k + 1]));
                }
                return make_dict(std::move(d));
            }
            case Expr::Kind::GetAttr:
                return get_attr(eval(*e.items[0]), e.name);
            case Expr::Kind::GetItem: {
                const Value obj = eval(*e.items[0]);
                return get_item(obj, eval(*e.items[1]));
            }
            case Expr::Kind::Slice: {
                const Value obj = eval(*e.items[0]);
                std::optional<Value> bounds[3];
                for (size_t k = 0; k < 3; ++k)
                    if (e.items[k + 1]) bounds[k] = eval(*e.items[k + 1]);
                return slice(obj, bounds);
            }
            case Expr::Kind::Call: {
                const Value f = eval(*e.items[0]);
                Args a = eval_args(e, 1);
                return call_value(f, a);
            }
            case Expr::Kind::Filter: {
                Value subject = eval(*e.items[0]);
                Args a = eval_args(e, 1);
                return apply_filter(e.name, std::move(subject), a);
            }
            case Expr::Kind::Test: {
                const Value subject = eval(*e.items[0]);
                Args a = eval_args(e, 1);
                return Value::boolean(apply_test(e.name, subject, a));
            }
            case Expr::Kind::Neg:
            case Expr::Kind::Pos: {
                const Value v = eval(*e.items[0]);
                if (v.kind == Kind::Undefined) throw EvalError(v.s);
                const bool neg = e.kind == Expr::Kind::Neg;
                if (v.kind == Kind::Float) return Value::real(neg ? -v.f : v.f);
                if (is_integral(v)) {
                    const int64_t x = int_of(v);
                    if (neg && x == INT64_MIN) throw EvalError("integer overflow");
                    return Value::integer(neg ? -x : x);
                }
                throw EvalError(std::string("bad operand type for unary ") + (neg ? "-" : "+") +
                                ": '" + type_name(v) + "'");
            }
            case Expr::Kind::Not:
                return Value::boolean(!truthy(eval(*e.items[0])));
            case Expr::Kind::Binary: {
                const Value a = eval(*e.items[0]);
                const Value b = eval(*e.items[1]);
                return binary_op(e.name, a, b);
            }
            case Expr::Kind::Concat: {
                std::string s;
                for (const ExprPtr& x : e.items) {
                    const Value v = eval(*x);
                    s += v.kind == Kind::String ? v.s : to_str(v);
                    check_size(s.size());
                }
                return Value::string(std::move(s));
            }
            case Expr::Kind::Compare: {
                Value left = eval(*e.items[0]);
                for (size_t k = 0; k < e.ops.size(); ++k) {
                    Value right = eval(*e.items[k + 1]);
                    if (!compare(e.ops[k], left, right)) return Value::boolean(false);
                    left = std::move(right);
                }
                return Value::boolean(true);
            }
            case Expr::Kind::And: {
                Value a = eval(*e.items[0]);
                return truthy(a) ? eval(*e.items[1]) : a;
            }
            case Expr::Kind::Or: {
                Value a = eval(*e.items[0]);
                return truthy(a) ? a : eval(*e.items[1]);
            }
            case Expr::Kind::CondExpr: {
                if (truthy(eval(*e.items[1]))) return eval(*e.items[0]);
                if (e.items[2]) return eval(*e.items[2]);
                return Value::undefined("the inline if-expression on line " +
                                        std::to_string(e.line) +
                                        " evaluated to false and no else section was defined.");
            }
        }
        return Value::undefined("?");
    }

    static bool contains(const Value& container, const Value& item) {
        switch (container.kind) {
            case Kind::Undefined:
                return false;
            case Kind::String:
                if (item.kind != Kind::String)
                    throw EvalError("'in <string>' requires string as left operand, not " +
                                    type_name(item));
                return find_text(container.s, item.s, 0) != std::string::npos;
            case Kind::Array:
                for (const Value& x : container.arr->items)
                    if (py_equal(x, item)) return true;
                return false;
            case Kind::Object:
                if ((item.kind == Kind::Array && !item.arr->is_tuple) || item.kind == Kind::Object)
                    throw EvalError("unhashable type: '" + type_name(item) + "'");
                return container.obj->find(item) != nullptr;
            default:
                throw EvalError("argument of type '" + type_name(container) + "' is not iterable");
        }
    }

    static bool compare(const std::string& op, const Value& a, const Value& b) {
        if (op == "==") return py_equal(a, b);
        if (op == "!=") return !py_equal(a, b);
        if (op == "in") return contains(b, a);
        if (op == "not in") return !contains(b, a);
        const int c = py_compare(a, b, op.c_str());
        if (op == "<") return c < 0;
        if (op == "<=") return c <= 0;
        if (op == ">") return c > 0;
        return c >= 0;
    }

    static Value int_result(bool overflow, int64_t r) {
        if (overflow)
            throw EvalError("integer overflow (Python's integers are unbounded, these are 64-bit)");
        return Value::integer(r);
    }

    Value repeat(const Value& seq, int64_t times) {
        if (times < 0) times = 0;
        if (seq.kind == Kind::String ? seq.s.empty() : seq.arr->items.empty())
            times = std::min<int64_t>(times, 1);  // nothing to repeat: no loop of `times`
        if (seq.kind == Kind::String) {
            const auto t = static_cast<size_t>(times);
            if (!seq.s.empty() && t > kMaxStringBytes / seq.s.size())
                check_size(kMaxStringBytes + 1);
            std::string out;
            out.reserve(seq.s.size() * t);
            for (size_t k = 0; k < t; ++k) out += seq.s;
            return Value::string(std::move(out));
        }
        const auto& items = seq.arr->items;
        if (!items.empty() && times > kMaxListLength / static_cast<int64_t>(items.size()))
            throw EvalError("list too long (more than " + std::to_string(kMaxListLength) +
                            " items)");
        std::vector<Value> out;
        for (int64_t k = 0; k < times; ++k) out.insert(out.end(), items.begin(), items.end());
        return make_list(std::move(out), seq.arr->is_tuple);
    }

    Value binary_op(const std::string& op, const Value& a, const Value& b) {
        if (a.kind == Kind::Undefined) throw EvalError(a.s);
        if (b.kind == Kind::Undefined) throw EvalError(b.s);
        const bool ints = is_integral(a) && is_integral(b);
        const bool nums = is_number(a) && is_number(b);
        int64_t r = 0;
        if (op == "+") {
            if (ints) {
                const bool overflow = __builtin_add_overflow(int_of(a), int_of(b), &r);
                return int_result(overflow, r);
            }
            if (nums) return Value::real(double_of(a) + double_of(b));
            if (a.kind == Kind::String && b.kind == Kind::String) {
                check_size(a.s.size() + b.s.size());
                work((a.s.size() + b.s.size()) / 8);
                return Value::string(a.s + b.s);
            }
            if (a.kind == Kind::Array && b.kind == Kind::Array &&
                a.arr->is_tuple == b.arr->is_tuple && !a.arr->is_generator &&
                !b.arr->is_generator) {
                work(a.arr->items.size() + b.arr->items.size());  // the copy, before it is made
                std::vector<Value> items = a.arr->items;
                items.insert(items.end(), b.arr->items.begin(), b.arr->items.end());
                return make_list(std::move(items), a.arr->is_tuple);
            }
            if (a.kind == Kind::String && b.kind != Kind::String)
                throw EvalError("can only concatenate str (not \"" + type_name(b) + "\") to str");
        } else if (op == "-") {
            if (ints) {
                const bool overflow = __builtin_sub_overflow(int_of(a), int_of(b), &r);
                return int_result(overflow, r);
            }
            if (nums) return Value::real(double_of(a) - double_of(b));
        } else if (op == "*") {
            if (ints) {
                const bool overflow = __builtin_mul_overflow(int_of(a), int_of(b), &r);
                return int_result(overflow, r);
            }
            if (nums) return Value::real(double_of(a) * double_of(b));
            auto repeatable = [](const Value& x) {
                return x.kind == Kind::String || (x.kind == Kind::Array && !x.arr->is_generator);
            };
            if (repeatable(a) && is_integral(b)) return repeat(a, int_of(b));
            if (repeatable(b) && is_integral(a)) return repeat(b, int_of(a));
        } else if (op == "/") {
            if (nums) {
                if (double_of(b) == 0) throw EvalError("division by zero");
                return Value::real(double_of(a) / double_of(b));
            }
        } else if (op == "//" || op == "%") {
            if (ints) {
                const int64_t x = int_of(a), y = int_of(b);
                if (y == 0) throw EvalError("integer division or modulo by zero");
                if (x == INT64_MIN && y == -1) {
                    if (op == "%") return Value::integer(0);
                    throw EvalError("integer overflow");
                }
                int64_t q = x / y, m = x % y;
                if (m != 0 && ((m < 0) != (y < 0))) {
                    m += y;
                    --q;
                }
                return Value::integer(op == "//" ? q : m);
            }
            if (nums) {  // Python's float divmod
                const double x = double_of(a), y = double_of(b);
                if (y == 0) throw EvalError("float division by zero");
                double mod = std::fmod(x, y);
                double div = (x - mod) / y;
                if (mod != 0) {
                    if ((y < 0) != (mod < 0)) {
                        mod += y;
                        div -= 1.0;
                    }
                } else {
                    mod = std::copysign(0.0, y);
                }
                double floordiv;
                if (div != 0) {
                    floordiv = std::floor(div);
                    if (div - floordiv > 0.5) floordiv += 1.0;
                } else {
                    floordiv = std::copysign(0.0, x / y);
                }
                return Value::real(op == "//" ? floordiv : mod);
            }
            if (op == "%" && a.kind == Kind::String) return Value::string(percent_format(a.s, b));
        } else if (op == "**") {
            if (ints && int_of(b) >= 0) {
                int64_t base = int_of(a), e = int_of(b), result = 1;
                while (e > 0) {
                    if (e & 1)
                        if (__builtin_mul_overflow(result, base, &result))
                            return int_result(true, 0);
                    e >>= 1;
                    if (e > 0 && __builtin_mul_overflow(base, base, &base))
                        return int_result(true, 0);
                }
                return Value::integer(result);
            }
            if (nums) {
                const double x = double_of(a), y = double_of(b);
                if (x == 0 && y < 0) throw EvalError("0.0 cannot be raised to a negative power");
                if (x < 0 && y != std::floor(y))
                    throw EvalError("unsupported: a complex result of **");
                const double r = std::pow(x, y);
                if (std::isinf(r) && std::isfinite(x) && std::isfinite(y))
                    throw EvalError("OverflowError: numerical result out of range");
                return Value::real(r);
            }
        }
        throw EvalError("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" +
                        type_name(b) + "'");
    }

    Value call_value(const Value& f, Args& a) {
        if (f.kind == Kind::Callable) {
            const std::shared_ptr<Callable> fn = f.fn;  // keeps it alive through the call
            return fn->call(*this, a);
        }
        if (f.kind == Kind::Undefined) throw EvalError(f.s);
        throw EvalError("'" + type_name(f) + "' object is not callable");
    }

    // ---- attribute and item access (Jinja2's sandboxed getattr / getitem) ----

    static Value missing_attr(const Value& obj, const std::string& name) {
        return Value::undefined("'" + object_type_repr(obj) + "' has no attribute '" + name + "'");
    }

    static Value missing_item(const Value& obj, const Value& key) {
        if (key.kind == Kind::String) return missing_attr(obj, key.s);
        return Value::undefined(object_type_repr(obj) + " has no element " + to_repr(key));
    }

    static Value unsafe(const Value& obj, const std::string& name) {
        return Value::undefined("access to attribute '" + name + "' of '" + type_name(obj) +
                                "' object is unsafe.");
    }

    static bool one_of(const std::string& name, std::initializer_list<const char*> names) {
        for (const char* n : names)
            if (name == n) return true;
        return false;
    }

    static bool is_str_method(const std::string& n) {
        return one_of(n, {"capitalize",   "casefold",     "center",    "count",     "encode",
                          "endswith",     "expandtabs",   "find",      "format",    "format_map",
                          "index",        "isalnum",      "isalpha",   "isascii",   "isdecimal",
                          "isdigit",      "isidentifier", "islower",   "isnumeric", "isprintable",
                          "isspace",      "istitle",      "isupper",   "join",      "ljust",
                          "lower",        "lstrip",       "maketrans", "partition", "removeprefix",
                          "removesuffix", "replace",      "rfind",     "rindex",    "rjust",
                          "rpartition",   "rsplit",       "rstrip",    "split",     "splitlines",
                          "startswith",   "strip",        "swapcase",  "title",     "translate",
                          "upper",        "zfill"});
    }

    static Value bound_method(const Value& self, const std::string& name) {
        return make_callable(
            name, [self, name](Interpreter& in, Args& a) { return in.call_method(self, name, a); });
    }

    Value get_attr(const Value& obj, const std::string& name) {
        switch (obj.kind) {
            case Kind::Undefined:
                throw EvalError(obj.s);
            case Kind::String:
                return is_str_method(name) ? bound_method(obj, name) : missing_attr(obj, name);
            case Kind::Array:
                if (one_of(name, {"count", "index", "copy"})) return bound_method(obj, name);
                if (!obj.arr->is_tuple && one_of(name, {"append", "clear", "extend", "insert",
                                                        "pop", "remove", "reverse", "sort"}))
                    return unsafe(obj, name);
                return missing_attr(obj, name);
            case Kind::Object: {
                if (one_of(name, {"get", "items", "keys", "values", "copy"}))
                    return bound_method(obj, name);
                if (one_of(name, {"clear", "pop", "popitem", "setdefault", "update", "fromkeys"}))
                    return unsafe(obj, name);
                const Value* v = obj.obj->find(std::string_view(name));
                return v ? *v : missing_attr(obj, name);
            }
            case Kind::Namespace: {
                const Value* v = obj.obj->find(std::string_view(name));
                return v ? *v : missing_attr(obj, name);
            }
            default:
                return missing_attr(obj, name);
        }
    }

    Value get_item(const Value& obj, const Value& key) {
        switch (obj.kind) {
            case Kind::Undefined:
                throw EvalError(obj.s);
            case Kind::Array:
            case Kind::String:
                if (obj.kind == Kind::Array && obj.arr->is_generator) return missing_item(obj, key);
                if (is_integral(key)) {
                    int64_t idx = int_of(key);
                    if (obj.kind == Kind::Array) {
                        const auto n = static_cast<int64_t>(obj.arr->items.size());
                        if (idx < 0) idx += n;
                        if (idx >= 0 && idx < n) return obj.arr->items[static_cast<size_t>(idx)];
                    } else {
                        const std::vector<uint32_t> cps = code_points(obj.s);
                        const auto n = static_cast<int64_t>(cps.size());
                        if (idx < 0) idx += n;
                        if (idx >= 0 && idx < n) {
                            std::string c;
                            append_utf8(c, cps[static_cast<size_t>(idx)]);
                            return Value::string(std::move(c));
                        }
                    }
                    return missing_item(obj, key);
                }
                break;
            case Kind::Object: {
                const Value* v = obj.obj->find(key);
                if (v) return *v;
                if (key.kind == Kind::String &&
                    one_of(key.s, {"get", "items", "keys", "values", "copy"}))
                    return bound_method(obj, key.s);
                return missing_item(obj, key);
            }
            default:
                break;
        }
        if (key.kind == Kind::String) return get_attr(obj, key.s);
        return missing_item(obj, key);
    }

    // Python's slice semantics on lists, tuples and strings.
    static Value slice(const Value& obj, const std::optional<Value> (&bounds)[3]) {
        if (obj.kind == Kind::Undefined) throw EvalError(obj.s);
        for (const auto& b : bounds)
            if (b && b->kind != Kind::None && !is_integral(*b))
                throw EvalError("slice indices must be integers or None");
        int64_t step = given(bounds[2]) ? int_of(*bounds[2]) : 1;
        if (step == 0) throw EvalError("slice step cannot be zero");
        std::vector<uint32_t> cps;
        int64_t len;
        if (obj.kind == Kind::String) {
            cps = code_points(obj.s);
            len = static_cast<int64_t>(cps.size());
        } else if (obj.kind == Kind::Array && !obj.arr->is_generator) {
            len = static_cast<int64_t>(obj.arr->items.size());
        } else {  // Jinja2 slices with Python's [] directly, not through its getitem
            throw EvalError("'" + type_name(obj) + "' object is not subscriptable");
        }
        const int64_t lower = step < 0 ? -1 : 0, upper = step < 0 ? len - 1 : len;
        auto adjust = [&](const std::optional<Value>& b, int64_t dflt) {
            if (!given(b)) return dflt;
            int64_t x = int_of(*b);
            if (x < 0) {
                x += len;
                if (x < lower) x = lower;
            } else if (x > upper) {
                x = upper;
            }
            return x;
        };
        const int64_t start = adjust(bounds[0], step < 0 ? upper : lower);
        const int64_t stop = adjust(bounds[1], step < 0 ? lower : upper);
        // start + k * step for k < count: never an index past the end (start + step can
        // overflow when the step is huge).
        int64_t count = 0;
        if (step > 0 && start < stop) count = (stop - start - 1) / step + 1;
        if (step < 0 && start > stop)
            count = (start - stop - 1) / (step == INT64_MIN ? INT64_MAX : -step) + 1;
        if (obj.kind == Kind::String) {
            std::string out;
            for (int64_t k = 0; k < count; ++k)
                append_utf8(out, cps[static_cast<size_t>(start + k * step)]);
            return Value::string(std::move(out));
        }
        std::vector<Value> out;
        for (int64_t k = 0; k < count; ++k)
            out.push_back(obj.arr->items[static_cast<size_t>(start + k * step)]);
        return make_list(std::move(out), obj.arr->is_tuple);
    }

    // What a for loop (or list(), join, ...) goes through.
    static std::vector<Value> iterate(const Value& v) {
        switch (v.kind) {
            case Kind::Undefined:
                return {};
            case Kind::Array:
                work(v.arr->items.size());
                return v.arr->items;
            case Kind::String: {
                work(v.s.size());
                if (v.s.size() > static_cast<size_t>(kMaxListLength) &&
                    count_code_points(v.s) > static_cast<size_t>(kMaxListLength))
                    throw EvalError("string too long to iterate (more than " +
                                    std::to_string(kMaxListLength) + " characters)");
                std::vector<Value> out;
                for (size_t i = 0; i < v.s.size();) {
                    const size_t start = i;
                    next_code_point(v.s, i);
                    out.push_back(Value::string(v.s.substr(start, i - start)));
                }
                return out;
            }
            case Kind::Object: {
                work(v.obj->items.size());
                std::vector<Value> out;
                for (const auto& kv : v.obj->items) out.push_back(kv.first);
                return out;
            }
            default:
                throw EvalError("'" + type_name(v) + "' object is not iterable");
        }
    }

    // Jinja2's make_attrgetter: "a.b.0" looks up a, then b, then item 0.
    Value attr_path(const Value& item, const Value& attribute) {
        if (attribute.kind != Kind::String) return get_item(item, attribute);
        Value v = item;
        size_t start = 0;
        for (;;) {
            const size_t dot = attribute.s.find('.', start);
            const std::string part = attribute.s.substr(
                start, dot == std::string::npos ? std::string::npos : dot - start);
            const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) {
                return std::isdigit(static_cast<unsigned char>(c));
            });
            v = get_item(v, numeric ? Value::integer(std::strtoll(part.c_str(), nullptr, 10))
                                    : Value::string(part));
            if (dot == std::string::npos) return v;
            start = dot + 1;
        }
    }

    static Value lowered(const Value& v) {
        return v.kind == Kind::String ? Value::string(str_lower(v.s)) : v;
    }

    static int64_t length_of(const Value& v) {
        switch (v.kind) {
            case Kind::Undefined:
                return 0;
            case Kind::String:
                return static_cast<int64_t>(count_code_points(v.s));
            case Kind::Array:
                if (v.arr->is_generator) break;
                return static_cast<int64_t>(v.arr->items.size());
            case Kind::Object:
                return static_cast<int64_t>(v.obj->items.size());
            default:
                break;
        }
        throw EvalError("object of type '" + type_name(v) + "' has no len()");
    }

    Value to_int(const Value& v, const Value& fallback, int base) {
        if (is_integral(v)) return Value::integer(int_of(v));
        if (v.kind == Kind::String) {
            if (auto n = parse_py_int(v.s, base)) return Value::integer(*n);
            if (auto d = parse_py_float(v.s)) return float_to_int(*d, fallback);
            return fallback;
        }
        if (v.kind == Kind::Float) return float_to_int(v.f, fallback);
        return fallback;
    }

    static Value float_to_int(double d, const Value& fallback) {
        if (std::isnan(d)) return fallback;
        if (std::isinf(d)) throw EvalError("cannot convert float infinity to integer");
        const double t = std::trunc(d);
        if (t >= 9.2233720368547758e18 || t < -9.2233720368547758e18)
            throw EvalError("integer overflow (Python's integers are unbounded, these are 64-bit)");
        return Value::integer(static_cast<int64_t>(t));
    }

    // sort / unique / min / max / dictsort compare this key of an item.
    Value sort_key(const Value& item, const std::optional<Value>& attribute, bool case_sensitive) {
        Value k = given(attribute) ? attr_path(item, *attribute) : item;
        return case_sensitive ? k : lowered(k);
    }

    Value apply_filter(const std::string& name, Value v, Args& a);
    bool apply_test(const std::string& name, const Value& v, Args& a);
    Value call_test_by_name(const Value& name, const Value& item, const std::vector<Value>& args,
                            const std::vector<std::pair<std::string, Value>>& kw) {
        if (name.kind != Kind::String) throw EvalError("a test name must be a string");
        Args a;
        a.pos = args;
        a.kw = kw;
        return Value::boolean(apply_test(name.s, item, a));
    }
    Value select_or_reject(const std::string& name, const Value& v, Args& a, bool select,
                           bool by_attr);
};

Value Interpreter::apply_filter(const std::string& name, Value v, Args& a) {
    // ---- strings ----
    if (name == "trim") {
        auto p = bind(name, a, {"chars"});
        const std::string chars = given(p[0]) ? str_arg(p[0], "trim chars") : std::string();
        return Value::string(py_strip(to_str(v), given(p[0]) ? &chars : nullptr, true, true));
    }
    if (name == "upper" || name == "lower" || name == "capitalize" || name == "title") {
        bind(name, a, {});
        const std::string s = to_str(v);
        if (name == "upper") return Value::string(str_upper(s));
        if (name == "lower") return Value::string(str_lower(s));
        if (name == "capitalize") return Value::string(str_capitalize(s));
        return Value::string(jinja_title(s));
    }
    if (name == "replace") {
        auto p = bind(name, a, {"old", "new", "count"});
        if (!p[0] || !p[1]) throw EvalError("replace() needs the old and the new text");
        return Value::string(py_replace(to_str(v), to_str(*p[0]), to_str(*p[1]),
                                        int_arg(p[2], "replace count", -1)));
    }
    if (name == "string" || name == "safe") {
        bind(name, a, {});
        return Value::string(to_str(v));
    }
    if (name == "escape" || name == "e" || name == "forceescape") {
        bind(name, a, {});
        return Value::string(html_escape(to_str(v)));
    }
    if (name == "center") {
        auto p = bind(name, a, {"width"});
        Args inner;
        inner.pos.push_back(Value::integer(int_arg(p[0], "center width", 80)));
        return call_method(Value::string(to_str(v)), "center", inner);
    }
    if (name == "indent") {
        auto p = bind(name, a, {"width", "first", "blank"});
        std::string indention;
        if (p[0] && p[0]->kind == Kind::String) {
            indention = p[0]->s;
        } else {
            const int64_t w = int_arg(p[0], "indent width", 4);
            if (w > 0) {
                check_size(static_cast<size_t>(w));
                indention.assign(static_cast<size_t>(w), ' ');
            }
        }
        const bool first = bool_arg(p[1], false), blank = bool_arg(p[2], false);
        if (v.kind == Kind::Undefined) throw EvalError(v.s);
        if (v.kind != Kind::String)  // Jinja2 does s += "\n"
            throw EvalError("unsupported operand type(s) for +=: '" + type_name(v) + "' and 'str'");
        const std::vector<std::string> lines = py_splitlines(v.s + "\n", false);
        std::string out;
        for (size_t k = 0; k < lines.size(); ++k) {
            if (k > 0) {
                out += '\n';
                if (blank || !lines[k].empty()) out += indention;
            }
            out += lines[k];
            check_size(out.size());
        }
        if (first) out = indention + out;
        return Value::string(std::move(out));
    }
    if (name == "format") {
        if (!a.pos.empty() && !a.kw.empty())
            throw EvalError("can't handle positional and keyword arguments at the same time");
        if (!a.kw.empty()) {
            auto d = std::make_shared<ObjectData>();
            for (auto& [k, x] : a.kw) d->set(Value::string(k), std::move(x));
            return Value::string(percent_format(to_str(v), make_dict(std::move(d))));
        }
        return Value::string(percent_format(to_str(v), make_list(std::move(a.pos), true)));
    }
    if (name == "tojson") {
        auto p = bind(name, a, {"ensure_ascii", "indent", "separators", "sort_keys"});
        JsonStyle st;
        st.ensure_ascii = bool_arg(p[0], false);
        if (given(p[1])) {
            if (p[1]->kind == Kind::String) {
                st.indent = p[1]->s;
            } else {
                const int64_t w = int_arg(p[1], "tojson indent", 0);
                check_size(static_cast<size_t>(std::max<int64_t>(w, 0)));
                st.indent = std::string(static_cast<size_t>(std::max<int64_t>(w, 0)), ' ');
            }
            st.item_sep = ",";
        }
        if (given(p[2])) {
            const Value& s = *p[2];
            if (s.kind != Kind::Array || s.arr->items.size() != 2 ||
                s.arr->items[0].kind != Kind::String || s.arr->items[1].kind != Kind::String)
                throw EvalError("tojson separators must be a pair of strings");
            st.item_sep = s.arr->items[0].s;
            st.key_sep = s.arr->items[1].s;
        }
        st.sort_keys = bool_arg(p[3], false);
        std::string out;
        json_dump(out, v, st, 0);
        return Value::string(std::move(out));
    }
    // ---- any value ----
    if (name == "default" || name == "d") {
        auto p = bind(name, a, {"default_value", "boolean"});
        if (v.kind == Kind::Undefined || (bool_arg(p[1], false) && !truthy(v)))
            return p[0] ? *p[0] : Value::string("");
        return v;
    }
    if (name == "length" || name == "count") {
        bind(name, a, {});
        return Value::integer(length_of(v));
    }
    if (name == "int") {
        auto p = bind(name, a, {"default", "base"});
        if (v.kind == Kind::Undefined) throw EvalError(v.s);  // Undefined.__int__ raises
        return to_int(v, p[0] ? *p[0] : Value::integer(0),
                      static_cast<int>(int_arg(p[1], "int base", 10)));
    }
    if (name == "float") {
        auto p = bind(name, a, {"default"});
        const Value fallback = p[0] ? *p[0] : Value::real(0.0);
        if (v.kind == Kind::Undefined) throw EvalError(v.s);  // Undefined.__float__ raises
        if (is_number(v)) return Value::real(double_of(v));
        if (v.kind == Kind::String) {
            if (auto d = parse_py_float(v.s)) return Value::real(*d);
        }
        return fallback;
    }
    if (name == "abs") {
        bind(name, a, {});
        if (v.kind == Kind::Float) return Value::real(std::fabs(v.f));
        if (is_integral(v)) {
            if (int_of(v) == INT64_MIN) throw EvalError("integer overflow");
            return Value::integer(std::llabs(int_of(v)));
        }
        throw EvalError("bad operand type for abs(): '" + type_name(v) + "'");
    }
    if (name == "round") {
        auto p = bind(name, a, {"precision", "method"});
        const int64_t precision = int_arg(p[0], "round precision", 0);
        const std::string method = p[1] ? str_arg(p[1], "round method") : "common";
        if (method != "common" && method != "ceil" && method != "floor")
            throw EvalError("method must be 'common', 'ceil' or 'floor'");
        if (!is_number(v)) throw EvalError("round() needs a number, not " + type_name(v));
        if (method == "common") {
            if (is_integral(v)) return Value::integer(int_of(v));
            if (!std::isfinite(v.f)) return v;
            if (precision >= 0) {
                // printf rounds the exact binary value, ties to even, as Python's round.
                const std::string digits =
                    format_c("%." + std::to_string(std::min<int64_t>(precision, 330)) + "f", v.f);
                return Value::real(std::strtod(digits.c_str(), nullptr));
            }
            const double scale = std::pow(10.0, static_cast<double>(-precision));
            return Value::real(std::nearbyint(v.f / scale) * scale);
        }
        const double scale = std::pow(10.0, static_cast<double>(precision));
        const double x = double_of(v) * scale;
        return Value::real((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
    }
    if (name == "attr") {  // Python's getattr only: no fallback to dict items
        auto p = bind(name, a, {"name"});
        const std::string attr = str_arg(p[0], "attr name");
        if (v.kind == Kind::Object &&
            !one_of(attr, {"get", "items", "keys", "values", "copy", "clear", "pop", "popitem",
                           "setdefault", "update", "fromkeys"}))
            return missing_attr(v, attr);
        return get_attr(v, attr);
    }
    // ---- sequences ----
    if (name == "first" || name == "last") {
        bind(name, a, {});
        const std::vector<Value> items = iterate(v);
        if (items.empty())
            return Value::undefined(name == "first" ? "No first item, sequence was empty."
                                                    : "No last item, sequence was empty.");
        return name == "first" ? items.front() : items.back();
    }
    if (name == "list") {
        bind(name, a, {});
        return make_list(iterate(v));
    }
    if (name == "reverse") {
        bind(name, a, {});
        if (v.kind == Kind::String) {
            std::vector<uint32_t> cps = code_points(v.s);
            std::reverse(cps.begin(), cps.end());
            return Value::string(encode(cps, 0, cps.size()));
        }
        // reversed(value) is an iterator; what reversed() cannot take (a generator) becomes
        // a reversed list.
        const bool was_generator = v.kind == Kind::Array && v.arr->is_generator;
        std::vector<Value> items = iterate(v);
        std::reverse(items.begin(), items.end());
        return was_generator ? make_list(std::move(items)) : make_generator(std::move(items));
    }
    if (name == "join") {
        auto p = bind(name, a, {"d", "attribute"});
        const std::string sep = p[0] ? to_str(*p[0]) : std::string();
        std::string out;
        bool first = true;
        for (const Value& item : iterate(v)) {
            if (!first) out += sep;
            first = false;
            const Value x = given(p[1]) ? attr_path(item, *p[1]) : item;
            out += to_str(x);
            check_size(out.size());
        }
        return Value::string(std::move(out));
    }
    if (name == "items") {
        bind(name, a, {});
        if (v.kind == Kind::Undefined) return make_generator({});
        if (v.kind != Kind::Object) throw EvalError("Can only get item pairs from a mapping.");
        std::vector<Value> out;
        for (const auto& [k, x] : v.obj->items) out.push_back(make_list({k, x}, true));
        return make_generator(std::move(out));
    }
    if (name == "dictsort") {
        auto p = bind(name, a, {"case_sensitive", "by", "reverse"});
        if (v.kind != Kind::Object) throw EvalError("dictsort needs a dict, not " + type_name(v));
        const bool cs = bool_arg(p[0], false), rev = bool_arg(p[2], false);
        const std::string by = p[1] ? str_arg(p[1], "dictsort by") : "key";
        if (by != "key" && by != "value")
            throw EvalError("You can only sort by either 'key' or 'value'");
        const size_t pos = by == "key" ? 0 : 1;
        std::vector<std::pair<Value, Value>> keyed;  // (key, (k, v))
        for (const auto& [k, x] : v.obj->items) {
            const Value& part = pos == 0 ? k : x;
            keyed.emplace_back(cs ? part : lowered(part), make_list({k, x}, true));
        }
        std::stable_sort(keyed.begin(), keyed.end(), [rev](const auto& l, const auto& r) {
            return rev ? py_compare(r.first, l.first, "<") < 0
                       : py_compare(l.first, r.first, "<") < 0;
        });
        std::vector<Value> out;
        for (auto& kv : keyed) out.push_back(std::move(kv.second));
        return make_list(std::move(out));
    }
    if (name == "sort") {
        auto p = bind(name, a, {"reverse", "case_sensitive", "attribute"});
        const bool rev = bool_arg(p[0], false), cs = bool_arg(p[1], false);
        std::vector<std::pair<Value, Value>> keyed;
        for (const Value& item : iterate(v)) keyed.emplace_back(sort_key(item, p[2], cs), item);
        std::stable_sort(keyed.begin(), keyed.end(), [rev](const auto& l, const auto& r) {
            return rev ? py_compare(r.first, l.first, "<") < 0
                       : py_compare(l.first, r.first, "<") < 0;
        });
        std::vector<Value> out;
        for (auto& kv : keyed) out.push_back(std::move(kv.second));
        return make_list(std::move(out));
    }
    if (name == "unique") {
        auto p = bind(name, a, {"case_sensitive", "attribute"});
        const bool cs = bool_arg(p[0], false);
        std::vector<Value> seen, out;
        for (const Value& item : iterate(v)) {
            Value key = sort_key(item, p[1], cs);
            if (std::any_of(seen.begin(), seen.end(),
                            [&](const Value& s) { return py_equal(s, key); }))
                continue;
            seen.push_back(std::move(key));
            out.push_back(item);
        }
        return make_generator(std::move(out));
    }
    if (name == "min" || name == "max") {
        auto p = bind(name, a, {"case_sensitive", "attribute"});
        const bool cs = bool_arg(p[0], false);
        const std::vector<Value> items = iterate(v);
        if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
        size_t best = 0;
        Value best_key = sort_key(items[0], p[1], cs);
        for (size_t k = 1; k < items.size(); ++k) {
            Value key = sort_key(items[k], p[1], cs);
            const int c = py_compare(key, best_key, "<");
            if ((name == "min" && c < 0) || (name == "max" && c > 0)) {
                best = k;
                best_key = std::move(key);
            }
        }
        return items[best];
    }
    if (name == "sum") {
        auto p = bind(name, a, {"attribute", "start"});
        Value total = p[1] ? *p[1] : Value::integer(0);
        for (const Value& item : iterate(v))
            total = binary_op("+", total, given(p[0]) ? attr_path(item, *p[0]) : item);
        return total;
    }
    if (name == "map") {
        std::vector<Value> out;
        if (!truthy(v)) return make_generator({});  // Jinja2: `if value:` before iterating
        if (a.pos.empty()) {
            std::optional<Value> attribute, fallback;
            for (auto& [k, x] : a.kw) {
                if (k == "attribute")
                    attribute = x;
                else if (k == "default")
                    fallback = x;
                else
                    throw EvalError("Unexpected keyword argument '" + k + "' to map");
            }
            if (!attribute) throw EvalError("map requires a filter name or attribute=");
            for (const Value& item : iterate(v)) {
                Value x = attr_path(item, *attribute);
                out.push_back(x.kind == Kind::Undefined && fallback ? *fallback : x);
            }
            return make_generator(std::move(out));
        }
        if (a.pos[0].kind != Kind::String) throw EvalError("map: the filter name must be a string");
        const std::string filter = a.pos[0].s;
        for (const Value& item : iterate(v)) {
            Args inner;
            inner.pos.assign(a.pos.begin() + 1, a.pos.end());
            inner.kw = a.kw;
            out.push_back(apply_filter(filter, item, inner));
        }
        return make_generator(std::move(out));
    }
    if (name == "select" || name == "reject")
        return select_or_reject(name, v, a, name == "select", false);
    if (name == "selectattr" || name == "rejectattr")
        return select_or_reject(name, v, a, name == "selectattr", true);
    throw EvalError("unsupported filter '" + name + "'");
}

Value Interpreter::select_or_reject(const std::string& name, const Value& v, Args& a, bool select,
                                    bool by_attr) {
    size_t off = 0;
    std::optional<Value> attribute;
    if (by_attr) {
        if (a.pos.empty()) throw EvalError(name + ": missing parameter for attribute name");
        attribute = a.pos[0];
        off = 1;
    }
    if (!truthy(v)) return make_generator({});  // Jinja2: `if value:` before iterating
    const bool has_test = a.pos.size() > off;
    std::vector<Value> test_args;
    if (has_test)
        test_args.assign(a.pos.begin() + static_cast<std::ptrdiff_t>(off) + 1, a.pos.end());
    std::vector<Value> out;
    for (const Value& item : iterate(v)) {
        const Value x = attribute ? attr_path(item, *attribute) : item;
        const bool ok =
            has_test ? truthy(call_test_by_name(a.pos[off], x, test_args, a.kw)) : truthy(x);
        if (ok == select) out.push_back(item);
    }
    return make_generator(std::move(out));
}

bool Interpreter::apply_test(const std::string& name, const Value& v, Args& a) {
    auto no_args = [&]() { bind(name, a, {}); };
    auto other = [&]() -> Value {
        auto p = bind(name, a, {"other"});
        if (!p[0]) throw EvalError("test '" + name + "' needs an argument");
        return *p[0];
    };
    if (name == "defined") return no_args(), v.kind != Kind::Undefined;
    if (name == "undefined") return no_args(), v.kind == Kind::Undefined;
    if (name == "none") return no_args(), v.kind == Kind::None;
    if (name == "boolean") return no_args(), v.kind == Kind::Bool;
    if (name == "true") return no_args(), v.kind == Kind::Bool && v.b;
    if (name == "false") return no_args(), v.kind == Kind::Bool && !v.b;
    if (name == "integer") return no_args(), v.kind == Kind::Int;
    if (name == "float") return no_args(), v.kind == Kind::Float;
    if (name == "number") return no_args(), is_number(v);
    if (name == "string") return no_args(), v.kind == Kind::String;
    if (name == "mapping") return no_args(), v.kind == Kind::Object;
    if (name == "iterable" || name == "sequence")
        return no_args(),
               v.kind == Kind::Undefined || v.kind == Kind::String || v.kind == Kind::Object ||
                   (v.kind == Kind::Array && (name == "iterable" || !v.arr->is_generator));
    // Jinja2's Undefined has __call__ (which raises), so Python calls it callable.
    if (name == "callable") return no_args(), v.kind == Kind::Callable || v.kind == Kind::Undefined;
    if (name == "lower" || name == "upper") {
        no_args();
        const std::string s = to_str(v);
        bool cased = false;
        for (size_t i = 0; i < s.size();) {
            const uint32_t c = next_code_point(s, i);
            if (name == "lower" ? is_upper_cp(c) : (is_lower_cp(c) && c != 0xDF)) return false;
            if (name == "upper" && c == 0xDF) return false;
            cased = cased || is_cased(c);
        }
        return cased;
    }
    if (name == "even" || name == "odd") {  // value % 2 == 0 / == 1, as Jinja2
        no_args();
        const Value r = binary_op("%", v, Value::integer(2));
        return py_equal(r, Value::integer(name == "even" ? 0 : 1));
    }
    if (name == "divisibleby") {
        auto p = bind(name, a, {"num"});
        const Value n = p[0] ? *p[0] : Value::undefined("divisibleby needs a number");
        const Value r = binary_op("%", v, n);
        return !truthy(r);
    }
    if (name == "sameas") {
        const Value o = other();
        if (v.kind != o.kind) return false;
        switch (v.kind) {
            case Kind::Array:
                return v.arr == o.arr;
            case Kind::Object:
            case Kind::Namespace:
                return v.obj == o.obj;
            case Kind::Callable:
                return v.fn == o.fn;
            default:
                return py_equal(v, o);
        }
    }
    if (name == "in") return contains(other(), v);
    if (name == "eq" || name == "equalto" || name == "==") return py_equal(v, other());
    if (name == "ne" || name == "!=") return !py_equal(v, other());
    if (name == "lt" || name == "lessthan" || name == "<") return py_compare(v, other(), "<") < 0;
    if (name == "le" || name == "<=") return py_compare(v, other(), "<=") <= 0;
    if (name == "gt" || name == "greaterthan" || name == ">")
        return py_compare(v, other(), ">") > 0;
    if (name == "ge" || name == ">=") return py_compare(v, other(), ">=") >= 0;
    throw EvalError("unsupported test '" + name + "'");
}

Value Interpreter::call_method(const Value& self, const std::string& name, Args& a) {
    const std::string what = type_name(self) + "." + name;
    if (self.kind == Kind::Object) {
        const ObjectData& d = *self.obj;
        if (name == "get") {
            auto p = bind(what, a, {"key", "default"});
            if (!p[0]) throw EvalError("get expected at least 1 argument, got 0");
            const Value* v = d.find(*p[0]);
            return v ? *v : (p[1] ? *p[1] : Value::none());
        }
        bind(what, a, {});
        std::vector<Value> out;
        if (name == "copy") {
            auto copy = std::make_shared<ObjectData>();
            copy->items = d.items;
            return make_dict(std::move(copy));
        }
        for (const auto& [k, v] : d.items) {
            if (name == "items")
                out.push_back(make_list({k, v}, true));
            else
                out.push_back(name == "keys" ? k : v);
        }
        return make_list(std::move(out));
    }
    if (self.kind == Kind::Array) {
        const auto& items = self.arr->items;
        if (name == "copy") {
            bind(what, a, {});
            return make_list(items, self.arr->is_tuple);
        }
        auto p = bind(what, a, {"value"});
        if (!p[0]) throw EvalError(what + "() takes exactly one argument (0 given)");
        int64_t count = 0;
        for (size_t k = 0; k < items.size(); ++k) {
            if (!py_equal(items[k], *p[0])) continue;
            if (name == "index") return Value::integer(static_cast<int64_t>(k));
            ++count;
        }
        if (name == "index") throw EvalError(to_repr(*p[0]) + " is not in " + type_name(self));
        return Value::integer(count);
    }
    // str
    const std::string& s = self.s;
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
        auto p = bind(what, a, {"chars"});
        std::string chars;
        if (given(p[0])) chars = str_arg(p[0], (what + " arg").c_str());
        return Value::string(
            py_strip(s, given(p[0]) ? &chars : nullptr, name != "rstrip", name != "lstrip"));
    }
    if (name == "split" || name == "rsplit") {
        auto p = bind(what, a, {"sep", "maxsplit"});
        std::string sep;
        if (given(p[0])) {
            sep = str_arg(p[0], "separator");
            if (sep.empty()) throw EvalError("empty separator");
        }
        const int64_t maxsplit = int_arg(p[1], "maxsplit", -1);
        std::vector<std::string> parts = name == "split"
                                             ? py_split(s, given(p[0]) ? &sep : nullptr, maxsplit)
                                             : py_rsplit(s, given(p[0]) ? &sep : nullptr, maxsplit);
        std::vector<Value> out;
        for (auto& part : parts) out.push_back(Value::string(std::move(part)));
        return make_list(std::move(out));
    }
    if (name == "splitlines") {
        auto p = bind(what, a, {"keepends"});
        std::vector<Value> out;
        for (auto& line : py_splitlines(s, bool_arg(p[0], false)))
            out.push_back(Value::string(std::move(line)));
        return make_list(std::move(out));
    }
    if (name == "startswith" || name == "endswith") {
        auto p = bind(what, a, {"prefix", "start", "end"});
        if (!p[0]) throw EvalError(what + "() takes at least 1 argument (0 given)");
        std::string_view text = s;
        std::string sub;
        if (given(p[1]) || given(p[2])) {
            std::optional<Value> bounds[3] = {p[1], p[2], std::nullopt};
            sub = slice(self, bounds).s;
            text = sub;
        }
        std::vector<Value> candidates;
        if (p[0]->kind == Kind::Array && p[0]->arr->is_tuple)
            candidates = p[0]->arr->items;
        else
            candidates.push_back(*p[0]);
        for (const Value& c : candidates) {
            if (c.kind != Kind::String)
                throw EvalError(what + " first arg must be str or a tuple of str, not " +
                                type_name(c));
            work(c.s.size() / 8 + 1);
            const bool hit = name == "startswith" ? text.substr(0, c.s.size()) == c.s
                                                  : (text.size() >= c.s.size() &&
                                                     text.substr(text.size() - c.s.size()) == c.s);
            if (hit) return Value::boolean(true);
        }
        return Value::boolean(false);
    }
    if (name == "upper" || name == "lower" || name == "casefold" || name == "title" ||
        name == "capitalize" || name == "swapcase") {
        bind(what, a, {});
        if (name == "upper") return Value::string(str_upper(s));
        if (name == "lower" || name == "casefold") return Value::string(str_lower(s));
        if (name == "title") return Value::string(str_title(s));
        if (name == "capitalize") return Value::string(str_capitalize(s));
        std::string out;
        for (size_t i = 0; i < s.size();) {
            const uint32_t c = next_code_point(s, i);
            if (is_upper_cp(c))
                append_utf8(out, cp_lower(c));
            else
                append_upper(out, c);
        }
        return Value::string(std::move(out));
    }
    if (name == "replace") {
        auto p = bind(what, a, {"old", "new", "count"});
        return Value::string(py_replace(s, str_arg(p[0], "replace() old"),
                                        str_arg(p[1], "replace() new"),
                                        int_arg(p[2], "replace() count", -1)));
    }
    if (name == "find" || name == "rfind" || name == "index" || name == "rindex" ||
        name == "count") {
        auto p = bind(what, a, {"sub", "start", "end"});
        const std::vector<uint32_t> hay = code_points(s),
                                    needle = code_points(str_arg(p[0], (what + "() arg").c_str()));
        const auto n = static_cast<int64_t>(hay.size());
        auto clamp = [n](int64_t x) {
            return x < 0 ? std::max<int64_t>(0, x + n) : std::min(x, n);
        };
        const int64_t start = clamp(int_arg(p[1], "start", 0)),
                      end = clamp(int_arg(p[2], "end", n));
        const auto m = static_cast<int64_t>(needle.size());
        auto match_at = [&](int64_t k) {
            const auto same =
                std::mismatch(needle.begin(), needle.end(), hay.begin() + k).first - needle.begin();
            work(static_cast<size_t>(same) + 1);
            return same == m;
        };
        if (name == "count") {
            int64_t count = 0;
            if (m == 0) return Value::integer(end >= start ? end - start + 1 : 0);
            for (int64_t k = start; k + m <= end;) {
                if (match_at(k)) {
                    ++count;
                    k += m;
                } else {
                    ++k;
                }
            }
            return Value::integer(count);
        }
        int64_t found = -1;
        if (name == "find" || name == "index") {
            for (int64_t k = start; k + m <= end; ++k)
                if (match_at(k)) {
                    found = k;
                    break;
                }
        } else {
            for (int64_t k = end - m; k >= start; --k)
                if (match_at(k)) {
                    found = k;
                    break;
                }
        }
        if (found < 0 && (name == "index" || name == "rindex"))
            throw EvalError("substring not found");
        return Value::integer(found);
    }
    if (name == "join") {
        auto p = bind(what, a, {"iterable"});
        if (!p[0]) throw EvalError("join() takes exactly one argument (0 given)");
        std::string out;
        size_t k = 0;
        for (const Value& item : iterate(*p[0])) {
            if (item.kind != Kind::String)
                throw EvalError("sequence item " + std::to_string(k) + ": expected str instance, " +
                                type_name(item) + " found");
            if (k++) out += s;
            out += item.s;
            check_size(out.size());
        }
        return Value::string(std::move(out));
    }
    if (name == "format") {
        std::string out;
        size_t auto_index = 0;
        for (size_t i = 0; i < s.size(); ++i) {
            const char c = s[i];
            if (c == '}') {
                if (i + 1 < s.size() && s[i + 1] == '}') {
                    out += '}';
                    ++i;
                    continue;
                }
                throw EvalError("Single '}' encountered in format string");
            }
            if (c != '{') {
                out += c;
                continue;
            }
            if (i + 1 < s.size() && s[i + 1] == '{') {
                out += '{';
                ++i;
                continue;
            }
            const size_t close = s.find('}', i);
            if (close == std::string::npos)
                throw EvalError("Single '{' encountered in format string");
            std::string field = s.substr(i + 1, close - i - 1);
            i = close;
            char conv = 's';
            const size_t colon = field.find(':');
            if (colon != std::string::npos) {
                if (colon + 1 < field.size())
                    throw EvalError("unsupported format spec in str.format: '" + field + "'");
                field.resize(colon);
            }
            const size_t bang = field.find('!');
            if (bang != std::string::npos) {
                conv = bang + 1 < field.size() ? field[bang + 1] : 's';
                field.resize(bang);
            }
            Value v;
            if (field.empty()) {
                if (auto_index >= a.pos.size())
                    throw EvalError("Replacement index " + std::to_string(auto_index) +
                                    " out of range");
                v = a.pos[auto_index++];
            } else if (std::all_of(field.begin(), field.end(), [](char ch) {
                           return std::isdigit(static_cast<unsigned char>(ch));
                       })) {
                const auto idx = static_cast<size_t>(std::strtoull(field.c_str(), nullptr, 10));
                if (idx >= a.pos.size())
                    throw EvalError("Replacement index " + field + " out of range");
                v = a.pos[idx];
            } else {
                const auto it = std::find_if(a.kw.begin(), a.kw.end(),
                                             [&](const auto& kv) { return kv.first == field; });
                if (it == a.kw.end()) throw EvalError("KeyError: '" + field + "'");
                v = it->second;
            }
            out += conv == 'r' ? to_repr(v) : to_str(v);
            check_size(out.size());
        }
        return Value::string(std::move(out));
    }
    if (name == "isalpha" || name == "isdigit" || name == "isdecimal" || name == "isnumeric" ||
        name == "isalnum" || name == "isspace" || name == "islower" || name == "isupper" ||
        name == "isascii") {
        bind(what, a, {});
        if (name == "islower" || name == "isupper") {
            Args none;
            return Value::boolean(apply_test(name == "islower" ? "lower" : "upper", self, none));
        }
        if (name == "isascii")
            return Value::boolean(std::all_of(
                s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; }));
        if (s.empty()) return Value::boolean(false);
        for (size_t i = 0; i < s.size();) {
            const uint32_t c = next_code_point(s, i);
            const bool digit = c >= '0' && c <= '9';
            const bool alpha = (c < 0x80 && std::isalpha(static_cast<int>(c))) || is_cased(c) ||
                               (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3040 && c <= 0x30FF) ||
                               (c >= 0xAC00 && c <= 0xD7A3);
            bool ok;
            if (name == "isalpha")
                ok = alpha;
            else if (name == "isalnum")
                ok = alpha || digit;
            else if (name == "isspace")
                ok = is_py_space(c);
            else
                ok = digit;
            if (!ok) return Value::boolean(false);
        }
        return Value::boolean(true);
    }
    if (name == "removeprefix" || name == "removesuffix") {
        auto p = bind(what, a, {"affix"});
        const std::string affix = str_arg(p[0], (what + "() arg").c_str());
        if (name == "removeprefix" && s.compare(0, affix.size(), affix) == 0)
            return Value::string(s.substr(affix.size()));
        if (name == "removesuffix" && !affix.empty() && s.size() >= affix.size() &&
            s.compare(s.size() - affix.size(), affix.size(), affix) == 0)
            return Value::string(s.substr(0, s.size() - affix.size()));
        return self;
    }
    if (name == "center" || name == "ljust" || name == "rjust" || name == "zfill") {
        auto p = name == "zfill" ? bind(what, a, {"width"}) : bind(what, a, {"width", "fillchar"});
        const int64_t width = int_arg(p[0], "width", 0);
        std::string fill = name == "zfill" ? "0" : " ";
        if (p.size() > 1 && given(p[1])) {
            fill = str_arg(p[1], "fillchar");
            if (count_code_points(fill) != 1)
                throw EvalError("The fill character must be exactly one character long");
        }
        const auto len = static_cast<int64_t>(count_code_points(s));
        if (width <= len) return self;
        check_size(static_cast<size_t>(width));  // before multiplying: it could wrap
        check_size(static_cast<size_t>(width) * fill.size());
        const int64_t marg = width - len;
        int64_t left = 0;
        if (name == "center")
            left = marg / 2 + (marg & width & 1);
        else if (name == "rjust" || name == "zfill")
            left = marg;
        std::string out;
        std::string body = s;
        if (name == "zfill" && !s.empty() && (s[0] == '+' || s[0] == '-')) {
            out += s[0];
            body = s.substr(1);
        }
        for (int64_t k = 0; k < left; ++k) out += fill;
        out += body;
        for (int64_t k = 0; k < marg - left; ++k) out += fill;
        return Value::string(std::move(out));
    }
    if (name == "partition" || name == "rpartition") {
        auto p = bind(what, a, {"sep"});
        const std::string sep = str_arg(p[0], "separator");
        if (sep.empty()) throw EvalError("empty separator");
        const size_t at =
            name == "partition" ? find_text(s, sep, 0) : rfind_text(s, sep, std::string::npos);
        if (at == std::string::npos)
            return name == "partition"
                       ? make_list({self, Value::string(""), Value::string("")}, true)
                       : make_list({Value::string(""), Value::string(""), self}, true);
        return make_list({Value::string(s.substr(0, at)), Value::string(sep),
                          Value::string(s.substr(at + sep.size()))},
                         true);
    }
    throw EvalError("unsupported method 'str." + name + "'");
}

template <class Json>
Result<std::string> render_impl(const std::string& source, const Json& context) {
    try {
        if (!context.is_object())
            return Result<std::string>::fail("the template context must be a JSON object");
        t_work = 0;
        Body body = Parser(Lexer(source).run()).parse_template();
        const Value ctx = from_json(context, 0);
        Interpreter interp(ctx);
        return interp.run(body);
    } catch (const TemplateError& e) {
        return Result<std::string>::fail("line " + std::to_string(e.line) + ": " + e.what());
    } catch (const EvalError& e) {
        return Result<std::string>::fail(e.what());
    } catch (const std::bad_alloc&) {
        return Result<std::string>::fail("out of memory while rendering the template");
    } catch (const std::exception& e) {
        return Result<std::string>::fail(std::string("template error: ") + e.what());
    }
}

}  // namespace

Result<std::string> render(const std::string& source, const nlohmann::json& context) {
    return render_impl(source, context);
}

Result<std::string> render(const std::string& source, const nlohmann::ordered_json& context) {
    return render_impl(source, context);
}

}  // namespace edgellm::jinja
