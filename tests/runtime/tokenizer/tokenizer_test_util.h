// Shared helpers for the tokenizer tests: the bundled model's tokenizer (loaded once) and the
// recorded llama.cpp fixtures.
#pragma once

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/gguf/gguf_file.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/runtime/test_model_path.h"

namespace kinfer::testing {

// The model's tokenizer, or nullptr when the model is not available (tests then skip).
inline const Tokenizer* ModelTokenizer() {
  static const std::unique_ptr<Tokenizer> tok = []() -> std::unique_ptr<Tokenizer> {
    if (!ModelAvailable()) return nullptr;
    auto file = GgufFile::Open(ModelPath());
    if (!file.ok()) {
      ADD_FAILURE() << file.status().ToString();
      return nullptr;
    }
    auto t = Tokenizer::FromGguf(**file);
    if (!t.ok()) {
      ADD_FAILURE() << t.status().ToString();
      return nullptr;
    }
    return std::move(*t);
  }();
  return tok.get();
}

inline nlohmann::json LoadFixture(const std::string& rel) {
  std::ifstream in(SourcePath(rel));
  EXPECT_TRUE(in.good()) << "missing fixture " << rel;
  if (!in.good()) return nlohmann::json::object();
  return nlohmann::json::parse(in);
}

struct TokenCase {
  std::string text;
  bool parse_special = false;
  std::vector<int32_t> ids;
  std::string decoded;          // llama_detokenize(..., unparse_special=false)
  std::string decoded_special;  // llama_detokenize(..., unparse_special=true)
};

inline std::vector<TokenCase> LoadTokenCases(const std::string& rel) {
  std::vector<TokenCase> cases;
  const nlohmann::json j = LoadFixture(rel);
  if (!j.contains("entries")) return cases;
  for (const auto& e : j["entries"]) {
    TokenCase c;
    c.text = e["text"].get<std::string>();
    c.parse_special = e["parse_special"].get<bool>();
    c.ids = e["ids"].get<std::vector<int32_t>>();
    c.decoded = e["decoded"].get<std::string>();
    c.decoded_special = e["decoded_special"].get<std::string>();
    cases.push_back(std::move(c));
  }
  return cases;
}

#define KINFER_REQUIRE_TOKENIZER(tok)                 \
  KINFER_REQUIRE_MODEL();                             \
  const ::kinfer::Tokenizer* tok = ::kinfer::testing::ModelTokenizer(); \
  ASSERT_NE(tok, nullptr)

}  // namespace kinfer::testing
