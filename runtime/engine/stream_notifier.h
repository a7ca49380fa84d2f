// StreamNotifier: one wake-up shared by several RequestStreams, so that one consumer can wait on
// all of them at once (the n choices of one OpenAI request).
//
// Contract: Notify() bumps a counter and wakes every waiter. A consumer reads seq(), polls its
// streams without blocking, and, finding nothing, calls Wait(seq, timeout): it returns at once if
// a Notify() came after that seq() (so no event pushed between the poll and the wait is missed),
// else when one comes or the timeout passes.
//
// Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace kinfer {

class StreamNotifier {
 public:
  void Notify() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++seq_;
    }
    cv_.notify_all();
  }

  uint64_t seq() {
    std::lock_guard<std::mutex> lock(mu_);
    return seq_;
  }

  // Returns true when a Notify() came after `seen`, false on timeout.
  bool Wait(uint64_t seen, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return seq_ != seen; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t seq_ = 0;  // guarded by mu_
};

}  // namespace kinfer
