#include "operator/kube/work_queue.h"

#include <gtest/gtest.h>

#include <thread>

namespace kinfer::kube {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

class WorkQueueCoreTest : public ::testing::Test {
 protected:
  Clock::time_point now_ = Clock::time_point() + seconds(100);
  WorkQueueCore q_;
};

TEST_F(WorkQueueCoreTest, DedupsWhilePending) {
  q_.Add("a");
  q_.Add("a");
  q_.Add("b");
  EXPECT_EQ(q_.Len(), 2u);
  EXPECT_EQ(q_.TryGet(now_), "a");
  EXPECT_EQ(q_.TryGet(now_), "b");
  EXPECT_EQ(q_.TryGet(now_), std::nullopt);
}

TEST_F(WorkQueueCoreTest, ReAddWhileProcessingRequeuesAfterDone) {
  q_.Add("a");
  ASSERT_EQ(q_.TryGet(now_), "a");
  q_.Add("a");
  q_.Add("a");
  EXPECT_EQ(q_.TryGet(now_), std::nullopt) << "never handed to two workers at once";
  q_.Done("a");
  EXPECT_EQ(q_.TryGet(now_), "a");
  q_.Done("a");
  EXPECT_EQ(q_.TryGet(now_), std::nullopt);
}

TEST_F(WorkQueueCoreTest, AddAfterWaitsUntilDue) {
  q_.AddAfter("a", milliseconds(50), now_);
  EXPECT_EQ(q_.TryGet(now_ + milliseconds(49)), std::nullopt);
  EXPECT_EQ(q_.NextDue(), now_ + milliseconds(50));
  EXPECT_EQ(q_.TryGet(now_ + milliseconds(50)), "a");
}

TEST_F(WorkQueueCoreTest, EarlierDelayWins) {
  q_.AddAfter("a", seconds(10), now_);
  q_.AddAfter("a", seconds(1), now_);
  q_.AddAfter("a", seconds(5), now_);
  EXPECT_EQ(q_.Delayed(), 1u);
  EXPECT_EQ(q_.TryGet(now_ + seconds(1)), "a");
}

TEST_F(WorkQueueCoreTest, RateLimitedBackoffDoublesFromFiveMsToCap) {
  EXPECT_EQ(q_.AddRateLimited("a", now_), milliseconds(5));
  EXPECT_EQ(q_.AddRateLimited("a", now_), milliseconds(10));
  EXPECT_EQ(q_.AddRateLimited("a", now_), milliseconds(20));
  EXPECT_EQ(q_.NumRequeues("a"), 3);
  for (int i = 0; i < 100; ++i) (void)q_.AddRateLimited("a", now_);
  EXPECT_EQ(q_.AddRateLimited("a", now_), seconds(1000));
  q_.Forget("a");
  EXPECT_EQ(q_.NumRequeues("a"), 0);
  EXPECT_EQ(q_.AddRateLimited("a", now_), milliseconds(5));
}

TEST_F(WorkQueueCoreTest, RetryAfterIsAFloorOnTheBackoff) {
  // A server's Retry-After longer than the backoff wins; a shorter one does not shorten it.
  EXPECT_EQ(q_.AddRateLimited("a", now_, seconds(1)), seconds(1));
  EXPECT_FALSE(q_.TryGet(now_ + milliseconds(999)).has_value());
  EXPECT_EQ(q_.TryGet(now_ + seconds(1)), "a");
  q_.Done("a");
  EXPECT_EQ(q_.AddRateLimited("a", now_, milliseconds(1)), milliseconds(10));
}

TEST_F(WorkQueueCoreTest, RetryAfterHoldsTheItemAgainstEventsUntilDue) {
  // The server said "not before 1 s": a watch event for the same key meanwhile does not bring the
  // retry forward (without a Retry-After an event does, as in controller-runtime).
  ASSERT_EQ((q_.Add("a"), q_.TryGet(now_)), "a");
  q_.Add("a");  // an event while the worker holds it
  (void)q_.AddRateLimited("a", now_, seconds(1));
  q_.Done("a");
  q_.Add("a");  // an event after it failed
  q_.AddAfter("a", milliseconds(10), now_);
  EXPECT_EQ(q_.TryGet(now_ + milliseconds(999)), std::nullopt);
  EXPECT_EQ(q_.TryGet(now_ + seconds(1)), "a");
  q_.Done("a");
  EXPECT_EQ(q_.TryGet(now_ + seconds(1)), std::nullopt) << "one retry, not one per event";
  q_.Add("a");  // the hold ended with the retry
  EXPECT_EQ(q_.TryGet(now_ + seconds(1)), "a");
}

TEST_F(WorkQueueCoreTest, RetryAfterHoldsOnlyForTheServersTime) {
  // After many failures the backoff (5 ms * 2^12 = 20.48 s) is far longer than the server's
  // Retry-After (1 s): the hold ends at 1 s; it used to last the whole backoff, so a spec change
  // after throttling waited up to 1000 s.
  for (int i = 0; i < 12; ++i) (void)q_.AddRateLimited("a", now_);
  ASSERT_EQ(q_.TryGet(now_ + seconds(1000)), "a");  // the plain delayed copy
  q_.Done("a");
  EXPECT_EQ(q_.AddRateLimited("a", now_ + seconds(1000), seconds(1)), milliseconds(20480));
  Clock::time_point t = now_ + seconds(1000);
  q_.Add("a");  // an event during the hold
  EXPECT_EQ(q_.TryGet(t + milliseconds(999)), std::nullopt) << "not before the server's time";
  EXPECT_EQ(q_.TryGet(t + seconds(1)), "a") << "the event queues it when the hold ends";
  q_.Done("a");
  EXPECT_EQ(q_.TryGet(t + seconds(30)), std::nullopt) << "one retry, not one per event";

  // Without an event the rest of the backoff is a plain delay, which an event brings forward.
  t += seconds(100);
  (void)q_.AddRateLimited("a", t, seconds(1));
  EXPECT_EQ(q_.TryGet(t + seconds(1)), std::nullopt);
  EXPECT_EQ(q_.Delayed(), 1u);
  q_.Add("a");
  EXPECT_EQ(q_.TryGet(t + seconds(2)), "a");
  q_.Done("a");
  // And with no event at all, it comes back when the whole backoff is over.
  t += seconds(1000);
  EXPECT_EQ(q_.AddRateLimited("a", t, seconds(1)), milliseconds(81920));
  EXPECT_EQ(q_.TryGet(t + seconds(1)), std::nullopt);
  EXPECT_EQ(q_.TryGet(t + milliseconds(81919)), std::nullopt);
  EXPECT_EQ(q_.TryGet(t + milliseconds(81920)), "a");
}

TEST_F(WorkQueueCoreTest, PlainBackoffYieldsToEvents) {
  ASSERT_EQ((q_.Add("a"), q_.TryGet(now_)), "a");
  (void)q_.AddRateLimited("a", now_);
  (void)q_.AddRateLimited("a", now_);
  q_.Done("a");
  q_.Add("a");
  EXPECT_EQ(q_.TryGet(now_), "a") << "a new event may fix what failed: retry now";
}

TEST_F(WorkQueueCoreTest, BackoffIsPerItem) {
  (void)q_.AddRateLimited("a", now_);
  (void)q_.AddRateLimited("a", now_);
  EXPECT_EQ(q_.AddRateLimited("b", now_), milliseconds(5));
}

TEST_F(WorkQueueCoreTest, DelayedItemDueWhileQueuedIsNotDuplicated) {
  q_.AddAfter("a", milliseconds(5), now_);
  q_.Add("a");
  EXPECT_EQ(q_.TryGet(now_ + seconds(1)), "a");
  EXPECT_EQ(q_.TryGet(now_ + seconds(1)), std::nullopt);
}

TEST(WorkQueueTest, BlockingGetAndShutDown) {
  WorkQueue q;
  std::thread worker([&] {
    std::optional<std::string> k = q.Get();
    ASSERT_EQ(k, "x");
    q.Done(*k);
    EXPECT_EQ(q.Get(), std::nullopt);
  });
  q.Add("x");
  std::this_thread::sleep_for(milliseconds(20));
  q.ShutDown();
  worker.join();
}

TEST(WorkQueueTest, GetWakesForDelayedItem) {
  WorkQueue q;
  auto start = Clock::now();
  q.AddAfter("x", milliseconds(30));
  EXPECT_EQ(q.Get(), "x");
  EXPECT_GE(Clock::now() - start, milliseconds(30));
}

}  // namespace
}  // namespace kinfer::kube
