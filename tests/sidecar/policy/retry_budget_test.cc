// Tests for RetryBudget: convergence to the budget under sustained failure, the low-traffic
// floor, rounding, the sliding window, validation and counters. Time is a fake clock.
#include "sidecar/policy/retry_budget.h"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>

#include <gtest/gtest.h>

namespace kinfer {
namespace {

using namespace std::chrono_literals;
using TimePoint = RetryBudget::TimePoint;

class RetryBudgetTest : public ::testing::Test {
 protected:
  static RetryBudgetConfig Config(double percent, int min_per_second,
                                  std::chrono::nanoseconds window = 10s) {
    RetryBudgetConfig c;
    c.budget_percent = percent;
    c.min_retries_per_second = min_per_second;
    c.window = window;
    return c;
  }
  static void ExpectConsistent(RetryBudget& b, TimePoint now, uint64_t requests, uint64_t tries) {
    const auto& s = b.stats();
    EXPECT_EQ(s.requests, requests);
    EXPECT_EQ(s.retries_allowed + s.retries_denied, tries);
    EXPECT_LE(b.RequestsInWindow(now), s.requests);
    EXPECT_LE(b.RetriesInWindow(now), s.retries_allowed);
  }

  // Aligned to a bucket boundary for every window used here (a whole number of seconds).
  TimePoint t0_ = TimePoint() + 1000s;
};

TEST_F(RetryBudgetTest, SustainedFailureConvergesToBudgetPercent) {
  RetryBudget b(Config(10.0, 3));
  // 100 requests/s for 60 s; every attempt fails, and the proxy retries each failure (retries of
  // retries too, up to 3 attempts in all) for as long as the budget allows.
  uint64_t requests = 0;
  uint64_t tries = 0;
  uint64_t requests_at_50s = 0;
  uint64_t allowed_at_50s = 0;
  TimePoint now = t0_;
  for (int i = 0; i < 6000; ++i) {
    now = t0_ + i * 10ms;
    if (i == 5000) {
      requests_at_50s = b.stats().requests;
      allowed_at_50s = b.stats().retries_allowed;
    }
    b.OnRequest(now);
    ++requests;
    for (int attempt = 1; attempt < 3; ++attempt) {
      ++tries;
      if (!b.TryRetry(now)) break;
    }
    if (i >= 1000) {
      // Past the first window, retries in the window track 10 % of the requests in it, within
      // about two buckets' worth of retries (2 % of the window's requests): the bucket that
      // leaves need not hold the retries its requests earned (the floor's burst at start echoes
      // once per window), and the gap is made up or waited out within a bucket.
      const double in_window = static_cast<double>(b.RequestsInWindow(now));
      ASSERT_NEAR(static_cast<double>(b.RetriesInWindow(now)), 0.10 * in_window, 20) << "i=" << i;
    }
  }
  ExpectConsistent(b, now, requests, tries);
  // Over the last window, the extra load is 10 % of the original load.
  const double last_window_ratio = static_cast<double>(b.stats().retries_allowed - allowed_at_50s) /
                                   static_cast<double>(b.stats().requests - requests_at_50s);
  EXPECT_NEAR(last_window_ratio, 0.10, 0.005);
  // Over the whole run too, plus at most the floor's one-off burst at start.
  EXPECT_LE(b.stats().retries_allowed, requests / 10 + b.floor_retries());
  EXPECT_GE(b.stats().retries_allowed, requests / 10 - 10);
  EXPECT_GT(b.stats().retries_denied, 0u);
}

TEST_F(RetryBudgetTest, LowTrafficStillGetsTheFloor) {
  RetryBudget b(Config(10.0, 3));  // floor: 3/s * 10 s = 30 per window
  EXPECT_EQ(b.floor_retries(), 30u);
  // One request per second: the budget alone would allow one retry per window.
  for (int s = 0; s < 5; ++s) b.OnRequest(t0_ + s * 1s);
  const TimePoint now = t0_ + 5s;
  EXPECT_EQ(b.RequestsInWindow(now), 5u);
  EXPECT_EQ(b.Cap(now), 30u);
  for (int i = 0; i < 30; ++i) EXPECT_TRUE(b.TryRetry(now)) << i;
  EXPECT_FALSE(b.TryRetry(now));
  EXPECT_EQ(b.RetriesInWindow(now), 30u);
  // Retries are not requests: they do not grow the budget.
  EXPECT_EQ(b.RequestsInWindow(now), 5u);
}

TEST_F(RetryBudgetTest, BudgetTakesOverFromTheFloorAsTrafficGrows) {
  RetryBudget b(Config(10.0, 1));  // floor 10
  for (int i = 0; i < 250; ++i) b.OnRequest(t0_);
  EXPECT_EQ(b.Cap(t0_), 25u);
  for (int i = 0; i < 25; ++i) ASSERT_TRUE(b.TryRetry(t0_));
  EXPECT_FALSE(b.TryRetry(t0_));
  b.OnRequest(t0_);  // 251: still floor(25.1) = 25
  EXPECT_FALSE(b.TryRetry(t0_));
  for (int i = 0; i < 9; ++i) b.OnRequest(t0_);  // 260
  EXPECT_TRUE(b.TryRetry(t0_));
  EXPECT_FALSE(b.TryRetry(t0_));
}

TEST_F(RetryBudgetTest, BudgetRoundsDownFloorRoundsUp) {
  RetryBudget down(Config(10.0, 0));
  for (int i = 0; i < 19; ++i) down.OnRequest(t0_);
  EXPECT_EQ(down.Cap(t0_), 1u);  // 1.9 -> 1: never above the budget
  down.OnRequest(t0_);
  EXPECT_EQ(down.Cap(t0_), 2u);

  // Products that are integers in decimal but not in binary still count as that integer.
  RetryBudget tiny(Config(0.1, 0));
  for (int i = 0; i < 1000; ++i) tiny.OnRequest(t0_);
  EXPECT_EQ(tiny.Cap(t0_), 1u);
  RetryBudget odd(Config(29.0, 0));
  for (int i = 0; i < 100; ++i) odd.OnRequest(t0_);
  EXPECT_EQ(odd.Cap(t0_), 29u);

  // 3/s over a 500 ms window is 1.5 retries: the floor keeps 2, not 1.
  EXPECT_EQ(RetryBudget(Config(10.0, 3, 500ms)).floor_retries(), 2u);
  EXPECT_EQ(RetryBudget(Config(10.0, 0)).floor_retries(), 0u);
  // Exact: 30/s over 100 ms is 3 (binary floating point would make it 3.0000000000000004 -> 4).
  EXPECT_EQ(RetryBudget(Config(10.0, 30, 100ms)).floor_retries(), 3u);
  EXPECT_EQ(RetryBudget(Config(10.0, 1, 10ns)).floor_retries(), 1u);
  // Absurd values saturate instead of wrapping.
  EXPECT_EQ(RetryBudget(Config(10.0, std::numeric_limits<int>::max(),
                               std::chrono::nanoseconds(9'000'000'000'000'000'000)))
                .floor_retries(),
            std::numeric_limits<uint64_t>::max());
}

TEST_F(RetryBudgetTest, ZeroBudgetAndZeroFloorDenyEverything) {
  RetryBudget b(Config(0.0, 0));
  for (int i = 0; i < 1000; ++i) b.OnRequest(t0_);
  EXPECT_FALSE(b.TryRetry(t0_));
  EXPECT_EQ(b.stats().retries_denied, 1u);
  EXPECT_EQ(b.RetriesInWindow(t0_), 0u);
}

TEST_F(RetryBudgetTest, FullBudgetAllowsOneRetryPerRequest) {
  RetryBudget b(Config(100.0, 0));
  for (int i = 0; i < 7; ++i) b.OnRequest(t0_);
  for (int i = 0; i < 7; ++i) EXPECT_TRUE(b.TryRetry(t0_));
  EXPECT_FALSE(b.TryRetry(t0_));
}

TEST_F(RetryBudgetTest, WindowSlidesOldRequestsStopCounting) {
  RetryBudget b(Config(10.0, 0));  // 10 s window, 1 s buckets
  for (int i = 0; i < 100; ++i) b.OnRequest(t0_);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(b.TryRetry(t0_));
  for (int i = 0; i < 100; ++i) b.OnRequest(t0_ + 5s);
  EXPECT_EQ(b.Cap(t0_ + 5s), 20u);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(b.TryRetry(t0_ + 5s));
  // The last instant of the first bucket's life: everything still counts.
  EXPECT_EQ(b.RequestsInWindow(t0_ + 10s - 1ns), 200u);
  EXPECT_EQ(b.RetriesInWindow(t0_ + 10s - 1ns), 10u);
  // At t0 + 10 s the first bucket (100 requests, 5 retries) leaves the window.
  EXPECT_EQ(b.RequestsInWindow(t0_ + 10s), 100u);
  EXPECT_EQ(b.RetriesInWindow(t0_ + 10s), 5u);
  EXPECT_EQ(b.Cap(t0_ + 10s), 10u);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(b.TryRetry(t0_ + 10s)) << i;
  EXPECT_FALSE(b.TryRetry(t0_ + 10s));
  // At t0 + 15 s the second bucket leaves too: no request is left to earn a retry, and with no
  // floor nothing is allowed while the retries taken at t0 + 10 s are still in the window.
  EXPECT_EQ(b.RequestsInWindow(t0_ + 15s), 0u);
  EXPECT_EQ(b.RetriesInWindow(t0_ + 15s), 5u);
  EXPECT_FALSE(b.TryRetry(t0_ + 15s));
  EXPECT_EQ(b.RetriesInWindow(t0_ + 20s), 0u);
  // The lifetime counters keep everything.
  EXPECT_EQ(b.stats().requests, 200u);
  EXPECT_EQ(b.stats().retries_allowed, 15u);
  EXPECT_EQ(b.stats().retries_denied, 2u);
}

TEST_F(RetryBudgetTest, RetriesAgeOutAndFreeTheFloor) {
  RetryBudget b(Config(10.0, 1, 1s));  // floor 1 per 1 s window of 100 ms buckets
  EXPECT_TRUE(b.TryRetry(t0_ + 50ms));
  EXPECT_FALSE(b.TryRetry(t0_ + 999ms));
  EXPECT_TRUE(b.TryRetry(t0_ + 1s));  // the bucket [t0, t0+100ms) left the window
  EXPECT_FALSE(b.TryRetry(t0_ + 1s));
}

TEST_F(RetryBudgetTest, LongIdleGapClearsTheWindow) {
  RetryBudget b(Config(10.0, 0));
  for (int i = 0; i < 500; ++i) b.OnRequest(t0_);
  EXPECT_EQ(b.RequestsInWindow(t0_ + 1h), 0u);
  b.OnRequest(t0_ + 1h);
  EXPECT_EQ(b.RequestsInWindow(t0_ + 1h), 1u);
}

TEST_F(RetryBudgetTest, EarlierNowCountsInTheNewestBucket) {
  RetryBudget b(Config(10.0, 0));
  b.OnRequest(t0_ + 5s);
  for (int i = 0; i < 9; ++i) b.OnRequest(t0_);  // time ran backwards: clamped to t0 + 5 s
  EXPECT_EQ(b.RequestsInWindow(t0_ + 14s), 10u);
  EXPECT_EQ(b.RequestsInWindow(t0_ + 15s), 0u);  // all ten left with the t0 + 5 s bucket
}

TEST_F(RetryBudgetTest, ValidateRejectsBadValues) {
  EXPECT_TRUE(RetryBudgetConfig{}.Validate().ok());
  EXPECT_TRUE(Config(0.0, 0).Validate().ok());
  EXPECT_TRUE(Config(100.0, 0).Validate().ok());
  EXPECT_TRUE(Config(10.0, 3, 10ns).Validate().ok());

  EXPECT_FALSE(Config(-0.1, 3).Validate().ok());
  EXPECT_FALSE(Config(100.5, 3).Validate().ok());
  EXPECT_FALSE(Config(std::nan(""), 3).Validate().ok());
  EXPECT_FALSE(Config(std::numeric_limits<double>::infinity(), 3).Validate().ok());
  EXPECT_FALSE(Config(10.0, -1).Validate().ok());
  EXPECT_FALSE(Config(10.0, 3, 0s).Validate().ok());
  EXPECT_FALSE(Config(10.0, 3, -1s).Validate().ok());
  EXPECT_FALSE(Config(10.0, 3, 15ns).Validate().ok());  // buckets would not tile the window

  EXPECT_EQ(RetryBudget::Create(Config(101.0, 3)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RetryBudget::Create(Config(10.0, 3, 0s)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(RetryBudget::Create(Config(10.0, 3)).ok());
}

TEST_F(RetryBudgetTest, CountersAddUpUnderMixedTraffic) {
  RetryBudget b(Config(20.0, 2, 2s));
  uint64_t requests = 0;
  uint64_t tries = 0;
  TimePoint now = t0_;
  for (int step = 0; step < 5000; ++step) {
    // Bursty traffic with quiet spells longer than the window.
    now += (step % 1000 < 700) ? 3ms : 11ms;
    if (step % 1000 == 999) now += 5s;
    const int arrivals = (step * 7) % 4;
    for (int k = 0; k < arrivals; ++k) {
      b.OnRequest(now);
      ++requests;
    }
    const int retries = (step * 13) % 3;
    for (int k = 0; k < retries; ++k) {
      ++tries;
      const uint64_t before = b.RetriesInWindow(now);
      const uint64_t cap = b.Cap(now);
      const bool allowed = b.TryRetry(now);
      ASSERT_EQ(allowed, before < cap);  // the rule, exactly
      ASSERT_EQ(b.RetriesInWindow(now), before + (allowed ? 1 : 0));
    }
    ExpectConsistent(b, now, requests, tries);
  }
  EXPECT_GT(b.stats().retries_allowed, 0u);
  EXPECT_GT(b.stats().retries_denied, 0u);
}

}  // namespace
}  // namespace kinfer
