// Tests for CircuitBreaker: the state machine is driven with fabricated time, as resilience4j
// tests its own (3 failures of 5 -> OPEN; still OPEN at +3 s, HALF_OPEN at +6 s with a 5 s wait).
#include "sidecar/policy/circuit_breaker.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>

namespace kinfer {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using State = CircuitBreaker::State;
using Reason = CircuitBreaker::Reason;
using Dur = CircuitBreaker::Duration;

constexpr auto kFast = milliseconds(10);
constexpr auto kSlow = seconds(3);

// Window of 5 calls, 50% failure and slow-call rates (slow = 2 s), 5 s open, 3 probes.
CircuitBreakerConfig CountConfig() {
  return {.window_type = CircuitBreakerWindowType::kCountBased,
          .window_size = 5,
          .minimum_calls = 5,
          .failure_rate_threshold = 50.0,
          .slow_call_duration = seconds(2),
          .slow_call_rate_threshold = 50.0,
          .open_duration = seconds(5),
          .half_open_permitted_calls = 3};
}

class CircuitBreakerTest : public ::testing::Test {
 protected:
  void Init(const CircuitBreakerConfig& config) {
    ASSERT_TRUE(config.Validate().ok()) << config.Validate().ToString();
    cb_ = std::make_unique<CircuitBreaker>(config);
  }
  // t0 + offset: an arbitrary, non-zero origin.
  static CircuitBreaker::TimePoint At(Dur offset) {
    return CircuitBreaker::TimePoint{} + seconds(1000) + offset;
  }
  // n acquired calls at t0 + t, each lasting d, reported as failures or successes.
  void Call(bool fail, Dur t, int n, Dur d) {
    for (int i = 0; i < n; ++i) {
      ASSERT_TRUE(cb_->TryAcquire(At(t)));
      fail ? cb_->OnFailure(d, At(t)) : cb_->OnSuccess(d, At(t));
    }
  }
  void Succeed(Dur t, int n = 1, Dur d = kFast) { Call(false, t, n, d); }
  void Fail(Dur t, int n = 1, Dur d = kFast) { Call(true, t, n, d); }
  // Trips a CountConfig() breaker at t0 with 3 failures of 5.
  void TripAtZero() {
    Init(CountConfig());
    Succeed(seconds(0), 2);
    Fail(seconds(0), 3);
    ASSERT_EQ(cb_->state(At(seconds(0))), State::kOpen);
  }

  std::unique_ptr<CircuitBreaker> cb_;
};

TEST_F(CircuitBreakerTest, OpensWhenFailureRateReachesThresholdAtMinimumCalls) {
  Init(CountConfig());
  Succeed(seconds(0), 2);
  Fail(seconds(0), 2);
  EXPECT_EQ(cb_->state(At(seconds(0))), State::kClosed);  // 4 calls < minimum 5
  Fail(seconds(0));
  EXPECT_EQ(cb_->state(At(seconds(0))), State::kOpen);
  EXPECT_EQ(cb_->transitions(), 1u);
  EXPECT_EQ(cb_->last_transition().reason, Reason::kFailureRate);
  EXPECT_DOUBLE_EQ(cb_->snapshot(At(seconds(0))).failure_rate, 60.0);  // 3 of 5
  EXPECT_FALSE(cb_->TryAcquire(At(seconds(0))));
  EXPECT_EQ(cb_->not_permitted(), 1u);
}

TEST_F(CircuitBreakerTest, StaysOpenUntilOpenDurationThenHalfOpens) {
  TripAtZero();
  EXPECT_FALSE(cb_->TryAcquire(At(seconds(3))));
  EXPECT_EQ(cb_->state(At(seconds(3))), State::kOpen);
  EXPECT_EQ(cb_->state(At(seconds(6))), State::kHalfOpen);
  EXPECT_EQ(cb_->transitions(), 2u);
  EXPECT_EQ(cb_->last_transition().from, State::kOpen);
  EXPECT_EQ(cb_->last_transition().reason, Reason::kOpenDurationElapsed);
}

TEST_F(CircuitBreakerTest, HalfOpenPermitsAtMostPermittedCalls) {
  TripAtZero();
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(cb_->TryAcquire(At(seconds(6)))) << i;
  EXPECT_FALSE(cb_->TryAcquire(At(seconds(6))));
  EXPECT_EQ(cb_->RetryAfter(At(seconds(6))), CircuitBreaker::kBusyRetryAfter);
}

TEST_F(CircuitBreakerTest, SuccessfulProbesCloseWithAnEmptyWindow) {
  TripAtZero();
  Succeed(seconds(6), 3);
  EXPECT_EQ(cb_->state(At(seconds(6))), State::kClosed);
  EXPECT_EQ(cb_->last_transition().reason, Reason::kProbesHealthy);
  EXPECT_EQ(cb_->snapshot(At(seconds(6))).calls, 0);
  // The old failures are gone: 2 failures of 5 new calls keep it closed.
  Fail(seconds(7), 2);
  Succeed(seconds(7), 3);
  EXPECT_EQ(cb_->state(At(seconds(7))), State::kClosed);
}

TEST_F(CircuitBreakerTest, FailedProbesReopenWithAFreshWait) {
  TripAtZero();
  Fail(seconds(6), 2);
  Succeed(seconds(6));
  EXPECT_EQ(cb_->state(At(seconds(6))), State::kOpen);
  EXPECT_EQ(cb_->last_transition().reason, Reason::kFailureRate);
  EXPECT_EQ(cb_->RetryAfter(At(seconds(6))), seconds(5));
  EXPECT_FALSE(cb_->TryAcquire(At(seconds(10))));
  EXPECT_EQ(cb_->state(At(seconds(11))), State::kHalfOpen);
}

TEST_F(CircuitBreakerTest, FailedProbeIsJudgedOnlyAfterAllPermittedProbes) {
  TripAtZero();
  Fail(seconds(6));
  EXPECT_EQ(cb_->state(At(seconds(6))), State::kHalfOpen);  // 1 of 1 failed, but not decided
  Succeed(seconds(6));
  EXPECT_EQ(cb_->state(At(seconds(6))), State::kHalfOpen);
  Succeed(seconds(6));
  EXPECT_EQ(cb_->state(At(seconds(6))), State::kClosed);  // 1 of 3 = 33% < 50%
}

TEST_F(CircuitBreakerTest, NeverOpensBelowMinimumCalls) {
  CircuitBreakerConfig c = CountConfig();
  c.window_size = 10;
  Init(c);
  Fail(seconds(0), 4);
  EXPECT_EQ(cb_->state(At(seconds(0))), State::kClosed);
  EXPECT_DOUBLE_EQ(cb_->snapshot(At(seconds(0))).failure_rate, 100.0);
  EXPECT_EQ(cb_->transitions(), 0u);
}

TEST_F(CircuitBreakerTest, MinimumCallsAboveCountWindowActsAsWindowSize) {
  CircuitBreakerConfig c = CountConfig();
  c.minimum_calls = 50;  // can never be reached with 5 slots
  Init(c);
  Fail(seconds(0), 5);
  EXPECT_EQ(cb_->state(At(seconds(0))), State::kOpen);
}

TEST_F(CircuitBreakerTest, SlowCallRateOpensWithoutFailures) {
  Init(CountConfig());
  Succeed(seconds(0), 2);
  Succeed(seconds(0), 3, kSlow);
  EXPECT_EQ(cb_->state(At(seconds(0))), State::kOpen);
  EXPECT_EQ(cb_->last_transition().reason, Reason::kSlowCallRate);
  CircuitBreaker::Snapshot s = cb_->snapshot(At(seconds(0)));
  EXPECT_EQ(s.failed_calls, 0);
  EXPECT_DOUBLE_EQ(s.slow_call_rate, 60.0);
}

TEST_F(CircuitBreakerTest, SlowSuccessIsSlowNotFailedAndSlowFailureIsBoth) {
  Init(CountConfig());
  Succeed(seconds(0), 1, seconds(2));  // exactly the threshold counts as slow
  Fail(seconds(0), 1, kSlow);
  CircuitBreaker::Snapshot s = cb_->snapshot(At(seconds(0)));
  EXPECT_EQ(s.calls, 2);
  EXPECT_EQ(s.failed_calls, 1);
  EXPECT_EQ(s.slow_calls, 2);
}

TEST_F(CircuitBreakerTest, CountWindowSlidesOverTheLastCalls) {
  Init(CountConfig());
  Fail(seconds(0), 2);
  Succeed(seconds(0), 5);  // pushes both failures out
  CircuitBreaker::Snapshot s = cb_->snapshot(At(seconds(0)));
  EXPECT_EQ(s.calls, 5);
  EXPECT_EQ(s.failed_calls, 0);
  Fail(seconds(0), 2);
  EXPECT_EQ(cb_->state(At(seconds(0))), State::kClosed);  // 2 of the last 5
  Fail(seconds(0));
  EXPECT_EQ(cb_->state(At(seconds(0))), State::kOpen);  // 3 of the last 5
}

CircuitBreakerConfig TimeConfig(int window_seconds) {
  CircuitBreakerConfig c = CountConfig();
  c.window_type = CircuitBreakerWindowType::kTimeBased;
  c.window_size = window_seconds;
  c.minimum_calls = 3;
  return c;
}

TEST_F(CircuitBreakerTest, TimeWindowBucketsRollOverOneSecondAtATime) {
  Init(TimeConfig(3));
  Fail(milliseconds(100));
  Succeed(milliseconds(1500));
  EXPECT_EQ(cb_->state(At(milliseconds(1500))), State::kClosed);  // 2 calls < minimum 3
  Succeed(milliseconds(2900));
  EXPECT_EQ(cb_->snapshot(At(milliseconds(2999))).calls, 3);
  CircuitBreaker::Snapshot s = cb_->snapshot(At(seconds(3)));  // second 0 has left
  EXPECT_EQ(s.calls, 2);
  EXPECT_EQ(s.failed_calls, 0);
  EXPECT_EQ(cb_->snapshot(At(seconds(4))).calls, 1);
  EXPECT_EQ(cb_->snapshot(At(seconds(5))).calls, 0);
}

TEST_F(CircuitBreakerTest, TimeWindowForgetsOutcomesOlderThanTheWindow) {
  Init(TimeConfig(10));
  Fail(seconds(0));
  Fail(seconds(1));
  EXPECT_EQ(cb_->snapshot(At(milliseconds(9500))).calls, 2);
  // At +11 s both failures are out; counted, they would make 3 of 5 and open the breaker.
  Fail(seconds(11));
  Succeed(seconds(11), 2);
  EXPECT_EQ(cb_->state(At(seconds(11))), State::kClosed);
  EXPECT_EQ(cb_->snapshot(At(seconds(11))).failed_calls, 1);
}

TEST_F(CircuitBreakerTest, TimeWindowRestartsCleanAfterALongIdleGap) {
  Init(TimeConfig(10));
  Fail(seconds(0), 2);
  EXPECT_EQ(cb_->snapshot(At(seconds(3600))).calls, 0);
  Fail(seconds(3600));
  Succeed(seconds(3601));
  Succeed(seconds(3602));
  CircuitBreaker::Snapshot s = cb_->snapshot(At(seconds(3602)));
  EXPECT_EQ(s.calls, 3);
  EXPECT_EQ(s.failed_calls, 1);
  Fail(seconds(3605));  // 2 of 4 within 10 s: opens
  EXPECT_EQ(cb_->state(At(seconds(3605))), State::kOpen);
}

TEST_F(CircuitBreakerTest, RetryAfterCountsDownToZero) {
  Init(CountConfig());
  EXPECT_EQ(cb_->RetryAfter(At(seconds(0))), Dur::zero());
  Fail(seconds(0), 5);
  EXPECT_EQ(cb_->RetryAfter(At(seconds(0))), seconds(5));
  EXPECT_EQ(cb_->RetryAfter(At(milliseconds(2500))), milliseconds(2500));
  EXPECT_EQ(cb_->RetryAfter(At(milliseconds(4999))), milliseconds(1));
  EXPECT_EQ(cb_->RetryAfter(At(seconds(5))), Dur::zero());
  EXPECT_EQ(cb_->state(At(seconds(5))), State::kHalfOpen);
}

TEST_F(CircuitBreakerTest, OnIgnoredReleasesAHalfOpenPermitWithoutCounting) {
  TripAtZero();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(cb_->TryAcquire(At(seconds(6))));
  EXPECT_FALSE(cb_->TryAcquire(At(seconds(6))));
  cb_->OnIgnored();  // one probe's client went away
  EXPECT_EQ(cb_->snapshot(At(seconds(6))).calls, 0);
  EXPECT_TRUE(cb_->TryAcquire(At(seconds(6))));
  for (int i = 0; i < 2; ++i) cb_->OnSuccess(kFast, At(seconds(6)));
  EXPECT_EQ(cb_->state(At(seconds(6))), State::kHalfOpen);  // 2 of 3 outcomes
  cb_->OnSuccess(kFast, At(seconds(6)));
  EXPECT_EQ(cb_->state(At(seconds(6))), State::kClosed);
  ASSERT_TRUE(cb_->TryAcquire(At(seconds(7))));  // while CLOSED it is simply not counted
  cb_->OnIgnored();
  EXPECT_EQ(cb_->snapshot(At(seconds(7))).calls, 0);
}

TEST_F(CircuitBreakerTest, LateOutcomesAreNotCountedAsProbes) {
  TripAtZero();
  cb_->OnFailure(kFast, At(seconds(1)));  // a call acquired while CLOSED, reported while OPEN
  EXPECT_EQ(cb_->state(At(seconds(6))), State::kHalfOpen);
  cb_->OnFailure(kFast, At(seconds(6)));  // no permit was granted for it
  EXPECT_EQ(cb_->snapshot(At(seconds(6))).calls, 0);
  Succeed(seconds(6), 3);
  EXPECT_EQ(cb_->state(At(seconds(6))), State::kClosed);
}

// The field that Validate() blames for a default config changed by `mutate`, or "OK".
std::string InvalidField(void (*mutate)(CircuitBreakerConfig&)) {
  CircuitBreakerConfig c;
  mutate(c);
  Status s = c.Validate();
  if (s.ok()) return "OK";
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  return s.message().substr(0, s.message().find(':'));
}

TEST(CircuitBreakerConfigTest, ValidateNamesTheOffendingField) {
  using C = CircuitBreakerConfig&;
  EXPECT_EQ(InvalidField([](C c) { c.window_size = 0; }), "window_size");
  EXPECT_EQ(InvalidField([](C c) { c.window_size = (1 << 20) + 1; }), "window_size");
  EXPECT_EQ(InvalidField([](C c) { c.minimum_calls = 0; }), "minimum_calls");
  EXPECT_EQ(InvalidField([](C c) { c.failure_rate_threshold = 0; }), "failure_rate_threshold");
  EXPECT_EQ(InvalidField([](C c) { c.failure_rate_threshold = 101; }), "failure_rate_threshold");
  EXPECT_EQ(InvalidField([](C c) { c.slow_call_duration = seconds(0); }), "slow_call_duration");
  EXPECT_EQ(InvalidField([](C c) { c.slow_call_rate_threshold = -1; }), "slow_call_rate_threshold");
  EXPECT_EQ(InvalidField([](C c) { c.open_duration = seconds(-1); }), "open_duration");
  EXPECT_EQ(InvalidField([](C c) { c.half_open_permitted_calls = 0; }),
            "half_open_permitted_calls");
  EXPECT_EQ(InvalidField([](C) {}), "OK");  // the resilience4j defaults
  EXPECT_EQ(InvalidField([](C c) { c.failure_rate_threshold = 100; }), "OK");
}

TEST(CircuitBreakerNamesTest, StatesAndReasonsHaveStableNames) {
  EXPECT_EQ(CircuitBreakerStateName(State::kOpen), "OPEN");
  EXPECT_EQ(CircuitBreakerStateName(State::kHalfOpen), "HALF_OPEN");
  EXPECT_EQ(CircuitBreakerReasonName(Reason::kSlowCallRate), "SLOW_CALL_RATE");
}

}  // namespace
}  // namespace kinfer
