// Activation quantizers (ggml's vec_dot_type formulas) and scalar half/bf16 conversions.
//
// Q8_0 / Q8_1 follow ggml's x86 SIMD quantizer, which is what llama.cpp runs on this class of
// machine: per 32 values amax = max|x|, d = amax / 127, q = round_half_even(x * (127 / amax)),
// stored d = fp16(d), Q8_1's s = fp16(d * sum(q)). Q8_K follows ggml's reference quantizer
// (the one x86 builds use): max = the value of largest magnitude (first one on ties),
// iscale = -127 / max, q = min(127, round_half_even(iscale * x)), d = 1 / iscale, bsums = sums
// of 16 q. F16 and BF16 round to nearest even.
#include <cmath>
#include <cstring>

#include "runtime/backend/cpu/kernels.h"
#include "runtime/gguf/gguf_file.h"

namespace kinfer::cpu_internal {
namespace {

void QuantizeQ8Scalar(const float* x, void* dst, int64_t cols, bool interleaved) {
  const int64_t nb = cols / 32;
  const int64_t nbp = PaddedBlocks(cols);
  auto* base = static_cast<uint8_t*>(dst);
  auto* qs = reinterpret_cast<int8_t*>(base);
  auto* d = reinterpret_cast<float*>(base + nbp * 32);
  auto* s = reinterpret_cast<float*>(base + nbp * 36);
  auto* isum = reinterpret_cast<int32_t*>(base + nbp * 40);
  for (int64_t b = 0; b < nbp; ++b) {
    int8_t q[32] = {};
    float dd = 0.0f, ss = 0.0f;
    int32_t sum = 0;
    if (b < nb) {
      const float* xb = x + b * 32;
      float amax = 0.0f;
      for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(xb[i]));
      const float dv = amax / 127.0f;
      const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
      for (int i = 0; i < 32; ++i) {
        q[i] = static_cast<int8_t>(static_cast<int>(std::nearbyint(xb[i] * id)));
        sum += q[i];
      }
      dd = HalfToFloat(FloatToHalf(dv));
      ss = HalfToFloat(FloatToHalf(dv * static_cast<float>(sum)));
    }
    d[b] = dd;
    s[b] = ss;
    isum[b] = sum;
    if (!interleaved) {
      std::memcpy(qs + b * 32, q, 32);
    } else {
      int8_t* g = qs + (b / 8) * 256 + (b % 8) * 4;
      for (int k = 0; k < 8; ++k) std::memcpy(g + k * 32, q + 4 * k, 4);
    }
  }
}

void QuantizeQ8KScalar(const float* x, void* dst, int64_t cols, bool /*interleaved*/) {
  const int64_t nsb = cols / 256;
  auto* base = static_cast<uint8_t*>(dst);
  auto* qs = reinterpret_cast<int8_t*>(base);
  auto* d = reinterpret_cast<float*>(base + cols);
  auto* bsums = reinterpret_cast<int16_t*>(base + cols + 4 * nsb);
  for (int64_t b = 0; b < nsb; ++b) {
    const float* xb = x + b * 256;
    int8_t* q = qs + b * 256;
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < 256; ++i) {
      const float ax = std::fabs(xb[i]);
      if (ax > amax) {
        amax = ax;
        max = xb[i];
      }
    }
    if (amax == 0.0f) {
      d[b] = 0.0f;
      std::memset(q, 0, 256);
      for (int j = 0; j < 16; ++j) bsums[b * 16 + j] = 0;
      continue;
    }
    const float iscale = -127.0f / max;
    for (int i = 0; i < 256; ++i) {
      const int v = static_cast<int>(std::nearbyint(iscale * xb[i]));
      q[i] = static_cast<int8_t>(v < 127 ? v : 127);
    }
    for (int j = 0; j < 16; ++j) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += q[j * 16 + i];
      bsums[b * 16 + j] = static_cast<int16_t>(sum);
    }
    d[b] = 1.0f / iscale;
  }
}

void QuantizeF16Scalar(const float* x, void* dst, int64_t cols, bool) {
  auto* y = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < cols; ++i) y[i] = FloatToHalf(x[i]);
}

void QuantizeBf16Scalar(const float* x, void* dst, int64_t cols, bool) {
  auto* y = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < cols; ++i) y[i] = FloatToBf16(x[i]);
}

}  // namespace

// One fp16 conversion for the tree: the GGUF reader's (round to nearest even, exact subnormals).
float HalfToFloat(uint16_t h) { return Fp16ToFp32(h); }

uint16_t FloatToHalf(float f) { return Fp32ToFp16(f); }

uint16_t FloatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((u >> 16) | 64);  // quiet NaN
  return static_cast<uint16_t>((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}

ActKind ActKindFor(GgmlType weight_type) {
  switch (weight_type) {
    case GgmlType::kF32: return ActKind::kF32;
    case GgmlType::kF16: return ActKind::kF16;
    case GgmlType::kBF16: return ActKind::kBF16;
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ8_0: return ActKind::kQ8;
    case GgmlType::kQ4_K:
    case GgmlType::kQ6_K: return ActKind::kQ8K;
    default: return ActKind::kCount;
  }
}

size_t ActRowBytes(ActKind kind, int64_t cols) {
  size_t bytes = 0;
  switch (kind) {
    case ActKind::kF32: return 0;
    case ActKind::kF16:
    case ActKind::kBF16: bytes = static_cast<size_t>(cols) * 2; break;
    case ActKind::kQ8: bytes = static_cast<size_t>(PaddedBlocks(cols)) * 44; break;
    case ActKind::kQ8K: bytes = static_cast<size_t>(cols) + 4 * (cols / 256) + 2 * (cols / 16); break;
    default: return 0;
  }
  return (bytes + 63) & ~size_t{63};
}

void RegisterScalarQuantizers(KernelTable* t) {
  t->quantize[static_cast<int>(ActKind::kQ8)] = QuantizeQ8Scalar;
  t->quantize[static_cast<int>(ActKind::kQ8K)] = QuantizeQ8KScalar;
  t->quantize[static_cast<int>(ActKind::kF16)] = QuantizeF16Scalar;
  t->quantize[static_cast<int>(ActKind::kBF16)] = QuantizeBf16Scalar;
}

}  // namespace kinfer::cpu_internal
