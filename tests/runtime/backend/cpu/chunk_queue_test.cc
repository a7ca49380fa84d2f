#include "runtime/backend/cpu/chunk_queue.h"

#include <algorithm>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/backend/cpu/thread_pool.h"

namespace kinfer {
namespace {

TEST(ChunkQueueTest, AWorkerTakesItsOwnRangeInOrderThenTheOthersFromTheBack) {
  ChunkQueue q;
  q.Reset(10, 2);  // worker 0 owns [0, 5), worker 1 [5, 10)
  EXPECT_EQ(q.Next(1), 5);
  EXPECT_EQ(q.Next(1), 6);
  for (int c = 0; c < 3; ++c) EXPECT_EQ(q.Next(0), c);
  EXPECT_EQ(q.Next(1), 7);
  EXPECT_EQ(q.Next(1), 8);
  EXPECT_EQ(q.Next(1), 9);
  // Worker 1's range is empty: it takes worker 0's last chunks, worker 0 its next ones.
  EXPECT_EQ(q.Next(1), 4);
  EXPECT_EQ(q.Next(0), 3);
  EXPECT_EQ(q.Next(0), -1);
  EXPECT_EQ(q.Next(1), -1);
}

TEST(ChunkQueueTest, ResetStartsOverWithAnotherSizeAndWorkerCount) {
  ChunkQueue q;
  q.Reset(3, 2);
  while (q.Next(0) >= 0) {
  }
  q.Reset(4, 3);  // ranges [0, 1), [1, 2), [2, 4)
  EXPECT_EQ(q.Next(2), 2);
  EXPECT_EQ(q.Next(2), 3);
  EXPECT_EQ(q.Next(2), 0);  // from worker 0's back
  EXPECT_EQ(q.Next(0), 1);  // worker 0's range is empty: worker 1's
  EXPECT_EQ(q.Next(1), -1);
  q.Reset(0, 2);
  EXPECT_EQ(q.Next(0), -1);
  EXPECT_EQ(q.Next(1), -1);
}

TEST(ChunkQueueTest, MoreWorkersThanChunks) {
  ChunkQueue q;
  q.Reset(2, 4);  // ranges [0, 0), [0, 1), [1, 1), [1, 2)
  EXPECT_EQ(q.Next(0), 0);
  EXPECT_EQ(q.Next(2), 1);
  EXPECT_EQ(q.Next(1), -1);
  EXPECT_EQ(q.Next(3), -1);
}

// Under contention (workers of a real pool, one of them slowed down, so that the others reach
// its range) every chunk is handed out exactly once, and a worker's own chunks come first, in
// order.
TEST(ChunkQueueTest, EveryChunkExactlyOnceUnderContention) {
  for (int nth : {2, 3, 4}) {
    ThreadPool pool(nth);
    ChunkQueue q;
    constexpr int kChunks = 997;
    for (int round = 0; round < 20; ++round) {
      q.Reset(kChunks, nth);
      std::vector<std::vector<int64_t>> got(nth);
      pool.Run([&](int ith, int) {
        for (int64_t c; (c = q.Next(ith)) >= 0;) {
          got[ith].push_back(c);
          if (ith == 0) std::this_thread::yield();  // a slow worker
        }
      });
      std::vector<int64_t> all;
      for (const auto& g : got) all.insert(all.end(), g.begin(), g.end());
      std::sort(all.begin(), all.end());
      ASSERT_EQ(all.size(), static_cast<size_t>(kChunks)) << nth << " workers";
      for (int c = 0; c < kChunks; ++c) ASSERT_EQ(all[c], c) << nth << " workers";
      // A worker's own chunks come first, in increasing order.
      for (int i = 0; i < nth; ++i) {
        const int64_t lo = int64_t{kChunks} * i / nth, hi = int64_t{kChunks} * (i + 1) / nth;
        int64_t prev = -1;
        for (int64_t c : got[i]) {
          if (c < lo || c >= hi) break;
          ASSERT_GT(c, prev);
          prev = c;
        }
      }
    }
  }
}

}  // namespace
}  // namespace kinfer
