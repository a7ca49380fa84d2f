// AVX2 + FMA + F16C versions of the vector ops (compiled with -mavx2 -mfma -mf16c).
#include <immintrin.h>

#include "runtime/backend/cpu/kernels.h"
#include "runtime/backend/cpu/vec_ops_table.h"

namespace kinfer::cpu_internal {
namespace {

#include "runtime/backend/cpu/matvec_driver_impl.h"  // Hsum

inline __m256 LoadHalf8(const ggml_fp16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

float DotF32Avx2(const float* a, const float* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  float sum = Hsum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

float DotF16F32Avx2(const ggml_fp16_t* a, const float* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(LoadHalf8(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(LoadHalf8(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(LoadHalf8(a + i), _mm256_loadu_ps(b + i), acc0);
  float sum = Hsum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) sum += _cvtsh_ss(a[i]) * b[i];
  return sum;
}

void AxpyF16Avx2(float a, const ggml_fp16_t* x, float* y, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, LoadHalf8(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] += a * _cvtsh_ss(x[i]);
}

void F32ToF16Avx2(const float* x, ggml_fp16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) y[i] = _cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT);
}

void F16ToF32Avx2(const ggml_fp16_t* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, LoadHalf8(x + i));
  for (; i < n; ++i) y[i] = _cvtsh_ss(x[i]);
}

void DotF16F32RowsAvx2(const ggml_fp16_t* a, int64_t stride, int64_t rows, const float* b,
                       int64_t n, float* out) {
  for (int64_t j = 0; j < rows; ++j) out[j] = DotF16F32Avx2(a + j * stride, b, n);
}

// y += sum_j coef[j] * x_j, with up to 64 elements of y held in registers across all the rows
// (the per-row Axpy would store y and load it back for the next row: a store-forwarding round
// trip on every row's dependency chain). Each element still sums its rows in order j = 0, 1, ...
// with one FMA each, so the result is bit for bit the per-row loop's.
template <int K>
inline void AxpyF16RowsChunk(const float* coef, const ggml_fp16_t* x, int64_t stride, int64_t rows,
                             float* y) {
  __m256 acc[K];
  for (int k = 0; k < K; ++k) acc[k] = _mm256_loadu_ps(y + 8 * k);
  for (int64_t j = 0; j < rows; ++j) {
    const __m256 a = _mm256_set1_ps(coef[j]);
    const ggml_fp16_t* xj = x + j * stride;
    for (int k = 0; k < K; ++k) acc[k] = _mm256_fmadd_ps(a, LoadHalf8(xj + 8 * k), acc[k]);
  }
  for (int k = 0; k < K; ++k) _mm256_storeu_ps(y + 8 * k, acc[k]);
}

void AxpyF16RowsAvx2(const float* coef, const ggml_fp16_t* x, int64_t stride, int64_t rows,
                     float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) AxpyF16RowsChunk<8>(coef, x + i, stride, rows, y + i);
  for (; i + 8 <= n; i += 8) AxpyF16RowsChunk<1>(coef, x + i, stride, rows, y + i);
  if (i < n) {
    for (int64_t j = 0; j < rows; ++j) {
      for (int64_t e = i; e < n; ++e) y[e] += coef[j] * _cvtsh_ss(x[j * stride + e]);
    }
  }
}

}  // namespace

void RegisterAvx2VecOps(VecOpsTable* t) {
  t->dot_f32 = DotF32Avx2;
  t->dot_f16_f32 = DotF16F32Avx2;
  t->axpy_f16 = AxpyF16Avx2;
  t->f32_to_f16 = F32ToF16Avx2;
  t->f16_to_f32 = F16ToF32Avx2;
  t->dot_f16_f32_rows = DotF16F32RowsAvx2;
  t->axpy_f16_rows = AxpyF16RowsAvx2;
}

}  // namespace kinfer::cpu_internal
