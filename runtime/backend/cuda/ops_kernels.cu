// Row and element-wise ops of the forward pass (runtime/model/ops.h on the device), the KV-cache
// write, row gathers, and the samplers (argmax; DrawToken's rule).
#include <cfloat>
#include <climits>

#include "runtime/backend/cuda/cuda_common.cuh"
#include "runtime/backend/cuda/cuda_kernels.h"

namespace kinfer::cuda {
namespace {

inline unsigned Blocks(int64_t n, int per) { return static_cast<unsigned>((n + per - 1) / per); }

// One block per row. The sum of squares accumulates in double, as the CPU's.
// y may be x (the output pass normalises in place), so neither is __restrict__.
__global__ void RmsNormKernel(const float* x, const float* __restrict__ w, int d, float eps,
                              float* y) {
  const float* xr = x + static_cast<size_t>(blockIdx.x) * d;
  float* yr = y + static_cast<size_t>(blockIdx.x) * d;
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
  for (int i = threadIdx.x; i < d; i += blockDim.x) yr[i] = __fmul_rn(__fmul_rn(xr[i], scale), w[i]);
}

// One thread per rotated pair. The angle follows ggml's recurrence theta_{i+1} = theta_i * scale
// in float; cos and sin are taken in double and rounded (what a correctly rounded libm gives).
__global__ void RopeKernel(float* __restrict__ x, const int32_t* __restrict__ pos, int n, int n_heads,
                           int head_dim, int rope_dim, float theta_scale, float freq_scale) {
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
                                  uint16_t* __restrict__ vc) {
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
  float* row = (is_q ? q : k) + (static_cast<size_t>(t) * nh + h) * head_dim + 2 * i;
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
    const size_t src = static_cast<size_t>(t) * dkv + h * head_dim + 2 * i;
    const size_t dst = static_cast<size_t>(slot_rows[t]) * dkv + h * head_dim + 2 * i;
    kc[dst] = FloatToHalfBits(x0);
    kc[dst + 1] = FloatToHalfBits(x1);
    vc[dst] = FloatToHalfBits(v[src]);
    vc[dst + 1] = FloatToHalfBits(v[src + 1]);
  }
}

__global__ void SwiGluKernel(float* __restrict__ g, const float* __restrict__ u, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = g[i];
  const float e = static_cast<float>(exp(-static_cast<double>(v)));
  g[i] = __fmul_rn(__fdiv_rn(v, __fadd_rn(1.0f, e)), u[i]);
}

__global__ void AddKernel(float* __restrict__ y, const float* __restrict__ x, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __fadd_rn(y[i], x[i]);
}

__global__ void WriteKvKernel(const float* __restrict__ k, const float* __restrict__ v,
                              const int32_t* __restrict__ slot_rows, int n, int dkv,
                              uint16_t* __restrict__ kc, uint16_t* __restrict__ vc) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(n) * dkv) return;
  const int t = static_cast<int>(i / dkv), c = static_cast<int>(i % dkv);
  const size_t dst = static_cast<size_t>(slot_rows[t]) * dkv + c;
  kc[dst] = FloatToHalfBits(k[i]);
  vc[dst] = FloatToHalfBits(v[i]);
}

__global__ void GatherRowsKernel(const float* __restrict__ x, const int32_t* __restrict__ rows,
                                 int n, int d, float* __restrict__ out) {
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

// (v, i) ranks before (v2, i2) when v > v2, or v == v2 and i < i2.
__device__ __forceinline__ bool Before(float v, int i, float v2, int i2) {
  return v > v2 || (v == v2 && i < i2);
}

// Block-wide maximum of an int (every thread gets it). blockDim.x a multiple of 32, <= 1024.
__device__ int BlockMaxInt(int v, int* shared32) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(kFullMask, v, o));
  if (lane == 0) shared32[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < blockDim.x / 32; ++w) v = max(v, shared32[w]);
    shared32[0] = v;
  }
  __syncthreads();
  return shared32[0];
}

// One block of kSampleThreads per row, DrawToken's rule (runtime/sample/draw.h):
//   1. k rounds of a block-wide argmax, each over the elements ranked after the previous round's
//      winner (no membership tests): the top k in DrawToken's best-first order (one round for
//      greedy rows and for whole-vocabulary draws: the maximum).
//   2. top k: thread 0 applies top-p, min-p and the draw over the k, in double, in that order.
//   3. the whole vocabulary (in id order, as DrawToken keeps it when nothing sorts): each thread
//      sums the probabilities of a contiguous chunk of ids; thread 0 turns the sums into chunk
//      offsets; the thread whose chunk holds uniform x total walks it to the token.
constexpr int kSampleThreads = 256;

__global__ void __launch_bounds__(kSampleThreads)
    SampleRowsKernel(const float* __restrict__ logits, int n_vocab,
                     const DeviceDraw* __restrict__ draws, int32_t* __restrict__ out) {
  const float* row = logits + static_cast<size_t>(blockIdx.x) * n_vocab;
  const DeviceDraw dr = draws[blockIdx.x];
  __shared__ float cv[kMaxTopK];
  __shared__ int ci[kMaxTopK];
  __shared__ float wv[32];
  __shared__ int wi[32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, nwarps = blockDim.x / 32;
  const bool greedy = !(dr.temperature > 0.0f);
  const int k = greedy ? 1 : dr.top_k;  // 0: the whole vocabulary
  const int rounds = k > 0 ? k : 1;
  float last_v = FLT_MAX;
  int last_i = -1;
  for (int j = 0; j < rounds; ++j) {
    float best = -FLT_MAX;
    int bi = n_vocab;
    for (int i = threadIdx.x; i < n_vocab; i += blockDim.x) {
      const float v = row[i];
      const bool after = j == 0 || Before(last_v, last_i, v, i);
      if (after && (bi == n_vocab || Before(v, i, best, bi))) {
        best = v;
        bi = i;
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(kFullMask, best, o);
      const int oi = __shfl_xor_sync(kFullMask, bi, o);
      if (oi != n_vocab && (bi == n_vocab || Before(ov, oi, best, bi))) {
        best = ov;
        bi = oi;
      }
    }
    if (lane == 0) {
      wv[warp] = best;
      wi[warp] = bi;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < nwarps; ++w) {
        if (wi[w] != n_vocab && (bi == n_vocab || Before(wv[w], wi[w], best, bi))) {
          best = wv[w];
          bi = wi[w];
        }
      }
      cv[j] = best;
      ci[j] = bi;
    }
    __syncthreads();
    last_v = cv[j];
    last_i = ci[j];
    __syncthreads();
  }
  const float mx = cv[0];
  if (greedy) {
    if (threadIdx.x == 0) out[blockIdx.x] = ci[0];
    return;
  }
  const double inv_t = 1.0 / static_cast<double>(dr.temperature);
  if (k > 0) {
    if (threadIdx.x != 0) return;
    int keep = k;
    if (dr.top_p < 1.0f && keep > 1) {  // top-p over the temperature-1 probabilities
      double total = 0.0;
      for (int j = 0; j < keep; ++j) total += exp(static_cast<double>(cv[j] - mx));
      const double target = static_cast<double>(dr.top_p) * total;
      double cum = 0.0;
      int n = 0;
      while (true) {
        cum += exp(static_cast<double>(cv[n] - mx));
        ++n;
        if (cum >= target || n == keep) break;
      }
      keep = n;
    }
    if (dr.min_p > 0.0f && keep > 1) {  // the survivors are best first: min-p keeps a prefix
      const float threshold = mx + dr.log_min_p;
      int n = 0;
      while (n < keep && !(cv[n] < threshold)) ++n;
      keep = n;
    }
    if (keep <= 1) {
      out[blockIdx.x] = ci[0];
      return;
    }
    double p[kMaxTopK];
    double total = 0.0;
    for (int j = 0; j < keep; ++j) total += (p[j] = exp(static_cast<double>(cv[j] - mx) * inv_t));
    const double u = dr.uniform * total;
    double cum = 0.0;
    int pick = -1;
    for (int j = 0; j < keep && pick < 0; ++j) {
      cum += p[j];
      if (u < cum) pick = j;
    }
    for (int j = keep; pick < 0 && j-- > 0;) {
      if (p[j] > 0.0) pick = j;
    }
    out[blockIdx.x] = ci[pick < 0 ? 0 : pick];
    return;
  }

  // The whole vocabulary, min-p as a threshold on the logit.
  __shared__ double offset[kSampleThreads];
  __shared__ double total_sh;
  __shared__ int pick_sh;
  const bool min_p = dr.min_p > 0.0f && n_vocab > 1;
  const float threshold = mx + dr.log_min_p;
  const int chunk = (n_vocab + blockDim.x - 1) / blockDim.x;
  const int b = min(n_vocab, static_cast<int>(threadIdx.x) * chunk), e = min(n_vocab, b + chunk);
  double sum = 0.0;
  int last_nonzero = -1;
  for (int i = b; i < e; ++i) {
    const float v = row[i];
    if (min_p && v < threshold) continue;
    const double pr = exp(static_cast<double>(v - mx) * inv_t);
    sum += pr;
    if (pr > 0.0) last_nonzero = i;
  }
  offset[threadIdx.x] = sum;
  if (threadIdx.x == 0) pick_sh = INT_MAX;
  __syncthreads();
  if (threadIdx.x == 0) {
    double acc = 0.0;
    for (int t = 0; t < blockDim.x; ++t) {
      const double v = offset[t];
      offset[t] = acc;
      acc += v;
    }
    total_sh = acc;
  }
  __syncthreads();
  const double u = dr.uniform * total_sh;
  const double lo = offset[threadIdx.x];
  const double hi = threadIdx.x + 1 < blockDim.x ? offset[threadIdx.x + 1] : total_sh;
  if (u >= lo && u < hi) {
    double cum = lo;
    int pick = -1;
    for (int i = b; i < e && pick < 0; ++i) {
      const float v = row[i];
      if (min_p && v < threshold) continue;
      cum += exp(static_cast<double>(v - mx) * inv_t);
      if (u < cum) pick = i;
    }
    if (pick < 0) pick = last_nonzero;  // rounding within the chunk
    if (pick >= 0) atomicMin(&pick_sh, pick);
  }
  __syncthreads();
  const int picked = pick_sh;
  // Rounding that leaves u at or past the end: the last token whose probability is not zero.
  const int fallback = BlockMaxInt(last_nonzero, wi);
  if (threadIdx.x == 0) out[blockIdx.x] = picked != INT_MAX ? picked : max(fallback, 0);
}

}  // namespace

void SampleRows(const float* logits, int rows, int n_vocab, const DeviceDraw* draws, int32_t* out,
                cudaStream_t stream) {
  if (rows <= 0) return;
  SampleRowsKernel<<<rows, kSampleThreads, 0, stream>>>(logits, n_vocab, draws, out);
}

void RmsNorm(const float* x, const float* weight, int n, int d, float eps, float* y,
             cudaStream_t stream) {
  if (n <= 0) return;
  RmsNormKernel<<<n, 256, 0, stream>>>(x, weight, d, eps, y);
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
                 float freq_scale, uint16_t* k_layer, uint16_t* v_layer, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(n) * (n_head + n_head_kv) * (head_dim / 2);
  if (total <= 0) return;
  RopeWriteKvKernel<<<Blocks(total, 256), 256, 0, stream>>>(q, k, v, pos, slot_rows, n, n_head, n_head_kv,
                                                             head_dim, rope_dim, theta_scale, freq_scale,
                                                             k_layer, v_layer);
  KINFER_CUDA_LAUNCH_CHECK();
}

void SwiGlu(float* gate, const float* up, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  SwiGluKernel<<<Blocks(n, 256), 256, 0, stream>>>(gate, up, n);
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
