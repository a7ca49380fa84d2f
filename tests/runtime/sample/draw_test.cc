// DrawToken's one-pass top-k against the rule applied to every token (TruncateCandidates'
// partial sort), on rows with many ties.
#include "runtime/sample/draw.h"

#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace kinfer {
namespace {

// The rule as TruncateCandidates states it, from every token in id order.
int32_t Reference(std::span<const float> logits, const DrawParams& p) {
  if (p.temperature <= 0.0f) return ArgmaxLowestId(logits);
  DrawCandidates c(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) c[i] = {logits[i], static_cast<int32_t>(i)};
  TruncateCandidates(p, &c);
  std::vector<double> probs;
  return PickCandidate(c, p.temperature, p.uniform, &probs);
}

TEST(DrawTest, OnePassTopKGivesWhatSortingEveryTokenGives) {
  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::uniform_real_distribution<double> unif(0.0, 1.0);
  DrawCandidates cand;
  std::vector<double> probs;
  int checked = 0;
  for (int n : {1, 2, 7, 100, 5000}) {
    for (int trial = 0; trial < 30; ++trial) {
      std::vector<float> l(static_cast<size_t>(n));
      // Coarse logits on half the trials: ties everywhere, at the top-k cut too.
      for (float& x : l) x = trial % 2 ? std::round(normal(rng)) : normal(rng);
      for (int k : {1, 2, 3, 40, 64, 1000, n - 1, n, n + 5}) {
        if (k < 1) continue;
        for (float top_p : {1.0f, 0.9f, 0.3f}) {
          for (float min_p : {0.0f, 0.05f}) {
            DrawParams p;
            p.temperature = trial % 3 == 0 ? 0.7f : 1.3f;
            p.top_k = k;
            p.top_p = top_p;
            p.min_p = min_p;
            p.uniform = unif(rng);
            ASSERT_EQ(DrawToken(l, p, &cand, &probs), Reference(l, p))
                << "n " << n << " k " << k << " top_p " << top_p << " min_p " << min_p;
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 1000);
}

TEST(DrawTest, FillCandidatesKeepsTheKBestBestFirst) {
  const std::vector<float> l = {1.0f, 5.0f, 3.0f, 5.0f, -2.0f, 3.0f, 4.0f};
  DrawParams p;
  p.top_k = 4;
  DrawCandidates c;
  FillCandidates(l, p, &c);
  const DrawCandidates want = {{5.0f, 1}, {5.0f, 3}, {4.0f, 6}, {3.0f, 2}};  // ties: lower id
  EXPECT_EQ(c, want);
  p.top_k = 0;
  FillCandidates(l, p, &c);
  ASSERT_EQ(c.size(), l.size());
  for (size_t i = 0; i < l.size(); ++i) EXPECT_EQ(c[i].second, static_cast<int32_t>(i));
}

}  // namespace
}  // namespace kinfer
