// CUDA emulation internals shared by the kernel runner (emu_kernel.cc), the runtime API
// (emu_runtime.cc) and cuBLAS (emu_cublas.cc). Everything here runs under the device lock.
#pragma once

#include <functional>
#include <mutex>
#include <string>

#include "runtime/backend/cuda/emu/cuda_emu.h"

namespace kinfer_cudaemu {

// Runs every block of a kernel (emu_kernel.cc). Returns false, with `fault` set, when a thread
// broke a rule (divergent barrier, shuffle of an exited lane, ...); the kernel stops there.
bool RunKernel(const LaunchConfig& cfg, const KernelBody& body, std::string* fault);

// The runtime's side (emu_runtime.cc): enqueue `op` on `stream` (run now, or record while the
// stream captures), and turn a kernel's broken rule into the sticky error.
// kind: what a captured graph lists the work as (cudaGraphNodeGetType).
// func: a kernel node's kernel (cudaGraphKernelNodeGetParams).
cudaError_t StreamDo(cudaStream_t stream, std::function<void()> op,
                     cudaGraphNodeType kind = cudaGraphNodeTypeMemcpy, const void* func = nullptr);
void Fault(const std::string& kernel, const std::string& what);
// True when [p, p + n) lies inside one device allocation.
bool IsDeviceRange(const void* p, size_t n);
// The device lock (recursive), for entry points outside emu_runtime.cc.
std::recursive_mutex& DeviceMutex();
// The context's sticky error (cudaSuccess while no kernel has faulted).
cudaError_t StickyError();

}  // namespace kinfer_cudaemu
