// Internal: the per-ISA function table behind vec_ops.h.
#pragma once

#include <cstdint>

#include "runtime/gguf/ggml_types.h"

namespace kinfer::cpu_internal {

struct VecOpsTable {
  float (*dot_f32)(const float*, const float*, int64_t) = nullptr;
  float (*dot_f16_f32)(const ggml_fp16_t*, const float*, int64_t) = nullptr;
  void (*axpy_f16)(float, const ggml_fp16_t*, float*, int64_t) = nullptr;
  void (*f32_to_f16)(const float*, ggml_fp16_t*, int64_t) = nullptr;
  void (*f16_to_f32)(const ggml_fp16_t*, float*, int64_t) = nullptr;
  void (*dot_f16_f32_rows)(const ggml_fp16_t*, int64_t, int64_t, const float*, int64_t,
                           float*) = nullptr;
  void (*axpy_f16_rows)(const float*, const ggml_fp16_t*, int64_t, int64_t, float*,
                        int64_t) = nullptr;
};

void RegisterScalarVecOps(VecOpsTable* t);
void RegisterAvx2VecOps(VecOpsTable* t);  // vec_ops_avx2.cc

}  // namespace kinfer::cpu_internal
