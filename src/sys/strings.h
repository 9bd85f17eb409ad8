// The small string helpers the layers above share: ASCII trim and lower case, errno's text,
// and UTF-8 checks for text that comes from outside (files, command output, a child's log),
// which may hold any bytes and may be cut in the middle of a character.
//
// (starts_with / ends_with: std::string_view's own, C++20.)
#pragma once

#include <cstdarg>
#include <cstddef>
#include <string>
#include <string_view>

namespace edgellm::sys {

// s without leading and trailing white space (isspace in the C locale: space, \t \n \v \f \r).
std::string trim(std::string_view s);

// s in ASCII lower case (other bytes as they are).
std::string lower(std::string_view s);

// The message of an errno value ("No such file or directory").
std::string errno_text(int e);

// printf's formatting into a string (a log line: at most 2047 bytes, the rest cut).
std::string vformat(const char* fmt, va_list ap);

// ---- UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF) ----------

// Length of the sequence a lead byte starts (1 for ASCII; 0: not a lead byte).
int utf8_seq_len(unsigned char c);

// Length of the valid sequence at s[i] (0: invalid there, or cut off by the end of s).
size_t utf8_valid_at(std::string_view s, size_t i);

bool is_valid_utf8(std::string_view s);

// s with every byte that is not part of a valid sequence replaced by U+FFFD.
std::string to_valid_utf8(std::string_view s);

// The length of s without a trailing sequence that is still incomplete (its next bytes
// may come with the next read).
size_t utf8_complete_prefix(std::string_view s);

// The largest cut <= n that does not split a character.
size_t utf8_cut(std::string_view s, size_t n);

}  // namespace edgellm::sys
