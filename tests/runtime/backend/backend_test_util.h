// Test helpers for the backend suites: the bundled model's file and tokenizer (no weights loaded),
// a simple block table, and normalized mean squared error (llama.cpp's test-backend-ops measure).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <numeric>
#include <vector>

#include "runtime/gguf/gguf_file.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/runtime/test_model_path.h"

namespace kinfer::testing {

// The bundled model's file, opened once per binary (null when absent or broken).
inline std::shared_ptr<const GgufFile> ModelFile() {
  static std::shared_ptr<const GgufFile> file = [] {
    std::shared_ptr<const GgufFile> f;
    if (!ModelAvailable()) return f;
    auto o = GgufFile::Open(ModelPath());
    if (o.ok()) f = std::shared_ptr<const GgufFile>(std::move(o).value());
    return f;
  }();
  return file;
}

inline const Tokenizer* ModelTokenizer() {
  static std::unique_ptr<Tokenizer> tok = []() -> std::unique_ptr<Tokenizer> {
    auto f = ModelFile();
    if (!f) return nullptr;
    auto t = Tokenizer::FromGguf(*f);
    return t.ok() ? std::move(t).value() : nullptr;
  }();
  return tok.get();
}

// sum (a - b)^2 / sum b^2 (0 when both are zero).
inline double Nmse(const float* a, const float* b, size_t n) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  return den == 0.0 ? num : num / den;
}
inline double Nmse(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  return Nmse(a.data(), b.data(), std::min(a.size(), b.size()));
}

// Blocks [first, first + n) as a table.
inline std::vector<int32_t> Blocks(int first, int n) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

// A few chat prompts of the kind the fixtures use, ChatML as the model's template renders them.
inline std::vector<std::string> BundledPrompts() {
  return {
      "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
      "Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
      "<|im_start|>assistant\n",
      "<|im_start|>user\nWrite a short poem about the sea.<|im_end|>\n<|im_start|>assistant\n",
      "<|im_start|>user\nExplain what a hash table is in two sentences.<|im_end|>\n"
      "<|im_start|>assistant\n",
  };
}

}  // namespace kinfer::testing
