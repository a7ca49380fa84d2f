#include "runtime/backend/cpu/chunk_queue.h"

#include <cassert>

namespace kinfer {
namespace {

constexpr uint64_t Pack(uint64_t front, uint64_t back) { return front << 32 | back; }
constexpr uint32_t Front(uint64_t fb) { return static_cast<uint32_t>(fb >> 32); }
constexpr uint32_t Back(uint64_t fb) { return static_cast<uint32_t>(fb); }

}  // namespace

void ChunkQueue::Reset(int64_t n_chunks, int nth) {
  assert(nth >= 1 && n_chunks >= 0 && n_chunks < (int64_t{1} << 31));
  if (nth > capacity_) {
    ranges_ = std::make_unique<Range[]>(nth);
    capacity_ = nth;
  }
  nth_ = nth;
  for (int i = 0; i < nth; ++i) {
    ranges_[i].fb.store(Pack(n_chunks * i / nth, n_chunks * (i + 1) / nth),
                        std::memory_order_relaxed);
  }
}

int64_t ChunkQueue::Next(int ith) {
  assert(ith >= 0 && ith < nth_);
  // My own range, from the front.
  std::atomic<uint64_t>& mine = ranges_[ith].fb;
  uint64_t fb = mine.load(std::memory_order_relaxed);
  while (Front(fb) < Back(fb)) {
    if (mine.compare_exchange_weak(fb, Pack(Front(fb) + 1, Back(fb)), std::memory_order_relaxed)) {
      return Front(fb);
    }
  }
  // Then the others', from the back.
  for (int k = 1; k < nth_; ++k) {
    std::atomic<uint64_t>& theirs = ranges_[(ith + k) % nth_].fb;
    fb = theirs.load(std::memory_order_relaxed);
    while (Front(fb) < Back(fb)) {
      if (theirs.compare_exchange_weak(fb, Pack(Front(fb), Back(fb) - 1),
                                       std::memory_order_relaxed)) {
        return Back(fb) - 1;
      }
    }
  }
  return -1;
}

}  // namespace kinfer
