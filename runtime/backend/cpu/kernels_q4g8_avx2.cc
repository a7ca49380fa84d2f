// AVX2 matrix-vector kernels over kQ4Grouped8 weights (weight_layout.h), Q4_0 and Q4_1, against
// up to 4 tokens' interleaved kQ8 rows (compiled with -mavx2 -mfma -mf16c).
//
// Per group of 8 blocks and token: 4 loads of 32 weight bytes, each split into low and high
// nibbles (and, shift + and), 8 maddubs against the activation's 8 steps, summed in int16 (exact:
// each maddubs lane is at most 2 * 15 * 127 = 3810, eight of them 30480 < 32767), one madd to
// int32 that leaves the 8 block dots in 8 lanes, then one cvt and one fma by the 8 blocks'
// d_w * d_x (one fp16 -> fp32 conversion for all 8 scales), plus m_w * s_x for Q4_1 and the
// zero point 8 * sum(q_x) for Q4_0 subtracted in int32. About 5 instructions a block, against
// about 20 for the kGguf kernel's per-block scale conversions and broadcasts. A row's last 1-2
// blocks (GGUF blocks) go two to a vector; 3-7 as a zero-padded group.
//
// Numerics: each block's integer dot is exact and scaled in fp32 by d_w * d_x as in ggml; lane b
// accumulates blocks b, b + 8, ... and the lanes are summed at the end, all in the order of the
// GEMM over the same weights (gemm_interleaved_impl.h), so that for Q4 weights the GEMM and this
// kernel give bit-identical products: the engine's batch-invariant path (GEMM off) computes what
// Forward with the GEMM does (matmul_test checks it). The order differs from ggml's, block after
// block. Every multiply-add is an
// explicit intrinsic (the file is built with -ffp-contract=off too): a token's result must not
// depend on how many tokens share the call (batch invariance, matmul.h), and a compiler free to
// contract a*b + c differently in each instantiation broke exactly that.
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "runtime/backend/cpu/kernels.h"

namespace kinfer::cpu_internal {
namespace {

#include "runtime/backend/cpu/matvec_driver_impl.h"

enum class QKind { kQ4_0, kQ4_1 };

template <QKind K>
constexpr int kBlockBytes = K == QKind::kQ4_1 ? 20 : 18;

// A token's activation row as the grouped kernel reads it: the row itself and, when the row ends
// in 1 or 2 blocks past its last full group (kept as GGUF blocks in the weights), those blocks
// back in ggml's plain order, as halves: lo holds elements 0..15 of block b at 16 b, hi elements
// 16..31 (zeros after block n).
struct GroupedView {
  Q8Row q;
  alignas(32) int8_t lo[32];
  alignas(32) int8_t hi[32];
};

GroupedView MakeGroupedView(const void* act, int64_t cols) {
  GroupedView v;
  v.q = ViewQ8(act, cols);
  const int64_t nb = cols / 32;
  const int n = static_cast<int>(nb % 8);  // blocks past the last full group
  if (n == 0 || n > 2) return v;           // 3..7 blocks are read as a padded group instead
  std::memset(v.lo, 0, sizeof(v.lo));
  std::memset(v.hi, 0, sizeof(v.hi));
  const int8_t* steps = v.q.qs + (nb / 8) * 256;
  for (int b = 0; b < n; ++b) {
    for (int k = 0; k < 4; ++k) {
      std::memcpy(v.lo + 16 * b + 4 * k, steps + k * 32 + 4 * b, 4);
      std::memcpy(v.hi + 16 * b + 4 * k, steps + (k + 4) * 32 + 4 * b, 4);
    }
  }
  return v;
}

// One group of 8 blocks for T tokens into acc[t]: q points at its 4 chunks of 32 bytes, dh at its
// 8 fp16 d, mh at its 8 fp16 m (Q4_1); g indexes the group in the activation rows. The fp32
// steps are the GEMM's (gemm_interleaved_impl.h MicroKernel), in its order.
template <QKind K, int T>
inline void Group(const uint8_t* q, const uint8_t* dh, const uint8_t* mh, const GroupedView* x,
                  int64_t g, __m256* acc) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  __m256i s16[T];
  for (int t = 0; t < T; ++t) s16[t] = _mm256_setzero_si256();
  for (int k = 0; k < 4; ++k) {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + k * 32));
    const __m256i lo = _mm256_and_si256(w, low4);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), low4);
    for (int t = 0; t < T; ++t) {
      const int8_t* xs = x[t].q.qs + g * 256;
      s16[t] = _mm256_add_epi16(
          s16[t], _mm256_maddubs_epi16(
                      lo, _mm256_load_si256(reinterpret_cast<const __m256i*>(xs + k * 32))));
      s16[t] = _mm256_add_epi16(
          s16[t], _mm256_maddubs_epi16(
                      hi, _mm256_load_si256(reinterpret_cast<const __m256i*>(xs + (k + 4) * 32))));
    }
  }
  const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(dh)));
  for (int t = 0; t < T; ++t) {
    const Q8Row& a = x[t].q;
    __m256i dot = _mm256_madd_epi16(s16[t], _mm256_set1_epi16(1));
    if constexpr (K == QKind::kQ4_0) {
      const __m256i isum = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.isum + g * 8));
      dot = _mm256_sub_epi32(dot, _mm256_slli_epi32(isum, 3));
    }
    const __m256 scale = _mm256_mul_ps(dw, _mm256_loadu_ps(a.d + g * 8));
    acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, acc[t]);
    if constexpr (K == QKind::kQ4_1) {
      const __m256 mw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(mh)));
      acc[t] = _mm256_fmadd_ps(mw, _mm256_loadu_ps(a.s + g * 8), acc[t]);
    }
  }
}

// The lanes' sum in the GEMM's order (its Reduce4):
// ((v0 + v1) + (v2 + v3)) + ((v4 + v5) + (v6 + v7)).
inline float SumLikeGemm(__m256 v) {
  const __m256 h = _mm256_hadd_ps(v, v);
  const __m256 h2 = _mm256_hadd_ps(h, h);
  return _mm_cvtss_f32(_mm_add_ps(_mm256_castps256_ps128(h2), _mm256_extractf128_ps(h2, 1)));
}

// A row's last 1 or 2 blocks (GGUF blocks at blk) for T tokens, as the GEMM's cross-row tail
// computes them: per block float(dot) * (d_w * d_x) (+ m_w * s_x by fma), the two added.
template <QKind K, int T>
inline void Tail(const uint8_t* blk, int n, const GroupedView* x, int64_t first_block,
                 float* tail) {
  constexpr int bb = kBlockBytes<K>;
  constexpr int qs_off = K == QKind::kQ4_1 ? 4 : 2;
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const bool pair = n == 2;
  const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + qs_off));
  const __m128i q1 = pair ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + bb + qs_off))
                          : _mm_setzero_si128();
  const __m256i w = _mm256_inserti128_si256(_mm256_castsi128_si256(q0), q1, 1);
  const __m256i lo = _mm256_and_si256(w, low4);
  const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), low4);
  uint16_t h[4] = {0, 0, 0, 0};
  std::memcpy(h, blk, qs_off);
  if (pair) std::memcpy(h + 2, blk + bb, qs_off);
  for (int t = 0; t < T; ++t) {
    const Q8Row& a = x[t].q;
    const __m256i s16 = _mm256_add_epi16(
        _mm256_maddubs_epi16(lo, _mm256_load_si256(reinterpret_cast<const __m256i*>(x[t].lo))),
        _mm256_maddubs_epi16(hi, _mm256_load_si256(reinterpret_cast<const __m256i*>(x[t].hi))));
    alignas(32) int32_t part[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(part),
                       _mm256_madd_epi16(s16, _mm256_set1_epi16(1)));
    float v[2] = {0.0f, 0.0f};
    for (int b = 0; b < n; ++b) {
      int32_t dot = part[4 * b] + part[4 * b + 1] + part[4 * b + 2] + part[4 * b + 3];
      const int64_t i = first_block + b;
      if constexpr (K == QKind::kQ4_0) dot -= 8 * a.isum[i];
      v[b] = static_cast<float>(dot) * (_cvtsh_ss(h[2 * b]) * a.d[i]);
      if constexpr (K == QKind::kQ4_1) v[b] = std::fma(_cvtsh_ss(h[2 * b + 1]), a.s[i], v[b]);
    }
    tail[t] = pair ? v[0] + v[1] : v[0];
  }
}

template <QKind K, int T>
void RowGrouped(const uint8_t* wrow, const GroupedView* x, int64_t nb, float* out) {
  constexpr int bb = kBlockBytes<K>;
  constexpr int qs_off = K == QKind::kQ4_1 ? 4 : 2;
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  const int64_t full = nb / 8;
  for (int64_t g = 0; g < full; ++g) {
    const uint8_t* grp = wrow + g * 8 * bb;
    // About four groups ahead, every line of the group that far on.
    _mm_prefetch(reinterpret_cast<const char*>(grp) + 4 * 8 * bb, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(grp) + 4 * 8 * bb + 64, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(grp) + 4 * 8 * bb + 128, _MM_HINT_T0);
    Group<K, T>(grp, grp + 128, grp + 144, x, g, acc);
  }
  const int n = static_cast<int>(nb - full * 8);
  const uint8_t* last = wrow + full * 8 * bb;
  if (n >= 3) {
    // 3..7 blocks: the GEMM pads them to a group with zero scales; so does this.
    alignas(32) uint8_t q[4][32] = {};
    alignas(16) uint16_t dh[8] = {}, mh[8] = {};
    for (int b = 0; b < n; ++b) {
      for (int k = 0; k < 4; ++k) std::memcpy(q[k] + 4 * b, last + b * bb + qs_off + 4 * k, 4);
      std::memcpy(dh + b, last + b * bb, 2);
      if constexpr (K == QKind::kQ4_1) std::memcpy(mh + b, last + b * bb + 2, 2);
    }
    Group<K, T>(q[0], reinterpret_cast<const uint8_t*>(dh), reinterpret_cast<const uint8_t*>(mh), x,
                full, acc);
  }
  float tail[T] = {};
  if (n == 1 || n == 2) Tail<K, T>(last, n, x, full * 8, tail);
  for (int t = 0; t < T; ++t) out[t] = SumLikeGemm(acc[t]) + tail[t];
}

template <QKind K>
struct GroupedKernel {
  using View = GroupedView;
  static View MakeView(const void* act, int64_t cols) { return MakeGroupedView(act, cols); }
  template <int NT>
  static void Row(const uint8_t* wrow, const View* views, int64_t cols, float* out) {
    RowGrouped<K, NT>(wrow, views, cols / 32, out);
  }
};

}  // namespace

void RegisterAvx2Q4Grouped8Kernels(KernelTable* t) {
  t->matvec_q4g8[static_cast<int>(GgmlType::kQ4_0)] = MatVecDriver<GroupedKernel<QKind::kQ4_0>>;
  t->matvec_q4g8[static_cast<int>(GgmlType::kQ4_1)] = MatVecDriver<GroupedKernel<QKind::kQ4_1>>;
  t->prefer_q4_grouped8 = true;
}

}  // namespace kinfer::cpu_internal
