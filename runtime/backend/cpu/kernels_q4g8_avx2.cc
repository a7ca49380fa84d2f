// AVX2 matrix-vector kernels over kQ4Grouped8 weights (weight_layout.h), Q4_0 and Q4_1, against
// up to 4 tokens' interleaved kQ8 rows (compiled with -mavx2 -mfma -mf16c).
//
// Per group of 8 blocks and token: 4 loads of 32 weight bytes, each split into low and high
// nibbles (and, shift + and), 8 maddubs against the activation's 8 steps, summed in int16 (exact:
// each maddubs lane is at most 2 * 15 * 127 = 3810, eight of them 30480 < 32767), one madd to
// int32 that leaves the 8 block dots in 8 lanes, then one cvt and one fma by the 8 blocks'
// d_w * d_x (one fp16 -> fp32 conversion for all 8 scales), plus m_w * s_x for Q4_1 and the
// zero point 8 * sum(q_x) for Q4_0 subtracted in int32. About 5 instructions a block, against
// about 20 for the kGguf kernel's per-block scale conversions and broadcasts. The row's last,
// partial group (GGUF blocks) goes two blocks to a vector.
//
// Numerics: each block's integer dot is exact and scaled in fp32 by d_w * d_x as in ggml; lane b
// accumulates blocks b, b + 8, ... and the lanes are summed at the end, so the fp32 summation
// order differs from ggml's block after block (as the GEMM's does). Every multiply-add is an
// explicit intrinsic (the file is built with -ffp-contract=off too): a token's result must not
// depend on how many tokens share the call (batch invariance, matmul.h), and a compiler free to
// contract a*b + c differently in each instantiation broke exactly that.
#include <immintrin.h>

#include <cstring>

#include "runtime/backend/cpu/kernels.h"

namespace kinfer::cpu_internal {
namespace {

#include "runtime/backend/cpu/matvec_driver_impl.h"

enum class QKind { kQ4_0, kQ4_1 };

template <QKind K>
constexpr int kBlockBytes = K == QKind::kQ4_1 ? 20 : 18;

// A token's activation row as the grouped kernel reads it: the row itself, and the blocks of its
// last, partial group (n < 8, kept in GGUF order in the weights) back in ggml's plain order, as
// halves: lo holds elements 0..15 of block b at 16 b, hi elements 16..31 (zeros after block n).
struct GroupedView {
  Q8Row q;
  int n = 0;  // blocks in the row's last, partial group; 0 when every group is full
  alignas(32) int8_t lo[128];
  alignas(32) int8_t hi[128];
};

GroupedView MakeGroupedView(const void* act, int64_t cols) {
  GroupedView v;
  v.q = ViewQ8(act, cols);
  const int64_t nb = cols / 32;
  v.n = static_cast<int>(nb % 8);
  if (v.n == 0) return v;
  std::memset(v.lo, 0, sizeof(v.lo));
  std::memset(v.hi, 0, sizeof(v.hi));
  const int8_t* steps = v.q.qs + (nb / 8) * 256;
  for (int b = 0; b < v.n; ++b) {
    for (int k = 0; k < 4; ++k) {
      std::memcpy(v.lo + 16 * b + 4 * k, steps + k * 32 + 4 * b, 4);
      std::memcpy(v.hi + 16 * b + 4 * k, steps + (k + 4) * 32 + 4 * b, 4);
    }
  }
  return v;
}

// One full group of 8 blocks (at grp, kQ4Grouped8) for T tokens into acc[t]; g indexes the group
// in the activation rows.
template <QKind K, int T>
inline void Group(const uint8_t* grp, const GroupedView* x, int64_t g, __m256* acc) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  __m256i s16[T];
  for (int t = 0; t < T; ++t) s16[t] = _mm256_setzero_si256();
  for (int k = 0; k < 4; ++k) {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(grp + k * 32));
    const __m256i lo = _mm256_and_si256(w, low4);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), low4);
    for (int t = 0; t < T; ++t) {
      const int8_t* xs = x[t].q.qs + g * 256;
      s16[t] = _mm256_add_epi16(
          s16[t], _mm256_maddubs_epi16(lo, _mm256_load_si256(reinterpret_cast<const __m256i*>(xs + k * 32))));
      s16[t] = _mm256_add_epi16(
          s16[t], _mm256_maddubs_epi16(hi, _mm256_load_si256(reinterpret_cast<const __m256i*>(xs + (k + 4) * 32))));
    }
  }
  const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(grp + 128)));
  for (int t = 0; t < T; ++t) {
    const Q8Row& a = x[t].q;
    __m256i dot = _mm256_madd_epi16(s16[t], _mm256_set1_epi16(1));
    if constexpr (K == QKind::kQ4_0) {
      const __m256i isum = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.isum + g * 8));
      dot = _mm256_sub_epi32(dot, _mm256_slli_epi32(isum, 3));
    }
    const __m256 scale = _mm256_mul_ps(dw, _mm256_loadu_ps(a.d + g * 8));
    if constexpr (K == QKind::kQ4_1) {
      const __m256 mw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(grp + 144)));
      const __m256 part =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, _mm256_mul_ps(mw, _mm256_loadu_ps(a.s + g * 8)));
      acc[t] = _mm256_add_ps(acc[t], part);  // one add on the loop-carried chain
    } else {
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, acc[t]);
    }
  }
}

// The last group's n < 8 blocks (GGUF blocks at blk) for T tokens into acc[t], two blocks per
// vector: lanes 0..3 hold block 2p's partial dots, lanes 4..7 block 2p + 1's.
template <QKind K, int T>
inline void Tail(const uint8_t* blk, int n, const GroupedView* x, int64_t first_block, __m256* acc) {
  constexpr int bb = kBlockBytes<K>;
  constexpr int qs_off = K == QKind::kQ4_1 ? 4 : 2;
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  for (int b = 0; b < n; b += 2) {
    const bool pair = b + 1 < n;
    const uint8_t* b0 = blk + b * bb;
    const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b0 + qs_off));
    const __m128i q1 = pair ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(b0 + bb + qs_off)) : _mm_setzero_si128();
    const __m256i w = _mm256_inserti128_si256(_mm256_castsi128_si256(q0), q1, 1);
    const __m256i lo = _mm256_and_si256(w, low4);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), low4);
    uint16_t h[4] = {0, 0, 0, 0};
    std::memcpy(h, b0, 2 * (qs_off / 2));
    if (pair) std::memcpy(h + 2, b0 + bb, 2 * (qs_off / 2));
    const float d0 = _cvtsh_ss(h[0]), d1 = pair ? _cvtsh_ss(h[2]) : 0.0f;
    for (int t = 0; t < T; ++t) {
      const Q8Row& a = x[t].q;
      const int64_t i0 = first_block + b;
      const __m256i s16 = _mm256_add_epi16(
          _mm256_maddubs_epi16(lo, _mm256_load_si256(reinterpret_cast<const __m256i*>(x[t].lo + 16 * b))),
          _mm256_maddubs_epi16(hi, _mm256_load_si256(reinterpret_cast<const __m256i*>(x[t].hi + 16 * b))));
      __m256i dot = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
      if constexpr (K == QKind::kQ4_0) {  // 8 * sum(q_x) of each block, from one of its lanes
        dot = _mm256_sub_epi32(dot, _mm256_setr_epi32(8 * a.isum[i0], 0, 0, 0, pair ? 8 * a.isum[i0 + 1] : 0, 0, 0, 0));
      }
      const float c0 = d0 * a.d[i0], c1 = pair ? d1 * a.d[i0 + 1] : 0.0f;
      const __m256 scales = _mm256_setr_m128(_mm_set1_ps(c0), _mm_set1_ps(c1));
      __m256 mins = _mm256_setzero_ps();
      if constexpr (K == QKind::kQ4_1) {
        const float m0 = _cvtsh_ss(h[1]) * a.s[i0], m1 = pair ? _cvtsh_ss(h[3]) * a.s[i0 + 1] : 0.0f;
        mins = _mm256_setr_ps(m0, 0, 0, 0, m1, 0, 0, 0);
      }
      acc[t] = _mm256_add_ps(acc[t], _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scales, mins));
    }
  }
}

template <QKind K, int T>
void RowGrouped(const uint8_t* wrow, const GroupedView* x, int64_t nb, float* out) {
  constexpr int bb = kBlockBytes<K>;
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  const int64_t full = nb / 8;
  for (int64_t g = 0; g < full; ++g) {
    const uint8_t* grp = wrow + g * 8 * bb;
    // About four groups ahead, every line of the group that far on.
    _mm_prefetch(reinterpret_cast<const char*>(grp) + 4 * 8 * bb, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(grp) + 4 * 8 * bb + 64, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(grp) + 4 * 8 * bb + 128, _MM_HINT_T0);
    Group<K, T>(grp, x, g, acc);
  }
  const int n = static_cast<int>(nb - full * 8);
  if (n > 0) Tail<K, T>(wrow + full * 8 * bb, n, x, full * 8, acc);
  for (int t = 0; t < T; ++t) out[t] = Hsum(acc[t]);
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
