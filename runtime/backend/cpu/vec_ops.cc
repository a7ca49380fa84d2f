// Scalar vector ops and the dispatch of vec_ops.h (AVX-512 machines use the AVX2 versions: these
// loops are memory-bound and short).
#include "runtime/backend/cpu/vec_ops.h"

#include "runtime/backend/cpu/cpu_features.h"
#include "runtime/backend/cpu/kernels.h"
#include "runtime/backend/cpu/vec_ops_table.h"

namespace kinfer {
namespace cpu_internal {
namespace {

float DotF32Scalar(const float* a, const float* b, int64_t n) {
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) acc[k] += a[i + k] * b[i + k];
  }
  float sum = 0.0f;
  for (; i < n; ++i) sum += a[i] * b[i];
  for (float v : acc) sum += v;
  return sum;
}

float DotF16F32Scalar(const ggml_fp16_t* a, const float* b, int64_t n) {
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) acc[k] += HalfToFloat(a[i + k]) * b[i + k];
  }
  float sum = 0.0f;
  for (; i < n; ++i) sum += HalfToFloat(a[i]) * b[i];
  for (float v : acc) sum += v;
  return sum;
}

void AxpyF16Scalar(float a, const ggml_fp16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * HalfToFloat(x[i]);
}

void F32ToF16Scalar(const float* x, ggml_fp16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = FloatToHalf(x[i]);
}

void F16ToF32Scalar(const ggml_fp16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = HalfToFloat(x[i]);
}

void DotF16F32RowsScalar(const ggml_fp16_t* a, int64_t stride, int64_t rows, const float* b,
                         int64_t n, float* out) {
  for (int64_t j = 0; j < rows; ++j) out[j] = DotF16F32Scalar(a + j * stride, b, n);
}

void AxpyF16RowsScalar(const float* coef, const ggml_fp16_t* x, int64_t stride, int64_t rows,
                       float* y, int64_t n) {
  for (int64_t j = 0; j < rows; ++j) AxpyF16Scalar(coef[j], x + j * stride, y, n);
}

struct Tables {
  VecOpsTable t[3];
  Tables() {
    RegisterScalarVecOps(&t[0]);
    t[1] = t[0];
#if defined(KINFER_CPU_HAVE_AVX2)
    // Only on CPUs with AVX2: the registration itself is compiled for it (see kernel_table.cc).
    if (BestSupportedIsa() != CpuIsa::kScalar) RegisterAvx2VecOps(&t[1]);
#endif
    t[2] = t[1];
  }
};

const VecOpsTable& Active() {
  static const Tables tables;
  return tables.t[static_cast<int>(ActiveIsa())];
}

}  // namespace

void RegisterScalarVecOps(VecOpsTable* t) {
  t->dot_f32 = DotF32Scalar;
  t->dot_f16_f32 = DotF16F32Scalar;
  t->axpy_f16 = AxpyF16Scalar;
  t->f32_to_f16 = F32ToF16Scalar;
  t->f16_to_f32 = F16ToF32Scalar;
  t->dot_f16_f32_rows = DotF16F32RowsScalar;
  t->axpy_f16_rows = AxpyF16RowsScalar;
}

}  // namespace cpu_internal

float DotF32(const float* a, const float* b, int64_t n) { return cpu_internal::Active().dot_f32(a, b, n); }
float DotF16F32(const ggml_fp16_t* a, const float* b, int64_t n) {
  return cpu_internal::Active().dot_f16_f32(a, b, n);
}
void AxpyF16(float a, const ggml_fp16_t* x, float* y, int64_t n) {
  cpu_internal::Active().axpy_f16(a, x, y, n);
}
void F32ToF16(const float* x, ggml_fp16_t* y, int64_t n) { cpu_internal::Active().f32_to_f16(x, y, n); }
void F16ToF32(const ggml_fp16_t* x, float* y, int64_t n) { cpu_internal::Active().f16_to_f32(x, y, n); }
void DotF16F32Rows(const ggml_fp16_t* a, int64_t stride, int64_t rows, const float* b, int64_t n,
                   float* out) {
  cpu_internal::Active().dot_f16_f32_rows(a, stride, rows, b, n, out);
}
void AxpyF16Rows(const float* coef, const ggml_fp16_t* x, int64_t stride, int64_t rows, float* y,
                 int64_t n) {
  cpu_internal::Active().axpy_f16_rows(coef, x, stride, rows, y, n);
}

}  // namespace kinfer
