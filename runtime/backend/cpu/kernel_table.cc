// Builds one kernel table per ISA: scalar, then each higher ISA overwrites what it implements.
// A Register* function lives in a file compiled for its ISA (the compiler may use that ISA even to
// store the pointers), so it is only called when the CPU supports it; the table of an
// unsupported ISA stays a copy of the one below (never selected: ActiveIsa() is clamped).
#include "runtime/backend/cpu/cpu_features.h"
#include "runtime/backend/cpu/kernels.h"

namespace kinfer::cpu_internal {
namespace {

struct Tables {
  KernelTable t[3];
  Tables() {
    RegisterScalarKernels(&t[0]);
    t[1] = t[0];
    const int best = static_cast<int>(BestSupportedIsa());
#if defined(KINFER_CPU_HAVE_AVX2)
    if (best >= static_cast<int>(CpuIsa::kAvx2)) RegisterAvx2Kernels(&t[1]);
#endif
    t[2] = t[1];
#if defined(KINFER_CPU_HAVE_AVX512)
    if (best >= static_cast<int>(CpuIsa::kAvx512)) RegisterAvx512Kernels(&t[2]);
#endif
  }
};

const Tables& AllTables() {
  static const Tables tables;
  return tables;
}

}  // namespace

const KernelTable& KernelsFor(int isa) { return AllTables().t[isa]; }
const KernelTable& Kernels() { return AllTables().t[static_cast<int>(ActiveIsa())]; }

}  // namespace kinfer::cpu_internal
