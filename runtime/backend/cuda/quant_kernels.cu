// Activation quantizers, fused dequantizing matrix-vector products for every weight type, and
// dequantization (rows for the embedding, whole matrices to FP16 for cuBLAS).
// Block layouts: runtime/gguf/ggml_types.h. Numerics: cuda_kernels.h.
#include <cassert>

#include "runtime/backend/cuda/cuda_common.cuh"
#include "runtime/backend/cuda/cuda_kernels.h"

namespace kinfer::cuda {
namespace {

// ---- activation quantizers -----------------------------------------------------------------

// QuantBlock32: cuda_common.cuh (the decode attention quantizes its output with it too).

// One 256-block (lane holds elements 8*lane .. 8*lane+7, sb = the block's index over all rows):
// the CPU's Q8_K (the value of largest magnitude, first on ties, sets iscale = -127 / max;
// q = min(127, rint(iscale * x)); d = 1 / iscale). s gets each 32-unit's sum. The whole warp
// calls it.
__device__ __forceinline__ void QuantBlock256(const float (&vals)[8], int lane, int64_t sb,
                                              const ActBuffers& act) {
  float amax = -1.0f, maxv = 0.0f;
  int imax = 0;
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const float ax = fabsf(vals[k]);
    if (ax > amax) {
      amax = ax;
      imax = lane * 8 + k;
      maxv = vals[k];
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float oa = __shfl_xor_sync(kFullMask, amax, o);
    const int oi = __shfl_xor_sync(kFullMask, imax, o);
    const float ov = __shfl_xor_sync(kFullMask, maxv, o);
    if (oa > amax || (oa == amax && oi < imax)) {
      amax = oa;
      imax = oi;
      maxv = ov;
    }
  }
  int8_t* q = act.qs + sb * 256 + lane * 8;
  if (amax == 0.0f) {
#pragma unroll
    for (int k = 0; k < 8; ++k) q[k] = 0;
    if ((lane & 3) == 0) {
      act.d[sb * 8 + lane / 4] = 0.0f;
      act.s[sb * 8 + lane / 4] = 0.0f;
    }
    return;
  }
  const float iscale = -127.0f / maxv;
  int sum = 0;
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const int v = static_cast<int>(rintf(__fmul_rn(iscale, vals[k])));
    const int c = v < 127 ? v : 127;
    q[k] = static_cast<int8_t>(c);
    sum += c;
  }
  sum += __shfl_xor_sync(kFullMask, sum, 1);
  sum += __shfl_xor_sync(kFullMask, sum, 2);
  if ((lane & 3) == 0) {
    act.d[sb * 8 + lane / 4] = 1.0f / iscale;
    act.s[sb * 8 + lane / 4] = static_cast<float>(sum);
  }
}

__device__ __forceinline__ float RoundAct(ActFormat fmt, float v) {
  if (fmt == ActFormat::kF16) return __half2float(__float2half_rn(v));
  if (fmt == ActFormat::kBF16) return __bfloat162float(__float2bfloat16_rn(v));
  return v;
}

// A warp per 32-block of the flattened rows.
__global__ void QuantizeQ8Kernel(const float* __restrict__ x, int64_t nblocks_total, ActBuffers act) {
  AwaitPrecedingKernels();
  const int64_t b = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (b >= nblocks_total) return;
  QuantBlock32(x[b * 32 + lane], lane, b, act);
}

// A warp per 256-block of the flattened rows.
__global__ void QuantizeQ8KKernel(const float* __restrict__ x, int64_t nsb_total, ActBuffers act) {
  AwaitPrecedingKernels();
  const int64_t sb = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (sb >= nsb_total) return;
  float vals[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) vals[k] = x[sb * 256 + lane * 8 + k];
  QuantBlock256(vals, lane, sb, act);
}

// RmsNorm of the row xr of d floats (the CPU's floats: double sum of squares, (x * scale) * w),
// quantized (or rounded) straight into row `row` of act. Every thread of the block calls it; the
// sum's grouping depends only on blockDim.x, and every caller launches 256 threads, so the
// quantizer kernel and the products that compute their own activations give the same bits.
__device__ void RmsNormQuantizeRow(ActFormat fmt, const float* __restrict__ xr,
                                   const float* __restrict__ w, int d, float eps, int64_t row,
                                   const ActBuffers& act) {
  double s = 0.0;
  for (int i = threadIdx.x; i < d; i += blockDim.x) s += static_cast<double>(xr[i]) * xr[i];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(kFullMask, s, o);
  __shared__ double part[32];
  __shared__ float scale_sh;
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, nwarps = blockDim.x / 32;
  if (lane == 0) part[warp] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    double tot = 0.0;
    for (int i = 0; i < nwarps; ++i) tot += part[i];
    const float mean = static_cast<float>(tot / d);
    scale_sh = 1.0f / sqrtf(__fadd_rn(mean, eps));
  }
  __syncthreads();
  const float scale = scale_sh;
  if (fmt == ActFormat::kQ8_0 || fmt == ActFormat::kQ8_1) {
    for (int b = warp; b < d / 32; b += nwarps) {
      const int i = b * 32 + lane;
      QuantBlock32(__fmul_rn(__fmul_rn(xr[i], scale), w[i]), lane, row * (d / 32) + b, act);
    }
  } else if (fmt == ActFormat::kQ8K) {
    for (int b = warp; b < d / 256; b += nwarps) {
      float vals[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const int i = b * 256 + lane * 8 + k;
        vals[k] = __fmul_rn(__fmul_rn(xr[i], scale), w[i]);
      }
      QuantBlock256(vals, lane, row * (d / 256) + b, act);
    }
  } else {
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
      act.xr[row * d + i] = RoundAct(fmt, __fmul_rn(__fmul_rn(xr[i], scale), w[i]));
    }
  }
}

// One row per block.
__global__ void RmsNormQuantizeKernel(ActFormat fmt, const float* __restrict__ x,
                                      const float* __restrict__ w, int d, float eps, ActBuffers act) {
  AwaitPrecedingKernels();
  RmsNormQuantizeRow(fmt, x + static_cast<size_t>(blockIdx.x) * d, w, d, eps, blockIdx.x, act);
}

// silu(gate) * up, quantized straight into act: a warp per 32-block (or 256-block), or a thread
// per element for the float formats.
__global__ void SwiGluQuantizeKernel(ActFormat fmt, const float* __restrict__ g,
                                     const float* __restrict__ u, int64_t n, ActBuffers act) {
  AwaitPrecedingKernels();
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int lane = threadIdx.x & 31;
  if (fmt == ActFormat::kQ8_0 || fmt == ActFormat::kQ8_1) {
    const int64_t b = tid / 32;
    if (b >= n / 32) return;
    const int64_t i = b * 32 + lane;
    QuantBlock32(SwiGluValue(g[i], u[i]), lane, b, act);
  } else if (fmt == ActFormat::kQ8K) {
    const int64_t sb = tid / 32;
    if (sb >= n / 256) return;
    float vals[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const int64_t i = sb * 256 + lane * 8 + k;
      vals[k] = SwiGluValue(g[i], u[i]);
    }
    QuantBlock256(vals, lane, sb, act);
  } else {
    if (tid >= n) return;
    act.xr[tid] = RoundAct(fmt, SwiGluValue(g[tid], u[tid]));
  }
}

template <int kKind>  // 0 = f32 copy, 1 = fp16 round trip, 2 = bf16 round trip
__global__ void RoundActKernel(const float* __restrict__ x, int64_t n, float* __restrict__ xr) {
  AwaitPrecedingKernels();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = x[i];
  if (kKind == 0) xr[i] = v;
  if (kKind == 1) xr[i] = __half2float(__float2half_rn(v));
  if (kKind == 2) xr[i] = __bfloat162float(__float2bfloat16_rn(v));
}

// ---- one 32-element unit of a quantized weight row -------------------------------------------
//
// A weight unit in registers: 8 words of 4 int8 values (element order), two scales and, for the
// k-quants, the unit's integer scale(s) and min.
struct WUnit {
  int q[8];
  float a = 0.0f;  // d (Q4_0, Q4_1, Q8_0, Q6_K), d (Q4_K)
  float b = 0.0f;  // m (Q4_1), dmin (Q4_K)
  int sc0 = 0, sc1 = 0;  // Q4_K: scale, min; Q6_K: scales of the two 16-halves
};

template <GgmlType T>
__device__ __forceinline__ WUnit LoadUnit(const uint8_t* row, int u);

template <>
__device__ __forceinline__ WUnit LoadUnit<GgmlType::kQ4_0>(const uint8_t* row, int u) {
  const uint8_t* blk = row + static_cast<size_t>(u) * 18;
  WUnit w;
  w.a = HalfBitsToFloat(LoadU16(blk));
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int v = LoadI32Aligned2(blk + 2 + 4 * k);
    w.q[k] = __vsub4(v & 0x0F0F0F0F, 0x08080808);
    w.q[k + 4] = __vsub4((v >> 4) & 0x0F0F0F0F, 0x08080808);
  }
  return w;
}

template <>
__device__ __forceinline__ WUnit LoadUnit<GgmlType::kQ4_1>(const uint8_t* row, int u) {
  const uint8_t* blk = row + static_cast<size_t>(u) * 20;
  WUnit w;
  const uint32_t dm = static_cast<uint32_t>(LoadI32Aligned4(blk));
  w.a = HalfBitsToFloat(static_cast<uint16_t>(dm & 0xffff));
  w.b = HalfBitsToFloat(static_cast<uint16_t>(dm >> 16));
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int v = LoadI32Aligned4(blk + 4 + 4 * k);
    w.q[k] = v & 0x0F0F0F0F;
    w.q[k + 4] = (v >> 4) & 0x0F0F0F0F;
  }
  return w;
}

template <>
__device__ __forceinline__ WUnit LoadUnit<GgmlType::kQ8_0>(const uint8_t* row, int u) {
  const uint8_t* blk = row + static_cast<size_t>(u) * 34;
  WUnit w;
  w.a = HalfBitsToFloat(LoadU16(blk));
#pragma unroll
  for (int k = 0; k < 8; ++k) w.q[k] = LoadI32Aligned2(blk + 2 + 4 * k);
  return w;
}

// Q4_K: unit j of a super-block is its sub-block j (scale and min from the packed 6-bit pairs).
template <>
__device__ __forceinline__ WUnit LoadUnit<GgmlType::kQ4_K>(const uint8_t* row, int u) {
  const uint8_t* blk = row + static_cast<size_t>(u / 8) * 144;
  const int j = u % 8;
  WUnit w;
  w.a = HalfBitsToFloat(LoadU16(blk));
  w.b = HalfBitsToFloat(LoadU16(blk + 2));
  const uint8_t* sc = blk + 4;
  if (j < 4) {
    w.sc0 = sc[j] & 63;
    w.sc1 = sc[j + 4] & 63;
  } else {
    w.sc0 = (sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4);
    w.sc1 = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
  }
  const uint8_t* qs = blk + 16 + (j / 2) * 32;
  const int shift = (j % 2) * 4;
#pragma unroll
  for (int k = 0; k < 8; ++k) w.q[k] = (LoadI32Aligned4(qs + 4 * k) >> shift) & 0x0F0F0F0F;
  return w;
}

// Q6_K: unit j (elements 32j..32j+31) of a super-block: half h = j / 4, k = j % 4 selects the ql
// run (k & 1), its nibble (k >> 1) and the 2-bit field 2k of qh; scales 2k and 2k+1 of the half.
template <>
__device__ __forceinline__ WUnit LoadUnit<GgmlType::kQ6_K>(const uint8_t* row, int u) {
  const uint8_t* blk = row + static_cast<size_t>(u / 8) * 210;
  const int j = u % 8;
  const int h = j / 4, k = j % 4;
  const uint8_t* ql = blk + h * 64 + (k & 1) * 32;
  const uint8_t* qh = blk + 128 + h * 32;
  const int8_t* scales = reinterpret_cast<const int8_t*>(blk + 192) + h * 8;
  WUnit w;
  w.a = HalfBitsToFloat(LoadU16(blk + 208));
  w.sc0 = scales[2 * k];
  w.sc1 = scales[2 * k + 1];
  const int nshift = (k >> 1) * 4;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int lo = (LoadI32Aligned2(ql + 4 * i) >> nshift) & 0x0F0F0F0F;
    const int hi = ((LoadI32Aligned2(qh + 4 * i) >> (2 * k)) & 0x03030303) << 4;
    w.q[i] = __vsub4(lo | hi, 0x20202020);
  }
  return w;
}

// The unit's contribution to the row's dot product, in the CPU kernel's per-block expression.
template <GgmlType T>
__device__ __forceinline__ float DotUnit(const WUnit& w, const int* aq, float ad, float as) {
  if constexpr (T == GgmlType::kQ6_K) {
    int d0 = 0, d1 = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) d0 = __dp4a(w.q[k], aq[k], d0);
#pragma unroll
    for (int k = 4; k < 8; ++k) d1 = __dp4a(w.q[k], aq[k], d1);
    return (w.a * ad) * static_cast<float>(w.sc0 * d0 + w.sc1 * d1);
  } else {
    int sumi = 0;
#pragma unroll
    for (int k = 0; k < 8; ++k) sumi = __dp4a(w.q[k], aq[k], sumi);
    if constexpr (T == GgmlType::kQ4_1) {
      return (w.a * ad) * static_cast<float>(sumi) + w.b * as;
    } else if constexpr (T == GgmlType::kQ4_K) {
      return (ad * w.a) * static_cast<float>(w.sc0 * sumi) +
             (-ad * w.b) * static_cast<float>(w.sc1 * static_cast<int>(as));
    } else {
      return static_cast<float>(sumi) * (w.a * ad);
    }
  }
}

// Row r of token t of a product, as MatOut says.
// The part is picked with selects on constant indices only: indexing out.y / out.begin by a
// runtime part would copy the kernel's MatOut parameter into a local-memory stack frame.
__device__ __forceinline__ void StoreOut(const MatOut& out, int rows, int row, int t, float s) {
  float* y = out.y[0];
  int64_t begin = out.begin[0], end = out.parts > 1 ? out.begin[1] : rows;
  if (out.parts > 1 && row >= out.begin[1]) {
    y = out.y[1];
    begin = out.begin[1];
    end = out.parts > 2 ? out.begin[2] : rows;
  }
  if (out.parts > 2 && row >= out.begin[2]) {
    y = out.y[2];
    begin = out.begin[2];
    end = rows;
  }
  float* dst = y + static_cast<int64_t>(t) * (end - begin) + (row - begin);
  *dst = out.accumulate ? __fadd_rn(*dst, s) : s;
}

// Row `row` of a product for tokens t0 .. t0 + ntok - 1 (act holds those tokens' activations
// from its row 0): one warp, lanes over the row's 32-units; NT tokens share each weight unit.
template <GgmlType T, int NT>
__device__ __forceinline__ void MatVecQRow(const uint8_t* __restrict__ wrow, int rows, int row,
                                           int cols, const ActBuffers& act, int t0, int ntok,
                                           const MatOut& out, int lane) {
  const int nunits = cols / 32;
  float acc[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
  for (int u = lane; u < nunits; u += 32) {
    const WUnit wu = LoadUnit<T>(wrow, u);
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (t < ntok) {
        const int4* ap = reinterpret_cast<const int4*>(act.qs + static_cast<size_t>(t) * cols + u * 32);
        const int4 a0 = ap[0], a1 = ap[1];
        const int aq[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
        const size_t du = static_cast<size_t>(t) * nunits + u;
        acc[t] += DotUnit<T>(wu, aq, act.d[du], act.s[du]);
      }
    }
  }
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    if (t < ntok) {
      const float s = WarpSum(acc[t]);
      if (lane == 0) StoreOut(out, rows, row, t0 + t, s);
    }
  }
}

// One warp per weight row (4 a block).
template <GgmlType T, int NT>
__global__ void __launch_bounds__(128) MatVecQKernel(const uint8_t* __restrict__ w, size_t row_bytes,
                                                     int rows, int cols, ActBuffers act, int ntok,
                                                     MatOut out) {
  AwaitPrecedingKernels();
  const int row = blockIdx.x * 4 + threadIdx.x / 32;
  if (row >= rows) return;
  MatVecQRow<T, NT>(w + static_cast<size_t>(row) * row_bytes, rows, row, cols, act, 0, ntok, out,
                    threadIdx.x & 31);
}

// A product that computes its own activations (MatVecFrom): block (x, y) takes tokens
// 8y .. 8y + 7; all its threads first compute their activations from src into shared memory
// (RmsNormQuantizeRow, or SwiGLU and QuantBlock32 / QuantBlock256: the quantizer kernels' own
// code, so the same bits), then each warp takes weight rows warp, warp + 8 x gridDim.x, ...
// REQUIRES: blockDim.x == kFromThreads; out does not alias src.
constexpr int kFromThreads = 256;

__device__ __forceinline__ ActBuffers SharedAct(uint8_t* smem, int ntok, int cols) {
  ActBuffers a;
  a.qs = reinterpret_cast<int8_t*>(smem);
  a.d = reinterpret_cast<float*>(smem + static_cast<size_t>(ntok) * cols);
  a.s = a.d + static_cast<size_t>(ntok) * (cols / 32);
  return a;
}

__device__ void ActivationsFrom(ActFormat fmt, const ActSource& src, int t0, int ntok, int cols,
                                const ActBuffers& a) {
  if (src.kind == ActSource::Kind::kRmsNorm) {
    for (int t = 0; t < ntok; ++t) {
      const int64_t r = src.rows ? src.rows[t0 + t] : t0 + t;
      RmsNormQuantizeRow(fmt, src.x + r * cols, src.weight, cols, src.eps, t, a);
    }
    return;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, nwarps = blockDim.x / 32;
  const float* g = src.x + static_cast<size_t>(t0) * cols;
  const float* u = src.up + static_cast<size_t>(t0) * cols;
  if (fmt == ActFormat::kQ8K) {
    for (int sb = warp; sb < ntok * (cols / 256); sb += nwarps) {
      float vals[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const int64_t i = static_cast<int64_t>(sb) * 256 + lane * 8 + k;
        vals[k] = SwiGluValue(g[i], u[i]);
      }
      QuantBlock256(vals, lane, sb, a);
    }
  } else {
    for (int b = warp; b < ntok * (cols / 32); b += nwarps) {
      const int64_t i = static_cast<int64_t>(b) * 32 + lane;
      QuantBlock32(SwiGluValue(g[i], u[i]), lane, b, a);
    }
  }
}

template <GgmlType T, int NT>
__global__ void __launch_bounds__(kFromThreads) MatVecFromKernel(const uint8_t* __restrict__ w,
                                                                 size_t row_bytes, int rows, int cols,
                                                                 ActFormat fmt, ActSource src,
                                                                 int ntok_total, MatOut out) {
  AwaitPrecedingKernels();
  extern __shared__ __align__(16) uint8_t from_smem[];
  const int t0 = blockIdx.y * 8;
  const int ntok = ntok_total - t0 < NT ? ntok_total - t0 : NT;
  const ActBuffers a = SharedAct(from_smem, NT, cols);
  ActivationsFrom(fmt, src, t0, ntok, cols, a);
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  for (int row = blockIdx.x * (kFromThreads / 32) + warp; row < rows;
       row += gridDim.x * (kFromThreads / 32)) {
    MatVecQRow<T, NT>(w + static_cast<size_t>(row) * row_bytes, rows, row, cols, a, t0, ntok, out, lane);
  }
}

template <GgmlType T>
__device__ __forceinline__ float LoadPlain(const uint8_t* row, int i) {
  if constexpr (T == GgmlType::kF32) return reinterpret_cast<const float*>(row)[i];
  if constexpr (T == GgmlType::kF16) return HalfBitsToFloat(reinterpret_cast<const uint16_t*>(row)[i]);
  if constexpr (T == GgmlType::kBF16) return Bf16BitsToFloat(reinterpret_cast<const uint16_t*>(row)[i]);
  return 0.0f;
}

// F32 / F16 / BF16 weights times the (rounded) float activations: one warp per row.
template <GgmlType T, int NT>
__global__ void __launch_bounds__(128) MatVecPlainKernel(const uint8_t* __restrict__ w, size_t row_bytes,
                                                         int rows, int cols, const float* __restrict__ xr,
                                                         int ntok, MatOut out) {
  AwaitPrecedingKernels();
  const int row = blockIdx.x * 4 + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const uint8_t* wrow = w + static_cast<size_t>(row) * row_bytes;
  float acc[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
  for (int i = lane; i < cols; i += 32) {
    const float wv = LoadPlain<T>(wrow, i);
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (t < ntok) acc[t] += wv * xr[static_cast<size_t>(t) * cols + i];
    }
  }
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    if (t < ntok) {
      const float s = WarpSum(acc[t]);
      if (lane == 0) StoreOut(out, rows, row, t, s);
    }
  }
}

// The part of `out` that starts at token t0.
MatOut OffsetOut(const MatOut& out, int64_t rows, int64_t t0) {
  MatOut o = out;
  for (int i = 0; i < out.parts; ++i) {
    const int64_t end = i + 1 < out.parts ? out.begin[i + 1] : rows;
    o.y[i] = out.y[i] + t0 * (end - out.begin[i]);
  }
  return o;
}

template <GgmlType T>
void LaunchMatVecType(const DevMatrix& w, const ActBuffers& act, int64_t ntok, const MatOut& out,
                      cudaStream_t stream) {
  const int rows = static_cast<int>(w.rows), cols = static_cast<int>(w.cols);
  const dim3 grid((rows + 3) / 4), block(128);
  const auto* wd = static_cast<const uint8_t*>(w.data);
  constexpr bool kPlain = T == GgmlType::kF32 || T == GgmlType::kF16 || T == GgmlType::kBF16;
  for (int64_t t0 = 0; t0 < ntok; t0 += 8) {
    const int n = static_cast<int>(ntok - t0 < 8 ? ntok - t0 : 8);
    const MatOut o = OffsetOut(out, rows, t0);
    if constexpr (kPlain) {
      const float* xr = act.xr + t0 * cols;
      if (n == 1) MatVecPlainKernel<T, 1><<<grid, block, 0, stream>>>(wd, w.row_bytes, rows, cols, xr, n, o);
      else if (n == 2) MatVecPlainKernel<T, 2><<<grid, block, 0, stream>>>(wd, w.row_bytes, rows, cols, xr, n, o);
      else if (n <= 4) MatVecPlainKernel<T, 4><<<grid, block, 0, stream>>>(wd, w.row_bytes, rows, cols, xr, n, o);
      else MatVecPlainKernel<T, 8><<<grid, block, 0, stream>>>(wd, w.row_bytes, rows, cols, xr, n, o);
    } else {
      ActBuffers a = act;
      a.qs += t0 * cols;
      a.d += t0 * (cols / 32);
      a.s += t0 * (cols / 32);
      if (n == 1) MatVecQKernel<T, 1><<<grid, block, 0, stream>>>(wd, w.row_bytes, rows, cols, a, n, o);
      else if (n == 2) MatVecQKernel<T, 2><<<grid, block, 0, stream>>>(wd, w.row_bytes, rows, cols, a, n, o);
      else if (n <= 4) MatVecQKernel<T, 4><<<grid, block, 0, stream>>>(wd, w.row_bytes, rows, cols, a, n, o);
      else MatVecQKernel<T, 8><<<grid, block, 0, stream>>>(wd, w.row_bytes, rows, cols, a, n, o);
    }
  }
  KINFER_CUDA_LAUNCH_CHECK();
}

// NT for a launch of ntok tokens (chunks of 8 share one launch), and the shared memory it needs.
int FromTokens(int64_t ntok) { return ntok <= 1 ? 1 : ntok <= 2 ? 2 : ntok <= 4 ? 4 : 8; }
size_t FromSmemBytes(int nt, int64_t cols) {
  return static_cast<size_t>(nt) * cols + 2 * sizeof(float) * static_cast<size_t>(nt) * (cols / 32);
}

template <GgmlType T>
void LaunchMatVecFromType(const DevMatrix& w, const ActSource& src, int64_t ntok, const MatOut& out,
                          int max_blocks, cudaStream_t stream) {
  const int rows = static_cast<int>(w.rows), cols = static_cast<int>(w.cols);
  constexpr int kRowsPerBlock = kFromThreads / 32;
  int bx = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  if (max_blocks > 0 && bx > max_blocks) bx = max_blocks;
  const dim3 grid(bx, static_cast<unsigned>((ntok + 7) / 8)), block(kFromThreads);
  const int nt = FromTokens(ntok);
  const size_t smem = FromSmemBytes(nt, cols);
  const auto* wd = static_cast<const uint8_t*>(w.data);
  const ActFormat fmt = ActFormatFor(T);
  const int n = static_cast<int>(ntok);
  if (nt == 1) MatVecFromKernel<T, 1><<<grid, block, smem, stream>>>(wd, w.row_bytes, rows, cols, fmt, src, n, out);
  else if (nt == 2) MatVecFromKernel<T, 2><<<grid, block, smem, stream>>>(wd, w.row_bytes, rows, cols, fmt, src, n, out);
  else if (nt == 4) MatVecFromKernel<T, 4><<<grid, block, smem, stream>>>(wd, w.row_bytes, rows, cols, fmt, src, n, out);
  else MatVecFromKernel<T, 8><<<grid, block, smem, stream>>>(wd, w.row_bytes, rows, cols, fmt, src, n, out);
  KINFER_CUDA_LAUNCH_CHECK();
}

// ---- dequantization ---------------------------------------------------------------------------

// Element c of a row, bit-exact with DequantizeRow (no FMA contraction: __fmul_rn / __fadd_rn).
__device__ float DequantElem(GgmlType type, const uint8_t* row, int c) {
  switch (type) {
    case GgmlType::kF32:
      return reinterpret_cast<const float*>(row)[c];
    case GgmlType::kF16:
      return HalfBitsToFloat(reinterpret_cast<const uint16_t*>(row)[c]);
    case GgmlType::kBF16:
      return Bf16BitsToFloat(reinterpret_cast<const uint16_t*>(row)[c]);
    case GgmlType::kQ4_0: {
      const uint8_t* blk = row + (c / 32) * 18;
      const int j = c % 32;
      const uint8_t b = blk[2 + (j % 16)];
      const int q = (j < 16 ? (b & 0x0F) : (b >> 4)) - 8;
      return __fmul_rn(static_cast<float>(q), HalfBitsToFloat(LoadU16(blk)));
    }
    case GgmlType::kQ4_1: {
      const uint8_t* blk = row + (c / 32) * 20;
      const int j = c % 32;
      const uint8_t b = blk[4 + (j % 16)];
      const int q = j < 16 ? (b & 0x0F) : (b >> 4);
      return __fadd_rn(__fmul_rn(static_cast<float>(q), HalfBitsToFloat(LoadU16(blk))),
                       HalfBitsToFloat(LoadU16(blk + 2)));
    }
    case GgmlType::kQ8_0: {
      const uint8_t* blk = row + (c / 32) * 34;
      const int8_t q = static_cast<int8_t>(blk[2 + c % 32]);
      return __fmul_rn(static_cast<float>(q), HalfBitsToFloat(LoadU16(blk)));
    }
    case GgmlType::kQ4_K: {
      const uint8_t* blk = row + (c / 256) * 144;
      const int e = c % 256;
      const int j = e / 32;  // sub-block
      const uint8_t* sc = blk + 4;
      int s, m;
      if (j < 4) {
        s = sc[j] & 63;
        m = sc[j + 4] & 63;
      } else {
        s = (sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4);
        m = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
      }
      const uint8_t b = blk[16 + (j / 2) * 32 + e % 32];
      const int q = (j % 2) ? (b >> 4) : (b & 0x0F);
      const float d1 = __fmul_rn(HalfBitsToFloat(LoadU16(blk)), static_cast<float>(s));
      const float m1 = __fmul_rn(HalfBitsToFloat(LoadU16(blk + 2)), static_cast<float>(m));
      return __fsub_rn(__fmul_rn(d1, static_cast<float>(q)), m1);
    }
    case GgmlType::kQ6_K: {
      const uint8_t* blk = row + (c / 256) * 210;
      const int e = c % 256;
      const int h = e / 128, r = e % 128;
      const int k = r / 32, l = r % 32;
      const uint8_t qlb = blk[h * 64 + (k & 1) * 32 + l];
      const uint8_t qhb = blk[128 + h * 32 + l];
      const int q = (((k >> 1) ? (qlb >> 4) : (qlb & 0xF)) | (((qhb >> (2 * k)) & 3) << 4)) - 32;
      const int8_t s = reinterpret_cast<const int8_t*>(blk + 192)[h * 8 + l / 16 + 2 * k];
      const float d = HalfBitsToFloat(LoadU16(blk + 208));
      return __fmul_rn(__fmul_rn(d, static_cast<float>(s)), static_cast<float>(q));
    }
    default:
      return 0.0f;
  }
}

// kDequantPerThread consecutive elements a thread (16 bytes of FP16 written): one index division
// per 8 elements. A one-time upload on a GPU; under the CUDA emulator, where each thread is a
// call, an element a thread made the FP16 copies most of a backend's start-up.
constexpr int kDequantPerThread = 8;
__global__ void DequantizeToF16Kernel(GgmlType type, const uint8_t* __restrict__ w, size_t row_bytes,
                                      int64_t rows, int cols, uint16_t* __restrict__ out) {
  AwaitPrecedingKernels();
  const int64_t n = rows * cols;
  const int64_t i0 = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kDequantPerThread;
  if (i0 >= n) return;
  const int64_t end = i0 + kDequantPerThread < n ? i0 + kDequantPerThread : n;
  int64_t r = i0 / cols;
  int c = static_cast<int>(i0 % cols);
  for (int64_t i = i0; i < end; ++i) {
    out[i] = FloatToHalfBits(DequantElem(type, w + r * row_bytes, c));
    if (++c == cols) {
      c = 0;
      ++r;
    }
  }
}

__global__ void DequantizeRowsKernel(GgmlType type, const uint8_t* __restrict__ w, size_t row_bytes,
                                     int cols, const int32_t* __restrict__ ids, int n,
                                     float* __restrict__ out, const int32_t* __restrict__ chained_from,
                                     int32_t* __restrict__ ids_out) {
  AwaitPrecedingKernels();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(n) * cols) return;
  const int r = static_cast<int>(i / cols);
  const int c = static_cast<int>(i % cols);
  int32_t id = ids[r];
  if (id < 0 && chained_from != nullptr) id = chained_from[-1 - id];
  if (c == 0 && ids_out != nullptr) ids_out[r] = id;
  out[i] = DequantElem(type, w + static_cast<size_t>(id) * row_bytes, c);
}

// Activations for cuBLAS (GemmInputBits: saturated to FP16's range, rounded).
__global__ void F32ToF16Kernel(const float* __restrict__ x, uint16_t* __restrict__ y, int64_t n) {
  AwaitPrecedingKernels();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = GemmInputBits(x[i]);
}

inline unsigned Blocks(int64_t n, int per) { return static_cast<unsigned>((n + per - 1) / per); }

}  // namespace

ActFormat ActFormatFor(GgmlType t) {
  switch (t) {
    case GgmlType::kF16: return ActFormat::kF16;
    case GgmlType::kBF16: return ActFormat::kBF16;
    case GgmlType::kQ4_0:
    case GgmlType::kQ8_0: return ActFormat::kQ8_0;
    case GgmlType::kQ4_1: return ActFormat::kQ8_1;
    case GgmlType::kQ4_K:
    case GgmlType::kQ6_K: return ActFormat::kQ8K;
    default: return ActFormat::kF32;
  }
}

bool CudaMatMulSupports(GgmlType t) {
  switch (t) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_K:
    case GgmlType::kQ6_K: return true;
    default: return false;
  }
}

void QuantizeActivations(ActFormat fmt, const float* x, int64_t ntok, int64_t cols,
                         const ActBuffers& act, cudaStream_t stream) {
  const int64_t n = ntok * cols;
  if (n <= 0) return;
  switch (fmt) {
    case ActFormat::kQ8_0:
    case ActFormat::kQ8_1: {
      const int64_t nb = n / 32;
      QuantizeQ8Kernel<<<Blocks(nb * 32, 256), 256, 0, stream>>>(x, nb, act);
      break;
    }
    case ActFormat::kQ8K: {
      const int64_t nsb = n / 256;
      QuantizeQ8KKernel<<<Blocks(nsb * 32, 256), 256, 0, stream>>>(x, nsb, act);
      break;
    }
    case ActFormat::kF32: RoundActKernel<0><<<Blocks(n, 256), 256, 0, stream>>>(x, n, act.xr); break;
    case ActFormat::kF16: RoundActKernel<1><<<Blocks(n, 256), 256, 0, stream>>>(x, n, act.xr); break;
    case ActFormat::kBF16: RoundActKernel<2><<<Blocks(n, 256), 256, 0, stream>>>(x, n, act.xr); break;
  }
  KINFER_CUDA_LAUNCH_CHECK();
}

void RmsNormQuantize(ActFormat fmt, const float* x, const float* weight, int n, int d, float eps,
                     const ActBuffers& act, cudaStream_t stream) {
  if (n <= 0) return;
  RmsNormQuantizeKernel<<<n, 256, 0, stream>>>(fmt, x, weight, d, eps, act);
  KINFER_CUDA_LAUNCH_CHECK();
}

void SwiGluQuantize(ActFormat fmt, const float* gate, const float* up, int n, int ff,
                    const ActBuffers& act, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(n) * ff;
  if (total <= 0) return;
  int64_t threads = total;
  if (fmt == ActFormat::kQ8_0 || fmt == ActFormat::kQ8_1) threads = total;  // a lane per element
  if (fmt == ActFormat::kQ8K) threads = total / 8;                          // 8 elements a lane
  SwiGluQuantizeKernel<<<Blocks(threads, 256), 256, 0, stream>>>(fmt, gate, up, total, act);
  KINFER_CUDA_LAUNCH_CHECK();
}

void MatVec(const DevMatrix& w, const ActBuffers& act, int64_t ntok, const MatOut& y, cudaStream_t stream) {
  if (w.rows <= 0 || ntok <= 0) return;
  switch (w.type) {
    case GgmlType::kF32: return LaunchMatVecType<GgmlType::kF32>(w, act, ntok, y, stream);
    case GgmlType::kF16: return LaunchMatVecType<GgmlType::kF16>(w, act, ntok, y, stream);
    case GgmlType::kBF16: return LaunchMatVecType<GgmlType::kBF16>(w, act, ntok, y, stream);
    case GgmlType::kQ4_0: return LaunchMatVecType<GgmlType::kQ4_0>(w, act, ntok, y, stream);
    case GgmlType::kQ4_1: return LaunchMatVecType<GgmlType::kQ4_1>(w, act, ntok, y, stream);
    case GgmlType::kQ8_0: return LaunchMatVecType<GgmlType::kQ8_0>(w, act, ntok, y, stream);
    case GgmlType::kQ4_K: return LaunchMatVecType<GgmlType::kQ4_K>(w, act, ntok, y, stream);
    case GgmlType::kQ6_K: return LaunchMatVecType<GgmlType::kQ6_K>(w, act, ntok, y, stream);
    default: assert(false && "MatVec: unsupported type");
  }
}

bool MatVecFromApplies(const DevMatrix& w, int64_t ntok) {
  switch (w.type) {
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_K:
    case GgmlType::kQ6_K: break;
    default: return false;
  }
  return ntok >= 1 && FromSmemBytes(FromTokens(ntok), w.cols) <= kMaxFromActBytes;
}

void MatVecFrom(const DevMatrix& w, const ActSource& src, int64_t ntok, const MatOut& out,
                int max_blocks, cudaStream_t stream) {
  if (w.rows <= 0 || ntok <= 0) return;
  assert(MatVecFromApplies(w, ntok));
  switch (w.type) {
    case GgmlType::kQ4_0: return LaunchMatVecFromType<GgmlType::kQ4_0>(w, src, ntok, out, max_blocks, stream);
    case GgmlType::kQ4_1: return LaunchMatVecFromType<GgmlType::kQ4_1>(w, src, ntok, out, max_blocks, stream);
    case GgmlType::kQ8_0: return LaunchMatVecFromType<GgmlType::kQ8_0>(w, src, ntok, out, max_blocks, stream);
    case GgmlType::kQ4_K: return LaunchMatVecFromType<GgmlType::kQ4_K>(w, src, ntok, out, max_blocks, stream);
    case GgmlType::kQ6_K: return LaunchMatVecFromType<GgmlType::kQ6_K>(w, src, ntok, out, max_blocks, stream);
    default: return;
  }
}

void DequantizeToF16(const DevMatrix& w, uint16_t* out, cudaStream_t stream) {
  const int64_t n = w.rows * w.cols;
  if (n <= 0) return;
  DequantizeToF16Kernel<<<Blocks(n, 256 * kDequantPerThread), 256, 0, stream>>>(
      w.type, static_cast<const uint8_t*>(w.data), w.row_bytes, w.rows, static_cast<int>(w.cols), out);
  KINFER_CUDA_LAUNCH_CHECK();
}

void DequantizeRows(GgmlType type, const void* data, size_t row_bytes, int64_t cols,
                    const int32_t* row_ids, int n, float* out, cudaStream_t stream,
                    const int32_t* chained_from, int32_t* ids_out) {
  if (n <= 0 || cols <= 0) return;
  DequantizeRowsKernel<<<Blocks(n * cols, 256), 256, 0, stream>>>(
      type, static_cast<const uint8_t*>(data), row_bytes, static_cast<int>(cols), row_ids, n, out,
      chained_from, ids_out);
  KINFER_CUDA_LAUNCH_CHECK();
}

void F32ToF16(const float* x, uint16_t* y, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  F32ToF16Kernel<<<Blocks(n, 256), 256, 0, stream>>>(x, y, n);
  KINFER_CUDA_LAUNCH_CHECK();
}

}  // namespace kinfer::cuda
