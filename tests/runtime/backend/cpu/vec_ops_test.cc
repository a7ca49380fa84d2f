// vec_ops on every ISA path against double-precision / scalar references.
#include "runtime/backend/cpu/vec_ops.h"

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/backend/cpu/cpu_features.h"
#include "runtime/gguf/gguf_file.h"

namespace kinfer {
namespace {

std::vector<CpuIsa> Isas() {
  std::vector<CpuIsa> v;
  for (int i = 0; i <= static_cast<int>(BestSupportedIsa()); ++i) v.push_back(static_cast<CpuIsa>(i));
  return v;
}

class VecOpsTest : public ::testing::TestWithParam<CpuIsa> {
 protected:
  void SetUp() override { ASSERT_EQ(SetCpuIsaOverride(GetParam()), GetParam()); }
  void TearDown() override { SetCpuIsaOverride(BestSupportedIsa()); }
  std::mt19937 rng_{1234};
  std::vector<float> Random(int64_t n) {
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng_);
    return v;
  }
  // The multi-row dot and axpy against one-row calls, for head size n (<= 192).
  void CheckRowVariants(int64_t n);
};

constexpr double kRelTol = 1e-6;  // relative to sum |a_i b_i|

TEST_P(VecOpsTest, DotF32MatchesDouble) {
  for (int64_t n : {0, 1, 7, 8, 15, 16, 17, 64, 100, 1000}) {
    const auto a = Random(n), b = Random(n);
    double ref = 0, mag = 0;
    for (int64_t i = 0; i < n; ++i) {
      ref += double(a[i]) * b[i];
      mag += std::fabs(double(a[i]) * b[i]);
    }
    EXPECT_NEAR(DotF32(a.data(), b.data(), n), ref, kRelTol * mag + 1e-30) << n;
  }
}

TEST_P(VecOpsTest, DotF16F32MatchesDouble) {
  for (int64_t n : {0, 1, 9, 16, 33, 64, 100, 1000}) {
    const auto af = Random(n), b = Random(n);
    std::vector<ggml_fp16_t> a(n);
    for (int64_t i = 0; i < n; ++i) a[i] = Fp32ToFp16(af[i]);
    double ref = 0, mag = 0;
    for (int64_t i = 0; i < n; ++i) {
      ref += double(Fp16ToFp32(a[i])) * b[i];
      mag += std::fabs(double(Fp16ToFp32(a[i])) * b[i]);
    }
    EXPECT_NEAR(DotF16F32(a.data(), b.data(), n), ref, kRelTol * mag + 1e-30) << n;
  }
}

TEST_P(VecOpsTest, AxpyF16MatchesScalar) {
  for (int64_t n : {1, 8, 13, 64, 77}) {
    const auto xf = Random(n);
    auto y = Random(n);
    const auto y0 = y;
    std::vector<ggml_fp16_t> x(n);
    for (int64_t i = 0; i < n; ++i) x[i] = Fp32ToFp16(xf[i]);
    AxpyF16(0.37f, x.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const double ref = double(y0[i]) + 0.37 * Fp16ToFp32(x[i]);
      EXPECT_NEAR(y[i], ref, 1e-6 * (std::fabs(y0[i]) + std::fabs(0.37 * Fp16ToFp32(x[i])))) << i;
    }
  }
}

TEST_P(VecOpsTest, RowVariantsAreBitIdenticalToOneRowCalls) {
  // Head sizes: whole 64-element register blocks, a block and a part, a block of 8, a scalar tail.
  for (const int64_t n : {64, 72, 130, 5}) {
    SCOPED_TRACE(n);
    CheckRowVariants(n);
  }
}

void VecOpsTest::CheckRowVariants(int64_t n) {
  const int64_t stride = 256, rows = 37;  // base + n stays inside each row for n <= 192
  const auto mf = Random(stride * rows);
  std::vector<ggml_fp16_t> m(mf.size());
  for (size_t i = 0; i < mf.size(); ++i) m[i] = Fp32ToFp16(mf[i]);
  const auto q = Random(n);
  const ggml_fp16_t* base = m.data() + 64;  // a head's slice inside each row
  std::vector<float> dots(rows);
  DotF16F32Rows(base, stride, rows, q.data(), n, dots.data());
  for (int64_t j = 0; j < rows; ++j) {
    const float one = DotF16F32(base + j * stride, q.data(), n);
    EXPECT_EQ(std::memcmp(&dots[j], &one, sizeof(float)), 0) << j;
  }
  const auto coef = Random(rows);
  auto y_rows = Random(n);
  auto y_one = y_rows;
  AxpyF16Rows(coef.data(), base, stride, rows, y_rows.data(), n);
  for (int64_t j = 0; j < rows; ++j) AxpyF16(coef[j], base + j * stride, y_one.data(), n);
  EXPECT_EQ(std::memcmp(y_rows.data(), y_one.data(), n * sizeof(float)), 0);
}

TEST_P(VecOpsTest, F32ToF16IsBitExact) {
  auto x = Random(2000);
  const float specials[] = {0.0f, -0.0f, 1e-8f, 6e-8f, 3e-5f, 65504.0f, 65520.0f, 1e6f, -1e6f,
                            INFINITY, -INFINITY, 1.0f + 1.0f / 2048.0f, 1.0f + 3.0f / 2048.0f};
  for (size_t i = 0; i < std::size(specials); ++i) x[i] = specials[i];
  for (int64_t i = 20; i < 200; ++i) x[i] = x[i] * 1e-5f;  // subnormal range
  std::vector<ggml_fp16_t> h(x.size());
  F32ToF16(x.data(), h.data(), static_cast<int64_t>(x.size()) - 3);  // odd tail
  for (size_t i = 0; i + 3 < x.size(); ++i) ASSERT_EQ(h[i], Fp32ToFp16(x[i])) << i << " " << x[i];
}

TEST_P(VecOpsTest, F16ToF32IsExactForEveryHalf) {
  std::vector<ggml_fp16_t> h(65536);
  for (int i = 0; i < 65536; ++i) h[i] = static_cast<ggml_fp16_t>(i);
  std::vector<float> f(65536);
  F16ToF32(h.data(), f.data(), 65536);
  for (int i = 0; i < 65536; ++i) {
    const float want = Fp16ToFp32(h[i]);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f[i])) << i;
    } else {
      ASSERT_EQ(std::memcmp(&f[i], &want, 4), 0) << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, VecOpsTest, ::testing::ValuesIn(Isas()),
                         [](const auto& info) { return std::string(CpuIsaName(info.param)); });

}  // namespace
}  // namespace kinfer
