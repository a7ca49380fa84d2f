// Tests for the load balancer: Envoy's slow-start factor and the share it gives a new pod (time
// passed in), the weighted schedule's lifetime, and the prompt-token-aware choice.
#include "bench/sim/balancer.h"

#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace kinfer::sim {
namespace {

BalancerConfig SlowStart(double window, double aggression = 1.0) {
  BalancerConfig c;
  c.slow_start_window_s = window;
  c.slow_start_aggression = aggression;
  return c;
}

TEST(BalancerTest, SlowStartFactorFollowsEnvoysFormula) {
  // f = max(min_weight, (max(t, 1 ms) / window)^(1 / aggression)); 1 from the window on.
  const BalancerConfig linear = SlowStart(30);
  EXPECT_DOUBLE_EQ(SlowStartFactor(linear, 0), 0.1);  // the 10% floor
  EXPECT_DOUBLE_EQ(SlowStartFactor(linear, 3), 0.1);
  EXPECT_DOUBLE_EQ(SlowStartFactor(linear, 6), 0.2);
  EXPECT_DOUBLE_EQ(SlowStartFactor(linear, 15), 0.5);
  EXPECT_DOUBLE_EQ(SlowStartFactor(linear, 29.97), 0.999);
  EXPECT_DOUBLE_EQ(SlowStartFactor(linear, 30), 1);
  EXPECT_DOUBLE_EQ(SlowStartFactor(linear, 1000), 1);
  const BalancerConfig square_root = SlowStart(30, 2);
  EXPECT_DOUBLE_EQ(SlowStartFactor(square_root, 7.5), 0.5);
  EXPECT_DOUBLE_EQ(SlowStartFactor(square_root, 0.3), 0.1);
  EXPECT_DOUBLE_EQ(SlowStartFactor(BalancerConfig{}, 0), 1);  // no slow start
}

// The share of `picks` picks at time `now` that go to ready[3] (the new pod), loads held fixed.
double NewPodShare(Balancer& b, const std::vector<Endpoint>& ready, double now, int picks) {
  std::mt19937_64 rng(1);
  int n = 0;
  for (int i = 0; i < picks; ++i) n += b.Pick(ready, now, rng) == 3;
  return static_cast<double>(n) / picks;
}

TEST(BalancerTest, SlowStartRampsANewPodsShareOverTheWindow) {
  // Three pods from the start and one ready at t = 100; equal loads, so the weights are the
  // factors: the new pod's share is f / (3 + f).
  std::vector<Endpoint> ready = {{0, 0, 0, -1}, {1, 0, 0, -1}, {2, 0, 0, -1}, {3, 0, 0, 100}};
  Balancer b(SlowStart(30));
  b.Rebuild(ready, 100);
  ASSERT_TRUE(b.weighted());
  for (double t : {101.0, 106.0, 115.0, 127.0}) {
    const double f = SlowStartFactor(b.config(), t - 100);
    EXPECT_NEAR(NewPodShare(b, ready, t, 20000), f / (3 + f), 0.005) << t;
  }
  // Past the window the schedule stays (as Envoy's does until the next membership change),
  // with every factor 1: a quarter each.
  EXPECT_NEAR(NewPodShare(b, ready, 140, 20000), 0.25, 0.005);
  EXPECT_TRUE(b.weighted());
  b.Rebuild(ready, 140);  // a membership change after the window: unweighted again
  EXPECT_FALSE(b.weighted());
}

TEST(BalancerTest, WeightedScheduleDividesByOutstandingRequests) {
  // active_request_bias 1: w = f / (outstanding + 1). Old pods at 19 outstanding (w = 1/20), the
  // new one empty at the 10% floor (w = 0.1): it gets 0.1 / (0.1 + 3/20) = 40%, not all of it.
  std::vector<Endpoint> ready = {{0, 19, 0, -1}, {1, 19, 0, -1}, {2, 19, 0, -1}, {3, 0, 0, 50}};
  Balancer b(SlowStart(60));
  b.Rebuild(ready, 50);
  EXPECT_NEAR(NewPodShare(b, ready, 51, 20000), 0.4, 0.005);
  // Without slow start, least request over all pods sends it every request.
  Balancer plain(BalancerConfig{});
  plain.Rebuild(ready, 50);
  EXPECT_FALSE(plain.weighted());
  EXPECT_DOUBLE_EQ(NewPodShare(plain, ready, 51, 100), 1.0);
}

TEST(BalancerTest, LeastTokensPicksByPromptTokensThenRequests) {
  BalancerConfig c;
  c.kind = BalancerKind::kLeastTokens;
  Balancer b(c);
  std::mt19937_64 rng(7);
  // Fewest requests is pod 0, but it has a 4k-token prompt to prefill; pod 1 has none.
  std::vector<Endpoint> ready = {{0, 1, 4000, -1}, {1, 5, 0, -1}, {2, 3, 500, -1}};
  b.Rebuild(ready, 0);
  EXPECT_EQ(b.Pick(ready, 0, rng), 1u);
  // Equal tokens: fewer outstanding requests wins.
  ready = {{0, 6, 0, -1}, {1, 5, 0, -1}, {2, 7, 0, -1}};
  EXPECT_EQ(b.Pick(ready, 0, rng), 1u);
  // The same with least request picks by requests only.
  Balancer lr(BalancerConfig{});
  ready = {{0, 1, 4000, -1}, {1, 5, 0, -1}, {2, 3, 500, -1}};
  lr.Rebuild(ready, 0);
  EXPECT_EQ(lr.Pick(ready, 0, rng), 0u);
}

TEST(BalancerTest, LeastTokensWithSlowStartScalesANewPodsScores) {
  BalancerConfig c = SlowStart(30);
  c.kind = BalancerKind::kLeastTokens;
  Balancer b(c);
  std::mt19937_64 rng(7);
  // At 10% a new pod with 1 request and 200 tokens scores as 2,000 tokens: the old pod with
  // 1,000 wins; at 15 s (f = 0.5) it scores 400 and wins.
  std::vector<Endpoint> ready = {{0, 4, 1000, -1}, {1, 1, 200, 100}};
  b.Rebuild(ready, 100);
  EXPECT_EQ(b.Pick(ready, 101, rng), 0u);
  EXPECT_EQ(b.Pick(ready, 115, rng), 1u);
}

}  // namespace
}  // namespace kinfer::sim
