#include "runtime/tokenizer/streaming_decoder.h"

#include <gtest/gtest.h>

#include "tests/runtime/tokenizer/tiny_tokenizer.h"

namespace kinfer {
namespace {

using testing::ByteId;

class StreamingDecoderTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_NE(tok_, nullptr); }
  std::unique_ptr<Tokenizer> tok_ = testing::TinyTokenizer();
};

TEST_F(StreamingDecoderTest, HoldsBackASplitCharacterUntilComplete) {
  StreamingDecoder dec(*tok_, false);
  const std::string emoji = "\xF0\x9F\x98\x80";
  EXPECT_EQ(dec.Push(ByteId('a')), "a");
  EXPECT_EQ(dec.Push(ByteId(0xF0)), "");
  EXPECT_EQ(dec.Push(ByteId(0x9F)), "");
  EXPECT_EQ(dec.Push(ByteId(0x98)), "");
  EXPECT_EQ(dec.pending_bytes(), 3u);
  EXPECT_EQ(dec.Push(ByteId(0x80)), emoji);
  EXPECT_EQ(dec.Flush(), "");
}

TEST_F(StreamingDecoderTest, ReplacesInvalidBytesAtOnce) {
  StreamingDecoder dec(*tok_, false);
  EXPECT_EQ(dec.Push(ByteId(0xFF)), "\xEF\xBF\xBD");
  EXPECT_EQ(dec.Push(ByteId(0xE2)), "");
  // A lead byte followed by a non-continuation: the lead becomes U+FFFD, 'x' goes through.
  EXPECT_EQ(dec.Push(ByteId('x')), "\xEF\xBF\xBDx");
}

TEST_F(StreamingDecoderTest, FlushRendersAnIncompleteTailAsReplacement) {
  StreamingDecoder dec(*tok_, false);
  EXPECT_EQ(dec.Push(ByteId(0xE6)), "");
  EXPECT_EQ(dec.Push(ByteId(0x97)), "");
  EXPECT_EQ(dec.Flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(dec.pending_bytes(), 0u);
  EXPECT_EQ(dec.Push(ByteId('z')), "z");
}

TEST_F(StreamingDecoderTest, ControlTokensFollowTheSpecialFlag) {
  StreamingDecoder quiet(*tok_, false);
  StreamingDecoder loud(*tok_, true);
  EXPECT_EQ(quiet.Push(2), "");
  EXPECT_EQ(loud.Push(2), "<|im_end|>");
}

}  // namespace
}  // namespace kinfer
