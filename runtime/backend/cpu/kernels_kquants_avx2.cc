// AVX2 matrix-vector kernels for the k-quants (Q4_K, Q6_K x Q8_K), compiled with
// -mavx2 -mfma -mf16c. One weight row against up to 4 tokens; per super-block the integer sum
// (sub-block scales applied in integers via madd) is exact, then scaled once in fp32, as ggml.
#include <immintrin.h>

#include "runtime/backend/cpu/kernels.h"

namespace kinfer::cpu_internal {
namespace {

#include "runtime/backend/cpu/matvec_driver_impl.h"

inline int HsumI32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

inline __m256i Load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

template <int T>
void RowQ4_K(const BlockQ4_K* w, const Q8KRow* a, int64_t nsb, float* out) {
  __m256 acc[T];
  float accm[T];
  for (int t = 0; t < T; ++t) {
    acc[t] = _mm256_setzero_ps();
    accm[t] = 0.0f;
  }
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  for (int64_t b = 0; b < nsb; ++b) {
    const BlockQ4_K& blk = w[b];
    _mm_prefetch(reinterpret_cast<const char*>(&blk) + 576, _MM_HINT_T0);
    int sc[8], mn[8];
    const uint8_t* q = blk.scales;
    for (int j = 0; j < 4; ++j) {
      sc[j] = q[j] & 63;
      mn[j] = q[j + 4] & 63;
      sc[j + 4] = (q[j + 8] & 0xF) | ((q[j] >> 6) << 4);
      mn[j + 4] = (q[j + 8] >> 4) | ((q[j + 4] >> 6) << 4);
    }
    const float dw = _cvtsh_ss(blk.d), dminw = _cvtsh_ss(blk.dmin);
    __m256i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i raw = Load256(blk.qs + 32 * c);
      const __m256i lo = _mm256_and_si256(raw, low4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
      const __m256i s_lo = _mm256_set1_epi16(static_cast<int16_t>(sc[2 * c]));
      const __m256i s_hi = _mm256_set1_epi16(static_cast<int16_t>(sc[2 * c + 1]));
      for (int t = 0; t < T; ++t) {
        const int8_t* x = a[t].qs + b * 256 + 64 * c;
        const __m256i p_lo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, Load256(x)), s_lo);
        const __m256i p_hi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, Load256(x + 32)), s_hi);
        isum[t] = _mm256_add_epi32(isum[t], _mm256_add_epi32(p_lo, p_hi));
      }
    }
    for (int t = 0; t < T; ++t) {
      const int16_t* bs = a[t].bsums + b * 16;
      int sum_m = 0;
      for (int j = 0; j < 8; ++j) sum_m += mn[j] * (bs[2 * j] + bs[2 * j + 1]);
      const float dx = a[t].d[b];
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_set1_ps(dx * dw), acc[t]);
      accm[t] += (-dx * dminw) * static_cast<float>(sum_m);
    }
  }
  for (int t = 0; t < T; ++t) out[t] = Hsum(acc[t]) + accm[t];
}

template <int T>
void RowQ6_K(const BlockQ6_K* w, const Q8KRow* a, int64_t nsb, float* out) {
  float acc[T];
  for (int t = 0; t < T; ++t) acc[t] = 0.0f;
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i m30 = _mm256_set1_epi8(0x30);
  for (int64_t b = 0; b < nsb; ++b) {
    const BlockQ6_K& blk = w[b];
    _mm_prefetch(reinterpret_cast<const char*>(&blk) + 840, _MM_HINT_T0);
    const __m256i scales16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales)));
    __m256i isum[T];
    for (int t = 0; t < T; ++t) {
      // 32 * sum_g sc[g] * bsums[g]: the -32 offset of every q, applied in integers.
      const __m256i bias = _mm256_madd_epi16(Load256(a[t].bsums + b * 16), scales16);
      isum[t] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(bias, 5));
    }
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = Load256(blk.ql + 64 * h), ql1 = Load256(blk.ql + 64 * h + 32);
      const __m256i qh = Load256(blk.qh + 32 * h);
      __m256i q[4];
      q[0] = _mm256_or_si256(_mm256_and_si256(ql0, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
      q[1] = _mm256_or_si256(_mm256_and_si256(ql1, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
      q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4), _mm256_and_si256(qh, m30));
      q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                             _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
      for (int k = 0; k < 4; ++k) {
        const int g = 8 * h + 2 * k;  // sub-blocks of 16 covered by q[k]
        const __m256i s = _mm256_set_m128i(_mm_set1_epi16(blk.scales[g + 1]), _mm_set1_epi16(blk.scales[g]));
        for (int t = 0; t < T; ++t) {
          const __m256i x = Load256(a[t].qs + b * 256 + 128 * h + 32 * k);
          isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(_mm256_maddubs_epi16(q[k], x), s));
        }
      }
    }
    const float dw = _cvtsh_ss(blk.d);
    for (int t = 0; t < T; ++t) acc[t] += (dw * a[t].d[b]) * static_cast<float>(HsumI32(isum[t]));
  }
  for (int t = 0; t < T; ++t) out[t] = acc[t];
}

template <typename Block, void (*RowFn1)(const Block*, const Q8KRow*, int64_t, float*),
          void (*RowFn2)(const Block*, const Q8KRow*, int64_t, float*),
          void (*RowFn3)(const Block*, const Q8KRow*, int64_t, float*),
          void (*RowFn4)(const Block*, const Q8KRow*, int64_t, float*)>
struct KKernel {
  using View = Q8KRow;
  static View MakeView(const void* act, int64_t cols) { return ViewQ8K(act, cols); }
  template <int NT>
  static void Row(const uint8_t* wrow, const View* views, int64_t cols, float* out) {
    const auto* w = reinterpret_cast<const Block*>(wrow);
    constexpr auto fn = NT == 1 ? RowFn1 : NT == 2 ? RowFn2 : NT == 3 ? RowFn3 : RowFn4;
    fn(w, views, cols / 256, out);
  }
};

}  // namespace

void RegisterAvx2KQuantKernels(KernelTable* t) {
  t->matvec[static_cast<int>(GgmlType::kQ4_K)] =
      MatVecDriver<KKernel<BlockQ4_K, RowQ4_K<1>, RowQ4_K<2>, RowQ4_K<3>, RowQ4_K<4>>>;
  t->matvec[static_cast<int>(GgmlType::kQ6_K)] =
      MatVecDriver<KKernel<BlockQ6_K, RowQ6_K<1>, RowQ6_K<2>, RowQ6_K<3>, RowQ6_K<4>>>;
}

}  // namespace kinfer::cpu_internal
