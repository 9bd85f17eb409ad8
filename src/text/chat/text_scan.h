// Small scanning helpers for model replies (tool calls, reasoning blocks).
#pragma once

#include <algorithm>
#include <cstdio>
#include <string>
#include <string_view>

namespace edgellm {

inline bool is_blank(char c) {
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

inline std::string_view trim_left(std::string_view s) {
    while (!s.empty() && is_blank(s.front())) s.remove_prefix(1);
    return s;
}

inline std::string_view trim(std::string_view s) {
    s = trim_left(s);
    while (!s.empty() && is_blank(s.back())) s.remove_suffix(1);
    return s;
}

// Length of the longest suffix of s that is a proper prefix of word: text that may still
// become `word` when more arrives.
inline size_t partial_suffix(std::string_view s, std::string_view word) {
    for (size_t k = std::min(s.size(), word.size() - 1); k > 0; --k)
        if (s.substr(s.size() - k) == word.substr(0, k)) return k;
    return 0;
}

// One byte of a JSON string's text, escaped where JSON needs it (bytes of UTF-8 characters
// pass as they are).
inline void append_json_escaped(char c, std::string* out) {
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

}  // namespace edgellm
