// kQ4Grouped8: the regrouping is a permutation of the GGUF bytes (exact round trip, same size),
// places each byte where weight_layout.h says, and is chosen only for the tensors it names.
// That the kernels read the layout correctly is matmul_test's (the *_Grouped8 cases).
#include "runtime/backend/cpu/weight_layout.h"

#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/backend/cpu/matmul.h"

namespace kinfer {
namespace {

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

TEST(WeightLayoutTest, RegroupThenUngroupIsTheIdentity) {
  for (GgmlType type : {GgmlType::kQ4_0, GgmlType::kQ4_1}) {
    for (int64_t cols : {32, 224, 256, 288, 576, 1536}) {
      const int64_t rows = 3;
      const size_t bytes = WeightMatrix{type, nullptr, rows, cols}.RowBytes() * rows;
      const auto orig = RandomBytes(bytes, static_cast<uint32_t>(cols));
      auto v = orig;
      RegroupQ4(type, v.data(), rows, cols);
      if (cols >= 256) {
        EXPECT_NE(v, orig) << GgmlTypeName(type) << " cols " << cols;
      }
      UngroupQ4(type, v.data(), rows, cols);
      EXPECT_EQ(v, orig) << GgmlTypeName(type) << " cols " << cols;
    }
  }
}

TEST(WeightLayoutTest, PlacesQuantsAndScalesAsDocumented) {
  // Q4_1, one row of 10 blocks: a full group of 8, then a last group of 2.
  const int64_t cols = 320;
  auto gguf = RandomBytes(10 * 20, 7);
  auto g = gguf;
  RegroupQ4(GgmlType::kQ4_1, g.data(), 1, cols);
  auto block = [&](int b) { return gguf.data() + b * 20; };
  for (int b = 0; b < 8; ++b) {
    for (int k = 0; k < 4; ++k) EXPECT_EQ(0, std::memcmp(g.data() + 32 * k + 4 * b, block(b) + 4 + 4 * k, 4));
    EXPECT_EQ(0, std::memcmp(g.data() + 128 + 2 * b, block(b), 2));      // d
    EXPECT_EQ(0, std::memcmp(g.data() + 144 + 2 * b, block(b) + 2, 2));  // m
  }
  // The last, partial group stays GGUF blocks.
  EXPECT_EQ(0, std::memcmp(g.data() + 160, gguf.data() + 160, 40));
}

TEST(WeightLayoutTest, RegroupsTheLayerProjectionsAndTheOutputOnly) {
  for (const char* n : {"blk.0.attn_q.weight", "blk.12.attn_k.weight", "blk.3.attn_v.weight",
                        "blk.29.attn_output.weight", "blk.1.ffn_gate.weight", "blk.1.ffn_up.weight",
                        "blk.100.ffn_down.weight", "output.weight"}) {
    EXPECT_TRUE(RegroupableTensorName(n)) << n;
  }
  for (const char* n : {"token_embd.weight", "blk.0.attn_norm.weight", "blk.0.ffn_norm.weight",
                        "output_norm.weight", "blk..attn_q.weight", "blk.x.attn_q.weight",
                        "blk.0.attn_q.bias", "xblk.0.attn_q.weight", "blk.0attn_q.weight", ""}) {
    EXPECT_FALSE(RegroupableTensorName(n)) << n;
  }
  EXPECT_TRUE(Q4Groupable(GgmlType::kQ4_0));
  EXPECT_TRUE(Q4Groupable(GgmlType::kQ4_1));
  EXPECT_FALSE(Q4Groupable(GgmlType::kQ8_0));
  EXPECT_FALSE(Q4Groupable(GgmlType::kQ4_K));
}

}  // namespace
}  // namespace kinfer
