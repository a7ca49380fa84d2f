// Construction errors (FromGguf / Create) and BPE behaviour on a tiny in-memory vocab.
#include "runtime/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include "tests/runtime/gguf/gguf_test_writer.h"
#include "tests/runtime/tokenizer/tiny_tokenizer.h"

namespace kinfer {
namespace {

using testing::ByteId;
using testing::Enc;
using testing::GgufTestWriter;

void AddStringArray(GgufTestWriter* w, const std::string& key, const std::vector<std::string>& items) {
  Enc e;
  e.ArrayHeader(GgufValueType::kString, items.size());
  for (const auto& s : items) e.Str(s);
  w->AddKv(key, GgufValueType::kArray, e);
}

StatusOr<std::unique_ptr<Tokenizer>> FromWriter(const GgufTestWriter& w, std::vector<uint8_t>* storage) {
  *storage = w.Build();
  auto file = GgufFile::FromBuffer(storage->data(), storage->size());
  if (!file.ok()) return file.status();
  return Tokenizer::FromGguf(**file);
}

TEST(TokenizerLoadTest, FromGgufFailsClearlyWithoutVocab) {
  GgufTestWriter w;
  w.AddString("general.architecture", "llama");
  w.AddString("tokenizer.ggml.model", "gpt2");
  std::vector<uint8_t> buf;
  auto t = FromWriter(w, &buf);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("tokenizer.ggml.tokens"), std::string::npos) << t.status().ToString();
}

TEST(TokenizerLoadTest, FromGgufFailsClearlyWithoutTokenizerModel) {
  GgufTestWriter w;
  w.AddString("general.architecture", "llama");
  std::vector<uint8_t> buf;
  auto t = FromWriter(w, &buf);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("tokenizer.ggml.model"), std::string::npos) << t.status().ToString();
}

TEST(TokenizerLoadTest, FromGgufRejectsUnknownTokenizerModel) {
  GgufTestWriter w;
  w.AddString("tokenizer.ggml.model", "llama");  // SentencePiece: not supported
  AddStringArray(&w, "tokenizer.ggml.tokens", {"a", "b"});
  std::vector<uint8_t> buf;
  auto t = FromWriter(w, &buf);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(t.status().message().find("'llama'"), std::string::npos) << t.status().ToString();
}

TEST(TokenizerLoadTest, FromGgufRejectsUnknownPreTokenizer) {
  GgufTestWriter w;
  w.AddString("tokenizer.ggml.model", "gpt2");
  w.AddString("tokenizer.ggml.pre", "no-such-pre");
  AddStringArray(&w, "tokenizer.ggml.tokens", {"a", "b"});
  AddStringArray(&w, "tokenizer.ggml.merges", {"a b"});
  std::vector<uint8_t> buf;
  auto t = FromWriter(w, &buf);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(t.status().message().find("no-such-pre"), std::string::npos);
}

TEST(TokenizerLoadTest, FromGgufReadsAMinimalVocab) {
  GgufTestWriter w;
  w.AddString("tokenizer.ggml.model", "gpt2");
  w.AddString("tokenizer.ggml.pre", "smollm");
  AddStringArray(&w, "tokenizer.ggml.tokens", {"a", "b", "ab", "<|im_end|>"});
  AddStringArray(&w, "tokenizer.ggml.merges", {"a b"});
  w.AddU32("tokenizer.ggml.eos_token_id", 3);
  w.AddString("tokenizer.chat_template", "{{ x }}");
  std::vector<uint8_t> buf;
  auto t = FromWriter(w, &buf);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)->Encode("abba", false, false), (std::vector<int32_t>{2, 1, 0}));
  EXPECT_EQ((*t)->eos_id(), 3);
  EXPECT_TRUE((*t)->IsEndOfGeneration(3));
  EXPECT_EQ((*t)->chat_template(), "{{ x }}");
}

TEST(TokenizerLoadTest, CreateRejectsMismatchedTokenTypes) {
  TokenizerData d = testing::TinyTokenizerData();
  d.token_types.pop_back();
  auto t = Tokenizer::Create(d);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
}

TEST(TinyBpeTest, MergesLowestRankFirst) {
  auto tok = testing::TinyTokenizer();
  ASSERT_NE(tok, nullptr);
  const int32_t he = tok->FindToken("he"), ll = tok->FindToken("ll"), hell = tok->FindToken("hell");
  const int32_t sp_w = tok->FindToken("\xC4\xA0w");
  EXPECT_EQ(tok->Encode("hello world", false, false),
            (std::vector<int32_t>{hell, ByteId('o'), sp_w, ByteId('o'), ByteId('r'), ByteId('l'), ByteId('d')}));
  EXPECT_NE(he, -1);
  EXPECT_NE(ll, -1);
}

TEST(TinyBpeTest, SpecialTokensNeedParseSpecialButUserDefinedDoNot) {
  auto tok = testing::TinyTokenizer();
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->Encode("<|im_end|>", false, true), (std::vector<int32_t>{2}));
  EXPECT_NE(tok->Encode("<|im_end|>", false, false), (std::vector<int32_t>{2}));
  EXPECT_EQ(tok->Encode("a<tool>b", false, false), (std::vector<int32_t>{ByteId('a'), 3, ByteId('b')}));
}

TEST(TinyBpeTest, AddSpecialAddsBosWhenConfigured) {
  TokenizerData d = testing::TinyTokenizerData();
  d.add_bos = true;
  d.add_eos = true;
  auto tok = Tokenizer::Create(d);
  ASSERT_TRUE(tok.ok());
  EXPECT_EQ((*tok)->Encode("a", true, false), (std::vector<int32_t>{1, ByteId('a'), 2}));
  EXPECT_EQ((*tok)->Encode("a", false, false), (std::vector<int32_t>{ByteId('a')}));
}

}  // namespace
}  // namespace kinfer
