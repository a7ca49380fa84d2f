#include "runtime/backend/cpu/kernels.h"
namespace kinfer::cpu_internal {
void RegisterAvx512Kernels(KernelTable* t) {}
}  // namespace kinfer::cpu_internal
