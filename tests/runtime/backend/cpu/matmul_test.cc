// MatMul against a reference built from the gguf library's scalar dequantizer:
//   ref[t][r] = sum_i DequantizeRow(W)[r][i] * x'[t][i]        (in double)
// where x' is the activation after the kernel's own quantize/dequantize round trip (the
// quantizer itself is checked against ggml's formulas in quantize_act_test). For Q4_1 ggml uses
// the block's fp16 s instead of d * sum(q); the reference adds that difference, m * (s - d*sum q).
// Tolerance: |y - ref| <= 1e-5 * sum_i |w_i| |x'_i| (+ the same for the Q4_1 m*s terms): the
// integer part of every block is exact, what remains is fp32 rounding of scales and sums.
#include "runtime/backend/cpu/matmul.h"

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/backend/cpu/cpu_features.h"
#include "runtime/backend/cpu/kernels.h"
#include "runtime/gguf/gguf_file.h"

namespace kinfer {
namespace {

using cpu_internal::ActKind;

constexpr double kRelTol = 1e-5;

int64_t BlockElems(GgmlType t) {
  switch (t) {
    case GgmlType::kQ4_K:
    case GgmlType::kQ6_K: return 256;
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ8_0: return 32;
    default: return 1;
  }
}

// Random but valid weights: random quant bytes, sane fp16 scales.
std::vector<uint8_t> RandomWeights(GgmlType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  WeightMatrix w{type, nullptr, rows, cols};
  const size_t row_bytes = w.RowBytes();
  std::vector<uint8_t> data(rows * row_bytes + 64);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.001f, 0.05f), val(-1.0f, 1.0f);
  for (auto& b : data) b = static_cast<uint8_t>(byte(rng));
  const int64_t n = rows * cols;
  auto* p = data.data();
  switch (type) {
    case GgmlType::kF32:
      for (int64_t i = 0; i < n; ++i) reinterpret_cast<float*>(p)[i] = val(rng);
      break;
    case GgmlType::kF16:
      for (int64_t i = 0; i < n; ++i) reinterpret_cast<uint16_t*>(p)[i] = Fp32ToFp16(val(rng));
      break;
    case GgmlType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        const float f = val(rng);
        uint32_t u;
        std::memcpy(&u, &f, 4);
        reinterpret_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(u >> 16);
      }
      break;
    case GgmlType::kQ4_0:
      for (int64_t b = 0; b < n / 32; ++b) reinterpret_cast<BlockQ4_0*>(p)[b].d = Fp32ToFp16(scale(rng));
      break;
    case GgmlType::kQ4_1:
      for (int64_t b = 0; b < n / 32; ++b) {
        reinterpret_cast<BlockQ4_1*>(p)[b].d = Fp32ToFp16(scale(rng));
        reinterpret_cast<BlockQ4_1*>(p)[b].m = Fp32ToFp16(-8.0f * scale(rng));
      }
      break;
    case GgmlType::kQ8_0:
      for (int64_t b = 0; b < n / 32; ++b) reinterpret_cast<BlockQ8_0*>(p)[b].d = Fp32ToFp16(scale(rng) / 16);
      break;
    case GgmlType::kQ4_K:
      for (int64_t b = 0; b < n / 256; ++b) {
        reinterpret_cast<BlockQ4_K*>(p)[b].d = Fp32ToFp16(scale(rng) / 16);
        reinterpret_cast<BlockQ4_K*>(p)[b].dmin = Fp32ToFp16(scale(rng) / 16);
      }
      break;
    case GgmlType::kQ6_K:
      for (int64_t b = 0; b < n / 256; ++b) reinterpret_cast<BlockQ6_K*>(p)[b].d = Fp32ToFp16(scale(rng) / 64);
      break;
    default: ADD_FAILURE() << "type";
  }
  return data;
}

// x' : the activation row after the kernel's quantize -> dequantize round trip.
std::vector<double> RoundTrip(ActKind kind, const float* x, int64_t cols, std::vector<double>* s_fix_d,
                              std::vector<double>* s_fix) {
  std::vector<double> out(cols);
  if (kind == ActKind::kF32) {
    for (int64_t i = 0; i < cols; ++i) out[i] = x[i];
    return out;
  }
  std::vector<uint8_t> row(cpu_internal::ActRowBytes(kind, cols));
  cpu_internal::KernelsFor(0).quantize[static_cast<int>(kind)](x, row.data(), cols, false);
  if (kind == ActKind::kF16 || kind == ActKind::kBF16) {
    const auto* h = reinterpret_cast<const uint16_t*>(row.data());
    for (int64_t i = 0; i < cols; ++i) out[i] = kind == ActKind::kF16 ? Fp16ToFp32(h[i]) : Bf16ToFp32(h[i]);
  } else if (kind == ActKind::kQ8) {
    const auto v = cpu_internal::ViewQ8(row.data(), cols);
    s_fix->assign(cols / 32, 0.0);
    for (int64_t b = 0; b < cols / 32; ++b) {
      for (int i = 0; i < 32; ++i) out[b * 32 + i] = static_cast<double>(v.d[b]) * v.qs[b * 32 + i];
      (*s_fix)[b] = static_cast<double>(v.s[b]) - static_cast<double>(v.d[b]) * v.isum[b];
    }
    *s_fix_d = std::vector<double>(v.s, v.s + cols / 32);
  } else {
    const auto v = cpu_internal::ViewQ8K(row.data(), cols);
    for (int64_t i = 0; i < cols; ++i) out[i] = static_cast<double>(v.d[i / 256]) * v.qs[i];
  }
  return out;
}

struct Case {
  GgmlType type;
  CpuIsa isa;
  WeightLayout layout = WeightLayout::kGguf;
};

class MatMulTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (static_cast<int>(GetParam().isa) > static_cast<int>(BestSupportedIsa())) {
      GTEST_SKIP() << CpuIsaName(GetParam().isa) << " not supported by this CPU";
    }
    ASSERT_EQ(SetCpuIsaOverride(GetParam().isa), GetParam().isa);
  }
  void TearDown() override { SetCpuIsaOverride(BestSupportedIsa()); }

  // Checks MatMul (and, with fused = true, MatMulInPool inside Run) for one shape.
  void Check(int64_t rows, int64_t cols, int64_t ntok, int threads, bool fused) {
    const GgmlType type = GetParam().type;
    std::mt19937 rng(static_cast<uint32_t>(rows * 7919 + cols * 31 + ntok));
    const auto wdata = RandomWeights(type, rows, cols, rng);
    // The kernels read `kernel_bytes`: the weights regrouped when the case asks for it; the
    // reference below reads the GGUF bytes.
    std::vector<uint8_t> kernel_bytes = wdata;
    if (GetParam().layout == WeightLayout::kQ4Grouped8) RegroupQ4(type, kernel_bytes.data(), rows, cols);
    const WeightMatrix w{type, kernel_bytes.data(), rows, cols, GetParam().layout};
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> x(ntok * cols);
    for (auto& v : x) v = dist(rng);
    std::vector<float> y(ntok * rows, NAN);
    ThreadPool pool(threads);
    if (!fused) {
      MatMul(w, x.data(), ntok, y.data(), pool);
    } else {
      // Two back-to-back products in one job, no barrier between them (as Q/K/V projections).
      std::vector<float> y2(ntok * rows, NAN);
      pool.Run([&](int ith, int nth) {
        MatMulInPool(w, x.data(), ntok, y2.data(), ith, nth, pool);
        MatMulInPool(w, x.data(), ntok, y.data(), ith, nth, pool);
        pool.Barrier();
      });
      for (int64_t i = 0; i < ntok * rows; ++i) ASSERT_EQ(y[i], y2[i]);
    }

    const ActKind kind = cpu_internal::ActKindFor(type);
    std::vector<float> wrow(cols);
    for (int64_t t = 0; t < ntok; ++t) {
      std::vector<double> s_vals, s_fix;
      const auto xq = RoundTrip(kind, x.data() + t * cols, cols, &s_vals, &s_fix);
      for (int64_t r = 0; r < rows; ++r) {
        const auto* row = wdata.data() + r * w.RowBytes();
        DequantizeRow(type, row, wrow.data(), cols);
        double ref = 0.0, mag = 0.0;
        for (int64_t i = 0; i < cols; ++i) {
          ref += static_cast<double>(wrow[i]) * xq[i];
          mag += std::fabs(static_cast<double>(wrow[i]) * xq[i]);
        }
        if (type == GgmlType::kQ4_1) {
          const auto* blk = reinterpret_cast<const BlockQ4_1*>(row);
          for (int64_t b = 0; b < cols / 32; ++b) {
            ref += Fp16ToFp32(blk[b].m) * s_fix[b];
            mag += std::fabs(Fp16ToFp32(blk[b].m) * s_vals[b]);
          }
        }
        const double got = y[t * rows + r];
        ASSERT_NEAR(got, ref, kRelTol * mag + 1e-30)
            << GgmlTypeName(type) << " isa " << CpuIsaName(GetParam().isa) << " layout "
            << static_cast<int>(GetParam().layout) << " rows " << rows
            << " cols " << cols << " ntok " << ntok << " threads " << threads << " r " << r
            << " t " << t;
      }
    }
  }

  std::vector<int64_t> ColsToTest() const {
    const int64_t be = BlockElems(GetParam().type);
    if (be == 256) return {256, 768};
    if (be == 32) return {32, 224, 288, 576, 1536};  // 1, 7, 9, 18, 48 blocks
    return {37, 576};
  }
};

TEST_P(MatMulTest, MatchesDequantizedReference) {
  for (int64_t cols : ColsToTest()) {
    for (int64_t ntok : {1, 3, 4, 8, 33}) {
      for (int64_t rows : {1, 7, 37}) Check(rows, cols, ntok, 2, false);
    }
  }
}

TEST_P(MatMulTest, ManyRowsSplitAcrossThreads) {
  const int64_t cols = ColsToTest().back();
  for (int threads : {1, 2, 3}) {
    Check(131, cols, 1, threads, false);
    Check(131, cols, 9, threads, false);
  }
}

TEST_P(MatMulTest, ManyTokensCrossGemmChunks) {
  // More tokens than one GEMM token chunk (96), with a tile remainder; rows not a multiple of 4.
  const int64_t cols = ColsToTest().back();
  Check(45, cols, 200, 2, false);
  Check(45, 576 % BlockElems(GetParam().type) == 0 ? 576 : 768, 101, 1, false);
}

TEST_P(MatMulTest, InPoolBackToBackCallsAgree) {
  const int64_t cols = ColsToTest().back();
  for (int64_t ntok : {1, 8, 33}) Check(67, cols, ntok, 2, true);
  Check(67, cols, 5, 3, true);
}

// Batch invariance (matmul.h): with the GEMM off, a token's row of y is bit for bit the same
// whether it is computed alone or beside others (the engine's default relies on it).
TEST_P(MatMulTest, WithoutTheGemmATokensResultDoesNotDependOnItsNeighbours) {
  const GgmlType type = GetParam().type;
  const bool gemm_was = MatMulGemmEnabled();
  SetMatMulGemmEnabled(false);
  for (int64_t cols : ColsToTest()) {
    const int64_t rows = 37, ntok = 7;
    std::mt19937 rng(static_cast<uint32_t>(cols));
    std::vector<uint8_t> wdata = RandomWeights(type, rows, cols, rng);
    if (GetParam().layout == WeightLayout::kQ4Grouped8) RegroupQ4(type, wdata.data(), rows, cols);
    const WeightMatrix w{type, wdata.data(), rows, cols, GetParam().layout};
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> x(ntok * cols);
    for (auto& v : x) v = dist(rng);
    ThreadPool pool(2);
    std::vector<float> together(ntok * rows), alone(rows);
    MatMul(w, x.data(), ntok, together.data(), pool);
    for (int64_t t = 0; t < ntok; ++t) {
      MatMul(w, x.data() + t * cols, 1, alone.data(), pool);
      for (int64_t r = 0; r < rows; ++r) {
        ASSERT_EQ(together[t * rows + r], alone[r]) << "cols " << cols << " token " << t << " row " << r;
      }
    }
    if (GetParam().layout == WeightLayout::kQ4Grouped8 && GetParam().isa != CpuIsa::kScalar) {
      // The grouped kernel follows the GEMM's fp32 order: the same products, bit for bit.
      std::vector<float> x9(9 * cols);
      for (auto& v : x9) v = dist(rng);
      std::vector<float> by_gemm(9 * rows), by_matvec(9 * rows);
      SetMatMulGemmEnabled(true);
      MatMul(w, x9.data(), 9, by_gemm.data(), pool);
      SetMatMulGemmEnabled(false);
      MatMul(w, x9.data(), 9, by_matvec.data(), pool);
      ASSERT_EQ(by_gemm, by_matvec) << "cols " << cols;
    }
  }
  SetMatMulGemmEnabled(gemm_was);
}

std::vector<Case> AllCases() {
  std::vector<Case> v;
  for (GgmlType t : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0, GgmlType::kQ4_0,
                     GgmlType::kQ4_1, GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
      v.push_back({t, isa});
      if (Q4Groupable(t)) v.push_back({t, isa, WeightLayout::kQ4Grouped8});
    }
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(TypesAndIsas, MatMulTest, ::testing::ValuesIn(AllCases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(GgmlTypeName(info.param.type)) + "_" +
                                  CpuIsaName(info.param.isa) +
                                  (info.param.layout == WeightLayout::kQ4Grouped8 ? "_Grouped8" : "");
                         });

TEST(MatMulSupportsTest, ListsTheRuntimeTypes) {
  EXPECT_TRUE(MatMulSupports(GgmlType::kQ4_1));
  EXPECT_TRUE(MatMulSupports(GgmlType::kQ6_K));
  EXPECT_FALSE(MatMulSupports(GgmlType::kQ5_0));
  EXPECT_EQ((WeightMatrix{GgmlType::kQ4_1, nullptr, 3, 576}.RowBytes()), 18u * 20u);
}

}  // namespace
}  // namespace kinfer
