#include "runtime/backend/cpu/thread_pool.h"

#include <cassert>
#include <chrono>
#include <cstdlib>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KINFER_PAUSE() _mm_pause()
#else
#define KINFER_PAUSE() ((void)0)
#endif

namespace kinfer {
namespace {

constexpr auto kSpinBeforeSleep = std::chrono::microseconds(1500);
// A waiter pauses this many times, then yields its core between checks: when the machine is
// oversubscribed (other processes, or more workers than cores) the thread it waits for may need
// this core, and a yield costs well under a microsecond when nobody else wants it.
constexpr int kSpinsBeforeYield = 512;

// Waits until done() is true: spin, then spin with yields.
template <typename Done>
inline void SpinUntil(Done done) {
  for (int i = 0; i < kSpinsBeforeYield; ++i) {
    if (done()) return;
    KINFER_PAUSE();
  }
  while (!done()) std::this_thread::yield();
}

}  // namespace

void AlignedBuffer::Free::operator()(uint8_t* p) const { std::free(p); }

uint8_t* AlignedBuffer::Reserve(size_t bytes) {
  if (bytes <= capacity_ && data_) return data_.get();
  size_t cap = (bytes + 4095) & ~size_t{4095};
  if (cap < capacity_ * 2) cap = capacity_ * 2;
  data_.reset(static_cast<uint8_t*>(std::aligned_alloc(64, cap)));
  assert(data_ && "out of memory");
  capacity_ = cap;
  return data_.get();
}

ThreadPool::ThreadPool(int n_threads) : n_(n_threads < 1 ? 1 : n_threads) {
  scratch_ = std::make_unique<WorkerScratch[]>(n_);
  threads_.reserve(n_ - 1);
  for (int i = 1; i < n_; ++i) threads_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  stop_ = true;
  job_gen_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) job_gen_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::Run(const std::function<void(int, int)>& fn) {
  if (n_ == 1) {
    fn(0, 1);
    return;
  }
  fn_ = &fn;
  pending_.store(n_ - 1, std::memory_order_relaxed);
  job_gen_.fetch_add(1, std::memory_order_seq_cst);  // publishes fn_ and pending_
  if (sleepers_.load(std::memory_order_seq_cst) > 0) job_gen_.notify_all();
  fn(0, n_);
  SpinUntil([this] { return pending_.load(std::memory_order_acquire) == 0; });
}

void ThreadPool::WaitForJob(uint32_t seen) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kSpinsBeforeYield; ++i) {
    if (job_gen_.load(std::memory_order_acquire) != seen) return;
    KINFER_PAUSE();
  }
  for (int i = 0;; ++i) {
    if (job_gen_.load(std::memory_order_acquire) != seen) return;
    std::this_thread::yield();
    if ((i & 15) == 15 && std::chrono::steady_clock::now() - start > kSpinBeforeSleep) break;
  }
  sleepers_.fetch_add(1, std::memory_order_seq_cst);
  while (job_gen_.load(std::memory_order_seq_cst) == seen) job_gen_.wait(seen, std::memory_order_seq_cst);
  sleepers_.fetch_sub(1, std::memory_order_seq_cst);
}

void ThreadPool::WorkerLoop(int ith) {
  uint32_t seen = 0;
  for (;;) {
    WaitForJob(seen);
    seen = job_gen_.load(std::memory_order_acquire);
    if (stop_) return;
    (*fn_)(ith, n_);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::Barrier() {
  if (n_ == 1) return;
  const uint32_t gen = barrier_gen_.load(std::memory_order_acquire);
  if (barrier_count_.fetch_add(1, std::memory_order_acq_rel) == n_ - 1) {
    barrier_count_.store(0, std::memory_order_relaxed);
    barrier_gen_.fetch_add(1, std::memory_order_release);
    return;
  }
  SpinUntil([this, gen] { return barrier_gen_.load(std::memory_order_acquire) != gen; });
}

}  // namespace kinfer
