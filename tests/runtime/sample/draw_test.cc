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

// Verifying a draft (DrawParams::draft) keeps the rule's distribution: integrated over a grid of
// both uniforms, each token comes out as often as the plain rule's grid over one uniform gives
// it; the draft comes out exactly when accept_uniform is below its probability, and the residual
// never gives it.
TEST(DrawTest, VerifyingADraftKeepsTheRulesDistribution) {
  const std::vector<float> l = {0.3f, 2.0f, 1.2f, -0.5f, 2.0f, 0.9f, -3.0f, 1.7f};
  constexpr int kGrid = 400;
  DrawCandidates cand;
  std::vector<double> probs;
  struct Setting {
    int top_k;
    float top_p, min_p;
  };
  int checked = 0;
  for (const Setting& st : {Setting{0, 1.0f, 0.0f}, Setting{3, 1.0f, 0.0f}, Setting{0, 0.8f, 0.0f},
                            Setting{0, 1.0f, 0.3f}, Setting{5, 0.9f, 0.1f}}) {
    DrawParams p;
    p.temperature = 0.8f;
    p.top_k = st.top_k;
    p.top_p = st.top_p;
    p.min_p = st.min_p;
    std::vector<double> want(l.size(), 0.0);
    for (int i = 0; i < kGrid; ++i) {
      p.uniform = (i + 0.5) / kGrid;
      want[static_cast<size_t>(DrawToken(l, p, &cand, &probs))] += 1.0 / kGrid;
    }
    for (int32_t draft = 0; draft < static_cast<int32_t>(l.size()); ++draft) {
      DrawParams v = p;
      v.draft = draft;
      std::vector<double> got(l.size(), 0.0);
      for (int a = 0; a < kGrid; ++a) {
        v.accept_uniform = (a + 0.5) / kGrid;
        for (int i = 0; i < kGrid; ++i) {
          v.uniform = (i + 0.5) / kGrid;
          const int32_t t = DrawToken(l, v, &cand, &probs);
          got[static_cast<size_t>(t)] += 1.0 / (kGrid * kGrid);
          // The draft comes out exactly when the test accepts it: a test uniform below its
          // probability (the grid's fraction of accepting tests is that probability).
          if (t == draft) {
            ASSERT_LT(v.accept_uniform, want[static_cast<size_t>(draft)] + 1.5 / kGrid);
          }
        }
      }
      for (size_t t = 0; t < l.size(); ++t) {
        EXPECT_NEAR(got[t], want[t], 2.5 / kGrid) << "draft " << draft << " token " << t << " top_k "
                                                  << st.top_k << " top_p " << st.top_p;
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 40);
  // Greedy: the argmax, whatever the draft.
  DrawParams g;
  g.draft = 2;
  EXPECT_EQ(DrawToken(l, g, &cand, &probs), 1);
}

}  // namespace
}  // namespace kinfer
