// The sys string helpers: ASCII trim and lower case, errno's text, the UTF-8 checks.
#include <gtest/gtest.h>

#include <cerrno>

#include "sys/strings.h"

using namespace edgellm::sys;

TEST(Strings, TrimDropsWhiteSpaceAtBothEnds) {
    EXPECT_EQ(trim("  a b \t\r\n"), "a b");
    EXPECT_EQ(trim("\t\v\f x"), "x");
    EXPECT_EQ(trim(" \r\n "), "");
    EXPECT_EQ(trim(""), "");
    EXPECT_EQ(trim("abc"), "abc");
}

TEST(Strings, LowerIsAsciiOnly) {
    EXPECT_EQ(lower("MiXeD.GGUF"), "mixed.gguf");
    EXPECT_EQ(lower("\xC3\x89T\xC3\x89"), "\xC3\x89t\xC3\x89");  // (ÉTÉ: the É stay)
}

TEST(Strings, ErrnoText) {
    EXPECT_EQ(errno_text(ENOENT), "No such file or directory");
    EXPECT_EQ(errno_text(EACCES), "Permission denied");
}

TEST(Strings, Utf8SequenceLength) {
    EXPECT_EQ(utf8_seq_len('a'), 1);
    EXPECT_EQ(utf8_seq_len(0xC3), 2);
    EXPECT_EQ(utf8_seq_len(0xE2), 3);
    EXPECT_EQ(utf8_seq_len(0xF0), 4);
    EXPECT_EQ(utf8_seq_len(0x80), 0);  // a continuation byte
    EXPECT_EQ(utf8_seq_len(0xC0), 0);  // only ever overlong
    EXPECT_EQ(utf8_seq_len(0xF5), 0);  // above U+10FFFF
}

TEST(Strings, Utf8Validity) {
    EXPECT_TRUE(is_valid_utf8(""));
    EXPECT_TRUE(is_valid_utf8("h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80"));
    EXPECT_TRUE(is_valid_utf8("\xF4\x8F\xBF\xBF"));        // U+10FFFF
    EXPECT_FALSE(is_valid_utf8("\xC0\x80"));               // overlong NUL
    EXPECT_FALSE(is_valid_utf8("\xE0\x80\x80"));           // overlong
    EXPECT_FALSE(is_valid_utf8("\xF0\x80\x80\x80"));       // overlong
    EXPECT_FALSE(is_valid_utf8("\xED\xA0\x80"));           // a surrogate
    EXPECT_FALSE(is_valid_utf8("\xF4\x90\x80\x80"));       // above U+10FFFF
    EXPECT_FALSE(is_valid_utf8("\xE2\x82"));               // cut off
    EXPECT_FALSE(is_valid_utf8("a\xFF" "b"));
    EXPECT_EQ(utf8_valid_at("a\xE2\x82\xAC", 1), 3u);
    EXPECT_EQ(utf8_valid_at("a\xE2\x82", 1), 0u);
}

TEST(Strings, ToValidReplacesEachBadByte) {
    EXPECT_EQ(to_valid_utf8("a\xFF" "b"), "a\xEF\xBF\xBD" "b");
    EXPECT_EQ(to_valid_utf8("\xC0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");
    EXPECT_EQ(to_valid_utf8("\xE2\x82"), "\xEF\xBF\xBD\xEF\xBF\xBD");
    EXPECT_EQ(to_valid_utf8("\xE2\x82\xAC"), "\xE2\x82\xAC");
}

TEST(Strings, CompletePrefixHoldsBackACutCharacter) {
    EXPECT_EQ(utf8_complete_prefix("a\xE2\x82"), 1u);
    EXPECT_EQ(utf8_complete_prefix("a\xE2"), 1u);
    EXPECT_EQ(utf8_complete_prefix("a\xE2\x82\xAC"), 4u);
    EXPECT_EQ(utf8_complete_prefix("a\xF0\x9F\x98"), 1u);
    EXPECT_EQ(utf8_complete_prefix("abc"), 3u);
    EXPECT_EQ(utf8_complete_prefix(""), 0u);
}

TEST(Strings, CutNeverSplitsACharacter) {
    const std::string s = "a\xE2\x82\xAC" "b";  // a, the euro sign at 1..3, b at 4
    EXPECT_EQ(utf8_cut(s, 0), 0u);
    EXPECT_EQ(utf8_cut(s, 1), 1u);
    EXPECT_EQ(utf8_cut(s, 2), 1u);
    EXPECT_EQ(utf8_cut(s, 3), 1u);
    EXPECT_EQ(utf8_cut(s, 4), 4u);
    EXPECT_EQ(utf8_cut(s, 99), 5u);
}
