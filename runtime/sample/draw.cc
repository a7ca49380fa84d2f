#include "runtime/sample/draw.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>

#include "runtime/sample/draw_noise.h"

namespace kinfer {
namespace {

// Best first: larger logit, then lower id. A strict weak order for non-NaN logits.
bool Better(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

float MaxLogit(const DrawCandidates& c) {
  float m = -std::numeric_limits<float>::infinity();
  for (const auto& e : c) m = std::max(m, e.first);
  return m;
}

}  // namespace

void ApplyTokenMask(std::span<const uint64_t> mask, std::span<const int32_t> fallback,
                    std::span<float> logits) {
  constexpr float kOff = -std::numeric_limits<float>::infinity();
  bool any = false;
  for (size_t id = 0; id < logits.size(); ++id) {
    const size_t w = id >> 6;
    if (w < mask.size() && ((mask[w] >> (id & 63)) & 1u) != 0) {
      any |= logits[id] != kOff;
    } else {
      logits[id] = kOff;
    }
  }
  if (any) return;
  for (int32_t id : fallback) {
    if (id >= 0 && static_cast<size_t>(id) < logits.size()) logits[static_cast<size_t>(id)] = 0.0f;
  }
}

int32_t ArgmaxLowestId(std::span<const float> logits) {
  assert(!logits.empty());
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = i;  // strict: ties keep the lowest id
  }
  return static_cast<int32_t>(best);
}

void TruncateCandidates(const DrawParams& p, DrawCandidates* cand) {
  auto& c = *cand;
  bool sorted = false;  // true when c is in Better order

  // top-k. Ties at the cut go to the lowest ids, so top_k == 1 is exactly the greedy choice.
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < c.size()) {
    const auto k = static_cast<size_t>(p.top_k);
    std::partial_sort(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(k), c.end(), Better);
    c.resize(k);
    sorted = true;
  }

  // top-p over the temperature-1 probabilities of what is left.
  if (p.top_p < 1.0f && c.size() > 1) {
    const float max_logit = MaxLogit(c);
    double total = 0.0;
    for (const auto& e : c) total += std::exp(static_cast<double>(e.first - max_logit));
    const double target = static_cast<double>(p.top_p) * total;

    // The nucleus is usually far smaller than the vocabulary: sort a growing prefix instead of all.
    size_t sorted_prefix = sorted ? c.size() : 0;
    size_t keep = 0;
    double cum = 0.0;
    while (true) {
      if (keep == sorted_prefix) {
        const size_t want = std::min(c.size(), std::max<size_t>(64, sorted_prefix * 4));
        std::partial_sort(c.begin() + static_cast<std::ptrdiff_t>(sorted_prefix),
                          c.begin() + static_cast<std::ptrdiff_t>(want), c.end(), Better);
        sorted_prefix = want;
      }
      cum += std::exp(static_cast<double>(c[keep].first - max_logit));
      ++keep;  // the token that crosses the threshold is kept, and at least one always is
      if (cum >= target || keep == c.size()) break;
    }
    c.resize(keep);
  }

  // min-p: p_i >= min_p * p_max  <=>  logit_i >= max_logit + log(min_p).
  if (p.min_p > 0.0f && c.size() > 1) {
    const float threshold = MaxLogit(c) + std::log(p.min_p);
    std::erase_if(c, [threshold](const auto& e) { return e.first < threshold; });
  }
}

int32_t PickCandidate(const DrawCandidates& c, float temperature, uint64_t noise_key) {
  assert(!c.empty());
  if (c.size() == 1) return c[0].second;
  const float max_logit = MaxLogit(c);
  const double inv_t = 1.0 / static_cast<double>(temperature);
  int32_t best = -1;
  double best_score = 0.0;
  for (const auto& [logit, id] : c) {
    FoldDraw(static_cast<double>(logit - max_logit) * inv_t, noise_key, id, &best_score, &best);
  }
  return best;
}

void FillCandidates(std::span<const float> logits, const DrawParams& p, DrawCandidates* cand) {
  auto& c = *cand;
  c.clear();
  const size_t n = logits.size();
  if (p.top_k <= 0 || static_cast<size_t>(p.top_k) >= n) {
    c.resize(n);
    for (size_t i = 0; i < n; ++i) c[i] = {logits[i], static_cast<int32_t>(i)};
    return;
  }
  // One pass with a heap of the k best so far, its front the worst of them (Better as "less"):
  // most logits lose one comparison against the front, so this reads the row once instead of
  // copying and sorting it.
  const auto k = static_cast<size_t>(p.top_k);
  c.reserve(k);
  for (size_t i = 0; i < k; ++i) {
    c.emplace_back(logits[i], static_cast<int32_t>(i));
    std::push_heap(c.begin(), c.end(), Better);
  }
  // Ids come in increasing order, so a logit equal to the front's loses its tie: only a larger
  // one enters.
  float worst = c.front().first;
  for (size_t i = k; i < n; ++i) {
    if (!(logits[i] > worst)) continue;
    std::pop_heap(c.begin(), c.end(), Better);
    c.back() = {logits[i], static_cast<int32_t>(i)};
    std::push_heap(c.begin(), c.end(), Better);
    worst = c.front().first;
  }
  std::sort_heap(c.begin(), c.end(), Better);  // best first
}

int32_t DrawToken(std::span<const float> logits, const DrawParams& p, DrawCandidates* c) {
  assert(!logits.empty());
  if (p.temperature <= 0.0f) return ArgmaxLowestId(logits);
  FillCandidates(logits, p, c);
  TruncateCandidates(p, c);  // top-k is then already done: the k best, best first
  return PickCandidate(*c, p.temperature, p.noise_key);
}

}  // namespace kinfer
