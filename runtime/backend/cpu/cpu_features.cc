#include "runtime/backend/cpu/cpu_features.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define KINFER_X86 1
#endif

namespace kinfer {
namespace {

#if KINFER_X86
uint64_t ReadXcr0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}
#endif

CpuFeatures Detect() {
  CpuFeatures f;
#if KINFER_X86
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = (c >> 27) & 1;
  const bool avx = (c >> 28) & 1;
  if (!osxsave || !avx) return f;
  const uint64_t xcr0 = ReadXcr0();
  const bool ymm_ok = (xcr0 & 0x6) == 0x6;            // SSE + AVX state
  const bool zmm_ok = ymm_ok && (xcr0 & 0xe0) == 0xe0;  // opmask + ZMM state
  if (!ymm_ok) return f;
  f.fma = (c >> 12) & 1;
  f.f16c = (c >> 29) & 1;
  unsigned max_leaf = __get_cpuid_max(0, nullptr);
  if (max_leaf < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  f.avx2 = (b >> 5) & 1;
  if (zmm_ok) {
    f.avx512f = (b >> 16) & 1;
    f.avx512bw = (b >> 30) & 1;
    f.avx512vl = (b >> 31) & 1;
    f.avx512vnni = (c >> 11) & 1;
  }
  __cpuid_count(7, 1, a, b, c, d);
  f.avxvnni = (a >> 4) & 1;
  if (zmm_ok) f.avx512bf16 = (a >> 5) & 1;
#endif
  return f;
}

CpuIsa ComputeBest() {
  const CpuFeatures& f = GetCpuFeatures();
  if (!(f.avx2 && f.fma && f.f16c)) return CpuIsa::kScalar;
  if (f.avx512f && f.avx512bw && f.avx512vl && f.avx512vnni) return CpuIsa::kAvx512;
  return CpuIsa::kAvx2;
}

CpuIsa FromEnv(CpuIsa best) {
  const char* env = std::getenv("KINFER_CPU_ISA");
  if (env == nullptr) return best;
  CpuIsa want = best;
  if (std::strcmp(env, "scalar") == 0) want = CpuIsa::kScalar;
  else if (std::strcmp(env, "avx2") == 0) want = CpuIsa::kAvx2;
  else if (std::strcmp(env, "avx512") == 0) want = CpuIsa::kAvx512;
  return static_cast<int>(want) < static_cast<int>(best) ? want : best;
}

std::atomic<int>& ActiveSlot() {
  static std::atomic<int> slot{static_cast<int>(FromEnv(BestSupportedIsa()))};
  return slot;
}

}  // namespace

const CpuFeatures& GetCpuFeatures() {
  static const CpuFeatures features = Detect();
  return features;
}

CpuIsa BestSupportedIsa() {
  static const CpuIsa best = ComputeBest();
  return best;
}

CpuIsa ActiveIsa() { return static_cast<CpuIsa>(ActiveSlot().load(std::memory_order_relaxed)); }

const char* CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx512: return "avx512";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kScalar: return "scalar";
  }
  return "scalar";
}

const char* ActiveIsaName() { return CpuIsaName(ActiveIsa()); }

CpuIsa SetCpuIsaOverride(CpuIsa isa) {
  const CpuIsa best = BestSupportedIsa();
  const CpuIsa now = static_cast<int>(isa) < static_cast<int>(best) ? isa : best;
  ActiveSlot().store(static_cast<int>(now), std::memory_order_relaxed);
  return now;
}

}  // namespace kinfer
