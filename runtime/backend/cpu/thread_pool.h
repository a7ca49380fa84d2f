// ThreadPool: a fixed set of workers for the compute kernels, tuned for many short jobs.
//
// Run(fn) calls fn(ith, nth) once on every worker, ith in [0, nth); the calling thread is worker
// 0, so a pool of size 1 starts no thread. Run returns when every worker has returned from fn.
// A decode step issues a few hundred small jobs, so wake-up latency matters: idle workers spin
// (a few hundred pauses, then sched_yield between checks so that an oversubscribed machine still
// makes progress) for about 1.5 ms after a job, and only then sleep on a futex
// (std::atomic::wait); Run() wakes sleepers with one notify. Barrier(), called by every worker
// inside fn, separates phases of one job; its waiters spin, then yield, never sleep.
// Latency is sub-microsecond on an idle machine; when other processes keep the cores busy a
// worker may be descheduled and every Run/Barrier then costs up to a scheduler time slice.
//
// Each worker also owns a scratch area (WorkerScratch) that the kernels use for quantized
// activations; see matmul.cc for the protocol that makes it safe inside Run().
//
// Thread safety: Run() is called by one thread at a time (the pool's owner), never from inside
// fn. Barrier() and scratch(ith) are called only from inside fn, by worker ith. fn must not
// throw and must call Barrier() the same number of times on every worker.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

namespace kinfer {

// A growable, 64-byte aligned byte buffer owned by one worker.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // Grows (contents are not kept) to at least `bytes`; returns the data pointer.
  uint8_t* Reserve(size_t bytes);
  uint8_t* data() const { return data_.get(); }
  size_t capacity() const { return capacity_; }

 private:
  struct Free {
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t, Free> data_;
  size_t capacity_ = 0;
};

// Per-worker state for MatMulInPool: two buffers used alternately by consecutive calls, so a
// worker may start quantizing the next call's activations while another still reads the last.
struct alignas(64) WorkerScratch {
  AlignedBuffer act[2];
  uint64_t calls = 0;
};

class ThreadPool {
 public:
  // n_threads < 1 is treated as 1.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_; }

  // Runs fn(ith, nth) on every worker and returns when all have finished.
  void Run(const std::function<void(int ith, int nth)>& fn);

  // Waits until every worker of the current Run has called Barrier(). Inside fn only.
  void Barrier();

  // Worker ith's scratch. Inside fn, only worker ith writes its own entry.
  WorkerScratch& scratch(int ith) { return scratch_[ith]; }

 private:
  void WorkerLoop(int ith);
  void WaitForJob(uint32_t seen);

  const int n_;
  std::vector<std::thread> threads_;
  std::unique_ptr<WorkerScratch[]> scratch_;

  // Job hand-off: Run publishes fn_ then bumps job_gen_; workers count down pending_.
  alignas(64) std::atomic<uint32_t> job_gen_{0};
  std::atomic<int> sleepers_{0};
  const std::function<void(int, int)>* fn_ = nullptr;
  bool stop_ = false;  // written before a final job_gen_ bump
  alignas(64) std::atomic<int> pending_{0};
  // Barrier: arrivals counted in barrier_count_; the last one bumps barrier_gen_.
  alignas(64) std::atomic<int> barrier_count_{0};
  alignas(64) std::atomic<uint32_t> barrier_gen_{0};
};

}  // namespace kinfer
