// IEEE binary16 and bfloat16 conversions, bit-exact and portable (no F16C needed): every input
// (fp16.h inlines the normal range and calls these for the rest).
//
// Fp16ToFp32 is exact for every input (binary16 is a subset of binary32). Fp32ToFp16 rounds to
// nearest, ties to even, like vcvtps2ph with imm8=0 and numpy's float16 cast: values whose
// magnitude rounds above 65504 become infinity, tiny values become subnormals or signed zero.
// A NaN stays a NaN with its sign and the top 10 payload bits, quieted (bit 9 set), as F16C does.
#include <cstring>

#include "runtime/gguf/fp16.h"

namespace kinfer {
namespace {

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

}  // namespace

namespace fp16_internal {

float Fp16ToFp32Any(ggml_fp16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  if (exp == 0x1F) return BitsFloat(sign | 0x7F800000u | (mant << 13));  // inf / nan
  if (exp != 0) return BitsFloat(sign | ((exp + 112u) << 23) | (mant << 13));
  if (mant == 0) return BitsFloat(sign);  // signed zero
  // Subnormal: value = mant * 2^-24. Normalize so the leading 1 reaches bit 10.
  uint32_t e = 113;  // biased exponent of 2^-14, decremented per shift
  while ((mant & 0x400u) == 0) {
    mant <<= 1;
    --e;
  }
  return BitsFloat(sign | (e << 23) | ((mant & 0x3FFu) << 13));
}

ggml_fp16_t Fp32ToFp16Any(float f) {
  const uint32_t x = FloatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t exp = (x >> 23) & 0xFFu;
  const uint32_t mant = x & 0x7FFFFFu;
  if (exp == 0xFF) {
    if (mant == 0) return static_cast<ggml_fp16_t>(sign | 0x7C00u);
    return static_cast<ggml_fp16_t>(sign | 0x7E00u | (mant >> 13));
  }
  const int e = static_cast<int>(exp) - 127;
  if (e >= 16) return static_cast<ggml_fp16_t>(sign | 0x7C00u);
  if (e >= -14) {
    uint32_t h = (static_cast<uint32_t>(e + 15) << 10) | (mant >> 13);
    const uint32_t rem = mant & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry may reach inf: correct
    return static_cast<ggml_fp16_t>(sign | h);
  }
  if (e < -25) return static_cast<ggml_fp16_t>(sign);  // below half the smallest subnormal
  // Subnormal result in units of 2^-24: m * 2^(e+1) with m the 24-bit significand.
  const uint32_t m = mant | 0x800000u;
  const int shift = -(e + 1);  // 14..24
  uint32_t h = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (h & 1u))) ++h;  // may become the smallest normal: correct
  return static_cast<ggml_fp16_t>(sign | h);
}

}  // namespace fp16_internal

float Bf16ToFp32(ggml_bf16_t h) { return BitsFloat(static_cast<uint32_t>(h) << 16); }

}  // namespace kinfer
