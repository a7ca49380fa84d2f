// DequantizeRow and the fp16/bf16 conversions against gguf-py / numpy references recorded in
// tests/fixtures/gguf/dequant_reference.gguf (scripts/make_gguf_fixtures.py), compared bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>

#include "runtime/gguf/gguf_file.h"
#include "tests/runtime/test_model_path.h"

namespace kinfer {
namespace {}  // namespace

// Readable parameter names in test output ("Q4_K" instead of a byte dump).
void PrintTo(GgmlType t, std::ostream* os) { *os << GgmlTypeName(t); }

namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

class DequantReferenceTest : public ::testing::TestWithParam<GgmlType> {
 protected:
  static void SetUpTestSuite() {
    auto f = GgufFile::Open(testing::SourcePath("tests/fixtures/gguf/dequant_reference.gguf"));
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    file_ = std::move(f).value().release();
  }
  static void TearDownTestSuite() {
    delete file_;
    file_ = nullptr;
  }
  static GgufFile* file_;
};
GgufFile* DequantReferenceTest::file_ = nullptr;

TEST_P(DequantReferenceTest, MatchesGgufPyBitForBit) {
  const GgmlType type = GetParam();
  const std::string name(GgmlTypeName(type));
  const GgufTensorInfo* q = file_->FindTensor(name + ".q");
  const GgufTensorInfo* want = file_->FindTensor(name + ".expected");
  ASSERT_NE(q, nullptr) << name;
  ASSERT_NE(want, nullptr) << name;
  ASSERT_EQ(q->type, type);
  ASSERT_EQ(want->type, GgmlType::kF32);
  ASSERT_EQ(q->num_elements(), want->num_elements());
  const int64_t row = q->dims[0];
  const int64_t rows = q->num_elements() / row;
  const size_t row_bytes = q->size_bytes / static_cast<size_t>(rows);
  std::vector<float> got(static_cast<size_t>(row));
  int mismatches = 0;
  for (int64_t r = 0; r < rows; ++r) {
    DequantizeRow(type, q->data + r * row_bytes, got.data(), row);
    for (int64_t i = 0; i < row; ++i) {
      float expected;
      std::memcpy(&expected, want->data + (r * row + i) * 4, 4);
      if (Bits(got[i]) != Bits(expected) && ++mismatches <= 5) {
        ADD_FAILURE() << name << " row " << r << " element " << i << ": got " << got[i] << " want "
                      << expected;
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST_P(DequantReferenceTest, ReadsUnalignedSource) {
  const GgmlType type = GetParam();
  const GgufTensorInfo* q = file_->FindTensor(std::string(GgmlTypeName(type)) + ".q");
  ASSERT_NE(q, nullptr);
  const int64_t n = q->dims[0];
  const size_t row_bytes = q->size_bytes / static_cast<size_t>(q->num_elements() / n);
  std::vector<uint8_t> shifted(row_bytes + 1);
  std::memcpy(shifted.data() + 1, q->data, row_bytes);
  std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
  DequantizeRow(type, q->data, a.data(), n);
  DequantizeRow(type, shifted.data() + 1, b.data(), n);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
}

INSTANTIATE_TEST_SUITE_P(AllSupported, DequantReferenceTest,
                         ::testing::Values(GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ8_0,
                                           GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kF16,
                                           GgmlType::kBF16),
                         [](const auto& info) { return std::string(GgmlTypeName(info.param)); });

TEST(Fp16Test, Fp32ToFp16MatchesNumpyRounding) {
  auto f = GgufFile::Open(testing::SourcePath("tests/fixtures/gguf/dequant_reference.gguf"));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const GgufTensorInfo* in = (*f)->FindTensor("fp32_to_fp16.in");
  const GgufTensorInfo* out = (*f)->FindTensor("fp32_to_fp16.out");
  ASSERT_NE(in, nullptr);
  ASSERT_NE(out, nullptr);
  ASSERT_EQ(out->type, GgmlType::kF16);
  ASSERT_EQ(in->num_elements(), out->num_elements());
  int mismatches = 0;
  for (int64_t i = 0; i < in->num_elements(); ++i) {
    float x;
    uint16_t want;
    std::memcpy(&x, in->data + 4 * i, 4);
    std::memcpy(&want, out->data + 2 * i, 2);
    const uint16_t got = Fp32ToFp16(x);
    if (got != want && ++mismatches <= 5) {
      ADD_FAILURE() << "x=" << x << " (0x" << std::hex << Bits(x) << ") got 0x" << got << " want 0x"
                    << want;
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(Fp16Test, EveryHalfRoundTripsExactly) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = Fp16ToFp32(static_cast<uint16_t>(h));
    const bool is_nan = (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0;
    ASSERT_EQ(std::isnan(f), is_nan) << h;
    const uint16_t back = Fp32ToFp16(f);
    if (is_nan) {
      // Sign and payload kept, quiet bit set (as F16C's vcvtps2ph).
      ASSERT_EQ(back, h | 0x0200) << h;
    } else {
      ASSERT_EQ(back, h) << h;
    }
  }
}

TEST(Fp16Test, DecodesSpecialValuesExactly) {
  EXPECT_EQ(Fp16ToFp32(0x0001), std::ldexp(1.0f, -24));     // smallest subnormal
  EXPECT_EQ(Fp16ToFp32(0x03FF), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(Fp16ToFp32(0x0400), std::ldexp(1.0f, -14));     // smallest normal
  EXPECT_EQ(Fp16ToFp32(0x7BFF), 65504.0f);
  EXPECT_EQ(Fp16ToFp32(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(Fp16ToFp32(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(Bits(Fp16ToFp32(0x8000)), 0x80000000u);  // -0
  EXPECT_EQ(Bits(Fp16ToFp32(0x7E01)), 0x7FC02000u);  // NaN payload kept
  EXPECT_EQ(Fp32ToFp16(65520.0f), 0x7C00);           // rounds up to inf
  EXPECT_EQ(Fp32ToFp16(65519.996f), 0x7BFF);
  EXPECT_EQ(Fp32ToFp16(std::ldexp(1.0f, -25)), 0x0000);  // tie to even: zero
  EXPECT_EQ(Fp32ToFp16(std::ldexp(3.0f, -26)), 0x0001);  // 0.75 ulp: up
  EXPECT_EQ(Fp32ToFp16(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 ulp: tie, up to even
  EXPECT_EQ(Fp32ToFp16(std::ldexp(5.0f, -25)), 0x0002);  // 2.5 ulp: tie, down to even
  EXPECT_EQ(Fp32ToFp16(-std::ldexp(1.0f, -30)), 0x8000);
  EXPECT_EQ(Fp32ToFp16(FromBits(0x7F800001u)), 0x7E00);  // signalling NaN comes back quiet
  EXPECT_EQ(Fp32ToFp16(FromBits(0xFFC00000u)), 0xFE00);
}

// The inline conversions (fp16.h: the normal range inline, the rest out of line) against the
// out-of-line ones, which take every input: every half, and for both signs and every float
// exponent, every rounding remainder (the low 13 bits) under kept bits that are even, odd and all
// ones (where rounding up carries into the exponent, or to infinity).
TEST(Fp16Test, InlineConversionsEqualTheOutOfLineOnesOnEveryRoundingCase) {
  for (uint32_t h = 0; h < 65536; ++h) {
    ASSERT_EQ(Bits(Fp16ToFp32(static_cast<uint16_t>(h))),
              Bits(fp16_internal::Fp16ToFp32Any(static_cast<uint16_t>(h))))
        << "half 0x" << std::hex << h;
  }
  const uint32_t kept[] = {0x000, 0x001, 0x002, 0x155, 0x2AA, 0x3FE, 0x3FF};
  for (uint32_t sign = 0; sign < 2; ++sign) {
    for (uint32_t exp = 0; exp < 256; ++exp) {
      for (uint32_t hi : kept) {
        for (uint32_t lo = 0; lo < 0x2000u; ++lo) {
          const uint32_t bits = (sign << 31) | (exp << 23) | (hi << 13) | lo;
          const float x = FromBits(bits);
          ASSERT_EQ(Fp32ToFp16(x), fp16_internal::Fp32ToFp16Any(x)) << "x bits 0x" << std::hex << bits;
        }
      }
    }
  }
}

#if defined(__FLT16_MANT_DIG__)
// Where the compiler has _Float16 (GCC 12 on x86-64), its conversions are a second reference.
TEST(Fp16Test, AgreesWithCompilerFloat16OnRandomFloats) {
  std::mt19937 rng(42);
  for (int i = 0; i < 200000; ++i) {
    const float x = FromBits(static_cast<uint32_t>(rng()));
    if (std::isnan(x)) continue;
    const _Float16 h = static_cast<_Float16>(x);
    uint16_t want;
    std::memcpy(&want, &h, 2);
    ASSERT_EQ(Fp32ToFp16(x), want) << "x bits 0x" << std::hex << Bits(x);
    ASSERT_EQ(Bits(Fp16ToFp32(want)), Bits(static_cast<float>(h)));
  }
}
#endif

TEST(Bf16Test, WidensBySixteenBits) {
  EXPECT_EQ(Bf16ToFp32(0x3F80), 1.0f);
  EXPECT_EQ(Bf16ToFp32(0xC000), -2.0f);
  EXPECT_EQ(Bits(Bf16ToFp32(0x0001)), 0x00010000u);  // subnormal kept
  EXPECT_TRUE(std::isnan(Bf16ToFp32(0x7FC1)));
  EXPECT_EQ(Bf16ToFp32(0xFF80), -std::numeric_limits<float>::infinity());
}

TEST(GgmlTypesTest, SizesMatchGgml) {
  EXPECT_EQ(GgmlBlockSize(GgmlType::kQ4_K), 256);
  EXPECT_EQ(GgmlTypeSize(GgmlType::kQ4_K), 144u);
  EXPECT_EQ(GgmlTypeSize(GgmlType::kQ6_K), 210u);
  EXPECT_EQ(GgmlTypeSize(GgmlType::kQ8_0), 34u);
  EXPECT_EQ(GgmlTypeSize(GgmlType::kBF16), 2u);
  EXPECT_EQ(GgmlBlockSize(static_cast<GgmlType>(4)), 0);
  EXPECT_EQ(GgmlTypeName(static_cast<GgmlType>(99)), "unknown");
  EXPECT_FALSE(GgmlTypeKnown(static_cast<GgmlType>(31)));
  for (GgmlType t : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0,
                     GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    EXPECT_TRUE(GgmlTypeSupported(t)) << GgmlTypeName(t);
  }
  EXPECT_FALSE(GgmlTypeSupported(GgmlType::kQ5_K));
  EXPECT_FALSE(GgmlTypeSupported(GgmlType::kQ8_1));
}

}  // namespace
}  // namespace kinfer
