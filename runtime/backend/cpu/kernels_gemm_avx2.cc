// AVX2 GEMM for Q4_0 / Q4_1 x many tokens (compiled with -mavx2 -mfma -mf16c), for CPUs without
// VNNI: the interleaved block-per-lane kernel of gemm_interleaved_impl.h with vpdpbusd replaced
// by maddubs (u8 x s8 pairs to int16) + madd with ones (to int32). Exact for Q4 weights (pairs
// stay below 2 * 15 * 127); Q8_0 as w + 128 would saturate int16, so Q8_0 keeps the
// matrix-vector kernel on this path. 4 rows x 2 tokens per micro-kernel (some spills with 16
// ymm registers, still faster than 1 token); worth it from about 8 tokens.
#include <immintrin.h>

#include <cstring>

#include "runtime/backend/cpu/kernels.h"
#include "runtime/backend/cpu/thread_pool.h"

namespace kinfer::cpu_internal {
namespace {

constexpr int kTokTile = 2;

inline __m256i DotAcc(__m256i acc, __m256i w, __m256i x) {
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1)));
}

#include "runtime/backend/cpu/gemm_interleaved_impl.h"

}  // namespace

void RegisterAvx2GemmKernels(KernelTable* t) {
  t->gemm[static_cast<int>(GgmlType::kQ4_0)] = Gemm<QKind::kQ4_0>;
  t->gemm[static_cast<int>(GgmlType::kQ4_1)] = Gemm<QKind::kQ4_1>;
  t->gemm_q4g8[static_cast<int>(GgmlType::kQ4_0)] = Gemm<QKind::kQ4_0, true>;
  t->gemm_q4g8[static_cast<int>(GgmlType::kQ4_1)] = Gemm<QKind::kQ4_1, true>;
  t->gemm_rows = kPanelRows;
  t->gemm_min_tokens = 8;
}

}  // namespace kinfer::cpu_internal
