// JSON Schema -> GBNF (see include/edgellm/json_schema.h for what is supported and how the
// grammar is stricter than the schema where the schema leaves room).
//
// Shape of the output: every schema that needs more than a shared rule gets a rule named
// after where it sits (tool-name-properties-city...); rules with the same body are made once.
// A $ref becomes a reference to the rule of its target, made the first time it is met, so
// recursive schemas give recursive rules. Refusals are thrown inside (Refused) and caught in
// add(), which puts the grammar back as it was.
//
// The idea for integer ranges (digit-by-digit alternatives, one length at a time) is the one
// of llama.cpp's _build_min_max_int (common/json-schema-to-grammar.cpp); the code is ours.
#include "edgellm/json_schema.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string_view>

#include "edgellm/error.h"
#include "edgellm/grammar.h"

namespace edgellm {
namespace {

using json = nlohmann::ordered_json;

struct Refused {
    SchemaRefusal why;
};

[[noreturn]] void refuse(std::string keyword, std::string path, std::string message) {
    throw Refused{{std::move(keyword), std::move(path), std::move(message)}};
}

// ---------------------------------------------------------------------------------------
// Paths and names

std::string json_quoted(std::string_view s) {
    return json(std::string(s)).dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string at_key(const std::string& path, std::string_view key) {
    bool plain = !key.empty() && !(key[0] >= '0' && key[0] <= '9');
    for (char c : key) {
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                        (c >= '0' && c <= '9') || c == '_' || c == '$';
        plain = plain && ok;
    }
    if (plain) return path + "." + std::string(key);
    return path + "[" + json_quoted(key) + "]";
}

std::string at_index(const std::string& path, size_t i) {
    return path + "[" + std::to_string(i) + "]";
}

// [a-zA-Z0-9-]+: other characters become '-', runs of '-' collapse, none at the ends.
std::string sanitize_name(std::string_view s) {
    std::string out;
    for (char c : s) {
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (ok) {
            out += c;
        } else if (!out.empty() && out.back() != '-') {
            out += '-';
        }
    }
    while (!out.empty() && out.back() == '-') out.pop_back();
    return out.empty() ? std::string("schema") : out;
}

bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
}

bool is_rule_name(std::string_view s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), is_name_char);
}

// ---------------------------------------------------------------------------------------
// GBNF text

// Skips the literal or class that starts at body[i]; returns the index after it.
size_t skip_quoted(std::string_view body, size_t i) {
    const char close = body[i] == '"' ? '"' : ']';
    for (++i; i < body.size(); ++i) {
        if (body[i] == '\\') {
            ++i;
        } else if (body[i] == close) {
            return i + 1;
        }
    }
    return body.size();
}

// The rule names a body refers to.
std::vector<std::string> referenced_names(std::string_view body) {
    std::vector<std::string> out;
    size_t i = 0;
    while (i < body.size()) {
        const char c = body[i];
        if (c == '"' || c == '[') {
            i = skip_quoted(body, i);
        } else if (c == '{') {  // a repetition count
            while (i < body.size() && body[i] != '}') ++i;
        } else if (is_name_char(c)) {
            size_t j = i;
            while (j < body.size() && is_name_char(body[j])) ++j;
            out.emplace_back(body.substr(i, j - i));
            i = j;
        } else {
            ++i;
        }
    }
    return out;
}

// True when `e` is one primary (a literal, class, rule name or parenthesised group) that a
// quantifier can follow or a sequence can hold without parentheses.
bool is_primary(std::string_view e) {
    if (e.empty()) return false;
    size_t end;
    if (e[0] == '"' || e[0] == '[') {
        end = skip_quoted(e, 0);
    } else if (e[0] == '(') {
        int depth = 0;
        end = e.size();
        for (size_t i = 0; i < e.size(); ++i) {
            if (e[i] == '"' || e[i] == '[') {
                i = skip_quoted(e, i) - 1;
            } else if (e[i] == '(') {
                ++depth;
            } else if (e[i] == ')' && --depth == 0) {
                end = i + 1;
                break;
            }
        }
    } else {
        end = 0;
        while (end < e.size() && is_name_char(e[end])) ++end;
        if (end == 0) return false;
    }
    return end == e.size();
}

// True when `e` has an alternation outside parentheses.
bool has_top_alternation(std::string_view e) {
    int depth = 0;
    for (size_t i = 0; i < e.size(); ++i) {
        const char c = e[i];
        if (c == '"' || c == '[') {
            i = skip_quoted(e, i) - 1;
        } else if (c == '(') {
            ++depth;
        } else if (c == ')') {
            --depth;
        } else if (c == '|' && depth == 0) {
            return true;
        }
    }
    return false;
}

std::string paren(const std::string& e) {
    return is_primary(e) ? e : "( " + e + " )";
}

// `e` inside a sequence: only an alternation needs parentheses.
std::string in_seq(const std::string& e) {
    return has_top_alternation(e) ? "( " + e + " )" : e;
}

std::string join(const std::vector<std::string>& parts, const char* sep) {
    std::string out;
    for (size_t i = 0; i < parts.size(); ++i) {
        if (i) out += sep;
        out += parts[i];
    }
    return out;
}

std::string alternatives(const std::vector<std::string>& alts) {
    std::vector<std::string> unique;
    for (const auto& a : alts)
        if (std::find(unique.begin(), unique.end(), a) == unique.end()) unique.push_back(a);
    return join(unique, " | ");
}

bool is_literal(std::string_view e) {
    return e.size() >= 2 && e[0] == '"' && skip_quoted(e, 0) == e.size();
}

// Joins non-empty parts of a sequence with spaces; adjacent literals become one.
std::string sequence(std::initializer_list<std::string> parts) {
    std::string out, last;
    for (const auto& p : parts) {
        if (p.empty()) continue;
        if (is_literal(last) && is_literal(p)) {
            out.resize(out.size() - 1);  // the closing quote
            out += p.substr(1);
            last = last.substr(0, last.size() - 1) + p.substr(1);
            continue;
        }
        if (!out.empty()) out += ' ';
        out += p;
        last = p;
    }
    return out;
}

// The GBNF parser copies a repeated term count times and refuses counts above 100000, so
// larger counts are written as blocks of kRepeatBlock.
constexpr int64_t kRepeatBlock = 10000;

std::string repeat(const std::string& x, int64_t min, int64_t max);

// x exactly n times.
std::string repeat_exactly(const std::string& x, int64_t n) {
    if (n <= kRepeatBlock) return repeat(x, n, n);
    const std::string block = "( " + repeat(x, kRepeatBlock, kRepeatBlock) + " )";
    const std::string rest = repeat(x, n % kRepeatBlock, n % kRepeatBlock);
    return rest.empty() ? repeat_exactly(block, n / kRepeatBlock)
                        : repeat_exactly(block, n / kRepeatBlock) + " " + rest;
}

// x 0..d times, d > kRepeatBlock: fewer than q whole blocks then less than a block, or q
// blocks then at most the remainder r (d = q blocks + r).
std::string repeat_up_to(const std::string& x, int64_t d) {
    if (d <= kRepeatBlock) return repeat(x, 0, d);
    const int64_t q = d / kRepeatBlock, r = d % kRepeatBlock;
    const std::string block = "( " + repeat(x, kRepeatBlock, kRepeatBlock) + " )";
    std::string fewer = q - 1 > kRepeatBlock ? repeat_up_to(block, q - 1) : repeat(block, 0, q - 1);
    std::string all = repeat_exactly(block, q);
    const std::string tail = repeat(x, 0, r);
    fewer = fewer.empty() ? repeat(x, 0, kRepeatBlock - 1)
                          : fewer + " " + repeat(x, 0, kRepeatBlock - 1);
    if (!tail.empty()) all += " " + tail;
    return "( " + fewer + " | " + all + " )";
}

// x repeated min..max times (max < 0: no upper bound).
std::string repeat(const std::string& x, int64_t min, int64_t max) {
    if (max == 0 || x.empty()) return "";
    if (min > kRepeatBlock || max > kRepeatBlock) {
        std::string out = min ? repeat_exactly(x, min) : "";
        const std::string more = max < 0 ? repeat(x, 0, -1) : repeat_up_to(x, max - min);
        if (!more.empty()) out += (out.empty() ? "" : " ") + more;
        return out;
    }
    const std::string a = paren(x);
    if (min == 0 && max < 0) return a + "*";
    if (min == 1 && max < 0) return a + "+";
    if (min == 0 && max == 1) return a + "?";
    if (min == 1 && max == 1) return in_seq(x);
    if (min == max) return a + "{" + std::to_string(min) + "}";
    if (max < 0) return a + "{" + std::to_string(min) + ",}";
    return a + "{" + std::to_string(min) + "," + std::to_string(max) + "}";
}

void append_utf8(std::string& out, char32_t c) {
    if (c < 0x80) {
        out += char(c);
    } else if (c < 0x800) {
        out += char(0xC0 | (c >> 6));
        out += char(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
        out += char(0xE0 | (c >> 12));
        out += char(0x80 | ((c >> 6) & 0x3F));
        out += char(0x80 | (c & 0x3F));
    } else {
        out += char(0xF0 | (c >> 18));
        out += char(0x80 | ((c >> 12) & 0x3F));
        out += char(0x80 | ((c >> 6) & 0x3F));
        out += char(0x80 | (c & 0x3F));
    }
}

// Code points of UTF-8 text; false when it is not valid UTF-8.
bool decode_utf8(std::string_view s, std::u32string* out) {
    out->clear();
    size_t i = 0;
    while (i < s.size()) {
        const auto b = static_cast<unsigned char>(s[i]);
        size_t n;
        char32_t c;
        if (b < 0x80) {
            n = 0, c = b;
        } else if ((b & 0xE0) == 0xC0) {
            n = 1, c = b & 0x1F;
        } else if ((b & 0xF0) == 0xE0) {
            n = 2, c = b & 0x0F;
        } else if ((b & 0xF8) == 0xF0) {
            n = 3, c = b & 0x07;
        } else {
            return false;
        }
        if (i + n >= s.size()) return false;
        for (size_t k = 1; k <= n; ++k) {
            const auto cb = static_cast<unsigned char>(s[i + k]);
            if ((cb & 0xC0) != 0x80) return false;
            c = (c << 6) | (cb & 0x3F);
        }
        out->push_back(c);
        i += n + 1;
    }
    return true;
}



// Sets of code points: sorted, disjoint, non-adjacent inclusive ranges.
struct CodeRange {
    char32_t lo, hi;
};
using CodeSet = std::vector<CodeRange>;
constexpr char32_t kMaxCodePoint = 0x10FFFF;

CodeSet normalized_set(CodeSet s) {
    std::sort(s.begin(), s.end(), [](CodeRange a, CodeRange b) { return a.lo < b.lo; });
    CodeSet out;
    for (CodeRange r : s) {
        if (!out.empty() && r.lo <= out.back().hi + 1) {
            out.back().hi = std::max(out.back().hi, r.hi);
        } else {
            out.push_back(r);
        }
    }
    return out;
}

CodeSet complement(const CodeSet& s) {
    CodeSet out;
    char32_t next = 0;
    for (CodeRange r : s) {
        if (r.lo > next) out.push_back({next, r.lo - 1});
        next = r.hi + 1;
    }
    if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
    return out;
}

CodeSet set_union(CodeSet a, const CodeSet& b) {
    a.insert(a.end(), b.begin(), b.end());
    return normalized_set(std::move(a));
}

CodeSet set_minus(const CodeSet& a, const CodeSet& b) {
    // a minus b = complement(complement(a) + b)
    return complement(set_union(complement(a), b));
}

bool set_contains(const CodeSet& s, char32_t c) {
    for (CodeRange r : s)
        if (c >= r.lo && c <= r.hi) return true;
    return false;
}


std::string class_items(const CodeSet& s) {
    std::string out;
    for (CodeRange r : s) {
        out += gbnf_escape(r.lo, true);
        if (r.hi == r.lo) continue;
        if (r.hi > r.lo + 1) out += '-';
        out += gbnf_escape(r.hi, true);
    }
    return out;
}

// A character class (or a literal, for one character) for a non-empty set.
std::string gbnf_class(const CodeSet& s) {
    EDGELLM_ASSERT(!s.empty(), "gbnf_class: empty set");
    if (s.size() == 1 && s[0].lo == s[0].hi) {
        std::string one;
        append_utf8(one, s[0].lo);
        return gbnf_literal(one);
    }
    const CodeSet rest = complement(s);
    if (rest.empty()) return "[\\x00-\\U0010FFFF]";
    const std::string pos = "[" + class_items(s) + "]";
    const std::string neg = "[^" + class_items(rest) + "]";
    return neg.size() < pos.size() ? neg : pos;
}

// ---------------------------------------------------------------------------------------
// Shared rules. Printed in this order after the schema's own rules, when used.

struct SharedRule {
    const char* name;
    const char* body;
};

// clang-format off
const SharedRule kShared[] = {
    {"value", R"(object | array | string | number | boolean | null)"},
    {"object", R"("{" ws ( member ws ( "," ws member ws )* )? "}")"},
    {"member", R"(string ws ":" ws value)"},
    {"array", R"("[" ws ( value ws ( "," ws value ws )* )? "]")"},
    {"string", R"("\"" char* "\"")"},
    // Any code point but '"', '\' and controls, or an escape; \u never a surrogate (a
    // character outside the BMP is written as itself).
    {"char", R"([^"\\\x00-\x1F] | "\\" ( [\"\\/bfnrt] | "u" ( [0-9a-cA-CeEfF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} ) ))"},
    {"key-char", R"([^"\\\x00-\x1F])"},
    {"number", R"("-"? ( "0" | [1-9] [0-9]{0,14} ) ( "." [0-9]{1,15} )? ( [eE] [+\-]? [0-9]{1,3} )?)"},
    {"integer", R"("-"? ( "0" | [1-9] [0-9]{0,15} ))"},
    // The fraction of a number that is not whole: ends in a non-zero digit.
    {"fraction", R"("." [0-9]{0,14} [1-9])"},
    {"boolean", R"("true" | "false")"},
    {"null", R"("null")"},
    // RFC 3339 full-date; February 29 only in leap years.
    {"date", R"([0-9]{4} "-" ( ( "0" [13578] | "1" [02] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ) | ( "0" [469] | "11" ) "-" ( "0" [1-9] | [12] [0-9] | "30" ) | "02-" ( "0" [1-9] | "1" [0-9] | "2" [0-8] ) ) | leap-year "-02-29")"},
    {"leap-year", R"([0-9]{2} ( "0" [48] | [2468] [048] | [13579] [26] ) | ( "0" [048] | [2468] [048] | [13579] [26] ) "00")"},
    // RFC 3339 full-time.
    {"time", R"(( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,9} )? ( "Z" | [+\-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ))"},
    {"date-time", R"(date "T" time)"},
    {"uuid", R"(hex{8} "-" hex{4} "-" hex{4} "-" hex{4} "-" hex{12})"},
    {"hex", R"([0-9a-fA-F])"},
    {"email", R"(email-atom ( "." email-atom )* "@" email-label ( "." email-label )+)"},
    {"email-atom", R"([a-zA-Z0-9!#$%&'*+/=?\x5E_`{|}~\-]+)"},
    {"email-label", R"([a-zA-Z0-9] ( "-"* [a-zA-Z0-9] )*)"},
    {"ws", R"(( " " | "\n" [ \t]{0,20} )?)"},
};
// clang-format on

const SharedRule* find_shared(std::string_view name) {
    for (const auto& r : kShared)
        if (name == r.name) return &r;
    return nullptr;
}

// ---------------------------------------------------------------------------------------
// Integer ranges as digits: exactly the canonical decimal forms (no leading zeros, no "-0")
// of the integers in a range. Lengths are handled one at a time; within a length, digit by
// digit: the lowest first digit followed by "at least the rest", the first digits strictly
// between followed by anything, the highest first digit followed by "at most the rest".

constexpr int64_t kMaxInt = 9'999'999'999'999'999;  // 16 digits, as the `integer` rule

int64_t pow10(int n) {
    int64_t p = 1;
    for (int i = 0; i < n; ++i) p *= 10;
    return p;
}

int n_digits(int64_t v) {
    return static_cast<int>(std::to_string(v).size());
}

std::string digit_run(int min, int max) {
    if (max <= 0) return "";
    return repeat("[0-9]", min, max);
}

std::string digit_span(char a, char b) {
    if (a == b) return std::string("\"") + a + "\"";
    if (b == a + 1) return std::string("[") + a + b + "]";
    return std::string("[") + a + "-" + b + "]";
}

bool all_of_digit(std::string_view s, char d) {
    return std::all_of(s.begin(), s.end(), [d](char c) { return c == d; });
}

std::string group(const std::vector<std::string>& alts) {
    if (alts.size() == 1) return alts[0];
    return "( " + join(alts, " | ") + " )";
}

// Digit strings of s.size() digits (leading zeros allowed) that are >= s / <= s.
std::string at_least(std::string_view s) {
    if (s.empty()) return "";
    const int m = static_cast<int>(s.size());
    if (all_of_digit(s, '0')) return digit_run(m, m);
    if (m == 1) return digit_span(s[0], '9');
    std::vector<std::string> alts = {sequence({digit_span(s[0], s[0]), at_least(s.substr(1))})};
    if (s[0] < '9') alts.push_back(sequence({digit_span(s[0] + 1, '9'), digit_run(m - 1, m - 1)}));
    return group(alts);
}

std::string at_most(std::string_view s) {
    if (s.empty()) return "";
    const int m = static_cast<int>(s.size());
    if (all_of_digit(s, '9')) return digit_run(m, m);
    if (m == 1) return digit_span('0', s[0]);
    std::vector<std::string> alts;
    if (s[0] > '0') alts.push_back(sequence({digit_span('0', s[0] - 1), digit_run(m - 1, m - 1)}));
    alts.push_back(sequence({digit_span(s[0], s[0]), at_most(s.substr(1))}));
    return group(alts);
}

// Digit strings from x to y, both of the same length, x <= y.
std::string between(std::string_view x, std::string_view y) {
    size_t c = 0;
    while (c < x.size() && x[c] == y[c]) ++c;
    const std::string prefix = c ? "\"" + std::string(x.substr(0, c)) + "\"" : "";
    if (c == x.size()) return prefix;
    x = x.substr(c), y = y.substr(c);
    const int m = static_cast<int>(x.size()) - 1;
    const std::string_view xr = x.substr(1), yr = y.substr(1);
    std::vector<std::string> alts;
    char mid_lo = x[0] + 1, mid_hi = y[0] - 1;
    if (all_of_digit(xr, '0')) {
        mid_lo = x[0];
    } else {
        alts.push_back(sequence({digit_span(x[0], x[0]), at_least(xr)}));
    }
    const bool y_full = all_of_digit(yr, '9');
    if (y_full) mid_hi = y[0];
    if (mid_lo <= mid_hi) alts.push_back(sequence({digit_span(mid_lo, mid_hi), digit_run(m, m)}));
    if (!y_full) alts.push_back(sequence({digit_span(y[0], y[0]), at_most(yr)}));
    return sequence({prefix, group(alts)});
}

// Canonical decimals of the integers in [lo, hi], 0 <= lo <= hi <= kMaxInt.
std::string nonneg_range(int64_t lo, int64_t hi) {
    const int dl = n_digits(lo), dh = n_digits(hi);
    if (dl == dh) return between(std::to_string(lo), std::to_string(hi));
    std::vector<std::string> alts = {between(std::to_string(lo), std::to_string(pow10(dl) - 1))};
    // Lengths dl+1 .. full_hi are complete: one run covers them all.
    const int full_hi = hi == pow10(dh) - 1 ? dh : dh - 1;
    if (full_hi >= dl + 1) alts.push_back(sequence({"[1-9]", digit_run(dl, full_hi - 1)}));
    if (full_hi < dh) alts.push_back(between(std::to_string(pow10(dh - 1)), std::to_string(hi)));
    return join(alts, " | ");
}

// Canonical decimals of the integers in [lo, hi] (clamped to +-kMaxInt), lo <= hi.
std::string int_range(int64_t lo, int64_t hi) {
    lo = std::max(lo, -kMaxInt), hi = std::min(hi, kMaxInt);
    std::vector<std::string> alts;
    if (lo < 0)
        alts.push_back(sequence({"\"-\"", paren(nonneg_range(-std::min(hi, int64_t{-1}), -lo))}));
    if (hi >= 0) alts.push_back(nonneg_range(std::max(lo, int64_t{0}), hi));
    return join(alts, " | ");
}

// ---------------------------------------------------------------------------------------
// Strings: what the JSON text of one decoded character looks like.

// The canonical JSON text of one character (escaped only where JSON needs it).
std::string json_text_of(char32_t c) {
    switch (c) {
        case '"':
            return "\\\"";
        case '\\':
            return "\\\\";
        case '\b':
            return "\\b";
        case '\f':
            return "\\f";
        case '\n':
            return "\\n";
        case '\r':
            return "\\r";
        case '\t':
            return "\\t";
        default:
            break;
    }
    std::string out;
    if (c < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
        out = buf;
    } else {
        append_utf8(out, c);
    }
    return out;
}

const CodeSet kNeedsEscape = {{0x00, 0x1F}, {'"', '"'}, {'\\', '\\'}};

// The JSON text of any one character of `s` (non-empty), escapes only where needed.
std::string json_chars(const CodeSet& s) {
    std::vector<std::string> alts;
    const CodeSet raw = set_minus(s, kNeedsEscape);
    if (!raw.empty()) alts.push_back(gbnf_class(raw));
    if (set_contains(s, '"')) alts.push_back(gbnf_literal("\\\""));
    if (set_contains(s, '\\')) alts.push_back(gbnf_literal("\\\\"));
    const CodeSet controls = set_minus(s, set_minus(s, {{0x00, 0x1F}}));
    if (controls.size() == 1 && controls[0].lo == 0 && controls[0].hi == 0x1F) {
        alts.push_back(R"("\\" ( [bfnrt] | "u00" [01] [0-9a-fA-F] ))");
    } else {
        // The short escapes, then \u00HL grouped by H, L in either case.
        CodeSet low[2];
        for (CodeRange r : controls) {
            for (char32_t c = r.lo; c <= r.hi; ++c) {
                const std::string e = json_text_of(c);
                if (e.size() == 2) {
                    alts.push_back(gbnf_literal(e));
                    continue;
                }
                const char32_t l = c & 0xF;
                const char32_t digit = l < 10 ? '0' + l : 'a' + (l - 10);
                low[c >> 4].push_back({digit, digit});
                if (l >= 10) low[c >> 4].push_back({digit - 'a' + 'A', digit - 'a' + 'A'});
            }
        }
        for (int h = 0; h < 2; ++h) {
            if (low[h].empty()) continue;
            alts.push_back(sequence(
                {gbnf_literal(h ? "\\u001" : "\\u000"), gbnf_class(normalized_set(low[h]))}));
        }
    }
    return join(alts, " | ");
}

// ---------------------------------------------------------------------------------------
// `pattern`: an ECMA-262 subset -> a GBNF expression for the JSON text between the quotes.

struct Re {
    enum class Kind { chars, seq, alt, repeat };
    Kind kind = Kind::seq;
    CodeSet chars;              // chars
    std::vector<Re> kids;       // seq, alt; repeat: one
    int64_t min = 0, max = -1;  // repeat; max < 0: no upper bound
};

constexpr int64_t kMaxPatternCount = 10000;

bool nullable(const Re& r) {
    switch (r.kind) {
        case Re::Kind::chars:
            return false;
        case Re::Kind::seq:
            return std::all_of(r.kids.begin(), r.kids.end(),
                               [](const Re& k) { return nullable(k); });
        case Re::Kind::alt:
            return std::any_of(r.kids.begin(), r.kids.end(),
                               [](const Re& k) { return nullable(k); });
        case Re::Kind::repeat:
            return r.min == 0 || nullable(r.kids[0]);
    }
    return false;
}

Re chars_re(CodeSet s) {
    Re r;
    r.kind = Re::Kind::chars;
    r.chars = normalized_set(std::move(s));
    return r;
}

const CodeSet kDigit = {{'0', '9'}};
const CodeSet kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
// ECMA-262 WhiteSpace and LineTerminator.
const CodeSet kSpace = {{0x09, 0x0D},     {0x20, 0x20},     {0xA0, 0xA0},     {0x1680, 0x1680},
                        {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F},
                        {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
const CodeSet kLineTerminator = {{0x0A, 0x0A}, {0x0D, 0x0D}, {0x2028, 0x2029}};

class PatternTranslator {
  public:
    PatternTranslator(std::u32string p, std::string path)
        : p_(std::move(p)), path_(std::move(path)) {}

    std::string translate() {
        std::vector<std::string> alts;
        for (;;) {
            bool start = false, end = false;
            const Re branch = parse_branch(true, &start, &end);
            const std::string body = emit(branch);
            if (!start && !end && nullable(branch)) {
                alts.push_back("char*");
            } else {
                alts.push_back(sequence({start ? "" : "char*", in_seq(body), end ? "" : "char*"}));
            }
            if (at_end()) break;
            if (peek() == ')') fail("unbalanced ')'");
            ++i_;  // '|'
        }
        // An empty alternative is an optional group.
        std::vector<std::string> nonempty;
        bool has_empty = false;
        for (auto& a : alts) {
            if (a.empty()) {
                has_empty = true;
            } else {
                nonempty.push_back(a);
            }
        }
        if (nonempty.empty()) return "";
        const std::string e = alternatives(nonempty);
        return has_empty ? "( " + e + " )?" : e;
    }

  private:
    std::u32string p_;
    std::string path_;
    size_t i_ = 0;
    int depth_ = 0;  // of groups
    static constexpr int kMaxPatternDepth = 100;

    [[noreturn]] void fail(const std::string& what) const {
        refuse("pattern", path_, "pattern: " + what + " (at character " + std::to_string(i_) + ")");
    }
    bool at_end() const { return i_ >= p_.size(); }
    char32_t peek(size_t k = 0) const { return i_ + k < p_.size() ? p_[i_ + k] : 0; }

    // A sequence up to '|' or ')' or the end. At the top level, '^' may open it and '$' close it.
    Re parse_branch(bool top, bool* start, bool* end) {
        Re seq;
        if (top && peek() == '^' && !at_end()) {
            ++i_;
            *start = true;
        }
        while (!at_end() && peek() != '|' && peek() != ')') {
            if (peek() == '$') {
                if (top && (i_ + 1 == p_.size() || peek(1) == '|')) {
                    ++i_;
                    *end = true;
                    break;
                }
                fail(
                    "'$' is only supported at the end of the pattern or of a top-level "
                    "alternative");
            }
            if (peek() == '^')
                fail(
                    "'^' is only supported at the start of the pattern or of a top-level "
                    "alternative");
            Re atom = parse_atom();
            int64_t min, max;
            size_t len;
            if (quantifier_at(i_, &min, &max, &len)) {
                i_ += len;
                if (peek() == '?' && !at_end()) fail("lazy quantifiers are not supported");
                size_t len2;
                int64_t a, b;
                if (quantifier_at(i_, &a, &b, &len2)) fail("nothing to repeat");
                if (max >= 0 && min > max) fail("a repetition {m,n} with m > n");
                if (min > kMaxPatternCount || max > kMaxPatternCount)
                    fail("repetition counts above " + std::to_string(kMaxPatternCount));
                if (max < 0 && nullable(atom))
                    fail("an unbounded repetition of something that can match the empty string");
                Re rep;
                rep.kind = Re::Kind::repeat;
                rep.min = min, rep.max = max;
                rep.kids.push_back(std::move(atom));
                atom = std::move(rep);
            }
            seq.kids.push_back(std::move(atom));
        }
        return seq;
    }

    // * + ? {m} {m,} {m,n} at p_[at]; false when there is none (a '{' that starts no count
    // is a literal, as in ECMA-262 Annex B).
    bool quantifier_at(size_t at, int64_t* min, int64_t* max, size_t* len) const {
        if (at >= p_.size()) return false;
        const char32_t c = p_[at];
        if (c == '*') return *min = 0, *max = -1, *len = 1, true;
        if (c == '+') return *min = 1, *max = -1, *len = 1, true;
        if (c == '?') return *min = 0, *max = 1, *len = 1, true;
        if (c != '{') return false;
        size_t j = at + 1;
        auto number = [&](int64_t* v) {
            const size_t from = j;
            *v = 0;
            while (j < p_.size() && p_[j] >= '0' && p_[j] <= '9') {
                *v = std::min<int64_t>(*v * 10 + (p_[j] - '0'), kMaxPatternCount + 1);
                ++j;
            }
            return j > from;
        };
        if (!number(min)) return false;
        if (j < p_.size() && p_[j] == '}') return *max = *min, *len = j + 1 - at, true;
        if (j >= p_.size() || p_[j] != ',') return false;
        ++j;
        if (j < p_.size() && p_[j] == '}') return *max = -1, *len = j + 1 - at, true;
        if (!number(max)) return false;
        if (j >= p_.size() || p_[j] != '}') return false;
        *len = j + 1 - at;
        return true;
    }

    Re parse_group_body() {
        if (++depth_ > kMaxPatternDepth) fail("groups nest too deeply");
        Re alt;
        alt.kind = Re::Kind::alt;
        for (;;) {
            bool s = false, e = false;
            alt.kids.push_back(parse_branch(false, &s, &e));
            if (at_end()) fail("unterminated group");
            if (peek() == ')') {
                ++i_;
                break;
            }
            ++i_;  // '|'
        }
        --depth_;
        if (alt.kids.size() == 1) return std::move(alt.kids[0]);
        return alt;
    }

    Re parse_atom() {
        const char32_t c = peek();
        int64_t a, b;
        size_t len;
        if (c == '(') {
            ++i_;
            if (peek() == '?') {
                if (peek(1) == ':') {
                    i_ += 2;
                } else if (peek(1) == '=' || peek(1) == '!') {
                    fail("lookahead (?= (?! is not supported");
                } else if (peek(1) == '<' && (peek(2) == '=' || peek(2) == '!')) {
                    fail("lookbehind (?<= (?<! is not supported");
                } else if (peek(1) == '<') {
                    i_ += 2;
                    while (!at_end() && peek() != '>') ++i_;
                    if (at_end()) fail("unterminated group name");
                    ++i_;
                } else {
                    fail("unknown group (?");
                }
            }
            return parse_group_body();
        }
        if (c == '[') return parse_class();
        if (c == '.') {
            ++i_;
            return chars_re(complement(kLineTerminator));
        }
        if (c == '\\') {
            ++i_;
            return chars_re(parse_escape(false));
        }
        if (c == '*' || c == '+' || c == '?' || (c == '{' && quantifier_at(i_, &a, &b, &len)))
            fail("nothing to repeat");
        ++i_;
        return chars_re({{c, c}});
    }

    // After a backslash. Returns the set of characters it stands for.
    CodeSet parse_escape(bool in_class) {
        if (at_end()) fail("a pattern cannot end with '\\'");
        const char32_t c = p_[i_++];
        auto hex = [&](int n) {
            char32_t v = 0;
            for (int k = 0; k < n; ++k) {
                const char32_t h = peek();
                int d;
                if (h >= '0' && h <= '9') {
                    d = static_cast<int>(h - '0');
                } else if (h >= 'a' && h <= 'f') {
                    d = static_cast<int>(h - 'a' + 10);
                } else if (h >= 'A' && h <= 'F') {
                    d = static_cast<int>(h - 'A' + 10);
                } else {
                    fail(std::string("expected ") + std::to_string(n) + " hex digits");
                }
                v = v * 16 + static_cast<char32_t>(d);
                ++i_;
            }
            return v;
        };
        switch (c) {
            case 'd':
                return kDigit;
            case 'D':
                return complement(kDigit);
            case 'w':
                return kWord;
            case 'W':
                return complement(kWord);
            case 's':
                return kSpace;
            case 'S':
                return complement(kSpace);
            case 'n':
                return {{'\n', '\n'}};
            case 'r':
                return {{'\r', '\r'}};
            case 't':
                return {{'\t', '\t'}};
            case 'f':
                return {{'\f', '\f'}};
            case 'v':
                return {{'\v', '\v'}};
            case 'b':
                if (in_class) return {{'\b', '\b'}};
                fail("word boundaries (\\b) are not supported");
            case 'B':
                fail("word boundaries (\\B) are not supported");
            case '0':
                if (peek() >= '0' && peek() <= '9') fail("octal escapes are not supported");
                return {{0, 0}};
            case 'x': {
                const char32_t v = hex(2);
                return {{v, v}};
            }
            case 'u': {
                if (peek() == '{') fail("\\u{...} is not supported; use \\uHHHH");
                char32_t v = hex(4);
                // A surrogate pair written as two escapes is one character.
                if (v >= 0xD800 && v <= 0xDBFF && peek() == '\\' && peek(1) == 'u') {
                    const size_t save = i_;
                    i_ += 2;
                    const char32_t lo = hex(4);
                    if (lo >= 0xDC00 && lo <= 0xDFFF) {
                        v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
                    } else {
                        i_ = save;
                    }
                }
                return {{v, v}};
            }
            case 'c': {
                const char32_t l = peek();
                if (!((l >= 'a' && l <= 'z') || (l >= 'A' && l <= 'Z')))
                    fail("\\c must be followed by a letter");
                ++i_;
                return {{l % 32, l % 32}};
            }
            case 'k':
                fail("backreferences (\\k<name>) are not supported");
            case 'p':
            case 'P':
                fail("Unicode property classes (\\p{...}) are not supported");
            default:
                break;
        }
        if (c >= '1' && c <= '9') fail("backreferences (\\1...) are not supported");
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
            fail(std::string("unknown escape \\") + char(c));
        return {{c, c}};  // an escaped punctuation character is itself
    }

    Re parse_class() {
        ++i_;  // '['
        bool negate = false;
        if (peek() == '^' && !at_end()) {
            negate = true;
            ++i_;
        }
        CodeSet set;
        // One member: a character, or a set (\d...) when *is_set.
        auto member = [&](bool* is_set) -> CodeSet {
            *is_set = false;
            if (peek() == '\\') {
                ++i_;
                const char32_t e = peek();
                CodeSet s = parse_escape(true);
                *is_set = e == 'd' || e == 'D' || e == 'w' || e == 'W' || e == 's' || e == 'S';
                return s;
            }
            const char32_t c = p_[i_++];
            return {{c, c}};
        };
        for (;;) {
            if (at_end()) fail("unterminated character class");
            if (peek() == ']') {
                ++i_;
                break;
            }
            bool lo_set;
            CodeSet lo = member(&lo_set);
            if (!lo_set && peek() == '-' && peek(1) != ']' && i_ + 1 < p_.size()) {
                ++i_;  // '-'
                bool hi_set;
                CodeSet hi = member(&hi_set);
                if (hi_set) {  // [a-\d]: '-' is a literal (Annex B)
                    set.push_back(lo[0]);
                    set.push_back({'-', '-'});
                    set.insert(set.end(), hi.begin(), hi.end());
                    continue;
                }
                if (hi[0].lo < lo[0].lo) fail("a class range out of order");
                set.push_back({lo[0].lo, hi[0].lo});
                continue;
            }
            set.insert(set.end(), lo.begin(), lo.end());
        }
        set = normalized_set(std::move(set));
        if (negate) set = complement(set);
        if (set.empty()) fail("a character class that matches nothing");
        return chars_re(std::move(set));
    }

    static bool single(const Re& r) {
        return r.kind == Re::Kind::chars && r.chars.size() == 1 && r.chars[0].lo == r.chars[0].hi;
    }

    std::string emit(const Re& r) const {
        switch (r.kind) {
            case Re::Kind::chars:
                if (single(r)) return gbnf_literal(json_text_of(r.chars[0].lo));
                return json_chars(r.chars);
            case Re::Kind::seq: {
                // Runs of single characters become one literal.
                std::vector<std::string> parts;
                std::string run;
                for (const Re& k : r.kids) {
                    if (single(k)) {
                        run += json_text_of(k.chars[0].lo);
                        continue;
                    }
                    if (!run.empty()) parts.push_back(gbnf_literal(run)), run.clear();
                    const std::string e = emit(k);
                    if (!e.empty()) parts.push_back(in_seq(e));
                }
                if (!run.empty()) parts.push_back(gbnf_literal(run));
                return join(parts, " ");
            }
            case Re::Kind::alt: {
                std::vector<std::string> alts;
                bool has_empty = false;
                for (const Re& k : r.kids) {
                    std::string e = emit(k);
                    if (e.empty()) {
                        has_empty = true;
                    } else {
                        alts.push_back(std::move(e));
                    }
                }
                if (alts.empty()) return "";
                return has_empty ? "( " + alternatives(alts) + " )?" : alternatives(alts);
            }
            case Re::Kind::repeat:
                return repeat(emit(r.kids[0]), r.min, r.max);
        }
        return "";
    }
};

// ---------------------------------------------------------------------------------------
// Keywords

// Keywords the converter reads (the rest is ignored, as JSON Schema ignores unknown keywords
// and annotations), and those it refuses.
const std::set<std::string> kHandled = {"type",
                                        "enum",
                                        "const",
                                        "$ref",
                                        "allOf",
                                        "anyOf",
                                        "oneOf",
                                        "properties",
                                        "required",
                                        "additionalProperties",
                                        "minProperties",
                                        "maxProperties",
                                        "items",
                                        "prefixItems",
                                        "additionalItems",
                                        "minItems",
                                        "maxItems",
                                        "uniqueItems",
                                        "minLength",
                                        "maxLength",
                                        "pattern",
                                        "format",
                                        "minimum",
                                        "maximum",
                                        "exclusiveMinimum",
                                        "exclusiveMaximum",
                                        "multipleOf"};

struct RefusedKeyword {
    const char* keyword;
    const char* why;
};
const RefusedKeyword kRefused[] = {
    {"not", "'not' (a schema the value must fail) cannot be written as a grammar"},
    {"if", "conditional schemas (if / then / else) are not supported; use anyOf"},
    {"then", "conditional schemas (if / then / else) are not supported; use anyOf"},
    {"else", "conditional schemas (if / then / else) are not supported; use anyOf"},
    {"dependentRequired", "dependencies between properties are not supported"},
    {"dependentSchemas", "dependencies between properties are not supported"},
    {"dependencies", "dependencies between properties are not supported"},
    {"patternProperties",
     "properties matched by name patterns are not supported; list them in 'properties'"},
    {"propertyNames",
     "constraints on property names are not supported; list the properties in 'properties'"},
    {"contains", "'contains' (some item must match) is not supported; use items / prefixItems"},
    {"minContains", "'minContains' is not supported; use items / prefixItems"},
    {"maxContains", "'maxContains' is not supported; use items / prefixItems"},
    {"unevaluatedProperties", "'unevaluatedProperties' is not supported; use additionalProperties"},
    {"unevaluatedItems", "'unevaluatedItems' is not supported; use items"},
    {"$dynamicRef", "dynamic references are not supported; use $ref to #/$defs/NAME"},
    {"$recursiveRef", "dynamic references are not supported; use $ref to #/$defs/NAME"},
};

const char* const kTypes[] = {"object", "array", "string", "number", "integer", "boolean", "null"};

struct TypeKeywords {
    const char* type;
    std::vector<const char*> keywords;
};
// For a schema without `type`: which types its keywords are about.
const TypeKeywords kTypeKeywords[] = {
    {"object",
     {"properties", "required", "additionalProperties", "minProperties", "maxProperties"}},
    {"array", {"items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems"}},
    {"string", {"minLength", "maxLength", "pattern", "format"}},
    {"number", {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}},
};

void check_keywords(const json& s, const std::string& path) {
    for (const auto& [key, value] : s.items()) {
        for (const auto& r : kRefused)
            if (key == r.keyword) refuse(key, at_key(path, key), r.why);
    }
}

std::optional<int64_t> count_keyword(const json& s, const char* key, const std::string& path) {
    if (!s.contains(key)) return std::nullopt;
    const json& v = s[key];
    const bool ok = v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0) ||
                    (v.is_number_float() && v.get<double>() >= 0 &&
                     std::floor(v.get<double>()) == v.get<double>());
    if (!ok) {
        refuse(key, at_key(path, key),
               std::string("'") + key + "' must be a non-negative integer, found " + v.dump());
    }
    if (v.is_number_float()) return static_cast<int64_t>(std::min(v.get<double>(), 9.0e18));
    if (v.is_number_unsigned())
        return static_cast<int64_t>(std::min<uint64_t>(v.get<uint64_t>(), INT64_MAX));
    return v.get<int64_t>();
}

std::string json_text(const json& v, const std::string& path, const char* keyword) {
    try {
        return v.dump(-1, ' ', false, json::error_handler_t::strict);
    } catch (const json::exception&) {
        refuse(keyword, path, "a string in the schema is not valid UTF-8");
    }
}

// The schema's types: `type` (a name or a list) or, without it, the types its keywords are
// about; empty: any value.
std::vector<std::string> schema_types(const json& s, const std::string& path) {
    std::vector<std::string> out;
    auto add = [&](const std::string& t) {
        if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
    };
    if (s.contains("type")) {
        const json& t = s["type"];
        const std::string tpath = at_key(path, "type");
        std::vector<json> list;
        if (t.is_string()) {
            list.push_back(t);
        } else if (t.is_array() && !t.empty()) {
            list.assign(t.begin(), t.end());
        } else {
            refuse("type", tpath,
                   "'type' must be a type name or a non-empty list of them, found " + t.dump());
        }
        for (const json& one : list) {
            const bool known =
                one.is_string() && std::find(std::begin(kTypes), std::end(kTypes),
                                             one.get<std::string>()) != std::end(kTypes);
            if (!known) {
                refuse("type", tpath,
                       "unknown type " + one.dump() +
                           "; expected object, array, string, number, integer, boolean or null");
            }
            add(one.get<std::string>());
        }
    } else {
        for (const auto& tk : kTypeKeywords)
            for (const char* k : tk.keywords)
                if (s.contains(k)) add(tk.type);
    }
    // `number` already admits every integer.
    if (std::find(out.begin(), out.end(), "number") != out.end())
        out.erase(std::remove(out.begin(), out.end(), "integer"), out.end());
    return out;
}

bool value_has_type(const json& v, const std::string& t) {
    if (t == "object") return v.is_object();
    if (t == "array") return v.is_array();
    if (t == "string") return v.is_string();
    if (t == "number") return v.is_number();
    if (t == "boolean") return v.is_boolean();
    if (t == "null") return v.is_null();
    if (t == "integer") {
        if (v.is_number_integer()) return true;
        return v.is_number_float() && std::floor(v.get<double>()) == v.get<double>();
    }
    return false;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// The converter for one add() call.

class JsonSchemaGrammar::Builder {
  public:
    Builder(State& st, const json& root, std::string hint)
        : st_(st), root_(root), hint_(std::move(hint)) {}

    std::string add_root() {
        const std::string name = reserve(hint_);
        refs_["#"] = {name, 0, false};
        define(name, body(root_, "$", name, ""));
        refs_["#"].done = true;
        return name;
    }

    static void use_shared(State& st, const std::string& name) {
        const SharedRule* r = find_shared(name);
        if (!r || st.shared.count(name)) return;
        st.shared.insert(name);
        for (const auto& dep : referenced_names(r->body)) use_shared(st, dep);
    }

  private:
    struct RefRule {
        std::string name;
        int depth;  // consume_depth_ when the rule was started
        bool done;
    };

    State& st_;
    const json& root_;
    std::string hint_;
    std::map<std::string, RefRule> refs_;
    // How many '{' / '[' the schema being visited is inside: a $ref met again at the same
    // depth before its rule is done would be left recursion.
    int consume_depth_ = 0;
    // Guards against hostile schemas: how deep body() is, how many schemas were merged.
    static constexpr int kMaxNesting = 200;
    static constexpr int kMaxMerges = 20000;
    int nesting_ = 0;
    int merges_ = 0;
    // The keyword a merge refusal names: allOf, $ref (with siblings), anyOf / oneOf (siblings
    // merged into each branch).
    const char* merge_keyword_ = "allOf";
    struct Merging {
        Merging(const char*& k, const char* now) : k_(k), was_(k) { k_ = now; }
        ~Merging() { k_ = was_; }
        const char*& k_;
        const char* was_;
    };

    struct Inside {
        explicit Inside(int& d) : d_(d) { ++d_; }
        ~Inside() { --d_; }
        int& d_;
    };

    // A free name from `base`. Names never end in "-<digits>": that is how the GBNF parser
    // names the rules it makes for groups and repetitions ("schema-3").
    std::string reserve(const std::string& base) {
        std::string b = sanitize_name(base);
        const size_t dash = b.rfind('-');
        if (dash != std::string::npos &&
            std::all_of(b.begin() + static_cast<long>(dash) + 1, b.end(),
                        [](char c) { return c >= '0' && c <= '9'; }))
            b += "-n";
        std::string name = b;
        for (int i = 2; st_.names.count(name); ++i) name = b + "-v" + std::to_string(i);
        st_.names.insert(name);
        return name;
    }

    void define(const std::string& name, const std::string& body) {
        for (const auto& dep : referenced_names(body)) use_shared(st_, dep);
        st_.rules.emplace_back(name, body);
        st_.by_body.emplace(body, name);
    }

    // A rule for `body` named after `base` (or the rule that has this body already, or the
    // body itself when it is one rule name).
    std::string rule(const std::string& base, const std::string& body) {
        if (is_rule_name(body)) {
            use_shared(st_, body);
            return body;
        }
        const auto it = st_.by_body.find(body);
        if (it != st_.by_body.end()) return it->second;
        const std::string name = reserve(base);
        define(name, body);
        return name;
    }

    std::string visit(const json& s, const std::string& path, const std::string& name,
                      const char* slot) {
        return rule(name, body(s, path, name, slot));
    }

    // A GBNF expression for the values of `s`; rules it needs are named from `name`. `slot`
    // is the keyword `s` is the value of (for messages).
    std::string body(const json& s_in, const std::string& path, const std::string& name,
                     const char* slot) {
        Inside nested(nesting_);
        if (nesting_ > kMaxNesting)
            refuse(*slot ? slot : "schema", path, "the schema nests too deeply");
        if (s_in.is_boolean()) {
            if (s_in.get<bool>()) return "value";
            refuse("false", path, "the schema false admits no value, and a value is needed here");
        }
        if (!s_in.is_object()) {
            refuse(*slot ? slot : "schema", path,
                   std::string("expected a schema (an object, true or false), found a ") +
                       s_in.type_name() + ": " +
                       s_in.dump(-1, ' ', false, json::error_handler_t::replace));
        }
        check_keywords(s_in, path);
        if (s_in.contains("$ref") && !has_constraints_besides(s_in, "$ref"))
            return ref_rule(s_in["$ref"], at_key(path, "$ref"));
        json combined;  // s_in with its $ref / allOf merged in
        if (s_in.contains("$ref") || s_in.contains("allOf")) {
            Merging m(merge_keyword_, s_in.contains("allOf") ? "allOf" : "$ref");
            combined = normalized(s_in, path, 0);
        }
        const json& s = combined.is_null() ? s_in : combined;
        if (s.contains("anyOf") || s.contains("oneOf")) return any_of(s, path, name);
        if (s.contains("enum") || s.contains("const")) return enum_body(s, path);

        const auto types = schema_types(s, path);
        if (types.empty()) return "value";
        if (types.size() == 1) return typed(s, types[0], path, name);
        std::vector<std::string> alts;
        for (const auto& t : types)
            alts.push_back(rule(name + "-" + t, typed(s, t, path, name + "-" + t)));
        return alternatives(alts);
    }

    static bool has_constraints_besides(const json& s, const char* key) {
        for (const auto& [k, v] : s.items())
            if (k != key && kHandled.count(k)) return true;
        return false;
    }

    std::string typed(const json& s, const std::string& t, const std::string& path,
                      const std::string& name) {
        if (t == "string") return string_body(s, path);
        if (t == "number") return number_body(s, path, false);
        if (t == "integer") return number_body(s, path, true);
        if (t == "boolean") return "boolean";
        if (t == "null") return "null";
        if (t == "object") return object_body(s, path, name);
        return array_body(s, path, name);
    }

    // -- $ref ------------------------------------------------------------------------------

    // The schema a reference points to, and its path.
    std::pair<const json*, std::string> resolve(const json& ref, const std::string& ref_path) {
        if (!ref.is_string())
            refuse("$ref", ref_path, "'$ref' must be a string, found " + ref.dump());
        const std::string r = ref.get<std::string>();
        if (r == "#") return {&root_, "$"};
        for (const char* section : {"$defs", "definitions"}) {
            const std::string prefix = std::string("#/") + section + "/";
            if (r.compare(0, prefix.size(), prefix) != 0) continue;
            std::string key;
            const std::string raw = r.substr(prefix.size());
            for (size_t i = 0; i < raw.size(); ++i) {  // JSON pointer: ~1 is '/', ~0 is '~'
                if (raw[i] == '/') {
                    refuse("$ref", ref_path,
                           "only references to #, #/$defs/NAME or #/definitions/NAME are "
                           "supported, found " +
                               json_quoted(r));
                }
                if (raw[i] == '~' && i + 1 < raw.size() &&
                    (raw[i + 1] == '0' || raw[i + 1] == '1')) {
                    key += raw[i + 1] == '0' ? '~' : '/';
                    ++i;
                } else {
                    key += raw[i];
                }
            }
            if (!root_.is_object() || !root_.contains(section) || !root_[section].is_object() ||
                !root_[section].contains(key)) {
                refuse("$ref", ref_path, json_quoted(r) + " is not defined in the schema");
            }
            return {&root_[section][key], at_key(at_key("$", section), key)};
        }
        refuse("$ref", ref_path,
               "only references to #, #/$defs/NAME or #/definitions/NAME are supported, found " +
                   json_quoted(r));
    }

    std::string ref_rule(const json& ref, const std::string& ref_path) {
        const auto [target, target_path] = resolve(ref, ref_path);
        const std::string key = ref.get<std::string>();
        const auto it = refs_.find(key);
        if (it != refs_.end()) {
            if (!it->second.done && it->second.depth == consume_depth_) {
                refuse(
                    "$ref", ref_path,
                    json_quoted(key) +
                        " refers back to itself before any character is written (left recursion)");
            }
            return it->second.name;
        }
        const std::string tail = key.substr(key.rfind('/') + 1);
        const std::string name = reserve(hint_ + "-" + tail);
        refs_[key] = {name, consume_depth_, false};
        define(name, body(*target, target_path, name, "$ref"));
        refs_[key].done = true;
        return name;
    }

    // -- allOf, and $ref with siblings: one schema from several -----------------------------

    static constexpr int kMaxMergeDepth = 32;

    // `s` without $ref, allOf and ignored keywords: references resolved and allOf merged in.
    json normalized(const json& s, const std::string& path, int depth) {
        if (++merges_ > kMaxMerges) {
            refuse(merge_keyword_, path,
                   "allOf / $ref merges take too much work (more than " +
                       std::to_string(kMaxMerges) + " schemas merged)");
        }
        if (depth > kMaxMergeDepth) {
            refuse(merge_keyword_, path,
                   "allOf / $ref merges nest too deeply (a recursive $ref that has to be merged "
                   "with other keywords)");
        }
        if (s.is_boolean()) {
            if (s.get<bool>()) return json::object();
            refuse("false", path, "the schema false admits no value, and allOf needs one");
        }
        if (!s.is_object()) {
            refuse(merge_keyword_, path,
                   std::string("expected a schema (an object, true or false), found a ") +
                       s.type_name());
        }
        check_keywords(s, path);
        json out = json::object();
        for (const auto& [k, v] : s.items())
            if (kHandled.count(k) && k != "$ref" && k != "allOf") out[k] = v;
        if (s.contains("$ref")) {
            const std::string ref_path = at_key(path, "$ref");
            const auto [target, target_path] = resolve(s["$ref"], ref_path);
            out = merged(normalized(*target, target_path, depth + 1), out, path, depth + 1);
        }
        if (s.contains("allOf")) {
            const json& list = s["allOf"];
            const std::string apath = at_key(path, "allOf");
            if (!list.is_array() || list.empty())
                refuse("allOf", apath, "'allOf' must be a non-empty list of schemas");
            for (size_t i = 0; i < list.size(); ++i)
                out = merged(out, normalized(list[i], at_index(apath, i), depth + 1), apath,
                             depth + 1);
        }
        return out;
    }

    // The schema both `x` and `y` (property / item schemas, maybe booleans) stand for.
    json merged_schema(const json& x, const json& y, const std::string& path, int depth) {
        if (x == false || y == false) return false;
        if (x == true) return y;
        if (y == true) return x;
        return merged(normalized(x, path, depth + 1), normalized(y, path, depth + 1), path,
                      depth + 1);
    }

    static std::vector<std::string> type_list(const json& t) {
        std::vector<std::string> out;
        if (t.is_string()) out.push_back(t.get<std::string>());
        if (t.is_array())
            for (const auto& e : t)
                if (e.is_string()) out.push_back(e.get<std::string>());
        return out;
    }

    // Two normalized schemas -> one that admits what both admit.
    json merged(json a, const json& b, const std::string& path, int depth) {
        const json a_props = a.value("properties", json::object());
        const json b_props = b.value("properties", json::object());
        const json a_add = a.contains("additionalProperties") ? a["additionalProperties"] : json();
        const json b_add = b.contains("additionalProperties") ? b["additionalProperties"] : json();
        auto conflict = [&](const std::string& k) {
            refuse(merge_keyword_, path,
                   "cannot merge two schemas that both set '" + k + "' differently (" +
                       a[k].dump() + " and " + b[k].dump() + ")");
        };
        auto is_number = [](const json& v) { return v.is_number(); };
        for (const auto& [k, v] : b.items()) {
            if (!a.contains(k)) {
                a[k] = v;
                continue;
            }
            json& av = a[k];
            if (av == v) continue;
            if (k == "type") {
                std::vector<std::string> both;
                for (const auto& ta : type_list(av)) {
                    for (const auto& tb : type_list(v)) {
                        std::string t;
                        if (ta == tb) t = ta;
                        if ((ta == "integer" && tb == "number") ||
                            (ta == "number" && tb == "integer"))
                            t = "integer";
                        if (!t.empty() && std::find(both.begin(), both.end(), t) == both.end())
                            both.push_back(t);
                    }
                }
                if (both.empty())
                    refuse(merge_keyword_, path,
                           "the merged schemas have no type in common (" + av.dump() + " and " +
                               v.dump() + ")");
                av = both.size() == 1 ? json(both[0]) : json(both);
            } else if (k == "properties") {
                if (!av.is_object() || !v.is_object()) conflict(k);
                for (const auto& [pk, pv] : v.items())
                    av[pk] = av.contains(pk)
                                 ? merged_schema(av[pk], pv, at_key(at_key(path, k), pk), depth)
                                 : pv;
            } else if (k == "required") {
                if (!av.is_array() || !v.is_array()) conflict(k);
                for (const auto& r : v)
                    if (std::find(av.begin(), av.end(), r) == av.end()) av.push_back(r);
            } else if (k == "additionalProperties" || k == "items") {
                av = merged_schema(av, v, at_key(path, k), depth);
            } else if ((k == "minimum" || k == "minLength" || k == "minItems" ||
                        k == "minProperties" || k == "exclusiveMinimum") &&
                       is_number(av) && is_number(v)) {
                if (v > av) av = v;
            } else if ((k == "maximum" || k == "maxLength" || k == "maxItems" ||
                        k == "maxProperties" || k == "exclusiveMaximum") &&
                       is_number(av) && is_number(v)) {
                if (v < av) av = v;
            } else if (k == "enum" && av.is_array() && v.is_array()) {
                json both = json::array();
                for (const auto& e : av)
                    if (std::find(v.begin(), v.end(), e) != v.end()) both.push_back(e);
                if (both.empty())
                    refuse(merge_keyword_, path, "the merged enums have no value in common");
                av = both;
            } else {
                conflict(k);
            }
        }
        // A property that one side does not declare is checked by that side's
        // additionalProperties: false forbids it, a schema constrains it further.
        if (a.contains("properties") && a["properties"].is_object()) {
            json& props = a["properties"];
            const json required = a.value("required", json::array());
            for (const auto& [side_props, side_add] :
                 {std::pair{&a_props, &a_add}, std::pair{&b_props, &b_add}}) {
                if (side_add->is_null() || *side_add == true) continue;
                for (auto& [pk, pv] : props.items()) {
                    if (side_props->contains(pk)) continue;
                    if (*side_add == false) {
                        if (std::find(required.begin(), required.end(), pk) != required.end())
                            refuse(merge_keyword_, path,
                                   "property " + json_quoted(pk) +
                                       " is required by one schema and forbidden by another's "
                                       "additionalProperties false");
                        pv = false;
                    } else {
                        pv = merged_schema(pv, *side_add, at_key(at_key(path, "properties"), pk),
                                           depth);
                    }
                }
            }
        }
        return a;
    }

    // -- anyOf / oneOf ---------------------------------------------------------------------

    std::string any_of(const json& s, const std::string& path, const std::string& name) {
        if (s.contains("anyOf") && s.contains("oneOf"))
            refuse("oneOf", at_key(path, "oneOf"),
                   "anyOf and oneOf in one schema are not supported; wrap one of them in allOf");
        const char* key = s.contains("anyOf") ? "anyOf" : "oneOf";
        const std::string kpath = at_key(path, key);
        const json& list = s[key];
        if (!list.is_array() || list.empty())
            refuse(key, kpath, std::string("'") + key + "' must be a non-empty list of schemas");
        json siblings = json::object();
        for (const auto& [k, v] : s.items())
            if (k != key && kHandled.count(k)) siblings[k] = v;
        std::vector<std::string> alts;
        for (size_t i = 0; i < list.size(); ++i) {
            const std::string bpath = at_index(kpath, i);
            const std::string bname = name + "-alt" + std::to_string(i + 1);
            if (list[i] == false) continue;
            if (siblings.empty()) {
                alts.push_back(visit(list[i], bpath, bname, key));
            } else {
                Merging m(merge_keyword_, key);
                const json b =
                    merged(normalized(siblings, path, 0), normalized(list[i], bpath, 0), bpath, 0);
                alts.push_back(visit(b, bpath, bname, key));
            }
        }
        if (alts.empty()) refuse(key, kpath, std::string("every branch of '") + key + "' is false");
        return alternatives(alts);
    }

    // -- enum / const ----------------------------------------------------------------------

    std::string enum_body(const json& s, const std::string& path) {
        for (const auto& [k, v] : s.items()) {
            if (kHandled.count(k) && k != "enum" && k != "const" && k != "type") {
                refuse(k, at_key(path, k),
                       "'" + k +
                           "' together with enum / const is not supported; list only the allowed "
                           "values");
            }
        }
        std::vector<json> values;
        if (s.contains("enum")) {
            const json& e = s["enum"];
            if (!e.is_array() || e.empty())
                refuse("enum", at_key(path, "enum"), "'enum' must be a non-empty list of values");
            values.assign(e.begin(), e.end());
        }
        if (s.contains("const")) {
            if (s.contains("enum")) {
                if (std::find(values.begin(), values.end(), s["const"]) == values.end())
                    refuse("const", at_key(path, "const"), "the const value is not in the enum");
            }
            values = {s["const"]};
        }
        const auto types = s.contains("type") ? schema_types(s, path) : std::vector<std::string>{};
        std::vector<std::string> alts;
        for (const json& v : values) {
            const bool typed_ok =
                types.empty() || std::any_of(types.begin(), types.end(), [&](const std::string& t) {
                    return value_has_type(v, t);
                });
            if (typed_ok) alts.push_back(in_seq(const_expr(v, path)));
        }
        if (alts.empty()) {
            const char* k = s.contains("enum") ? "enum" : "const";
            refuse(k, at_key(path, k),
                   std::string("no value of '") + k + "' has the schema's type");
        }
        return alternatives(alts);
    }

    // Exactly `v`, with whitespace allowed between tokens.
    std::string const_expr(const json& v, const std::string& path) {
        if (v.is_object()) {
            std::vector<std::string> parts = {"\"{\" ws"};
            bool first = true;
            for (const auto& [k, e] : v.items()) {
                if (!first) parts.push_back("\",\" ws");
                first = false;
                parts.push_back(gbnf_literal(json_text(json(k), path, "enum")) + " ws \":\" ws " +
                                in_seq(const_expr(e, path)) + " ws");
            }
            parts.push_back("\"}\"");
            return join(parts, " ");
        }
        if (v.is_array()) {
            std::vector<std::string> parts = {"\"[\" ws"};
            for (size_t i = 0; i < v.size(); ++i) {
                if (i) parts.push_back("\",\" ws");
                parts.push_back(in_seq(const_expr(v[i], path)) + " ws");
            }
            parts.push_back("\"]\"");
            return join(parts, " ");
        }
        return gbnf_literal(json_text(v, path, "enum"));
    }

    // -- strings ---------------------------------------------------------------------------

    std::string string_body(const json& s, const std::string& path) {
        const auto min = count_keyword(s, "minLength", path);
        const auto max = count_keyword(s, "maxLength", path);
        const bool has_pattern = s.contains("pattern"), has_format = s.contains("format");
        if (has_pattern && has_format) {
            refuse("format", at_key(path, "format"),
                   "pattern and format together are not supported; keep one of them");
        }
        if ((has_pattern || has_format) && (min || max)) {
            const char* k = min ? "minLength" : "maxLength";
            refuse(k, at_key(path, k),
                   std::string("'") + k + "' together with " +
                       (has_pattern ? "pattern" : "format") +
                       " is not supported; put the length into the pattern");
        }
        const std::string quote = R"("\"")";
        if (has_format) {
            const json& f = s["format"];
            const std::string fpath = at_key(path, "format");
            static const char* const kFormats[] = {"date", "time", "date-time", "uuid", "email"};
            if (f.is_string()) {
                for (const char* known : kFormats)
                    if (f.get<std::string>() == known) return sequence({quote, known, quote});
            }
            refuse("format", fpath,
                   "format " + f.dump(-1, ' ', false, json::error_handler_t::replace) +
                       " is not supported; supported: date, time, date-time, uuid, email");
        }
        if (has_pattern) {
            const json& p = s["pattern"];
            const std::string ppath = at_key(path, "pattern");
            std::u32string cps;
            if (!p.is_string() || !decode_utf8(p.get<std::string>(), &cps))
                refuse("pattern", ppath, "'pattern' must be a string");
            const std::string content = PatternTranslator(std::move(cps), ppath).translate();
            return sequence({quote, in_seq(content), quote});
        }
        if (max && min && *max < *min) {
            refuse("maxLength", at_key(path, "maxLength"), "maxLength is below minLength");
        }
        if (!max && (!min || *min == 0)) return "string";
        return sequence({quote, repeat("char", min.value_or(0), max.value_or(-1)), quote});
    }

    // -- numbers ---------------------------------------------------------------------------

    std::string number_body(const json& s, const std::string& path, bool integer) {
        if (s.contains("multipleOf")) {
            const json& m = s["multipleOf"];
            if (!(m.is_number() && m.get<double>() == 1.0)) {
                refuse("multipleOf", at_key(path, "multipleOf"),
                       "multipleOf other than 1 cannot be enforced by a grammar");
            }
            integer = true;  // a number that is a multiple of 1 is an integer
        }
        // Bounds as (value, exclusive, keyword).
        struct Bound {
            long double value;
            bool exclusive;
            const char* keyword;
        };
        std::vector<Bound> lower, upper;
        auto read = [&](const char* key, bool exclusive, std::vector<Bound>& into) {
            if (!s.contains(key)) return;
            const json& v = s[key];
            if (v.is_boolean()) return;  // draft 4's exclusiveMinimum: true, read with minimum
            if (!v.is_number())
                refuse(key, at_key(path, key),
                       std::string("'") + key + "' must be a number, found " + v.dump());
            into.push_back({v.get<long double>(), exclusive, key});
        };
        auto draft4 = [&](const char* key) { return s.contains(key) && s[key] == true; };
        read("minimum", draft4("exclusiveMinimum"), lower);
        read("exclusiveMinimum", true, lower);
        read("maximum", draft4("exclusiveMaximum"), upper);
        read("exclusiveMaximum", true, upper);
        if (lower.empty() && upper.empty()) return integer ? "integer" : "number";

        // Values beyond the digits the grammar writes act as no bound.
        constexpr long double kFar = 1e17L;
        auto clamp = [&](long double v) {
            return static_cast<int64_t>(std::clamp(v, -kFar, kFar));
        };
        if (integer) {
            int64_t lo = -kMaxInt, hi = kMaxInt;
            for (const Bound& b : lower) {
                const long double v = b.exclusive ? std::floor(b.value) + 1 : std::ceil(b.value);
                lo = std::max(lo, clamp(v));
            }
            for (const Bound& b : upper) {
                const long double v = b.exclusive ? std::ceil(b.value) - 1 : std::floor(b.value);
                hi = std::min(hi, clamp(v));
            }
            lo = std::max(lo, -kMaxInt), hi = std::min(hi, kMaxInt);
            if (lo > hi) {
                const Bound& b = lower.empty() ? upper[0] : lower[0];
                refuse(b.keyword, at_key(path, b.keyword), "no integer lies within the bounds");
            }
            return int_range(lo, hi);
        }
        for (const auto* list : {&lower, &upper}) {
            for (const Bound& b : *list) {
                if (std::floor(b.value) != b.value) {
                    refuse(b.keyword, at_key(path, b.keyword),
                           std::string("'") + b.keyword +
                               "' on a number is only supported when it is a whole number; use "
                               "type integer or a whole bound");
                }
            }
        }
        // Whole values: the integers in range. Values with a fraction, x = +-(I + f) with
        // 0 < f < 1 and a whole bound L (or H): x >= L and x > L both hold for positive x iff
        // I >= L, for negative x iff I <= -L - 1; x <= H and x < H for positive x iff
        // I <= H - 1, for negative x iff I >= -H.
        int64_t whole_lo = -kMaxInt, whole_hi = kMaxInt;
        int64_t pos_lo = 0, pos_hi = kMaxInt, neg_lo = 0, neg_hi = kMaxInt;
        for (const Bound& b : lower) {
            const int64_t l = clamp(b.value);
            whole_lo = std::max(whole_lo, b.exclusive ? l + 1 : l);
            pos_lo = std::max(pos_lo, l);
            neg_hi = std::min(neg_hi, -l - 1);
        }
        for (const Bound& b : upper) {
            const int64_t h = clamp(b.value);
            whole_hi = std::min(whole_hi, b.exclusive ? h - 1 : h);
            pos_hi = std::min(pos_hi, h - 1);
            neg_lo = std::max(neg_lo, -h);
        }
        whole_lo = std::max(whole_lo, -kMaxInt), whole_hi = std::min(whole_hi, kMaxInt);
        std::vector<std::string> alts;
        if (whole_lo <= whole_hi) alts.push_back(int_range(whole_lo, whole_hi));
        if (pos_lo <= pos_hi) alts.push_back(paren(nonneg_range(pos_lo, pos_hi)) + " fraction");
        if (neg_lo <= neg_hi)
            alts.push_back(sequence({"\"-\"", paren(nonneg_range(neg_lo, neg_hi)), "fraction"}));
        if (alts.empty()) {
            const Bound& b = lower.empty() ? upper[0] : lower[0];
            refuse(b.keyword, at_key(path, b.keyword), "no number lies within the bounds");
        }
        return join(alts, " | ");
    }

    // -- objects ---------------------------------------------------------------------------

    // Keys that are none of `names`, written without escapes: a trie of the names, where each
    // node may stop (unless it ends a name), go on with a character no name continues with
    // (then anything), or follow a name's next character.
    struct Trie {
        bool terminal = false;
        std::map<char32_t, Trie> next;
    };

    static std::string not_in(const Trie& t) {
        CodeSet used = kNeedsEscape;
        for (const auto& [c, sub] : t.next) used.push_back({c, c});
        std::vector<std::string> alts;
        const CodeSet other = complement(normalized_set(used));
        if (!other.empty()) alts.push_back(gbnf_class(other) + " key-char*");
        for (const auto& [c, sub] : t.next) {
            std::string lit;
            append_utf8(lit, c);
            alts.push_back(sequence({gbnf_literal(lit), not_in(sub)}));
        }
        if (t.terminal && alts.size() == 1) return alts[0];
        const std::string e = "( " + join(alts, " | ") + " )";
        return t.terminal ? e : e + "?";
    }

    std::string extra_key(const std::vector<std::string>& names) {
        Trie root;
        for (const auto& n : names) {
            std::u32string cps;
            if (!decode_utf8(n, &cps)) continue;
            // A name with a character that needs an escape cannot be written by this rule.
            const bool raw = std::none_of(cps.begin(), cps.end(), [](char32_t c) {
                return c < 0x20 || c == '"' || c == '\\';
            });
            if (!raw) continue;
            Trie* t = &root;
            for (char32_t c : cps) t = &t->next[c];
            t->terminal = true;
        }
        if (root.next.empty() && !root.terminal) return R"("\"" key-char* "\"")";
        return R"("\"" )" + not_in(root) + R"( "\"")";
    }

    std::string object_body(const json& s, const std::string& path, const std::string& name) {
        const bool has_props = s.contains("properties"), has_required = s.contains("required");
        const json props = s.value("properties", json::object());
        if (!props.is_object())
            refuse("properties", at_key(path, "properties"),
                   "'properties' must be an object of schemas");
        std::vector<std::string> required;
        if (has_required) {
            const json& r = s["required"];
            if (!r.is_array())
                refuse("required", at_key(path, "required"), "'required' must be a list of names");
            for (const auto& e : r) {
                if (!e.is_string())
                    refuse("required", at_key(path, "required"),
                           "'required' must be a list of names");
                if (std::find(required.begin(), required.end(), e.get<std::string>()) ==
                    required.end())
                    required.push_back(e.get<std::string>());
            }
        }
        const std::string apath = at_key(path, "additionalProperties");
        json add;  // null: absent
        if (s.contains("additionalProperties")) {
            add = s["additionalProperties"];
            if (!add.is_boolean() && !add.is_object())
                refuse("additionalProperties", apath, "'additionalProperties' must be a schema");
        }
        const auto min_props = count_keyword(s, "minProperties", path);
        const auto max_props = count_keyword(s, "maxProperties", path);
        auto is_required = [&](const std::string& k) {
            return std::find(required.begin(), required.end(), k) != required.end();
        };

        // Free-form: any object (or any with values of one schema).
        const bool free = !has_props && !has_required;
        const bool extras = free ? add != false : (add == true || add.is_object());

        struct Prop {
            std::string key;    // GBNF literal of the key's JSON text
            std::string value;  // rule
            bool required;
        };
        std::vector<Prop> list;
        std::vector<std::string> names;  // every declared name (extra keys must be others)
        const std::string ppath = at_key(path, "properties");
        {
            Inside inside(consume_depth_);
            for (const auto& [k, v] : props.items()) {
                names.push_back(k);
                if (v == false) {
                    if (is_required(k))
                        refuse(
                            "required", at_key(path, "required"),
                            "property " + json_quoted(k) + " is required but its schema is false");
                    continue;
                }
                const std::string kp = at_key(ppath, k);
                list.push_back({gbnf_literal(json_text(json(k), kp, "properties")),
                                visit(v, kp, name + "-" + k, "properties"), is_required(k)});
            }
            // A required name without a schema: any value (or additionalProperties').
            for (const auto& r : required) {
                if (props.contains(r)) continue;
                if (add == false) {
                    refuse("required", at_key(path, "required"),
                           "property " + json_quoted(r) +
                               " is required but not in 'properties' and additionalProperties is "
                               "false");
                }
                names.push_back(r);
                const std::string value = add.is_object() ? visit(add, apath, name + "-additional",
                                                                  "additionalProperties")
                                                          : std::string("value");
                list.push_back({gbnf_literal(json_text(json(r), path, "required")), value, true});
            }
        }
        size_t n_required = 0;
        for (const auto& p : list) n_required += p.required;
        if (min_props && *min_props > static_cast<int64_t>(n_required)) {
            refuse("minProperties", at_key(path, "minProperties"),
                   "minProperties is only supported when the required properties already meet it");
        }
        if (max_props && (extras || *max_props < static_cast<int64_t>(list.size()))) {
            refuse("maxProperties", at_key(path, "maxProperties"),
                   "maxProperties is only supported when no more properties than it can be written "
                   "(declared properties only, additionalProperties false)");
        }
        if (free && add.is_null()) return "object";
        if (free && add == true) return "object";

        std::string extra_kv;  // one extra property
        if (extras) {
            Inside inside(consume_depth_);
            const std::string value =
                add.is_object() ? visit(add, apath, name + "-additional", "additionalProperties")
                                : std::string("value");
            const std::string key =
                names.empty() ? "string" : rule(name + "-key", extra_key(names));
            extra_kv = key + " ws \":\" ws " + value;
        }
        const std::string more_extras = extras ? R"(( "," ws )" + extra_kv + " ws )*" : "";

        const size_t n = list.size();
        auto kv = [&](size_t i) { return list[i].key + " ws \":\" ws " + list[i].value + " ws"; };
        auto item = [&](size_t i) {
            const std::string e = R"("," ws )" + kv(i);
            return list[i].required ? e : "( " + e + " )?";
        };
        // tail[j]: the properties from j on, after at least one was written.
        std::vector<std::string> tail(n + 1);
        tail[n] = more_extras;
        size_t first_required = n;
        for (size_t i = 0; i < n; ++i)
            if (list[i].required) {
                first_required = i;
                break;
            }
        // A tail that starts an alternative and ends a longer tail too gets a rule, so the
        // text stays linear in the number of properties.
        auto shared_tail = [&](size_t j) {
            if (j >= 2 && j <= first_required + 1 && !tail[j].empty())
                tail[j] = rule(name + "-tail" + std::to_string(j), tail[j]);
        };
        shared_tail(n);
        for (size_t j = n; j-- > 1;) {
            tail[j] = sequence({item(j), tail[j + 1]});
            shared_tail(j);
        }
        std::vector<std::string> starts;
        for (size_t i = 0; i <= first_required && i < n; ++i)
            starts.push_back(sequence({kv(i), tail[i + 1]}));
        if (first_required == n && extras) starts.push_back(extra_kv + " ws " + more_extras);
        std::string content = alternatives(starts);
        if (first_required == n && !content.empty()) {
            content = "( " + content + " )?";
        } else {
            content = in_seq(content);
        }
        return sequence({R"("{" ws)", content, R"("}")"});
    }

    // -- arrays ----------------------------------------------------------------------------

    std::string array_body(const json& s, const std::string& path, const std::string& name) {
        std::vector<json> prefix;
        const char* prefix_key = nullptr;
        const char* rest_key = "items";
        if (s.contains("prefixItems")) {
            prefix_key = "prefixItems";
        } else if (s.contains("items") && s["items"].is_array()) {
            prefix_key = "items";  // before 2020-12: items as a list, then additionalItems
            rest_key = "additionalItems";
        }
        if (prefix_key) {
            const json& p = s[prefix_key];
            if (!p.is_array())
                refuse(prefix_key, at_key(path, prefix_key),
                       std::string("'") + prefix_key + "' must be a list of schemas");
            prefix.assign(p.begin(), p.end());
        }
        const int64_t min = count_keyword(s, "minItems", path).value_or(0);
        int64_t max = count_keyword(s, "maxItems", path).value_or(-1);
        // rest: the schema of items after the prefix; null: none.
        json rest;
        const bool rest_given = s.contains(rest_key);
        if (rest_given) {
            rest = s[rest_key];
            if (!rest.is_boolean() && !rest.is_object())
                refuse(rest_key, at_key(path, rest_key),
                       std::string("'") + rest_key + "' must be a schema");
        } else if (!prefix_key) {
            rest = true;
        }
        const int64_t p = static_cast<int64_t>(prefix.size());
        auto cap = [&](int64_t m) { max = max < 0 ? m : std::min(max, m); };
        if (rest.is_null()) {
            // No schema for later items: none, unless minItems needs some (any values).
            if (min > p) {
                rest = true;
                cap(min);
            } else {
                cap(p);
            }
        } else if (rest == false) {
            cap(p);
        }
        for (int64_t j = 0; j < p; ++j)
            if (prefix[j] == false) cap(j);
        if (max >= 0 && min > max) {
            refuse("minItems", at_key(path, "minItems"),
                   "minItems asks for more items than the schema allows");
        }
        if (s.contains("uniqueItems") && s["uniqueItems"] == true && (max < 0 || max > 1)) {
            refuse("uniqueItems", at_key(path, "uniqueItems"),
                   "uniqueItems true cannot be enforced by a grammar");
        }

        std::vector<std::string> items;
        std::string rest_rule;
        {
            Inside inside(consume_depth_);
            const std::string ppath = prefix_key ? at_key(path, prefix_key) : path;
            for (int64_t j = 0; j < p && (max < 0 || j < max); ++j)
                items.push_back(visit(prefix[j], at_index(ppath, j),
                                      name + "-item" + std::to_string(j + 1), prefix_key));
            if ((max < 0 || max > p) && !rest.is_null() && rest != false)
                rest_rule = visit(rest, rest_given ? at_key(path, rest_key) : path, name + "-item",
                                  rest_key);
        }
        // seq(j): the items from position j on, j already written.
        std::function<std::string(int64_t)> seq = [&](int64_t j) -> std::string {
            if (max >= 0 && j >= max) return "";
            if (j < p) {
                const std::string one =
                    (j ? std::string(R"("," ws )") : std::string()) + items[j] + " ws";
                const std::string e = sequence({one, seq(j + 1)});
                return j < min ? e : "( " + e + " )?";
            }
            if (rest_rule.empty()) return "";
            const int64_t lo = std::max<int64_t>(min - j, 0), hi = max < 0 ? -1 : max - j;
            const std::string next = R"("," ws )" + rest_rule + " ws";
            if (j > 0) return repeat(next, lo, hi);
            const std::string e =
                sequence({rest_rule + " ws",
                          repeat(next, std::max<int64_t>(lo - 1, 0), hi < 0 ? -1 : hi - 1)});
            return lo == 0 ? "( " + e + " )?" : e;
        };
        return sequence({R"("[" ws)", seq(0), R"("]")"});
    }
};

// ---------------------------------------------------------------------------------------

JsonSchemaGrammar::JsonSchemaGrammar() {
    for (const auto& r : kShared) state_.names.insert(r.name);
    state_.names.insert("root");
}

std::optional<std::string> JsonSchemaGrammar::add(const nlohmann::ordered_json& schema,
                                                  const std::string& name_hint) {
    State saved = state_;
    try {
        return Builder(state_, schema, sanitize_name(name_hint)).add_root();
    } catch (const Refused& r) {
        state_ = std::move(saved);
        refusal_ = r.why;
        return std::nullopt;
    } catch (const nlohmann::json::exception& e) {  // a shape no check above foresaw
        state_ = std::move(saved);
        refusal_ = {"schema", "$", std::string("malformed schema: ") + e.what()};
        return std::nullopt;
    }
}

std::string JsonSchemaGrammar::add_any_value() {
    Builder::use_shared(state_, "value");
    return "value";
}

std::string JsonSchemaGrammar::add_any_object() {
    Builder::use_shared(state_, "object");
    return "object";
}

std::string JsonSchemaGrammar::gbnf(const std::string& root_rule) const {
    std::string out;
    if (!root_rule.empty()) out += "root ::= " + root_rule + "\n";
    for (const auto& [name, body] : state_.rules) out += name + " ::= " + body + "\n";
    for (const auto& r : kShared)
        if (state_.shared.count(r.name)) out += std::string(r.name) + " ::= " + r.body + "\n";
    return out;
}

const SchemaRefusal& JsonSchemaGrammar::refusal() const {
    return refusal_;
}

std::optional<std::string> json_schema_to_gbnf(const nlohmann::ordered_json& schema,
                                               SchemaRefusal* why) {
    JsonSchemaGrammar g;
    const auto root = g.add(schema, "schema");
    if (!root) {
        if (why) *why = g.refusal();
        return std::nullopt;
    }
    return g.gbnf(*root);
}

}  // namespace edgellm
