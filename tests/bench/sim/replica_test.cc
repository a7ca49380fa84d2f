// Tests for one replica: prefill then decode timing, admission to the engine, prefill batching,
// the sidecar's deadline and the TTFT histogram.
#include "bench/sim/replica.h"

#include <optional>
#include <vector>

#include <gtest/gtest.h>

#include "bench/sim/simulator.h"

namespace kinfer::sim {
namespace {

// Prefill 0.1 s + 0.1 ms a token over 1000 tokens; decode 20 ms + 1 ms per request in the batch.
ServiceModel Model() {
  return ServiceModel(PiecewiseLinear({{1000, 100}, {2000, 200}}),
                      PiecewiseLinear({{1, 21}, {2, 22}}), "test");
}

class ReplicaTest : public ::testing::Test {
 protected:
  Replica Make(ReplicaLimits limits) {
    return Replica(0, 0, 0, &model_, limits, &requests_, &outcomes_, &edges_);
  }
  // Runs the replica alone until it is idle; returns the time it went idle.
  double Drain(Replica& r, double now) {
    while (std::optional<double> end = r.StartIteration(now)) {
      now = *end;
      r.FinishIteration(now, nullptr);
    }
    return now;
  }

  ServiceModel model_ = Model();
  std::vector<TraceRequest> requests_;
  std::vector<RequestOutcome> outcomes_;
  std::vector<double> edges_ = TtftEdgesWithSlo(2.0);
};

TEST_F(ReplicaTest, TtftIsThePrefillAndTheRestAreDecodeSteps) {
  requests_ = {{0, 1000, 3}};
  outcomes_.resize(1);
  Replica r = Make({});
  r.Enqueue(0, 0);
  EXPECT_EQ(r.in_flight(), 1);
  const double idle = Drain(r, 0);
  EXPECT_DOUBLE_EQ(outcomes_[0].ttft_s, 0.1);
  EXPECT_NEAR(outcomes_[0].done_s, 0.1 + 2 * 0.021, 1e-12);
  EXPECT_DOUBLE_EQ(idle, outcomes_[0].done_s);
  EXPECT_EQ(r.outstanding(), 0);
  EXPECT_NEAR(r.busy_seconds(), 0.142, 1e-12);
}

TEST_F(ReplicaTest, AdmitsUpToMaxRunningAndQueuesTheRestInTheSidecar) {
  requests_ = {{0, 1000, 2}, {0, 1000, 2}, {0, 1000, 2}};
  outcomes_.resize(3);
  ReplicaLimits limits;
  limits.max_running = 2;
  Replica r = Make(limits);
  for (int i = 0; i < 3; ++i) r.Enqueue(i, 0);
  EXPECT_EQ(r.in_flight(), 2);
  EXPECT_EQ(r.queue_depth(), 1);
  Drain(r, 0);
  // The first two are prefilled together (2000 tokens: 0.2 s), decode one step (22 ms) and
  // leave; the third is admitted then and prefilled alone.
  EXPECT_DOUBLE_EQ(outcomes_[0].ttft_s, 0.2);
  EXPECT_DOUBLE_EQ(outcomes_[1].ttft_s, 0.2);
  EXPECT_NEAR(outcomes_[2].ttft_s, 0.2 + 0.022 + 0.1, 1e-12);
}

TEST_F(ReplicaTest, PrefillTakesPromptsInOrderUpToTheTokenBudget) {
  requests_ = {{0, 600, 1}, {0, 600, 1}, {0, 5000, 1}};
  outcomes_.resize(3);
  ReplicaLimits limits;
  limits.max_prefill_tokens = 1200;
  Replica r = Make(limits);
  for (int i = 0; i < 3; ++i) r.Enqueue(i, 0);
  Drain(r, 0);
  EXPECT_DOUBLE_EQ(outcomes_[0].ttft_s, 0.12);  // 1200 tokens together
  EXPECT_DOUBLE_EQ(outcomes_[1].ttft_s, 0.12);
  // A prompt over the budget still runs, alone: 5000 tokens extend the 1000-2000 segment.
  EXPECT_NEAR(outcomes_[2].ttft_s, 0.12 + 0.5, 1e-12);
}

TEST_F(ReplicaTest, ShedsRequestsQueuedPastTheDeadline) {
  requests_ = {{0, 1000, 100}, {0, 1000, 1}, {0.05, 1000, 1}};
  outcomes_.resize(3);
  ReplicaLimits limits;
  limits.max_running = 1;
  limits.queue_deadline_s = 1.0;
  Replica r = Make(limits);
  r.Enqueue(0, 0);
  r.Enqueue(1, 0);
  r.Enqueue(2, 0.05);
  r.ShedExpired(1.0);  // exactly at the deadline: kept
  EXPECT_EQ(r.queue_depth(), 2);
  r.ShedExpired(1.02);
  EXPECT_EQ(r.queue_depth(), 1);
  EXPECT_TRUE(outcomes_[1].shed);
  EXPECT_FALSE(outcomes_[2].shed);
  Drain(r, 1.02);  // request 0 runs ~2.2 s; request 2 expires while it waits
  EXPECT_TRUE(outcomes_[2].shed);
  EXPECT_LT(outcomes_[2].ttft_s, 0);
  EXPECT_EQ(r.shed_count(), 2u);
}

TEST_F(ReplicaTest, CountsTtftsInTheSidecarsBucketsPlusTheSloEdge) {
  ASSERT_EQ(edges_.size(), 14u);
  EXPECT_DOUBLE_EQ(edges_[8], 2.0);
  requests_ = {{0, 1000, 1}, {0, 1000, 1}, {0, 1000, 1}};
  outcomes_.resize(3);
  ReplicaLimits limits;
  limits.max_prefill_tokens = 1000;
  Replica r = Make(limits);
  for (int i = 0; i < 3; ++i) r.Enqueue(i, 0);
  Drain(r, 0);  // TTFTs 0.1, 0.2, 0.3 s
  std::vector<uint64_t> counts = r.TakeTtftCounts();
  ASSERT_EQ(counts.size(), 15u);
  EXPECT_EQ(counts[4], 1u);  // le 0.1
  EXPECT_EQ(counts[5], 1u);  // le 0.25
  EXPECT_EQ(counts[6], 1u);  // le 0.5
  std::vector<uint64_t> again = r.TakeTtftCounts();
  for (uint64_t c : again) EXPECT_EQ(c, 0u);
}

}  // namespace
}  // namespace kinfer::sim
