#include "insitubatch/util/text.h"

#include <gtest/gtest.h>

#include <vector>

namespace insitubatch {
namespace {

TEST(TextTest, TrimAndLower) {
  EXPECT_EQ(TrimSpace(" \t a b\r\n"), "a b");
  EXPECT_EQ(TrimSpace(" \n "), "");
  EXPECT_EQ(AsciiLower("X-MS-Date: Ä"), "x-ms-date: Ä");
}

TEST(TextTest, CoordsAsMessagesWriteThem) {
  EXPECT_EQ(CoordsText(std::vector<uint64_t>{}), "[]");
  EXPECT_EQ(CoordsText(std::vector<uint64_t>{7}), "[7]");
  EXPECT_EQ(CoordsText(std::vector<uint64_t>{2, 3, 18446744073709551615ull}), "[2, 3, 18446744073709551615]");
}

TEST(TextTest, PercentDecodeLenientOrStrict) {
  EXPECT_EQ(PercentDecode("user%40corp:p%3Ass", false).value(), "user@corp:p:ss");
  EXPECT_EQ(PercentDecode("100%", false).value(), "100%");
  EXPECT_EQ(PercentDecode("%zz%4", false).value(), "%zz%4");
  EXPECT_FALSE(PercentDecode("100%", true).has_value());
  EXPECT_FALSE(PercentDecode("%4g", true).has_value());
  EXPECT_EQ(PercentDecode("%2B%2f", true).value(), "+/");
}

TEST(TextTest, Utf8AsPythonDecodesIt) {
  const std::string text = "aé東🙂";
  std::vector<uint32_t> cps;
  for (size_t i = 0; i < text.size();) cps.push_back(NextUtf8(text, i).value());
  EXPECT_EQ(cps, (std::vector<uint32_t>{'a', 0xE9, 0x6771, 0x1F642}));
  for (const char* bad : {"\xff", "\xc3", "\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe6\x9d"}) {
    size_t pos = 0;
    EXPECT_FALSE(NextUtf8(bad, pos).has_value()) << bad;
    EXPECT_EQ(pos, 0u);
  }
}

TEST(TextTest, EscapeInvalidUtf8KeepsValidTextAndEscapesTheRest) {
  EXPECT_EQ(EscapeInvalidUtf8("a\xc3\xa9"
                              "b"),
            "a\xc3\xa9"
            "b");  // é stays as it is
  EXPECT_EQ(EscapeInvalidUtf8("X\xffZ"), "X\\xffZ");
  EXPECT_EQ(EscapeInvalidUtf8("\xe6\x9d"), "\\xe6\\x9d");  // a truncated sequence, byte by byte
  EXPECT_EQ(EscapeInvalidUtf8("\xed\xa0\x80!"), "\\xed\\xa0\\x80!");
  EXPECT_EQ(EscapeInvalidUtf8(""), "");
}

}  // namespace
}  // namespace insitubatch
