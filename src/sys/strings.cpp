#include "sys/strings.h"

#include <cstdio>

#include <cctype>
#include <system_error>

namespace edgellm::sys {

std::string trim(std::string_view s) {
    size_t a = 0, b = s.size();
    while (a < b && std::isspace((unsigned char)s[a])) ++a;
    while (b > a && std::isspace((unsigned char)s[b - 1])) --b;
    return std::string(s.substr(a, b - a));
}

std::string lower(std::string_view s) {
    std::string o(s);
    for (char& c : o) c = (char)std::tolower((unsigned char)c);
    return o;
}

std::string vformat(const char* fmt, va_list ap) {
    char buf[2048];
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    return buf;
}

std::string errno_text(int e) {
    return std::error_code(e, std::generic_category()).message();
}

int utf8_seq_len(unsigned char c) {
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) return 3;
    if (c >= 0xF0 && c <= 0xF4) return 4;
    return 0;
}

size_t utf8_valid_at(std::string_view s, size_t i) {
    const auto b = [&](size_t k) { return (unsigned char)s[i + k]; };
    const int n = utf8_seq_len(b(0));
    if (n == 0 || i + n > s.size()) return 0;
    for (int k = 1; k < n; ++k)
        if ((b(k) & 0xC0) != 0x80) return 0;
    if (n == 3 && b(0) == 0xE0 && b(1) < 0xA0) return 0;   // overlong
    if (n == 3 && b(0) == 0xED && b(1) >= 0xA0) return 0;  // surrogate
    if (n == 4 && b(0) == 0xF0 && b(1) < 0x90) return 0;   // overlong
    if (n == 4 && b(0) == 0xF4 && b(1) >= 0x90) return 0;  // above U+10FFFF
    return (size_t)n;
}

bool is_valid_utf8(std::string_view s) {
    for (size_t i = 0; i < s.size();) {
        if ((unsigned char)s[i] < 0x80) {
            ++i;
            continue;
        }
        const size_t n = utf8_valid_at(s, i);
        if (n == 0) return false;
        i += n;
    }
    return true;
}

std::string to_valid_utf8(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
        const size_t n = (unsigned char)s[i] < 0x80 ? 1 : utf8_valid_at(s, i);
        if (n == 0) {
            out += "\xEF\xBF\xBD";
            ++i;
        } else {
            out.append(s.data() + i, n);
            i += n;
        }
    }
    return out;
}

size_t utf8_complete_prefix(std::string_view s) {
    const size_t n = s.size();
    for (size_t back = 1; back <= 3 && back <= n; ++back) {
        const unsigned char c = (unsigned char)s[n - back];
        if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back
        const int len = utf8_seq_len(c);
        return len > (int)back ? n - back : n;
    }
    return n;
}

size_t utf8_cut(std::string_view s, size_t n) {
    if (n >= s.size()) return s.size();
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) --n;
    return n;
}

}  // namespace edgellm::sys
