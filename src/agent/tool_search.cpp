// What the search tools match with: see tool_search.h.
#include "agent/tool_search.h"

#include <regex.h>

#include <algorithm>
#include <bitset>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "sys/strings.h"

namespace edgellm::agent {

namespace {

// ---- glob ------------------------------------------------------------------------------

// One compiled alternative of a glob, matched by simulating all positions at once
// (O(pattern x path), no backtracking blow-up on "*a*a*a*...").
class GlobAlt {
  public:
    explicit GlobAlt(std::string_view p) {
        for (size_t i = 0; i < p.size(); ++i) {
            const char c = p[i];
            if (c == '\\' && i + 1 < p.size()) {
                push_char(p[++i]);
            } else if (c == '*') {
                if (i + 1 < p.size() && p[i + 1] == '*') {
                    ++i;
                    while (i + 1 < p.size() && p[i + 1] == '*') ++i;  // "***" is "**"
                    if (i + 1 < p.size() && p[i + 1] == '/') {
                        ++i;
                        toks_.push_back({Op::Dirs, {}});
                    } else {
                        toks_.push_back({Op::Any, {}});
                    }
                } else {
                    toks_.push_back({Op::Star, {}});
                }
            } else if (c == '?') {
                Tok t{Op::Set, {}};
                t.set.set();
                t.set.reset('/');
                toks_.push_back(t);
            } else if (c == '[') {
                size_t end = i + 1;
                if (end < p.size() && (p[end] == '!' || p[end] == '^')) ++end;
                if (end < p.size() && p[end] == ']') ++end;  // a leading ']' is a member
                while (end < p.size() && p[end] != ']') ++end;
                if (end >= p.size()) {  // no closing bracket: a literal '['
                    push_char('[');
                    continue;
                }
                size_t k = i + 1;
                const bool negate = p[k] == '!' || p[k] == '^';
                if (negate) ++k;
                Tok t{Op::Set, {}};
                for (; k < end; ++k) {
                    const unsigned char lo = (unsigned char)p[k];
                    if (k + 2 < end && p[k + 1] == '-') {
                        const unsigned char hi = (unsigned char)p[k + 2];
                        for (unsigned v = lo; v <= hi; ++v) t.set.set(v);
                        k += 2;
                    } else {
                        t.set.set(lo);
                    }
                }
                if (negate) t.set.flip();
                t.set.reset('/');  // a class never matches a separator
                toks_.push_back(t);
                i = end;
            } else {
                push_char(c);
            }
        }
    }

    bool match(std::string_view s) const {
        const size_t n = s.size();
        std::vector<char> cur(n + 1, 0), next(n + 1, 0);
        cur[0] = 1;
        for (const Tok& t : toks_) {
            std::fill(next.begin(), next.end(), 0);
            switch (t.op) {
                case Op::Set:
                    for (size_t j = 0; j < n; ++j)
                        if (cur[j] && t.set.test((unsigned char)s[j])) next[j + 1] = 1;
                    break;
                case Op::Star:  // any run without '/'
                    for (size_t j = 0; j <= n; ++j)
                        next[j] = cur[j] || (j > 0 && next[j - 1] && s[j - 1] != '/');
                    break;
                case Op::Any: {  // any run
                    char seen = 0;
                    for (size_t j = 0; j <= n; ++j) next[j] = seen = seen || cur[j];
                    break;
                }
                case Op::Dirs: {  // "" or any run ending in '/'
                    char seen = 0;
                    for (size_t j = 0; j <= n; ++j) {
                        next[j] = cur[j] || (j > 0 && s[j - 1] == '/' && seen);
                        seen = seen || cur[j];
                    }
                    break;
                }
            }
            std::swap(cur, next);
        }
        return cur[n] != 0;
    }

  private:
    enum class Op : uint8_t { Set, Star, Any, Dirs };
    struct Tok {
        Op op;
        std::bitset<256> set;
    };
    void push_char(char c) {
        Tok t{Op::Set, {}};
        t.set.set((unsigned char)c);
        toks_.push_back(t);
    }
    std::vector<Tok> toks_;
};

// {a,b} alternatives expanded (nested ones too), at most 256 of them; a brace without a
// top-level comma stays literal.
void expand_braces(const std::string& p, std::vector<std::string>* out) {
    if (out->size() >= 256) return;
    size_t open = std::string::npos;
    for (size_t i = 0; i < p.size(); ++i) {
        if (p[i] == '\\') {
            ++i;
            continue;
        }
        if (p[i] != '{') continue;
        int depth = 0;
        std::vector<size_t> commas;
        size_t close = std::string::npos;
        for (size_t k = i; k < p.size(); ++k) {
            if (p[k] == '\\') {
                ++k;
                continue;
            }
            if (p[k] == '{') ++depth;
            if (p[k] == '}' && --depth == 0) {
                close = k;
                break;
            }
            if (p[k] == ',' && depth == 1) commas.push_back(k);
        }
        if (close == std::string::npos) break;
        if (commas.empty()) continue;
        open = i;
        const std::string head = p.substr(0, open), tail = p.substr(close + 1);
        size_t from = open + 1;
        commas.push_back(close);
        for (size_t c : commas) {
            expand_braces(head + p.substr(from, c - from) + tail, out);
            from = c + 1;
        }
        return;
    }
    out->push_back(p);
}

// include/exclude of the search tools, compiled once per call.
class PathGlob {
  public:
    explicit PathGlob(std::string_view pattern) {
        std::string p(pattern);
        basename_only_ = p.find('/') == std::string::npos;
        if (!basename_only_) {
            if (p[0] == '/') {
                p.erase(0, p.find_first_not_of('/'));  // anchored at the search directory
            } else if (!p.starts_with("**")) {
                p = "**/" + p;
            }
        }
        std::vector<std::string> alts;
        expand_braces(p, &alts);
        for (const auto& a : alts) alts_.emplace_back(a);
    }
    bool match(std::string_view rel) const {
        std::string_view s = rel;
        if (basename_only_) {
            const size_t slash = s.rfind('/');
            if (slash != std::string_view::npos) s = s.substr(slash + 1);
        }
        for (const auto& a : alts_)
            if (a.match(s)) return true;
        return false;
    }

  private:
    bool basename_only_ = true;
    std::vector<GlobAlt> alts_;
};

// Escapes the ERE lacks, as what it has: inside a bracket expression, and outside one.
struct EscapeForm {
    char letter;  // of the backslash escape
    const char* ere;
};
const EscapeForm kClassEscapes[] = {{'d', "0-9"}, {'s', " \t\r\f\v"}, {'w', "A-Za-z0-9_"}};
const EscapeForm kEscapes[] = {{'d', "[0-9]"}, {'D', "[^0-9]"}, {'t', "\t"}};

// What the escape at c (followed by next) stands for in forms, or null.
const char* escape_form(std::span<const EscapeForm> forms, char c, char next) {
    if (c != '\\') return nullptr;
    for (const EscapeForm& f : forms)
        if (next == f.letter) return f.ere;
    return nullptr;
}

// An ECMAScript-flavoured pattern (what models write) as a POSIX extended one: \d \D
// (also inside brackets), (?:...) groups, \t. glibc's ERE has \w \W \s \S \b \B itself.
std::string to_posix_ere(std::string_view re) {
    std::string out;
    bool in_class = false;
    for (size_t i = 0; i < re.size(); ++i) {
        const char c = re[i];
        const char next = i + 1 < re.size() ? re[i + 1] : '\0';
        if (in_class) {
            if (const char* form = escape_form(kClassEscapes, c, next)) {
                out += form;
                ++i;
            } else {
                if (c == ']') in_class = false;
                out += c;
            }
            continue;
        }
        if (c == '[') {
            in_class = true;
            out += c;
            if (next == '^') out += re[++i];
            if (i + 1 < re.size() && re[i + 1] == ']') out += re[++i];  // a literal ']'
        } else if (const char* form = escape_form(kEscapes, c, next)) {
            out += form;
            ++i;
        } else if (c == '(' && next == '?' && i + 2 < re.size() && re[i + 2] == ':') {
            out += '(';
            i += 2;
        } else if (c == '\\' && next != '\0') {
            out += c;
            out += re[++i];
        } else {
            out += c;
        }
    }
    return out;
}

}  // namespace

struct EntryFilter::Globs {
    PathGlob include;
    std::optional<PathGlob> exclude;
};

EntryFilter::EntryFilter(std::string_view include, std::string_view exclude)
    : g_(new Globs{PathGlob(include.empty() ? "**" : include), std::nullopt}) {
    if (!exclude.empty()) g_->exclude.emplace(exclude);
}

EntryFilter::~EntryFilter() = default;

bool EntryFilter::keeps(std::string_view rel) const {
    return g_->include.match(rel) && !(g_->exclude && g_->exclude->match(rel));
}

// regcomp/regexec: glibc's matcher does not recurse per character as libstdc++'s
// std::regex does (which can overflow the stack on a long line).
struct LineMatcher::Impl {
    ~Impl() {
        if (compiled_) ::regfree(&re_);
    }
    // "" when compiled, else why not.
    std::string compile(const std::string& pattern, bool literal, bool icase) {
        literal_ = literal;
        icase_ = icase;
        if (literal) {
            needle_ = icase ? sys::lower(pattern) : pattern;
            return "";
        }
        const std::string ere = to_posix_ere(pattern);
        const int rc =
            ::regcomp(&re_, ere.c_str(), REG_EXTENDED | REG_NOSUB | (icase ? REG_ICASE : 0));
        if (rc != 0) {
            char buf[256];
            ::regerror(rc, &re_, buf, sizeof buf);
            return buf;
        }
        compiled_ = true;
        return "";
    }
    bool match(std::string_view line) {
        if (literal_) {
            if (!icase_) return line.find(needle_) != std::string_view::npos;
            return sys::lower(line).find(needle_) != std::string::npos;
        }
        buf_.assign(line);
        return ::regexec(&re_, buf_.c_str(), 0, nullptr, 0) == 0;
    }

    regex_t re_{};
    bool compiled_ = false, literal_ = false, icase_ = false;
    std::string needle_, buf_;
};

LineMatcher::LineMatcher() : d_(new Impl) {}
LineMatcher::~LineMatcher() = default;

std::string LineMatcher::compile(const std::string& pattern, bool literal, bool icase) {
    return d_->compile(pattern, literal, icase);
}

bool LineMatcher::match(std::string_view line) {
    return d_->match(line);
}

}  // namespace edgellm::agent
