#include "runtime/backend/cpu/kernels.h"
namespace kinfer::cpu_internal {
void RegisterAvx2Kernels(KernelTable* t) {}
}  // namespace kinfer::cpu_internal
