// AVX-512 VNNI kernels (compiled with -mavx512f -mavx512bw -mavx512vl -mavx512vnni): the
// register-blocked GEMM for Q4_0, Q4_1 and Q8_0 weights x many tokens (prefill).
//
// Layout trick: one 32-bit lane of a 256-bit accumulator holds one block's integer dot. The
// activations are quantized in the "interleaved" kQ8 order (kernels.h): for each group of 8
// blocks, step k (0..7) is a 32-byte vector whose lane j holds bytes 4k..4k+3 of block j. The
// weights of a panel of 4 rows are repacked into the same order once per token chunk
// (gemm_interleaved_impl.h, shared with the AVX2 GEMM), as unsigned bytes: Q4 nibbles as they
// are, Q8_0 as w + 128. Eight vpdpbusd then leave 8 complete block dots in 8 lanes; the zero-point (8 for Q4_0, 128 for Q8_0) times
// sum(q_x) is subtracted in integers, so each block's dot is exact, and one cvt + fma scales all
// 8 by d_w * d_x (+ m_w * s_x for Q4_1), as ggml does per block. Per 256 multiply-adds that is
// 8 vpdpbusd + 3-4 other ops, against 4-5 ops per 32 in a block-at-a-time kernel.
//
// Micro-kernel: 4 weight rows x 3 tokens = 12 integer + 12 float accumulators in ymm registers.
#include <immintrin.h>

#include <cstring>

#include "runtime/backend/cpu/kernels.h"
#include "runtime/backend/cpu/thread_pool.h"

namespace kinfer::cpu_internal {
namespace {

constexpr int kTokTile = 3;

inline __m256i DotAcc(__m256i acc, __m256i w, __m256i x) { return _mm256_dpbusd_epi32(acc, w, x); }

#include "runtime/backend/cpu/gemm_interleaved_impl.h"

}  // namespace

void RegisterAvx512Kernels(KernelTable* t) {
  RegisterAvx512MatVecKernels(t);
  t->gemm[static_cast<int>(GgmlType::kQ4_0)] = Gemm<QKind::kQ4_0>;
  t->gemm[static_cast<int>(GgmlType::kQ4_1)] = Gemm<QKind::kQ4_1>;
  t->gemm[static_cast<int>(GgmlType::kQ8_0)] = Gemm<QKind::kQ8_0>;
  t->gemm_q4g8[static_cast<int>(GgmlType::kQ4_0)] = Gemm<QKind::kQ4_0, true>;
  t->gemm_q4g8[static_cast<int>(GgmlType::kQ4_1)] = Gemm<QKind::kQ4_1, true>;
  // The VNNI matrix-vector kernels read the GGUF layout at full speed: no regrouping here (grouped
  // weights, loaded under a lower ISA, still use the AVX2 grouped kernels of the table below).
  t->prefer_q4_grouped8 = false;
  t->gemm_rows = kPanelRows;
  t->gemm_min_tokens = 4;
}

}  // namespace kinfer::cpu_internal
