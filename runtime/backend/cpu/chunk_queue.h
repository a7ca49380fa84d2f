// ChunkQueue: chunks [0, n) of one parallel phase handed out to a pool's workers so that a slow
// worker (a busy neighbour on its core, a longer share) does not hold the others at the barrier.
//
// Worker i owns a contiguous range of about n / nth chunks and takes them from its front, in
// order, so it streams its weights as a static split would. A worker whose range is empty takes
// the last chunk of another's range (the next worker first), so the two meet in the middle.
// Every chunk is handed out exactly once.
//
// Thread safety: Reset() is called by one thread while no worker uses the queue (before the
// pool.Run that uses it: Run publishes it); Next() by the workers concurrently.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

namespace kinfer {

class ChunkQueue {
 public:
  ChunkQueue() = default;
  ChunkQueue(const ChunkQueue&) = delete;
  ChunkQueue& operator=(const ChunkQueue&) = delete;

  // n_chunks chunks (< 2^31) for nth >= 1 workers.
  void Reset(int64_t n_chunks, int nth);

  // The next chunk for worker ith (< nth of the last Reset), or -1 when every chunk is taken.
  int64_t Next(int ith);

 private:
  // A worker's remaining range [front, back), packed as front << 32 | back.
  struct alignas(64) Range {
    std::atomic<uint64_t> fb{0};
  };
  std::unique_ptr<Range[]> ranges_;
  int capacity_ = 0;
  int nth_ = 0;
};

}  // namespace kinfer
