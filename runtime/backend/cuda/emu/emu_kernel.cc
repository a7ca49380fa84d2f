// CUDA emulation: running a kernel. Each block's threads are fibers on one OS thread; a thread
// runs until it reaches a barrier (__syncthreads), a warp-level sync (shuffle, __syncwarp, WMMA)
// or its end. A barrier releases when every live thread of its scope waits on it; released
// threads resume forward after even releases and in reverse after odd ones.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "runtime/backend/cuda/emu/emu_fiber.h"
#include "runtime/backend/cuda/emu/emu_internal.h"

namespace kinfer_cudaemu {

enum class ThreadRun { kRunnable, kWaitBlock, kWaitWarp, kDone };

struct ThreadState {
  uint3 idx{0, 0, 0};
  int linear = 0;
  int lane = 0;
  int warp = 0;
  ThreadRun run = ThreadRun::kRunnable;
  uint32_t shuffles = 0;  // shuffles this thread has published
  FiberContext ctx;
};

namespace {

constexpr size_t kStackBytes = 64 * 1024;  // usable, below each stack's guard page
constexpr int kMaxThreads = 1024;

struct WarpState {
  int first = 0;  // linear index of lane 0
  int lanes = 0;  // threads in this warp (32 but for a partial last warp)
  int live = 0;
  int waiting = 0;
  uint64_t slot[2][32] = {};
  // WarpReduce's result for the collective numbered k (each lane counts its shuffles), kept in
  // [k & 1] with reduced_k = k + 1 (0: none yet in this block).
  uint64_t reduced[2] = {};
  uint32_t reduced_k[2] = {};
};

struct BlockRun {
  std::vector<ThreadState> threads;
  std::vector<WarpState> warps;
  int n = 0;  // threads in a block
  int live = 0;
  int waiting = 0;
  unsigned releases = 0;
  std::vector<int> runq;
  size_t head = 0;
  FiberContext scheduler;  // the scheduler fiber (SchedulerMain), once the block has fibers
  FiberContext launcher;   // RunKernel's stack, parked while the scheduler finishes the block
  const KernelBody* body = nullptr;
  unsigned char* dynamic_shared = nullptr;
  // Threads run as plain calls, one after another, until one reaches a sync point: kernels that
  // never sync (most element-wise ones) need no fiber at all. That thread (whose frames stay on
  // RunKernel's stack) then turns the block into fibers: the threads after it start as fibers
  // and a scheduler fiber takes over.
  bool direct = true;
  int next_direct = 0;
  int direct_thread = -1;
  bool direct_thread_done = false;
  bool abandon = false;  // a fault: the direct thread unwinds (KernelAbandoned) when resumed
  bool faulted = false;
  std::string fault;
};

struct KernelAbandoned {};

thread_local BlockRun* tl_run = nullptr;

// Fiber stacks for up to kMaxThreads threads, each over a guard page; mapped once per OS thread.
// Stacks lie a guard page + 64 KiB apart, and each top is moved down by a further (i mod 64) cache
// lines: with tops 64 KiB apart, every fiber's innermost frames (which each switch touches) fell in
// the same L1 and L2 sets, and a warp's 32 fibers evicted one another at every shuffle.
struct StackPool {
  unsigned char* base = nullptr;
  size_t page = 4096;
  size_t stride = 0;
  StackPool() {
    page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    stride = page + (kStackBytes + page - 1) / page * page;
    const size_t bytes = stride * (kMaxThreads + 1);  // + the scheduler's
    void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
      std::fprintf(stderr, "cuda-emu: cannot map %zu bytes of fiber stacks\n", bytes);
      std::abort();
    }
    base = static_cast<unsigned char*>(m);
    for (int i = 0; i <= kMaxThreads; ++i) mprotect(base + i * stride, page, PROT_NONE);
  }
  ~StackPool() { munmap(base, stride * (kMaxThreads + 1)); }
  void* Stack(int i) const { return base + i * stride + page; }
  size_t Size(int i) const { return stride - page - static_cast<size_t>(i % 64) * 64; }
};

StackPool& Stacks() {
  thread_local StackPool pool;
  return pool;
}

// Makes the threads [first, last) that wait in state `from` runnable, forward after even
// releases and in reverse after odd ones; no allocation (the run queue keeps its capacity).
void Release(BlockRun& r, int first, int last, ThreadRun from) {
  if (r.head == r.runq.size()) {
    r.runq.clear();
    r.head = 0;
  }
  const bool reverse = (r.releases++ & 1u) != 0;
  for (int k = 0; k < last - first; ++k) {
    const int i = reverse ? last - 1 - k : first + k;
    ThreadState& t = r.threads[i];
    if (t.run == from) {
      t.run = ThreadRun::kRunnable;
      r.runq.push_back(i);
    }
  }
}

void ReleaseBlockIfAllWait(BlockRun& r) {
  if (r.waiting == 0 || r.waiting != r.live) return;
  r.waiting = 0;
  Release(r, 0, r.n, ThreadRun::kWaitBlock);
}

void ReleaseWarpIfAllWait(BlockRun& r, WarpState& w) {
  if (w.waiting == 0 || w.waiting != w.live) return;
  w.waiting = 0;
  Release(r, w.first, w.first + w.lanes, ThreadRun::kWaitWarp);
}

ThreadState& Self(const char* what) {
  if (!tl_thread || !tl_run) {
    std::fprintf(stderr, "cuda-emu: %s called outside a kernel\n", what);
    std::abort();
  }
  return *tl_thread;
}

// Parks `t` (waiting at a sync point, or faulted) and runs the next runnable thread. That thread
// is switched to directly, not through the scheduler fiber: it waits at the same sync point as a
// rule (a warp's lanes at the same shuffle), so both sides of the switch return through the same
// frames and the CPU predicts the returns. Through the scheduler every return mispredicted, which
// made a switch cost ~30 ns. The scheduler runs only when no thread can, or on a fault.
[[gnu::always_inline]] inline void Park(ThreadState& t) {
  BlockRun& r = *tl_run;
  if (!r.faulted && r.head < r.runq.size()) {
    ThreadState& next = r.threads[r.runq[r.head++]];
    tl_thread = &next;
    if (&next != &t) SwitchFiber(&t.ctx, &next.ctx);  // else t was released and runs on
  } else {
    SwitchFiber(&t.ctx, &r.scheduler);
  }
  if (r.abandon) throw KernelAbandoned{};  // only the direct thread is ever resumed to unwind
}

void SchedulerMain(void* p);
void ThreadMain(void* p);

// The first sync point of a block in direct mode: the threads not yet started become fibers and
// a scheduler fiber starts; the caller then parks into it.
void ConvertToFibers(BlockRun& r, ThreadState& t) {
  r.direct = false;
  r.direct_thread = t.linear;
  StackPool& stacks = Stacks();
  for (int i = r.next_direct; i < r.n; ++i) {
    MakeFiber(&r.threads[i].ctx, stacks.Stack(i), stacks.Size(i), &ThreadMain, &r.threads[i]);
    r.runq.push_back(i);
  }
  MakeFiber(&r.scheduler, stacks.Stack(kMaxThreads), stacks.Size(kMaxThreads), &SchedulerMain, &r);
}

void ThreadDone(BlockRun& r, ThreadState& t) {
  t.run = ThreadRun::kDone;
  --r.live;
  WarpState& w = r.warps[t.warp];
  --w.live;
  ReleaseWarpIfAllWait(r, w);
  ReleaseBlockIfAllWait(r);
}

void ThreadMain(void* p) {
  ThreadState& t = *static_cast<ThreadState*>(p);
  BlockRun& r = *tl_run;
  (*r.body)();
  ThreadDone(r, t);
  SwitchFiber(&t.ctx, &r.scheduler);
  std::abort();  // a finished thread is never resumed
}

std::string Where(const ThreadState& t) {
  return "block (" + std::to_string(tl_block_idx.x) + "," + std::to_string(tl_block_idx.y) + "," +
         std::to_string(tl_block_idx.z) + ") thread (" + std::to_string(t.idx.x) + "," +
         std::to_string(t.idx.y) + "," + std::to_string(t.idx.z) + ")";
}

// Why no thread can run although some have not finished.
std::string Deadlock(const BlockRun& r) {
  int at_block = 0, at_warp = 0;
  for (const ThreadState& t : r.threads) {
    at_block += t.run == ThreadRun::kWaitBlock;
    at_warp += t.run == ThreadRun::kWaitWarp;
  }
  return "divergent barriers: " + std::to_string(at_block) + " thread(s) wait at __syncthreads and " +
         std::to_string(at_warp) + " at a warp-level sync (shuffle, __syncwarp, WMMA) that their warp "
         "never completes";
}

}  // namespace

thread_local ThreadState* tl_thread = nullptr;
thread_local uint3 tl_block_idx{0, 0, 0};
thread_local dim3 tl_block_dim;
thread_local dim3 tl_grid_dim;

const uint3& ThreadIdx() { return Self("threadIdx").idx; }
void* DynamicShared() {
  Self("extern __shared__");
  return tl_run->dynamic_shared;
}

void KernelFault(const std::string& what) {
  ThreadState& t = Self("a fault");
  BlockRun& r = *tl_run;
  if (!r.faulted) {
    r.faulted = true;
    r.fault = Where(t) + ": " + what;
  }
  if (r.direct || t.linear == r.direct_thread) {
    // On RunKernel's stack: unwind to it (in fiber mode, once the scheduler has stopped).
    if (!r.direct) Park(t);
    throw KernelAbandoned{};
  }
  Park(t);
  std::abort();  // the scheduler abandons a faulted block
}

void SyncThreads() {
  ThreadState& t = Self("__syncthreads");
  BlockRun& r = *tl_run;
  if (r.direct) ConvertToFibers(r, t);
  t.run = ThreadRun::kWaitBlock;
  ++r.waiting;
  ReleaseBlockIfAllWait(r);
  Park(t);
}

namespace {

// `t` arrives at a warp-level sync of its warp `w` and returns once every live lane has.
[[gnu::always_inline]] inline void WarpArrive(ThreadState& t, BlockRun& r, WarpState& w, unsigned mask) {
  const unsigned all = w.lanes == 32 ? 0xffffffffu : ((1u << w.lanes) - 1u);
  if (mask != 0xffffffffu && mask != all) {
    KernelFault("a warp-level sync with a partial mask (" + std::to_string(mask) + "), which the emulator does not model");
  }
  if (r.direct) ConvertToFibers(r, t);
  t.run = ThreadRun::kWaitWarp;
  ++w.waiting;
  ReleaseWarpIfAllWait(r, w);
  Park(t);
}

// A fault unless lane `lane` of `w` published its value for the warp's collective number k.
void CheckLaneTookPart(const BlockRun& r, const WarpState& w, int lane, uint32_t k, const char* what) {
  const ThreadState& s = r.threads[w.first + lane];
  if (s.shuffles <= k) {
    KernelFault(std::string(what) + " reads lane " + std::to_string(lane) +
                (s.run == ThreadRun::kDone ? ", which has exited" : ", which did not take part"));
  }
}

}  // namespace

void WarpSync(unsigned mask) {
  ThreadState& t = Self("__syncwarp");
  BlockRun& r = *tl_run;
  WarpArrive(t, r, r.warps[t.warp], mask);
}

uint64_t Shuffle(unsigned mask, uint64_t bits, int kind, int arg, int width) {
  ThreadState& t = Self("a shuffle");
  BlockRun& r = *tl_run;
  WarpState& w = r.warps[t.warp];
  if (width <= 0 || width > 32 || (width & (width - 1)) != 0) KernelFault("shuffle width " + std::to_string(width));
  const uint32_t k = t.shuffles++;
  w.slot[k & 1u][t.lane] = bits;
  WarpArrive(t, r, w, mask);
  const int seg = t.lane & ~(width - 1), in = t.lane - seg;
  int src = t.lane;
  switch (kind) {
    case kShflIdx: src = seg + (arg & (width - 1)); break;
    case kShflXor: src = (t.lane ^ arg) < seg + width ? (t.lane ^ arg) : t.lane; break;
    case kShflDown: src = in + arg < width ? t.lane + arg : t.lane; break;
    case kShflUp: src = in - arg >= 0 ? t.lane - arg : t.lane; break;
    default: KernelFault("unknown shuffle kind");
  }
  if (src == t.lane) return bits;
  if (src >= w.lanes) KernelFault("a shuffle reads lane " + std::to_string(src) + " of a warp of " + std::to_string(w.lanes));
  CheckLaneTookPart(r, w, src, k, "a shuffle");
  return w.slot[k & 1u][src];
}

uint64_t WarpReduce(unsigned mask, uint64_t bits, uint64_t (*reduce)(const uint64_t* all)) {
  ThreadState& t = Self("a warp reduction");
  BlockRun& r = *tl_run;
  WarpState& w = r.warps[t.warp];
  if (w.lanes != 32) KernelFault("a warp reduction in a partial warp of " + std::to_string(w.lanes) + " lanes");
  const uint32_t k = t.shuffles++;
  w.slot[k & 1u][t.lane] = bits;
  WarpArrive(t, r, w, mask);
  if (w.reduced_k[k & 1u] != k + 1) {  // the first lane of the warp to run on
    for (int i = 0; i < 32; ++i) CheckLaneTookPart(r, w, i, k, "a warp reduction");
    w.reduced[k & 1u] = reduce(w.slot[k & 1u]);
    w.reduced_k[k & 1u] = k + 1;
  }
  return w.reduced[k & 1u];
}

namespace {

// The scheduler fiber: runs the block's fibers until every thread is done or a rule breaks, then
// returns to RunKernel's stack (unwinding the direct thread if it has not finished).
void SchedulerMain(void* p) {
  BlockRun& r = *static_cast<BlockRun*>(p);
  while (!r.faulted) {
    if (r.head == r.runq.size()) {
      if (r.live > 0) {
        r.faulted = true;
        r.fault = "block (" + std::to_string(tl_block_idx.x) + "," + std::to_string(tl_block_idx.y) + "," +
                  std::to_string(tl_block_idx.z) + "): " + Deadlock(r);
      }
      break;
    }
    ThreadState& t = r.threads[r.runq[r.head++]];
    tl_thread = &t;
    SwitchFiber(&r.scheduler, &t.ctx);
  }
  if (r.threads[r.direct_thread].run != ThreadRun::kDone) {
    r.abandon = true;
    tl_thread = &r.threads[r.direct_thread];
    SwitchFiber(&r.scheduler, &r.threads[r.direct_thread].ctx);
  } else {
    SwitchFiber(&r.scheduler, &r.launcher);
  }
  std::abort();  // never resumed
}

void StartBlock(BlockRun& r, const LaunchConfig& cfg, uint3 block) {
  tl_block_idx = block;
  r.live = r.n;
  r.waiting = 0;
  r.releases = 0;
  r.runq.clear();
  r.head = 0;
  r.direct = true;
  r.next_direct = 0;
  r.direct_thread = -1;
  r.abandon = false;
  for (int i = 0; i < r.n; ++i) {
    ThreadState& t = r.threads[i];
    t.run = ThreadRun::kRunnable;
    t.shuffles = 0;
  }
  for (WarpState& w : r.warps) {
    w.live = w.lanes;
    w.waiting = 0;
    w.reduced_k[0] = w.reduced_k[1] = 0;
  }
  if (cfg.smem) std::memset(r.dynamic_shared, 0xff, cfg.smem);  // uninitialized shared memory reads as NaN
}

}  // namespace

bool RunKernel(const LaunchConfig& cfg, const KernelBody& body, std::string* fault) {
  const int n = static_cast<int>(cfg.block.x * cfg.block.y * cfg.block.z);
  std::unique_ptr<unsigned char, void (*)(void*)> smem(
      static_cast<unsigned char*>(std::aligned_alloc(256, ((cfg.smem + 255) / 256 + 1) * 256)), &std::free);
  tl_block_dim = cfg.block;
  tl_grid_dim = cfg.grid;
  BlockRun r;
  r.n = n;
  r.body = &body;
  r.dynamic_shared = smem.get();
  r.threads.resize(n);
  for (int i = 0; i < n; ++i) {
    ThreadState& t = r.threads[i];
    t.linear = i;
    t.idx = {i % cfg.block.x, (i / cfg.block.x) % cfg.block.y, i / (cfg.block.x * cfg.block.y)};
    t.lane = i % 32;
    t.warp = i / 32;
  }
  r.warps.resize((n + 31) / 32);
  for (size_t wi = 0; wi < r.warps.size(); ++wi) {
    r.warps[wi].first = static_cast<int>(wi) * 32;
    r.warps[wi].lanes = std::min(32, n - r.warps[wi].first);
  }
  BlockRun* outer = tl_run;
  tl_run = &r;
  bool ok = true;
  // A GPU promises no order among a grid's blocks (they run at once, in any order). The blocks
  // run here one at a time from the last to the first, so a kernel that counts on a lower block
  // having run (reading in one launch what another block writes) gets a wrong result here rather
  // than the right one by luck.
  const uint64_t blocks = uint64_t{cfg.grid.x} * cfg.grid.y * cfg.grid.z;
  for (uint64_t left = blocks; left > 0 && ok; --left) {
    const uint64_t b = left - 1;
    const auto bx = static_cast<unsigned>(b % cfg.grid.x);
    const auto by = static_cast<unsigned>(b / cfg.grid.x % cfg.grid.y);
    const auto bz = static_cast<unsigned>(b / (uint64_t{cfg.grid.x} * cfg.grid.y));
    StartBlock(r, cfg, uint3{bx, by, bz});
    while (r.next_direct < n) {
      ThreadState& t = r.threads[r.next_direct++];
      tl_thread = &t;
      try {
        (*r.body)();
      } catch (const KernelAbandoned&) {
        break;  // r.faulted is set
      }
      ThreadDone(r, t);
      if (!r.direct) {
        // t switched the block to fibers and is now done: the scheduler finishes the block.
        SwitchFiber(&r.launcher, &r.scheduler);
        break;
      }
    }
    tl_thread = nullptr;
    if (r.faulted) {
      *fault = r.fault;
      ok = false;
    }
  }
  tl_run = outer;
  return ok;
}

}  // namespace kinfer_cudaemu
