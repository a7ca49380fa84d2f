#include "runtime/backend/cpu/thread_pool.h"

#include <atomic>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace kinfer {
namespace {

class ThreadPoolTest : public ::testing::TestWithParam<int> {};

TEST_P(ThreadPoolTest, RunsEveryWorkerExactlyOncePerRun) {
  ThreadPool pool(GetParam());
  ASSERT_EQ(pool.size(), GetParam());
  std::vector<std::atomic<int>> hits(GetParam());
  for (int run = 0; run < 50; ++run) {
    pool.Run([&](int ith, int nth) {
      ASSERT_EQ(nth, GetParam());
      hits[ith].fetch_add(1);
    });
    for (int i = 0; i < GetParam(); ++i) ASSERT_EQ(hits[i].load(), run + 1) << "worker " << i;
  }
}

TEST_P(ThreadPoolTest, CallerIsWorkerZero) {
  ThreadPool pool(GetParam());
  const auto caller = std::this_thread::get_id();
  std::thread::id worker0;
  pool.Run([&](int ith, int) {
    if (ith == 0) worker0 = std::this_thread::get_id();
  });
  EXPECT_EQ(worker0, caller);
}

TEST_P(ThreadPoolTest, BarrierSeparatesPhases) {
  const int n = GetParam();
  ThreadPool pool(n);
  std::vector<int> slots(n, 0);
  std::atomic<int> errors{0};
  for (int run = 0; run < 200; ++run) {
    pool.Run([&](int ith, int nth) {
      for (int phase = 1; phase <= 5; ++phase) {
        slots[ith] = run * 10 + phase;
        pool.Barrier();
        // Every worker must see every other worker's write of this phase.
        for (int j = 0; j < nth; ++j) {
          if (slots[j] != run * 10 + phase) errors.fetch_add(1);
        }
        pool.Barrier();
      }
    });
  }
  EXPECT_EQ(errors.load(), 0);
}

TEST_P(ThreadPoolTest, ManyConsecutiveRunsDoNotDeadlock) {
  ThreadPool pool(GetParam());
  std::atomic<int64_t> total{0};
  for (int run = 0; run < 20000; ++run) {
    pool.Run([&](int ith, int) { total.fetch_add(ith + 1, std::memory_order_relaxed); });
  }
  const int n = GetParam();
  EXPECT_EQ(total.load(), int64_t{20000} * n * (n + 1) / 2);
}

TEST_P(ThreadPoolTest, WakesUpAfterWorkersFellAsleep) {
  ThreadPool pool(GetParam());
  std::atomic<int> count{0};
  for (int run = 0; run < 3; ++run) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // workers go to sleep
    pool.Run([&](int, int) { count.fetch_add(1); });
  }
  EXPECT_EQ(count.load(), 3 * GetParam());
}

INSTANTIATE_TEST_SUITE_P(Sizes, ThreadPoolTest, ::testing::Values(1, 2, 3, 4));

TEST(ThreadPoolSizeTest, NonPositiveSizeMeansOne) {
  ThreadPool pool(0);
  EXPECT_EQ(pool.size(), 1);
}

}  // namespace
}  // namespace kinfer
