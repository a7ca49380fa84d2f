// AVX-512 VNNI matrix-vector kernels for Q4_0 / Q4_1 x up to 4 tokens (decode), compiled
// with -mavx512f -mavx512bw -mavx512vl -mavx512vnni.
//
// Decode reads each weight once and is bound by memory bandwidth; what matters is how few
// instructions a block costs, so the other thread's loads and this one's overlap. Per pair of
// blocks: one 512-bit vpdpbusd per token, and the per-block scales are applied per lane: the 8
// blocks' d (and m) come from one gather + vcvtph2ps, are multiplied by the tokens' d_x as a
// vector, and a permute spreads them over the lanes of each pair. Like ggml's own SIMD kernels,
// every lane's partial integer dot is exact and is scaled by d_w * d_x before the fp32 sum.
//   Q4_1 / Q4_0: a pair's nibbles become [lo_j lo_j+1 | hi_j hi_j+1] (16 bytes each); the tokens'
//     bytes are permuted to the same order. Q4_0's -8 * sum(x) per lane is one more vpdpbusd
//     (ones x x) per pair and token.
// Blocks beyond the last full group of 8 go one at a time through 256-bit code. (A Q8_0 variant
// of this scheme measured slower than the AVX2 kernel on the 49152x576 output matrix, so Q8_0
// keeps that one.)
#include <immintrin.h>

#include "runtime/backend/cpu/kernels.h"

namespace kinfer::cpu_internal {
namespace {

#include "runtime/backend/cpu/matvec_driver_impl.h"

enum class QKind { kQ4_0, kQ4_1 };

template <QKind K>
constexpr int BlockBytes() {
  return K == QKind::kQ4_1 ? sizeof(BlockQ4_1) : sizeof(BlockQ4_0);
}


inline float HalfAt(const uint8_t* p) {
  uint16_t h;
  __builtin_memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

template <QKind K, int T>
void Row(const uint8_t* wrow, const Q8Row* a, int64_t nb, float* out) {
  constexpr int bb = BlockBytes<K>();
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m512i ones = _mm512_set1_epi8(1);
  const __m512i xperm = _mm512_setr_epi64(0, 1, 4, 5, 2, 3, 6, 7);
  const __m256i vindex = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(bb));
  // Lane -> block-of-the-group maps for the 4 pairs of a group.
  __m512i sidx[4];
  for (int pr = 0; pr < 4; ++pr) {
    const int j = 2 * pr;
    sidx[pr] = _mm512_setr_epi32(j, j, j, j, j + 1, j + 1, j + 1, j + 1, j, j, j, j, j + 1, j + 1, j + 1, j + 1);
  }
  __m512 acc[T];
  __m256 macc[T];
  for (int t = 0; t < T; ++t) {
    acc[t] = _mm512_setzero_ps();
    macc[t] = _mm256_setzero_ps();
  }
  int64_t b = 0;
  for (; b + 8 <= nb; b += 8) {
    const uint8_t* g = wrow + b * bb;
    _mm_prefetch(reinterpret_cast<const char*>(g) + 8 * bb * 3, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(g) + 8 * bb * 3 + 64, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(g) + 8 * bb * 3 + 128, _MM_HINT_T0);
    const __m256i dm = _mm256_i32gather_epi32(reinterpret_cast<const int*>(g), vindex, 1);
    const __m256 dw = _mm256_cvtph_ps(_mm256_cvtepi32_epi16(dm));
    __m512 sc[T];
    for (int t = 0; t < T; ++t) sc[t] = _mm512_zextps256_ps512(_mm256_mul_ps(dw, _mm256_loadu_ps(a[t].d + b)));
    if constexpr (K == QKind::kQ4_1) {
      const __m256 mw = _mm256_cvtph_ps(_mm256_cvtepi32_epi16(_mm256_srli_epi32(dm, 16)));
      for (int t = 0; t < T; ++t) macc[t] = _mm256_fmadd_ps(mw, _mm256_loadu_ps(a[t].s + b), macc[t]);
    }
    for (int pr = 0; pr < 4; ++pr) {
      const uint8_t* blk = g + 2 * pr * bb;
      const int64_t xoff = (b + 2 * pr) * 32;
      constexpr int qoff = K == QKind::kQ4_1 ? 4 : 2;
      const __m256i q = _mm256_inserti128_si256(
          _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + qoff))),
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + bb + qoff)), 1);
      const __m512i w =
          _mm512_and_si512(_mm512_inserti64x4(_mm512_zextsi256_si512(q), _mm256_srli_epi16(q, 4), 1), low4);
      for (int t = 0; t < T; ++t) {
        const __m512i x = _mm512_permutexvar_epi64(xperm, _mm512_loadu_si512(a[t].qs + xoff));
        __m512i init = _mm512_setzero_si512();
        if constexpr (K == QKind::kQ4_0) {
          init = _mm512_sub_epi32(init, _mm512_slli_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, x), 3));
        }
        const __m512i dot = _mm512_dpbusd_epi32(init, w, x);
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_permutexvar_ps(sidx[pr], sc[t]), acc[t]);
      }
    }
  }
  // Remaining blocks, one at a time.
  __m256 tacc[T];
  float tm[T];
  for (int t = 0; t < T; ++t) {
    tacc[t] = _mm256_setzero_ps();
    tm[t] = 0.0f;
  }
  for (; b < nb; ++b) {
    const uint8_t* blk = wrow + b * bb;
    const float dw = HalfAt(blk);
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + (K == QKind::kQ4_1 ? 4 : 2)));
    const __m256i w = _mm256_and_si256(_mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1),
                                       _mm256_set1_epi8(0x0F));
    for (int t = 0; t < T; ++t) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[t].qs + b * 32));
      __m256i dot = _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, x);
      if constexpr (K == QKind::kQ4_0) {
        dot = _mm256_sub_epi32(dot, _mm256_zextsi128_si256(_mm_cvtsi32_si128(8 * a[t].isum[b])));
      }
      tacc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(dw * a[t].d[b]), tacc[t]);
      if constexpr (K == QKind::kQ4_1) tm[t] += HalfAt(blk + 2) * a[t].s[b];
    }
  }
  for (int t = 0; t < T; ++t) {
    out[t] = _mm512_reduce_add_ps(acc[t]) + Hsum(_mm256_add_ps(macc[t], tacc[t])) + tm[t];
  }
}

template <QKind K>
struct Q4Kernel {
  using View = Q8Row;
  static View MakeView(const void* act, int64_t cols) { return ViewQ8(act, cols); }
  template <int NT>
  static void Row(const uint8_t* wrow, const View* views, int64_t cols, float* out) {
    kinfer::cpu_internal::Row<K, NT>(wrow, views, cols / 32, out);
  }
};

}  // namespace

void RegisterAvx512MatVecKernels(KernelTable* t) {
  t->matvec[static_cast<int>(GgmlType::kQ4_0)] = MatVecDriver<Q4Kernel<QKind::kQ4_0>>;
  t->matvec[static_cast<int>(GgmlType::kQ4_1)] = MatVecDriver<Q4Kernel<QKind::kQ4_1>>;
}

}  // namespace kinfer::cpu_internal
