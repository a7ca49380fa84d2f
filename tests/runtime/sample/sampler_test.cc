#include "runtime/sample/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/sample/penalties.h"

namespace kinfer {
namespace {

// Logits whose softmax is exactly `probs` (up to float rounding).
std::vector<float> LogitsFor(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

std::vector<float> RandomLogits(size_t n, uint64_t seed, float scale = 3.0f) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> l(n);
  for (auto& x : l) x = d(g);
  return l;
}

SamplingParams Seeded(uint64_t seed, float temperature = 1.0f) {
  SamplingParams p;
  p.seed = seed;
  p.temperature = temperature;
  return p;
}

// Draws `n` tokens from the same logits (a fresh copy each time, no history) and counts them.
std::vector<int> Histogram(const SamplingParams& params, const std::vector<float>& logits, int n) {
  Sampler s(params);
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < n; ++i) {
    std::vector<float> scratch = logits;
    ++counts[static_cast<size_t>(s.Sample(scratch, {}, nullptr))];
  }
  return counts;
}

// Pearson's chi-square statistic of `counts` against the distribution `expected` (sums to 1).
double ChiSquare(const std::vector<int>& counts, const std::vector<double>& expected) {
  const double n = std::accumulate(counts.begin(), counts.end(), 0.0);
  double chi2 = 0.0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double e = n * expected[i];
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
  }
  return chi2;
}

std::vector<double> Normalised(std::vector<double> w) {
  const double s = std::accumulate(w.begin(), w.end(), 0.0);
  for (auto& x : w) x /= s;
  return w;
}

TEST(SamplerTest, GreedyPicksArgmax) {
  Sampler s(Seeded(1, 0.0f));
  for (uint64_t seed = 0; seed < 20; ++seed) {
    auto logits = RandomLogits(1000, seed);
    const auto want = std::max_element(logits.begin(), logits.end()) - logits.begin();
    EXPECT_EQ(s.Sample(logits, {}, nullptr), want);
  }
}

TEST(SamplerTest, GreedyTiesGoToTheLowestId) {
  Sampler s(Seeded(1, 0.0f));
  std::vector<float> logits = {0.0f, 5.0f, 1.0f, 5.0f, 5.0f};
  EXPECT_EQ(s.Sample(logits, {}, nullptr), 1);
}

TEST(SamplerTest, TokenLogprobOfGivesTheRankWithTiesToTheLowerId) {
  const std::vector<float> logits = {1.0f, 3.0f, 3.0f, 0.0f, 2.0f};
  TokenLogprob lp;
  const int want[] = {4, 1, 2, 5, 3};
  for (int32_t t = 0; t < 5; ++t) {
    TokenLogprobOf(logits, t, 2, &lp);
    EXPECT_EQ(lp.rank, want[t]) << "token " << t;
    ASSERT_EQ(lp.top.size(), 2u);
    EXPECT_EQ(lp.top[0].token, 1);
    EXPECT_EQ(lp.top[1].token, 2);
  }
}

TEST(SamplerTest, GreedyIgnoresTopKTopPAndMinP) {
  SamplingParams p = Seeded(1, 0.0f);
  p.top_k = 2;
  p.top_p = 0.1f;
  p.min_p = 0.9f;
  Sampler s(p);
  std::vector<float> logits = {0.0f, 3.0f, 2.9f};
  EXPECT_EQ(s.Sample(logits, {}, nullptr), 1);
}

TEST(SamplerTest, SameSeedGivesTheSameSequence) {
  const auto logits = RandomLogits(500, 7, 1.0f);
  auto run = [&](uint64_t seed) {
    Sampler s(Seeded(seed));
    std::vector<int32_t> out;
    for (int i = 0; i < 200; ++i) {
      auto scratch = logits;
      out.push_back(s.Sample(scratch, {}, nullptr));
    }
    return out;
  };
  EXPECT_EQ(run(42), run(42));
  // Different seeds: 200 draws over a flat-ish 500-way distribution cannot coincide by chance.
  EXPECT_NE(run(42), run(43));
}

TEST(SamplerTest, UnsetSeedStillSamples) {
  SamplingParams p;
  Sampler s(p);
  std::vector<float> logits = {0.0f, 0.0f, 0.0f};
  const int32_t t = s.Sample(logits, {}, nullptr);
  EXPECT_GE(t, 0);
  EXPECT_LT(t, 3);
}

TEST(SamplerTest, TopKOneEqualsGreedy) {
  for (uint64_t seed = 0; seed < 50; ++seed) {
    auto logits = RandomLogits(2000, seed, 0.5f);
    if (seed % 5 == 0) logits[100] = logits[200] = 50.0f;  // a tie at the top: lowest id wins
    SamplingParams p = Seeded(seed, 1.5f);
    p.top_k = 1;
    Sampler topk(p);
    Sampler greedy(Seeded(seed, 0.0f));
    auto a = logits;
    auto b = logits;
    EXPECT_EQ(topk.Sample(a, {}, nullptr), greedy.Sample(b, {}, nullptr)) << "seed " << seed;
  }
}

TEST(SamplerTest, EachTokensNoiseKeyIsItsOutputIndexs) {
  // top_k 1 leaves one candidate; the index still moves on by one per token, so a token's draw
  // does not depend on how many candidates the logits before it left.
  const auto logits = RandomLogits(500, 4);
  SamplingParams p = Seeded(77, 1.0f);
  p.top_k = 1;
  Sampler s(p);
  for (int i = 0; i < 3; ++i) {
    auto l = logits;
    s.Sample(l, {}, nullptr);
  }
  EXPECT_EQ(s.index(), 3u);
  EXPECT_EQ(s.NextDraw().noise_key, DrawKey(77, 3));
  s.Seek(41);
  EXPECT_EQ(s.NextDraw().noise_key, DrawKey(77, 41));
  EXPECT_EQ(s.index(), 42u);
  EXPECT_EQ(s.seed(), 77u);
  // Greedy reads none, but its tokens still count.
  Sampler g(Seeded(77, 0.0f));
  auto l = logits;
  g.Sample(l, {}, nullptr);
  EXPECT_EQ(g.index(), 1u);
  EXPECT_EQ(g.NextDraw().noise_key, 0u);
  // Drawing rows past the ones kept (a rejected draft's) and seeking back gives the draw the
  // first unkept row would have had on a sampler that never went past it.
  Sampler walked(Seeded(5, 0.8f)), plain(Seeded(5, 0.8f));
  for (uint64_t i = 0; i < 30; ++i) {
    auto a = RandomLogits(300, 900 + i, 2.0f), b = a;
    const int32_t want = plain.Sample(a, {}, nullptr);
    for (int extra = 0; extra < static_cast<int>(i % 4); ++extra) walked.NextDraw();
    walked.Seek(i);
    EXPECT_EQ(walked.Sample(b, {}, nullptr), want) << "index " << i;
  }
  // An unset seed is chosen once, and kept.
  Sampler r{SamplingParams{}};
  EXPECT_EQ(r.seed(), r.seed());
}

TEST(SamplerTest, NextDrawAndDrawTokenAreWhatSampleDoes) {
  // The backends' path (ModelBackend::ForwardBatchSample): the engine takes NextDraw() from the
  // request's sampler and the device applies DrawToken; Sample() is the same rule and stream.
  struct Case {
    float t;
    int k;
    float top_p, min_p;
  };
  const Case cases[] = {{0.0f, 0, 1.0f, 0.0f},  {1.0f, 0, 1.0f, 0.0f}, {0.7f, 40, 0.95f, 0.05f},
                        {1.3f, 0, 0.9f, 0.0f},  {0.9f, 0, 1.0f, 0.1f}, {1.0f, 1, 1.0f, 0.0f},
                        {2.0f, 64, 1.0f, 0.0f}, {0.5f, 5, 0.5f, 0.2f}};
  for (const Case& c : cases) {
    SamplingParams p = Seeded(9, c.t);
    p.top_k = c.k;
    p.top_p = c.top_p;
    p.min_p = c.min_p;
    Sampler host(p), device(p);
    EXPECT_TRUE(host.IsPlainDraw());
    DrawCandidates cand;
    for (uint64_t step = 0; step < 40; ++step) {
      auto logits = RandomLogits(3000, 100 + step, 2.0f);
      const std::vector<float> raw = logits;
      const DrawParams d = device.NextDraw();
      EXPECT_EQ(d.temperature, c.t);
      EXPECT_EQ(d.top_k, c.k);
      EXPECT_EQ(host.Sample(logits, {}, nullptr), DrawToken(raw, d, &cand))
          << "t " << c.t << " k " << c.k << " top_p " << c.top_p << " step " << step;
    }
  }
  // A logit bias and penalties go with the draw (NextDraw's entries), and so do logprobs (the
  // backend reports them); a constraint needs the host.
  SamplingParams lp = Seeded(1, 0.0f);
  lp.logprobs = 3;
  EXPECT_TRUE(Sampler(lp).IsPlainDraw());
  EXPECT_EQ(Sampler(lp).draw_params().logprobs, 3);
  EXPECT_EQ(Sampler(Seeded(1, 0.0f)).draw_params().logprobs, -1);
  struct Nothing : TokenConstraint {  // masks nothing: its presence alone decides
    void Mask(std::span<float>) const override {}
    void Accept(int32_t) override {}
  };
  EXPECT_FALSE(Sampler(Seeded(1, 0.0f), std::make_unique<Nothing>()).IsPlainDraw());
  SamplingParams adjusted = Seeded(13, 0.9f);
  adjusted.top_k = 50;
  adjusted.repetition_penalty = 1.2f;
  adjusted.frequency_penalty = 0.7f;
  adjusted.presence_penalty = 0.5f;
  adjusted.penalty_last_n = 8;
  adjusted.logit_bias = {{3, -100.0f}, {17, 4.0f}};
  Sampler host(adjusted), device(adjusted);
  EXPECT_TRUE(host.IsPlainDraw());
  std::vector<int32_t> history = {5, 3, 17, 9, 9};
  DrawCandidates cand;
  int differs = 0;
  for (uint64_t step = 0; step < 60; ++step) {
    auto logits = RandomLogits(3000, 500 + step, 2.0f);
    std::vector<float> row = logits;
    std::vector<LogitAdjust> list;
    DrawParams d = device.NextDraw(std::span<const int32_t>(history).first(history.size() - 1),
                                   3000, &list);
    d.adjust = list;
    const int32_t plain = DrawToken(row, d, &cand);
    ApplyLogitAdjustments(d, history.back(), row);
    const int32_t want = host.Sample(logits, history, nullptr);
    EXPECT_EQ(DrawToken(row, d, &cand), want) << "step " << step;
    differs += want != plain;
    history.push_back(want);
  }
  EXPECT_GT(differs, 0);
}

TEST(SamplerTest, LogitBiasBansAndForcesTokensAndShowsInTheLogprobs) {
  const std::vector<float> logits = {1.0f, 4.0f, 0.5f, 3.0f};
  // Greedy: -100 on the best token hands the step to the second best; +100 on the worst wins.
  SamplingParams ban = Seeded(1, 0.0f);
  ban.logit_bias = {{1, -100.0f}};
  ban.logprobs = 0;
  auto l = logits;
  TokenLogprob lp;
  EXPECT_EQ(Sampler(ban).Sample(l, {}, &lp), 3);
  EXPECT_FLOAT_EQ(l[1], -96.0f);  // the logits left behind are the biased ones
  // The reported logprob is over the biased logits: token 3 now holds nearly all the mass.
  EXPECT_GT(lp.logprob, -0.5f);
  SamplingParams force = Seeded(1, 0.0f);
  force.logit_bias = {{2, 100.0f}};
  l = logits;
  EXPECT_EQ(Sampler(force).Sample(l, {}, nullptr), 2);
  // Sampled: a banned token is never drawn, however hot the temperature.
  SamplingParams hot = Seeded(5, 2.0f);
  hot.logit_bias = {{1, -100.0f}, {3, -100.0f}};
  const auto counts = Histogram(hot, logits, 5000);
  EXPECT_EQ(counts[1] + counts[3], 0);
  EXPECT_GT(counts[0], 0);
  EXPECT_GT(counts[2], 0);
}

TEST(SamplerTest, TopKNeverDrawsOutsideTheKBest) {
  const std::vector<float> logits = {1.0f, 4.0f, 0.5f, 3.0f, 3.5f, 2.0f};
  SamplingParams p = Seeded(3);
  p.top_k = 3;
  const auto counts = Histogram(p, logits, 20000);
  EXPECT_EQ(counts[0] + counts[2] + counts[5], 0);
  // The three survivors keep their relative weights: softmax over {4, 3.5, 3}.
  const auto expected = Normalised({std::exp(4.0), std::exp(3.5), std::exp(3.0)});
  // 2 degrees of freedom: P(chi2 > 13.8) = 0.001.
  EXPECT_LT(ChiSquare({counts[1], counts[4], counts[3]}, expected), 13.8);
}

TEST(SamplerTest, TopPKeepsTheSmallestSetReachingP) {
  // Mass 0.5, 0.3, 0.15, 0.05. top_p = 0.75: 0.5 < 0.75, 0.5 + 0.3 >= 0.75, so {0, 1} survive.
  const auto logits = LogitsFor({0.5, 0.3, 0.15, 0.05});
  SamplingParams p = Seeded(11);
  p.top_p = 0.75f;
  const int n = 20000;
  const auto counts = Histogram(p, logits, n);
  EXPECT_EQ(counts[2] + counts[3], 0);
  // Renormalised: token 0 has 0.5 / 0.8 = 0.625. sd = sqrt(0.625 * 0.375 / n) = 0.0034; allow 0.02.
  EXPECT_NEAR(counts[0] / static_cast<double>(n), 0.625, 0.02);
}

TEST(SamplerTest, TopPKeepsTheTokenThatCrossesTheThreshold) {
  const auto logits = LogitsFor({0.5, 0.3, 0.15, 0.05});
  SamplingParams p = Seeded(12);
  p.top_p = 0.85f;  // 0.8 < 0.85 <= 0.95: {0, 1, 2}
  const auto counts = Histogram(p, logits, 20000);
  EXPECT_EQ(counts[3], 0);
  EXPECT_GT(counts[2], 0);
}

TEST(SamplerTest, TopPZeroKeepsOnlyTheMostLikelyToken) {
  const auto logits = LogitsFor({0.2, 0.5, 0.3});
  SamplingParams p = Seeded(13);
  p.top_p = 0.0f;
  const auto counts = Histogram(p, logits, 1000);
  EXPECT_EQ(counts[1], 1000);
}

TEST(SamplerTest, TopPOverALargeVocabularyMatchesABruteForceNucleus) {
  // A nucleus of a few hundred tokens out of 50k exercises the growing partial sort.
  const auto logits = RandomLogits(50000, 5, 2.0f);
  const float top_p = 0.5f;
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  const float max_logit = logits[order[0]];
  double total = 0.0;
  for (float l : logits) total += std::exp(static_cast<double>(l - max_logit));
  std::set<int32_t> nucleus;
  double cum = 0.0;
  for (int32_t id : order) {
    nucleus.insert(id);
    cum += std::exp(static_cast<double>(logits[id] - max_logit));
    if (cum >= top_p * total) break;
  }
  ASSERT_GT(nucleus.size(), 64u) << "the test wants a nucleus larger than the first sorted chunk";

  SamplingParams p = Seeded(21);
  p.top_p = top_p;
  Sampler s(p);
  std::set<int32_t> seen;
  for (int i = 0; i < 5000; ++i) {
    auto scratch = logits;
    const int32_t t = s.Sample(scratch, {}, nullptr);
    ASSERT_TRUE(nucleus.count(t)) << "token " << t << " is outside the nucleus";
    seen.insert(t);
  }
  // The draws reach deep into the nucleus, not only the first chunk.
  EXPECT_GT(seen.size(), 64u);
}

TEST(SamplerTest, MinPDropsTokensBelowTheFractionOfTheBest) {
  // min_p = 0.2 of p_max = 0.5 is 0.1: token 3 (0.05) goes, token 2 (0.15) stays.
  const auto logits = LogitsFor({0.5, 0.3, 0.15, 0.05});
  SamplingParams p = Seeded(17);
  p.min_p = 0.2f;
  const int n = 20000;
  const auto counts = Histogram(p, logits, n);
  EXPECT_EQ(counts[3], 0);
  const auto expected = Normalised({0.5, 0.3, 0.15});
  EXPECT_LT(ChiSquare({counts[0], counts[1], counts[2]}, expected), 13.8);
}

TEST(SamplerTest, FiltersComposeInOrder) {
  // top_k = 3 keeps {0, 1, 2} (mass 0.95); top_p = 0.82 of that is 0.779, reached by {0, 1}.
  // The other order (top-p over all four first) would keep {0, 1, 2}: 0.8 < 0.82.
  const auto logits = LogitsFor({0.5, 0.3, 0.15, 0.05});
  SamplingParams p = Seeded(19);
  p.top_k = 3;
  p.top_p = 0.82f;
  const auto counts = Histogram(p, logits, 5000);
  EXPECT_EQ(counts[2] + counts[3], 0);
  EXPECT_GT(counts[1], 0);
}

TEST(SamplerTest, TemperatureOneFollowsTheSoftmax) {
  const auto logits = LogitsFor({1.0 / 7, 2.0 / 7, 4.0 / 7});
  const auto counts = Histogram(Seeded(23, 1.0f), logits, 30000);
  EXPECT_LT(ChiSquare(counts, {1.0 / 7, 2.0 / 7, 4.0 / 7}), 13.8);
}

TEST(SamplerTest, TemperatureReshapesTheDistribution) {
  // Weights 1 : 2 : 4 become 1 : 4 : 16 at T = 0.5 and 1 : sqrt2 : 2 at T = 2.
  const auto logits = LogitsFor({1.0 / 7, 2.0 / 7, 4.0 / 7});
  const auto sharp = Normalised({1.0, 4.0, 16.0});
  const auto flat = Normalised({1.0, std::sqrt(2.0), 2.0});
  const auto cold = Histogram(Seeded(29, 0.5f), logits, 30000);
  const auto hot = Histogram(Seeded(31, 2.0f), logits, 30000);
  EXPECT_LT(ChiSquare(cold, sharp), 13.8);
  EXPECT_LT(ChiSquare(hot, flat), 13.8);
  // And each is far from the other's distribution (the test has power).
  EXPECT_GT(ChiSquare(cold, flat), 1000.0);
  EXPECT_GT(ChiSquare(hot, sharp), 1000.0);
}

TEST(SamplerTest, PenaltiesChangeTheGreedyChoice) {
  SamplingParams p = Seeded(1, 0.0f);
  p.repetition_penalty = 2.0f;
  Sampler s(p);
  std::vector<float> logits = {3.0f, 2.0f, 0.0f};
  const std::vector<int32_t> history = {0};
  EXPECT_EQ(s.Sample(logits, history, nullptr), 1);  // 3 / 2 = 1.5 < 2
  EXPECT_FLOAT_EQ(logits[0], 1.5f);                  // logits hold the penalised values
}

TEST(SamplerTest, LogprobsAreANormalisedRankedDistribution) {
  auto logits = RandomLogits(10, 3, 1.0f);
  SamplingParams p = Seeded(5);
  p.logprobs = 10;
  Sampler s(p);
  TokenLogprob lp;
  const int32_t t = s.Sample(logits, {}, &lp);
  EXPECT_EQ(lp.token, t);
  ASSERT_EQ(lp.top.size(), 10u);
  double mass = 0.0;
  for (size_t i = 0; i < lp.top.size(); ++i) {
    mass += std::exp(static_cast<double>(lp.top[i].logprob));
    EXPECT_LE(lp.top[i].logprob, 0.0f);
    EXPECT_TRUE(lp.top[i].text.empty());
    if (i > 0) {
      EXPECT_GE(lp.top[i - 1].logprob, lp.top[i].logprob);
    }
    if (lp.top[i].token == t) {
      EXPECT_FLOAT_EQ(lp.top[i].logprob, lp.logprob);
    }
  }
  EXPECT_NEAR(mass, 1.0, 1e-5);
  EXPECT_TRUE(lp.text.empty());
}

TEST(SamplerTest, TopLogprobsAreTheNBestOfALargeVocabulary) {
  auto logits = RandomLogits(49152, 8);
  const auto raw = logits;
  SamplingParams p = Seeded(5);
  p.logprobs = 20;
  Sampler s(p);
  TokenLogprob lp;
  s.Sample(logits, {}, &lp);
  std::vector<int32_t> order(raw.size());
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + 20, order.end(),
                    [&](int32_t a, int32_t b) { return raw[a] > raw[b]; });
  ASSERT_EQ(lp.top.size(), 20u);
  for (size_t i = 0; i < 20; ++i) EXPECT_EQ(lp.top[i].token, order[i]);
  // log p_i - log p_j == logit_i - logit_j.
  EXPECT_NEAR(lp.top[0].logprob - lp.top[19].logprob, raw[order[0]] - raw[order[19]], 1e-4);
}

TEST(SamplerTest, LogprobsAreRawBeforeTemperatureAndFilters) {
  const auto logits = LogitsFor({0.5, 0.3, 0.15, 0.05});
  SamplingParams p = Seeded(5, 0.3f);
  p.top_k = 1;
  p.logprobs = 4;
  Sampler s(p);
  auto scratch = logits;
  TokenLogprob lp;
  EXPECT_EQ(s.Sample(scratch, {}, &lp), 0);
  EXPECT_NEAR(lp.logprob, std::log(0.5), 1e-5);
  ASSERT_EQ(lp.top.size(), 4u);
  EXPECT_EQ(lp.top[3].token, 3);
  EXPECT_NEAR(lp.top[3].logprob, std::log(0.05), 1e-5);  // filtered out, still finite
}

TEST(SamplerTest, LogprobsSeeThePenalties) {
  SamplingParams p = Seeded(5, 0.0f);
  p.presence_penalty = std::log(2.0f);  // halves token 0's odds
  p.logprobs = 2;
  Sampler s(p);
  std::vector<float> logits = {0.0f, 0.0f};
  const std::vector<int32_t> history = {0};
  TokenLogprob lp;
  EXPECT_EQ(s.Sample(logits, history, &lp), 1);
  EXPECT_NEAR(lp.logprob, std::log(2.0 / 3.0), 1e-5);
  EXPECT_NEAR(lp.top[1].logprob, std::log(1.0 / 3.0), 1e-5);
}

TEST(SamplerTest, LogprobsZeroGivesOnlyTheChosenToken) {
  SamplingParams p = Seeded(5, 0.0f);
  p.logprobs = 0;
  Sampler s(p);
  std::vector<float> logits = {0.0f, 1.0f};
  TokenLogprob lp;
  lp.top.push_back({});
  EXPECT_EQ(s.Sample(logits, {}, &lp), 1);
  EXPECT_TRUE(lp.top.empty());
  EXPECT_NEAR(lp.logprob, 1.0 - std::log(1.0 + std::exp(1.0)), 1e-5);
}

TEST(SamplerTest, LogprobsOffLeavesTheOutputUntouched) {
  Sampler s(Seeded(5, 0.0f));
  std::vector<float> logits = {0.0f, 1.0f};
  TokenLogprob lp;
  lp.token = 77;
  s.Sample(logits, {}, &lp);
  EXPECT_EQ(lp.token, 77);
}

}  // namespace
}  // namespace kinfer
