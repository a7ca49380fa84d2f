// CUDA emulation on the CPU: the subset of the CUDA runtime, device built-ins, WMMA and cuBLAS that
// the CUDA backend uses, so that its kernels and host code run (slowly, exactly) on a machine
// without a GPU. It checks the logic a GPU run would also check (indexing, barriers, warp
// collectives, launch configurations, graph capture, memory plans), not the hardware's speed.
//
// The model (docs/cuda.md, "CUDA emulation"):
//   * One device, one OS thread runs all device work, each stream's in its order, at enqueue
//     time (a stream that is capturing records instead; a graph launch replays the records), or
//     as late as the host can tell (deferred streams, the default): when something waits for it
//     (a stream or event synchronization, a synchronous copy or memset, cudaFree,
//     cudaDeviceSynchronize). A stream runs another stream's work only where it waits for it
//     (cudaStreamWaitEvent; the legacy stream and blocking streams wait for each other), so a
//     missing wait between streams, like a host buffer rewritten before the copy that reads it
//     has run, or read before the copy that fills it, shows as a wrong result, as it can on a
//     GPU. KINFER_CUDA_EMU_DEFER=0 (or SetDeferredStreams(false)) runs work at enqueue time.
//   * A kernel's blocks run one after another; a block's threads are fibers, switched only at
//     __syncthreads, warp shuffles, __syncwarp and WMMA calls. After each barrier the waiting
//     threads resume in alternating (forward, then reverse) order, so that a missing barrier
//     shows as a wrong result rather than passing by luck.
//   * Device memory is host memory with poisoned contents (0xff bytes: NaN floats) and red zones
//     checked after every kernel; kernel pointer arguments must point into device or pinned
//     memory. A broken rule (a divergent barrier, a shuffle reading an exited lane, a red zone
//     written, a bad pointer) prints one line naming the kernel and makes the context's sticky
//     error cudaErrorLaunchFailure, as a faulting kernel does on a GPU.
//
// Kernel sources (.cu) are compiled as C++ after scripts/cuda_emu_rewrite.py has turned
// `k<<<grid, block, smem, stream>>>(args)` into `::kinfer_cudaemu::Launch("k", k, grid, ...)(args)`
// and `extern __shared__ T s[];` into a pointer to the block's dynamic shared memory.
//
// Environment: KINFER_CUDA_EMU_MEMORY_MIB (device memory, default 8192), KINFER_CUDA_EMU_DEVICES
// (0 makes cudaGetDeviceCount fail as on a machine without a device; default 1),
// KINFER_CUDA_EMU_DEFER (0: work runs at enqueue time; default 1, deferred streams).
#pragma once

#include <math.h>

#include <cfloat>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

// ---- Keywords ------------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __shared__ static thread_local
#define __constant__ static
#define __align__(n) __attribute__((aligned(n)))

// ---- Vector types ----------------------------------------------------------------------------
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};
struct uint3 {
  unsigned x, y, z;
};
struct __align__(8) float2 { float x, y; };
struct __align__(16) float4 { float x, y, z, w; };
struct __align__(8) int2 { int x, y; };
struct __align__(16) int4 { int x, y, z, w; };
struct __align__(16) uint4 { unsigned x, y, z, w; };
inline float2 make_float2(float x, float y) { return {x, y}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }

// ---- Runtime API types -----------------------------------------------------------------------
enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorInvalidDeviceFunction = 98,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorIllegalAddress = 700,
  cudaErrorLaunchOutOfResources = 701,
  cudaErrorLaunchFailure = 719,
  cudaErrorNotSupported = 801,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
  cudaErrorStreamCaptureWrongThread = 908,
};
typedef cudaError_t cudaError;

struct CUstream_st;
typedef CUstream_st* cudaStream_t;
struct CUgraph_st;
typedef CUgraph_st* cudaGraph_t;
struct CUgraphExec_st;
typedef CUgraphExec_st* cudaGraphExec_t;
struct CUgraphNode_st;
typedef CUgraphNode_st* cudaGraphNode_t;
struct CUevent_st;
typedef CUevent_st* cudaEvent_t;
enum cudaGraphNodeType {
  cudaGraphNodeTypeKernel = 0x00,
  cudaGraphNodeTypeMemcpy = 0x01,
  cudaGraphNodeTypeMemset = 0x02,
};
// Edge annotations (programmatic dependent launch). The emulator keeps them and checks the
// driver's rules for them; its graphs still run node after node.
enum cudaGraphDependencyType {
  cudaGraphDependencyTypeDefault = 0,
  cudaGraphDependencyTypeProgrammatic = 1,
};
#define cudaGraphKernelNodePortDefault 0
#define cudaGraphKernelNodePortProgrammatic 1
#define cudaGraphKernelNodePortLaunchCompletion 2
struct cudaGraphEdgeData {
  unsigned char from_port;
  unsigned char to_port;
  unsigned char type;
  unsigned char reserved[5];
};

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};
enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2,
};
enum cudaDeviceAttr {
  cudaDevAttrMaxThreadsPerBlock = 1,
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrMemoryClockRate = 36,
  cudaDevAttrGlobalMemoryBusWidth = 37,
  cudaDevAttrL2CacheSize = 38,
};
enum cudaFuncAttribute {
  cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
};
constexpr unsigned cudaStreamDefault = 0x00;
constexpr unsigned cudaStreamNonBlocking = 0x01;
constexpr unsigned cudaEventDefault = 0x00;
constexpr unsigned cudaEventDisableTiming = 0x02;

struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  size_t sharedMemPerBlock;
  int warpSize;
  int maxThreadsPerBlock;
  int maxThreadsDim[3];
  int maxGridSize[3];
  int major;
  int minor;
  int multiProcessorCount;
  int l2CacheSize;
  size_t sharedMemPerBlockOptin;
  size_t sharedMemPerMultiprocessor;
  int memoryBusWidth;
};

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorString(cudaError_t e);
const char* cudaGetErrorName(cudaError_t e);
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
cudaError_t cudaMalloc(void** p, size_t bytes);
cudaError_t cudaFree(void* p);
cudaError_t cudaMallocHost(void** p, size_t bytes);
cudaError_t cudaFreeHost(void* p);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind,
                            cudaStream_t stream = nullptr);
cudaError_t cudaMemset(void* p, int value, size_t n);
cudaError_t cudaMemsetAsync(void* p, int value, size_t n, cudaStream_t stream = nullptr);
cudaError_t cudaStreamCreate(cudaStream_t* s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
// Events mark a stream's work issued before cudaEventRecord. Recording one into a capturing
// stream, or making a capturing stream wait for one, invalidates the capture (the emulator's
// graphs have no event nodes). cudaStreamWaitEvent takes flags 0 only.
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags = 0);
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
// The nodes in capture order (the emulator's graphs are chains); nodes null: *count = their number.
cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count);
cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, cudaGraphNodeType* type);
// The edges of a captured graph (a chain: node i - 1 to node i); from and to null: *count = their
// number. Remove and add take the edges one pair at a time, as the driver does.
cudaError_t cudaGraphGetEdges(cudaGraph_t graph, cudaGraphNode_t* from, cudaGraphNode_t* to,
                              cudaGraphEdgeData* data, size_t* count);
cudaError_t cudaGraphRemoveDependencies(cudaGraph_t graph, const cudaGraphNode_t* from,
                                        const cudaGraphNode_t* to, const cudaGraphEdgeData* data,
                                        size_t n);
cudaError_t cudaGraphAddDependencies(cudaGraph_t graph, const cudaGraphNode_t* from,
                                     const cudaGraphNode_t* to, const cudaGraphEdgeData* data, size_t n);
struct cudaKernelNodeParams {
  void* func;
  dim3 gridDim;
  dim3 blockDim;
  unsigned int sharedMemBytes;
  void** kernelParams;
  void** extra;
};
// func: the kernel a kernel node runs (null for cuBLAS's emulated products).
cudaError_t cudaGraphKernelNodeGetParams(cudaGraphNode_t node, cudaKernelNodeParams* params);
// The name of a kernel the emulator has run or recorded: "kinfer_cudaemu::" and its launch
// expression (K<T, 4>, say).
cudaError_t cudaFuncGetName(const char** name, const void* func);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);

template <typename T>
cudaError_t cudaMalloc(T** p, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(p), bytes);
}
template <typename T>
cudaError_t cudaMallocHost(T** p, size_t bytes) {
  return cudaMallocHost(reinterpret_cast<void**>(p), bytes);
}

namespace kinfer_cudaemu {

// ---- The executing thread and block (device built-ins) --------------------------------------
struct ThreadState;
extern thread_local ThreadState* tl_thread;
extern thread_local uint3 tl_block_idx;
extern thread_local dim3 tl_block_dim;
extern thread_local dim3 tl_grid_dim;
const uint3& ThreadIdx();

void SyncThreads();
void WarpSync(unsigned mask);
// Publishes this lane's 8 bytes for the warp's next shuffle and returns lane `src`'s.
uint64_t Shuffle(unsigned mask, uint64_t bits, int kind, int arg, int width);  // kind: ShuffleKind
// A warp-wide reduction: publishes this lane's 8 bytes and returns reduce(all 32 lanes' bytes),
// computed once per warp (by the first lane to run on) with one switch of each lane instead of
// one per shuffle. Full warps only; the rules of a shuffle hold (each lane must take part and not
// have exited). `reduce` must give every lane's result (the same for all).
uint64_t WarpReduce(unsigned mask, uint64_t bits, uint64_t (*reduce)(const uint64_t* all));
void* DynamicShared();
// A broken rule inside a kernel: reported once and made the context's sticky error.
[[noreturn]] void KernelFault(const std::string& what);

// Deferred streams (see the model above): on (the default), work waits until the host waits for
// it; off, it runs at enqueue time. Turning them off runs what is pending first. Returns the
// setting before.
bool SetDeferredStreams(bool on);

// Tests: the context fails as a GPU does on an illegal address or an Xid: `what` is reported and
// cudaErrorLaunchFailure becomes the sticky error every later call returns (until the process
// ends; ClearStickyFaultForTests() puts it back for the next test).
void InjectStickyFault(const std::string& what);
void ClearStickyFaultForTests();

// ---- Launches -------------------------------------------------------------------------------
using KernelBody = std::function<void()>;
struct LaunchConfig {
  dim3 grid, block;
  size_t smem = 0;
  cudaStream_t stream = nullptr;
};
// Checks the configuration (and that each pointer argument is null or device/pinned memory,
// `pointers`), then runs the kernel now or records it in the capturing stream.
void Enqueue(const char* name, const void* kernel, const LaunchConfig& cfg,
             const std::vector<const void*>& pointers, KernelBody body);
void SetFuncMaxDynamicShared(const void* kernel, int bytes);

template <typename T>
void CollectPointer(std::vector<const void*>& out, const T& v) {
  if constexpr (std::is_pointer_v<T>) out.push_back(static_cast<const void*>(v));
}

template <typename F>
struct Launcher;
template <typename... P>
struct Launcher<void (*)(P...)> {
  const char* name;
  void (*kernel)(P...);
  LaunchConfig cfg;
  template <typename... A>
  void operator()(A&&... a) const {
    static_assert(sizeof...(A) == sizeof...(P), "kernel launched with the wrong number of arguments");
    auto args = std::make_shared<std::tuple<std::decay_t<P>...>>(std::forward<A>(a)...);
    std::vector<const void*> pointers;
    std::apply([&](const auto&... v) { (CollectPointer(pointers, v), ...); }, *args);
    void (*k)(P...) = kernel;
    Enqueue(name, reinterpret_cast<const void*>(k), cfg, pointers, [k, args] { std::apply(k, *args); });
  }
};
template <typename... P>
Launcher<void (*)(P...)> Launch(const char* name, void (*kernel)(P...), dim3 grid, dim3 block,
                                size_t smem = 0, cudaStream_t stream = nullptr) {
  return {name, kernel, LaunchConfig{grid, block, smem, stream}};
}

template <typename T>
T ShuffleValue(unsigned mask, T v, int kind, int arg, int width) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffle of a type over 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = Shuffle(mask, bits, kind, arg, width);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}
enum ShuffleKind { kShflIdx = 0, kShflXor = 1, kShflDown = 2, kShflUp = 3 };

// What `for (o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(mask, v, o))` returns, from one
// all-gather: the same operations on the same values in the same order. For a commutative `op`
// (an add; not fmaxf, whose choice between +0 and -0 may follow the operand order) every lane
// ends with the same value, the pairs combined level by level as here.
// `Op`: a lambda without captures.
template <typename T, typename Op>
uint64_t ButterflyOfAll(const uint64_t* all) {
  const Op op{};
  T t[32];
  for (int i = 0; i < 32; ++i) std::memcpy(&t[i], &all[i], sizeof(T));
  for (int o = 16; o > 0; o >>= 1) {
    for (int i = 0; i < o; ++i) t[i] = op(t[i], t[i + o]);
  }
  uint64_t bits = 0;
  std::memcpy(&bits, &t[0], sizeof(T));
  return bits;
}
template <typename T, typename Op>
T WarpButterflyReduce(unsigned mask, T v, Op) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "reduction of a type over 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = WarpReduce(mask, bits, &ButterflyOfAll<T, Op>);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}

}  // namespace kinfer_cudaemu

template <typename K>
cudaError_t cudaFuncSetAttribute(K kernel, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaErrorNotSupported;
  if (value < 0 || value > 232448) return cudaErrorInvalidValue;
  ::kinfer_cudaemu::SetFuncMaxDynamicShared(reinterpret_cast<const void*>(kernel), value);
  return cudaSuccess;
}

// ---- Device built-ins ------------------------------------------------------------------------
#define threadIdx (::kinfer_cudaemu::ThreadIdx())
#define blockIdx (::kinfer_cudaemu::tl_block_idx)
#define blockDim (::kinfer_cudaemu::tl_block_dim)
#define gridDim (::kinfer_cudaemu::tl_grid_dim)
constexpr int warpSize = 32;

inline void __syncthreads() { ::kinfer_cudaemu::SyncThreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { ::kinfer_cudaemu::WarpSync(mask); }
inline void __threadfence() {}
inline void __threadfence_block() {}
template <typename T>
T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  return ::kinfer_cudaemu::ShuffleValue(mask, v, ::kinfer_cudaemu::kShflIdx, src, width);
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  return ::kinfer_cudaemu::ShuffleValue(mask, v, ::kinfer_cudaemu::kShflXor, lane_mask, width);
}
template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return ::kinfer_cudaemu::ShuffleValue(mask, v, ::kinfer_cudaemu::kShflDown, static_cast<int>(delta), width);
}
template <typename T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return ::kinfer_cudaemu::ShuffleValue(mask, v, ::kinfer_cudaemu::kShflUp, static_cast<int>(delta), width);
}

// One device, run by one OS thread at a time: atomics are plain read-modify-writes.
namespace kinfer_cudaemu {
template <typename T, typename F>
T AtomicRmw(T* p, F next) {
  const T old = *p;
  *p = next(old);
  return old;
}
}  // namespace kinfer_cudaemu
template <typename T>
T atomicAdd(T* p, T v) { return ::kinfer_cudaemu::AtomicRmw(p, [v](T o) { return o + v; }); }
template <typename T>
T atomicSub(T* p, T v) { return ::kinfer_cudaemu::AtomicRmw(p, [v](T o) { return o - v; }); }
template <typename T>
T atomicMin(T* p, T v) { return ::kinfer_cudaemu::AtomicRmw(p, [v](T o) { return v < o ? v : o; }); }
template <typename T>
T atomicMax(T* p, T v) { return ::kinfer_cudaemu::AtomicRmw(p, [v](T o) { return v > o ? v : o; }); }
template <typename T>
T atomicExch(T* p, T v) { return ::kinfer_cudaemu::AtomicRmw(p, [v](T) { return v; }); }
template <typename T>
T atomicCAS(T* p, T compare, T v) {
  return ::kinfer_cudaemu::AtomicRmw(p, [compare, v](T o) { return o == compare ? v : o; });
}
template <typename T>
T __ldcg(const T* p) { return *p; }
template <typename T>
T __ldg(const T* p) { return *p; }

// Emulated targets are compiled with -ffp-contract=off: a * b + c stays two roundings, as the
// _rn intrinsics promise.
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
inline int __dp4a(int a, int b, int c) {
  for (int i = 0; i < 4; ++i) {
    c += static_cast<int>(static_cast<int8_t>(a >> (8 * i))) * static_cast<int>(static_cast<int8_t>(b >> (8 * i)));
  }
  return c;
}
inline unsigned __vsub4(unsigned a, unsigned b) {
  unsigned r = 0;
  for (int i = 0; i < 4; ++i) r |= ((((a >> (8 * i)) & 0xffu) - ((b >> (8 * i)) & 0xffu)) & 0xffu) << (8 * i);
  return r;
}
inline int __vsub4(int a, int b) {
  return static_cast<int>(__vsub4(static_cast<unsigned>(a), static_cast<unsigned>(b)));
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline int __ffs(int x) { return __builtin_ffs(x); }
// CUDA's global min/max overloads for device code.
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline int64_t min(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t max(int64_t a, int64_t b) { return a > b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
