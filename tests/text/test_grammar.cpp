// GBNF grammars (src/text/grammar.cpp): the parser, judged by what the compiled grammar
// accepts; every parse error with its line and column; and the matcher over a byte
// vocabulary (the 256 single bytes plus an end token) and over multi-byte pieces: allows /
// accept / accept_bytes agree and leave the state alone on failure, the end token, the mask
// against allows() token by token, tokens that end inside a UTF-8 character, invalid UTF-8,
// clones, reset, recursion, large repetitions and to_string() round trips.
#include <gtest/gtest.h>

#include "test_paths.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "edgellm/grammar.h"

using edgellm::Grammar;
using edgellm::GrammarMatcher;
using edgellm::GrammarVocab;

namespace {

constexpr int32_t kEnd = 256;  // the end token of the byte vocabulary

// Pieces 0..255: the single bytes; 256: the end token.
std::shared_ptr<const GrammarVocab> byte_vocab() {
    static const auto v = [] {
        std::vector<std::string> pieces;
        for (int b = 0; b < 256; ++b) pieces.push_back(std::string(1, (char)b));
        pieces.push_back("");
        return GrammarVocab::from_pieces(std::move(pieces), {kEnd});
    }();
    return v;
}

std::shared_ptr<const Grammar> parse_ok(const std::string& text, const std::string& root = "root") {
    auto r = Grammar::parse(text, root);
    EXPECT_TRUE(r.ok()) << "grammar:\n" << text << "\nerror: " << (r.ok() ? "" : r.error());
    return r.ok() ? *r : nullptr;
}

std::string parse_error(const std::string& text) {
    auto r = Grammar::parse(text);
    return r.ok() ? "(parsed)" : r.error();
}

// The whole of `s` is a sentence of the grammar.
bool matches(const std::shared_ptr<const Grammar>& g, std::string_view s) {
    if (!g) return false;
    GrammarMatcher m(g, byte_vocab());
    return m.accept_bytes(s) && m.can_end();
}

// `s` is a prefix of some sentence.
bool viable(const std::shared_ptr<const Grammar>& g, std::string_view s) {
    if (!g) return false;
    GrammarMatcher m(g, byte_vocab());
    return m.accept_bytes(s);
}

#define EXPECT_MATCH(g, s) EXPECT_TRUE(matches(g, s)) << "should match: \"" << (s) << "\""
#define EXPECT_NO_MATCH(g, s) EXPECT_FALSE(matches(g, s)) << "should not match: \"" << (s) << "\""

// mask() must leave finite exactly the tokens allows() admits, and count_allowed() must
// count them.
void check_mask(const GrammarMatcher& m, int32_t n_vocab, const std::string& where) {
    std::vector<float> logits((size_t)n_vocab, 1.0f);
    m.mask(logits);
    size_t finite = 0;
    for (int32_t t = 0; t < n_vocab; ++t) {
        const bool kept = std::isfinite(logits[(size_t)t]);
        if (kept) {
            ++finite;
            EXPECT_EQ(logits[(size_t)t], 1.0f) << where << ": token " << t << " changed";
        } else {
            EXPECT_TRUE(std::isinf(logits[(size_t)t]) && logits[(size_t)t] < 0)
                << where << ": token " << t;
        }
        EXPECT_EQ(kept, m.allows(t)) << where << ": token " << t;
    }
    EXPECT_EQ(finite, m.count_allowed()) << where;
}

// The bytes allowed next, as a sorted string (the end token as '$' after them).
std::string allowed_bytes(const GrammarMatcher& m) {
    std::string out;
    for (int b = 0; b < 256; ++b)
        if (m.allows(b)) out += (char)b;
    if (m.allows(kEnd)) out += "$";
    return out;
}

std::vector<std::string> sorted_lines(const std::string& text) {
    std::vector<std::string> lines;
    size_t at = 0;
    for (size_t nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1)
        lines.push_back(text.substr(at, nl - at));
    if (at < text.size()) lines.push_back(text.substr(at));
    std::sort(lines.begin(), lines.end());
    return lines;
}

}  // namespace

// ---- parser: constructs, judged by what they accept ---------------------------------------

TEST(GrammarParse, SequenceAndAlternation) {
    auto g = parse_ok(R"(root ::= "ab" "c" | "d" | "")");
    EXPECT_MATCH(g, "abc");
    EXPECT_MATCH(g, "d");
    EXPECT_MATCH(g, "");
    EXPECT_NO_MATCH(g, "ab");
    EXPECT_NO_MATCH(g, "abcd");
    EXPECT_NO_MATCH(g, "dd");
    EXPECT_NO_MATCH(g, "c");
}

TEST(GrammarParse, Groups) {
    auto g = parse_ok(R"(root ::= "x" ( "a" | "b" ( "c" | "d" ) ) "y")");
    EXPECT_MATCH(g, "xay");
    EXPECT_MATCH(g, "xbcy");
    EXPECT_MATCH(g, "xbdy");
    EXPECT_NO_MATCH(g, "xby");
    EXPECT_NO_MATCH(g, "xacy");
    EXPECT_NO_MATCH(g, "xy");
    auto empty_group = parse_ok(R"(root ::= "a" ( ) "b")");
    EXPECT_MATCH(empty_group, "ab");
}

TEST(GrammarParse, LiteralEscapes) {
    auto g = parse_ok(R"(root ::= "\n\r\t\\\"\x41\x7e\u00e9\u4F60\U0001F600\U0010FFFF")");
    EXPECT_MATCH(g, "\n\r\t\\\"A~\xC3\xA9\xE4\xBD\xA0\xF0\x9F\x98\x80\xF4\x8F\xBF\xBF");
    EXPECT_NO_MATCH(g, "\n\r\t\\\"A~");
    // the escape is the character, not the letters
    auto n = parse_ok(R"(root ::= "\n")");
    EXPECT_MATCH(n, "\n");
    EXPECT_NO_MATCH(n, "\\n");
    EXPECT_NO_MATCH(n, "n");
    // \x00 is a character like any other
    auto nul = parse_ok(R"(root ::= "a\x00b")");
    EXPECT_MATCH(nul, std::string_view("a\0b", 3));
    EXPECT_NO_MATCH(nul, "ab");
}

TEST(GrammarParse, ClassEscapes) {
    auto g = parse_ok(R"(root ::= [\]\[\-\\\n"]+)");
    for (const char* s : {"]", "[", "-", "\\", "\n", "\"", "][-\\\n\""}) EXPECT_MATCH(g, s);
    EXPECT_NO_MATCH(g, "n");
    EXPECT_NO_MATCH(g, "a");
    auto hex = parse_ok(R"(root ::= [\x41-\x43\u00e9])");
    EXPECT_MATCH(hex, "A");
    EXPECT_MATCH(hex, "C");
    EXPECT_MATCH(hex, "\xC3\xA9");
    EXPECT_NO_MATCH(hex, "D");
}

TEST(GrammarParse, ClassesRangesAndNegation) {
    auto g = parse_ok("root ::= [a-cx0-1]");
    for (const char* s : {"a", "b", "c", "x", "0", "1"}) EXPECT_MATCH(g, s);
    for (const char* s : {"d", "w", "y", "2", "A", "", "ab"}) EXPECT_NO_MATCH(g, s);

    auto neg = parse_ok("root ::= [^a-c\"]");
    for (const char* s : {"d", "A", " ", "\n", "\xE4\xBD\xA0", "\xF0\x9F\x98\x80"})
        EXPECT_MATCH(neg, s);
    for (const char* s : {"a", "b", "c", "\"", ""}) EXPECT_NO_MATCH(neg, s);

    // a '-' first or last is itself
    auto dash = parse_ok("root ::= [-a] [b-]");
    EXPECT_MATCH(dash, "-b");
    EXPECT_MATCH(dash, "a-");
    EXPECT_NO_MATCH(dash, "0b");
}

TEST(GrammarParse, AnyCharacter) {
    auto g = parse_ok(R"(root ::= "<" . ">")");
    for (const char* s :
         {"<a>", "<>>", "<\n>", "<\xC3\xA9>", "<\xE4\xBD\xA0>", "<\xF0\x9F\x98\x80>"})
        EXPECT_MATCH(g, s);
    EXPECT_NO_MATCH(g, "<>");
    EXPECT_NO_MATCH(g, "<ab>");
    // one character, not one byte
    EXPECT_NO_MATCH(g, "<\xC3>");
}

TEST(GrammarParse, Repetitions) {
    auto star = parse_ok(R"(root ::= "a"*)");
    auto plus = parse_ok(R"(root ::= "a"+)");
    auto opt = parse_ok(R"(root ::= "a"?)");
    auto exact = parse_ok(R"(root ::= "a"{3})");
    auto at_least = parse_ok(R"(root ::= "a"{2,})");
    auto between = parse_ok(R"(root ::= "a"{2,4})");
    auto upto = parse_ok(R"(root ::= "a"{0,2})");
    auto spaced = parse_ok(R"(root ::= "a"{ 1 , 2 })");
    const bool expect[][6] = {
        // n = 0     1      2      3      4      5
        {true, true, true, true, true, true},       // *
        {false, true, true, true, true, true},      // +
        {true, true, false, false, false, false},   // ?
        {false, false, false, true, false, false},  // {3}
        {false, false, true, true, true, true},     // {2,}
        {false, false, true, true, true, false},    // {2,4}
        {true, true, true, false, false, false},    // {0,2}
        {false, true, true, false, false, false},   // { 1 , 2 }
    };
    const std::shared_ptr<const Grammar> gs[] = {star,     plus,    opt,  exact,
                                                 at_least, between, upto, spaced};
    for (size_t i = 0; i < std::size(gs); ++i)
        for (int n = 0; n < 6; ++n)
            EXPECT_EQ(matches(gs[i], std::string((size_t)n, 'a')), expect[i][n])
                << "grammar " << i << ", " << n << " a's";
}

TEST(GrammarParse, RepetitionAppliesToTheLastTerm) {
    // the whole literal, the whole group, the class, the rule: not the whole sequence
    auto lit = parse_ok(R"(root ::= "x" "ab"+)");
    EXPECT_MATCH(lit, "xabab");
    EXPECT_NO_MATCH(lit, "xabb");
    EXPECT_NO_MATCH(lit, "xaba");
    auto grp = parse_ok(R"(root ::= "x" ( "a" | "b" ){2} "y")");
    EXPECT_MATCH(grp, "xaby");
    EXPECT_MATCH(grp, "xbby");
    EXPECT_NO_MATCH(grp, "xay");
    auto ref = parse_ok("root ::= d{2} \"-\" d\nd ::= [0-9]");
    EXPECT_MATCH(ref, "12-3");
    EXPECT_NO_MATCH(ref, "1-3");
    auto cls = parse_ok(R"(root ::= [ab]* "c")");
    EXPECT_MATCH(cls, "abbac");
    EXPECT_MATCH(cls, "c");
}

TEST(GrammarParse, LargeRepetitions) {
    auto g = parse_ok(R"(root ::= "a"{0,1000} "b")");
    EXPECT_MATCH(g, "b");
    EXPECT_MATCH(g, std::string(1000, 'a') + "b");
    EXPECT_NO_MATCH(g, std::string(1001, 'a') + "b");
    EXPECT_FALSE(viable(g, std::string(1001, 'a')));
    auto exact = parse_ok(R"(root ::= [xy]{1000})");
    EXPECT_MATCH(exact, std::string(500, 'x') + std::string(500, 'y'));
    EXPECT_NO_MATCH(exact, std::string(999, 'x'));
    EXPECT_NO_MATCH(exact, std::string(1001, 'x'));
    // a mask after a long run is still right
    GrammarMatcher m(g, byte_vocab());
    ASSERT_TRUE(m.accept_bytes(std::string(999, 'a')));
    EXPECT_EQ(allowed_bytes(m), "ab");
    ASSERT_TRUE(m.accept_bytes("a"));
    EXPECT_EQ(allowed_bytes(m), "b");
    check_mask(m, 257, "after 1000 a");
}

TEST(GrammarParse, CommentsAndLines) {
    auto g = parse_ok(
        "# a grammar\n"
        "\n"
        "root ::= item  # the start\n"
        "   # a comment between a rule and its continuation\n"
        "  | \"x\" item\n"
        "  | ( \"y\"   # inside a group, lines continue freely\n"
        "      \"z\"\n"
        "    )\n"
        "\r\n"
        "item ::= \"i\" \"#\"   # a '#' in a literal is not a comment\n");
    EXPECT_MATCH(g, "i#");
    EXPECT_MATCH(g, "xi#");
    EXPECT_MATCH(g, "yz");
    EXPECT_NO_MATCH(g, "i");
    EXPECT_NO_MATCH(g, "y");
    // a rule ends at the end of its line: "b" is not part of root
    auto two = parse_ok("root ::= \"a\"\nb ::= \"b\"\n");
    EXPECT_MATCH(two, "a");
    EXPECT_NO_MATCH(two, "ab");
    // the body may start on the next line
    auto next = parse_ok("root ::=\n  \"a\" |\n  \"b\"");
    EXPECT_MATCH(next, "a");
    EXPECT_MATCH(next, "b");
}

TEST(GrammarParse, RulesDefinedAfterUseAndOnOneLine) {
    auto g = parse_ok(
        "root ::= greeting \" \" name\nname ::= [A-Z] [a-z]*\ngreeting ::= \"hi\" | \"yo\"");
    EXPECT_MATCH(g, "hi Bob");
    EXPECT_MATCH(g, "yo X");
    EXPECT_NO_MATCH(g, "hi bob");
    auto one_line = parse_ok(R"(root ::= a "," b   a ::= "1"  b ::= "2")");
    EXPECT_MATCH(one_line, "1,2");
}

TEST(GrammarParse, RuleNames) {
    auto g = parse_ok("root ::= my-rule_2 R2\nmy-rule_2 ::= \"a\"\nR2 ::= \"b\"");
    EXPECT_MATCH(g, "ab");
    // another start rule
    auto r = Grammar::parse("start ::= \"s\" x\nx ::= \"x\"", "start");
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_MATCH(*r, "sx");
    auto x = parse_ok("root ::= \"r\"\nx ::= \"x\"", "x");
    EXPECT_MATCH(x, "x");
    EXPECT_NO_MATCH(x, "r");
}

// A rule named like the rules the parser makes for groups and repetitions ("root-1") is the
// user's own rule (JSON schema grammars name rules "name-2", "name-3"...).
TEST(GrammarParse, RuleNamedLikeAGeneratedRule) {
    auto g =
        parse_ok("root ::= ( \"a\" ) \"b\"* root-1 root-2\nroot-1 ::= \"c\"\nroot-2 ::= \"d\"");
    EXPECT_MATCH(g, "abcd");
    EXPECT_MATCH(g, "acd");
    EXPECT_NO_MATCH(g, "aad");
    // used but never defined, even though a generated rule has that name
    EXPECT_EQ(parse_error("root ::= ( \"a\" ) root-1"),
              "line 1, column 18: rule root-1 is used but never defined");
}

TEST(GrammarParse, Utf8Literals) {
    auto g = parse_ok(R"(root ::= "你好" [一-龥]* "!")");
    EXPECT_MATCH(g, "你好!");
    EXPECT_MATCH(g, "你好世界!");
    EXPECT_NO_MATCH(g, "你好");
    EXPECT_NO_MATCH(g, "你!");
    EXPECT_NO_MATCH(g, "你好a!");
    // 你 is one character: "你"? is "" or all three bytes
    auto opt = parse_ok(R"(root ::= "你"? "x")");
    EXPECT_MATCH(opt, "x");
    EXPECT_MATCH(opt, "你x");
    EXPECT_NO_MATCH(opt, "\xE4\xBDx");
    auto emoji = parse_ok("root ::= [😀-😂]");
    EXPECT_MATCH(emoji, "😁");
    EXPECT_NO_MATCH(emoji, "😃");
}

TEST(GrammarParse, WindowsLineEndings) {
    auto g = parse_ok("root ::= a\r\n  | b\r\na ::= \"a\"\r\nb ::= \"b\"\r\n");
    EXPECT_MATCH(g, "a");
    EXPECT_MATCH(g, "b");
}

TEST(GrammarParse, NullablePrefixIsNotLeftRecursion) {
    // root can reach itself, but only after "x"
    auto g = parse_ok("root ::= ws \"x\" root | ws\nws ::= \" \"*");
    EXPECT_MATCH(g, "");
    EXPECT_MATCH(g, " x  x ");
    EXPECT_NO_MATCH(g, " y");
}

// ---- parser: errors -------------------------------------------------------------------------

TEST(GrammarErrors, EveryErrorNamesItsLineAndColumn) {
    const std::pair<std::string, std::string> cases[] = {
        {"root ::= \"a\" foo\n", "line 1, column 14: rule foo is used but never defined"},
        {"root ::= \"a\"\n\n  | x\n", "line 3, column 5: rule x is used but never defined"},
        // columns count characters, not bytes
        {"root ::= \"你好\" foo", "line 1, column 15: rule foo is used but never defined"},
        {"start ::= \"a\"", "line 1, column 14: the grammar has no rule named root"},
        {"root ::= \"a\"\nroot ::= \"b\"\n", "line 2, column 1: rule root is defined twice"},
        {"root ::= root \"a\" | \"b\"",
         "line 1, column 1: rule root is left-recursive: it can reach itself without consuming "
         "a character"},
        {"root ::= a\na ::= b \"x\"\nb ::= a \"y\" | \"z\"",
         "line 2, column 1: rule a is left-recursive: it can reach itself without consuming a "
         "character"},
        // via a nullable prefix (an optional rule), and via a group
        {"root ::= \"x\" a\na ::= b a \"y\" | \"z\"\nb ::= \"q\"?",
         "line 2, column 1: rule a is left-recursive: it can reach itself without consuming a "
         "character"},
        {"root ::= ( \"a\"? root )",
         "line 1, column 1: rule root is left-recursive: it can reach itself without consuming "
         "a character"},
        // a repetition of something that can be empty loops without consuming: reported at
        // the operator, in the name of the rule it is in
        {"root ::= \"a\" b*\nb ::= \"c\"?",
         "line 1, column 15: rule root is left-recursive: it can reach itself without "
         "consuming a character"},
        // a rule named like a generated one is reported by its own name
        {"item ::= \"a\"\nroot ::= item-2\nitem-2 ::= item-2 \"b\" | \"c\"",
         "line 3, column 1: rule item-2 is left-recursive: it can reach itself without "
         "consuming a character"},
        {"root ::= \"abc\n\"", "line 1, column 10: unterminated literal"},
        {"root ::= \"abc", "line 1, column 10: unterminated literal"},
        {"root ::= \"a\\\"", "line 1, column 10: unterminated literal"},
        {"root ::= [a-z", "line 1, column 10: unterminated character class"},
        {"root ::= [a-z\n]", "line 1, column 10: unterminated character class"},
        {"root ::= [z-a]", "line 1, column 13: character range is backwards"},
        {"root ::= \"\\q\"", "line 1, column 11: unknown escape \\q"},
        {"root ::= [\\q]", "line 1, column 11: unknown escape \\q"},
        {"root ::= \"\\x4G\"", "line 1, column 14: expected 2 hex digits in an escape"},
        {"root ::= \"\\u12\"", "line 1, column 15: expected 4 hex digits in an escape"},
        {"root ::= \"\\U0001F60\"", "line 1, column 20: expected 8 hex digits in an escape"},
        {"root ::= \"\\U00110000\"", "line 1, column 21: escape beyond U+10FFFF"},
        {"root ::= ( \"a\"\n", "line 1, column 10: unclosed ("},
        {"root ::= \"x\" ( \"a\"\nb ::= \"c\"", "line 1, column 14: unclosed ("},
        {"root ::= \"a\" )", "line 1, column 14: unexpected ')'"},
        {"root ::= \"a\"\nb ::= ( \"b\" ) )", "line 2, column 15: unexpected ')'"},
        {"root \"a\"", "line 1, column 6: expected ::= after the rule name root"},
        {"root := \"a\"", "line 1, column 6: expected ::= after the rule name root"},
        {"root\n::= \"a\"", "line 1, column 5: expected ::= after the rule name root"},
        {"\"a\"", "line 1, column 1: expected a rule name"},
        {"root ::= \"a\"{3,2}", "line 1, column 13: repetition {m,n} with n < m"},
        {"root ::= \"a\"{x}", "line 1, column 13: expected a number in the repetition"},
        {"root ::= \"a\"{2", "line 1, column 13: expected } to close the repetition"},
        {"root ::= *", "line 1, column 10: '*' needs something before it"},
        {"root ::= \"a\"*+", "line 1, column 14: '+' needs something before it"},
        {"root ::= \"a\" | ?", "line 1, column 16: '?' needs something before it"},
        {"", "line 1, column 1: the grammar has no rules"},
        {"  \n# only a comment\n\n", "line 1, column 1: the grammar has no rules"},
        {"root ::= []", "line 1, column 10: empty character class"},
        {"root ::= \"a\" ; \"b\"", "line 1, column 14: unexpected ';'"},
        // the grammar text itself must be UTF-8
        {"root ::= \"\x80\"", "line 1, column 11: invalid UTF-8 in the grammar"},
        {"root ::= \"\xE4\xBD\" \"a\"", "line 1, column 11: invalid UTF-8 in the grammar"},
        {"root ::= \"\xC0\x80\"", "line 1, column 11: invalid UTF-8 in the grammar"},
        {"root ::= \"\xE0\x9F\xBF\"", "line 1, column 11: invalid UTF-8 in the grammar"},
        {"root ::= [a\xED\xA0\x80]", "line 1, column 12: invalid UTF-8 in the grammar"},
        {"root ::= \"\xF4\x90\x80\x80\"", "line 1, column 11: invalid UTF-8 in the grammar"},
        {"root ::= \"\xF8\x90\x80\x80\"", "line 1, column 11: invalid UTF-8 in the grammar"},
    };
    for (const auto& [text, want] : cases) EXPECT_EQ(parse_error(text), want) << text;
}

// Nesting is bounded: a deep grammar is refused, not a stack overflow.
TEST(GrammarErrors, DeepNesting) {
    const std::string ok = "root ::= " + std::string(256, '(') + "\"a\"" + std::string(256, ')');
    EXPECT_MATCH(parse_ok(ok), "a");
    for (size_t n : {257, 1000000}) {
        const std::string deep = "root ::= " + std::string(n, '(') + "\"a\"" + std::string(n, ')');
        EXPECT_EQ(parse_error(deep), "line 1, column 266: groups nested deeper than 256") << n;
    }
}

TEST(GrammarErrors, AnotherRootMustExist) {
    auto r = Grammar::parse("a ::= \"a\"", "nope");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error(), "line 1, column 10: the grammar has no rule named nope");
    // the rules made for groups and repetitions are not start rules
    auto g = Grammar::parse("root ::= ( \"a\" )", "root-1");
    ASSERT_FALSE(g.ok());
    EXPECT_EQ(g.error(), "line 1, column 17: the grammar has no rule named root-1");
}

// ---- matcher: one byte per token -----------------------------------------------------------

TEST(GrammarMatcher, FailureLeavesTheStateUnchanged) {
    auto g = parse_ok(R"(root ::= "ab" | "ac")");
    GrammarMatcher m(g, byte_vocab());
    EXPECT_EQ(allowed_bytes(m), "a");
    EXPECT_FALSE(m.allows('b'));
    EXPECT_FALSE(m.accept('b'));
    EXPECT_FALSE(m.accept_bytes("ad"));   // fails on its second byte
    EXPECT_FALSE(m.accept_bytes("abc"));  // fails after a whole sentence
    EXPECT_EQ(allowed_bytes(m), "a");
    ASSERT_TRUE(m.accept('a'));
    EXPECT_EQ(allowed_bytes(m), "bc");
    EXPECT_FALSE(m.accept('d'));
    EXPECT_FALSE(m.accept_bytes("bb"));
    EXPECT_EQ(allowed_bytes(m), "bc");
    EXPECT_TRUE(m.accept_bytes(""));
    EXPECT_EQ(allowed_bytes(m), "bc");
    ASSERT_TRUE(m.accept('c'));
    EXPECT_EQ(allowed_bytes(m), "$");
    // out-of-range tokens never fit
    EXPECT_FALSE(m.allows(-1));
    EXPECT_FALSE(m.allows(257));
    EXPECT_FALSE(m.accept(257));
    EXPECT_TRUE(m.must_end());
}

TEST(GrammarMatcher, AllowsAgreesWithAccept) {
    auto g = parse_ok(R"(root ::= [a-c]+ ( "-" [0-9]{1,2} )? ".")");
    GrammarMatcher m(g, byte_vocab());
    for (const char* prefix : {"", "a", "abc", "b-", "b-1", "b-12", "c."}) {
        GrammarMatcher p = m;
        ASSERT_TRUE(p.accept_bytes(prefix)) << prefix;
        for (int32_t t = 0; t <= kEnd; ++t) {
            GrammarMatcher c = p;
            EXPECT_EQ(p.allows(t), c.accept(t)) << "after \"" << prefix << "\", token " << t;
        }
    }
}

TEST(GrammarMatcher, EndToken) {
    auto g = parse_ok(R"(root ::= "a" "b"?)");
    GrammarMatcher m(g, byte_vocab());
    EXPECT_FALSE(m.can_end());
    EXPECT_FALSE(m.must_end());
    EXPECT_FALSE(m.allows(kEnd));
    EXPECT_FALSE(m.accept(kEnd));
    EXPECT_FALSE(m.finished());
    ASSERT_TRUE(m.accept('a'));
    EXPECT_TRUE(m.can_end());
    EXPECT_FALSE(m.must_end());
    EXPECT_EQ(allowed_bytes(m), "b$");
    EXPECT_EQ(m.count_allowed(), 2u);
    ASSERT_TRUE(m.accept('b'));
    EXPECT_TRUE(m.can_end());
    EXPECT_TRUE(m.must_end());
    EXPECT_EQ(allowed_bytes(m), "$");
    EXPECT_EQ(m.count_allowed(), 1u);
    check_mask(m, 257, "must end");
    ASSERT_TRUE(m.accept(kEnd));
    EXPECT_TRUE(m.finished());
    EXPECT_FALSE(m.can_end());
    EXPECT_FALSE(m.must_end());
    EXPECT_EQ(allowed_bytes(m), "");
    EXPECT_EQ(m.count_allowed(), 0u);
    EXPECT_FALSE(m.accept(kEnd));
    EXPECT_FALSE(m.accept_bytes("a"));
    check_mask(m, 257, "finished");
}

TEST(GrammarMatcher, ControlTokensNeverFit) {
    // an empty piece that is not an end token: a control token
    std::vector<std::string> pieces = {"a", "", "b", ""};
    auto v = GrammarVocab::from_pieces(pieces, {3});
    auto g = parse_ok(R"(root ::= "a"*)");
    GrammarMatcher m(g, v);
    EXPECT_TRUE(m.allows(0));
    EXPECT_FALSE(m.allows(1));
    EXPECT_FALSE(m.accept(1));
    EXPECT_FALSE(m.allows(2));
    EXPECT_TRUE(m.allows(3));
    check_mask(m, 4, "start");
    EXPECT_EQ(m.count_allowed(), 2u);
    // an end token's piece is not text even when given one
    auto v2 = GrammarVocab::from_pieces({"a", "a"}, {1});
    EXPECT_TRUE(v2->is_eog(1));
    EXPECT_FALSE(v2->is_eog(0));
    EXPECT_EQ(v2->piece(1), "");
    GrammarMatcher m2(parse_ok(R"(root ::= "a" "a")"), v2);
    EXPECT_TRUE(m2.allows(0));
    EXPECT_FALSE(m2.allows(1));
}

TEST(GrammarMatcher, MaskMatchesAllowsEverywhere) {
    const char* grammars[] = {
        R"(root ::= [a-z]+ ( " " [a-z]+ )* ".")",
        R"(root ::= "你好" | [^a-z]* "z")",
        R"(root ::= .{0,3})",
        R"(root ::= [一-龥]+ | "\xff")",
        R"(root ::= "")",
    };
    for (const char* text : grammars) {
        auto g = parse_ok(text);
        GrammarMatcher m(g, byte_vocab());
        // walk a few steps, checking every token at every step
        for (int step = 0; step < 4 && !m.finished(); ++step) {
            check_mask(m, 257, std::string(text) + " step " + std::to_string(step));
            int32_t pick = -1;
            for (int32_t t = 0; t <= kEnd && pick < 0; ++t)
                if (m.allows(t) && (t != kEnd || m.must_end())) pick = t;
            if (pick < 0) break;
            ASSERT_TRUE(m.accept(pick));
        }
    }
}

// ---- matcher: multi-byte pieces ------------------------------------------------------------

namespace {

// A vocabulary like a real one: whole words, several bytes, pieces that split a character.
struct PieceVocab {
    std::vector<std::string> pieces = {"{\"",  "true",     "false", "你",   "\xE4\xBD", "\xA0",
                                       "\xE4", "\xBD\xA0", "a",     "\"",   "}",        ":",
                                       "\":",  " ",        "tr",    "ue",   "好",       "你好",
                                       "",     "\"}",      "x",     "\xC3", "\xA9",     "é"};
    int32_t end = 18;
    int32_t id(const std::string& p) const {
        for (size_t i = 0; i < pieces.size(); ++i)
            if ((int32_t)i != end && pieces[i] == p) return (int32_t)i;
        ADD_FAILURE() << "no piece " << p;
        return -1;
    }
    std::shared_ptr<const GrammarVocab> vocab() const {
        return GrammarVocab::from_pieces(pieces, {end});
    }
};

}  // namespace

TEST(GrammarMatcher, MultiBytePieces) {
    PieceVocab pv;
    auto v = pv.vocab();
    auto g = parse_ok(R"(root ::= "{\"" [a-z你好]+ "\":" " "? ( "true" | "false" ) "}")");
    GrammarMatcher m(g, v);
    auto allowed = [&] {
        std::vector<std::string> out;
        for (int32_t t = 0; t < v->n_vocab(); ++t)
            if (m.allows(t)) out.push_back(t == pv.end ? "<end>" : pv.pieces[(size_t)t]);
        return out;
    };
    using V = std::vector<std::string>;
    EXPECT_EQ(allowed(), V{"{\""});
    check_mask(m, v->n_vocab(), "start");
    ASSERT_TRUE(m.accept(pv.id("{\"")));
    // 你 whole, or its first two bytes, or its first byte; words of [a-z]; not continuation
    // bytes alone, not é or its first byte, not the closing quote before one character
    EXPECT_EQ(allowed(),
              (V{"true", "false", "你", "\xE4\xBD", "\xE4", "a", "tr", "ue", "好", "你好", "x"}));
    check_mask(m, v->n_vocab(), "in the key");
    ASSERT_TRUE(m.accept(pv.id("\xE4\xBD")));
    // inside 你: only its last byte
    EXPECT_EQ(allowed(), V{"\xA0"});
    check_mask(m, v->n_vocab(), "inside a character");
    EXPECT_FALSE(m.can_end());
    ASSERT_TRUE(m.accept(pv.id("\xA0")));
    ASSERT_TRUE(m.accept(pv.id("\xE4")));
    EXPECT_EQ(allowed(), (V{"\xBD\xA0"}));
    ASSERT_TRUE(m.accept(pv.id("\xBD\xA0")));
    ASSERT_TRUE(m.accept(pv.id("\":")));
    EXPECT_EQ(allowed(), (V{"true", "false", " ", "tr"}));
    check_mask(m, v->n_vocab(), "value");
    ASSERT_TRUE(m.accept(pv.id("tr")));
    EXPECT_EQ(allowed(), V{"ue"});
    EXPECT_FALSE(m.accept(pv.id("true")));
    ASSERT_TRUE(m.accept(pv.id("ue")));
    EXPECT_EQ(allowed(), V{"}"});
    EXPECT_FALSE(m.accept(pv.id("\"}")));
    ASSERT_TRUE(m.accept(pv.id("}")));
    EXPECT_EQ(allowed(), V{"<end>"});
    EXPECT_TRUE(m.must_end());
    check_mask(m, v->n_vocab(), "end");
    ASSERT_TRUE(m.accept(pv.end));
    EXPECT_TRUE(m.finished());
}

TEST(GrammarMatcher, PartialCharacterOnlyWhenItCanComplete) {
    PieceVocab pv;
    auto v = pv.vocab();
    const int32_t e4 = pv.id("\xE4"), e4bd = pv.id("\xE4\xBD"), c3 = pv.id("\xC3");
    auto check = [&](const char* grammar, bool want_e4, bool want_e4bd, bool want_c3) {
        GrammarMatcher m(parse_ok(grammar), v);
        EXPECT_EQ(m.allows(e4), want_e4) << grammar;
        EXPECT_EQ(m.allows(e4bd), want_e4bd) << grammar;
        EXPECT_EQ(m.allows(c3), want_c3) << grammar;
        check_mask(m, v->n_vocab(), grammar);
    };
    check("root ::= [a-z]+", false, false, false);
    check("root ::= [^a]+", true, true, true);
    check("root ::= [一-龥]", true, true, false);   // U+4E00..U+9FA5: E4 B8 80 .. E9 BE A5
    check("root ::= [一-丁]", true, false, false);  // U+4E00..U+4E01: E4 B8 80..81
    check("root ::= \"é\"", false, false, true);    // C3 A9
    check("root ::= [\\u0100-\\u07FF]", false, false, false);
    check("root ::= [^\\u00C0-\\u00FF]", true, true, false);  // all of C3's characters gone
    check("root ::= [^\\u00C0-\\u00FE]", true, true, true);   // ÿ (C3 BF) is left

    // byte by byte: the prefix must stay completable at every byte
    auto g = parse_ok("root ::= [一-龥]");
    auto bytes_ok = [&](std::string_view s) { return viable(g, s); };
    EXPECT_TRUE(bytes_ok("\xE4"));
    EXPECT_TRUE(bytes_ok("\xE9"));
    EXPECT_FALSE(bytes_ok("\xE3"));
    EXPECT_FALSE(bytes_ok("\xEA"));
    EXPECT_TRUE(bytes_ok("\xE4\xB8"));
    EXPECT_FALSE(bytes_ok("\xE4\xB7"));  // U+4DC0..: below 一
    EXPECT_TRUE(bytes_ok("\xE9\xBE"));   // U+9F80..U+9FBF: partly up to 龥
    EXPECT_FALSE(bytes_ok("\xE9\xBF"));  // U+9FC0..: above 龥
    EXPECT_TRUE(matches(g, "\xE9\xBE\xA5"));
    EXPECT_FALSE(viable(g, "\xE9\xBE\xA6"));
    EXPECT_FALSE(viable(g, "\xE4\xB8\x80\x80"));  // a stray continuation after it
    EXPECT_FALSE(matches(g, "\xE4\xB8"));         // can not end inside a character

    // the end token does not fit inside a character even where the grammar may end
    auto opt = parse_ok("root ::= \"你\"?");
    GrammarMatcher m(opt, byte_vocab());
    EXPECT_TRUE(m.allows(kEnd));
    ASSERT_TRUE(m.accept(0xE4));
    EXPECT_FALSE(m.can_end());
    EXPECT_FALSE(m.allows(kEnd));
    EXPECT_EQ(allowed_bytes(m), "\xBD");
    check_mask(m, 257, "inside 你");
}

TEST(GrammarMatcher, InvalidUtf8IsRejected) {
    auto g = parse_ok("root ::= .*");  // any text at all
    const char* valid[] = {"\x7F",         "\xC2\x80",         "\xDF\xBF",
                           "\xE0\xA0\x80", "\xED\x9F\xBF",     "\xEE\x80\x80",
                           "\xEF\xBF\xBF", "\xF0\x90\x80\x80", "\xF4\x8F\xBF\xBF"};
    for (const char* s : valid)
        EXPECT_TRUE(matches(g, s)) << "valid: " << testing::PrintToString(s);
    const char* invalid[] = {
        "\x80",              // a continuation byte first
        "\xBF",              //
        "\xC0\x80",          // overlong U+0000
        "\xC1\xBF",          // overlong U+007F
        "\xE0\x80\x80",      // overlong U+0000 in three bytes
        "\xE0\x9F\xBF",      // overlong U+07FF
        "\xF0\x80\x80\x80",  // overlong in four
        "\xF0\x8F\xBF\xBF",  // overlong U+FFFF
        "\xED\xA0\x80",      // surrogate U+D800
        "\xED\xBF\xBF",      // surrogate U+DFFF
        "\xF4\x90\x80\x80",  // U+110000
        "\xF5\x80\x80\x80",  // lead byte beyond U+10FFFF
        "\xFF",              //
        "\xC3\x41",          // a lead byte then ASCII
        "\xE4\xBD\xE4",      // a lead byte where a continuation belongs
    };
    for (const char* s : invalid)
        EXPECT_FALSE(viable(g, s)) << "invalid: " << testing::PrintToString(s);
    // prefixes that no continuation can make valid are refused at once
    const char* dead_prefixes[] = {"\xC0",     "\xC1",     "\xE0\x80", "\xE0\x9F", "\xF0\x80",
                                   "\xF0\x8F", "\xF4\x90", "\xED\xA0", "\xED\xBF"};
    for (const char* s : dead_prefixes)
        EXPECT_FALSE(viable(g, s)) << "dead prefix: " << testing::PrintToString(s);
    // and their tokens are masked out
    GrammarMatcher m(g, byte_vocab());
    EXPECT_FALSE(m.allows(0xC0));
    EXPECT_FALSE(m.allows(0x80));
    EXPECT_FALSE(m.allows(0xF5));
    EXPECT_TRUE(m.allows(0xED));
    ASSERT_TRUE(m.accept(0xED));
    // after ED: 80..9F (U+D000..U+D7FF) yes, A0..BF (surrogates) no
    std::string after_ed = allowed_bytes(m);
    std::string want;
    for (int b = 0x80; b <= 0x9F; ++b) want += (char)b;
    EXPECT_EQ(after_ed, want);
    check_mask(m, 257, "after ED");
}

// ---- matcher: clones, reset ------------------------------------------------------------------

TEST(GrammarMatcher, ClonesAreIndependent) {
    auto g = parse_ok(R"(root ::= "a" ( "b" "c" | "x" "y" ))");
    GrammarMatcher m(g, byte_vocab());
    ASSERT_TRUE(m.accept('a'));
    GrammarMatcher c = m;
    ASSERT_TRUE(c.accept('b'));
    EXPECT_EQ(allowed_bytes(c), "c");
    EXPECT_EQ(allowed_bytes(m), "bx");  // the original did not move
    // both advance, differently
    ASSERT_TRUE(m.accept('x'));
    EXPECT_EQ(allowed_bytes(m), "y");
    EXPECT_EQ(allowed_bytes(c), "c");
    ASSERT_TRUE(c.accept('c'));
    ASSERT_TRUE(c.accept(kEnd));
    EXPECT_TRUE(c.finished());
    EXPECT_FALSE(m.finished());
    EXPECT_FALSE(m.can_end());
    ASSERT_TRUE(m.accept('y'));
    EXPECT_TRUE(m.must_end());
    // assignment copies the state; the source may move on alone
    GrammarMatcher d(g, byte_vocab());
    d = c;
    EXPECT_TRUE(d.finished());
    d.reset();
    EXPECT_TRUE(c.finished());
    EXPECT_EQ(allowed_bytes(d), "a");
    // a moved matcher keeps the state
    GrammarMatcher e = std::move(d);
    EXPECT_EQ(allowed_bytes(e), "a");
}

TEST(GrammarMatcher, ManyClonesShareTablesButNotState) {
    auto g = parse_ok(R"(root ::= [0-9]{4})");
    GrammarMatcher m(g, byte_vocab());
    std::vector<GrammarMatcher> clones;
    for (int i = 0; i < 10; ++i) {
        clones.push_back(m);
        ASSERT_TRUE(clones.back().accept('0' + i));
    }
    for (int i = 0; i < 10; ++i) {
        ASSERT_TRUE(clones[(size_t)i].accept_bytes("12"));
        EXPECT_FALSE(clones[(size_t)i].can_end());
        ASSERT_TRUE(clones[(size_t)i].accept('3'));
        EXPECT_TRUE(clones[(size_t)i].must_end());
    }
    EXPECT_EQ(m.count_allowed(), 10u);
}

TEST(GrammarMatcher, Reset) {
    auto g = parse_ok(R"(root ::= "ab")");
    GrammarMatcher m(g, byte_vocab());
    ASSERT_TRUE(m.accept_bytes("ab"));
    ASSERT_TRUE(m.accept(kEnd));
    m.reset();
    EXPECT_FALSE(m.finished());
    EXPECT_EQ(allowed_bytes(m), "a");
    ASSERT_TRUE(m.accept_bytes("ab"));
    EXPECT_TRUE(m.must_end());
    EXPECT_FALSE(m.accept('a'));
    m.reset();
    ASSERT_TRUE(m.accept('a'));
    m.reset();
    EXPECT_EQ(allowed_bytes(m), "a");
}

// ---- recursion -------------------------------------------------------------------------------

namespace {

const char* kJson = R"(
root   ::= value
value  ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( pair ( "," ws pair )* )? "}" ws
pair   ::= string ":" ws value
array  ::= "[" ws ( value ( "," ws value )* )? "]" ws
string ::= "\"" ( [^"\\\x00-\x1f] | "\\" ["\\/bfnrt] )* "\"" ws
number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ws
ws     ::= [ \t\n]{0,20}
)";

}  // namespace

TEST(GrammarMatcher, JsonNesting) {
    auto g = parse_ok(kJson);
    for (const char* s : {R"({"a":[1,{"b":[]}]})", R"([[[[]]],{}])", R"({"k": "v\"\\", "n": -0.5})",
                          "[ 1, 2 ,\n 3 ]", R"("é你")", "true"})
        EXPECT_MATCH(g, s);
    for (const char* s :
         {R"({"a":[1}])", R"({"a":[1})", R"([[]])]", R"({"a" 1})", "[1,]", "01", R"("a)", "{"})
        EXPECT_NO_MATCH(g, s);
    // a mismatched bracket is refused at the bracket, and the matcher can go on
    GrammarMatcher m(g, byte_vocab());
    ASSERT_TRUE(m.accept_bytes(R"({"a":[1)"));
    EXPECT_FALSE(m.allows('}'));
    EXPECT_FALSE(m.can_end());
    EXPECT_TRUE(m.allows(']'));
    EXPECT_TRUE(m.allows(','));
    check_mask(m, 257, "inside an array inside an object");
    ASSERT_TRUE(m.accept_bytes("]}"));
    EXPECT_TRUE(m.can_end());
    // deep nesting: 200 levels, closed in the right order only
    const std::string open(200, '['), close(200, ']');
    EXPECT_MATCH(g, open + close);
    EXPECT_NO_MATCH(g, open + close.substr(1));
    EXPECT_NO_MATCH(g, open + close + "]");
    std::string mixed_open, mixed_close;
    for (int i = 0; i < 100; ++i) {
        mixed_open += i % 2 ? "[" : "{\"k\":";
        mixed_close = (i % 2 ? "]" : "}") + mixed_close;
    }
    EXPECT_MATCH(g, mixed_open + "1" + mixed_close);
    std::string swapped = mixed_close;
    std::swap(swapped[0], swapped[1]);
    EXPECT_NO_MATCH(g, mixed_open + "1" + swapped);
}

TEST(GrammarMatcher, BalancedParentheses) {
    auto g = parse_ok("root ::= ( \"(\" root \")\" )*");
    EXPECT_MATCH(g, "");
    EXPECT_MATCH(g, "(()())()");
    EXPECT_NO_MATCH(g, "(()");
    EXPECT_NO_MATCH(g, "())(");
}

// Grammar size must not make matching blow up: nullable rules in a row, each with two empty
// ways through (expanding every way separately is 2^24 stacks here: seconds, not ms).
TEST(GrammarMatcher, ManyNullableRulesStayFast) {
    std::string text = "root ::=";
    for (int i = 0; i < 24; ++i) text += " x";
    text += " \"end\"\nx ::= \"a\"? | \"b\"?";
    auto g = parse_ok(text);
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_MATCH(g, "end");
    EXPECT_MATCH(g, std::string(24, 'a') + "end");
    EXPECT_MATCH(g,
                 "abab"
                 "end");
    EXPECT_NO_MATCH(g, std::string(25, 'a') + "end");
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(s, 2.0);
}

// 3000 optional items in a row: expanding them must not recurse once per item.
TEST(GrammarMatcher, LongNullableChainsDoNotOverflowTheStack) {
    auto g = parse_ok(R"(root ::= ( "a"? ){3000} "b")");
    EXPECT_MATCH(g, "b");
    EXPECT_MATCH(g, "aaab");
    EXPECT_NO_MATCH(g, "c");
}

// 100000 optional items: 100001 parses of the start, past the matcher's bound of 4096 per
// position: the matcher says so (the server refuses such a grammar) instead of stalling.
TEST(GrammarMatcher, TooAmbiguousGrammarsOverflow) {
    auto g = parse_ok(R"(root ::= ( "a"? ){100000} "b")");
    GrammarMatcher m(g, byte_vocab());
    EXPECT_TRUE(m.overflowed());
    EXPECT_FALSE(m.accept_bytes("b"));
    auto nested = parse_ok(R"(root ::= (("a"?){1000}){1000} "b")");
    const auto t0 = std::chrono::steady_clock::now();
    GrammarMatcher n(nested, byte_vocab());
    EXPECT_TRUE(n.overflowed());
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
              10.0 * edgellm::test::emulation_slowdown());  // (a stall would take minutes)
    GrammarMatcher fine(parse_ok(R"(root ::= ( "a"? ){3000} "b")"), byte_vocab());
    EXPECT_FALSE(fine.overflowed());
}

// ---- to_string -------------------------------------------------------------------------------

TEST(GrammarToString, RoundTrips) {
    const char* grammars[] = {
        kJson,
        R"(root ::= "a\n\r\t\\\"\x01\x7F" [\]\[\-\^\\"a-c] [^\x00-\x1f] . "é你😀")",
        R"(root ::= ( "x" | "y" ){2,3} "z"* "w"+ "v"? [0-9]{2,})",
        "root ::= item+\nitem ::= \"i\" | ( \"(\" root \")\" )",
        R"(root ::= [^] "end")",
    };
    std::vector<std::string> inputs = {"",
                                       "a\n\r\t\\\"\x01\x7F]\xC3\xA9\xE4\xBD\xA0\xF0\x9F\x98\x80",
                                       "a\n\r\t\\\"\x01\x7F^!x\xC3\xA9\xE4\xBD\xA0\xF0\x9F\x98\x80",
                                       "xyzwv00",
                                       "xyxw0",
                                       "xyw12",
                                       "xxxxw1",
                                       "ii(i)((ii))",
                                       "(i",
                                       R"({"a":[1,{"b":[]}]})",
                                       "[1,",
                                       "zend",
                                       "end",
                                       "\xE4\xBD\xA0"
                                       "end"};
    for (const char* text : grammars) {
        auto g = parse_ok(text);
        ASSERT_TRUE(g);
        const std::string printed = g->to_string();
        auto r = Grammar::parse(printed);
        ASSERT_TRUE(r.ok()) << printed << "\n" << r.error();
        // the same rules (printed in the order the reparse met them)
        EXPECT_EQ(sorted_lines((*r)->to_string()), sorted_lines(printed));
        EXPECT_EQ((*r)->n_rules(), g->n_rules());
        for (const auto& s : inputs) {
            EXPECT_EQ(matches(g, s), matches(*r, s)) << printed << "\ninput: " << s;
            for (size_t k = 0; k <= s.size(); ++k)
                EXPECT_EQ(viable(g, s.substr(0, k)), viable(*r, s.substr(0, k)))
                    << printed << "\ninput: " << s.substr(0, k);
        }
    }
    // the printed form really is what was written
    auto g = parse_ok("root ::= \"a\" [b-d] | x\nx ::= \"q\"");
    EXPECT_EQ(g->to_string(), "root ::= \"a\" [b-d] | x\nx ::= \"q\"\n");
    EXPECT_EQ(g->n_rules(), 2u);
}
