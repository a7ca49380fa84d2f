// CPU feature detection and the choice of kernel instruction set.
//
// The kernels in backend/cpu are compiled per ISA (per-file compiler flags, never -march=native)
// and chosen at run time from what the CPU reports. The active ISA is the best one the CPU
// supports, lowered by the KINFER_CPU_ISA environment variable (scalar|avx2|avx512, read once)
// or by SetCpuIsaOverride (tests). An override can only lower the ISA, never raise it past what
// the CPU supports.
//
// Thread safety: GetCpuFeatures() is computed once (thread-safe static) and read-only after.
// ActiveIsa() reads an atomic; SetCpuIsaOverride must not race with running kernels (tests call
// it between MatMul calls).
#pragma once

namespace kinfer {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512vnni = false;
  bool avx512bf16 = false;
  bool avxvnni = false;
};

// The features of the CPU this process runs on (cpuid + OS support for the register state).
const CpuFeatures& GetCpuFeatures();

// Kernel instruction sets, ordered: a higher value uses a superset of a lower one's features.
//   kAvx2:   AVX2 + FMA + F16C
//   kAvx512: kAvx2 + AVX-512 F/BW/VL/VNNI
enum class CpuIsa { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

// The best ISA this CPU supports (ignores overrides).
CpuIsa BestSupportedIsa();
// The ISA the kernels dispatch to now.
CpuIsa ActiveIsa();
// "avx512", "avx2" or "scalar" for ActiveIsa().
const char* ActiveIsaName();
const char* CpuIsaName(CpuIsa isa);
// Forces the kernels down to `isa` (clamped to BestSupportedIsa()); returns the ISA now active.
// Passing BestSupportedIsa() removes the override (the environment variable is not re-read).
CpuIsa SetCpuIsaOverride(CpuIsa isa);

}  // namespace kinfer
