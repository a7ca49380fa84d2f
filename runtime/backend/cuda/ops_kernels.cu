// Row and element-wise ops of the forward pass (runtime/model/ops.h on the device), the KV-cache
// write, row gathers, and the argmax (the device sampler: sample_kernels.cu).
#include <cfloat>

#include "runtime/backend/cuda/cuda_common.cuh"
#include "runtime/backend/cuda/cuda_kernels.h"

namespace kinfer::cuda {
namespace {

inline unsigned Blocks(int64_t n, int per) { return static_cast<unsigned>((n + per - 1) / per); }

// A row op's result: the float itself, or cuBLAS's FP16 input (F32ToF16's bits).
__device__ __forceinline__ void StoreRowOut(float* y, size_t i, float v) { y[i] = v; }
__device__ __forceinline__ void StoreRowOut(uint16_t* y, size_t i, float v) { y[i] = GemmInputBits(v); }

// One block per row. The sum of squares accumulates in double, as the CPU's.
// A float y may be x (the output pass normalises in place), so neither is __restrict__.
template <typename Out>
__global__ void RmsNormKernel(const float* x, const float* __restrict__ w, int d, float eps,
                              Out* y) {
  AwaitPrecedingKernels();
  const float* xr = x + static_cast<size_t>(blockIdx.x) * d;
  Out* yr = y + static_cast<size_t>(blockIdx.x) * d;
  double s = 0.0;
  for (int i = threadIdx.x; i < d; i += blockDim.x) s += static_cast<double>(xr[i]) * xr[i];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(kFullMask, s, o);
  __shared__ double part[32];
  __shared__ float scale_sh;
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  if (lane == 0) part[warp] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    double tot = 0.0;
    for (int i = 0; i < (blockDim.x + 31) / 32; ++i) tot += part[i];
    const float mean = static_cast<float>(tot / d);
    scale_sh = 1.0f / sqrtf(__fadd_rn(mean, eps));
  }
  __syncthreads();
  const float scale = scale_sh;
  for (int i = threadIdx.x; i < d; i += blockDim.x) StoreRowOut(yr, i, __fmul_rn(__fmul_rn(xr[i], scale), w[i]));
}

// One thread per rotated pair. The angle follows ggml's recurrence theta_{i+1} = theta_i * scale
// in float; cos and sin are taken in double and rounded (what a correctly rounded libm gives).
__global__ void RopeKernel(float* __restrict__ x, const int32_t* __restrict__ pos, int n, int n_heads,
                           int head_dim, int rope_dim, float theta_scale, float freq_scale) {
  AwaitPrecedingKernels();
  const int half = rope_dim / 2;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<int64_t>(n) * n_heads * half) return;
  const int i = static_cast<int>(idx % half);
  const int h = static_cast<int>((idx / half) % n_heads);
  const int t = static_cast<int>(idx / (static_cast<int64_t>(half) * n_heads));
  float theta = __fmul_rn(static_cast<float>(pos[t]), freq_scale);
  for (int k = 0; k < i; ++k) theta = __fmul_rn(theta, theta_scale);
  const float c = static_cast<float>(cos(static_cast<double>(theta)));
  const float s = static_cast<float>(sin(static_cast<double>(theta)));
  float* v = x + (static_cast<size_t>(t) * n_heads + h) * head_dim + 2 * i;
  const float x0 = v[0], x1 = v[1];
  v[0] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
  v[1] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
}

// One thread per (token, head of q then of k, pair of dims): RoPE in place (RopeKernel's floats)
// for the pairs below rope_dim / 2; a k head's thread then writes its K pair and the matching V
// pair into the cache row of its token.
__global__ void RopeWriteKvKernel(float* __restrict__ q, float* __restrict__ k, const float* __restrict__ v,
                                  const int32_t* __restrict__ pos, const int32_t* __restrict__ slot_rows,
                                  int n, int n_head, int n_head_kv, int head_dim, int rope_dim,
                                  float theta_scale, float freq_scale, uint16_t* __restrict__ kc,
                                  uint16_t* __restrict__ vc, int64_t row_stride) {
  AwaitPrecedingKernels();
  const int pairs = head_dim / 2;
  const int heads = n_head + n_head_kv;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<int64_t>(n) * heads * pairs) return;
  const int i = static_cast<int>(idx % pairs);
  const int hh = static_cast<int>((idx / pairs) % heads);
  const int t = static_cast<int>(idx / (static_cast<int64_t>(pairs) * heads));
  const bool is_q = hh < n_head;
  const int h = is_q ? hh : hh - n_head;
  const int nh = is_q ? n_head : n_head_kv;
  const int64_t stride = row_stride > 0 ? row_stride : static_cast<int64_t>(nh) * head_dim;
  float* row = (is_q ? q : k) + static_cast<size_t>(t) * stride + h * head_dim + 2 * i;
  float x0 = row[0], x1 = row[1];
  if (i < rope_dim / 2) {
    float theta = __fmul_rn(static_cast<float>(pos[t]), freq_scale);
    for (int j = 0; j < i; ++j) theta = __fmul_rn(theta, theta_scale);
    const float c = static_cast<float>(cos(static_cast<double>(theta)));
    const float sn = static_cast<float>(sin(static_cast<double>(theta)));
    const float y0 = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, sn));
    const float y1 = __fadd_rn(__fmul_rn(x0, sn), __fmul_rn(x1, c));
    x0 = y0;
    x1 = y1;
    row[0] = x0;
    row[1] = x1;
  }
  if (!is_q) {
    const int dkv = n_head_kv * head_dim;
    const size_t src = static_cast<size_t>(t) * stride + h * head_dim + 2 * i;
    const size_t dst = static_cast<size_t>(slot_rows[t]) * dkv + h * head_dim + 2 * i;
    kc[dst] = FloatToHalfBits(x0);
    kc[dst + 1] = FloatToHalfBits(x1);
    vc[dst] = FloatToHalfBits(v[src]);
    vc[dst + 1] = FloatToHalfBits(v[src + 1]);
  }
}

// y = silu(g) * u over n floats, in place into g.
__global__ void SwiGluKernel(float* __restrict__ g, const float* __restrict__ u, int64_t n) {
  AwaitPrecedingKernels();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) g[i] = SwiGluValue(g[i], u[i]);
}

// y16[t][c] = cuBLAS's FP16 of silu(g[t * stride + c]) * u[t * stride + c] for n rows of ff.
__global__ void SwiGluF16Kernel(const float* __restrict__ g, const float* __restrict__ u, int64_t n,
                                int ff, int64_t stride, uint16_t* __restrict__ y) {
  AwaitPrecedingKernels();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * ff) return;
  const int64_t at = (i / ff) * stride + i % ff;
  y[i] = GemmInputBits(SwiGluValue(g[at], u[at]));
}

__global__ void AddKernel(float* __restrict__ y, const float* __restrict__ x, int64_t n) {
  AwaitPrecedingKernels();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __fadd_rn(y[i], x[i]);
}

__global__ void WriteKvKernel(const float* __restrict__ k, const float* __restrict__ v,
                              const int32_t* __restrict__ slot_rows, int n, int dkv,
                              uint16_t* __restrict__ kc, uint16_t* __restrict__ vc) {
  AwaitPrecedingKernels();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(n) * dkv) return;
  const int t = static_cast<int>(i / dkv), c = static_cast<int>(i % dkv);
  const size_t dst = static_cast<size_t>(slot_rows[t]) * dkv + c;
  kc[dst] = FloatToHalfBits(k[i]);
  vc[dst] = FloatToHalfBits(v[i]);
}

__global__ void GatherRowsKernel(const float* __restrict__ x, const int32_t* __restrict__ rows,
                                 int n, int d, float* __restrict__ out) {
  AwaitPrecedingKernels();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(n) * d) return;
  const int r = static_cast<int>(i / d), c = static_cast<int>(i % d);
  out[i] = x[static_cast<size_t>(rows[r]) * d + c];
}

// One block per row: each thread scans a strided slice, then (value, index) pairs reduce with the
// smaller index winning ties (the first maximum, as std::max_element). A lane that saw no element
// holds index n_vocab and loses to every lane that did, whatever its value (-inf included).
__device__ __forceinline__ bool ArgmaxBeats(float v, int i, float best, int bi, int n_vocab) {
  if (i == n_vocab) return false;
  return bi == n_vocab || v > best || (v == best && i < bi);
}

__global__ void ArgmaxKernel(const float* __restrict__ logits, int n_vocab, int32_t* __restrict__ out) {
  AwaitPrecedingKernels();
  const float* row = logits + static_cast<size_t>(blockIdx.x) * n_vocab;
  float best = -FLT_MAX;
  int bi = n_vocab;
  for (int i = threadIdx.x; i < n_vocab; i += blockDim.x) {
    const float v = row[i];
    if (v > best || bi == n_vocab) {
      best = v;
      bi = i;
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(kFullMask, best, o);
    const int oi = __shfl_xor_sync(kFullMask, bi, o);
    if (ArgmaxBeats(ov, oi, best, bi, n_vocab)) {
      best = ov;
      bi = oi;
    }
  }
  __shared__ float sv[32];
  __shared__ int si[32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  if (lane == 0) {
    sv[warp] = best;
    si[warp] = bi;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < blockDim.x / 32; ++w) {
      if (ArgmaxBeats(sv[w], si[w], best, bi, n_vocab)) {
        best = sv[w];
        bi = si[w];
      }
    }
    out[blockIdx.x] = bi;
  }
}

}  // namespace

void RmsNorm(const float* x, const float* weight, int n, int d, float eps, float* y,
             cudaStream_t stream) {
  if (n <= 0) return;
  RmsNormKernel<float><<<n, 256, 0, stream>>>(x, weight, d, eps, y);
  KINFER_CUDA_LAUNCH_CHECK();
}

void RmsNormF16(const float* x, const float* weight, int n, int d, float eps, uint16_t* y16,
                cudaStream_t stream) {
  if (n <= 0) return;
  RmsNormKernel<uint16_t><<<n, 256, 0, stream>>>(x, weight, d, eps, y16);
  KINFER_CUDA_LAUNCH_CHECK();
}

void RopeNormal(float* x, const int32_t* pos, int n, int n_heads, int head_dim, int rope_dim,
                float theta_scale, float freq_scale, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(n) * n_heads * (rope_dim / 2);
  if (total <= 0) return;
  RopeKernel<<<Blocks(total, 256), 256, 0, stream>>>(x, pos, n, n_heads, head_dim, rope_dim,
                                                      theta_scale, freq_scale);
  KINFER_CUDA_LAUNCH_CHECK();
}

void RopeWriteKv(float* q, float* k, const float* v, const int32_t* pos, const int32_t* slot_rows,
                 int n, int n_head, int n_head_kv, int head_dim, int rope_dim, float theta_scale,
                 float freq_scale, uint16_t* k_layer, uint16_t* v_layer, cudaStream_t stream,
                 int64_t row_stride) {
  const int64_t total = static_cast<int64_t>(n) * (n_head + n_head_kv) * (head_dim / 2);
  if (total <= 0) return;
  RopeWriteKvKernel<<<Blocks(total, 256), 256, 0, stream>>>(q, k, v, pos, slot_rows, n, n_head, n_head_kv,
                                                             head_dim, rope_dim, theta_scale, freq_scale,
                                                             k_layer, v_layer, row_stride);
  KINFER_CUDA_LAUNCH_CHECK();
}

void SwiGlu(float* gate, const float* up, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  SwiGluKernel<<<Blocks(n, 256), 256, 0, stream>>>(gate, up, n);
  KINFER_CUDA_LAUNCH_CHECK();
}

void SwiGluF16(const float* gate, const float* up, int n, int ff, int64_t row_stride, uint16_t* y16,
               cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(n) * ff;
  if (total <= 0) return;
  SwiGluF16Kernel<<<Blocks(total, 256), 256, 0, stream>>>(gate, up, n, ff, row_stride, y16);
  KINFER_CUDA_LAUNCH_CHECK();
}

void AddInPlace(float* y, const float* x, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  AddKernel<<<Blocks(n, 256), 256, 0, stream>>>(y, x, n);
  KINFER_CUDA_LAUNCH_CHECK();
}

void WriteKv(const float* k, const float* v, const int32_t* slot_rows, int n, int n_embd_kv,
             uint16_t* k_layer, uint16_t* v_layer, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(n) * n_embd_kv;
  if (total <= 0) return;
  WriteKvKernel<<<Blocks(total, 256), 256, 0, stream>>>(k, v, slot_rows, n, n_embd_kv, k_layer, v_layer);
  KINFER_CUDA_LAUNCH_CHECK();
}

void GatherRows(const float* x, const int32_t* rows, int n, int d, float* out, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(n) * d;
  if (total <= 0) return;
  GatherRowsKernel<<<Blocks(total, 256), 256, 0, stream>>>(x, rows, n, d, out);
  KINFER_CUDA_LAUNCH_CHECK();
}

void ArgmaxRows(const float* logits, int rows, int n_vocab, int32_t* out, cudaStream_t stream) {
  if (rows <= 0) return;
  ArgmaxKernel<<<rows, 256, 0, stream>>>(logits, n_vocab, out);
  KINFER_CUDA_LAUNCH_CHECK();
}

}  // namespace kinfer::cuda
