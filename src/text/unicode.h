// UTF-8 helpers, the byte <-> character mapping of byte-level BPE, and the character
// properties of the WordPiece (BERT) normalizer.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace edgellm::unicode {

// Length of the UTF-8 sequence that starts with byte c (1 for a stray continuation byte).
inline int utf8_len(uint8_t c) {
    if (c < 0x80) return 1;
    if ((c & 0xE0) == 0xC0) return 2;
    if ((c & 0xF0) == 0xE0) return 3;
    if ((c & 0xF8) == 0xF0) return 4;
    return 1;
}

// Decode the code point at s[*pos]; advances *pos. Invalid or truncated sequences decode
// as U+FFFD and consume one byte.
uint32_t decode(std::string_view s, size_t* pos);
void append_utf8(uint32_t cp, std::string* out);

// The text with every invalid UTF-8 byte replaced by U+FFFD.
std::string sanitize(std::string_view s);

// Length of the longest prefix of s that ends on a UTF-8 character boundary, treating a
// trailing incomplete (but so far valid) sequence as not yet complete.
size_t complete_prefix(std::string_view s);

// GPT-2 byte-level BPE: every byte maps to a printable character, so that token texts are
// valid UTF-8. byte_to_text(b) is that character as UTF-8; text_to_byte the inverse
// (-1 when the code point is not a byte's character).
const std::string& byte_to_text(uint8_t b);
int text_to_byte(uint32_t cp);

// Character properties (text/unicode_tables.h has the data and its Unicode version).
bool is_whitespace(uint32_t cp);   // Unicode's White_Space
bool is_control(uint32_t cp);      // general category Cc, Cf, Co or Cs
bool is_mark(uint32_t cp);         // M*: combining marks, accents among them
bool is_punctuation(uint32_t cp);  // P*
uint32_t to_lower(uint32_t cp);    // the simple lowercase mapping
// The first code point of cp's canonical decomposition (NFD): the base letter of an
// accented one, cp itself when it does not decompose.
uint32_t decomposition_base(uint32_t cp);

}  // namespace edgellm::unicode
