#include "runtime/sample/penalties.h"

#include <random>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

namespace kinfer {
namespace {

SamplingParams Penalties(float repeat, float freq, float presence, int last_n) {
  SamplingParams p;
  p.repetition_penalty = repeat;
  p.frequency_penalty = freq;
  p.presence_penalty = presence;
  p.penalty_last_n = last_n;
  return p;
}

TEST(PenaltiesTest, MatchesHandComputation) {
  std::vector<float> logits = {2.0f, -2.0f, 1.0f, 0.5f, 3.0f};
  const std::vector<int32_t> history = {0, 1, 0, 3};
  ApplyPenalties(Penalties(2.0f, 0.5f, 0.25f, 64), history, logits);
  // token 0: 2 / 2 = 1, seen twice: 1 - 2 * 0.5 - 0.25 = -0.25
  EXPECT_FLOAT_EQ(logits[0], -0.25f);
  // token 1: -2 * 2 = -4, seen once: -4 - 0.5 - 0.25 = -4.75
  EXPECT_FLOAT_EQ(logits[1], -4.75f);
  EXPECT_FLOAT_EQ(logits[2], 1.0f);  // not in the history
  // token 3: 0.5 / 2 = 0.25, seen once: 0.25 - 0.75 = -0.5
  EXPECT_FLOAT_EQ(logits[3], -0.5f);
  EXPECT_FLOAT_EQ(logits[4], 3.0f);
}

TEST(PenaltiesTest, OnlyTheLastNTokensCount) {
  std::vector<float> logits = {2.0f, 2.0f, 2.0f};
  const std::vector<int32_t> history = {0, 0, 1, 2};
  ApplyPenalties(Penalties(1.0f, 1.0f, 0.0f, 2), history, logits);
  EXPECT_FLOAT_EQ(logits[0], 2.0f);  // outside the window
  EXPECT_FLOAT_EQ(logits[1], 1.0f);
  EXPECT_FLOAT_EQ(logits[2], 1.0f);
}

TEST(PenaltiesTest, MinusOneMeansWholeHistoryAndZeroMeansNone) {
  const std::vector<int32_t> history = {0, 0, 0, 1};
  std::vector<float> all = {2.0f, 2.0f};
  ApplyPenalties(Penalties(1.0f, 1.0f, 0.0f, -1), history, all);
  EXPECT_FLOAT_EQ(all[0], -1.0f);
  EXPECT_FLOAT_EQ(all[1], 1.0f);
  std::vector<float> none = {2.0f, 2.0f};
  ApplyPenalties(Penalties(1.0f, 1.0f, 0.0f, 0), history, none);
  EXPECT_FLOAT_EQ(none[0], 2.0f);
  EXPECT_FLOAT_EQ(none[1], 2.0f);
}

TEST(PenaltiesTest, RepetitionDividesPositiveAndMultipliesNegativeOncePerToken) {
  std::vector<float> logits = {3.0f, -3.0f, 0.0f};
  const std::vector<int32_t> history = {0, 0, 0, 1, 1, 2};
  ApplyPenalties(Penalties(1.5f, 0.0f, 0.0f, -1), history, logits);
  EXPECT_FLOAT_EQ(logits[0], 2.0f);
  EXPECT_FLOAT_EQ(logits[1], -4.5f);
  EXPECT_FLOAT_EQ(logits[2], 0.0f);
}

TEST(PenaltiesTest, IdsOutsideTheVocabularyAreIgnored) {
  std::vector<float> logits = {1.0f, 1.0f};
  const std::vector<int32_t> history = {-1, 2, 1000, 1};
  ApplyPenalties(Penalties(2.0f, 0.0f, 1.0f, -1), history, logits);
  EXPECT_FLOAT_EQ(logits[0], 1.0f);
  EXPECT_FLOAT_EQ(logits[1], -0.5f);
}

TEST(PenaltiesTest, NegativePenaltiesRewardRepeats) {
  std::vector<float> logits = {0.0f, 0.0f};
  const std::vector<int32_t> history = {1, 1};
  ApplyPenalties(Penalties(1.0f, -0.5f, -1.0f, -1), history, logits);
  EXPECT_FLOAT_EQ(logits[0], 0.0f);
  EXPECT_FLOAT_EQ(logits[1], 2.0f);
}

TEST(LogitBiasTest, AddsEachBiasAndSkipsIdsOutsideTheVocabulary) {
  std::vector<float> logits = {1.0f, 2.0f, 3.0f};
  SamplingParams p;
  p.logit_bias = {{0, 100.0f}, {2, -2.5f}, {3, 50.0f}, {-1, 7.0f}};
  ApplyLogitBias(p, logits);
  EXPECT_FLOAT_EQ(logits[0], 101.0f);
  EXPECT_FLOAT_EQ(logits[1], 2.0f);
  EXPECT_FLOAT_EQ(logits[2], 0.5f);
}

TEST(LogitBiasTest, ComesBeforeThePenalties) {
  // llama.cpp's and vLLM's order: the repetition penalty sees the biased logit. Biased first,
  // 1 - 3 = -2 is multiplied by 2 (-4); penalised first, 1 / 2 - 3 would be -2.5.
  std::vector<float> logits = {1.0f, 0.0f};
  SamplingParams p = Penalties(2.0f, 0.0f, 0.0f, -1);
  p.logit_bias = {{0, -3.0f}};
  const std::vector<int32_t> history = {0};
  AdjustLogits(p, history, logits);
  EXPECT_FLOAT_EQ(logits[0], -4.0f);
  EXPECT_FLOAT_EQ(logits[1], 0.0f);
}

// The list a device applies (LogitAdjustments, built without the input token) against the host's
// AdjustLogits over the whole history, on random requests: every penalty alone and together,
// windows of -1, 0, 1, 2 and more, biases on tokens inside and outside the window, the input
// token repeated or new, ids outside the vocabulary.
TEST(LogitAdjustmentsTest, EqualTheHostsAdjustmentsForTheWholeHistory) {
  std::mt19937 rng(7);
  const int vocab = 40;
  int cases = 0, changed = 0;
  for (int c = 0; c < 3000; ++c) {
    SamplingParams p;
    const int which = static_cast<int>(rng() % 8);
    if (which & 1) p.repetition_penalty = 0.5f + static_cast<float>(rng() % 100) / 40.0f;
    if (which & 2) p.frequency_penalty = static_cast<float>(static_cast<int>(rng() % 41) - 20) / 10.0f;
    if (which & 4) p.presence_penalty = static_cast<float>(static_cast<int>(rng() % 41) - 20) / 10.0f;
    const int windows[] = {-1, 0, 1, 2, 3, 8, 64};
    p.penalty_last_n = windows[rng() % 7];
    const int nbias = static_cast<int>(rng() % 4);
    for (int b = 0; b < nbias; ++b) {
      const int32_t id = static_cast<int32_t>(rng() % (vocab + 4)) - 2;  // some outside
      bool dup = false;
      for (const auto& e : p.logit_bias) dup = dup || e.first == id;
      if (!dup) p.logit_bias.emplace_back(id, static_cast<float>(static_cast<int>(rng() % 401) - 200) / 4.0f);
    }
    std::sort(p.logit_bias.begin(), p.logit_bias.end());
    std::vector<int32_t> history(1 + rng() % 20);
    for (int32_t& t : history) t = static_cast<int32_t>(rng() % 12) - (rng() % 17 == 0 ? 20 : 0);
    std::vector<float> logits(vocab);
    for (float& l : logits) l = static_cast<float>(static_cast<int>(rng() % 2001) - 1000) / 97.0f;

    std::vector<float> host = logits;
    AdjustLogits(p, history, host);
    std::vector<LogitAdjust> list = {{99, 1.0f, 1}};  // appended after what is there
    DrawParams d;
    const size_t n = LogitAdjustments(p, std::span<const int32_t>(history).first(history.size() - 1),
                                      vocab, &list, &d);
    ASSERT_EQ(list.size(), n + 1);
    d.adjust = std::span<const LogitAdjust>(list).subspan(1);
    for (size_t i = 1; i < d.adjust.size(); ++i) ASSERT_LT(d.adjust[i - 1].id, d.adjust[i].id);
    std::vector<float> dev = logits;
    ApplyLogitAdjustments(d, history.back(), dev);
    for (int t = 0; t < vocab; ++t) {
      ASSERT_EQ(dev[t], host[t]) << "case " << c << " token " << t << " window " << p.penalty_last_n;
    }
    ++cases;
    changed += host != logits;
  }
  EXPECT_EQ(cases, 3000);
  EXPECT_GT(changed, 2000);  // most cases change something
}

TEST(LogitAdjustmentsTest, NothingToApplyWithoutBiasOrPenalties) {
  SamplingParams p;
  const std::vector<int32_t> history = {1, 2, 3};
  std::vector<LogitAdjust> list;
  DrawParams d;
  EXPECT_EQ(LogitAdjustments(p, history, 10, &list, &d), 0u);
  EXPECT_FALSE(d.adjusted());
  p.frequency_penalty = 0.5f;
  p.penalty_last_n = 0;
  EXPECT_EQ(LogitAdjustments(p, history, 10, &list, &d), 0u);
  EXPECT_FALSE(d.adjusted());
  p.penalty_last_n = 1;  // the input token alone
  EXPECT_EQ(LogitAdjustments(p, history, 10, &list, &d), 0u);
  EXPECT_TRUE(d.count_input);
}

// Banned ids (min_tokens' end and stop tokens) are -infinity whatever else lists them: as
// setting them to -infinity before AdjustLogits, with a bias, a penalty count, the input token
// among them, and a repeat.
TEST(LogitAdjustmentsTest, BannedIdsEndAtMinusInfinityAsTheHostLeavesThem) {
  SamplingParams p;
  p.repetition_penalty = 1.3f;
  p.frequency_penalty = -0.7f;
  p.presence_penalty = 0.2f;
  p.logit_bias = {{4, 50.0f}, {6, -3.0f}, {7, 2.0f}};
  const std::vector<int32_t> history = {4, 5, 4, 9, 7};  // input token 7
  const std::vector<int32_t> banned = {7, 4, 8, 4, 42};   // 42: outside the vocabulary
  std::vector<float> host(12);
  for (size_t i = 0; i < host.size(); ++i) host[i] = 0.5f * static_cast<float>(i) - 2.0f;
  std::vector<float> dev = host;
  for (int32_t id : banned) {
    if (id < 12) host[static_cast<size_t>(id)] = -std::numeric_limits<float>::infinity();
  }
  AdjustLogits(p, history, host);
  std::vector<LogitAdjust> list;
  DrawParams d;
  LogitAdjustments(p, std::span<const int32_t>(history).first(4), 12, &list, &d, banned);
  d.adjust = list;
  ApplyLogitAdjustments(d, history.back(), dev);
  for (size_t i = 0; i < host.size(); ++i) EXPECT_EQ(dev[i], host[i]) << "token " << i;
  for (int32_t id : {4, 7, 8}) EXPECT_EQ(dev[static_cast<size_t>(id)], -std::numeric_limits<float>::infinity());
  EXPECT_GT(dev[6], -10.0f);  // a bias alone is not a ban
  // Long lists (the sort then moves equal ids about): the ban holds in whatever order.
  std::mt19937 rng(5);
  p.penalty_last_n = -1;
  for (int c = 0; c < 50; ++c) {
    std::vector<int32_t> h(300);
    for (int32_t& t : h) t = static_cast<int32_t>(rng() % 20);
    p.logit_bias.clear();
    for (int32_t id = 0; id < 20; id += 2) p.logit_bias.emplace_back(id, 30.0f);
    std::vector<int32_t> ban(40);
    for (int32_t& t : ban) t = static_cast<int32_t>(rng() % 20);
    std::vector<float> want(20, 1.0f), got(20, 1.0f);
    for (int32_t id : ban) want[static_cast<size_t>(id)] = -std::numeric_limits<float>::infinity();
    AdjustLogits(p, h, want);
    list.clear();
    LogitAdjustments(p, std::span<const int32_t>(h).first(h.size() - 1), 20, &list, &d, ban);
    d.adjust = list;
    ApplyLogitAdjustments(d, h.back(), got);
    EXPECT_EQ(got, want) << "case " << c;
  }
}

}  // namespace
}  // namespace kinfer
