// The bundled model (smollm2-135m-instruct-q4_1.gguf) parses as expected, and rows of its Q8_0
// and Q4_1 tensors dequantize exactly as gguf-py does
// (tests/fixtures/gguf/model_rows_reference.gguf).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "runtime/gguf/gguf_file.h"
#include "tests/runtime/test_model_path.h"

namespace kinfer {
namespace {

class GgufModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    KINFER_REQUIRE_MODEL();
    auto f = GgufFile::Open(testing::ModelPath());
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    model_ = std::move(f).value();
  }
  std::unique_ptr<GgufFile> model_;
};

TEST_F(GgufModelTest, ParsesSmolLm2Layout) {
  EXPECT_EQ(model_->version(), 3u);
  EXPECT_EQ(*model_->GetString("general.architecture"), "llama");
  EXPECT_EQ(*model_->GetInt("llama.block_count"), 30);
  EXPECT_EQ(model_->tensors().size(), 272u);
  const GgufTensorInfo* emb = model_->FindTensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->type, GgmlType::kQ8_0);
  EXPECT_THAT(emb->dims, ::testing::ElementsAre(576, 49152));
  EXPECT_EQ(emb->size_bytes, 576u / 32 * 34 * 49152);
  auto tokens = model_->GetStringArray("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok()) << tokens.status().ToString();
  EXPECT_EQ(tokens->size(), 49152u);
  for (const GgufTensorInfo& t : model_->tensors()) {
    EXPECT_TRUE(GgmlTypeSupported(t.type)) << t.name << " " << GgmlTypeName(t.type);
  }
}

TEST_F(GgufModelTest, DequantizedRowsMatchGgufPy) {
  auto ref = GgufFile::Open(testing::SourcePath("tests/fixtures/gguf/model_rows_reference.gguf"));
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  auto recorded_size = (*ref)->GetInt("kinfer.model_size");
  ASSERT_TRUE(recorded_size.ok());
  if (static_cast<size_t>(*recorded_size) != model_->file_size()) {
    GTEST_SKIP() << "KINFER_MODEL is not the model the fixture was recorded from (size "
                 << model_->file_size() << " != " << *recorded_size << ")";
  }
  int checked = 0;
  for (const std::string name : {"token_embd.weight", "blk.0.ffn_down.weight"}) {
    const GgufTensorInfo* t = model_->FindTensor(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(GgmlTypeName(t->type), *(*ref)->GetString("kinfer.type." + name));
    auto rows = (*ref)->GetIntArray("kinfer.rows." + name);
    ASSERT_TRUE(rows.ok()) << rows.status().ToString();
    const int64_t n = t->dims[0];
    const size_t row_bytes =
        static_cast<size_t>(n / GgmlBlockSize(t->type)) * GgmlTypeSize(t->type);
    std::vector<float> got(static_cast<size_t>(n));
    for (int64_t r : *rows) {
      const GgufTensorInfo* want = (*ref)->FindTensor(name + "#" + std::to_string(r));
      ASSERT_NE(want, nullptr);
      ASSERT_EQ(want->num_elements(), n);
      DequantizeRow(t->type, t->data + static_cast<size_t>(r) * row_bytes, got.data(), n);
      EXPECT_EQ(std::memcmp(got.data(), want->data, got.size() * sizeof(float)), 0)
          << name << " row " << r;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 8);
}

}  // namespace
}  // namespace kinfer
