// Tokenizer against llama.cpp: every recorded fixture entry must match exactly.
#include "runtime/tokenizer/tokenizer.h"

#include <chrono>
#include <cstdio>

#include "runtime/tokenizer/streaming_decoder.h"
#include "tests/runtime/tokenizer/tokenizer_test_util.h"

namespace kinfer {
namespace {

using testing::LoadTokenCases;
using testing::TokenCase;

const char* const kFixtureFiles[] = {
    "tests/fixtures/tokenizer/mt_bench.json",
    "tests/fixtures/tokenizer/hard_cases.json",
    "tests/fixtures/tokenizer/random_mix.json",
};

std::string Show(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(ids[i]);  // (a const char* + std::string here meets a GCC 12 -Wrestrict false positive)
  }
  return s + "]";
}

class TokenizerFixtureTest : public ::testing::TestWithParam<const char*> {};

TEST_P(TokenizerFixtureTest, EncodeMatchesLlamaCppExactly) {
  KINFER_REQUIRE_TOKENIZER(tok);
  const std::vector<TokenCase> cases = LoadTokenCases(GetParam());
  ASSERT_FALSE(cases.empty());
  int matched = 0;
  for (const TokenCase& c : cases) {
    const std::vector<int32_t> ids = tok->Encode(c.text, /*add_special=*/false, c.parse_special);
    if (ids == c.ids) {
      ++matched;
    } else {
      ADD_FAILURE() << "text " << ::testing::PrintToString(c.text) << " parse_special=" << c.parse_special
                    << "\n  got      " << Show(ids) << "\n  expected " << Show(c.ids);
    }
  }
  std::printf("%s: %d/%zu entries match llama.cpp\n", GetParam(), matched, cases.size());
  EXPECT_EQ(matched, static_cast<int>(cases.size()));
}

TEST_P(TokenizerFixtureTest, DecodeMatchesLlamaCppDetokenize) {
  KINFER_REQUIRE_TOKENIZER(tok);
  for (const TokenCase& c : LoadTokenCases(GetParam())) {
    EXPECT_EQ(tok->Decode(c.ids, /*special=*/false), c.decoded) << ::testing::PrintToString(c.text);
    EXPECT_EQ(tok->Decode(c.ids, /*special=*/true), c.decoded_special) << ::testing::PrintToString(c.text);
  }
}

TEST_P(TokenizerFixtureTest, DecodeOfEncodeRoundTrips) {
  KINFER_REQUIRE_TOKENIZER(tok);
  for (const TokenCase& c : LoadTokenCases(GetParam())) {
    const std::vector<int32_t> ids = tok->Encode(c.text, false, c.parse_special);
    EXPECT_EQ(tok->Decode(ids, /*special=*/true), c.text) << ::testing::PrintToString(c.text);
  }
}

TEST_P(TokenizerFixtureTest, StreamingDecoderEmitsOnlyValidUtf8) {
  KINFER_REQUIRE_TOKENIZER(tok);
  for (const TokenCase& c : LoadTokenCases(GetParam())) {
    StreamingDecoder dec(*tok, /*special=*/true);
    std::string joined;
    for (int32_t id : c.ids) {
      const std::string chunk = dec.Push(id);
      ASSERT_TRUE(IsValidUtf8(chunk)) << ::testing::PrintToString(c.text);
      joined += chunk;
    }
    const std::string rest = dec.Flush();
    ASSERT_TRUE(IsValidUtf8(rest));
    joined += rest;
    EXPECT_EQ(joined, c.text);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TokenizerFixtureTest, ::testing::ValuesIn(kFixtureFiles));

// The model's vocab with tokenizer.ggml.pre replaced, as the fixtures for other pre types were
// recorded (a vocab-only GGUF copy with the key rewritten).
class OtherPreTypeTest : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

TEST_P(OtherPreTypeTest, EncodeAndDecodeMatchLlamaCpp) {
  KINFER_REQUIRE_MODEL();
  auto file = GgufFile::Open(testing::ModelPath());
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  auto data = ReadTokenizerData(**file);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  data->pre = GetParam().second;
  auto tok = Tokenizer::Create(std::move(*data));
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  const std::vector<TokenCase> cases = LoadTokenCases(GetParam().first);
  ASSERT_FALSE(cases.empty());
  int matched = 0;
  for (const TokenCase& c : cases) {
    const std::vector<int32_t> ids = (*tok)->Encode(c.text, false, c.parse_special);
    EXPECT_EQ(ids, c.ids) << ::testing::PrintToString(c.text) << " parse_special=" << c.parse_special;
    EXPECT_EQ((*tok)->Decode(c.ids, false), c.decoded) << ::testing::PrintToString(c.text);
    EXPECT_EQ((*tok)->Decode(c.ids, true), c.decoded_special) << ::testing::PrintToString(c.text);
    matched += ids == c.ids;
  }
  std::printf("%s (pre %s): %d/%zu entries match llama.cpp\n", GetParam().first, GetParam().second, matched,
              cases.size());
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, OtherPreTypeTest,
    ::testing::Values(std::make_pair("tests/fixtures/tokenizer/pre_gpt2.json", "gpt-2"),
                      std::make_pair("tests/fixtures/tokenizer/pre_default.json", "default")));

uint64_t Fnv1a(const std::string& bytes, uint64_t h) {
  for (unsigned char b : bytes) {
    h ^= b;
    h *= 0x100000001b3ULL;
  }
  return h;
}

TEST(TokenizerVocabTest, SpecialIdsAndPiecesMatchLlamaCpp) {
  KINFER_REQUIRE_TOKENIZER(tok);
  const nlohmann::json facts = testing::LoadFixture("tests/fixtures/tokenizer/vocab_facts.json");
  ASSERT_EQ(tok->vocab_size(), facts["vocab_size"].get<int32_t>());
  EXPECT_EQ(tok->bos_id(), facts["bos_id"].get<int32_t>());
  EXPECT_EQ(tok->eos_id(), facts["eos_id"].get<int32_t>());
  std::vector<int32_t> eog, control;
  for (int32_t id = 0; id < tok->vocab_size(); ++id) {
    if (tok->IsEndOfGeneration(id)) eog.push_back(id);
    if (tok->IsControl(id)) control.push_back(id);
  }
  EXPECT_EQ(eog, facts["eog_ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(control, facts["control_ids"].get<std::vector<int32_t>>());

  const int32_t block = facts["piece_checksum_block"].get<int32_t>();
  const auto sums = facts["piece_checksums_fnv1a64"].get<std::vector<std::string>>();
  for (size_t b = 0; b < sums.size(); ++b) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int32_t id = static_cast<int32_t>(b) * block; id < std::min<int32_t>(tok->vocab_size(), (b + 1) * block); ++id) {
      const std::string piece = tok->TokenToPiece(id, /*special=*/true);
      const uint32_t n = static_cast<uint32_t>(piece.size());
      const std::string len{static_cast<char>(n & 0xFF), static_cast<char>((n >> 8) & 0xFF),
                            static_cast<char>((n >> 16) & 0xFF), static_cast<char>(n >> 24)};
      h = Fnv1a(len + piece, h);
    }
    char hex[17];
    std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
    EXPECT_EQ(hex, sums[b]) << "pieces of ids " << b * block << ".." << (b + 1) * block - 1;
  }
}

TEST(TokenizerVocabTest, ControlTokensRenderOnlyWhenSpecial) {
  KINFER_REQUIRE_TOKENIZER(tok);
  const int32_t im_end = tok->FindToken("<|im_end|>");
  ASSERT_GE(im_end, 0);
  EXPECT_EQ(tok->TokenToPiece(im_end, true), "<|im_end|>");
  EXPECT_EQ(tok->TokenToPiece(im_end, false), "");
  EXPECT_TRUE(tok->IsEndOfGeneration(im_end));
  EXPECT_FALSE(tok->IsEndOfGeneration(tok->FindToken("<|im_start|>")));
  EXPECT_EQ(tok->TokenToPiece(-1, true), "");
  EXPECT_EQ(tok->TokenToPiece(tok->vocab_size(), true), "");
}

TEST(TokenizerVocabTest, AddSpecialFollowsAddBosToken) {
  KINFER_REQUIRE_TOKENIZER(tok);
  ASSERT_FALSE(tok->add_bos());  // SmolLM2: tokenizer.ggml.add_bos_token = false
  EXPECT_EQ(tok->Encode("hello", true, false), tok->Encode("hello", false, false));
  EXPECT_TRUE(tok->chat_template().has_value());
}

TEST(TokenizerPerfTest, EncodesTwoThousandTokensWellUnderTenMilliseconds) {
  KINFER_REQUIRE_TOKENIZER(tok);
  std::string text;
  for (const TokenCase& c : LoadTokenCases("tests/fixtures/tokenizer/mt_bench.json")) text += c.text + "\n";
  while (tok->Encode(text, false, true).size() < 2000) text += text;
  const auto ids = tok->Encode(text, false, true);
  // Take a prefix of about 2,000 tokens.
  const std::string prefix = tok->Decode(std::span<const int32_t>(ids.data(), 2000), true);
  double best_ms = 1e9;
  size_t n = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    n = tok->Encode(prefix, false, true).size();
    const auto t1 = std::chrono::steady_clock::now();
    best_ms = std::min(best_ms, std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::printf("encode: %zu tokens (%zu bytes) in %.3f ms\n", n, prefix.size(), best_ms);
  EXPECT_LT(best_ms, 10.0);
}

}  // namespace
}  // namespace kinfer
