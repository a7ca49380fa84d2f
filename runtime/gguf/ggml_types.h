// Tensor element types of the GGUF/ggml format and the byte layout of their quantized blocks.
//
// The numeric values of GgmlType are the on-disk ids (ggml.h `enum ggml_type`); do not renumber.
// Block layouts are bit-exact with ggml (ggml-common.h). All types here are plain data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kinfer {

enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  // Known so that files holding them can be opened and listed; not supported by the runtime.
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
  kNVFP4 = 40,
  kQ1_0 = 41,
};

using ggml_fp16_t = uint16_t;  // IEEE binary16 bits
using ggml_bf16_t = uint16_t;  // bfloat16 bits

constexpr int kQK4_0 = 32;
constexpr int kQK4_1 = 32;
constexpr int kQK8_0 = 32;
constexpr int kQK8_1 = 32;
constexpr int kQK_K = 256;       // super-block size of the k-quants
constexpr int kKScaleSize = 12;  // packed 6-bit scales of Q4_K/Q5_K

// x = d * (q - 8), q in [0,16): low nibbles hold elements 0..15, high nibbles 16..31.
struct BlockQ4_0 {
  ggml_fp16_t d;
  uint8_t qs[kQK4_0 / 2];
};
static_assert(sizeof(BlockQ4_0) == 18);

// x = d * q + m, q in [0,16); nibble order as Q4_0.
struct BlockQ4_1 {
  ggml_fp16_t d;
  ggml_fp16_t m;
  uint8_t qs[kQK4_1 / 2];
};
static_assert(sizeof(BlockQ4_1) == 20);

// x = d * q, q in [-128,127].
struct BlockQ8_0 {
  ggml_fp16_t d;
  int8_t qs[kQK8_0];
};
static_assert(sizeof(BlockQ8_0) == 34);

// Activation type paired with Q4_1: x = d * q; s = d * sum(q).
struct BlockQ8_1 {
  ggml_fp16_t d;
  ggml_fp16_t s;
  int8_t qs[kQK8_1];
};
static_assert(sizeof(BlockQ8_1) == 36);

// 8 sub-blocks of 32; x = d * sc[j] * q - dmin * m[j], 6-bit sc/m packed in `scales`.
struct BlockQ4_K {
  ggml_fp16_t d;
  ggml_fp16_t dmin;
  uint8_t scales[kKScaleSize];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ4_K) == 144);

// 16 sub-blocks of 16; x = d * scales[j] * (q - 32), q 6-bit = 4 low bits (ql) + 2 high (qh).
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  ggml_fp16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210);

// Activation type paired with the k-quants: x = d * q; bsums = sums of 16-element groups.
struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};
static_assert(sizeof(BlockQ8_K) == 292);

// "Known" below means any enumerator above; block sizes and bytes match ggml (for the newest ids,
// 34..41, they follow gguf-py 0.19's GGML_QUANT_SIZES). Ids 4, 5 and 31..33 were retired by ggml
// and are unknown here. A file holding a tensor of an unknown id fails to open; a known but
// unsupported type opens, and the loader checks GgmlTypeSupported().

// Elements per block (1 for the plain types); 0 for an unknown type.
int64_t GgmlBlockSize(GgmlType type);
// Bytes per block (bytes per element for the plain types); 0 for an unknown type.
size_t GgmlTypeSize(GgmlType type);
// True for every enumerator of GgmlType (block size and bytes known).
bool GgmlTypeKnown(GgmlType type);
// "Q4_1", "F32", ...; "unknown" for ids this build does not know.
std::string_view GgmlTypeName(GgmlType type);
// True for the types whose tensors the runtime can read:
// F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K.
bool GgmlTypeSupported(GgmlType type);

}  // namespace kinfer
