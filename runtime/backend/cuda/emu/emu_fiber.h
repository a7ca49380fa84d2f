// CUDA emulation: fibers (one per emulated GPU thread). A fiber is a stack and a saved stack
// pointer; SwitchFiber saves the callee-saved registers of the running code on its stack and
// resumes another. x86-64 uses a few instructions of assembly (a switch costs nanoseconds, which
// matters: a warp reduction switches every lane five times); other targets use ucontext.
#pragma once

#include <cstddef>

namespace kinfer_cudaemu {

struct FiberContext {
  void* sp = nullptr;
  void* uctx = nullptr;  // non-x86-64: the ucontext_t
};

// Prepares `ctx` so that the first SwitchFiber into it runs entry(arg) on [stack, stack + size).
// entry must never return (it switches away for the last time instead).
void MakeFiber(FiberContext* ctx, void* stack, size_t size, void (*entry)(void*), void* arg);
// Saves the running context into `from` and resumes `to`.
#if defined(__x86_64__)
}  // namespace kinfer_cudaemu
extern "C" void kinfer_cudaemu_switch(void** save_sp, void* new_sp);  // emu_fiber.cc
namespace kinfer_cudaemu {
// Inline: one frame fewer on every fiber's stack at each switch.
inline void SwitchFiber(FiberContext* from, FiberContext* to) { kinfer_cudaemu_switch(&from->sp, to->sp); }
#else
void SwitchFiber(FiberContext* from, FiberContext* to);
#endif

}  // namespace kinfer_cudaemu
