// The draw's randomness, counter-based: pure functions of the request's seed, the output token's
// index and a token id, the same on the host and in the CUDA kernels (which include this header).
//
//   DrawKey(seed, i)        the key of a request's i-th generated token (i from 0);
//   GumbelNoise(key, id)    token id's Gumbel(0, 1) noise in that draw: -log(-log(u)), with u the
//                           52 high bits of SplitMix64's mixing of the key and the id, centred:
//                           (bits + 1/2) / 2^52, never 0 or 1 (with 53 bits the largest would
//                           round to 1 and its noise be infinite).
//
// A sampled draw (runtime/sample/draw.h) picks the survivor with the largest
// (logit - max) / temperature + GumbelNoise(key, id): the Gumbel-max trick, exactly the softmax's
// distribution over the survivors. So a token's draw depends on its logits and (seed, index)
// alone, and two models drawing the same index with the same key (a draft model and its target)
// pick the same token whenever their scores' maxima coincide: where their distributions are close,
// nearly always.
//
// SplitMix64's output function is Steele, Lea and Flood's (2014); the seed is mixed once first so
// that nearby seeds (n's choices: seed, seed + 1, ...) are unrelated, not one stream shifted.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define KINFER_HOST_DEVICE __host__ __device__
#else
#define KINFER_HOST_DEVICE
#endif

namespace kinfer {

inline constexpr uint64_t kSplitMix64Gamma = 0x9e3779b97f4a7c15ull;

KINFER_HOST_DEVICE inline uint64_t SplitMix64Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

KINFER_HOST_DEVICE inline uint64_t DrawKey(uint64_t seed, uint64_t index) {
  return SplitMix64Mix(SplitMix64Mix(seed) + (index + 1) * kSplitMix64Gamma);
}

// u in [2^-53, 1 - 2^-53]: (52 bits + 1/2) / 2^52, exact in a double.
KINFER_HOST_DEVICE inline double NoiseUniform(uint64_t key, int32_t id) {
  const uint64_t z = SplitMix64Mix(key + (static_cast<uint64_t>(static_cast<uint32_t>(id)) + 1) *
                                             kSplitMix64Gamma);
  return (static_cast<double>(z >> 12) + 0.5) * 0x1.0p-52;
}

KINFER_HOST_DEVICE inline double GumbelOf(double u) { return -log(-log(u)); }

KINFER_HOST_DEVICE inline double GumbelNoise(uint64_t key, int32_t id) {
  return GumbelOf(NoiseUniform(key, id));
}

// False only when a token whose scaled logit is `scaled` and whose uniform is `u` cannot reach
// the score `best`: -log(u) >= 1 - u >= exp(scaled - best) (1 + 2^-20) puts its score at least
// 2^-21 below best, far beyond rounding. One exp instead of two logs: the draw computes the noise
// of the few tokens that pass (a survivor far behind the leader passes about exp(scaled - best)
// of the time).
KINFER_HOST_DEVICE inline bool MayReach(double scaled, double u, double best) {
  return 1.0 - u < exp(scaled - best) * (1.0 + 0x1.0p-20);
}

// (score, id) wins over (best, best_id): best_id is none (-1), or a larger score, or an equal one
// and a lower id. A total order over distinct ids.
KINFER_HOST_DEVICE inline bool DrawBeats(double score, int32_t id, double best, int32_t best_id) {
  return id >= 0 && (best_id < 0 || score > best || (score == best && id < best_id));
}

// Gumbel-max's step, the host's and the kernel's alike: folds token `id`, whose scaled logit
// (logit - max) / temperature the caller rounded, into the best so far (*best, *best_id; -1:
// none) under `key`, unless MayReach says it cannot reach it.
KINFER_HOST_DEVICE inline void FoldDraw(double scaled, uint64_t key, int32_t id, double* best,
                                        int32_t* best_id) {
  const double u = NoiseUniform(key, id);
  if (*best_id >= 0 && !MayReach(scaled, u, *best)) return;
  const double score = scaled + GumbelOf(u);  // (no product here for a compiler to fuse)
  if (DrawBeats(score, id, *best, *best_id)) {
    *best = score;
    *best_id = id;
  }
}

}  // namespace kinfer
