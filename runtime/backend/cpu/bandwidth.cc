#include "runtime/backend/cpu/bandwidth.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "common/huge_pages.h"

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
  // that the bound is the memory's and not the TLB's.
  StatusOr<HugePageMemory> mem = HugePageMemory::Map(kBytes);
  if (!mem.ok()) return 0.0;
  uint64_t* const buf = reinterpret_cast<uint64_t*>(mem->data());
  // Each worker first writes the slice it will read (first touch places pages near it).
  pool.Run([&](int ith, int) {
    if (ith >= n_threads) return;
    const size_t lo = words * ith / n_threads, hi = words * (ith + 1) / n_threads;
    std::memset(buf + lo, ith + 1, (hi - lo) * 8);
  });
  std::vector<uint64_t> sink(pool.size() * 8, 0);
  double best = 0.0;
  for (int pass = 0; pass < kPasses; ++pass) {
    const auto start = std::chrono::steady_clock::now();
    pool.Run([&](int ith, int) {
      if (ith >= n_threads) return;
      const size_t lo = words * ith / n_threads, hi = words * (ith + 1) / n_threads;
      sink[ith * 8] += ReadSlice(buf + lo, hi - lo);
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, static_cast<double>(kBytes) / s / 1e9);
  }
  volatile uint64_t keep = 0;
  for (uint64_t v : sink) keep = keep + v;
  return best;
}

}  // namespace kinfer
