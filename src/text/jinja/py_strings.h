// Python's text semantics for the interpreter (py_strings.cpp): strings are UTF-8 bytes
// read as code points; what str's methods and Jinja2's string filters do with them.
#pragma once

#include "text/jinja/internal.h"

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace edgellm::jinja::detail {

struct Value;

// ---- code points (bytes that are not UTF-8 survive as U+DC80..U+DCFF) ----
uint32_t next_code_point(std::string_view s, size_t& i);
void append_utf8(std::string& out, uint32_t cp);
std::vector<uint32_t> code_points(std::string_view s);
std::string encode(const std::vector<uint32_t>& cps, size_t begin, size_t end);
size_t count_code_points(std::string_view s);

// ---- searching, charged to work() ----
size_t find_text(std::string_view s, std::string_view needle, size_t from);
size_t rfind_text(std::string_view s, std::string_view needle, size_t pos);

// ---- whitespace and case ----
bool is_py_space(uint32_t c);
uint32_t cp_lower(uint32_t c);
bool is_cased(uint32_t c);
bool is_upper_cp(uint32_t c);
bool is_lower_cp(uint32_t c);
void append_upper(std::string& out, uint32_t c);
std::string str_upper(std::string_view s);
std::string str_lower(std::string_view s);
std::string str_title(std::string_view s);
std::string str_capitalize(std::string_view s);
std::string jinja_title(std::string_view s);

// ---- str methods ----
std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right);
bool all_py_space(std::string_view s);
std::vector<std::string> py_split(std::string_view s, const std::string* sep, int64_t maxsplit);
std::vector<std::string> py_rsplit(std::string_view s, const std::string* sep, int64_t maxsplit);
std::string py_replace(std::string_view s, std::string_view old, std::string_view repl,
                       int64_t count);
std::vector<std::string> py_splitlines(std::string_view s, bool keepends);
std::string html_escape(std::string_view s);

// ---- numbers as text ----
std::string float_repr(double x);
std::optional<int64_t> parse_py_int(const std::string& text, int base);
std::optional<double> parse_py_float(const std::string& text);

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

std::string percent_format(const std::string& fmt, const Value& arg);

}  // namespace edgellm::jinja::detail
