// Attention over the paged FP16 KV cache: a per-token kernel for decode steps and a tiled
// (flash-style) kernel for prompt chunks. Both use an online softmax in fp32.
//
//   cache row of position p of token g's sequence:
//     tables[seq_table_off[tok_seq[g]] + p / block_size] * block_size + p % block_size
//
// Numerics against the CPU (LlamaModel::Attention): the query is rounded to FP16 first, as there;
// dot products and the softmax run in fp32 (the CPU's denominator is a double) and the
// probabilities are not rounded to FP16 before they meet V (the CPU does on llama.cpp's batch
// path): a relative difference of at most ~2^-11 per probability, inside the stated tolerance.
#include <algorithm>
#include <atomic>
#include <cassert>
#include <cfloat>

#include <mma.h>

#include "runtime/backend/cuda/cuda_common.cuh"
#include "runtime/backend/cuda/cuda_kernels.h"

namespace kinfer::cuda {
namespace {

__device__ __forceinline__ size_t CacheRow(const AttnParams& p, int seq, int pos) {
  const int blk = p.tables[p.seq_table_off[seq] + pos / p.block_size];
  return static_cast<size_t>(blk) * p.block_size + pos % p.block_size;
}

// Where token g's rows start: of q, and (rope_on) of k_new / v_new (AttnParams::qkv_row).
__device__ __forceinline__ size_t QRow(const AttnParams& p, int g) {
  return static_cast<size_t>(g) * (p.qkv_row > 0 ? p.qkv_row : static_cast<int64_t>(p.n_head) * p.head_dim);
}
__device__ __forceinline__ size_t KvNewRow(const AttnParams& p, int g) {
  return static_cast<size_t>(g) * (p.qkv_row > 0 ? p.qkv_row : static_cast<int64_t>(p.n_head_kv) * p.head_dim);
}

// Element `at` of the attention output: a float in p.out, or cuBLAS's FP16 input in p.out16.
__device__ __forceinline__ void StoreAttnOut(const AttnParams& p, size_t at, float v) {
  if (p.out16 != nullptr) {
    p.out16[at] = GemmInputBits(v);
  } else {
    p.out[at] = v;
  }
}

// ---- decode: one block of 4 warps per (token, head); warp w takes positions w, w+4, ... -------
template <int E>  // head dims per lane: head_dim = 32 * E
__global__ void __launch_bounds__(128) AttnDecodeKernel(AttnParams p) {
  AwaitPrecedingKernels();
  constexpr int D = 32 * E;
  const int g = p.tok_index ? p.tok_index[blockIdx.x] : static_cast<int>(blockIdx.x);
  const int h = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int seq = p.tok_seq[g];
  const int npos = p.tok_pos[g] + 1;
  const int dkv = p.n_head_kv * D;
  const int kvh = h / (p.n_head / p.n_head_kv);
  float q[E];
  const float* qg = p.q + QRow(p, g) + h * D + lane * E;
#pragma unroll
  for (int e = 0; e < E; ++e) q[e] = __half2float(__float2half_rn(qg[e]));
  float m = -FLT_MAX, l = 0.0f, acc[E];
#pragma unroll
  for (int e = 0; e < E; ++e) acc[e] = 0.0f;
  for (int j = warp; j < npos; j += 4) {
    const size_t off = CacheRow(p, seq, j) * dkv + kvh * D + lane * E;
    const uint16_t* kr = p.k + off;
    const uint16_t* vr = p.v + off;
    float dot = 0.0f;
#pragma unroll
    for (int e = 0; e < E; ++e) dot += q[e] * HalfBitsToFloat(kr[e]);
    const float s = WarpSum(dot) * p.scale;
    const float mn = fmaxf(m, s);
    const float corr = __expf(m - mn);
    const float pr = __expf(s - mn);
    l = l * corr + pr;
#pragma unroll
    for (int e = 0; e < E; ++e) acc[e] = acc[e] * corr + pr * HalfBitsToFloat(vr[e]);
    m = mn;
  }
  __shared__ float sm[4], sl[4];
  __shared__ float sacc[4][D];
  if (lane == 0) {
    sm[warp] = m;
    sl[warp] = l;
  }
#pragma unroll
  for (int e = 0; e < E; ++e) sacc[warp][lane * E + e] = acc[e];
  __syncthreads();
  float M = sm[0];
  for (int w = 1; w < 4; ++w) M = fmaxf(M, sm[w]);
  float L = 0.0f, wgt[4];
  for (int w = 0; w < 4; ++w) {
    wgt[w] = sl[w] > 0.0f ? __expf(sm[w] - M) : 0.0f;
    L += sl[w] * wgt[w];
  }
  const size_t out_row = static_cast<size_t>(g) * p.n_head * D + h * D;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float o = 0.0f;
    for (int w = 0; w < 4; ++w) o += sacc[w][d] * wgt[w];
    StoreAttnOut(p, out_row + d, o / L);
  }
}

// ---- decode, shared K/V: one block of 4 warps per (token, KV head, split) ----------------------
//
//   lanes per position TG = D / 8 (each holds 8 dims as one 16-byte load of K and of V);
//   positions per warp per pass P = 32 / TG; a block covers 4 * P positions per pass, each
//   (warp, lane group) a "slot" with its own online softmax state for each of the G heads.
//   The slots merge in shared memory; with splits the partial states go to global scratch and
//   the last block of the token (an atomic count) merges them and resets its count.
__device__ __forceinline__ void Unpack8(const uint4 w, float* f) {
  const __half2* h = reinterpret_cast<const __half2*>(&w);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 v = __half22float2(h[i]);
    f[2 * i] = v.x;
    f[2 * i + 1] = v.y;
  }
}

// Element d of head h of token g's output, and with q8_out_on its Q8 block: lane l of a warp
// holds element d = 32 k + l of one head (the callers' loops give a warp 32 consecutive
// elements), so the warp quantizes the whole block. The whole warp calls it.
__device__ __forceinline__ void StoreDecodeOut(const AttnParams& p, int g, int h, int d, float v) {
  const size_t at = (static_cast<size_t>(g) * p.n_head + h) * p.head_dim + d;
  StoreAttnOut(p, at, v);
  if (p.q8_out_on) QuantBlock32(v, threadIdx.x & 31, static_cast<int64_t>(at / 32), p.q8_out);
}

// RoPE on 8 consecutive dims of one head (lane tl's: pairs 4 tl .. 4 tl + 3), given their
// angles: RopeWriteKvKernel's floats; pairs at or past rope_dim / 2 stay as they are.
__device__ __forceinline__ void RopePairs(float (&x)[8], const float (&c)[4], const float (&s)[4],
                                          int tl, int rope_dim) {
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    if (tl * 4 + k >= rope_dim / 2) continue;
    const float x0 = x[2 * k], x1 = x[2 * k + 1];
    x[2 * k] = __fsub_rn(__fmul_rn(x0, c[k]), __fmul_rn(x1, s[k]));
    x[2 * k + 1] = __fadd_rn(__fmul_rn(x0, s[k]), __fmul_rn(x1, c[k]));
  }
}

template <int D, int G>
__global__ void __launch_bounds__(128) AttnDecodeGqaKernel(AttnParams p) {
  AwaitPrecedingKernels();
  constexpr int TG = D / 8;
  constexpr int P = 32 / TG;
  constexpr int SLOTS = 4 * P;
  const int bx = blockIdx.x;
  const int g = p.tok_index ? p.tok_index[p.tok_base + bx] : p.tok_base + bx;
  const int kvh = blockIdx.y;
  const int split = blockIdx.z, n_split = gridDim.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int tl = lane % TG, slot = warp * P + lane / TG;
  const int seq = p.tok_seq[g];
  const int npos = p.tok_pos[g] + 1;
  const int chunk = p.invariant_max_pos > 0 ? InvariantSplitChunk(npos)
                                             : max(kDecodeSplitMinPositions, (npos + n_split - 1) / n_split);
  const int j0 = min(npos, split * chunk), j1 = min(npos, j0 + chunk);
  const int dkv = p.n_head_kv * D;

  // With rope_on: this lane's 4 pairs' angles (RopeWriteKv's floats), for the G query heads and,
  // in the block whose split holds the token's own position, for its k row, written to the cache
  // with v before any position is read.
  float rc[4], rs[4];
  if (p.rope_on) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int pair = tl * 4 + k;
      rc[k] = 1.0f;
      rs[k] = 0.0f;
      if (pair < p.rope_dim / 2) {
        float theta = __fmul_rn(static_cast<float>(npos - 1), p.freq_scale);
        for (int jj = 0; jj < pair; ++jj) theta = __fmul_rn(theta, p.theta_scale);
        rc[k] = static_cast<float>(cos(static_cast<double>(theta)));
        rs[k] = static_cast<float>(sin(static_cast<double>(theta)));
      }
    }
    if (slot == 0 && split == (npos - 1) / chunk) {
      const size_t src = KvNewRow(p, g) + kvh * D + tl * 8;
      float kr[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) kr[e] = p.k_new[src + e];
      RopePairs(kr, rc, rs, tl, p.rope_dim);
      const size_t dst = static_cast<size_t>(p.slot_rows[g]) * dkv + kvh * D + tl * 8;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        p.k_cache[dst + e] = FloatToHalfBits(kr[e]);
        p.v_cache[dst + e] = FloatToHalfBits(p.v_new[src + e]);
      }
    }
    __syncthreads();  // the token's own K/V row is in the cache for the block's reads
  }
  float q[G][8], acc[G][8], m[G], l[G];
#pragma unroll
  for (int i = 0; i < G; ++i) {
    const float* qh = p.q + QRow(p, g) + (kvh * G + i) * D + tl * 8;
#pragma unroll
    for (int e = 0; e < 8; ++e) q[i][e] = qh[e];
    if (p.rope_on) RopePairs(q[i], rc, rs, tl, p.rope_dim);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      q[i][e] = __half2float(__float2half_rn(q[i][e]));
      acc[i][e] = 0.0f;
    }
    m[i] = -FLT_MAX;
    l[i] = 0.0f;
  }
  // Every lane of a warp runs the same passes (the shuffles need them all); a slot past j1 only
  // joins the shuffles.
  for (int base = j0; base < j1; base += SLOTS) {
    const int j = base + slot;
    const bool valid = j < j1;
    float kf[8], vf[8];
    if (valid) {
      const size_t off = CacheRow(p, seq, j) * dkv + kvh * D + tl * 8;
      Unpack8(*reinterpret_cast<const uint4*>(p.k + off), kf);
      Unpack8(*reinterpret_cast<const uint4*>(p.v + off), vf);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) kf[e] = vf[e] = 0.0f;
    }
#pragma unroll
    for (int i = 0; i < G; ++i) {
      float dot = 0.0f;
#pragma unroll
      for (int e = 0; e < 8; ++e) dot += q[i][e] * kf[e];
#pragma unroll
      for (int o = TG / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(kFullMask, dot, o);
      if (valid) {
        const float s = dot * p.scale;
        const float mn = fmaxf(m[i], s);
        const float corr = __expf(m[i] - mn);
        const float pr = __expf(s - mn);
        l[i] = l[i] * corr + pr;
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[i][e] = acc[i][e] * corr + pr * vf[e];
        m[i] = mn;
      }
    }
  }
  __shared__ float sm[SLOTS][G], sl[SLOTS][G];
  __shared__ float sacc[SLOTS][G][D];
#pragma unroll
  for (int i = 0; i < G; ++i) {
    if (tl == 0) {
      sm[slot][i] = m[i];
      sl[slot][i] = l[i];
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) sacc[slot][i][tl * 8 + e] = acc[i][e];
  }
  __syncthreads();
  // Merge the slots: element (i, d) of the G x D output per thread, strided.
  float* part = nullptr;
  if (n_split > 1) {
    part = p.split_partial +
           (static_cast<size_t>(bx * p.n_head_kv + kvh) * n_split + split) * (G * (D + 2));
  }
  for (int x = threadIdx.x; x < G * D; x += blockDim.x) {
    const int i = x / D, d = x % D;
    float M = -FLT_MAX;
    for (int s = 0; s < SLOTS; ++s) M = fmaxf(M, sm[s][i]);
    float L = 0.0f, o = 0.0f;
    for (int s = 0; s < SLOTS; ++s) {
      const float w = sl[s][i] > 0.0f ? __expf(sm[s][i] - M) : 0.0f;
      L += sl[s][i] * w;
      o += sacc[s][i][d] * w;
    }
    if (part == nullptr) {
      StoreDecodeOut(p, g, kvh * G + i, d, o / L);
    } else {
      part[i * D + d] = o;
      if (d == 0) {
        part[G * D + i] = M;
        part[G * D + G + i] = L;
      }
    }
  }
  if (part == nullptr) return;
  // Split: the last of the token's blocks to get here merges every split's state.
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t* count = p.split_counters + bx * p.n_head_kv + kvh;
    last = atomicAdd(count, 1) == n_split - 1;
    if (last) *count = 0;  // every other block of this token has counted already
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  const float* parts =
      p.split_partial + static_cast<size_t>(bx * p.n_head_kv + kvh) * n_split * (G * (D + 2));
  for (int x = threadIdx.x; x < G * D; x += blockDim.x) {
    const int i = x / D, d = x % D;
    float M = -FLT_MAX;
    for (int s = 0; s < n_split; ++s) M = fmaxf(M, __ldcg(parts + s * (G * (D + 2)) + G * D + i));
    float L = 0.0f, o = 0.0f;
    for (int s = 0; s < n_split; ++s) {
      const float* ps = parts + s * (G * (D + 2));
      const float ls = __ldcg(ps + G * D + G + i);
      const float ms = __ldcg(ps + G * D + i);
      // (w is exactly 1 for the split holding the maximum: a token whose positions fit one split
      // gets the bits it gets unsplit.)
      const float w = ls > 0.0f ? (ms == M ? 1.0f : __expf(ms - M)) : 0.0f;
      L += ls * w;
      o += __ldcg(ps + i * D + d) * w;
    }
    StoreDecodeOut(p, g, kvh * G + i, d, o / L);
  }
}

// ---- prefill: one block of 128 threads per (tile of 32 queries of one sequence, head) ----------
//
//   thread t: query row r = t / 4 of the tile, quarter c4 = t % 4
//   S tile 32 x 32: thread computes columns c4, c4 + 4, ..., c4 + 28 of its row
//   O tile 32 x D:  thread owns dims [c4 * D/4, (c4 + 1) * D/4) of its row
template <int D>
__global__ void __launch_bounds__(128) AttnPrefillKernel(AttnParams p, const int32_t* __restrict__ tiles,
                                                         const int32_t* __restrict__ tile_len) {
  AwaitPrecedingKernels();
  constexpr int T = kPrefillTile;
  constexpr int DP = D + 1;  // padded rows: no bank conflicts across query / key rows
  constexpr int DQ = D / 4;
  extern __shared__ float smem[];
  float* Qs = smem;          // [T][DP]
  float* Ks = Qs + T * DP;   // [T][DP]
  float* Vs = Ks + T * DP;   // [T][D]
  float* S = Vs + T * D;     // [T][T + 1]
  const int tile = blockIdx.x, h = blockIdx.y;
  const int g0 = tiles[tile], n = tile_len[tile];
  const int seq = p.tok_seq[g0];
  const int pos0 = p.tok_pos[g0];
  const int maxpos = pos0 + n - 1;
  const int dkv = p.n_head_kv * D;
  const int kvh = h / (p.n_head / p.n_head_kv);
  const int tid = threadIdx.x, r = tid / 4, c4 = tid % 4;
  const int qpos = pos0 + (r < n ? r : n - 1);

  for (int i = tid; i < T * D; i += blockDim.x) {
    const int rr = i / D, k = i % D;
    const int gg = g0 + (rr < n ? rr : n - 1);
    Qs[rr * DP + k] = __half2float(__float2half_rn(p.q[QRow(p, gg) + h * D + k]));
  }
  float o[DQ];
#pragma unroll
  for (int e = 0; e < DQ; ++e) o[e] = 0.0f;
  float m = -FLT_MAX, l = 0.0f;

  for (int j0 = 0; j0 <= maxpos; j0 += T) {
    __syncthreads();  // the previous tile's K/V/S are no longer read
    for (int i = tid; i < T * D; i += blockDim.x) {
      const int rr = i / D, k = i % D;
      const int pos = j0 + rr;
      float kv = 0.0f, vv = 0.0f;
      if (pos <= maxpos) {
        const size_t off = CacheRow(p, seq, pos) * dkv + kvh * D + k;
        kv = HalfBitsToFloat(p.k[off]);
        vv = HalfBitsToFloat(p.v[off]);
      }
      Ks[rr * DP + k] = kv;
      Vs[rr * D + k] = vv;
    }
    __syncthreads();
    float s[T / 4];
    float rmax = -FLT_MAX;
#pragma unroll
    for (int i = 0; i < T / 4; ++i) {
      const int c = c4 + 4 * i;
      float dot = 0.0f;
#pragma unroll 16
      for (int k = 0; k < D; ++k) dot += Qs[r * DP + k] * Ks[c * DP + k];
      s[i] = (j0 + c <= qpos) ? dot * p.scale : -FLT_MAX;
      rmax = fmaxf(rmax, s[i]);
    }
    rmax = fmaxf(rmax, __shfl_xor_sync(kFullMask, rmax, 1));
    rmax = fmaxf(rmax, __shfl_xor_sync(kFullMask, rmax, 2));
    const float mn = fmaxf(m, rmax);
    const float corr = __expf(m - mn);
    float rsum = 0.0f;
#pragma unroll
    for (int i = 0; i < T / 4; ++i) {
      const float e = (s[i] == -FLT_MAX) ? 0.0f : __expf(s[i] - mn);
      S[r * (T + 1) + c4 + 4 * i] = e;
      rsum += e;
    }
    rsum += __shfl_xor_sync(kFullMask, rsum, 1);
    rsum += __shfl_xor_sync(kFullMask, rsum, 2);
    l = l * corr + rsum;
    m = mn;
    __syncwarp();
#pragma unroll
    for (int e = 0; e < DQ; ++e) o[e] *= corr;
    for (int c = 0; c < T; ++c) {
      const float pc = S[r * (T + 1) + c];
#pragma unroll
      for (int e = 0; e < DQ; ++e) o[e] += pc * Vs[c * D + c4 * DQ + e];
    }
  }
  if (r < n) {
    const size_t out_at = static_cast<size_t>(g0 + r) * p.n_head * D + h * D + c4 * DQ;
    const float inv = 1.0f / l;
#pragma unroll
    for (int e = 0; e < DQ; ++e) StoreAttnOut(p, out_at + e, o[e] * inv);
  }
}

// Opts a kernel into more than 48 KB of dynamic shared memory, once per device: the attribute is
// per device, and backends on two devices (or two threads) may launch the same kernel. A failure
// is left to the launch, which then reports it (EnqueueErrors).
template <typename Kernel>
void AllowDynamicSmem(Kernel kernel, size_t smem, std::atomic<uint64_t>* configured) {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return;
  const uint64_t bit = uint64_t{1} << dev;
  if (configured->load(std::memory_order_acquire) & bit) return;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(smem)) == cudaSuccess) {
    configured->fetch_or(bit, std::memory_order_release);
  }
}

template <int D>
size_t PrefillSmem() {
  return sizeof(float) * (2 * kPrefillTile * (D + 1) + kPrefillTile * D + kPrefillTile * (kPrefillTile + 1));
}

template <int D>
void LaunchPrefill(const AttnParams& p, const int32_t* tiles, const int32_t* tile_len, int n_tiles,
                   cudaStream_t stream) {
  static std::atomic<uint64_t> configured{0};  // a bit per device
  const size_t smem = PrefillSmem<D>();
  AllowDynamicSmem(AttnPrefillKernel<D>, smem, &configured);
  AttnPrefillKernel<D><<<dim3(n_tiles, p.n_head), 128, smem, stream>>>(p, tiles, tile_len);
}

// ---- prefill on the tensor cores (WMMA 16x16x16, FP16 in, fp32 accumulate) ------------------
//
//   block of 4 warps per (tile of 64 queries of one sequence, head); warp w owns query rows
//   [16w, 16w + 16). Per 64-position K/V tile:
//     S_w = Q_w K^T          (WMMA, fp32, into shared memory)
//     online softmax on S_w  (2 lanes a row; P = exp(s - m) rounded to FP16)
//     O_w = O_w * corr + P_w V  (O kept in shared memory: WMMA fragments cannot be scaled by row)
template <int D>
__global__ void __launch_bounds__(128) AttnPrefillTcKernel(AttnParams p, const int32_t* __restrict__ tiles,
                                                           const int32_t* __restrict__ tile_len) {
  AwaitPrecedingKernels();
  using namespace nvcuda;
  constexpr int BQ = kPrefillTileTc, BK = 64;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  half* Qh = reinterpret_cast<half*>(smem_raw);  // [BQ][D]
  half* Kh = Qh + BQ * D;                        // [BK][D]
  half* Vh = Kh + BK * D;                        // [BK][D]
  half* Ph = Vh + BK * D;                        // [BQ][BK]
  float* S = reinterpret_cast<float*>(Ph + BQ * BK);  // [BQ][BK]
  float* O = S + BQ * BK;                             // [BQ][D]
  float* row_m = O + BQ * D;
  float* row_l = row_m + BQ;
  float* row_c = row_l + BQ;
  const int tile = blockIdx.x, h = blockIdx.y;
  const int g0 = tiles[tile], n = tile_len[tile];
  const int seq = p.tok_seq[g0];
  const int pos0 = p.tok_pos[g0];
  const int maxpos = pos0 + n - 1;
  const int dkv = p.n_head_kv * D;
  const int kvh = h / (p.n_head / p.n_head_kv);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid & 31;

  for (int i = tid; i < BQ * D; i += blockDim.x) {
    const int r = i / D, c = i % D;
    const int gg = g0 + (r < n ? r : n - 1);
    Qh[i] = __float2half_rn(p.q[QRow(p, gg) + h * D + c]);
    O[i] = 0.0f;
  }
  if (tid < BQ) {
    row_m[tid] = -FLT_MAX;
    row_l[tid] = 0.0f;
  }
  // The softmax lanes: row r of the tile, columns [c0, c0 + 32).
  const int sr = warp * 16 + lane / 2;
  const int c0 = (lane & 1) * 32;
  const int qpos = pos0 + (sr < n ? sr : n - 1);

  for (int j0 = 0; j0 <= maxpos; j0 += BK) {
    __syncthreads();  // the previous tile's K/V are no longer read (and Q, O, rows are set)
    for (int i = tid; i < BK * D; i += blockDim.x) {
      const int r = i / D, c = i % D;
      const int pos = j0 + r;
      uint16_t kb = 0, vb = 0;
      if (pos <= maxpos) {
        const size_t off = CacheRow(p, seq, pos) * dkv + kvh * D + c;
        kb = p.k[off];
        vb = p.v[off];
      }
      Kh[i] = __ushort_as_half(kb);
      Vh[i] = __ushort_as_half(vb);
    }
    __syncthreads();
    // S_w = Q_w K^T
#pragma unroll
    for (int cb = 0; cb < BK / 16; ++cb) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.0f);
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> b;
        wmma::load_matrix_sync(a, Qh + warp * 16 * D + kk * 16, D);
        wmma::load_matrix_sync(b, Kh + cb * 16 * D + kk * 16, D);
        wmma::mma_sync(acc, a, b, acc);
      }
      wmma::store_matrix_sync(S + warp * 16 * BK + cb * 16, acc, BK, wmma::mem_row_major);
    }
    __syncwarp();
    // Online softmax, two lanes a row.
    float tmax = -FLT_MAX;
    for (int c = c0; c < c0 + 32; ++c) {
      if (j0 + c <= qpos) tmax = fmaxf(tmax, S[sr * BK + c] * p.scale);
    }
    tmax = fmaxf(tmax, __shfl_xor_sync(kFullMask, tmax, 1));
    const float m_old = row_m[sr];
    const float m_new = fmaxf(m_old, tmax);
    float sum = 0.0f;
    for (int c = c0; c < c0 + 32; ++c) {
      const float e = (j0 + c <= qpos) ? __expf(S[sr * BK + c] * p.scale - m_new) : 0.0f;
      const half eh = __float2half_rn(e);
      Ph[sr * BK + c] = eh;
      sum += __half2float(eh);
    }
    sum += __shfl_xor_sync(kFullMask, sum, 1);
    const float corr = __expf(m_old - m_new);
    __syncwarp();
    if ((lane & 1) == 0) {
      row_m[sr] = m_new;
      row_l[sr] = row_l[sr] * corr + sum;
      row_c[sr] = corr;
    }
    __syncwarp();
    for (int i = lane; i < 16 * D; i += 32) {
      const int r = warp * 16 + i / D;
      O[r * D + i % D] *= row_c[r];
    }
    __syncwarp();
    // O_w += P_w V
#pragma unroll
    for (int db = 0; db < D / 16; ++db) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::load_matrix_sync(acc, O + warp * 16 * D + db * 16, D, wmma::mem_row_major);
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> b;
        wmma::load_matrix_sync(a, Ph + warp * 16 * BK + kk * 16, BK);
        wmma::load_matrix_sync(b, Vh + kk * 16 * D + db * 16, D);
        wmma::mma_sync(acc, a, b, acc);
      }
      wmma::store_matrix_sync(O + warp * 16 * D + db * 16, acc, D, wmma::mem_row_major);
    }
  }
  __syncthreads();
  for (int i = tid; i < BQ * D; i += blockDim.x) {
    const int r = i / D;
    if (r < n) StoreAttnOut(p, static_cast<size_t>(g0 + r) * p.n_head * D + h * D + i % D, O[i] / row_l[r]);
  }
}

template <int D>
size_t PrefillTcSmem() {
  constexpr int BQ = kPrefillTileTc, BK = 64;
  return sizeof(half) * (BQ * D + 2 * BK * D + BQ * BK) + sizeof(float) * (BQ * BK + BQ * D + 3 * BQ);
}

template <int D>
void LaunchPrefillTc(const AttnParams& p, const int32_t* tiles, const int32_t* tile_len, int n_tiles,
                     cudaStream_t stream) {
  static std::atomic<uint64_t> configured{0};  // a bit per device
  const size_t smem = PrefillTcSmem<D>();
  AllowDynamicSmem(AttnPrefillTcKernel<D>, smem, &configured);
  AttnPrefillTcKernel<D><<<dim3(n_tiles, p.n_head), 128, smem, stream>>>(p, tiles, tile_len);
}

}  // namespace

namespace {

template <int D>
void LaunchDecodeGqa(const AttnParams& p, int splits, cudaStream_t stream) {
  using Kernel = void (*)(AttnParams);
  static constexpr Kernel kByGroup[kMaxGqaGroup] = {
      AttnDecodeGqaKernel<D, 1>, AttnDecodeGqaKernel<D, 2>, AttnDecodeGqaKernel<D, 3>,
      AttnDecodeGqaKernel<D, 4>, AttnDecodeGqaKernel<D, 5>, AttnDecodeGqaKernel<D, 6>,
      AttnDecodeGqaKernel<D, 7>, AttnDecodeGqaKernel<D, 8>};
  static_assert(kMaxGqaGroup == 8, "one kernel per group size");
  const dim3 grid(p.n_tok, p.n_head_kv, splits);
  kByGroup[p.n_head / p.n_head_kv - 1]<<<grid, 128, 0, stream>>>(p);  // SharedKvDecodeApplies: 1-8
}

}  // namespace

bool SharedKvDecodeApplies(const AttnParams& p) {
  if (p.per_head_decode || p.n_head_kv <= 0 || p.n_head % p.n_head_kv != 0) return false;
  const int group = p.n_head / p.n_head_kv;
  return (p.head_dim == 64 || p.head_dim == 128) && group >= 1 && group <= kMaxGqaGroup;
}

int DecodeSplits(const AttnParams& p) {
  if (!SharedKvDecodeApplies(p) || !p.split_partial || !p.split_counters || p.n_tok <= 0) return 1;
  const int blocks = p.n_tok * p.n_head_kv;
  if (blocks > p.max_split_blocks) return 1;
  const int want = std::min(kMaxDecodeSplit, std::max(1, 2 * p.sm_count / blocks));
  return std::max(1, std::min(want, p.max_split_blocks / blocks));
}

void AttentionDecode(const AttnParams& p, cudaStream_t stream) {
  if (p.n_tok <= 0) return;
  assert(SharedKvDecodeApplies(p) || (!p.q8_out_on && !p.rope_on));  // callers ask first
  if (SharedKvDecodeApplies(p) && p.invariant_max_pos > 0 && p.split_partial && p.split_counters) {
    // Batch invariance: the splits of the longest token, the launch cut to fit the scratch.
    const int splits = InvariantSplits(p.invariant_max_pos);
    const int per = splits == 1 ? p.n_tok : std::max(1, p.max_split_blocks / (p.n_head_kv * splits));
    for (int t0 = 0; t0 < p.n_tok; t0 += per) {
      AttnParams part = p;
      part.tok_base = p.tok_base + t0;
      part.n_tok = std::min(per, p.n_tok - t0);
      if (p.head_dim == 64)
        LaunchDecodeGqa<64>(part, splits, stream);
      else
        LaunchDecodeGqa<128>(part, splits, stream);
    }
    KINFER_CUDA_LAUNCH_CHECK();
    return;
  }
  if (SharedKvDecodeApplies(p)) {
    const int splits = DecodeSplits(p);
    if (p.head_dim == 64)
      LaunchDecodeGqa<64>(p, splits, stream);
    else
      LaunchDecodeGqa<128>(p, splits, stream);
    KINFER_CUDA_LAUNCH_CHECK();
    return;
  }
  const dim3 grid(p.n_tok, p.n_head);
  switch (p.head_dim / 32) {
    case 1: AttnDecodeKernel<1><<<grid, 128, 0, stream>>>(p); break;
    case 2: AttnDecodeKernel<2><<<grid, 128, 0, stream>>>(p); break;
    case 3: AttnDecodeKernel<3><<<grid, 128, 0, stream>>>(p); break;
    case 4: AttnDecodeKernel<4><<<grid, 128, 0, stream>>>(p); break;
    case 5: AttnDecodeKernel<5><<<grid, 128, 0, stream>>>(p); break;
    case 6: AttnDecodeKernel<6><<<grid, 128, 0, stream>>>(p); break;
    case 7: AttnDecodeKernel<7><<<grid, 128, 0, stream>>>(p); break;
    case 8: AttnDecodeKernel<8><<<grid, 128, 0, stream>>>(p); break;
    default: break;  // the backend refuses such models at load
  }
  KINFER_CUDA_LAUNCH_CHECK();
}

bool AttentionPrefillSupports(int head_dim) { return head_dim == 64 || head_dim == 128; }

void AttentionPrefill(const AttnParams& p, const int32_t* tiles, const int32_t* tile_len, int n_tiles,
                      bool tensor_cores, cudaStream_t stream) {
  if (n_tiles <= 0) return;
  if (tensor_cores) {
    if (p.head_dim == 64) LaunchPrefillTc<64>(p, tiles, tile_len, n_tiles, stream);
    else if (p.head_dim == 128) LaunchPrefillTc<128>(p, tiles, tile_len, n_tiles, stream);
  } else {
    if (p.head_dim == 64) LaunchPrefill<64>(p, tiles, tile_len, n_tiles, stream);
    else if (p.head_dim == 128) LaunchPrefill<128>(p, tiles, tile_len, n_tiles, stream);
  }
  KINFER_CUDA_LAUNCH_CHECK();
}

}  // namespace kinfer::cuda
