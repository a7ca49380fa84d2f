// Sampler::Distribution / DrawFrom / Verify: the speculative-decoding rejection rule keeps the
// output distribution, and greedy verification is exact.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "runtime/sample/penalties.h"
#include "runtime/sample/sampler.h"

namespace kinfer {
namespace {

std::vector<float> LogitsFor(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

SamplingParams Seeded(uint64_t seed, float temperature) {
  SamplingParams p;
  p.seed = seed;
  p.temperature = temperature;
  return p;
}

double TotalVariation(const std::vector<double>& a, const std::vector<double>& b) {
  double tv = 0;
  for (size_t i = 0; i < a.size(); ++i) tv += std::abs(a[i] - b[i]);
  return tv / 2;
}

TEST(SamplerDistributionTest, GreedyIsOneHotAndSortedById) {
  Sampler s(Seeded(1, 0.0f));
  std::vector<float> logits{0.1f, 2.0f, -1.0f, 2.0f};
  TokenDistribution d;
  s.Distribution(logits, {}, &d);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].first, 1);  // ties to the lowest id, as Sample
  EXPECT_DOUBLE_EQ(d[0].second, 1.0);

  Sampler t(Seeded(1, 1.0f));
  std::vector<float> l2 = LogitsFor({0.1, 0.2, 0.3, 0.4});
  t.Distribution(l2, {}, &d);
  ASSERT_EQ(d.size(), 4u);
  double sum = 0;
  for (size_t i = 0; i < d.size(); ++i) {
    EXPECT_EQ(d[i].first, static_cast<int32_t>(i));
    sum += d[i].second;
  }
  EXPECT_NEAR(sum, 1.0, 1e-12);
  EXPECT_NEAR(ProbabilityOf(d, 3), 0.4, 1e-6);
  EXPECT_EQ(ProbabilityOf(d, 7), 0.0);
}

TEST(SamplerDistributionTest, TruncationRemovesTokensFromTheDistribution) {
  SamplingParams p = Seeded(1, 0.8f);
  p.top_k = 2;
  Sampler s(p);
  std::vector<float> logits = LogitsFor({0.1, 0.5, 0.15, 0.25});
  TokenDistribution d;
  s.Distribution(logits, {}, &d);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].first, 1);
  EXPECT_EQ(d[1].first, 3);
}

TEST(SamplerVerifyTest, GreedyAcceptsExactlyTheArgmaxAndConsumesNoRandomness) {
  Sampler s(Seeded(9, 0.0f));
  std::vector<float> logits{0.0f, 1.0f, 3.0f, 2.0f};
  bool accepted = false;
  auto l = logits;
  EXPECT_EQ(s.Verify(l, {}, 2, nullptr, &accepted, nullptr), 2);
  EXPECT_TRUE(accepted);
  l = logits;
  EXPECT_EQ(s.Verify(l, {}, 3, nullptr, &accepted, nullptr), 2);
  EXPECT_FALSE(accepted);
  // Penalties apply before the comparison: a repeated token loses its place.
  SamplingParams pen = Seeded(9, 0.0f);
  pen.repetition_penalty = 2.0f;
  Sampler sp(pen);
  l = logits;
  const std::vector<int32_t> history{2};
  EXPECT_EQ(sp.Verify(l, history, 2, nullptr, &accepted, nullptr), 3);
  EXPECT_FALSE(accepted);
}

TEST(SamplerVerifyTest, LogprobsAreFilledForTheReturnedToken) {
  SamplingParams p = Seeded(3, 0.0f);
  p.logprobs = 2;
  Sampler s(p);
  std::vector<float> logits{0.0f, 1.0f, 3.0f, 2.0f};
  bool accepted = false;
  TokenLogprob lp;
  EXPECT_EQ(s.Verify(logits, {}, 1, nullptr, &accepted, &lp), 2);
  EXPECT_EQ(lp.token, 2);
  ASSERT_EQ(lp.top.size(), 2u);
  EXPECT_EQ(lp.top[0].token, 2);
  EXPECT_EQ(lp.top[1].token, 3);
  EXPECT_LT(lp.logprob, 0.0f);
}

// The token that comes out of verification (the draft when accepted, the residual draw when not)
// is distributed as the target's p, whatever the draft.
TEST(SamplerVerifyTest, ADeterministicDraftKeepsTheTargetDistribution) {
  const std::vector<double> p{0.1, 0.2, 0.4, 0.05, 0.25};
  constexpr int kTrials = 200000;
  for (int32_t draft : {0, 2, 3}) {
    Sampler s(Seeded(1234 + draft, 1.0f));
    std::vector<double> freq(p.size(), 0);
    int accepted_count = 0;
    for (int i = 0; i < kTrials; ++i) {
      auto l = LogitsFor(p);
      bool accepted = false;
      const int32_t t = s.Verify(l, {}, draft, nullptr, &accepted, nullptr);
      freq[t] += 1.0 / kTrials;
      accepted_count += accepted;
      if (accepted) {
        EXPECT_EQ(t, draft);
      } else {
        EXPECT_NE(t, draft);  // the residual has no mass at the draft
      }
    }
    EXPECT_LT(TotalVariation(freq, p), 0.01) << "draft " << draft;
    // Acceptance rate of a point-mass draft is p(draft).
    EXPECT_NEAR(static_cast<double>(accepted_count) / kTrials, p[draft], 0.01) << draft;
  }
}

TEST(SamplerVerifyTest, ASampledDraftKeepsTheTargetDistribution) {
  const std::vector<double> p{0.1, 0.2, 0.4, 0.05, 0.25};
  const std::vector<double> q{0.3, 0.3, 0.1, 0.2, 0.1};  // a poor draft model
  TokenDistribution qd;
  for (size_t i = 0; i < q.size(); ++i) qd.emplace_back(static_cast<int32_t>(i), q[i]);
  constexpr int kTrials = 200000;
  Sampler target(Seeded(77, 1.0f));
  Sampler drafter(Seeded(78, 1.0f));
  std::vector<double> freq(p.size(), 0);
  int accepted_count = 0;
  for (int i = 0; i < kTrials; ++i) {
    const int32_t x = drafter.DrawFrom(qd);
    auto l = LogitsFor(p);
    bool accepted = false;
    freq[target.Verify(l, {}, x, &qd, &accepted, nullptr)] += 1.0 / kTrials;
    accepted_count += accepted;
  }
  EXPECT_LT(TotalVariation(freq, p), 0.01);
  // Expected acceptance = sum min(p, q) = 0.1 + 0.2 + 0.1 + 0.05 + 0.1 = 0.55.
  EXPECT_NEAR(static_cast<double>(accepted_count) / kTrials, 0.55, 0.01);
}

TEST(SamplerVerifyTest, ADraftWithTheTargetsOwnDistributionIsAlwaysAccepted) {
  Sampler target(Seeded(5, 0.7f));
  Sampler drafter(Seeded(6, 0.7f));
  const auto logits = LogitsFor({0.1, 0.2, 0.4, 0.05, 0.25});
  for (int i = 0; i < 1000; ++i) {
    auto ld = logits;
    TokenDistribution q;
    drafter.Distribution(ld, {}, &q);
    const int32_t x = drafter.DrawFrom(q);
    auto lt = logits;
    bool accepted = false;
    EXPECT_EQ(target.Verify(lt, {}, x, &q, &accepted, nullptr), x);
    ASSERT_TRUE(accepted);
  }
}

TEST(SamplerVerifyTest, ADraftOutsideTheTruncatedSetIsNeverAccepted) {
  SamplingParams params = Seeded(11, 1.0f);
  params.top_k = 2;
  Sampler s(params);
  for (int i = 0; i < 200; ++i) {
    auto l = LogitsFor({0.1, 0.5, 0.15, 0.25});
    bool accepted = true;
    const int32_t t = s.Verify(l, {}, 0, nullptr, &accepted, nullptr);
    EXPECT_FALSE(accepted);
    EXPECT_TRUE(t == 1 || t == 3) << t;
  }
}

TEST(SamplerVerifyTest, TheSameSeedGivesTheSameVerdicts) {
  auto run = [] {
    Sampler s(Seeded(42, 1.0f));
    std::vector<int32_t> out;
    for (int i = 0; i < 100; ++i) {
      auto l = LogitsFor({0.1, 0.2, 0.4, 0.05, 0.25});
      bool accepted = false;
      out.push_back(s.Verify(l, {}, i % 5, nullptr, &accepted, nullptr) * 2 + accepted);
    }
    return out;
  };
  EXPECT_EQ(run(), run());
}

// A deterministic draft is verified by DrawToken's rule with the params NextDraw(..., draft)
// gives (a backend draws such a row where the logits are): the same token from the same two PRNG
// outputs, taken whether or not the draft is accepted, and SkipDraws moves past rows a walk did
// not reach, so the stream goes on where drawing every row leaves it.
TEST(SamplerVerifyTest, ADeterministicDraftIsDrawTokensVerificationWithNextDrawsUniforms) {
  SamplingParams params = Seeded(31, 0.9f);
  params.top_k = 40;
  params.top_p = 0.95f;
  params.repetition_penalty = 1.3f;
  params.penalty_last_n = 8;
  params.logit_bias = {{4, 2.0f}};
  std::mt19937_64 g(5);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::uniform_int_distribution<int32_t> pick(0, 299);
  Sampler host(params), device(params);
  std::vector<int32_t> history = {4, 7, 9, 7};
  DrawCandidates cand;
  std::vector<double> probs;
  int accepted_count = 0, rejected_count = 0;
  for (int step = 0; step < 300; ++step) {
    std::vector<float> logits(300);
    for (float& x : logits) x = normal(g);
    // Drafts the target likes half the time (its argmax), else any token.
    const int32_t draft = step % 2 ? static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) -
                                                           logits.begin())
                                   : pick(g);
    std::vector<float> row = logits;
    std::vector<LogitAdjust> list;
    DrawParams d = device.NextDraw(std::span<const int32_t>(history).first(history.size() - 1),
                                   300, &list, {}, draft);
    d.adjust = list;
    ApplyLogitAdjustments(d, history.back(), row);
    bool accepted = false;
    const int32_t want = host.Verify(logits, history, draft, nullptr, &accepted, nullptr);
    ASSERT_EQ(DrawToken(row, d, &cand, &probs), want) << "step " << step;
    EXPECT_EQ(accepted, want == draft);
    accepted_count += accepted;
    rejected_count += !accepted;
    // Every fifth step the host's walk "stops" here with two rows of a draft unreached and the
    // row after it: the host skips their five outputs, the device drew them.
    if (step % 5 == 4) {
      host.SkipDraws(5);
      std::vector<LogitAdjust> unused;
      for (int r = 0; r < 2; ++r) device.NextDraw({}, 300, &unused, {}, 1);
      device.NextDraw({}, 300, &unused);
    }
    history.push_back(want);
  }
  EXPECT_GT(accepted_count, 30);
  EXPECT_GT(rejected_count, 30);
  // Greedy takes no randomness, with a draft or not, and SkipDraws skips nothing.
  Sampler greedy(Seeded(3, 0.0f)), fresh(Seeded(3, 0.0f));
  std::vector<LogitAdjust> list;
  const DrawParams gd = greedy.NextDraw({}, 10, &list, {}, 2);
  EXPECT_EQ(gd.draft, 2);
  greedy.SkipDraws(9);
  auto l1 = LogitsFor({0.1, 0.2, 0.4, 0.05, 0.25});
  auto l2 = l1;
  EXPECT_EQ(greedy.Sample(l1, {}, nullptr), fresh.Sample(l2, {}, nullptr));
}

}  // namespace
}  // namespace kinfer
