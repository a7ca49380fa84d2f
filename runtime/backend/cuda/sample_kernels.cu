// The device sampler: DrawToken's rule (runtime/sample/draw.h) on a block per logits row, for
// every plain draw (greedy, top-k, top-p, min-p, temperature; cuda_kernels.h SampleRows), after
// the rows' logit bias and penalties (AdjustLogitsRows).
#include <cfloat>
#include <climits>
#include <cstdint>

#include "runtime/backend/cuda/cuda_common.cuh"
#include "runtime/backend/cuda/cuda_kernels.h"
#include "runtime/sample/draw_noise.h"

namespace kinfer::cuda {
namespace {

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

constexpr int kSampleThreads = 256;

// ---- the draw: Gumbel-max over the survivors (runtime/sample/draw.h) -----------------------

// Folds token i into a thread's best (s, id) (FoldDraw, runtime/sample/draw_noise.h): its scaled
// logit rounded as DrawToken rounds it (the difference in float, then a product that __dmul_rn
// keeps from being fused). A token that MayReach rules out for this thread's best cannot reach
// the block's either, which is at least this thread's.
__device__ __forceinline__ void Consider(float v, float mx, double inv_t, uint64_t key, int i,
                                         double* s, int* id) {
  FoldDraw(__dmul_rn(static_cast<double>(v - mx), inv_t), key, i, s, id);
}
// The block's best (score, id) of every thread's (id -1: none); every thread gets the id. sv and
// si hold 33 entries. The order is total over distinct ids, so the butterfly's grouping does
// not matter.
__device__ int BlockBest(double s, int id, double* sv, int* si) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, nwarps = blockDim.x / 32;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const double os = __shfl_xor_sync(kFullMask, s, o);
    const int oi = __shfl_xor_sync(kFullMask, id, o);
    if (DrawBeats(os, oi, s, id)) {
      s = os;
      id = oi;
    }
  }
  if (lane == 0) {
    sv[warp] = s;
    si[warp] = id;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < nwarps; ++w) {
      if (DrawBeats(sv[w], si[w], s, id)) {
        s = sv[w];
        id = si[w];
      }
    }
    si[32] = id;
  }
  __syncthreads();
  return si[32];
}

// ---- cuts: the rows the k rounds cannot take ------------------------------------------------
//
// Top-p over more than kMaxTopK tokens (top_k 0 with top_p < 1) and top-k above kMaxTopK. Each
// truncation DrawToken applies keeps a prefix of the best-first order (larger logit, then lower
// id), so the survivors are always one Cut: the tokens whose logit ranks above the cut's, and
// those at its logit whose id is at most the cut's id. Each step finds its cut by bisecting
// over the logits' order keys (at most 32 passes over the row, each a block-wide sum), then
// places the cut among the tokens tied at that logit in id order:
//   top-k: the largest key with at least k tokens at or above it;
//   top-p: the largest key whose mass at or above it (exp(l - max), in double) reaches top_p x
//          the survivors' total; the tied tokens are added one by one until it does, as
//          DrawToken's walk adds them;
//   min-p: a threshold on the logit, so the cut moves up to it;
//   draw:  Gumbel-max over the tokens in the cut (a block-wide best).
// Every sum is a fixed per-thread order and a fixed tree, so a row always gives the same token;
// it differs from DrawToken's order only in rounding (the caveat SampleRows states).

// A float's place in the order of floats as an unsigned key (larger float, larger key); -0 is
// +0, as the host's comparisons see them. No NaN (DrawToken's REQUIRES).
__device__ __forceinline__ uint32_t OrderKey(float v) {
  if (v == 0.0f) v = 0.0f;
  const uint32_t b = __float_as_uint(v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float KeyValue(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

struct Cut {
  uint32_t key = 0;  // every token: key 0 and id INT_MAX
  int id = INT_MAX;
};
__device__ __forceinline__ bool InCut(const Cut& c, uint32_t key, int id) {
  return key > c.key || (key == c.key && id <= c.id);
}

// Block-wide reduction (every thread gets the result): a fixed butterfly in each warp, then the
// warps in order, so equal inputs give equal bits. part holds 33 values; consecutive calls on
// the same part are safe (the result slot is written only after every thread has passed the
// next call's first barrier).
template <typename T, typename Op>
__device__ T BlockReduce(T v, Op op, T* part) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, nwarps = blockDim.x / 32;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(kFullMask, v, o));
  if (lane == 0) part[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    T t = part[0];
    for (int w = 1; w < nwarps; ++w) t = op(t, part[w]);
    part[32] = t;
  }
  __syncthreads();
  return part[32];
}
struct SumOp {
  __device__ double operator()(double a, double b) const { return a + b; }
};

struct CutShared {
  double sum[33];
  int id[33];
  int count[kSampleThreads];
  int found;
};

// Sum over the row of f(key, id, value), each thread over ids threadIdx.x + j * blockDim.x.
template <typename F>
__device__ double RowSum(const float* __restrict__ row, int n, F f, CutShared& sh) {
  double s = 0.0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = row[i];
    s += f(OrderKey(v), i, v);
  }
  return BlockReduce(s, SumOp(), sh.sum);
}

// The largest key in [lo, hi] where pred holds, given that it holds at lo and on every key
// below one that it holds at. pred must give every thread the same answer.
template <typename P>
__device__ uint32_t LargestKey(uint32_t lo, uint32_t hi, P pred) {
  while (lo < hi) {
    const uint32_t mid = lo + static_cast<uint32_t>((static_cast<uint64_t>(hi) - lo + 1) / 2);
    if (pred(mid)) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// The r-th lowest id (r >= 1) among the tokens of cut c whose key is `key`: each thread counts
// its contiguous run of ids, thread 0 turns the counts into offsets, and the thread whose run
// holds the r-th walks it. -1 when there are fewer than r.
__device__ int NthIdAtKey(const float* __restrict__ row, int n, uint32_t key, const Cut& c, int r,
                          CutShared& sh) {
  const int chunk = (n + blockDim.x - 1) / blockDim.x;
  const int b = min(n, static_cast<int>(threadIdx.x) * chunk), e = min(n, b + chunk);
  int cnt = 0;
  for (int i = b; i < e; ++i) cnt += OrderKey(row[i]) == key && InCut(c, key, i);
  sh.count[threadIdx.x] = cnt;
  if (threadIdx.x == 0) sh.found = -1;
  __syncthreads();
  if (threadIdx.x == 0) {
    int acc = 0;
    for (int t = 0; t < blockDim.x; ++t) {
      const int v = sh.count[t];
      sh.count[t] = acc;
      acc += v;
    }
  }
  __syncthreads();
  const int before = sh.count[threadIdx.x];
  if (r > before && r <= before + cnt) {
    int seen = before;
    for (int i = b; i < e; ++i) {
      if (OrderKey(row[i]) == key && InCut(c, key, i) && ++seen == r) {
        sh.found = i;
        break;
      }
    }
  }
  __syncthreads();
  const int found = sh.found;
  __syncthreads();
  return found;
}

// The tokens of cut c at or above key k (strict: above), counted or weighed by w(value).
template <typename W>
__device__ double CutMass(const float* __restrict__ row, int n, const Cut& c, uint32_t k,
                          bool strict, W w, CutShared& sh) {
  return RowSum(row, n, [&](uint32_t key, int i, float v) {
    return (strict ? key > k : key >= k) && InCut(c, key, i) ? w(v) : 0.0;
  }, sh);
}

// The token a row's draw picks when top-p must look past kMaxTopK tokens or top_k exceeds it.
// mx: the row's largest logit. Every thread calls it and gets the token.
__device__ __noinline__ int SampleByCuts(const float* __restrict__ row, int n, const DeviceDraw& dr, float mx,
                            CutShared& sh) {
  const uint32_t kmx = OrderKey(mx);
  const auto one = [](float) { return 1.0; };
  Cut cut;
  int size = n;  // the survivors so far
  if (dr.top_k > 0 && dr.top_k < n) {
    const double k = dr.top_k;
    const uint32_t w = LargestKey(0u, kmx, [&](uint32_t key) {
      return CutMass(row, n, cut, key, false, one, sh) >= k;
    });
    const int above = static_cast<int>(CutMass(row, n, cut, w, true, one, sh));
    cut = Cut{w, NthIdAtKey(row, n, w, cut, dr.top_k - above, sh)};
    size = dr.top_k;
  }
  if (dr.top_p < 1.0f && size > 1) {  // over the temperature-1 probabilities
    const auto p = [mx](float v) { return exp(static_cast<double>(v - mx)); };
    const double target = static_cast<double>(dr.top_p) * CutMass(row, n, cut, cut.key, false, p, sh);
    const auto reaches = [&](uint32_t key) { return CutMass(row, n, cut, key, false, p, sh) >= target; };
    // Below max - 40 a token weighs under e^-40: the nucleus nearly always ends above that.
    uint32_t lo = cut.key;
    const uint32_t hint = OrderKey(mx - 40.0f);
    if (hint > lo && reaches(hint)) lo = hint;
    const uint32_t w = LargestKey(lo, kmx, reaches);
    const int n_above = static_cast<int>(CutMass(row, n, cut, w, true, one, sh));
    const int ties = static_cast<int>(CutMass(row, n, cut, w, false, one, sh)) - n_above;
    const double e = p(KeyValue(w));
    double cum = CutMass(row, n, cut, w, true, p, sh);  // DrawToken's walk through the ties
    int m = 0;
    do {
      cum += e;
      ++m;
    } while (cum < target && m < ties);
    cut = Cut{w, NthIdAtKey(row, n, w, cut, m, sh)};
    size = n_above + m;
  }
  if (dr.min_p > 0.0f && size > 1) {  // logit >= max + log(min_p); the maximum always stays
    const uint32_t kt = OrderKey(mx + dr.log_min_p);
    if (kt > cut.key && kt <= kmx) cut = Cut{kt, INT_MAX};
  }
  // The draw: Gumbel-max over the cut.
  const double inv_t = 1.0 / static_cast<double>(dr.temperature);
  double best = 0.0;
  int bi = -1;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = row[i];
    if (InCut(cut, OrderKey(v), i)) Consider(v, mx, inv_t, dr.noise_key, i, &best, &bi);
  }
  return BlockBest(best, bi, sh.sum, sh.id);
}

// ---- top k in three passes -----------------------------------------------------------------

// Candidates TopKByThreshold keeps in shared memory at most (8 KB).
constexpr int kTopKCandidates = 4 * kSampleThreads;

// Exclusive prefix sum of v over the block (every thread gets its own; *total the sum).
// sums holds 33 ints.
__device__ int BlockExclusiveScan(int v, int* sums, int* total) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, nwarps = blockDim.x / 32;
  int x = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(kFullMask, x, o);
    if (lane >= o) x += y;
  }
  if (lane == 31) sums[warp] = x;
  __syncthreads();
  if (threadIdx.x == 0) {
    int acc = 0;
    for (int w = 0; w < nwarps; ++w) {
      const int s = sums[w];
      sums[w] = acc;
      acc += s;
    }
    sums[32] = acc;
  }
  __syncthreads();
  *total = sums[32];
  return sums[warp] + x - v;
}

// The k best tokens of a row (2 <= k <= kMaxTopK, n >= kTopKCandidates) in DrawToken's
// best-first order into cv[0..k) and ci[0..k), reading the row three times instead of the k
// rounds' k times:
//   1. each thread's largest logit; the threshold T is the k-th largest of those maxima, so at
//      least k tokens (those k maxima) are at or above T, and with them every token of the top k;
//   2. each thread counts its tokens at or above T; a block scan gives each its place;
//   3. those tokens go into shared memory in id-stride order, and each is ranked by counting the
//      candidates before it (larger logit, then lower id); the first k ranks are the top k.
// The same k tokens, in the same order, as the rounds. Returns false, leaving cv and ci alone,
// when more than kTopKCandidates tokens reach T (many ties, or large logits gathered in a few
// threads' ids); the caller then takes the rounds. Every thread calls it and gets the same answer.
__device__ __noinline__ bool TopKByThreshold(const float* __restrict__ row, int n, int k, float* cv,
                                             int* ci) {
  __shared__ float tmax[kSampleThreads];
  __shared__ int sums[33];
  __shared__ float cand_v[kTopKCandidates];
  __shared__ int cand_i[kTopKCandidates];
  __shared__ float threshold;
  const int t = threadIdx.x, nt = blockDim.x;
  float m = -INFINITY;  // n >= kTopKCandidates > blockDim.x: every thread has tokens
  for (int i = t; i < n; i += nt) m = fmaxf(m, row[i]);
  tmax[t] = m;
  __syncthreads();
  int rank = 0;  // among the threads' maxima: larger first, then lower thread
  for (int s = 0; s < nt; ++s) {
    const float o = tmax[s];
    rank += o > m || (o == m && s < t);
  }
  if (rank == k - 1) threshold = m;  // exactly one thread
  __syncthreads();
  const float T = threshold;
  int count = 0;
  for (int i = t; i < n; i += nt) count += row[i] >= T;
  int total = 0;
  int at = BlockExclusiveScan(count, sums, &total);
  // (Fewer than k at or above T: NaN logits, which no comparison counts. The rounds cope.)
  if (total > kTopKCandidates || total < k) return false;  // the same for every thread
  for (int i = t; i < n; i += nt) {
    const float v = row[i];
    if (v >= T) {
      cand_v[at] = v;
      cand_i[at] = i;
      ++at;
    }
  }
  __syncthreads();
  for (int c = t; c < total; c += nt) {
    const float v = cand_v[c];
    const int id = cand_i[c];
    int r = 0;
    for (int d = 0; d < total && r < k; ++d) r += Before(cand_v[d], cand_i[d], v, id);
    if (r < k) {
      cv[r] = v;
      ci[r] = id;
    }
  }
  __syncthreads();
  return true;
}

// The `rounds` best tokens of a row (1 <= rounds <= n) in best-first order (larger logit, then
// lower id) into cv[0..rounds) and ci[0..rounds): each round a block-wide argmax over the
// elements ranked after the previous round's winner (no membership tests). Every thread calls
// it; cv and ci (shared) are complete on return.
__device__ __noinline__ void BestByRounds(const float* __restrict__ row, int n_vocab, int rounds,
                                          float* cv, int* ci) {
  __shared__ double sv[33];
  __shared__ int si[33];
  float last_v = FLT_MAX;
  int last_i = -1;
  for (int j = 0; j < rounds; ++j) {
    float best = -FLT_MAX;
    int bi = -1;
    for (int i = threadIdx.x; i < n_vocab; i += blockDim.x) {
      const float v = row[i];
      const bool after = j == 0 || Before(last_v, last_i, v, i);
      if (after && (bi < 0 || Before(v, i, best, bi))) {
        best = v;
        bi = i;
      }
    }
    // (Floats widen exactly, so DrawBeats over the doubles is Before over the floats.)
    last_i = BlockBest(best, bi, sv, si);
    if (last_i < 0) last_i = 0;  // nothing ranks after the last (NaN logits): a valid id all the same
    last_v = row[last_i];
    if (threadIdx.x == 0) {
      cv[j] = last_v;
      ci[j] = last_i;
    }
  }
  __syncthreads();
}

// One block of kSampleThreads per row, DrawToken's rule (runtime/sample/draw.h):
//   1. the top k in DrawToken's best-first order: TopKByThreshold (three passes over the row),
//      or where it declines, and for greedy rows and whole-vocabulary draws (k = 1: the
//      maximum), k rounds of a block-wide argmax, each over the elements ranked after the
//      previous round's winner (no membership tests).
//   2. top k: thread 0 applies top-p, min-p and the draw (Gumbel-max) over the k, in double, in
//      that order.
//   3. the whole vocabulary: each thread's best score over its ids (min-p a threshold on the
//      logit), then the block's best.
//   4. top-p over the whole vocabulary, or top-k above kMaxTopK: one round (the maximum), then
//      SampleByCuts.

// The id a row's draw reports: always one of the vocabulary. A row of NaN logits (a model that
// diverged) compares as nothing, and the searches above may find no id at all; the next step
// reads its token's embedding row, so an id out of range would read past the weights.
__device__ __forceinline__ int32_t ValidId(int id, int n_vocab) {
  return id >= 0 && id < n_vocab ? id : 0;
}

__global__ void __launch_bounds__(kSampleThreads)
    SampleRowsKernel(const float* __restrict__ logits, int n_vocab,
                     const DeviceDraw* __restrict__ draws, int32_t* __restrict__ out) {
  AwaitPrecedingKernels();
  const float* row = logits + static_cast<size_t>(blockIdx.x) * n_vocab;
  const DeviceDraw dr = draws[blockIdx.x];
  __shared__ float cv[kMaxTopK];
  __shared__ int ci[kMaxTopK];
  const bool greedy = !(dr.temperature > 0.0f);
  const bool cuts = !greedy && (dr.top_k > kMaxTopK || (dr.top_k == 0 && dr.top_p < 1.0f));
  int k = greedy ? 1 : cuts ? 0 : dr.top_k;  // 0: the whole vocabulary
  // Top-p over the whole vocabulary looks for its nucleus among the kMaxTopK best (below).
  const int best = k >= 2 ? k : cuts && dr.top_k == 0 ? kMaxTopK : 0;
  const bool three_passes =
      best >= 2 && n_vocab >= kTopKCandidates && TopKByThreshold(row, n_vocab, best, cv, ci);
  const int rounds = three_passes ? 0 : k > 0 ? k : 1;
  if (rounds > 0) BestByRounds(row, n_vocab, rounds, cv, ci);
  const float mx = cv[0];
  if (greedy) {
    if (threadIdx.x == 0) out[blockIdx.x] = ValidId(ci[0], n_vocab);
    return;
  }
  // Top-p over the whole vocabulary whose nucleus is among the kMaxTopK best (a peaked row, as
  // most of a chat model's are): the 64 best in three passes (above), the row's total mass in
  // one more, and thread 0 walks them best first to the nucleus (DrawToken's walk); min-p and
  // the draw then go as for top-k. Otherwise the bisections.
  bool nucleus = false;
  if (cuts && three_passes) {
    __shared__ double part[33];
    __shared__ int nucleus_size;
    double own = 0.0;
    for (int i = threadIdx.x; i < n_vocab; i += blockDim.x) own += exp(static_cast<double>(row[i] - mx));
    const double total = BlockReduce(own, SumOp(), part);
    if (threadIdx.x == 0) {
      const double target = static_cast<double>(dr.top_p) * total;
      double cum = 0.0;
      int n = 0;
      while (n < kMaxTopK && !(cum >= target && n > 0)) cum += exp(static_cast<double>(cv[n++] - mx));
      nucleus_size = cum >= target ? n : 0;
    }
    __syncthreads();
    if (nucleus_size > 0) {
      k = nucleus_size;
      nucleus = true;
    }
  }
  if (cuts && !nucleus) {
    __shared__ CutShared sh;
    const int id = SampleByCuts(row, n_vocab, dr, mx, sh);
    if (threadIdx.x == 0) out[blockIdx.x] = ValidId(id, n_vocab);
    return;
  }
  const double inv_t = 1.0 / static_cast<double>(dr.temperature);
  if (k > 0) {
    if (threadIdx.x != 0) return;
    int keep = k;
    if (!nucleus && dr.top_p < 1.0f && keep > 1) {  // top-p over the temperature-1 probabilities
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
      out[blockIdx.x] = ValidId(ci[0], n_vocab);
      return;
    }
    // As DrawToken's PickCandidate.
    double top = 0.0;
    int bi = -1;
    for (int j = 0; j < keep; ++j) Consider(cv[j], mx, inv_t, dr.noise_key, ci[j], &top, &bi);
    out[blockIdx.x] = ValidId(bi, n_vocab);
    return;
  }

  // The whole vocabulary, min-p as a threshold on the logit: each thread's best over its ids,
  // then the block's.
  __shared__ double sv[33];
  __shared__ int si[33];
  const bool min_p = dr.min_p > 0.0f && n_vocab > 1;
  const float threshold = mx + dr.log_min_p;
  double top = 0.0;
  int bi = -1;
  for (int i = threadIdx.x; i < n_vocab; i += blockDim.x) {
    const float v = row[i];
    if (!(min_p && v < threshold)) Consider(v, mx, inv_t, dr.noise_key, i, &top, &bi);
  }
  const int picked = BlockBest(top, bi, sv, si);
  if (threadIdx.x == 0) out[blockIdx.x] = ValidId(picked, n_vocab);
}

// ---- the logit bias and penalties -----------------------------------------------------------

// One token's logit after its bias and its count's penalties: ApplyLogitAdjustments' arithmetic
// (runtime/sample/penalties.cc), each operation rounded on its own (no contraction into FMAs).
__device__ __forceinline__ float AdjustOne(const DeviceDraw& dr, float bias, int count, float l) {
  if (bias != 0.0f) l = __fadd_rn(l, bias);
  if (count <= 0) return l;
  if (dr.repetition != 1.0f) l = l > 0.0f ? __fdiv_rn(l, dr.repetition) : __fmul_rn(l, dr.repetition);
  return __fsub_rn(l, __fadd_rn(__fmul_rn(static_cast<float>(count), dr.frequency), dr.presence));
}

constexpr int kAdjustThreads = 128;

__global__ void __launch_bounds__(kAdjustThreads)
    AdjustLogitsRowsKernel(float* __restrict__ logits, int n_vocab, const DeviceDraw* __restrict__ draws,
                           const int32_t* __restrict__ meta, const int32_t* __restrict__ input_ids) {
  AwaitPrecedingKernels();
  const DeviceDraw dr = draws[blockIdx.x];
  if (dr.adjust_n == 0 && dr.input < 0 && dr.mask_begin < 0) return;
  float* row = logits + static_cast<size_t>(blockIdx.x) * n_vocab;
  const int32_t* e = meta + dr.adjust_begin;
  int input = dr.input >= 0 ? input_ids[dr.input] : -1;
  if (input >= n_vocab) input = -1;
  // Whether the input token has an entry (the ids ascend: a binary search), so that its one
  // more occurrence joins that entry instead of being applied on its own.
  __shared__ int listed;
  if (threadIdx.x == 0) {
    int lo = 0, hi = dr.adjust_n;
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (e[kAdjustInts * mid] < input) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    listed = input >= 0 && lo < dr.adjust_n && e[kAdjustInts * lo] == input;
  }
  __syncthreads();
  for (int j = threadIdx.x; j < dr.adjust_n; j += blockDim.x) {
    const int id = e[kAdjustInts * j];
    if (id < 0 || id >= n_vocab) continue;
    const int count = e[kAdjustInts * j + 2] + (id == input ? 1 : 0);
    row[id] = AdjustOne(dr, __int_as_float(e[kAdjustInts * j + 1]), count, row[id]);
  }
  if (threadIdx.x == 0 && input >= 0 && !listed) row[input] = AdjustOne(dr, 0.0f, 1, row[input]);
  if (dr.mask_begin < 0) return;
  // The mask (ApplyTokenMask): a clear bit's logit to -infinity; when nothing it leaves is
  // finite, the fallback ids' logits to 0. (64-bit words, little-endian: bit i of 32-bit word
  // i / 32.)
  __syncthreads();  // the entries are in
  const uint32_t* mask = reinterpret_cast<const uint32_t*>(meta + dr.mask_begin);
  int any = 0;
  for (int i = threadIdx.x; i < n_vocab; i += blockDim.x) {
    if ((mask[i >> 5] >> (i & 31)) & 1u) {
      any |= row[i] != -INFINITY;
    } else {
      row[i] = -INFINITY;
    }
  }
  __shared__ int warp_any[32];
  if (BlockMaxInt(any, warp_any) != 0) return;
  for (int j = threadIdx.x; j < dr.fallback_n; j += blockDim.x) {
    const int id = meta[dr.fallback_begin + j];
    if (id >= 0 && id < n_vocab) row[id] = 0.0f;
  }
}

struct FloatMaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// TokenLogprobOf on the device (cuda_kernels.h LogprobRows): the maximum and the chosen token's
// rank in one pass, the softmax total in double in another, then the top k as SampleRows finds
// its top k (three passes, or the rounds where they decline).
__global__ void __launch_bounds__(kSampleThreads)
    LogprobRowsKernel(const float* __restrict__ logits, int n_vocab, const DeviceDraw* __restrict__ draws,
                      const int32_t* __restrict__ tokens, DeviceLogprobs* __restrict__ out) {
  AwaitPrecedingKernels();
  const int want = draws[blockIdx.x].logprobs;
  if (want < 0) return;
  const float* row = logits + static_cast<size_t>(blockIdx.x) * n_vocab;
  const int token = ValidId(tokens[blockIdx.x], n_vocab);
  const float lt = row[token];
  __shared__ float fpart[33];
  __shared__ double dpart[33];
  __shared__ float cv[kMaxTopK];
  __shared__ int ci[kMaxTopK];
  float m = -INFINITY;
  double better = 0.0;
  for (int i = threadIdx.x; i < n_vocab; i += blockDim.x) {
    const float v = row[i];
    m = fmaxf(m, v);
    better += Before(v, i, lt, token) ? 1.0 : 0.0;
  }
  const float mx = BlockReduce(m, FloatMaxOp(), fpart);
  const double rank = BlockReduce(better, SumOp(), dpart);
  double own = 0.0;
  for (int i = threadIdx.x; i < n_vocab; i += blockDim.x) own += exp(static_cast<double>(row[i] - mx));
  const double total = BlockReduce(own, SumOp(), dpart);
  const double log_z = static_cast<double>(mx) + log(total);
  const int k = min(min(want, n_vocab), kMaxDeviceLogprobs);
  if (k > 0) {
    const bool three_passes = k >= 2 && n_vocab >= kTopKCandidates && TopKByThreshold(row, n_vocab, k, cv, ci);
    if (!three_passes) BestByRounds(row, n_vocab, k, cv, ci);
  }
  if (threadIdx.x != 0) return;
  DeviceLogprobs& o = out[blockIdx.x];
  o.token = token;
  o.logprob = static_cast<float>(static_cast<double>(lt) - log_z);
  o.rank = 1 + static_cast<int32_t>(rank);
  o.n_top = k;
  for (int j = 0; j < k; ++j) {
    o.top_ids[j] = ci[j];
    o.top_logprobs[j] = static_cast<float>(static_cast<double>(cv[j]) - log_z);
  }
}

}  // namespace

void LogprobRows(const float* logits, int rows, int n_vocab, const DeviceDraw* draws,
                 const int32_t* tokens, DeviceLogprobs* out, cudaStream_t stream) {
  if (rows <= 0) return;
  LogprobRowsKernel<<<rows, kSampleThreads, 0, stream>>>(logits, n_vocab, draws, tokens, out);
  KINFER_CUDA_LAUNCH_CHECK();
}

void AdjustLogitsRows(float* logits, int rows, int n_vocab, const DeviceDraw* draws,
                      const int32_t* meta, const int32_t* input_ids, cudaStream_t stream) {
  if (rows <= 0) return;
  AdjustLogitsRowsKernel<<<rows, kAdjustThreads, 0, stream>>>(logits, n_vocab, draws, meta, input_ids);
  KINFER_CUDA_LAUNCH_CHECK();
}

void SampleRows(const float* logits, int rows, int n_vocab, const DeviceDraw* draws, int32_t* out,
                cudaStream_t stream) {
  if (rows <= 0) return;
  SampleRowsKernel<<<rows, kSampleThreads, 0, stream>>>(logits, n_vocab, draws, out);
  KINFER_CUDA_LAUNCH_CHECK();
}

}  // namespace kinfer::cuda
