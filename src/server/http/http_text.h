// The text rules of HTTP/1.1 the request parser and the connection both apply (tokens,
// optional whitespace, case-insensitive names, numbers). Internal to the transport.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace edgellm::http::text {

inline char ascii_lower(char c) {
    return (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
}

inline bool iequals(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
        if (ascii_lower(a[i]) != ascii_lower(b[i])) return false;
    return true;
}

inline std::string_view trim_ows(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

// RFC 9110 tchar: the characters of methods and header names.
inline bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

inline bool is_tchar(unsigned char c) {
    return is_digit((char)c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
}

inline bool is_token(std::string_view s) {
    if (s.empty()) return false;
    for (unsigned char c : s)
        if (c == 0 || !is_tchar(c)) return false;
    return true;
}

inline int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// Does the comma-separated list `value` hold `token` (case-insensitive)?
inline bool has_token(std::string_view value, std::string_view token) {
    while (!value.empty()) {
        const size_t comma = value.find(',');
        if (iequals(trim_ows(value.substr(0, comma)), token)) return true;
        if (comma == std::string_view::npos) break;
        value.remove_prefix(comma + 1);
    }
    return false;
}

// A decimal Content-Length: digits only, no sign, no overflow.
inline bool parse_content_length(std::string_view s, size_t* out) {
    if (s.empty() || s.size() > 19) return false;  // 19 digits always fit in 64 bits
    uint64_t v = 0;
    for (char c : s) {
        if (c < '0' || c > '9') return false;
        v = v * 10 + (uint64_t)(c - '0');
    }
    *out = (size_t)v;
    return true;
}

inline std::string json_escape(std::string_view s) {
    std::string out;
    for (unsigned char c : s) {
        if (c == '"' || c == '\\') {
            out += '\\';
            out += (char)c;
        } else if (c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            out += buf;
        } else {
            out += (char)c;
        }
    }
    return out;
}

}  // namespace edgellm::http::text
