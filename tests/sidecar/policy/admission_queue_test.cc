// Tests for AdmissionQueue: ordering, reserved slots, bounds, deadlines, CoDel shedding, reload,
// counters.
#include "sidecar/policy/admission_queue.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

namespace kinfer {
namespace {

using namespace std::chrono_literals;
using Clock = AdmissionQueue::Clock;
using Outcome = AdmissionQueue::Outcome;
using Reason = AdmissionQueue::Reason;
using Ids = std::vector<AdmissionQueue::RequestId>;

class AdmissionQueueTest : public ::testing::Test {
 protected:
  // One upstream slot, no reservation, short services: ordering is easy to read.
  static AdmissionConfig Serial() {
    AdmissionConfig c;
    c.num_priorities = 3;
    c.max_concurrency = 1;
    c.reserved_for_top = 0;
    c.max_queue_total = 16;
    c.max_queue_per_class = 16;
    c.initial_service_time = 10ms;
    return c;
  }
  Clock::time_point Far() const { return t0_ + 1h; }
  uint64_t Rejected(const AdmissionQueue& q, Reason r) const {
    return q.stats().rejected[static_cast<size_t>(r)];
  }
  static void ExpectBalanced(const AdmissionQueue& q) {
    const auto& s = q.stats();
    EXPECT_EQ(s.submitted, s.admitted + s.rejected_total() + s.expired + s.cancelled + q.queued());
  }

  Clock::time_point t0_ = Clock::time_point() + 1000s;
};

TEST_F(AdmissionQueueTest, StartsAtOnceWhileSlotsAreFree) {
  AdmissionConfig c = Serial();
  c.max_concurrency = 2;
  AdmissionQueue q(c);
  EXPECT_EQ(q.Admit(1, 1, Far(), t0_).outcome, Outcome::kStartNow);
  EXPECT_EQ(q.Admit(2, 1, Far(), t0_).outcome, Outcome::kStartNow);
  EXPECT_EQ(q.Admit(3, 1, Far(), t0_).outcome, Outcome::kQueued);
  EXPECT_EQ(q.in_flight(), 2);
  EXPECT_EQ(q.depth(1), 1u);
}

TEST_F(AdmissionQueueTest, FirstComeFirstServedWithinAClass) {
  AdmissionQueue q(Serial());
  ASSERT_EQ(q.Admit(1, 1, Far(), t0_).outcome, Outcome::kStartNow);
  for (uint64_t id = 2; id <= 4; ++id)
    ASSERT_EQ(q.Admit(id, 1, Far(), t0_).outcome, Outcome::kQueued);
  EXPECT_EQ(q.OnComplete(1, 1ms, t0_).start, Ids({2}));
  EXPECT_EQ(q.OnComplete(2, 1ms, t0_).start, Ids({3}));
  EXPECT_EQ(q.OnComplete(3, 1ms, t0_).start, Ids({4}));
  EXPECT_TRUE(q.OnComplete(4, 1ms, t0_).start.empty());
}

TEST_F(AdmissionQueueTest, HigherClassStartsFirstWhateverTheArrivalOrder) {
  AdmissionQueue q(Serial());
  ASSERT_EQ(q.Admit(1, 0, Far(), t0_).outcome, Outcome::kStartNow);
  ASSERT_EQ(q.Admit(10, 2, Far(), t0_).outcome, Outcome::kQueued);
  ASSERT_EQ(q.Admit(20, 1, Far(), t0_).outcome, Outcome::kQueued);
  ASSERT_EQ(q.Admit(30, 0, Far(), t0_).outcome, Outcome::kQueued);
  EXPECT_EQ(q.OnComplete(1, 1ms, t0_).start, Ids({30}));
  EXPECT_EQ(q.OnComplete(30, 1ms, t0_).start, Ids({20}));
  EXPECT_EQ(q.OnComplete(20, 1ms, t0_).start, Ids({10}));
}

TEST_F(AdmissionQueueTest, LowerClassDoesNotStartWhileHigherClassWaits) {
  AdmissionQueue q(Serial());
  ASSERT_EQ(q.Admit(1, 2, Far(), t0_).outcome, Outcome::kStartNow);
  ASSERT_EQ(q.Admit(2, 0, Far(), t0_).outcome, Outcome::kQueued);
  // A class-2 arrival must not start ahead of the waiting class-0 request.
  EXPECT_EQ(q.Admit(3, 2, Far(), t0_).outcome, Outcome::kQueued);
}

TEST_F(AdmissionQueueTest, ReservedSlotsAreUsedOnlyByTheTopClass) {
  AdmissionConfig c = Serial();
  c.max_concurrency = 2;
  c.reserved_for_top = 1;
  AdmissionQueue q(c);
  ASSERT_EQ(q.Admit(1, 1, Far(), t0_).outcome, Outcome::kStartNow);
  EXPECT_EQ(q.Admit(2, 2, Far(), t0_).outcome, Outcome::kQueued);    // only the reserved slot left
  EXPECT_EQ(q.Admit(3, 0, Far(), t0_).outcome, Outcome::kStartNow);  // top class takes it
  EXPECT_EQ(q.in_flight(), 2);
  // Freeing the reserved slot's holder does not let class 2 in while class 1 holds the other.
  EXPECT_TRUE(q.OnComplete(3, 1ms, t0_).start.empty());
  EXPECT_EQ(q.OnComplete(1, 1ms, t0_).start, Ids({2}));
}

TEST_F(AdmissionQueueTest, TopClassInItsReservedSlotDoesNotIdleTheOtherSlots) {
  AdmissionConfig c = Serial();
  c.max_concurrency = 2;
  c.reserved_for_top = 1;
  AdmissionQueue q(c);
  // Class 0 holds the reserved slot: the other slot is still open to the lower classes.
  ASSERT_EQ(q.Admit(1, 0, Far(), t0_).outcome, Outcome::kStartNow);
  EXPECT_EQ(q.in_flight_top(), 1);
  EXPECT_EQ(q.Admit(2, 2, Far(), t0_).outcome, Outcome::kStartNow);
  EXPECT_EQ(q.in_flight(), 2);
  EXPECT_EQ(q.Admit(3, 1, Far(), t0_).outcome, Outcome::kQueued);
  // The top request finishes: its slot is reserved again, so class 1 still waits...
  EXPECT_TRUE(q.OnComplete(1, 1ms, t0_).start.empty());
  EXPECT_EQ(q.in_flight_top(), 0);
  // ...until the unreserved slot frees.
  EXPECT_EQ(q.OnComplete(2, 1ms, t0_).start, Ids({3}));
  ExpectBalanced(q);
}

TEST_F(AdmissionQueueTest, FullQueueDisplacesTheNewestLeastImportantForAMoreImportantArrival) {
  AdmissionConfig c = Serial();
  c.max_queue_total = 3;
  c.max_queue_per_class = 3;
  AdmissionQueue q(c);
  ASSERT_EQ(q.Admit(1, 2, Far(), t0_).outcome, Outcome::kStartNow);
  ASSERT_EQ(q.Admit(2, 1, Far(), t0_).outcome, Outcome::kQueued);
  ASSERT_EQ(q.Admit(3, 2, Far(), t0_).outcome, Outcome::kQueued);
  ASSERT_EQ(q.Admit(4, 2, Far(), t0_).outcome, Outcome::kQueued);
  // Full. A class-2 arrival has nobody less important to push out.
  EXPECT_EQ(q.Admit(5, 2, Far(), t0_).reason, Reason::kQueueFull);
  // A class-0 arrival pushes out the newest class-2 request (4), not the older 3.
  const auto top = q.Admit(6, 0, Far(), t0_);
  EXPECT_EQ(top.outcome, Outcome::kQueued);
  ASSERT_TRUE(top.displaced.has_value());
  EXPECT_EQ(*top.displaced, 4u);
  EXPECT_EQ(Rejected(q, Reason::kDisplaced), 1u);
  EXPECT_FALSE(q.Cancel(4));  // no longer queued
  // A class-1 arrival displaces the remaining class-2 request (3).
  const auto mid = q.Admit(7, 1, Far(), t0_);
  ASSERT_TRUE(mid.displaced.has_value());
  EXPECT_EQ(*mid.displaced, 3u);
  // Nothing less important than class 1 is queued now: another class-1 arrival is refused.
  EXPECT_EQ(q.Admit(8, 1, Far(), t0_).reason, Reason::kQueueFull);
  EXPECT_EQ(q.OnComplete(1, 1ms, t0_).start, Ids({6}));
  ExpectBalanced(q);
}

TEST_F(AdmissionQueueTest, FullQueueRejectsWithReasonAndRetryAfter) {
  AdmissionConfig c = Serial();
  c.max_queue_total = 4;
  c.max_queue_per_class = 3;
  AdmissionQueue q(c);
  ASSERT_EQ(q.Admit(1, 1, Far(), t0_).outcome, Outcome::kStartNow);
  for (uint64_t id = 2; id <= 4; ++id)
    ASSERT_EQ(q.Admit(id, 1, Far(), t0_).outcome, Outcome::kQueued);
  const auto class_full = q.Admit(5, 1, Far(), t0_);
  EXPECT_EQ(class_full.outcome, Outcome::kRejected);
  EXPECT_EQ(class_full.reason, Reason::kClassFull);
  EXPECT_GE(class_full.retry_after, c.min_retry_after);
  ASSERT_EQ(q.Admit(6, 2, Far(), t0_).outcome, Outcome::kQueued);
  const auto total_full = q.Admit(7, 2, Far(), t0_);  // nothing less important to displace
  EXPECT_EQ(total_full.reason, Reason::kQueueFull);
  EXPECT_EQ(Rejected(q, Reason::kClassFull), 1u);
  EXPECT_EQ(Rejected(q, Reason::kQueueFull), 1u);
}

TEST_F(AdmissionQueueTest, DeadlineUnreachableRejectsEarlyUsingServiceTimeEwma) {
  AdmissionConfig c = Serial();
  c.initial_service_time = 100ms;
  c.ewma_alpha = 0.5;
  AdmissionQueue q(c);
  ASSERT_EQ(q.Admit(1, 1, Far(), t0_).outcome, Outcome::kStartNow);
  // Seed mean 100 ms: one queued ahead-of-nothing request needs ~100 ms.
  EXPECT_EQ(q.Admit(2, 1, t0_ + 500ms, t0_).outcome, Outcome::kQueued);
  ASSERT_TRUE(q.Cancel(2));
  // Services of 1.9 s move the mean to 0.5*1.9 + 0.5*0.1 = 1 s.
  EXPECT_EQ(q.OnComplete(1, 1900ms, t0_).start, Ids());
  EXPECT_EQ(q.mean_service_time(), 1s);
  ASSERT_EQ(q.Admit(3, 1, Far(), t0_).outcome, Outcome::kStartNow);
  const auto r = q.Admit(4, 1, t0_ + 500ms, t0_);
  EXPECT_EQ(r.outcome, Outcome::kRejected);
  EXPECT_EQ(r.reason, Reason::kDeadlineUnreachable);
  EXPECT_EQ(q.Admit(5, 1, t0_ + 1s, t0_).outcome, Outcome::kQueued);  // 1 completion: 1 s
  EXPECT_EQ(q.Admit(6, 1, t0_ + 1500ms, t0_).reason, Reason::kDeadlineUnreachable);  // needs 2 s
  EXPECT_EQ(q.Admit(7, 1, t0_ + 2s, t0_).outcome, Outcome::kQueued);
}

TEST_F(AdmissionQueueTest, DeadlineAlreadyPassedIsRejectedEvenWithFreeSlots) {
  AdmissionQueue q(Serial());
  const auto r = q.Admit(1, 0, t0_ - 1ms, t0_);
  EXPECT_EQ(r.reason, Reason::kDeadlineUnreachable);
  EXPECT_EQ(q.in_flight(), 0);
}

TEST_F(AdmissionQueueTest, ExpireReturnsOnlyRequestsPastTheirDeadline) {
  AdmissionQueue q(Serial());
  ASSERT_EQ(q.Admit(1, 1, Far(), t0_).outcome, Outcome::kStartNow);
  ASSERT_EQ(q.Admit(2, 1, t0_ + 1s, t0_).outcome, Outcome::kQueued);
  ASSERT_EQ(q.Admit(3, 2, t0_ + 1s, t0_).outcome, Outcome::kQueued);
  ASSERT_EQ(q.Admit(4, 1, t0_ + 5s, t0_).outcome, Outcome::kQueued);
  EXPECT_TRUE(q.Expire(t0_ + 1s).empty());  // deadline is the latest start: not yet past
  EXPECT_EQ(q.Expire(t0_ + 2s), Ids({2, 3}));
  EXPECT_EQ(q.queued(), 1u);
  EXPECT_EQ(q.stats().expired, 2u);
  EXPECT_EQ(q.OnComplete(1, 1ms, t0_ + 2s).start, Ids({4}));
}

TEST_F(AdmissionQueueTest, DispatchSkipsAndReportsExpiredRequests) {
  AdmissionQueue q(Serial());
  ASSERT_EQ(q.Admit(1, 1, Far(), t0_).outcome, Outcome::kStartNow);
  ASSERT_EQ(q.Admit(2, 0, t0_ + 1s, t0_).outcome, Outcome::kQueued);
  ASSERT_EQ(q.Admit(3, 1, Far(), t0_).outcome, Outcome::kQueued);
  const auto d = q.OnComplete(1, 2s, t0_ + 2s);
  EXPECT_EQ(d.expired, Ids({2}));
  EXPECT_EQ(d.start, Ids({3}));
}

TEST_F(AdmissionQueueTest, CancelRemovesOnlyQueuedRequests) {
  AdmissionQueue q(Serial());
  ASSERT_EQ(q.Admit(1, 1, Far(), t0_).outcome, Outcome::kStartNow);
  ASSERT_EQ(q.Admit(2, 1, Far(), t0_).outcome, Outcome::kQueued);
  ASSERT_EQ(q.Admit(3, 1, Far(), t0_).outcome, Outcome::kQueued);
  EXPECT_TRUE(q.Cancel(2));
  EXPECT_FALSE(q.Cancel(2));
  EXPECT_FALSE(q.Cancel(1));  // in flight: ended by OnComplete
  EXPECT_EQ(q.OnComplete(1, 1ms, t0_).start, Ids({3}));
  EXPECT_EQ(q.stats().cancelled, 1u);
}

TEST_F(AdmissionQueueTest, UnknownCompletionFreesNothing) {
  AdmissionQueue q(Serial());
  ASSERT_EQ(q.Admit(1, 1, Far(), t0_).outcome, Outcome::kStartNow);
  ASSERT_EQ(q.Admit(2, 1, Far(), t0_).outcome, Outcome::kQueued);
  EXPECT_TRUE(q.OnComplete(99, 1ms, t0_).start.empty());
  EXPECT_TRUE(q.OnComplete(2, 1ms, t0_).start.empty());  // queued, not in flight
  EXPECT_EQ(q.in_flight(), 1);
}

TEST_F(AdmissionQueueTest, DuplicateIdIsRejected) {
  AdmissionQueue q(Serial());
  ASSERT_EQ(q.Admit(1, 1, Far(), t0_).outcome, Outcome::kStartNow);
  EXPECT_EQ(q.Admit(1, 1, Far(), t0_).reason, Reason::kDuplicateId);
  EXPECT_EQ(q.in_flight(), 1);
}

TEST_F(AdmissionQueueTest, StandingQueueShedsLowerClassesButQueuesTopClass) {
  AdmissionQueue q(Serial());
  ASSERT_EQ(q.Admit(1, 1, Far(), t0_).outcome, Outcome::kStartNow);
  for (uint64_t id = 2; id <= 5; ++id)
    ASSERT_EQ(q.Admit(id, 1, Far(), t0_).outcome, Outcome::kQueued);
  // Sojourn 10 ms > 5 ms target: above target, but not yet for a whole 100 ms interval.
  ASSERT_EQ(q.OnComplete(1, 10ms, t0_ + 10ms).start, Ids({2}));
  EXPECT_FALSE(q.standing());
  EXPECT_EQ(q.Admit(6, 2, Far(), t0_ + 10ms).outcome, Outcome::kQueued);
  // Still above target 110 ms later: the queue is standing.
  ASSERT_EQ(q.OnComplete(2, 110ms, t0_ + 120ms).start, Ids({3}));
  EXPECT_TRUE(q.standing());
  const auto low = q.Admit(7, 1, Far(), t0_ + 120ms);
  EXPECT_EQ(low.outcome, Outcome::kRejected);
  EXPECT_EQ(low.reason, Reason::kStandingQueue);
  EXPECT_GE(low.retry_after, 1s);
  EXPECT_EQ(q.Admit(8, 0, Far(), t0_ + 120ms).outcome, Outcome::kQueued);
  // The top-class request waits 1 ms (< target): the standing state ends.
  ASSERT_EQ(q.OnComplete(3, 1ms, t0_ + 121ms).start, Ids({8}));
  EXPECT_FALSE(q.standing());
  EXPECT_EQ(q.Admit(9, 1, Far(), t0_ + 121ms).outcome, Outcome::kQueued);
}

TEST_F(AdmissionQueueTest, DrainingTheQueueEndsTheStandingState) {
  AdmissionQueue q(Serial());
  ASSERT_EQ(q.Admit(1, 1, Far(), t0_).outcome, Outcome::kStartNow);
  ASSERT_EQ(q.Admit(2, 1, Far(), t0_).outcome, Outcome::kQueued);
  ASSERT_EQ(q.Admit(3, 1, Far(), t0_).outcome, Outcome::kQueued);
  ASSERT_EQ(q.Admit(4, 1, Far(), t0_).outcome, Outcome::kQueued);
  ASSERT_EQ(q.OnComplete(1, 10ms, t0_ + 10ms).start, Ids({2}));
  ASSERT_EQ(q.OnComplete(2, 10ms, t0_ + 200ms).start, Ids({3}));
  ASSERT_TRUE(q.standing());
  ASSERT_TRUE(q.Cancel(4));
  EXPECT_FALSE(q.standing());
}

TEST_F(AdmissionQueueTest, CountersAddUpUnderMixedLoad) {
  AdmissionConfig c = Serial();
  c.max_concurrency = 3;
  c.reserved_for_top = 1;
  c.max_queue_total = 8;
  c.max_queue_per_class = 4;
  AdmissionQueue q(c);
  std::vector<AdmissionQueue::RequestId> running;
  Clock::time_point now = t0_;
  uint64_t next_id = 1;
  for (int step = 0; step < 2000; ++step) {
    now += 3ms;
    const int priority = step % 3;
    const auto deadline = now + std::chrono::milliseconds(5 + (step * 37) % 400);
    if (q.Admit(next_id, priority, deadline, now).outcome == Outcome::kStartNow) {
      running.push_back(next_id);
    }
    ++next_id;
    if (step % 7 == 0) (void)q.Cancel(next_id - 2);
    if (step % 2 == 0 && !running.empty()) {
      const auto d = q.OnComplete(running.front(), 20ms, now);
      running.erase(running.begin());
      running.insert(running.end(), d.start.begin(), d.start.end());
    }
    if (step % 5 == 0) (void)q.Expire(now);
    ASSERT_EQ(q.in_flight(), static_cast<int>(running.size()));
    ExpectBalanced(q);
  }
  while (!running.empty()) {
    now += 1s;
    const auto d = q.OnComplete(running.front(), 20ms, now);
    running.erase(running.begin());
    running.insert(running.end(), d.start.begin(), d.start.end());
  }
  (void)q.Expire(now + 1h);
  EXPECT_EQ(q.queued(), 0u);
  const auto& s = q.stats();
  EXPECT_EQ(s.submitted, 2000u);
  EXPECT_EQ(s.submitted, s.admitted + s.rejected_total() + s.expired + s.cancelled);
  EXPECT_GT(s.admitted, 0u);
  EXPECT_GT(s.rejected_total(), 0u);
  EXPECT_GT(s.expired, 0u);
}

TEST_F(AdmissionQueueTest, ReconfigureGrowingConcurrencyStartsQueuedInPriorityOrder) {
  AdmissionQueue q(Serial());
  ASSERT_EQ(q.Admit(1, 1, Far(), t0_).outcome, Outcome::kStartNow);
  ASSERT_EQ(q.Admit(10, 2, Far(), t0_).outcome, Outcome::kQueued);
  ASSERT_EQ(q.Admit(20, 1, Far(), t0_).outcome, Outcome::kQueued);
  ASSERT_EQ(q.Admit(30, 0, Far(), t0_).outcome, Outcome::kQueued);
  ASSERT_EQ(q.Admit(31, 0, Far(), t0_).outcome, Outcome::kQueued);
  ASSERT_EQ(q.Admit(21, 1, Far(), t0_).outcome, Outcome::kQueued);
  ExpectBalanced(q);
  AdmissionConfig c = Serial();
  c.max_concurrency = 4;  // three more slots
  auto d = q.Reconfigure(c, t0_ + 1ms);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->start, Ids({30, 31, 20}));
  EXPECT_TRUE(d->expired.empty());
  EXPECT_EQ(q.in_flight(), 4);
  EXPECT_EQ(q.queued(), 2u);
  EXPECT_EQ(q.config().max_concurrency, 4);
  ExpectBalanced(q);
  // The rest keep their order.
  EXPECT_EQ(q.OnComplete(1, 1ms, t0_ + 2ms).start, Ids({21}));
  EXPECT_EQ(q.OnComplete(30, 1ms, t0_ + 2ms).start, Ids({10}));
  ExpectBalanced(q);
}

TEST_F(AdmissionQueueTest, ReconfigureLoweringTheReservationLetsLowerClassesStart) {
  AdmissionConfig c = Serial();
  c.max_concurrency = 2;
  c.reserved_for_top = 1;
  AdmissionQueue q(c);
  ASSERT_EQ(q.Admit(1, 1, Far(), t0_).outcome, Outcome::kStartNow);
  ASSERT_EQ(q.Admit(2, 2, Far(), t0_).outcome, Outcome::kQueued);  // only the reserved slot left
  c.reserved_for_top = 0;
  auto d = q.Reconfigure(c, t0_);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->start, Ids({2}));
  ExpectBalanced(q);
}

TEST_F(AdmissionQueueTest, ReconfigureReportsQueuedRequestsPastTheirDeadline) {
  AdmissionQueue q(Serial());
  ASSERT_EQ(q.Admit(1, 1, Far(), t0_).outcome, Outcome::kStartNow);
  ASSERT_EQ(q.Admit(2, 0, t0_ + 1s, t0_).outcome, Outcome::kQueued);
  ASSERT_EQ(q.Admit(3, 1, Far(), t0_).outcome, Outcome::kQueued);
  AdmissionConfig c = Serial();
  c.max_concurrency = 2;
  auto d = q.Reconfigure(c, t0_ + 2s);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->expired, Ids({2}));
  EXPECT_EQ(d->start, Ids({3}));
  EXPECT_EQ(q.stats().expired, 1u);
  ExpectBalanced(q);
}

TEST_F(AdmissionQueueTest, ReconfigureShrinkingConcurrencyKeepsInFlightAndHoldsNewStarts) {
  AdmissionConfig c = Serial();
  c.max_concurrency = 3;
  AdmissionQueue q(c);
  for (uint64_t id = 1; id <= 3; ++id)
    ASSERT_EQ(q.Admit(id, 1, Far(), t0_).outcome, Outcome::kStartNow);
  ASSERT_EQ(q.Admit(4, 1, Far(), t0_).outcome, Outcome::kQueued);
  ASSERT_EQ(q.Admit(5, 2, Far(), t0_).outcome, Outcome::kQueued);
  c.max_concurrency = 1;
  auto d = q.Reconfigure(c, t0_);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->start.empty());
  EXPECT_TRUE(d->expired.empty());
  EXPECT_EQ(q.in_flight(), 3);  // nothing in flight is cut
  EXPECT_EQ(q.queued(), 2u);
  ExpectBalanced(q);
  // Over the limit: even a top-class arrival queues, and completions start nothing until
  // in_flight drops below the new limit of 1.
  EXPECT_EQ(q.Admit(6, 0, Far(), t0_).outcome, Outcome::kQueued);
  EXPECT_TRUE(q.OnComplete(1, 1ms, t0_).start.empty());
  EXPECT_EQ(q.in_flight(), 2);
  EXPECT_TRUE(q.OnComplete(2, 1ms, t0_).start.empty());
  EXPECT_EQ(q.in_flight(), 1);
  EXPECT_EQ(q.OnComplete(3, 1ms, t0_).start, Ids({6}));
  EXPECT_EQ(q.in_flight(), 1);
  EXPECT_EQ(q.OnComplete(6, 1ms, t0_).start, Ids({4}));
  EXPECT_EQ(q.OnComplete(4, 1ms, t0_).start, Ids({5}));
  ExpectBalanced(q);
}

TEST_F(AdmissionQueueTest, ReconfigureSmallerBoundsKeepQueuedAndRejectNewArrivals) {
  AdmissionQueue q(Serial());
  ASSERT_EQ(q.Admit(1, 1, Far(), t0_).outcome, Outcome::kStartNow);
  for (uint64_t id = 2; id <= 5; ++id)
    ASSERT_EQ(q.Admit(id, 1, Far(), t0_).outcome, Outcome::kQueued);
  AdmissionConfig c = Serial();
  c.max_queue_total = 2;
  c.max_queue_per_class = 2;
  auto d = q.Reconfigure(c, t0_);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->start.empty());
  EXPECT_EQ(q.queued(), 4u);  // nothing queued is dropped
  EXPECT_EQ(q.Admit(6, 1, Far(), t0_).reason, Reason::kQueueFull);
  EXPECT_EQ(q.OnComplete(1, 1ms, t0_).start, Ids({2}));
  EXPECT_EQ(q.OnComplete(2, 1ms, t0_).start, Ids({3}));
  // Two left: still at the new total bound.
  EXPECT_EQ(q.Admit(7, 2, Far(), t0_).reason, Reason::kQueueFull);
  EXPECT_EQ(q.OnComplete(3, 1ms, t0_).start, Ids({4}));
  EXPECT_EQ(q.Admit(8, 2, Far(), t0_).outcome, Outcome::kQueued);
  EXPECT_EQ(q.OnComplete(4, 1ms, t0_).start, Ids({5}));
  EXPECT_EQ(q.OnComplete(5, 1ms, t0_).start, Ids({8}));
  ExpectBalanced(q);
}

TEST_F(AdmissionQueueTest, ReconfigureKeepsTheServiceTimeEstimateAndAdoptsTheNewAlpha) {
  AdmissionConfig c = Serial();
  c.initial_service_time = 100ms;
  c.ewma_alpha = 0.5;
  AdmissionQueue q(c);
  ASSERT_EQ(q.Admit(1, 1, Far(), t0_).outcome, Outcome::kStartNow);
  ASSERT_TRUE(q.OnComplete(1, 300ms, t0_).start.empty());
  ASSERT_EQ(q.mean_service_time(), 200ms);
  c.initial_service_time = 5s;  // seeds new queues only
  c.ewma_alpha = 1.0;
  ASSERT_TRUE(q.Reconfigure(c, t0_).ok());
  EXPECT_EQ(q.mean_service_time(), 200ms);
  ASSERT_EQ(q.Admit(2, 1, Far(), t0_).outcome, Outcome::kStartNow);
  ASSERT_TRUE(q.OnComplete(2, 40ms, t0_).start.empty());
  EXPECT_EQ(q.mean_service_time(), 40ms);  // alpha 1: the last sample
}

TEST_F(AdmissionQueueTest, ReconfigureRefusesANumPrioritiesChangeAndKeepsTheQueue) {
  AdmissionQueue q(Serial());
  ASSERT_EQ(q.Admit(1, 2, Far(), t0_).outcome, Outcome::kStartNow);
  ASSERT_EQ(q.Admit(2, 2, Far(), t0_).outcome, Outcome::kQueued);
  ASSERT_EQ(q.Admit(3, 0, Far(), t0_).outcome, Outcome::kQueued);
  AdmissionConfig c = Serial();
  c.num_priorities = 2;
  c.max_concurrency = 8;
  const auto d = q.Reconfigure(c, t0_);
  EXPECT_EQ(d.status().code(), StatusCode::kFailedPrecondition);
  // Unchanged: old limits, same queue, same order.
  EXPECT_EQ(q.config().num_priorities, 3);
  EXPECT_EQ(q.config().max_concurrency, 1);
  EXPECT_EQ(q.in_flight(), 1);
  EXPECT_EQ(q.depth(0), 1u);
  EXPECT_EQ(q.depth(2), 1u);
  ExpectBalanced(q);
  EXPECT_EQ(q.OnComplete(1, 1ms, t0_).start, Ids({3}));
  EXPECT_EQ(q.OnComplete(3, 1ms, t0_).start, Ids({2}));
  ExpectBalanced(q);
}

TEST_F(AdmissionQueueTest, ReconfigureRefusesAnInvalidConfigAndKeepsTheQueue) {
  AdmissionQueue q(Serial());
  ASSERT_EQ(q.Admit(1, 1, Far(), t0_).outcome, Outcome::kStartNow);
  ASSERT_EQ(q.Admit(2, 1, Far(), t0_).outcome, Outcome::kQueued);
  AdmissionConfig c = Serial();
  c.max_concurrency = 4;
  c.reserved_for_top = 4;  // nothing left for other classes
  EXPECT_EQ(q.Reconfigure(c, t0_).status().code(), StatusCode::kInvalidArgument);
  c = Serial();
  c.max_concurrency = 4;
  c.ewma_alpha = 0;
  EXPECT_EQ(q.Reconfigure(c, t0_).status().code(), StatusCode::kInvalidArgument);
  // An invalid config that also changes num_priorities reports the invalid value first.
  c = Serial();
  c.num_priorities = 0;
  EXPECT_EQ(q.Reconfigure(c, t0_).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(q.config().max_concurrency, 1);
  EXPECT_EQ(q.in_flight(), 1);
  EXPECT_EQ(q.queued(), 1u);
  ExpectBalanced(q);
}

TEST_F(AdmissionQueueTest, CountersAddUpAcrossReloads) {
  AdmissionConfig c = Serial();
  c.max_queue_total = 8;
  c.max_queue_per_class = 4;
  AdmissionQueue q(c);
  std::vector<AdmissionQueue::RequestId> running;
  Clock::time_point now = t0_;
  uint64_t next_id = 1;
  size_t started_by_reload = 0;
  for (int step = 0; step < 2000; ++step) {
    now += 3ms;
    const auto deadline = now + std::chrono::milliseconds(5 + (step * 37) % 400);
    if (q.Admit(next_id, step % 3, deadline, now).outcome == Outcome::kStartNow) {
      running.push_back(next_id);
    }
    ++next_id;
    if (step % 3 == 0 && !running.empty()) {
      const auto d = q.OnComplete(running.front(), 20ms, now);
      running.erase(running.begin());
      running.insert(running.end(), d.start.begin(), d.start.end());
    }
    if (step % 50 == 0) {
      // Reload with concurrency 1..4 and queue bounds 2..8, both up and down.
      c.max_concurrency = 1 + (step / 50) % 4;
      c.reserved_for_top = c.max_concurrency > 2 ? 1 : 0;
      c.max_queue_total = 2 + static_cast<size_t>((step / 50 * 5) % 7);
      c.max_queue_per_class = std::min<size_t>(c.max_queue_total, 4);
      const auto d = q.Reconfigure(c, now);
      ASSERT_TRUE(d.ok()) << d.status().ToString();
      running.insert(running.end(), d->start.begin(), d->start.end());
      started_by_reload += d->start.size();
    }
    if (step % 11 == 0) (void)q.Expire(now);
    ASSERT_EQ(q.in_flight(), static_cast<int>(running.size()));
    ExpectBalanced(q);
  }
  EXPECT_GT(started_by_reload, 0u);
  EXPECT_GT(q.stats().admitted, 0u);
  EXPECT_GT(q.stats().rejected_total(), 0u);
}

TEST_F(AdmissionQueueTest, CreateRejectsInvalidConfig) {
  AdmissionConfig c = Serial();
  c.reserved_for_top = 1;  // == max_concurrency: nothing left for other classes
  EXPECT_EQ(AdmissionQueue::Create(c).status().code(), StatusCode::kInvalidArgument);
  c = Serial();
  c.max_queue_per_class = 32;  // > total
  EXPECT_FALSE(c.Validate().ok());
  c = Serial();
  c.ewma_alpha = 0;
  EXPECT_FALSE(c.Validate().ok());
  EXPECT_TRUE(AdmissionQueue::Create(Serial()).ok());
}

}  // namespace
}  // namespace kinfer
