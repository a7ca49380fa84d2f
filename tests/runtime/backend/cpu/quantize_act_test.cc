// The activation quantizers against ggml's formulas, written out here independently:
//   Q8_0/Q8_1 (ggml's x86 SIMD quantizer): amax = max|x| per 32, d = amax/127,
//     q = round-half-even(x * (127/amax)), stored d = fp16(d), s = fp16(d * sum q).
//   Q8_K (ggml's reference): max = first value of largest |x| per 256, iscale = -127/max,
//     q = min(127, round-half-even(iscale * x)), d = 1/iscale, bsums over 16.
// Each ISA path's quantizer must give identical bytes.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/backend/cpu/cpu_features.h"
#include "runtime/backend/cpu/kernels.h"
#include "runtime/gguf/gguf_file.h"

namespace kinfer::cpu_internal {
namespace {

std::vector<float> RandomRow(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = dist(rng);
  // Special blocks: all zero, one spike, exact .5 ties (x * 127/amax = k + 0.5).
  if (n >= 96) {
    std::fill(x.begin(), x.begin() + 32, 0.0f);
    std::fill(x.begin() + 32, x.begin() + 64, 0.0f);
    x[40] = -3.0f;
    for (int i = 64; i < 96; ++i) x[i] = (i - 80) + 0.5f;  // amax = 15.5 -> not exact ties
    x[64] = 127.0f;                                          // amax = 127: x * 1 = k + .5 ties
  }
  return x;
}

std::vector<CpuIsa> Isas() {
  std::vector<CpuIsa> v;
  for (int i = 0; i <= static_cast<int>(BestSupportedIsa()); ++i) v.push_back(static_cast<CpuIsa>(i));
  return v;
}

class QuantizeActTest : public ::testing::TestWithParam<CpuIsa> {
 protected:
  void SetUp() override { ASSERT_EQ(SetCpuIsaOverride(GetParam()), GetParam()); }
  void TearDown() override { SetCpuIsaOverride(BestSupportedIsa()); }
};

TEST_P(QuantizeActTest, Q8MatchesGgmlFormula) {
  for (int64_t cols : {32, 288, 576, 1536}) {
    const auto x = RandomRow(cols, static_cast<uint32_t>(cols));
    std::vector<uint8_t> plain(ActRowBytes(ActKind::kQ8, cols), 0xAB);
    std::vector<uint8_t> inter(ActRowBytes(ActKind::kQ8, cols), 0xCD);
    const QuantizeFn q = Kernels().quantize[static_cast<int>(ActKind::kQ8)];
    q(x.data(), plain.data(), cols, false);
    q(x.data(), inter.data(), cols, true);
    const Q8Row p = ViewQ8(plain.data(), cols), it = ViewQ8(inter.data(), cols);
    for (int64_t b = 0; b < PaddedBlocks(cols); ++b) {
      float amax = 0.0f;
      int sum = 0;
      int8_t want[32] = {};
      float d = 0.0f;
      if (b < cols / 32) {
        for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b * 32 + i]));
        d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        for (int i = 0; i < 32; ++i) {
          want[i] = static_cast<int8_t>(std::lrint(x[b * 32 + i] * id));
          sum += want[i];
        }
      }
      for (int i = 0; i < 32; ++i) {
        ASSERT_EQ(p.qs[b * 32 + i], want[i]) << "cols " << cols << " block " << b << " i " << i;
        ASSERT_EQ(it.qs[(b / 8) * 256 + (i / 4) * 32 + (b % 8) * 4 + i % 4], want[i]);
      }
      const float want_d = b < cols / 32 ? Fp16ToFp32(Fp32ToFp16(d)) : 0.0f;
      const float want_s = b < cols / 32 ? Fp16ToFp32(Fp32ToFp16(d * static_cast<float>(sum))) : 0.0f;
      EXPECT_EQ(p.d[b], want_d);
      EXPECT_EQ(p.s[b], want_s);
      EXPECT_EQ(p.isum[b], sum);
      EXPECT_EQ(it.d[b], want_d);
      EXPECT_EQ(it.s[b], want_s);
      EXPECT_EQ(it.isum[b], sum);
    }
  }
}

TEST_P(QuantizeActTest, Q8RoundsHalfToEven) {
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;  // amax = 127 -> id = 1, q = round(x)
  x[1] = 2.5f;
  x[2] = -2.5f;
  x[3] = 3.5f;
  std::vector<uint8_t> row(ActRowBytes(ActKind::kQ8, 32));
  Kernels().quantize[static_cast<int>(ActKind::kQ8)](x.data(), row.data(), 32, false);
  const Q8Row p = ViewQ8(row.data(), 32);
  EXPECT_EQ(p.qs[1], 2);
  EXPECT_EQ(p.qs[2], -2);
  EXPECT_EQ(p.qs[3], 4);
}

TEST_P(QuantizeActTest, Q8KMatchesGgmlFormula) {
  for (int64_t cols : {256, 768}) {
    auto x = RandomRow(cols, 7 + static_cast<uint32_t>(cols));
    std::fill(x.begin() + 256, x.begin() + std::min<int64_t>(cols, 512), 0.0f);  // zero block
    std::vector<uint8_t> row(ActRowBytes(ActKind::kQ8K, cols));
    Kernels().quantize[static_cast<int>(ActKind::kQ8K)](x.data(), row.data(), cols, false);
    const Q8KRow r = ViewQ8K(row.data(), cols);
    for (int64_t b = 0; b < cols / 256; ++b) {
      float amax = 0.0f, max = 0.0f;
      for (int i = 0; i < 256; ++i) {
        if (std::fabs(x[b * 256 + i]) > amax) {
          amax = std::fabs(x[b * 256 + i]);
          max = x[b * 256 + i];
        }
      }
      const float iscale = amax != 0.0f ? -127.0f / max : 0.0f;
      EXPECT_EQ(r.d[b], amax != 0.0f ? 1.0f / iscale : 0.0f);
      for (int g = 0; g < 16; ++g) {
        int sum = 0;
        for (int i = 0; i < 16; ++i) {
          const int k = b * 256 + g * 16 + i;
          const int want = std::min(127, static_cast<int>(std::lrint(iscale * x[k])));
          ASSERT_EQ(r.qs[k], want) << "element " << k;
          sum += want;
        }
        EXPECT_EQ(r.bsums[b * 16 + g], sum);
      }
    }
  }
}

TEST_P(QuantizeActTest, HalfAndBf16RoundToNearestEven) {
  const int64_t n = 1000;
  auto x = RandomRow(n, 99);
  x[0] = 1e-7f;     // half subnormal
  x[1] = 70000.0f;  // overflows to inf
  x[2] = -0.0f;
  x[3] = 1.0f + 1.0f / 2048.0f;  // exact tie in half: rounds to even (1.0)
  std::vector<uint16_t> h(n), b(n);
  Kernels().quantize[static_cast<int>(ActKind::kF16)](x.data(), h.data(), n, false);
  Kernels().quantize[static_cast<int>(ActKind::kBF16)](x.data(), b.data(), n, false);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(h[i], Fp32ToFp16(x[i])) << i;
    uint32_t u;
    std::memcpy(&u, &x[i], 4);
    ASSERT_EQ(b[i], static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16)) << i;
  }
  EXPECT_EQ(h[3], 0x3c00);
}

INSTANTIATE_TEST_SUITE_P(Isa, QuantizeActTest, ::testing::ValuesIn(Isas()),
                         [](const auto& info) { return std::string(CpuIsaName(info.param)); });

}  // namespace
}  // namespace kinfer::cpu_internal
