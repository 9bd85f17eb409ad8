#include "text/unicode.h"

#include <algorithm>
#include <array>

#include "text/unicode_tables.h"

namespace edgellm::unicode {

uint32_t decode(std::string_view s, size_t* pos) {
    const size_t i = *pos;
    const uint8_t c = (uint8_t)s[i];
    const int len = utf8_len(c);
    if (len == 1) {
        *pos = i + 1;
        return c < 0x80 ? c : 0xFFFD;
    }
    if (i + len > s.size()) {
        *pos = i + 1;
        return 0xFFFD;
    }
    uint32_t cp = c & (0xFF >> (len + 1));
    for (int k = 1; k < len; ++k) {
        const uint8_t cc = (uint8_t)s[i + k];
        if ((cc & 0xC0) != 0x80) {
            *pos = i + 1;
            return 0xFFFD;
        }
        cp = (cp << 6) | (cc & 0x3F);
    }
    const bool overlong =
        (len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000);
    if (overlong || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
        *pos = i + 1;
        return 0xFFFD;
    }
    *pos = i + len;
    return cp;
}

void append_utf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
        out->push_back((char)cp);
    } else if (cp < 0x800) {
        out->push_back((char)(0xC0 | (cp >> 6)));
        out->push_back((char)(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out->push_back((char)(0xE0 | (cp >> 12)));
        out->push_back((char)(0x80 | ((cp >> 6) & 0x3F)));
        out->push_back((char)(0x80 | (cp & 0x3F)));
    } else {
        out->push_back((char)(0xF0 | (cp >> 18)));
        out->push_back((char)(0x80 | ((cp >> 12) & 0x3F)));
        out->push_back((char)(0x80 | ((cp >> 6) & 0x3F)));
        out->push_back((char)(0x80 | (cp & 0x3F)));
    }
}

std::string sanitize(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    size_t pos = 0;
    while (pos < s.size()) {
        const size_t start = pos;
        const uint32_t cp = decode(s, &pos);
        if (cp == 0xFFFD && !(pos - start == 3 && (uint8_t)s[start] == 0xEF))
            append_utf8(0xFFFD, &out);
        else
            out.append(s.substr(start, pos - start));
    }
    return out;
}

size_t complete_prefix(std::string_view s) {
    // Look back at most 3 bytes for the start of a sequence that runs past the end.
    const size_t n = s.size();
    for (size_t back = 1; back <= 3 && back <= n; ++back) {
        const uint8_t c = (uint8_t)s[n - back];
        if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking
        const int len = utf8_len(c);
        if (len > (int)back) {
            // Incomplete: hold it back only if what is there so far is valid.
            for (size_t k = n - back + 1; k < n; ++k)
                if (((uint8_t)s[k] & 0xC0) != 0x80) return n;
            return n - back;
        }
        return n;
    }
    return n;
}

namespace {

struct ByteTables {
    std::array<std::string, 256> to_text;
    std::array<int, 512> to_byte;  // code points 0..511 cover every mapped character
};

// Printable bytes map to themselves; the rest (controls, space, 127..160, 173) to 256+k.
ByteTables make_tables() {
    ByteTables t;
    t.to_byte.fill(-1);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
        const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
        const uint32_t cp = printable ? (uint32_t)b : (uint32_t)next++;
        append_utf8(cp, &t.to_text[b]);
        t.to_byte[cp] = b;
    }
    return t;
}

const ByteTables& tables() {
    static const ByteTables t = make_tables();
    return t;
}

}  // namespace

const std::string& byte_to_text(uint8_t b) {
    return tables().to_text[b];
}

int text_to_byte(uint32_t cp) {
    return cp < 512 ? tables().to_byte[cp] : -1;
}

bool is_whitespace(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
           cp == 0x205F || cp == 0x3000;
}

namespace {

// The entry of a table sorted by `first` whose range may hold cp: the last one that starts
// at or before it (none when the first starts after it).
template <typename T>
const T* entry_for(std::span<const T> table, uint32_t cp) {
    auto it = std::upper_bound(table.begin(), table.end(), cp,
                               [](uint32_t c, const T& e) { return c < e.first; });
    return it == table.begin() ? nullptr : &*std::prev(it);
}

ucd::Group group_of(uint32_t cp) {
    const ucd::GroupStart* g = entry_for(ucd::groups(), cp);
    return g ? g->group : ucd::Group::Other;
}

}  // namespace

bool is_control(uint32_t cp) {
    return group_of(cp) == ucd::Group::Control;
}

bool is_mark(uint32_t cp) {
    return group_of(cp) == ucd::Group::Mark;
}

bool is_punctuation(uint32_t cp) {
    return group_of(cp) == ucd::Group::Punctuation;
}

uint32_t to_lower(uint32_t cp) {
    if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
    const ucd::LowerRun* r = entry_for(ucd::lower_runs(), cp);
    if (!r || cp > r->last || (cp - r->first) % r->step != 0) return cp;
    return (uint32_t)((int64_t)cp + r->delta);
}

uint32_t decomposition_base(uint32_t cp) {
    const ucd::Decomposition* d = entry_for(ucd::decompositions(), cp);
    return d && cp <= d->last ? d->base : cp;
}

}  // namespace edgellm::unicode
