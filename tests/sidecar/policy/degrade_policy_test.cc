// Tests for DegradePolicy: each trigger, the class rules, the reason precedence and the counters.
#include "sidecar/policy/degrade_policy.h"

#include <gtest/gtest.h>

#include <chrono>
#include <limits>
#include <memory>

namespace kinfer {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Kind = DegradeKind;
using Reason = DegradeReason;

// Three classes: 0 (top), 1 (fallback allowed, cap 256), 2 (no fallback, cap 128). SLO 2 s.
DegradeConfig ThreeClasses() {
  DegradeConfig c;
  c.classes = {
      DegradeClassConfig{.allow_fallback_model = true, .max_tokens_cap = 512, .degrade_on = {}},
      DegradeClassConfig{.allow_fallback_model = true, .max_tokens_cap = 256, .degrade_on = {}},
      DegradeClassConfig{.allow_fallback_model = false, .max_tokens_cap = 128, .degrade_on = {}}};
  c.top_class_only_when_primary_down = true;
  c.slo_ttft_p99 = 2.0;
  return c;
}

class DegradePolicyTest : public ::testing::Test {
 protected:
  void Init(const DegradeConfig& config) {
    ASSERT_TRUE(config.Validate().ok()) << config.Validate().ToString();
    policy_ = std::make_unique<DegradePolicy>(config);
  }
  void SetUp() override { Init(ThreeClasses()); }

  // A healthy request of `priority` asking for 1000 tokens, with a fallback model available.
  static DegradeInputs Healthy(int priority) {
    return {.priority = priority,
            .breaker_open = false,
            .fallback_available = true,
            .estimated_wait = milliseconds(100),
            .time_to_deadline = seconds(10),
            .p99_ttft = 0.5,
            .requested_max_tokens = 1000};
  }
  static DegradeInputs BreakerOpen(int priority) {
    DegradeInputs in = Healthy(priority);
    in.breaker_open = true;
    return in;
  }
  static DegradeInputs DeadlineAtRisk(int priority) {
    DegradeInputs in = Healthy(priority);
    in.estimated_wait = seconds(12);
    return in;
  }
  static DegradeInputs SloBreached(int priority) {
    DegradeInputs in = Healthy(priority);
    in.p99_ttft = 3.0;
    return in;
  }

  std::unique_ptr<DegradePolicy> policy_;
};

TEST_F(DegradePolicyTest, NothingAppliesMeansNoDegradation) {
  for (int p = 0; p < 3; ++p) {
    const DegradeDecision d = policy_->Decide(Healthy(p));
    EXPECT_EQ(d.kind, Kind::kNone) << p;
    EXPECT_EQ(d.reason, Reason::kNone);
    EXPECT_EQ(d.header_value(), "");
    EXPECT_EQ(d.max_tokens, 1000);
  }
}

TEST_F(DegradePolicyTest, BreakerOpenRoutesLowClassToFallbackWithItsCap) {
  const DegradeDecision d = policy_->Decide(BreakerOpen(1));
  EXPECT_EQ(d.kind, Kind::kFallbackAndCap);
  EXPECT_EQ(d.header_value(), "breaker_open");
  EXPECT_EQ(d.max_tokens, 256);
  EXPECT_TRUE(d.uses_fallback());
}

TEST_F(DegradePolicyTest, BreakerOpenDegradesTopClassTooBecauseThePrimaryIsDown) {
  DegradeInputs in = BreakerOpen(0);
  in.requested_max_tokens = 100;  // under the 512 cap: fallback only
  const DegradeDecision d = policy_->Decide(in);
  EXPECT_EQ(d.kind, Kind::kFallbackModel);
  EXPECT_EQ(d.reason, Reason::kBreakerOpen);
  EXPECT_EQ(d.max_tokens, 100);
}

TEST_F(DegradePolicyTest, BreakerOpenWithoutFallbackRejects) {
  DegradeInputs in = BreakerOpen(1);
  in.fallback_available = false;
  DegradeDecision d = policy_->Decide(in);
  EXPECT_EQ(d.kind, Kind::kReject);
  EXPECT_EQ(d.reason, Reason::kBreakerOpen);
  // Class 2 may not use the fallback: capping does not help a down primary.
  d = policy_->Decide(BreakerOpen(2));
  EXPECT_EQ(d.kind, Kind::kReject);
}

TEST_F(DegradePolicyTest, DeadlineAtRiskDegradesLowClassButNeverTopClass) {
  DegradeDecision d = policy_->Decide(DeadlineAtRisk(1));
  EXPECT_EQ(d.kind, Kind::kFallbackAndCap);
  EXPECT_EQ(d.header_value(), "deadline");
  d = policy_->Decide(DeadlineAtRisk(0));
  EXPECT_EQ(d.kind, Kind::kNone);
}

TEST_F(DegradePolicyTest, DeadlineIsAtRiskOnlyWhenTheWaitPassesIt) {
  DegradeInputs in = Healthy(1);
  in.estimated_wait = seconds(10);  // equal to the time left: still in time
  EXPECT_EQ(policy_->Decide(in).kind, Kind::kNone);
  in.estimated_wait = seconds(10) + milliseconds(1);
  EXPECT_EQ(policy_->Decide(in).reason, Reason::kDeadline);
}

TEST_F(DegradePolicyTest, SloBreachCapsTokensPerClassConfig) {
  const DegradeDecision d = policy_->Decide(SloBreached(2));  // class 2: no fallback, cap 128
  EXPECT_EQ(d.kind, Kind::kCapTokens);
  EXPECT_EQ(d.header_value(), "slo");
  EXPECT_EQ(d.max_tokens, 128);
  EXPECT_FALSE(d.uses_fallback());
  EXPECT_EQ(policy_->Decide(SloBreached(0)).kind, Kind::kNone);  // top class untouched
}

TEST_F(DegradePolicyTest, CapAppliesWhenClientSetNoMaxTokens) {
  DegradeInputs in = SloBreached(2);
  in.requested_max_tokens = 0;
  const DegradeDecision d = policy_->Decide(in);
  EXPECT_EQ(d.kind, Kind::kCapTokens);
  EXPECT_EQ(d.max_tokens, 128);
}

TEST_F(DegradePolicyTest, NoPossibleActionMeansNone) {
  DegradeInputs in = SloBreached(2);
  in.requested_max_tokens = 64;  // already under the cap, and no fallback for class 2
  EXPECT_EQ(policy_->Decide(in).kind, Kind::kNone);
}

TEST_F(DegradePolicyTest, SloNeedsAKnownP99AndAnObjective) {
  DegradeInputs in = SloBreached(1);
  in.p99_ttft = std::nullopt;
  EXPECT_EQ(policy_->Decide(in).kind, Kind::kNone);
  DegradeConfig c = ThreeClasses();
  c.slo_ttft_p99 = 0.0;  // disabled
  Init(c);
  EXPECT_EQ(policy_->Decide(SloBreached(1)).kind, Kind::kNone);
}

TEST_F(DegradePolicyTest, ReasonPrecedenceIsBreakerThenDeadlineThenSlo) {
  DegradeInputs in = BreakerOpen(1);
  in.estimated_wait = seconds(12);
  in.p99_ttft = 3.0;
  EXPECT_EQ(policy_->Decide(in).reason, Reason::kBreakerOpen);
  in.breaker_open = false;
  EXPECT_EQ(policy_->Decide(in).reason, Reason::kDeadline);
  in.estimated_wait = Healthy(1).estimated_wait;
  EXPECT_EQ(policy_->Decide(in).reason, Reason::kSlo);
}

TEST_F(DegradePolicyTest, DisabledTriggersAreIgnoredPerClass) {
  DegradeConfig c = ThreeClasses();
  c.classes[1].degrade_on = {.breaker_open = false, .deadline_at_risk = false, .slo_breach = true};
  Init(c);
  DegradeInputs in = BreakerOpen(1);
  in.estimated_wait = seconds(12);
  EXPECT_EQ(policy_->Decide(in).kind, Kind::kNone);  // breaker and deadline off for class 1
  in.p99_ttft = 3.0;
  EXPECT_EQ(policy_->Decide(in).reason, Reason::kSlo);
}

TEST_F(DegradePolicyTest, TopClassFollowsItsFlagsWhenNotRestricted) {
  DegradeConfig c = ThreeClasses();
  c.top_class_only_when_primary_down = false;
  Init(c);
  const DegradeDecision d = policy_->Decide(DeadlineAtRisk(0));
  EXPECT_EQ(d.kind, Kind::kFallbackAndCap);
  EXPECT_EQ(d.max_tokens, 512);
}

TEST_F(DegradePolicyTest, PriorityOutsideTheClassesIsClamped) {
  EXPECT_EQ(policy_->Decide(SloBreached(7)).max_tokens, 128);     // as class 2
  EXPECT_EQ(policy_->Decide(SloBreached(-1)).kind, Kind::kNone);  // as class 0
}

TEST_F(DegradePolicyTest, CountersAreKeptByReason) {
  (void)policy_->Decide(Healthy(1));
  (void)policy_->Decide(BreakerOpen(1));
  (void)policy_->Decide(BreakerOpen(2));  // rejected
  (void)policy_->Decide(DeadlineAtRisk(1));
  (void)policy_->Decide(DeadlineAtRisk(2));
  (void)policy_->Decide(SloBreached(1));
  const DegradePolicy::Stats& s = policy_->stats();
  EXPECT_EQ(s.decisions, 6u);
  EXPECT_EQ(s.not_degraded, 1u);
  EXPECT_EQ(s.degraded[static_cast<size_t>(Reason::kBreakerOpen)], 1u);
  EXPECT_EQ(s.rejected[static_cast<size_t>(Reason::kBreakerOpen)], 1u);
  EXPECT_EQ(s.degraded[static_cast<size_t>(Reason::kDeadline)], 2u);
  EXPECT_EQ(s.degraded[static_cast<size_t>(Reason::kSlo)], 1u);
  uint64_t sum = s.not_degraded;
  for (size_t i = 0; i < kNumDegradeReasons; ++i) sum += s.degraded[i] + s.rejected[i];
  EXPECT_EQ(sum, s.decisions);
}

TEST(DegradeConfigTest, ValidateRejectsBadFields) {
  EXPECT_TRUE(DegradeConfig{}.Validate().ok());
  DegradeConfig c;
  c.classes.clear();
  EXPECT_FALSE(c.Validate().ok());
  c = {};
  c.classes[1].max_tokens_cap = -1;
  EXPECT_FALSE(c.Validate().ok());
  c = {};
  c.slo_ttft_p99 = -1.0;
  EXPECT_FALSE(c.Validate().ok());
  c.slo_ttft_p99 = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(c.Validate().ok());
  EXPECT_FALSE(DegradePolicy::Create(c).ok());
  EXPECT_TRUE(DegradePolicy::Create(ThreeClasses()).ok());
}

TEST(DegradeNamesTest, HeaderAndKindNames) {
  EXPECT_EQ(DegradeReasonName(Reason::kBreakerOpen), "breaker_open");
  EXPECT_EQ(DegradeReasonName(Reason::kDeadline), "deadline");
  EXPECT_EQ(DegradeReasonName(Reason::kSlo), "slo");
  EXPECT_EQ(DegradeReasonName(Reason::kNone), "");
  EXPECT_EQ(DegradeKindName(Kind::kFallbackAndCap), "fallback_and_cap");
  EXPECT_EQ(DegradeKindName(Kind::kReject), "reject");
}

}  // namespace
}  // namespace kinfer
