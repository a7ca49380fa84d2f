// AVX2 activation quantizers: the same values as the scalar ones in quantize_act.cc (same single
// rounding of x * (127/amax), round-half-even), vectorized. Compiled with -mavx2 -mfma -mf16c.
#include <immintrin.h>

#include <cstring>

#include "runtime/backend/cpu/kernels.h"

namespace kinfer::cpu_internal {
namespace {

inline float HmaxAbs(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, a), _mm256_andnot_ps(sign, b)),
                           _mm256_max_ps(_mm256_andnot_ps(sign, c), _mm256_andnot_ps(sign, d)));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

inline __m256i RoundToInt(__m256 v, __m256 id) {
  return _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

inline int HsumI32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

void QuantizeQ8Avx2(const float* x, void* dst, int64_t cols, bool interleaved) {
  const int64_t nb = cols / 32;
  const int64_t nbp = PaddedBlocks(cols);
  auto* base = static_cast<uint8_t*>(dst);
  auto* qs = reinterpret_cast<int8_t*>(base);
  auto* d = reinterpret_cast<float*>(base + nbp * 32);
  auto* s = reinterpret_cast<float*>(base + nbp * 36);
  auto* isum = reinterpret_cast<int32_t*>(base + nbp * 40);
  const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t b = 0; b < nb; ++b) {
    const float* xb = x + b * 32;
    const __m256 v0 = _mm256_loadu_ps(xb), v1 = _mm256_loadu_ps(xb + 8);
    const __m256 v2 = _mm256_loadu_ps(xb + 16), v3 = _mm256_loadu_ps(xb + 24);
    const float amax = HmaxAbs(v0, v1, v2, v3);
    const float dv = amax / 127.0f;
    const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
    const __m256i i0 = RoundToInt(v0, id), i1 = RoundToInt(v1, id);
    const __m256i i2 = RoundToInt(v2, id), i3 = RoundToInt(v3, id);
    const int sum = HsumI32(_mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3)));
    const __m256i packed = _mm256_permutevar8x32_epi32(
        _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3)), perm);
    d[b] = _cvtsh_ss(_cvtss_sh(dv, _MM_FROUND_TO_NEAREST_INT));
    s[b] = _cvtsh_ss(_cvtss_sh(dv * static_cast<float>(sum), _MM_FROUND_TO_NEAREST_INT));
    isum[b] = sum;
    if (!interleaved) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs + b * 32), packed);
    } else {
      alignas(32) int32_t words[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(words), packed);
      int32_t* g = reinterpret_cast<int32_t*>(qs + (b / 8) * 256) + (b % 8);
      for (int k = 0; k < 8; ++k) g[k * 8] = words[k];
    }
  }
  for (int64_t b = nb; b < nbp; ++b) {
    d[b] = s[b] = 0.0f;
    isum[b] = 0;
    if (!interleaved) {
      std::memset(qs + b * 32, 0, 32);
    } else {
      int32_t* g = reinterpret_cast<int32_t*>(qs + (b / 8) * 256) + (b % 8);
      for (int k = 0; k < 8; ++k) g[k * 8] = 0;
    }
  }
}

void QuantizeF16Avx2(const float* x, void* dst, int64_t cols, bool) {
  auto* y = static_cast<uint16_t*>(dst);
  int64_t i = 0;
  for (; i + 8 <= cols; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < cols; ++i) y[i] = _cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT);
}

}  // namespace

void RegisterAvx2Quantizers(KernelTable* t) {
  t->quantize[static_cast<int>(ActKind::kQ8)] = QuantizeQ8Avx2;
  t->quantize[static_cast<int>(ActKind::kF16)] = QuantizeF16Avx2;
}

}  // namespace kinfer::cpu_internal
