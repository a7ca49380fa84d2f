#include "runtime/tokenizer/pre_tokenizer.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace kinfer {
namespace {

std::vector<std::string> Split(PreTokenizerType type, std::string_view text) {
  std::vector<std::string_view> words;
  PreTokenize(type, text, &words);
  return {words.begin(), words.end()};
}

using V = std::vector<std::string>;

TEST(PreTokenizerTest, SmollmSplitsEveryDigit) {
  EXPECT_EQ(Split(PreTokenizerType::kSmollm, "abc 123"), (V{"abc", " ", "1", "2", "3"}));
  EXPECT_EQ(Split(PreTokenizerType::kSmollm, "3.14"), (V{"3", ".", "1", "4"}));
}

TEST(PreTokenizerTest, Gpt2KeepsDigitRunsAndLeadingSpace) {
  EXPECT_EQ(Split(PreTokenizerType::kGpt2, "abc 123"), (V{"abc", " 123"}));
}

TEST(PreTokenizerTest, ContractionsAreSeparateWords) {
  EXPECT_EQ(Split(PreTokenizerType::kGpt2, "don't we'll"), (V{"don", "'t", " we", "'ll"}));
  // Upper case contractions are not special in the GPT-2 regex.
  EXPECT_EQ(Split(PreTokenizerType::kGpt2, "DON'T"), (V{"DON", "'", "T"}));
}

TEST(PreTokenizerTest, WhitespaceRunLeavesLastSpaceForNextWord) {
  EXPECT_EQ(Split(PreTokenizerType::kGpt2, "a   b"), (V{"a", "  ", " b"}));
  EXPECT_EQ(Split(PreTokenizerType::kGpt2, "a  \n"), (V{"a", "  \n"}));
  EXPECT_EQ(Split(PreTokenizerType::kGpt2, "x\n\ny"), (V{"x", "\n", "\n", "y"}));
}

TEST(PreTokenizerTest, PunctuationAndSymbolsGroup) {
  EXPECT_EQ(Split(PreTokenizerType::kGpt2, "hi!! $5"), (V{"hi", "!!", " $", "5"}));
}

TEST(PreTokenizerTest, DefaultSplitsPunctuationAndDigitTriples) {
  EXPECT_EQ(Split(PreTokenizerType::kDefault, "12345"), (V{"123", "45"}));
  EXPECT_EQ(Split(PreTokenizerType::kDefault, "a+=b"), (V{"a", "+=", "b"}));
}

TEST(PreTokenizerTest, WordsCoverTheInput) {
  const std::string text = "Emoji \xF0\x9F\x98\x80\xF0\x9F\x91\x8D and \xE6\x97\xA5\xE6\x9C\xAC 42\t\n end ";
  for (auto type : {PreTokenizerType::kDefault, PreTokenizerType::kGpt2, PreTokenizerType::kSmollm}) {
    std::string joined;
    for (const auto& w : Split(type, text)) {
      EXPECT_FALSE(w.empty());
      joined += w;
    }
    EXPECT_EQ(joined, text);
  }
  EXPECT_TRUE(Split(PreTokenizerType::kSmollm, "").empty());
}

TEST(PreTokenizerTest, UnknownPreTypeIsUnimplemented) {
  auto t = ParsePreTokenizerType("qwen2");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(t.status().message().find("qwen2"), std::string::npos);
  EXPECT_TRUE(ParsePreTokenizerType("smollm").ok());
  EXPECT_TRUE(ParsePreTokenizerType("gpt-2").ok());
}

}  // namespace
}  // namespace kinfer
