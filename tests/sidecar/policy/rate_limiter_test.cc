// Tests for RateLimiter: per-key isolation, overrides, atomic two-bucket take, LRU bound.
#include "sidecar/policy/rate_limiter.h"

#include <chrono>
#include <string>

#include <gtest/gtest.h>

namespace kinfer {
namespace {

using namespace std::chrono_literals;
using Clock = RateLimiter::Clock;
using Limit = RateLimiter::Limit;

class RateLimiterTest : public ::testing::Test {
 protected:
  static RateLimiterConfig Config() {
    RateLimiterConfig c;
    c.default_limit = {/*requests_per_second=*/2, /*request_burst=*/2,
                       /*tokens_per_second=*/1000, /*token_burst=*/1000};
    return c;
  }
  Clock::time_point t0_ = Clock::time_point() + 1000s;
};

TEST_F(RateLimiterTest, KeysAreIsolated) {
  RateLimiter rl(Config());
  EXPECT_TRUE(rl.Check("alice", 10, t0_).allowed);
  EXPECT_TRUE(rl.Check("alice", 10, t0_).allowed);
  const auto d = rl.Check("alice", 10, t0_);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.limited_by, Limit::kRequests);
  EXPECT_EQ(d.retry_after, 500ms);
  // Alice's exhaustion does not touch Bob.
  EXPECT_TRUE(rl.Check("bob", 10, t0_).allowed);
  EXPECT_TRUE(rl.Check("bob", 10, t0_).allowed);
  EXPECT_TRUE(rl.Check("alice", 10, t0_ + 500ms).allowed);
}

TEST_F(RateLimiterTest, OverrideReplacesDefaultForThatKeyOnly) {
  RateLimiterConfig c = Config();
  c.overrides["vip"] = {100, 100, 0, 0};  // tokens unlimited
  RateLimiter rl(c);
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(rl.Check("vip", 1e6, t0_).allowed) << i;
  EXPECT_FALSE(rl.Check("vip", 1, t0_).allowed);
  EXPECT_TRUE(rl.Check("other", 1, t0_).allowed);
  EXPECT_TRUE(rl.Check("other", 1, t0_).allowed);
  EXPECT_FALSE(rl.Check("other", 1, t0_).allowed);
}

TEST_F(RateLimiterTest, TokenLimitRefusalDoesNotSpendRequestBudget) {
  RateLimiter rl(Config());
  ASSERT_TRUE(rl.Check("k", 900, t0_).allowed);
  // 200 tokens do not fit (100 left); many refusals must not drain the 1 request left.
  for (int i = 0; i < 5; ++i) {
    const auto d = rl.Check("k", 200, t0_);
    ASSERT_FALSE(d.allowed);
    EXPECT_EQ(d.limited_by, Limit::kTokens);
    EXPECT_EQ(d.retry_after, 100ms);  // 100 tokens missing at 1000 tokens/s
  }
  EXPECT_TRUE(rl.Check("k", 100, t0_).allowed);
  EXPECT_EQ(rl.stats().limited_tokens, 5u);
  EXPECT_EQ(rl.stats().allowed, 2u);
}

TEST_F(RateLimiterTest, RequestRefusalDoesNotSpendTokenBudget) {
  RateLimiter rl(Config());
  ASSERT_TRUE(rl.Check("k", 1, t0_).allowed);
  ASSERT_TRUE(rl.Check("k", 1, t0_).allowed);
  for (int i = 0; i < 3; ++i) ASSERT_FALSE(rl.Check("k", 500, t0_).allowed);
  // One request refills after 500 ms; the token bucket must still hold ~998 + refill.
  EXPECT_TRUE(rl.Check("k", 998, t0_ + 500ms).allowed);
}

TEST_F(RateLimiterTest, RetryAfterCoversBothLimits) {
  RateLimiter rl(Config());
  ASSERT_TRUE(rl.Check("k", 1000, t0_).allowed);
  ASSERT_TRUE(rl.Check("k", 0, t0_).allowed);
  const auto d = rl.Check("k", 1000, t0_);  // requests: 500 ms, tokens: 1 s
  EXPECT_EQ(d.limited_by, Limit::kRequests);
  EXPECT_EQ(d.retry_after, 1s);
}

TEST_F(RateLimiterTest, RequestLargerThanTokenBurstIsNeverAllowed) {
  RateLimiter rl(Config());
  const auto d = rl.Check("k", 1001, t0_);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.limited_by, Limit::kTokens);
  EXPECT_EQ(d.retry_after, TokenBucket::kNever);
}

TEST_F(RateLimiterTest, UnlimitedKeyIsNotTracked) {
  RateLimiterConfig c = Config();
  c.overrides["internal"] = RateLimit{};
  RateLimiter rl(c);
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(rl.Check("internal", 1e9, t0_).allowed);
  EXPECT_EQ(rl.tracked_keys(), 0u);
}

TEST_F(RateLimiterTest, TrackedKeysStayBoundedUnderManyDistinctKeys) {
  RateLimiterConfig c = Config();
  c.max_tracked_keys = 100;
  RateLimiter rl(c);
  for (int i = 0; i < 10000; ++i) {
    ASSERT_TRUE(rl.Check("key-" + std::to_string(i), 1, t0_ + i * 1ms).allowed);
    ASSERT_LE(rl.tracked_keys(), 100u);
  }
  EXPECT_EQ(rl.tracked_keys(), 100u);
  EXPECT_EQ(rl.stats().evicted, 9900u);
}

TEST_F(RateLimiterTest, EvictsLeastRecentlyUsedKeyFirst) {
  RateLimiterConfig c = Config();
  c.max_tracked_keys = 2;
  RateLimiter rl(c);
  ASSERT_TRUE(rl.Check("hot", 1, t0_).allowed);
  ASSERT_TRUE(rl.Check("hot", 1, t0_).allowed);  // hot is now out of requests
  ASSERT_TRUE(rl.Check("cold", 1, t0_).allowed);
  ASSERT_FALSE(rl.Check("hot", 1, t0_).allowed);  // touches hot: cold becomes LRU
  ASSERT_TRUE(rl.Check("new", 1, t0_).allowed);   // evicts cold, not hot
  EXPECT_FALSE(rl.Check("hot", 1, t0_).allowed);  // hot kept its (empty) buckets
  EXPECT_EQ(rl.stats().evicted, 1u);
  EXPECT_EQ(rl.stats().evicted_in_debt, 1u);  // cold had spent one request
}

TEST_F(RateLimiterTest, CreateRejectsInvalidConfig) {
  RateLimiterConfig c = Config();
  c.overrides["bad"] = {-1, 0, 0, 0};
  EXPECT_EQ(RateLimiter::Create(c).status().code(), StatusCode::kInvalidArgument);
  RateLimiterConfig z = Config();
  z.max_tracked_keys = 0;
  EXPECT_FALSE(z.Validate().ok());
  EXPECT_TRUE(RateLimiter::Create(Config()).ok());
}

}  // namespace
}  // namespace kinfer
