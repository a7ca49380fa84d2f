// CUDA emulation: the fiber switch (emu_fiber.h).
#include "runtime/backend/cuda/emu/emu_fiber.h"

#include <cstdint>
#include <cstdlib>

#if defined(__x86_64__)

extern "C" void kinfer_cudaemu_trampoline();

// Callee-saved registers (System V): rbx, rbp, r12-r15. MXCSR and the x87 control word are not
// switched: no emulated thread changes them. The 8-byte slot below them keeps the layout
// MakeFiber writes.
asm(R"x(
  .text
  .globl kinfer_cudaemu_switch
  .hidden kinfer_cudaemu_switch
  .type kinfer_cudaemu_switch, @function
kinfer_cudaemu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size kinfer_cudaemu_switch, .-kinfer_cudaemu_switch

  .globl kinfer_cudaemu_trampoline
  .hidden kinfer_cudaemu_trampoline
  .type kinfer_cudaemu_trampoline, @function
kinfer_cudaemu_trampoline:
  movq %r12, %rdi
  callq *%r13
  ud2
  .size kinfer_cudaemu_trampoline, .-kinfer_cudaemu_trampoline
)x");

namespace kinfer_cudaemu {

void MakeFiber(FiberContext* ctx, void* stack, size_t size, void (*entry)(void*), void* arg) {
  uintptr_t top = (reinterpret_cast<uintptr_t>(stack) + size) & ~static_cast<uintptr_t>(15);
  // After the switch pops 8 + 48 bytes and returns (8), rsp = top - 16: 16-byte aligned at the
  // trampoline's call, as the ABI wants.
  uint64_t* s = reinterpret_cast<uint64_t*>(top - 64 - 16);
  s[0] = 0;                                        // the unused slot
  s[1] = 0;                                        // r15
  s[2] = 0;                                        // r14
  s[3] = reinterpret_cast<uint64_t>(entry);        // r13
  s[4] = reinterpret_cast<uint64_t>(arg);          // r12
  s[5] = 0;                                        // rbx
  s[6] = 0;                                        // rbp
  s[7] = reinterpret_cast<uint64_t>(&kinfer_cudaemu_trampoline);  // return address
  ctx->sp = s;
}

}  // namespace kinfer_cudaemu

#else  // ucontext

#include <ucontext.h>

namespace kinfer_cudaemu {
namespace {
struct Start {
  void (*entry)(void*);
  void* arg;
};
void Bounce(unsigned hi, unsigned lo) {
  Start* s = reinterpret_cast<Start*>((static_cast<uintptr_t>(hi) << 32) | lo);
  s->entry(s->arg);
}
ucontext_t* Ctx(FiberContext* c) {
  if (!c->uctx) c->uctx = new ucontext_t();
  return static_cast<ucontext_t*>(c->uctx);
}
}  // namespace

void MakeFiber(FiberContext* ctx, void* stack, size_t size, void (*entry)(void*), void* arg) {
  ucontext_t* u = Ctx(ctx);
  getcontext(u);
  u->uc_stack.ss_sp = stack;
  u->uc_stack.ss_size = size;
  u->uc_link = nullptr;
  // The start record lives at the bottom of the fiber's own stack.
  Start* s = reinterpret_cast<Start*>(stack);
  s->entry = entry;
  s->arg = arg;
  u->uc_stack.ss_sp = static_cast<char*>(stack) + 64;
  u->uc_stack.ss_size = size - 64;
  const uintptr_t p = reinterpret_cast<uintptr_t>(s);
  makecontext(u, reinterpret_cast<void (*)()>(&Bounce), 2, static_cast<unsigned>(p >> 32),
              static_cast<unsigned>(p & 0xffffffffu));
}

void SwitchFiber(FiberContext* from, FiberContext* to) { swapcontext(Ctx(from), Ctx(to)); }

}  // namespace kinfer_cudaemu

#endif
