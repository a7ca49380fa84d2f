#include "runtime/sample/penalties.h"

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

}  // namespace
}  // namespace kinfer
