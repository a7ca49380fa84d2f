// Vector primitives for attention and norms, dispatched on the active ISA (cpu_features.h).
//
// Accuracy: fp32 arithmetic with several partial sums (summation order differs from a
// sequential loop by a few ulps of the sum of |terms|). F32ToF16 rounds to nearest even, like
// ggml's F16C conversion; half infinities and NaNs convert as IEEE says.
//
// Thread safety: pure functions of their arguments; callable from any thread.
#pragma once

#include <cstdint>

#include "runtime/gguf/ggml_types.h"

namespace kinfer {

// sum_i a[i] * b[i]
float DotF32(const float* a, const float* b, int64_t n);
// sum_i float(a[i]) * b[i]   (K-cache rows x query)
float DotF16F32(const ggml_fp16_t* a, const float* b, int64_t n);
// y[i] += a * float(x[i])   (V-cache rows)
void AxpyF16(float a, const ggml_fp16_t* x, float* y, int64_t n);
// y[i] = fp16(x[i]) / float(x[i])
void F32ToF16(const float* x, ggml_fp16_t* y, int64_t n);
void F16ToF32(const ggml_fp16_t* x, float* y, int64_t n);

// Many rows in one call (attention over a KV cache whose rows are `stride` halfs apart); each
// row's result is bit-identical to the one-row function's.
// out[j] = DotF16F32(a + j * stride, b, n), for j in [0, rows)
void DotF16F32Rows(const ggml_fp16_t* a, int64_t stride, int64_t rows, const float* b, int64_t n,
                   float* out);
// for j in [0, rows), in order: AxpyF16(coef[j], x + j * stride, y, n)
void AxpyF16Rows(const float* coef, const ggml_fp16_t* x, int64_t stride, int64_t rows, float* y,
                 int64_t n);

}  // namespace kinfer
