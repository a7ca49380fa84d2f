// Tests for TokenBucket: burst, lazy refill, exact TimeUntil, no drift, config validation.
#include "sidecar/policy/token_bucket.h"

#include <chrono>

#include <gtest/gtest.h>

namespace kinfer {
namespace {

using namespace std::chrono_literals;
using Clock = TokenBucket::Clock;

class TokenBucketTest : public ::testing::Test {
 protected:
  Clock::time_point t0_ = Clock::time_point() + 1000s;
};

TEST_F(TokenBucketTest, StartsFullAndAllowsExactlyTheBurst) {
  TokenBucket bucket(/*rate_per_second=*/10, /*capacity=*/5);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(bucket.TryTake(1, t0_)) << i;
  EXPECT_FALSE(bucket.TryTake(1, t0_));
  EXPECT_DOUBLE_EQ(bucket.Available(t0_), 0.0);
}

TEST_F(TokenBucketTest, RefillsAtRateAndCapsAtCapacity) {
  TokenBucket bucket(10, 5);
  ASSERT_TRUE(bucket.TryTake(5, t0_));
  EXPECT_FALSE(bucket.TryTake(1, t0_ + 99ms));
  EXPECT_TRUE(bucket.TryTake(1, t0_ + 100ms));
  // After a long idle period the bucket holds only `capacity`, not rate * elapsed.
  EXPECT_DOUBLE_EQ(bucket.Available(t0_ + 1h), 5.0);
  EXPECT_TRUE(bucket.TryTake(5, t0_ + 1h));
  EXPECT_FALSE(bucket.TryTake(0.5, t0_ + 1h));
}

TEST_F(TokenBucketTest, RefusedTakeConsumesNothing) {
  TokenBucket bucket(1, 3);
  ASSERT_TRUE(bucket.TryTake(2, t0_));
  EXPECT_FALSE(bucket.TryTake(2, t0_));
  EXPECT_DOUBLE_EQ(bucket.Available(t0_), 1.0);
  EXPECT_TRUE(bucket.TryTake(1, t0_));
}

TEST_F(TokenBucketTest, TimeUntilIsExactAndTakeSucceedsThen) {
  TokenBucket bucket(4, 8);  // one token every 250 ms
  ASSERT_TRUE(bucket.TryTake(8, t0_));
  EXPECT_EQ(bucket.TimeUntil(1, t0_), 250ms);
  EXPECT_EQ(bucket.TimeUntil(3, t0_), 750ms);
  EXPECT_EQ(bucket.TimeUntil(3, t0_ + 500ms), 250ms);
  EXPECT_FALSE(bucket.TryTake(3, t0_ + 750ms - 1ns));
  EXPECT_TRUE(bucket.TryTake(3, t0_ + 750ms));
  EXPECT_EQ(bucket.TimeUntil(0, t0_), TokenBucket::Duration::zero());
}

TEST_F(TokenBucketTest, TimeUntilIsNeverWhenRequestExceedsCapacity) {
  TokenBucket bucket(100, 10);
  EXPECT_EQ(bucket.TimeUntil(10.5, t0_), TokenBucket::kNever);
  EXPECT_FALSE(bucket.TryTake(10.5, t0_ + 1h));
}

TEST_F(TokenBucketTest, ManySmallStepsDoNotDrift) {
  // 3 tokens/s (period not a whole number of ns): one take per period for a simulated hour
  // must always succeed, and the bucket must not have gained a spare token by the end.
  TokenBucket bucket(3, 1);
  Clock::time_point now = t0_;
  const auto period = std::chrono::nanoseconds(333'333'334);  // >= 1/3 s, rounded up
  for (int i = 0; i < 3 * 3600; ++i) {
    ASSERT_TRUE(bucket.TryTake(1, now)) << "step " << i;
    now += period;
  }
  // Polling every millisecond (100,000 refused or granted calls) grants exactly one token per
  // 100 ms: polls do not change the state, so there is nothing to accumulate.
  TokenBucket polled(10, 1);
  int granted = 0;
  for (auto t = t0_; t <= t0_ + 100s; t += 1ms) granted += polled.TryTake(1, t) ? 1 : 0;
  EXPECT_EQ(granted, 1001);
}

TEST_F(TokenBucketTest, ValidateRejectsNonPositiveRateOrCapacity) {
  EXPECT_TRUE(TokenBucket::Validate(1, 1).ok());
  EXPECT_EQ(TokenBucket::Validate(0, 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(TokenBucket::Validate(1, -1).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kinfer
