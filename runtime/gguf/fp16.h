// IEEE half and bfloat16 conversions, bit-exact and portable (no F16C needed). Fp16ToFp32 and
// Bf16ToFp32 are exact (subnormals, +-0, +-inf, NaN payloads kept). Fp32ToFp16 rounds to nearest,
// ties to even (as F16C and numpy); overflow gives +-inf, a NaN stays NaN with its sign and top
// payload bits, quieted.
//
// The normal range is inline (a few integer operations); zeros, subnormals, infinities, NaN and
// out-of-range values go to the out-of-line functions in fp16.cc, which handle every input. The
// CUDA emulator converts every FP16 weight and activation through these, so the call mattered.
#pragma once

#include <cstdint>
#include <cstring>

#include "runtime/gguf/ggml_types.h"

namespace kinfer {

namespace fp16_internal {
float Fp16ToFp32Any(ggml_fp16_t h);     // every input
ggml_fp16_t Fp32ToFp16Any(float f);     // every input
}  // namespace fp16_internal

inline float Fp16ToFp32(ggml_fp16_t h) {
  const uint32_t exp = (h >> 10) & 0x1Fu;
  if (exp - 1u < 30u) {  // a normal number: rebias the exponent
    const uint32_t u = (static_cast<uint32_t>(h & 0x8000u) << 16) | ((exp + 112u) << 23) |
                       (static_cast<uint32_t>(h & 0x3FFu) << 13);
    float f;
    std::memcpy(&f, &u, sizeof(f));
    return f;
  }
  return fp16_internal::Fp16ToFp32Any(h);
}

inline ggml_fp16_t Fp32ToFp16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  const uint32_t exp = (x >> 23) & 0xFFu;
  if (exp - 113u < 30u) {  // 2^-14 <= |f| < 2^16: a normal half, or one that rounds to infinity
    uint32_t h = ((exp - 112u) << 10) | ((x & 0x7FFFFFu) >> 13);
    const uint32_t rem = x & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry may reach inf: correct
    return static_cast<ggml_fp16_t>(((x >> 16) & 0x8000u) | h);
  }
  return fp16_internal::Fp32ToFp16Any(f);
}

float Bf16ToFp32(ggml_bf16_t h);

}  // namespace kinfer
