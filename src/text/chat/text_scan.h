// Small scanning helpers for model replies (tool calls, reasoning blocks).
#pragma once

#include <algorithm>
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

}  // namespace edgellm
