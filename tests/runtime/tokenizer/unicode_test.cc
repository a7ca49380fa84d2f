#include "runtime/tokenizer/unicode.h"

#include <gtest/gtest.h>

namespace kinfer {
namespace {

using namespace unicode;

TEST(UnicodeTest, CategoriesOfRepresentativeCodepoints) {
  EXPECT_TRUE(CodepointFlags('a') & kLetter);
  EXPECT_TRUE(CodepointFlags(0x65E5) & kLetter);    // 日
  EXPECT_TRUE(CodepointFlags('7') & kNumber);
  EXPECT_TRUE(CodepointFlags(0x0663) & kNumber);    // Arabic-Indic three
  EXPECT_TRUE(CodepointFlags(0x00B2) & kNumber);    // superscript two (No)
  EXPECT_TRUE(CodepointFlags(0x0301) & kMark);
  EXPECT_TRUE(CodepointFlags('!') & kPunctuation);
  EXPECT_TRUE(CodepointFlags('$') & kSymbol);
  EXPECT_TRUE(CodepointFlags(0x1F600) & kSymbol);   // emoji
  EXPECT_TRUE(CodepointFlags(0x0378) & kUndefined); // unassigned
  EXPECT_EQ(CodepointFlags(0x110000), 0);
}

TEST(UnicodeTest, WhitespaceIsTheWhiteSpaceProperty) {
  for (uint32_t cp : {0x09u, 0x0Au, 0x0Bu, 0x0Cu, 0x0Du, 0x20u, 0x85u, 0xA0u, 0x1680u, 0x2000u, 0x200Au,
                      0x2028u, 0x2029u, 0x202Fu, 0x205Fu, 0x3000u}) {
    EXPECT_TRUE(CodepointFlags(cp) & kWhitespace) << std::hex << cp;
  }
  for (uint32_t cp : {0x1Cu, 0x1Fu, 0x200Bu, 0xFEFFu, 0x61u}) {
    EXPECT_FALSE(CodepointFlags(cp) & kWhitespace) << std::hex << cp;
  }
}

TEST(UnicodeTest, ValidatesUtf8) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ascii"));
  EXPECT_TRUE(IsValidUtf8("caf\xC3\xA9 \xF0\x9F\x98\x80"));
  EXPECT_FALSE(IsValidUtf8("\xC3"));              // truncated
  EXPECT_FALSE(IsValidUtf8("\xC0\xAF"));          // overlong
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\x80"));              // stray continuation
  EXPECT_FALSE(IsValidUtf8("\xFF"));
}

TEST(UnicodeTest, SanitizeReplacesMaximalIllFormedSubparts) {
  EXPECT_EQ(SanitizeUtf8("a\xF0\x9F\x98" "b"), "a\xEF\xBF\xBD" "b");  // one U+FFFD for 3 bytes
  EXPECT_EQ(SanitizeUtf8("\x80\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(SanitizeUtf8("ok\xE2\x82"), "ok\xEF\xBF\xBD");
}

TEST(UnicodeTest, Gpt2ByteMapIsABijection) {
  EXPECT_EQ(ByteToUnicode(' '), "\xC4\xA0");  // Ġ
  EXPECT_EQ(ByteToUnicode('\n'), "\xC4\x8A"); // Ċ
  EXPECT_EQ(ByteToUnicode('A'), "A");
  for (int b = 0; b < 256; ++b) {
    std::vector<uint32_t> cpts;
    std::vector<uint32_t> offsets;
    DecodeUtf8(ByteToUnicode(static_cast<uint8_t>(b)), &cpts, &offsets);
    ASSERT_EQ(cpts.size(), 1u);
    EXPECT_EQ(UnicodeToByte(cpts[0]), b);
  }
  EXPECT_EQ(UnicodeToByte(0x4E00), -1);
}

}  // namespace
}  // namespace kinfer
