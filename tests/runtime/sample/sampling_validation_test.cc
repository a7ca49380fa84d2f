#include "runtime/sample/sampling_validation.h"

#include <cmath>
#include <functional>
#include <limits>

#include <gtest/gtest.h>

namespace kinfer {
namespace {

Status Check(const std::function<void(SamplingParams&)>& set) {
  SamplingParams p;
  set(p);
  return ValidateSamplingParams(p).status();
}

TEST(SamplingValidationTest, DefaultsAreValid) {
  EXPECT_TRUE(ValidateSamplingParams(SamplingParams()).ok());
}

TEST(SamplingValidationTest, BoundsAreInclusiveWhereOpenAIsAre) {
  EXPECT_TRUE(Check([](auto& p) { p.temperature = 0.0f; }).ok());
  EXPECT_TRUE(Check([](auto& p) { p.temperature = 2.0f; }).ok());
  EXPECT_TRUE(Check([](auto& p) { p.top_p = 0.0f; }).ok());
  EXPECT_TRUE(Check([](auto& p) { p.min_p = 1.0f; }).ok());
  EXPECT_TRUE(Check([](auto& p) { p.frequency_penalty = -2.0f; }).ok());
  EXPECT_TRUE(Check([](auto& p) { p.presence_penalty = 2.0f; }).ok());
  EXPECT_TRUE(Check([](auto& p) { p.logprobs = 20; }).ok());
  EXPECT_TRUE(Check([](auto& p) { p.logprobs = 0; }).ok());
  EXPECT_TRUE(Check([](auto& p) { p.penalty_last_n = -1; }).ok());
  EXPECT_TRUE(Check([](auto& p) { p.logit_bias = {{0, -100.0f}, {9, 100.0f}}; }).ok());
}

TEST(SamplingValidationTest, OutOfRangeValuesAreInvalidArgumentNamingTheField) {
  struct Case {
    const char* field;
    std::function<void(SamplingParams&)> set;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Case cases[] = {
      {"temperature", [](auto& p) { p.temperature = -0.1f; }},
      {"temperature", [](auto& p) { p.temperature = 2.01f; }},
      {"temperature", [nan](auto& p) { p.temperature = nan; }},
      {"top_k", [](auto& p) { p.top_k = -2; }},
      {"top_p", [](auto& p) { p.top_p = 1.5f; }},
      {"top_p", [](auto& p) { p.top_p = -0.1f; }},
      {"min_p", [](auto& p) { p.min_p = 1.1f; }},
      {"repetition_penalty", [](auto& p) { p.repetition_penalty = 0.0f; }},
      {"repetition_penalty",
       [](auto& p) { p.repetition_penalty = std::numeric_limits<float>::infinity(); }},
      {"frequency_penalty", [](auto& p) { p.frequency_penalty = 2.5f; }},
      {"presence_penalty", [](auto& p) { p.presence_penalty = -3.0f; }},
      {"penalty_last_n", [](auto& p) { p.penalty_last_n = -2; }},
      {"logprobs", [](auto& p) { p.logprobs = 21; }},
      {"logprobs", [](auto& p) { p.logprobs = -2; }},
      {"logit_bias",
       [](auto& p) {
         p.logit_bias = {{1, 100.5f}};
       }},
      {"logit_bias",
       [](auto& p) {
         p.logit_bias = {{1, 0.0f}, {2, -100.01f}};
       }},
      {"logit_bias",
       [nan](auto& p) {
         p.logit_bias = {{1, nan}};
       }},
  };
  for (const auto& c : cases) {
    const Status s = Check(c.set);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.field;
    EXPECT_NE(s.message().find(c.field), std::string::npos) << s.message();
  }
}

TEST(SamplingValidationTest, TopKMinusOneMeansOff) {
  SamplingParams p;
  p.top_k = -1;
  auto v = ValidateSamplingParams(p);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->top_k, 0);
}

}  // namespace
}  // namespace kinfer
