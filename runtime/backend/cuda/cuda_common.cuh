// Device-side helpers shared by the backend's .cu files: warp reductions, unaligned loads, the
// fp16 / bf16 conversions the CPU uses (round to nearest even), the launch error check, and the
// Q8_0 / Q8_1 block quantizer.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/backend/cuda/cuda_kernels.h"  // ActBuffers

namespace kinfer::cuda {

constexpr unsigned kFullMask = 0xffffffffu;

// The butterfly sums. Under the CUDA emulator, where each shuffle switches every lane, the same
// additions in the same order from one all-gather (kinfer_cudaemu::WarpButterflyReduce; addition
// is commutative, so every lane ends with the same bits either way): the emulated products ran
// several times faster. The emulator's tests check the two agree bit for bit.
__device__ __forceinline__ float WarpSum(float v) {
#if defined(KINFER_CUDA_EMULATION)
  return ::kinfer_cudaemu::WarpButterflyReduce(kFullMask, v, [](float a, float b) { return a + b; });
#else
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
#endif
}
__device__ __forceinline__ int WarpSumInt(int v) {
#if defined(KINFER_CUDA_EMULATION)
  return ::kinfer_cudaemu::WarpButterflyReduce(kFullMask, v, [](int a, int b) { return a + b; });
#else
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
#endif
}
__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// Programmatic dependent launch (Hopper): the first statement of every kernel of the backend.
// When a CUDA graph's edge into a kernel is programmatic (CudaBackendOptions::
// programmatic_launch), the kernel may start while the kernel before it is still running: it waits
// here until that kernel has finished and its writes are visible, and then lets the next kernel
// start launching in turn, so that launches overlap the work instead of following it. A kernel
// launched the ordinary way passes straight through. Nothing before it may read or write memory
// another kernel touches. (A no-op where the instructions do not exist: older targets, the CPU
// emulation.)
__device__ __forceinline__ void AwaitPrecedingKernels() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

__device__ __forceinline__ float HalfBitsToFloat(uint16_t h) {
  return __half2float(__ushort_as_half(h));
}
__device__ __forceinline__ uint16_t FloatToHalfBits(float f) {
  return __half_as_ushort(__float2half_rn(f));
}
// An activation for cuBLAS's FP16 inputs: saturated to FP16's range (+-65504), so that an
// outlier activation of a larger model costs precision in one element instead of turning into
// inf and then NaN logits; then rounded to nearest even.
__device__ __forceinline__ uint16_t GemmInputBits(float f) {
  return FloatToHalfBits(fminf(fmaxf(f, -65504.0f), 65504.0f));
}
// silu(g) * u with the CPU's floats (SwiGlu in runtime/model/ops.h).
__device__ __forceinline__ float SwiGluValue(float g, float u) {
  const float e = static_cast<float>(exp(-static_cast<double>(g)));
  return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, e)), u);
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

// One 32-block (lane i holds element i, b = the block's index over all rows): Q8_0 / Q8_1 exactly
// as the CPU's QuantizeQ8 (amax / 127 as the scale, q = rint(x * (127 / amax)), d and s rounded
// through fp16). The whole warp calls it.
__device__ __forceinline__ void QuantBlock32(float v, int lane, int64_t b, const ActBuffers& act) {
  float amax = fabsf(v);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(kFullMask, amax, o));
  const float dv = amax / 127.0f;
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  const int q = static_cast<int>(rintf(__fmul_rn(v, id)));
  act.qs[b * 32 + lane] = static_cast<int8_t>(q);
  const int sum = WarpSumInt(q);
  if (lane == 0) {
    act.d[b] = HalfBitsToFloat(FloatToHalfBits(dv));
    act.s[b] = HalfBitsToFloat(FloatToHalfBits(__fmul_rn(dv, static_cast<float>(sum))));
  }
}

}  // namespace kinfer::cuda

// Launch check inside the host wrappers: records the first launch error so that the backend's
// next synchronizing call reports it (cudaGetLastError is sticky for launch-config errors only).
#define KINFER_CUDA_LAUNCH_CHECK() (void)cudaPeekAtLastError()
