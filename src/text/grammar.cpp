// GBNF grammars: parser, compiler and matcher (see include/edgellm/grammar.h).
//
// Compiled form. Every rule is a list of alternatives; each alternative a sequence of
// elements ending in End. All sequences live in one array, so a position in the grammar
// is one index:
//
//   elements: [ Class 3 | Ref 2 | End | Class 0 | End | ... ]
//               ^ rule 0, alt 0       ^ rule 0, alt 1
//
// Repetitions and groups become generated rules while parsing:
//   x*      R ::= x R |            x+  ->  x x*
//   x?      R ::= x |              x{m,n} -> m copies of x, then n-m nested optionals
//   ( a | b )  G ::= a | b
//
// Matching. A stack is a list of positions, its top the next element to match; it is
// interned as a node (top position, id of the rest), id 0 being the empty stack (the
// grammar has ended). "Expanding" a stack replaces a rule reference on top by each of the
// rule's alternatives (with the position after the reference below), until every stack
// has a character class on top or is empty. A state is a sorted set of expanded stacks plus
// a partial UTF-8 sequence; states are interned too, id 0 being the dead state. A byte moves
// a state to another, memoised per (state, byte): on a whole code point each stack whose
// class matches advances; on a partial one the stacks whose class cannot match any code
// point with that prefix are dropped (so a token that ends inside a character is admitted
// only if the character can still be completed).
#include "edgellm/grammar.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "edgellm/tokenizer.h"
#include "text/unicode.h"

namespace edgellm {

namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr int kMaxGroupDepth = 256;  // nesting of ( ... ): the parser recurses per level

enum class ElemKind : uint8_t { End, Class, Ref };

struct Element {
    ElemKind kind;
    uint32_t value;  // Class: index into classes; Ref: rule id
};

// A set of code points: sorted, merged ranges, possibly negated.
struct CharClass {
    std::vector<std::pair<uint32_t, uint32_t>> ranges;  // inclusive
    bool negated = false;

    bool contains_raw(uint32_t cp) const {
        // binary search over merged ranges
        auto it = std::upper_bound(ranges.begin(), ranges.end(), cp,
                                   [](uint32_t v, const auto& r) { return v < r.first; });
        if (it == ranges.begin()) return false;
        --it;
        return cp <= it->second;
    }
    bool matches(uint32_t cp) const { return contains_raw(cp) != negated; }
    // Does the class match some code point in [lo, hi]?
    bool intersects(uint32_t lo, uint32_t hi) const {
        if (!negated) {
            for (const auto& r : ranges)
                if (r.first <= hi && r.second >= lo) return true;
            return false;
        }
        // negated: some point of [lo, hi] is outside every range
        uint32_t at = lo;
        for (const auto& r : ranges) {
            if (r.second < at) continue;
            if (r.first > at) return true;
            if (r.second >= hi) return false;
            at = r.second + 1;
        }
        return at <= hi;
    }
    void normalize() {
        std::sort(ranges.begin(), ranges.end());
        std::vector<std::pair<uint32_t, uint32_t>> merged;
        for (const auto& r : ranges) {
            if (!merged.empty() && r.first <= merged.back().second + 1)
                merged.back().second = std::max(merged.back().second, r.second);
            else
                merged.push_back(r);
        }
        ranges = std::move(merged);
    }
};

}  // namespace

std::string gbnf_escape(uint32_t cp, bool in_class) {
    char buf[16];
    if (cp == '"' && !in_class) return "\\\"";
    if (cp == '\\') return "\\\\";
    if (in_class && (cp == ']' || cp == '-' || cp == '^' || cp == '[')) {
        buf[0] = '\\';
        buf[1] = (char)cp;
        return std::string(buf, 2);
    }
    if (cp == '\n') return "\\n";
    if (cp == '\r') return "\\r";
    if (cp == '\t') return "\\t";
    if (cp < 0x20 || cp == 0x7F) {
        std::snprintf(buf, sizeof buf, "\\x%02X", (unsigned)cp);
        return buf;
    }
    if (cp < 0x80) return std::string(1, (char)cp);
    if (cp <= 0xFFFF)
        std::snprintf(buf, sizeof buf, "\\u%04X", (unsigned)cp);
    else
        std::snprintf(buf, sizeof buf, "\\U%08X", (unsigned)cp);
    return buf;
}

std::string gbnf_literal(std::string_view utf8) {
    std::string out = "\"";
    for (size_t i = 0; i < utf8.size();) out += gbnf_escape(unicode::decode(utf8, &i), false);
    return out + "\"";
}

struct Grammar::Impl {
    std::vector<Element> elements;
    std::vector<CharClass> classes;
    std::vector<std::string> rule_names;
    std::vector<std::vector<uint32_t>> rule_alts;  // start position of each alternative
    uint32_t root = 0;
};

namespace {

// ---- parser ------------------------------------------------------------------------------

// A rule while parsing: alternatives of items (a class index or a rule reference).
struct Item {
    bool is_ref;
    uint32_t value;
};
using Alt = std::vector<Item>;

struct SrcLoc {
    int line = 1, column = 1;
};

class Parser {
  public:
    explicit Parser(std::string_view text) : s_(text) {}

    Result<std::shared_ptr<const Grammar::Impl>> run(std::string_view root);

  private:
    [[noreturn]] void fail_at(size_t pos, const std::string& what) const {
        const SrcLoc l = loc(pos);
        throw Error("line " + std::to_string(l.line) + ", column " + std::to_string(l.column) +
                    ": " + what);
    }
    SrcLoc loc(size_t pos) const {
        SrcLoc l;
        for (size_t i = 0; i < pos && i < s_.size(); ++i) {
            if (s_[i] == '\n') {
                ++l.line;
                l.column = 1;
            } else if (((unsigned char)s_[i] & 0xC0) != 0x80) {
                ++l.column;
            }
        }
        return l;
    }
    bool at_end() const { return pos_ >= s_.size(); }
    char peek(size_t k = 0) const { return pos_ + k < s_.size() ? s_[pos_ + k] : '\0'; }

    // Spaces and comments; newlines too when `newlines`.
    void skip_space(bool newlines) {
        while (!at_end()) {
            const char c = peek();
            if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
                ++pos_;
            } else if (c == '#') {
                while (!at_end() && peek() != '\n') ++pos_;
            } else {
                break;
            }
        }
    }
    static bool is_name_char(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '-' || c == '_';
    }
    std::string parse_name() {
        const size_t start = pos_;
        while (!at_end() && is_name_char(peek())) ++pos_;
        if (pos_ == start) fail_at(start, "expected a rule name");
        return std::string(s_.substr(start, pos_ - start));
    }
    uint32_t parse_hex(int digits) {
        uint32_t v = 0;
        for (int i = 0; i < digits; ++i) {
            const char c = peek();
            int d = -1;
            if (c >= '0' && c <= '9') d = c - '0';
            if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
            if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
            if (d < 0)
                fail_at(pos_, "expected " + std::to_string(digits) + " hex digits in an escape");
            v = v * 16 + (uint32_t)d;
            ++pos_;
        }
        if (v > kMaxCodePoint) fail_at(pos_, "escape beyond U+10FFFF");
        return v;
    }
    // One character of a literal or class (pos_ at it), escapes decoded.
    uint32_t parse_char() {
        if (at_end()) fail_at(pos_, "unexpected end of the grammar");
        const unsigned char c = (unsigned char)peek();
        if (c == '\\') {
            const size_t at = pos_;
            ++pos_;
            const char e = peek();
            ++pos_;
            switch (e) {
                case 'n': return '\n';
                case 'r': return '\r';
                case 't': return '\t';
                case '0': return 0;
                case '\\': return '\\';
                case '"': return '"';
                case '\'': return '\'';
                case '[': return '[';
                case ']': return ']';
                case '-': return '-';
                case '^': return '^';
                case '/': return '/';
                case 'x': return parse_hex(2);
                case 'u': return parse_hex(4);
                case 'U': return parse_hex(8);
                default:
                    fail_at(at, std::string("unknown escape \\") + (e ? std::string(1, e) : ""));
            }
        }
        // a UTF-8 sequence
        int n = c < 0x80 ? 0 : c < 0xE0 ? 1 : c < 0xF0 ? 2 : 3;
        if (c >= 0x80 && c < 0xC0) fail_at(pos_, "invalid UTF-8 in the grammar");
        uint32_t cp = n == 0 ? c : n == 1 ? (c & 0x1F) : n == 2 ? (c & 0x0F) : (c & 0x07);
        const size_t at = pos_;
        ++pos_;
        for (int i = 0; i < n; ++i) {
            const unsigned char d = (unsigned char)peek();
            if ((d & 0xC0) != 0x80) fail_at(at, "invalid UTF-8 in the grammar");
            cp = (cp << 6) | (d & 0x3F);
            ++pos_;
        }
        // overlong forms, surrogates, code points beyond U+10FFFF
        constexpr uint32_t min_of_length[4] = {0, 0x80, 0x800, 0x10000};
        if (c >= 0xF8 || cp < min_of_length[n] || cp > kMaxCodePoint ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            fail_at(at, "invalid UTF-8 in the grammar");
        return cp;
    }
    uint32_t add_class(CharClass cc) {
        cc.normalize();
        g_->classes.push_back(std::move(cc));
        return (uint32_t)g_->classes.size() - 1;
    }
    uint32_t single(uint32_t cp) {
        CharClass cc;
        cc.ranges.push_back({cp, cp});
        return add_class(std::move(cc));
    }
    uint32_t rule_id(const std::string& name, size_t pos) {
        auto it = ids_.find(name);
        if (it != ids_.end()) {
            const uint32_t old = it->second;
            if (base_of_[old].empty()) return old;
            // The grammar names a rule like one generated for a group or repetition
            // ("root-1"; JSON schema grammars name rules "name-2"): the generated one moves.
            const std::string fresh = fresh_name(base_of_[old]);
            ids_.erase(it);
            ids_[fresh] = old;
            g_->rule_names[old] = fresh;
        }
        const uint32_t id = (uint32_t)rules_.size();
        ids_[name] = id;
        rules_.emplace_back();
        defined_.push_back(false);
        first_use_.push_back(pos);
        def_pos_.push_back(pos);
        base_of_.emplace_back();
        g_->rule_names.push_back(name);
        return id;
    }
    std::string fresh_name(const std::string& base) {
        std::string name;
        do {
            name = base + "-" + std::to_string(++generated_);
        } while (ids_.count(name));
        return name;
    }
    uint32_t new_rule(const std::string& base, size_t pos) {
        const uint32_t id = rule_id(fresh_name(base), pos);
        defined_[id] = true;
        base_of_[id] = base;
        return id;
    }

    // alternatives ::= sequence ("|" sequence)*
    std::vector<Alt> parse_alternatives(const std::string& rule, bool nested) {
        std::vector<Alt> alts;
        alts.push_back(parse_sequence(rule, nested));
        while (peek() == '|') {
            ++pos_;
            skip_space(true);
            alts.push_back(parse_sequence(rule, nested));
        }
        return alts;
    }

    // A sequence of items with postfix operators, up to "|", ")" or the end of the rule
    // (a newline outside parentheses, unless the next line continues with "|").
    Alt parse_sequence(const std::string& rule, bool nested) {
        Alt seq;
        size_t last_start = seq.size();  // items of the last term (for postfix operators)
        bool have_term = false;
        for (;;) {
            skip_space(nested);
            if (at_end()) break;
            const char c = peek();
            const size_t at = pos_;
            if (c == '|' || c == ')') break;
            if (c == '\n') {
                // A rule ends at a newline unless the next non-blank line starts with "|".
                size_t k = pos_;
                while (k < s_.size()) {
                    const char d = s_[k];
                    if (d == ' ' || d == '\t' || d == '\r' || d == '\n') {
                        ++k;
                    } else if (d == '#') {
                        while (k < s_.size() && s_[k] != '\n') ++k;
                    } else {
                        break;
                    }
                }
                if (k < s_.size() && s_[k] == '|') {
                    pos_ = k;
                    break;
                }
                break;
            }
            if (c == '"') {
                ++pos_;
                last_start = seq.size();
                while (peek() != '"') {
                    if (at_end() || peek() == '\n') fail_at(at, "unterminated literal");
                    seq.push_back({false, single(parse_char())});
                }
                ++pos_;
                have_term = true;
                // An empty literal "" matches nothing: a term of no items.
            } else if (c == '[') {
                ++pos_;
                CharClass cc;
                if (peek() == '^') {
                    cc.negated = true;
                    ++pos_;
                }
                while (peek() != ']') {
                    if (at_end() || peek() == '\n') fail_at(at, "unterminated character class");
                    const uint32_t lo = parse_char();
                    uint32_t hi = lo;
                    if (peek() == '-' && peek(1) != ']' && peek(1) != '\0') {
                        ++pos_;
                        const size_t hi_at = pos_;
                        hi = parse_char();
                        if (hi < lo) fail_at(hi_at, "character range is backwards");
                    }
                    cc.ranges.push_back({lo, hi});
                }
                ++pos_;
                if (cc.ranges.empty() && !cc.negated) fail_at(at, "empty character class");
                last_start = seq.size();
                seq.push_back({false, add_class(std::move(cc))});
                have_term = true;
            } else if (c == '.') {
                ++pos_;
                CharClass cc;
                cc.negated = true;  // matches any code point
                last_start = seq.size();
                seq.push_back({false, add_class(std::move(cc))});
                have_term = true;
            } else if (c == '(') {
                ++pos_;
                if (++group_depth_ > kMaxGroupDepth)
                    fail_at(at, "groups nested deeper than " + std::to_string(kMaxGroupDepth));
                skip_space(true);
                const uint32_t id = new_rule(rule, at);
                auto alts = parse_alternatives(rule, true);
                skip_space(true);
                if (peek() != ')') fail_at(at, "unclosed (");
                ++pos_;
                --group_depth_;
                rules_[id] = std::move(alts);
                last_start = seq.size();
                seq.push_back({true, id});
                have_term = true;
            } else if (is_name_char(c)) {
                const size_t save = pos_;
                const std::string name = parse_name();
                // The start of the next rule ("name ::=") ends this one.
                size_t k = pos_;
                while (k < s_.size() && (s_[k] == ' ' || s_[k] == '\t')) ++k;
                if (s_.substr(k, 3) == "::=") {
                    pos_ = save;
                    break;
                }
                last_start = seq.size();
                seq.push_back({true, rule_id(name, at)});
                have_term = true;
            } else if (c == '*' || c == '+' || c == '?' || c == '{') {
                if (!have_term) fail_at(at, std::string("'") + c + "' needs something before it");
                int64_t min = 0, max = -1;  // -1: unbounded
                ++pos_;
                if (c == '+') min = 1;
                if (c == '?') max = 1;
                if (c == '{') {
                    skip_space(false);
                    min = parse_count(at);
                    skip_space(false);
                    max = min;
                    if (peek() == ',') {
                        ++pos_;
                        skip_space(false);
                        max = peek() == '}' ? -1 : parse_count(at);
                        skip_space(false);
                    }
                    if (peek() != '}') fail_at(at, "expected } to close the repetition");
                    ++pos_;
                    if (max >= 0 && max < min) fail_at(at, "repetition {m,n} with n < m");
                }
                Alt term(seq.begin() + (long)last_start, seq.end());
                seq.resize(last_start);
                repeat(rule, at, term, min, max, &seq);
                last_start = seq.size() ? seq.size() - 1 : 0;
                have_term = false;  // "x**" is an error, as in llama.cpp
                continue;
            } else {
                fail_at(at, std::string("unexpected '") + c + "'");
            }
        }
        return seq;
    }

    int64_t parse_count(size_t at) {
        const size_t start = pos_;
        int64_t v = 0;
        while (peek() >= '0' && peek() <= '9') {
            v = v * 10 + (peek() - '0');
            if (v > 100000) fail_at(at, "repetition count above 100000");
            ++pos_;
        }
        if (pos_ == start) fail_at(at, "expected a number in the repetition");
        return v;
    }

    // Append `term` repeated min..max times (max -1: unbounded) to *seq.
    void repeat(const std::string& rule, size_t at, const Alt& term, int64_t min, int64_t max,
                Alt* seq) {
        if (max >= 0 && (int64_t)term.size() * max > 4'000'000)
            fail_at(at, "repetition too large");
        for (int64_t i = 0; i < min; ++i) seq->insert(seq->end(), term.begin(), term.end());
        if (max < 0) {  // R ::= term R |
            const uint32_t id = new_rule(rule, at);
            Alt a = term;
            a.push_back({true, id});
            rules_[id] = {a, Alt{}};
            seq->push_back({true, id});
            return;
        }
        // max - min nested optionals: R1 ::= term R2 | ; ... ; Rk ::= term |
        uint32_t next = 0;
        bool have_next = false;
        for (int64_t i = 0; i < max - min; ++i) {
            const uint32_t id = new_rule(rule, at);
            Alt a = term;
            if (have_next) a.push_back({true, next});
            rules_[id] = {a, Alt{}};
            next = id;
            have_next = true;
        }
        if (have_next) seq->push_back({true, next});
    }

    void check_left_recursion();

    std::string_view s_;
    size_t pos_ = 0;
    std::unique_ptr<Grammar::Impl> g_ = std::make_unique<Grammar::Impl>();
    std::map<std::string, uint32_t> ids_;
    std::vector<std::vector<Alt>> rules_;
    std::vector<bool> defined_;
    std::vector<size_t> first_use_;     // where a rule was first named
    std::vector<size_t> def_pos_;       // where it was defined
    std::vector<std::string> base_of_;  // a generated rule: the rule it came from; else ""
    int generated_ = 0;
    int group_depth_ = 0;
};

void Parser::check_left_recursion() {
    const size_t n = rules_.size();
    // nullable: the rule can match the empty string
    std::vector<bool> nullable(n, false);
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < n; ++r) {
            if (nullable[r]) continue;
            for (const Alt& a : rules_[r]) {
                bool all = true;
                for (const Item& it : a)
                    if (!it.is_ref || !nullable[it.value]) {
                        all = false;
                        break;
                    }
                if (all) {
                    nullable[r] = true;
                    changed = true;
                    break;
                }
            }
        }
    }
    // edges r -> s when s can come first in r (after nullable items only)
    std::vector<std::vector<uint32_t>> first(n);
    for (size_t r = 0; r < n; ++r)
        for (const Alt& a : rules_[r])
            for (const Item& it : a) {
                if (!it.is_ref) break;
                first[r].push_back(it.value);
                if (!nullable[it.value]) break;
            }
    // a cycle in that graph is left recursion
    std::vector<int> mark(n, 0);  // 0 new, 1 on the path, 2 done
    std::vector<std::pair<uint32_t, size_t>> stack;
    for (size_t start = 0; start < n; ++start) {
        if (mark[start]) continue;
        stack.push_back({(uint32_t)start, 0});
        mark[start] = 1;
        while (!stack.empty()) {
            auto& [r, i] = stack.back();
            if (i < first[r].size()) {
                const uint32_t s = first[r][i++];
                if (mark[s] == 1) {
                    // a generated rule ("value-3") is reported by the rule it came from
                    const std::string& name = base_of_[s].empty() ? g_->rule_names[s] : base_of_[s];
                    fail_at(def_pos_[s], "rule " + name +
                                             " is left-recursive: it can reach itself without "
                                             "consuming a character");
                }
                if (mark[s] == 0) {
                    mark[s] = 1;
                    stack.push_back({s, 0});
                }
            } else {
                mark[r] = 2;
                stack.pop_back();
            }
        }
    }
}

Result<std::shared_ptr<const Grammar::Impl>> Parser::run(std::string_view root) {
    using R = Result<std::shared_ptr<const Grammar::Impl>>;
    try {
        skip_space(true);
        while (!at_end()) {
            const size_t at = pos_;
            const std::string name = parse_name();
            skip_space(false);
            if (s_.substr(pos_, 3) != "::=") fail_at(pos_, "expected ::= after the rule name " + name);
            pos_ += 3;
            skip_space(true);
            const uint32_t id = rule_id(name, at);
            if (defined_[id]) fail_at(at, "rule " + name + " is defined twice");
            defined_[id] = true;
            def_pos_[id] = at;
            rules_[id] = parse_alternatives(name, false);
            skip_space(false);
            if (!at_end() && peek() == ')') fail_at(pos_, "unexpected ')'");
            skip_space(true);
        }
        if (rules_.empty()) fail_at(0, "the grammar has no rules");
        for (size_t r = 0; r < rules_.size(); ++r)
            if (!defined_[r])
                fail_at(first_use_[r], "rule " + g_->rule_names[r] + " is used but never defined");
        auto it = ids_.find(std::string(root));
        if (it == ids_.end() || !base_of_[it->second].empty())
            fail_at(s_.size(), "the grammar has no rule named " + std::string(root));
        check_left_recursion();
        // Flatten.
        Grammar::Impl& g = *g_;
        g.root = it->second;
        g.rule_alts.resize(rules_.size());
        for (size_t r = 0; r < rules_.size(); ++r)
            for (const Alt& a : rules_[r]) {
                g.rule_alts[r].push_back((uint32_t)g.elements.size());
                for (const Item& itm : a)
                    g.elements.push_back({itm.is_ref ? ElemKind::Ref : ElemKind::Class, itm.value});
                g.elements.push_back({ElemKind::End, 0});
            }
        return R(std::shared_ptr<const Grammar::Impl>(std::move(g_)));
    } catch (const Error& e) {
        return R::fail(e.what());
    }
}

}  // namespace

Result<std::shared_ptr<const Grammar>> Grammar::parse(std::string_view text, std::string_view root) {
    using R = Result<std::shared_ptr<const Grammar>>;
    Parser p(text);
    auto impl = p.run(root);
    if (!impl) return R::fail(impl.error());
    std::shared_ptr<Grammar> g(new Grammar());
    g->impl_ = std::make_unique<Impl>(**impl);
    return R(std::shared_ptr<const Grammar>(std::move(g)));
}

Grammar::~Grammar() = default;

size_t Grammar::n_rules() const {
    return impl_->rule_names.size();
}

std::string Grammar::to_string() const {
    const Impl& g = *impl_;
    std::string out;
    for (size_t r = 0; r < g.rule_names.size(); ++r) {
        out += g.rule_names[r] + " ::=";
        for (size_t a = 0; a < g.rule_alts[r].size(); ++a) {
            if (a) out += " |";
            for (uint32_t p = g.rule_alts[r][a]; g.elements[p].kind != ElemKind::End; ++p) {
                const Element& e = g.elements[p];
                if (e.kind == ElemKind::Ref) {
                    out += " " + g.rule_names[e.value];
                    continue;
                }
                const CharClass& cc = g.classes[e.value];
                if (!cc.negated && cc.ranges.size() == 1 && cc.ranges[0].first == cc.ranges[0].second) {
                    out += " \"" + gbnf_escape(cc.ranges[0].first, false) + "\"";
                    continue;
                }
                if (cc.negated && cc.ranges.empty()) {
                    out += " .";
                    continue;
                }
                out += cc.negated ? " [^" : " [";
                for (const auto& [lo, hi] : cc.ranges) {
                    out += gbnf_escape(lo, true);
                    if (hi != lo) out += "-" + gbnf_escape(hi, true);
                }
                out += "]";
            }
        }
        out += "\n";
    }
    return out;
}

// ---- vocabulary ----------------------------------------------------------------------------

struct GrammarVocab::Impl {
    std::vector<std::string> pieces;
    std::vector<bool> eog;
    std::vector<int32_t> eog_ids;
    // Byte trie of the non-empty pieces, nodes in depth-first preorder; node 0 is the root.
    std::vector<uint8_t> byte;          // [nodes] the byte leading to the node
    std::vector<uint16_t> depth;        // [nodes] root = 0
    std::vector<uint32_t> subtree_end;  // [nodes] first node after its subtree
    std::vector<uint32_t> tok_begin;    // [nodes + 1] tokens ending at node i: toks[tok_begin[i], tok_begin[i+1])
    std::vector<int32_t> toks;
};

namespace {

void build_trie(GrammarVocab::Impl& d) {
    std::vector<int32_t> order;
    for (size_t i = 0; i < d.pieces.size(); ++i)
        if (!d.pieces[i].empty() && d.pieces[i].size() < 65535) order.push_back((int32_t)i);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
        const std::string& x = d.pieces[(size_t)a];
        const std::string& y = d.pieces[(size_t)b];
        const int c = std::memcmp(x.data(), y.data(), std::min(x.size(), y.size()));
        if (c != 0) return c < 0;  // memcmp compares as unsigned bytes
        if (x.size() != y.size()) return x.size() < y.size();
        return a < b;
    });
    d.byte.assign(1, 0);
    d.depth.assign(1, 0);
    std::vector<uint32_t> node_of_token;
    std::vector<uint32_t> path;  // node at each depth along the previous piece
    path.push_back(0);
    const std::string* prev = nullptr;
    std::vector<std::pair<uint32_t, int32_t>> ends;  // (node, token)
    for (int32_t t : order) {
        const std::string& p = d.pieces[(size_t)t];
        size_t common = 0;
        if (prev)
            while (common < p.size() && common < prev->size() && p[common] == (*prev)[common])
                ++common;
        path.resize(common + 1);
        for (size_t k = common; k < p.size(); ++k) {
            d.byte.push_back((uint8_t)p[k]);
            d.depth.push_back((uint16_t)(k + 1));
            path.push_back((uint32_t)d.byte.size() - 1);
        }
        ends.push_back({path[p.size()], t});
        prev = &p;
    }
    const size_t n = d.byte.size();
    d.subtree_end.assign(n, (uint32_t)n);
    std::vector<uint32_t> open;  // nodes whose subtree is still open, by depth
    for (uint32_t i = 0; i < n; ++i) {
        while (!open.empty() && d.depth[open.back()] >= d.depth[i]) {
            d.subtree_end[open.back()] = i;
            open.pop_back();
        }
        open.push_back(i);
    }
    // tokens per node (ends is in node order already: nodes are created in sorted order)
    d.tok_begin.assign(n + 1, 0);
    for (const auto& e : ends) d.tok_begin[e.first + 1]++;
    for (size_t i = 0; i < n; ++i) d.tok_begin[i + 1] += d.tok_begin[i];
    d.toks.resize(ends.size());
    std::vector<uint32_t> fill(d.tok_begin.begin(), d.tok_begin.end() - 1);
    for (const auto& e : ends) d.toks[fill[e.first]++] = e.second;
}

}  // namespace

std::shared_ptr<const GrammarVocab> GrammarVocab::from_pieces(std::vector<std::string> pieces,
                                                              std::vector<int32_t> eog) {
    std::shared_ptr<GrammarVocab> v(new GrammarVocab());
    v->impl_ = std::make_unique<Impl>();
    Impl& d = *v->impl_;
    d.pieces = std::move(pieces);
    d.eog.assign(d.pieces.size(), false);
    for (int32_t t : eog)
        if (t >= 0 && (size_t)t < d.pieces.size()) {
            d.eog[(size_t)t] = true;
            d.eog_ids.push_back(t);
            d.pieces[(size_t)t].clear();  // an end token is never text
        }
    build_trie(d);
    return v;
}

std::shared_ptr<const GrammarVocab> GrammarVocab::build(const Tokenizer& tok) {
    std::vector<std::string> pieces((size_t)tok.n_vocab());
    for (int32_t i = 0; i < tok.n_vocab(); ++i) {
        const TokenAttr a = tok.attr(i);
        if (a == TokenAttr::Control || a == TokenAttr::Unknown || a == TokenAttr::Unused) continue;
        pieces[(size_t)i] = tok.token_to_piece(i, false);
    }
    return from_pieces(std::move(pieces), tok.eog_tokens());
}

GrammarVocab::~GrammarVocab() = default;
int32_t GrammarVocab::n_vocab() const {
    return (int32_t)impl_->pieces.size();
}
const std::string& GrammarVocab::piece(int32_t id) const {
    return impl_->pieces[(size_t)id];
}
bool GrammarVocab::is_eog(int32_t id) const {
    return id >= 0 && (size_t)id < impl_->eog.size() && impl_->eog[(size_t)id];
}

// ---- matcher tables --------------------------------------------------------------------------

namespace {

constexpr uint32_t kDead = 0;
// The smallest code point a UTF-8 sequence of each length may encode.
constexpr uint32_t kMinOfLength[5] = {0, 0, 0x80, 0x800, 0x10000};
constexpr uint32_t kUnknown = 0xFFFFFFFFu;
// Memo bounds: beyond these the transition arrays and masks are dropped and rebuilt on
// demand (the interned stacks and states stay: the live state refers to them).
constexpr size_t kMaxTransitionTables = 32768;  // 1 KiB each
constexpr size_t kMaxMasks = 512;
// Bounds on the parse: stacks in one state, stack nodes in all.
constexpr size_t kMaxStacksPerState = 4096;
constexpr size_t kMaxNodes = 4u << 20;

struct StackNode {
    uint32_t pos;
    uint32_t rest;
};

struct State {
    std::vector<uint32_t> stacks;  // sorted, unique; 0 = the empty stack (accepting)
    uint32_t partial = 0;          // code point bits read so far
    uint8_t remain = 0;            // continuation bytes still expected
    uint8_t len = 0;               // length of the partial character's UTF-8 sequence
    bool can_end = false;          // stack 0 present and no partial character
    bool only_end = false;         // can_end and nothing else
};

uint64_t hash_mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    return h;
}

}  // namespace

struct GrammarMatcher::Tables {
    std::shared_ptr<const Grammar> grammar;
    std::shared_ptr<const GrammarVocab> vocab;
    const Grammar::Impl* g = nullptr;
    const GrammarVocab::Impl* v = nullptr;

    std::vector<StackNode> nodes{{0, 0}};  // node 0: the empty stack
    std::unordered_map<uint64_t, uint32_t> node_ids;
    std::vector<State> states;  // 0: dead
    std::unordered_map<uint64_t, std::vector<uint32_t>> state_ids;  // hash -> candidates
    std::vector<std::unique_ptr<std::array<uint32_t, 256>>> trans;  // per state, lazily
    size_t n_trans = 0;
    std::unordered_map<uint32_t, std::vector<uint64_t>> masks;  // state -> allowed-token bits
    uint32_t start = 0;
    std::vector<uint32_t> scratch;
    bool overflow = false;  // a state grew past the bounds: the grammar is too ambiguous
    std::vector<uint32_t> expand_work;      // expand()'s worklist
    std::unordered_set<uint32_t> expanded;  // stacks expanded in this pass

    uint32_t node(uint32_t pos, uint32_t rest) {
        const uint64_t key = ((uint64_t)pos << 32) | rest;
        auto [it, fresh] = node_ids.try_emplace(key, (uint32_t)nodes.size());
        if (fresh) nodes.push_back({pos, rest});
        return it->second;
    }

    // Expand stack `id` until a class is on top (or it is empty), appending results.
    // Within one pass (clear `expanded` before it) a stack is expanded once: its expansion
    // is already in *out. Without that, n nullable rules in a row with two empty ways
    // through expand 2^n times; the worklist keeps long nullable chains off the call stack.
    void expand(uint32_t id, std::vector<uint32_t>* out) {
        expand_work.assign(1, id);
        while (!expand_work.empty()) {
            if (out->size() > kMaxStacksPerState) {  // intern() refuses the state
                expand_work.clear();
                break;
            }
            id = expand_work.back();
            expand_work.pop_back();
            if (!expanded.insert(id).second) continue;
            if (id == 0) {
                out->push_back(0);
                continue;
            }
            const StackNode n = nodes[id];
            const Element& e = g->elements[n.pos];
            if (e.kind == ElemKind::Class) {
                out->push_back(id);
                continue;
            }
            // a rule reference: each alternative on top of what follows the reference
            uint32_t rest = n.rest;
            if (g->elements[n.pos + 1].kind != ElemKind::End) rest = node(n.pos + 1, rest);
            for (uint32_t a : g->rule_alts[e.value])
                expand_work.push_back(g->elements[a].kind == ElemKind::End ? rest : node(a, rest));
        }
    }

    uint32_t intern(std::vector<uint32_t>& stacks, uint32_t partial, uint8_t remain,
                    uint8_t len) {
        std::sort(stacks.begin(), stacks.end());
        stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
        if (stacks.empty()) return kDead;
        // A grammar so ambiguous that one position holds this many parses (nested optional
        // repetitions) would stall generation: the matcher gives up instead.
        if (stacks.size() > kMaxStacksPerState || nodes.size() > kMaxNodes) {
            overflow = true;
            return kDead;
        }
        uint64_t h = hash_mix(partial, ((uint64_t)len << 8) | remain);
        for (uint32_t s : stacks) h = hash_mix(h, s);
        auto& bucket = state_ids[h];
        for (uint32_t sid : bucket) {
            const State& s = states[sid];
            if (s.partial == partial && s.remain == remain && s.len == len && s.stacks == stacks)
                return sid;
        }
        State s;
        s.stacks = stacks;
        s.partial = partial;
        s.remain = remain;
        s.len = len;
        s.can_end = remain == 0 && s.stacks.front() == 0;
        s.only_end = s.can_end && s.stacks.size() == 1;
        states.push_back(std::move(s));
        trans.emplace_back();
        const uint32_t id = (uint32_t)states.size() - 1;
        bucket.push_back(id);
        return id;
    }

    uint32_t compute(uint32_t sid, uint8_t b) {
        const State& s = states[sid];
        uint32_t cp = 0;
        uint32_t partial = 0;
        uint8_t remain = 0, len = s.len;
        if (s.remain == 0) {
            if (b < 0x80) {
                cp = b;
            } else if (b >= 0xC2 && b < 0xE0) {
                partial = b & 0x1F;
                remain = 1;
            } else if (b >= 0xE0 && b < 0xF0) {
                partial = b & 0x0F;
                remain = 2;
            } else if (b >= 0xF0 && b < 0xF5) {
                partial = b & 0x07;
                remain = 3;
            } else {
                return kDead;  // a stray continuation byte or an invalid lead byte
            }
            len = (uint8_t)(remain + 1);
        } else {
            if ((b & 0xC0) != 0x80) return kDead;
            partial = (s.partial << 6) | (b & 0x3F);
            remain = (uint8_t)(s.remain - 1);
            if (remain == 0) {
                cp = partial;
                partial = 0;
                // overlong forms and UTF-16 surrogates are not characters
                if (cp < kMinOfLength[len] || (cp >= 0xD800 && cp <= 0xDFFF)) return kDead;
                len = 0;
            }
        }
        std::vector<uint32_t> next;
        if (remain > 0) {
            // keep the stacks whose class can match some completion of the prefix
            const uint32_t lo = std::max(partial << (6 * remain), kMinOfLength[len]);
            uint32_t hi = std::min(kMaxCodePoint, ((partial + 1) << (6 * remain)) - 1);
            // no completion of ED A0..BF is a character (UTF-16 surrogates); ED leaves D000..D7FF
            if (lo >= 0xD800 && hi <= 0xDFFF) return kDead;
            if (lo < 0xD800 && hi >= 0xD800 && hi <= 0xDFFF) hi = 0xD7FF;
            if (lo > hi) return kDead;
            for (uint32_t st : s.stacks) {
                if (st == 0) continue;
                const Element& e = g->elements[nodes[st].pos];
                if (g->classes[e.value].intersects(lo, hi)) next.push_back(st);
            }
            return intern(next, partial, remain, len);
        }
        expanded.clear();
        for (uint32_t st : s.stacks) {
            if (st == 0) continue;
            const StackNode n = nodes[st];
            const Element& e = g->elements[n.pos];
            if (!g->classes[e.value].matches(cp)) continue;
            uint32_t rest = n.rest;
            if (g->elements[n.pos + 1].kind != ElemKind::End) rest = node(n.pos + 1, rest);
            expand(rest, &next);
        }
        return intern(next, 0, 0, 0);
    }

    uint32_t step(uint32_t sid, uint8_t b) {
        if (sid == kDead) return kDead;
        auto& t = trans[sid];
        if (!t) {
            if (n_trans >= kMaxTransitionTables) {
                for (auto& x : trans) x.reset();
                n_trans = 0;
            }
            t = std::make_unique<std::array<uint32_t, 256>>();
            t->fill(kUnknown);
            ++n_trans;
        }
        uint32_t& slot = (*t)[b];
        if (slot == kUnknown) {
            const uint32_t r = compute(sid, b);
            // (compute may grow `trans`; re-find the slot)
            (*trans[sid])[b] = r;
            return r;
        }
        return slot;
    }

    uint32_t walk(uint32_t sid, std::string_view bytes) {
        for (char c : bytes) {
            sid = step(sid, (uint8_t)c);
            if (sid == kDead) return kDead;
        }
        return sid;
    }

    const std::vector<uint64_t>& mask_of(uint32_t sid) {
        auto it = masks.find(sid);
        if (it != masks.end()) return it->second;
        if (masks.size() >= kMaxMasks) masks.clear();
        std::vector<uint64_t> bits(((size_t)v->pieces.size() + 63) / 64, 0);
        auto allow = [&](int32_t t) { bits[(size_t)t >> 6] |= 1ull << ((size_t)t & 63); };
        if (states[sid].can_end)
            for (int32_t t : v->eog_ids) allow(t);
        // depth-first over the trie: st_at[d] is the state after the node on the path at depth d
        const size_t n = v->byte.size();
        std::vector<uint32_t>& st_at = scratch;
        st_at.assign(1, sid);
        for (size_t i = 1; i < n;) {
            const uint16_t d = v->depth[i];
            const uint32_t s2 = step(st_at[d - 1], v->byte[i]);
            if (s2 == kDead) {
                i = v->subtree_end[i];
                continue;
            }
            if (st_at.size() <= d) st_at.resize((size_t)d + 1);
            st_at[d] = s2;
            for (uint32_t k = v->tok_begin[i]; k < v->tok_begin[i + 1]; ++k) allow(v->toks[k]);
            ++i;
        }
        return masks.emplace(sid, std::move(bits)).first->second;
    }
};

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> g,
                               std::shared_ptr<const GrammarVocab> v)
    : tables_(std::make_shared<Tables>()) {
    Tables& t = *tables_;
    t.grammar = std::move(g);
    t.vocab = std::move(v);
    t.g = &t.grammar->impl();
    t.v = &t.vocab->impl();
    t.states.emplace_back();  // dead
    t.trans.emplace_back();
    // the start: each alternative of root
    std::vector<uint32_t> stacks;
    t.expanded.clear();
    for (uint32_t a : t.g->rule_alts[t.g->root]) {
        if (t.g->elements[a].kind == ElemKind::End)
            stacks.push_back(0);
        else
            t.expand(t.node(a, 0), &stacks);
    }
    t.start = t.intern(stacks, 0, 0, 0);
    state_ = t.start;
}

GrammarMatcher::GrammarMatcher(const GrammarMatcher&) = default;
GrammarMatcher& GrammarMatcher::operator=(const GrammarMatcher&) = default;
GrammarMatcher::GrammarMatcher(GrammarMatcher&&) noexcept = default;
GrammarMatcher& GrammarMatcher::operator=(GrammarMatcher&&) noexcept = default;
GrammarMatcher::~GrammarMatcher() = default;

bool GrammarMatcher::allows(int32_t token) const {
    Tables& t = *tables_;
    if (finished_ || token < 0 || (size_t)token >= t.v->pieces.size()) return false;
    if (t.v->eog[(size_t)token]) return t.states[state_].can_end;
    const std::string& p = t.v->pieces[(size_t)token];
    if (p.empty()) return false;
    return t.walk(state_, p) != kDead;
}

bool GrammarMatcher::accept(int32_t token) {
    Tables& t = *tables_;
    if (finished_ || token < 0 || (size_t)token >= t.v->pieces.size()) return false;
    if (t.v->eog[(size_t)token]) {
        if (!t.states[state_].can_end) return false;
        finished_ = true;
        return true;
    }
    const std::string& p = t.v->pieces[(size_t)token];
    if (p.empty()) return false;
    const uint32_t s = t.walk(state_, p);
    if (s == kDead) return false;
    state_ = s;
    return true;
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
    if (finished_) return bytes.empty();
    const uint32_t s = tables_->walk(state_, bytes);
    if (s == kDead) return false;
    state_ = s;
    return true;
}

void GrammarMatcher::mask(std::span<float> logits) const {
    Tables& t = *tables_;
    EDGELLM_ASSERT(logits.size() == t.v->pieces.size(), "mask: logits are not n_vocab long");
    if (finished_) {
        std::fill(logits.begin(), logits.end(), -std::numeric_limits<float>::infinity());
        return;
    }
    const std::vector<uint64_t>& bits = t.mask_of(state_);
    const float ninf = -std::numeric_limits<float>::infinity();
    const size_t n = logits.size();
    for (size_t w = 0; w < bits.size(); ++w) {
        const uint64_t word = bits[w];
        if (word == ~0ull) continue;
        const size_t base = w * 64;
        const size_t end = std::min(n, base + 64);
        for (size_t i = base; i < end; ++i)
            if (!((word >> (i - base)) & 1)) logits[i] = ninf;
    }
}

size_t GrammarMatcher::count_allowed() const {
    if (finished_) return 0;
    size_t n = 0;
    for (uint64_t w : tables_->mask_of(state_)) n += (size_t)__builtin_popcountll(w);
    return n;
}

bool GrammarMatcher::can_end() const {
    return !finished_ && tables_->states[state_].can_end;
}
bool GrammarMatcher::must_end() const {
    return !finished_ && tables_->states[state_].only_end;
}
bool GrammarMatcher::overflowed() const {
    return tables_->overflow;
}
bool GrammarMatcher::finished() const {
    return finished_;
}
void GrammarMatcher::reset() {
    state_ = tables_->start;
    finished_ = false;
}

}  // namespace edgellm
