// Device-side helpers shared by the backend's .cu files: warp reductions, unaligned loads, the
// fp16 / bf16 conversions the CPU uses (round to nearest even), and the launch error check.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace kinfer::cuda {

constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}
__device__ __forceinline__ int WarpSumInt(int v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

__device__ __forceinline__ float HalfBitsToFloat(uint16_t h) {
  return __half2float(__ushort_as_half(h));
}
__device__ __forceinline__ uint16_t FloatToHalfBits(float f) {
  return __half_as_ushort(__float2half_rn(f));
}
__device__ __forceinline__ float Bf16BitsToFloat(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}
// A 16-bit value at a 2-byte aligned address.
__device__ __forceinline__ uint16_t LoadU16(const uint8_t* p) {
  return *reinterpret_cast<const uint16_t*>(p);
}
// 32 bits at an address that is only 2-byte aligned (Q4_0, Q8_0 and Q6_K blocks).
__device__ __forceinline__ int LoadI32Aligned2(const uint8_t* p) {
  const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
  return static_cast<int>(static_cast<uint32_t>(h[0]) | (static_cast<uint32_t>(h[1]) << 16));
}
__device__ __forceinline__ int LoadI32Aligned4(const uint8_t* p) {
  return *reinterpret_cast<const int*>(p);
}

}  // namespace kinfer::cuda

// Launch check inside the host wrappers: records the first launch error so that the backend's
// next synchronizing call reports it (cudaGetLastError is sticky for launch-config errors only).
#define KINFER_CUDA_LAUNCH_CHECK() (void)cudaPeekAtLastError()
