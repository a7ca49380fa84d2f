#include "runtime/backend/cpu/bandwidth.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

namespace kinfer {
namespace {

constexpr size_t kBytes = size_t{512} << 20;
constexpr int kPasses = 4;

// Sums 64-bit words with 4 independent chains (the compiler vectorizes it); the result is used so
// the loads are not removed.
uint64_t ReadSlice(const uint64_t* p, size_t n) {
  uint64_t a = 0, b = 0, c = 0, d = 0;
  for (size_t i = 0; i + 4 <= n; i += 4) {
    a += p[i];
    b += p[i + 1];
    c += p[i + 2];
    d += p[i + 3];
  }
  return a ^ b ^ c ^ d;
}

}  // namespace

double MeasureReadBandwidthGBs(int n_threads, ThreadPool& pool) {
  n_threads = std::clamp(n_threads, 1, pool.size());
  const size_t words = kBytes / 8;
  // Huge pages where the kernel gives them (as the runtime's weights get, GgufLoad::kMemory), so
  // that the bound is the memory's and not the TLB's. kBytes is a multiple of 2 MiB; the mapping
  // gets 2 MiB more so that its start can be aligned.
  constexpr size_t kHuge = size_t{2} << 20;
  void* map = mmap(nullptr, kBytes + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) return 0.0;
  struct Unmap {
    void* p;
    ~Unmap() { munmap(p, kBytes + kHuge); }
  } unmap{map};
  auto* aligned = reinterpret_cast<uint64_t*>((reinterpret_cast<uintptr_t>(map) + kHuge - 1) & ~(uintptr_t{kHuge} - 1));
  (void)madvise(aligned, kBytes, MADV_HUGEPAGE);
  struct {
    uint64_t* p;
    uint64_t* get() const { return p; }
  } buf{aligned};
  // Each worker first writes the slice it will read (first touch places pages near it).
  pool.Run([&](int ith, int) {
    if (ith >= n_threads) return;
    const size_t lo = words * ith / n_threads, hi = words * (ith + 1) / n_threads;
    std::memset(buf.get() + lo, ith + 1, (hi - lo) * 8);
  });
  std::vector<uint64_t> sink(pool.size() * 8, 0);
  double best = 0.0;
  for (int pass = 0; pass < kPasses; ++pass) {
    const auto start = std::chrono::steady_clock::now();
    pool.Run([&](int ith, int) {
      if (ith >= n_threads) return;
      const size_t lo = words * ith / n_threads, hi = words * (ith + 1) / n_threads;
      sink[ith * 8] += ReadSlice(buf.get() + lo, hi - lo);
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, static_cast<double>(kBytes) / s / 1e9);
  }
  volatile uint64_t keep = 0;
  for (uint64_t v : sink) keep = keep + v;
  return best;
}

}  // namespace kinfer
