// AVX2 + FMA + F16C matrix kernels (compiled with -mavx2 -mfma -mf16c).
//
// One weight row at a time against up to 4 tokens: every weight block is unpacked once and
// multiplied with each token's block, so ntok = 2..4 costs little more weight traffic than 1.
// Integer products use maddubs (unsigned x signed bytes, pairs summed to int16 without
// saturation for these ranges) then madd with ones to int32; each block's integer dot is exact and
// then scaled in fp32 by d_w * d_x as in ggml. Q4_0 keeps unsigned nibbles and subtracts
// 8 * sum(q_x) from the block's integer dot (exact); Q8_0 uses |w| x sign(x, w).
#include <immintrin.h>

#include "runtime/backend/cpu/kernels.h"

namespace kinfer::cpu_internal {
namespace {

#include "runtime/backend/cpu/matvec_driver_impl.h"

// 16 bytes of nibbles -> 32 unsigned bytes: low nibbles (elements 0..15), then high (16..31).
inline __m256i UnpackNibbles(const uint8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

inline __m256i DotU8S8(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

enum class QKind { kQ4_0, kQ4_1, kQ8_0 };

template <QKind K, int T>
void RowQ(const uint8_t* wrow, const Q8Row* a, int64_t nb, float* out) {
  __m256 acc[T];
  float summ[T];
  for (int t = 0; t < T; ++t) {
    acc[t] = _mm256_setzero_ps();
    summ[t] = 0.0f;
  }
  for (int64_t b = 0; b < nb; ++b) {
    __m256i wq;
    float dw, mw = 0.0f;
    if constexpr (K == QKind::kQ4_1) {
      const auto* blk = reinterpret_cast<const BlockQ4_1*>(wrow) + b;
      _mm_prefetch(reinterpret_cast<const char*>(blk) + 640, _MM_HINT_T0);
      wq = UnpackNibbles(blk->qs);
      dw = _cvtsh_ss(blk->d);
      mw = _cvtsh_ss(blk->m);
    } else if constexpr (K == QKind::kQ4_0) {
      const auto* blk = reinterpret_cast<const BlockQ4_0*>(wrow) + b;
      _mm_prefetch(reinterpret_cast<const char*>(blk) + 576, _MM_HINT_T0);
      wq = UnpackNibbles(blk->qs);
      dw = _cvtsh_ss(blk->d);
    } else {
      const auto* blk = reinterpret_cast<const BlockQ8_0*>(wrow) + b;
      _mm_prefetch(reinterpret_cast<const char*>(blk) + 1088, _MM_HINT_T0);
      wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qs));
      dw = _cvtsh_ss(blk->d);
    }
    for (int t = 0; t < T; ++t) {
      const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[t].qs + b * 32));
      __m256i p;
      if constexpr (K == QKind::kQ8_0) {
        p = DotU8S8(_mm256_sign_epi8(wq, wq), _mm256_sign_epi8(xq, wq));
      } else {
        p = DotU8S8(wq, xq);
      }
      if constexpr (K == QKind::kQ4_0) {
        p = _mm256_sub_epi32(p, _mm256_zextsi128_si256(_mm_cvtsi32_si128(8 * a[t].isum[b])));
      }
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw * a[t].d[b]), acc[t]);
      if constexpr (K == QKind::kQ4_1) summ[t] += mw * a[t].s[b];
    }
  }
  for (int t = 0; t < T; ++t) out[t] = Hsum(acc[t]) + summ[t];
}

template <QKind K>
struct QKernel {
  using View = Q8Row;
  static View MakeView(const void* act, int64_t cols) { return ViewQ8(act, cols); }
  template <int NT>
  static void Row(const uint8_t* wrow, const View* views, int64_t cols, float* out) {
    RowQ<K, NT>(wrow, views, cols / 32, out);
  }
};

// Plain float types: W converted to fp32 8 at a time, x likewise (F16 x F16, BF16 x BF16).
enum class FKind { kF32, kF16, kBF16 };

template <FKind K>
inline __m256 Load8(const void* p, int64_t i) {
  if constexpr (K == FKind::kF32) {
    return _mm256_loadu_ps(static_cast<const float*>(p) + i);
  } else if constexpr (K == FKind::kF16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i)));
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

template <FKind K>
inline float Load1(const void* p, int64_t i) {
  if constexpr (K == FKind::kF32) return static_cast<const float*>(p)[i];
  else if constexpr (K == FKind::kF16) return _cvtsh_ss(static_cast<const uint16_t*>(p)[i]);
  else return Bf16ToFloat(static_cast<const uint16_t*>(p)[i]);
}

template <FKind K, int T>
void RowF(const void* wrow, const void* const* x, int64_t n, float* out) {
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 w = Load8<K>(wrow, i);
    for (int t = 0; t < T; ++t) acc[t] = _mm256_fmadd_ps(w, Load8<K>(x[t], i), acc[t]);
  }
  for (int t = 0; t < T; ++t) {
    float s = Hsum(acc[t]);
    for (int64_t j = i; j < n; ++j) s += Load1<K>(wrow, j) * Load1<K>(x[t], j);
    out[t] = s;
  }
}

// Plain types: the driver's views are the tokens' rows themselves.
template <FKind K>
struct FKernel {
  using View = const void*;
  static View MakeView(const void* act, int64_t) { return act; }
  template <int NT>
  static void Row(const uint8_t* wrow, const View* views, int64_t cols, float* out) {
    RowF<K, NT>(wrow, views, cols, out);
  }
};

}  // namespace

void RegisterAvx2Kernels(KernelTable* t) {
  RegisterAvx2Quantizers(t);
  RegisterAvx2KQuantKernels(t);
  RegisterAvx2GemmKernels(t);
  RegisterAvx2Q4Grouped8Kernels(t);
  auto set = [t](GgmlType type, MatKernelFn fn) { t->matvec[static_cast<int>(type)] = fn; };
  set(GgmlType::kQ4_0, MatVecDriver<QKernel<QKind::kQ4_0>>);
  set(GgmlType::kQ4_1, MatVecDriver<QKernel<QKind::kQ4_1>>);
  set(GgmlType::kQ8_0, MatVecDriver<QKernel<QKind::kQ8_0>>);
  set(GgmlType::kF32, MatVecDriver<FKernel<FKind::kF32>>);
  set(GgmlType::kF16, MatVecDriver<FKernel<FKind::kF16>>);
  set(GgmlType::kBF16, MatVecDriver<FKernel<FKind::kBF16>>);
}

}  // namespace kinfer::cpu_internal
