// Internal: the kernel table behind MatMul, the quantized activation row layouts, and the
// per-ISA registration functions. Not part of the backend's public API.
//
// Activation row layouts (one row per token, 64-byte aligned, built by the Quantize* functions):
//
//   kQ8 (for Q4_0, Q4_1 and Q8_0 weights; the values of ggml's Q8_0 / Q8_1 blocks):
//     nbp = number of 32-blocks rounded up to a multiple of 8 (padding blocks are all zero)
//     [ qs: nbp*32 int8 ][ d: nbp float ][ s: nbp float ][ isum: nbp int32 ]
//     d is the block scale after its round trip through fp16 (as ggml stores it), s = fp16(d *
//     sum(q)) as a float (ggml's Q8_1 s), isum = sum(q) as an integer.
//     qs order: "plain" = block after block, ggml's order; "interleaved" = for each group of 8
//     blocks, 8 steps of 32 bytes, step k holding bytes 4k..4k+3 of blocks 0..7 of the group (so
//     one 32-bit lane of a 256-bit vector accumulates one block). The GEMM kernels and every
//     kernel over kQ4Grouped8 weights (weight_layout.h) read the interleaved order, the other
//     matrix-vector kernels the plain one.
//   kQ8K (Q4_K, Q6_K): [ qs: cols int8 ][ d: cols/256 float ][ bsums: cols/16 int16 ]
//   kF16 / kBF16: cols halfs; kF32: the caller's row itself (no copy).
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/gguf/ggml_types.h"

namespace kinfer::cpu_internal {

enum class ActKind { kF32 = 0, kF16, kBF16, kQ8, kQ8K, kCount };

// The activation format a weight type is multiplied with (ggml's vec_dot_type).
ActKind ActKindFor(GgmlType weight_type);
// Bytes of one quantized activation row (multiple of 64); 0 for kF32.
size_t ActRowBytes(ActKind kind, int64_t cols);
inline int64_t PaddedBlocks(int64_t cols) { return ((cols / 32 + 7) / 8) * 8; }

// Views into a kQ8 row.
struct Q8Row {
  const int8_t* qs;
  const float* d;
  const float* s;
  const int32_t* isum;
};
inline Q8Row ViewQ8(const void* row, int64_t cols) {
  const int64_t nbp = PaddedBlocks(cols);
  const auto* p = static_cast<const uint8_t*>(row);
  return {reinterpret_cast<const int8_t*>(p), reinterpret_cast<const float*>(p + nbp * 32),
          reinterpret_cast<const float*>(p + nbp * 36),
          reinterpret_cast<const int32_t*>(p + nbp * 40)};
}
struct Q8KRow {
  const int8_t* qs;
  const float* d;
  const int16_t* bsums;
};
inline Q8KRow ViewQ8K(const void* row, int64_t cols) {
  const auto* p = static_cast<const uint8_t*>(row);
  return {reinterpret_cast<const int8_t*>(p), reinterpret_cast<const float*>(p + cols),
          reinterpret_cast<const int16_t*>(p + cols + 4 * (cols / 256))};
}

// Quantizes one activation row of `cols` floats into `dst` (layout above).
using QuantizeFn = void (*)(const float* x, void* dst, int64_t cols, bool interleaved);

// Computes y[t * ldy + r] = dot(weight row r, activation row t) for r in [r0, r1) and
// t in [t0, t1). act[t] points at token t's activation row.
struct MatArgs {
  const uint8_t* w;
  size_t w_row_bytes;
  int64_t cols;
  const void* const* act;
  float* y;
  int64_t ldy;
};
using MatKernelFn = void (*)(const MatArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1);

constexpr int kNumTypes = 31;  // GgmlType ids are < 31

struct KernelTable {
  QuantizeFn quantize[static_cast<int>(ActKind::kCount)] = {};
  // Matrix-vector kernels (any ntok; plain activation order).
  MatKernelFn matvec[kNumTypes] = {};
  // Register-blocked kernels for many tokens (interleaved kQ8 order); null where absent.
  MatKernelFn gemm[kNumTypes] = {};
  // Weight rows a GEMM kernel prefers per call (the worker split is rounded to it).
  int gemm_rows = 1;
  // Fewer tokens than this use the matrix-vector kernels (measured crossover).
  int gemm_min_tokens = 4;
  // The same two kinds over kQ4Grouped8 weights (Q4_0, Q4_1; interleaved kQ8 order). Every
  // table has the matrix-vector ones, so grouped weights stay readable at any ISA.
  MatKernelFn matvec_q4g8[kNumTypes] = {};
  MatKernelFn gemm_q4g8[kNumTypes] = {};
  // Whether the loader should regroup Q4 weights for this ISA (PreferQ4Grouped8).
  bool prefer_q4_grouped8 = false;
};

// The table for the active ISA (cpu_features.h), built once per ISA.
const KernelTable& Kernels();
const KernelTable& KernelsFor(int isa);

// Per-ISA registration: each overwrites the entries it implements.
void RegisterScalarKernels(KernelTable* t);
void RegisterScalarQuantizers(KernelTable* t);  // quantize_act.cc
void RegisterAvx2Kernels(KernelTable* t);
void RegisterAvx2Quantizers(KernelTable* t);      // quantize_act_avx2.cc
void RegisterAvx2KQuantKernels(KernelTable* t);  // kernels_kquants_avx2.cc
void RegisterAvx2GemmKernels(KernelTable* t);    // kernels_gemm_avx2.cc
void RegisterAvx2Q4Grouped8Kernels(KernelTable* t);  // kernels_q4g8_avx2.cc
void RegisterAvx512Kernels(KernelTable* t);
void RegisterAvx512MatVecKernels(KernelTable* t);  // kernels_matvec_avx512.cc

// Scalar fp16/bf16 conversions used by the kernels (bit-exact with ggml's: round to nearest even).
// The fp16 pair forwards to the GGUF reader's Fp16ToFp32/Fp32ToFp16.
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
inline float Bf16ToFloat(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
uint16_t FloatToBf16(float f);

}  // namespace kinfer::cpu_internal
