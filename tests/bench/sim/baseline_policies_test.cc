// Tests for the baselines: the schedule's look-ahead, HPA's formula, tolerance, unready-pod rule,
// scale-up limit and stabilization, and KPA's windows and panic mode.
#include "bench/sim/baseline_policies.h"

#include <optional>

#include <gtest/gtest.h>

namespace kinfer::sim {
namespace {

// `ready` ready pods each with `in_flight` requests and `queue` queued, plus `starting` pods.
ClusterSnapshot Cluster(double now, int ready, int starting, int in_flight, int queue = 0) {
  ClusterSnapshot c;
  c.now_s = now;
  c.ready = ready;
  c.starting = starting;
  c.requested = ready + starting;
  for (int i = 0; i < ready + starting; ++i) {
    PodSnapshot p;
    p.id = i;
    p.ready = i < ready;
    p.in_flight = p.ready ? in_flight : 0;
    p.queue_depth = p.ready ? queue : 0;
    c.pods.push_back(p);
  }
  return c;
}

TEST(SchedulePolicyTest, RequestsEachWindowsCountOneLeadAhead) {
  SchedulePolicy p("oracle", {1, 3, 2}, 60, 30);
  EXPECT_EQ(p.InitialReplicas(), 1);
  EXPECT_EQ(p.DesiredAt(0), 1);
  EXPECT_EQ(p.DesiredAt(29), 1);
  EXPECT_EQ(p.DesiredAt(30), 3);  // window 1 starts 30 s ahead
  EXPECT_EQ(p.DesiredAt(60), 3);
  EXPECT_EQ(p.DesiredAt(119), 3);
  EXPECT_EQ(p.DesiredAt(120), 2);
  EXPECT_EQ(p.DesiredAt(1e6), 2);  // after the last window: the last count
  SchedulePolicy c = SchedulePolicy::Constant("static", 4);
  EXPECT_EQ(c.DesiredAt(12345), 4);
}

HpaConfig Hpa() {
  HpaConfig c;
  c.capacity_per_pod = 10;  // target 7 in flight per pod
  c.initial_replicas = 2;
  return c;
}

TEST(HpaPolicyTest, SyncsEveryFifteenSecondsWithTheHpaFormula) {
  HpaPolicy p(Hpa());
  EXPECT_EQ(p.Tick(Cluster(0, 2, 0, 7)), 2);  // at target
  for (int t = 1; t < 15; ++t) EXPECT_EQ(p.Tick(Cluster(t, 2, 0, 14)), std::nullopt);
  // Mean over the period: (14 x 14 + 7) / 15 per pod in flight -> ratio 1.93 -> ceil(2 x 1.93).
  EXPECT_EQ(p.Tick(Cluster(15, 2, 0, 14)), 4);
}

TEST(HpaPolicyTest, IgnoresChangesWithinTheTolerance) {
  HpaPolicy p(Hpa());
  EXPECT_EQ(p.Tick(Cluster(0, 4, 0, 7)), 4);
  for (int t = 1; t <= 15; ++t) {
    auto d = p.Tick(Cluster(t, 4, 0, 8));  // 8 / 7 = 1.14: outside the band
    if (t == 15) {
      EXPECT_EQ(d, 5);
    }
  }
  HpaPolicy q(Hpa());
  // 7.5 / 7 = 1.07: inside the 10% band, no change however many pods.
  ClusterSnapshot c = Cluster(0, 10, 0, 7);
  for (auto& pod : c.pods) pod.in_flight = pod.id % 2 ? 8 : 7;
  EXPECT_EQ(q.Tick(c), 10);
}

TEST(HpaPolicyTest, StartingPodsCountAsIdleOnAScaleUp) {
  HpaPolicy p(Hpa());
  // 2 ready at 10.5 each (ratio 1.5) but 2 more starting: (21 / 4) / 7 = 0.75 -> no scale-up.
  ClusterSnapshot c = Cluster(0, 2, 2, 0);
  c.pods[0].in_flight = 10;
  c.pods[1].in_flight = 11;
  EXPECT_EQ(p.Tick(c), 4);
}

TEST(HpaPolicyTest, ScaleUpIsLimitedToDoubleOrFourMore) {
  HpaPolicy p(Hpa());
  EXPECT_EQ(p.Tick(Cluster(0, 1, 0, 70)), 5);  // wants 10: max(2 x 1, 1 + 4)
  HpaPolicy q(Hpa());
  EXPECT_EQ(q.Tick(Cluster(0, 10, 0, 70)), 20);  // wants 100: 2 x 10
}

TEST(HpaPolicyTest, ScaleDownWaitsForTheStabilizationWindow) {
  HpaPolicy p(Hpa());
  EXPECT_EQ(p.Tick(Cluster(0, 4, 0, 7)), 4);
  std::optional<int> last;
  for (int t = 1; t <= 300; ++t) {
    auto d = p.Tick(Cluster(t, 4, 0, 1));
    if (d) last = d;
    if (d && t < 300) {
      EXPECT_EQ(*d, 4) << t;  // the 4 of t = 0 is still in the window
    }
  }
  EXPECT_EQ(last, 4);  // t = 300: the window still holds t = 0
  for (int t = 301; t <= 315; ++t) {
    auto d = p.Tick(Cluster(t, 4, 0, 1));
    if (d) last = d;
  }
  EXPECT_EQ(last, 1);  // ceil(4 x 1/7)
}

KpaConfig Kpa() {
  KpaConfig c;
  c.target_concurrency = 10;
  c.initial_replicas = 2;
  return c;
}

TEST(KpaPolicyTest, FollowsTheStableWindowAverage) {
  KpaPolicy p(Kpa());
  std::optional<int> d;
  for (int t = 0; t <= 60; ++t) {
    auto r = p.Tick(Cluster(t, 3, 0, 10, 5));  // 45 concurrent -> ceil(4.5) = 5
    if (r) d = r;
  }
  EXPECT_EQ(d, 5);
  EXPECT_EQ(p.Counters().at("panic_ticks"), 0);
}

TEST(KpaPolicyTest, PanicsOnAStepAndDoesNotScaleDownUntilItSettles) {
  KpaPolicy p(Kpa());
  for (int t = 0; t < 60; ++t) p.Tick(Cluster(t, 2, 0, 10));  // 20 concurrent: steady at 2
  // Step to 60 concurrent per pod: the panic window sees 120 -> 12 pods >= 2 x 2 ready.
  std::optional<int> d;
  for (int t = 60; t < 70; ++t) {
    auto r = p.Tick(Cluster(t, 2, 0, 60));
    if (r) d = r;
  }
  EXPECT_EQ(d, 12);  // the 6 s panic window is all at 120 by t = 68: ceil(120 / 10)
  EXPECT_GT(p.Counters().at("panic_ticks"), 0);
  // The load drops right away; in panic the count does not go down.
  for (int t = 70; t < 100; ++t) {
    auto r = p.Tick(Cluster(t, 2, 0, 1));
    if (r) {
      EXPECT_GE(*r, *d) << t;
    }
  }
}

}  // namespace
}  // namespace kinfer::sim
