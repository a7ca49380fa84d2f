// CUDA emulation: __half, __half2 and __nv_bfloat16 with the conversions the kernels use. The
// fp16 conversions are the GGUF reader's (round to nearest even, subnormals and NaN kept), the
// bf16 one rounds to nearest even as __float2bfloat16_rn.
#pragma once

#include <cstdint>
#include <cstring>

#include "runtime/backend/cuda/emu/cuda_emu.h"
#include "runtime/gguf/fp16.h"


struct __half {
  uint16_t __x;
  __half() = default;
  __half(float f) : __x(::kinfer::Fp32ToFp16(f)) {}  // NOLINT: implicit, as cuda_fp16.h's
  operator float() const { return ::kinfer::Fp16ToFp32(__x); }
};
typedef __half half;
struct __align__(4) __half2 {
  __half x, y;
};
struct __nv_bfloat16 {
  uint16_t __x;
};
typedef __nv_bfloat16 nv_bfloat16;

inline float __half2float(__half h) { return ::kinfer::Fp16ToFp32(h.__x); }
inline __half __float2half_rn(float f) {
  __half h;
  h.__x = ::kinfer::Fp32ToFp16(f);
  return h;
}
inline __half __float2half(float f) { return __float2half_rn(f); }
inline __half __ushort_as_half(unsigned short u) {
  __half h;
  h.__x = u;
  return h;
}
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline float2 __half22float2(__half2 h) { return {__half2float(h.x), __half2float(h.y)}; }
inline __half2 __floats2half2_rn(float a, float b) { return {__float2half_rn(a), __float2half_rn(b)}; }

inline float __bfloat162float(__nv_bfloat16 b) {
  const uint32_t u = static_cast<uint32_t>(b.__x) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  __nv_bfloat16 b;
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    b.__x = static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  } else {
    b.__x = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
  return b;
}
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
