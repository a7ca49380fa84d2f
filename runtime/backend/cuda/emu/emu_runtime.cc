// CUDA emulation: the runtime API (cuda_emu.h). One device; every call takes the device lock;
// each stream's work runs in its own order, when something waits for it (deferred streams) or at
// enqueue time, unless the stream is capturing a graph.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "runtime/backend/cuda/emu/emu_internal.h"

struct CUgraphNode_st {
  cudaGraphNodeType type = cudaGraphNodeTypeKernel;
  const void* func = nullptr;  // a kernel node's kernel (null: cuBLAS's, or not a kernel)
};
// Deferred work on a stream: a function to run, or a wait for another stream's first `pos`
// operations (cudaStreamWaitEvent, and the legacy stream's implicit synchronization).
struct EmuStreamOp {
  std::function<void()> fn;
  CUstream_st* wait = nullptr;
  uint64_t pos = 0;
};
struct CUstream_st {
  bool blocking = true;  // synchronizes with the legacy stream (not cudaStreamNonBlocking)
  bool capturing = false;
  bool capture_invalid = false;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::thread::id capture_thread;
  std::vector<std::function<void()>> ops;
  std::vector<CUgraphNode_st> kinds;  // one per op
  // Deferred streams: the operations issued on the stream (counted from 1), those run, and
  // those not run yet in order.
  uint64_t issued = 0, completed = 0;
  std::deque<EmuStreamOp> pending;
};
struct CUevent_st {
  // The stream and its work issued before the event was recorded (null: never recorded).
  CUstream_st* stream = nullptr;
  uint64_t pos = 0;
};
struct CUgraph_st {
  std::vector<std::function<void()>> ops;
  std::vector<CUgraphNode_st> nodes;  // one per op
  // The edge into node i (i >= 1) from node i - 1, and whether it is there (a removed edge must
  // be added back before the graph is instantiated).
  std::vector<cudaGraphEdgeData> edge_into;
  std::vector<bool> has_edge_into;
};
struct CUgraphExec_st {
  std::vector<std::function<void()>> ops;
};

namespace kinfer_cudaemu {
namespace {

constexpr size_t kRedZone = 64;
constexpr unsigned char kRedByte = 0xcd;
constexpr int kDefaultDynamicShared = 48 * 1024;

struct Allocation {
  size_t bytes = 0;
  bool pinned = false;
  unsigned char* raw = nullptr;  // bytes + two red zones
};

struct Device {
  std::recursive_mutex mu;
  std::map<uintptr_t, Allocation> allocations;  // by user address
  size_t used = 0;
  size_t total = 0;
  int devices = 1;
  cudaError_t sticky = cudaSuccess;
  std::unordered_map<const void*, int> max_dynamic_shared;
  std::unordered_map<const void*, std::string> func_names;  // cudaFuncGetName
  std::vector<CUstream_st*> capturing;
  CUstream_st default_stream;  // the legacy stream
  std::vector<CUstream_st*> streams;  // every live stream, the legacy one first
  bool deferred = false;
  Device() {
    streams.push_back(&default_stream);
    const char* defer = std::getenv("KINFER_CUDA_EMU_DEFER");
    deferred = defer == nullptr || std::atoi(defer) != 0;
    const char* mib = std::getenv("KINFER_CUDA_EMU_MEMORY_MIB");
    total = static_cast<size_t>(mib ? std::atoll(mib) : 8192) << 20;
    const char* n = std::getenv("KINFER_CUDA_EMU_DEVICES");
    devices = n ? std::atoi(n) : 1;
  }
};

Device& Dev() {
  static Device* d = new Device();  // never destroyed: static destructors may still free memory
  return *d;
}

thread_local cudaError_t tl_last_error = cudaSuccess;

cudaError_t Note(cudaError_t e) {
  if (e != cudaSuccess) tl_last_error = e;
  return e;
}

// The allocation holding [p, p + n), or null.
const Allocation* Find(const void* p, size_t n, uintptr_t* base_out = nullptr) {
  Device& d = Dev();
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = d.allocations.upper_bound(a);
  if (it == d.allocations.begin()) return nullptr;
  --it;
  if (a + n > it->first + it->second.bytes || a < it->first) return nullptr;
  if (base_out) *base_out = it->first;
  return &it->second;
}

bool Live(const CUstream_st* s) {
  const std::vector<CUstream_st*>& v = Dev().streams;
  return std::find(v.begin(), v.end(), s) != v.end();
}

// Runs stream s's pending work up to its operation number `pos`, in its order; a wait runs the
// other stream's work it waits for first (waits point back in time, so this ends).
void RunStream(CUstream_st* s, uint64_t pos) {
  while (s->completed < pos && !s->pending.empty()) {
    EmuStreamOp op = std::move(s->pending.front());
    s->pending.pop_front();
    ++s->completed;
    if (op.wait != nullptr) {
      if (Live(op.wait)) RunStream(op.wait, op.pos);
    } else {
      op.fn();
    }
  }
}
// Runs every stream's pending work (each stream in its order; streams by creation).
void RunAll() {
  for (size_t i = 0; i < Dev().streams.size(); ++i) RunStream(Dev().streams[i], Dev().streams[i]->issued);
}

void Push(CUstream_st* s, EmuStreamOp op) {
  ++s->issued;
  s->pending.push_back(std::move(op));
}

bool InCapture(std::thread::id self) {
  for (const CUstream_st* s : Dev().capturing) {
    if (s->mode == cudaStreamCaptureModeRelaxed) continue;
    if (s->mode == cudaStreamCaptureModeGlobal || s->capture_thread == self) return true;
  }
  return false;
}

// A call that is not allowed while a stream captures (cudaMalloc, synchronous copies, ...):
// invalidates the capture, as the driver does.
cudaError_t RefuseDuringCapture() {
  if (!InCapture(std::this_thread::get_id())) return cudaSuccess;
  for (CUstream_st* s : Dev().capturing) s->capture_invalid = true;
  return cudaErrorStreamCaptureUnsupported;
}

void CheckRedZones(const char* after) {
  Device& d = Dev();
  for (const auto& [base, a] : d.allocations) {
    const unsigned char* lo = a.raw;
    const unsigned char* hi = a.raw + kRedZone + a.bytes;
    for (size_t i = 0; i < kRedZone; ++i) {
      if (lo[i] != kRedByte || hi[i] != kRedByte) {
        const bool below = lo[i] != kRedByte;
        char line[200];
        std::snprintf(line, sizeof line, "wrote %s a %zu-byte %s allocation at %p", below ? "before" : "past the end of",
                      a.bytes, a.pinned ? "pinned" : "device", reinterpret_cast<void*>(base));
        Fault(after, line);
        std::memset(a.raw, kRedByte, kRedZone);  // report each overrun once
        std::memset(a.raw + kRedZone + a.bytes, kRedByte, kRedZone);
        return;
      }
    }
  }
}

cudaError_t Allocate(void** p, size_t bytes, bool pinned) {
  if (!p) return Note(cudaErrorInvalidValue);
  Device& d = Dev();
  std::lock_guard<std::recursive_mutex> lock(d.mu);
  if (d.sticky != cudaSuccess) return Note(d.sticky);
  if (const cudaError_t e = RefuseDuringCapture(); e != cudaSuccess) return Note(e);
  const size_t rounded = (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
  if (!pinned && d.used + rounded > d.total) return Note(cudaErrorMemoryAllocation);
  auto* raw = static_cast<unsigned char*>(std::aligned_alloc(256, rounded + 2 * 256));
  if (!raw) return Note(cudaErrorMemoryAllocation);
  // User memory starts 256 bytes in (cudaMalloc's alignment); the red zones are the 64 bytes on
  // each side of it.
  unsigned char* user = raw + 256;
  Allocation a;
  a.bytes = bytes;
  a.pinned = pinned;
  a.raw = user - kRedZone;
  std::memset(a.raw, kRedByte, kRedZone);
  std::memset(user, 0xff, bytes);  // never-written device memory reads as NaN / -1
  std::memset(user + bytes, kRedByte, kRedZone);
  d.allocations[reinterpret_cast<uintptr_t>(user)] = a;
  if (!pinned) d.used += rounded;
  *p = user;
  return cudaSuccess;
}

cudaError_t Release(void* p, bool pinned) {
  if (!p) return cudaSuccess;
  Device& d = Dev();
  std::lock_guard<std::recursive_mutex> lock(d.mu);
  if (const cudaError_t e = RefuseDuringCapture(); e != cudaSuccess) return Note(e);
  RunAll();  // cudaFree and cudaFreeHost wait for the device's work
  auto it = d.allocations.find(reinterpret_cast<uintptr_t>(p));
  if (it == d.allocations.end() || it->second.pinned != pinned) return Note(cudaErrorInvalidValue);
  CheckRedZones(pinned ? "cudaFreeHost" : "cudaFree");
  if (!pinned) d.used -= (std::max<size_t>(it->second.bytes, 1) + 255) / 256 * 256;
  std::free(it->second.raw + kRedZone - 256);
  d.allocations.erase(it);
  return d.sticky != cudaSuccess ? Note(d.sticky) : cudaSuccess;
}

CUstream_st* Stream(cudaStream_t s) { return s ? s : &Dev().default_stream; }

// Where [p, p + n) lies: device memory (wholly inside one allocation), host memory (pinned or
// not), or a device range running past its allocation (an error whatever the direction).
enum class Side { kDevice, kHost, kPastDevice };
Side SideOf(const void* p, size_t n) {
  const Allocation* a = Find(p, 0);
  if (!a || a->pinned) return Side::kHost;
  return Find(p, n) == a ? Side::kDevice : Side::kPastDevice;
}

cudaError_t CopyCheck(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  if (n == 0) return cudaSuccess;
  const Side d = SideOf(dst, n), s = SideOf(src, n);
  if (d == Side::kPastDevice || s == Side::kPastDevice) return cudaErrorInvalidValue;
  const bool dst_dev = d == Side::kDevice, src_dev = s == Side::kDevice;
  switch (kind) {
    case cudaMemcpyHostToDevice: return dst_dev && !src_dev ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyDeviceToHost: return src_dev && !dst_dev ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyDeviceToDevice: return src_dev && dst_dev ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyHostToHost: return !src_dev && !dst_dev ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyDefault: return cudaSuccess;
  }
  return cudaErrorInvalidMemcpyDirection;
}

}  // namespace

void Fault(const std::string& kernel, const std::string& what) {
  Device& d = Dev();
  std::fprintf(stderr, "cuda-emu: %s: %s\n", kernel.c_str(), what.c_str());
  if (std::getenv("KINFER_CUDA_EMU_ABORT")) std::abort();
  if (d.sticky == cudaSuccess) d.sticky = cudaErrorLaunchFailure;
}

std::recursive_mutex& DeviceMutex() { return Dev().mu; }
cudaError_t StickyError() { return Dev().sticky; }

bool IsDeviceRange(const void* p, size_t n) {
  const Allocation* a = Find(p, n);
  return a && !a->pinned;
}

cudaError_t StreamDo(cudaStream_t stream, std::function<void()> op, cudaGraphNodeType kind,
                     const void* func) {
  CUstream_st* s = Stream(stream);
  if (s->capturing) {
    s->ops.push_back(std::move(op));
    s->kinds.push_back(CUgraphNode_st{kind, func});
    return cudaSuccess;
  }
  Device& d = Dev();
  // The legacy stream waits for the work issued before on the blocking streams, and they for
  // the legacy stream's.
  if (s == &d.default_stream) {
    for (CUstream_st* o : d.streams) {
      if (o != s && o->blocking && o->completed < o->issued) Push(s, EmuStreamOp{{}, o, o->issued});
    }
  } else if (s->blocking && d.default_stream.completed < d.default_stream.issued) {
    Push(s, EmuStreamOp{{}, &d.default_stream, d.default_stream.issued});
  }
  Push(s, EmuStreamOp{std::move(op)});
  if (!d.deferred) RunAll();
  return d.sticky;
}

void InjectStickyFault(const std::string& what) {
  std::lock_guard<std::recursive_mutex> lock(Dev().mu);
  Fault("injected", what);
}

void ClearStickyFaultForTests() {
  std::lock_guard<std::recursive_mutex> lock(Dev().mu);
  Dev().sticky = cudaSuccess;
  tl_last_error = cudaSuccess;  // the calling thread's (the engine's threads have ended)
}

bool SetDeferredStreams(bool on) {
  Device& d = Dev();
  std::lock_guard<std::recursive_mutex> lock(d.mu);
  const bool before = d.deferred;
  d.deferred = on;
  if (!on) RunAll();
  return before;
}

void SetFuncMaxDynamicShared(const void* kernel, int bytes) {
  Device& d = Dev();
  std::lock_guard<std::recursive_mutex> lock(d.mu);
  d.max_dynamic_shared[kernel] = bytes;
}

void Enqueue(const char* name, const void* kernel, const LaunchConfig& cfg, const std::vector<const void*>& pointers,
             KernelBody body) {
  Device& d = Dev();
  std::lock_guard<std::recursive_mutex> lock(d.mu);
  if (d.sticky != cudaSuccess) {
    Note(d.sticky);
    return;
  }
  const uint64_t threads = static_cast<uint64_t>(cfg.block.x) * cfg.block.y * cfg.block.z;
  if (threads == 0 || threads > 1024 || cfg.block.z > 64 || cfg.grid.x == 0 || cfg.grid.y == 0 ||
      cfg.grid.z == 0 || cfg.grid.x > 2147483647u || cfg.grid.y > 65535 || cfg.grid.z > 65535) {
    Note(cudaErrorInvalidConfiguration);
    return;
  }
  auto lim = d.max_dynamic_shared.find(kernel);
  const int limit = lim == d.max_dynamic_shared.end() ? kDefaultDynamicShared : lim->second;
  if (cfg.smem > static_cast<size_t>(limit)) {
    std::fprintf(stderr, "cuda-emu: %s: %zu bytes of dynamic shared memory over its limit of %d\n", name,
                 cfg.smem, limit);
    Note(cudaErrorInvalidValue);
    return;
  }
  for (size_t i = 0; i < pointers.size(); ++i) {
    if (pointers[i] && !Find(pointers[i], 0)) {
      char line[160];
      std::snprintf(line, sizeof line, "pointer argument %zu (%p) is neither device nor pinned memory", i,
                    pointers[i]);
      Fault(name, line);
      Note(d.sticky);
      return;
    }
  }
  std::string kernel_name = name;
  d.func_names.emplace(kernel, std::string("kinfer_cudaemu::") + name);
  const cudaError_t e = StreamDo(cfg.stream, [cfg, body = std::move(body), kernel_name] {
    Device& dev = Dev();
    if (dev.sticky != cudaSuccess) return;
    std::string fault;
    if (!RunKernel(cfg, body, &fault)) Fault(kernel_name, fault);
    CheckRedZones(kernel_name.c_str());
  }, cudaGraphNodeTypeKernel, kernel);
  Note(e);
}

}  // namespace kinfer_cudaemu

using kinfer_cudaemu::Dev;
using kinfer_cudaemu::Note;

#define EMU_LOCK()                                                       \
  ::kinfer_cudaemu::Device& d = Dev();                                   \
  std::lock_guard<std::recursive_mutex> lock(d.mu);                      \
  if (d.sticky != cudaSuccess) return Note(d.sticky)

cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return Note(cudaErrorInvalidValue);
  *count = 0;
  if (Dev().devices <= 0) return Note(cudaErrorNoDevice);
  *count = Dev().devices;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  return device >= 0 && device < Dev().devices ? cudaSuccess : Note(cudaErrorInvalidDevice);
}
cudaError_t cudaGetDevice(int* device) {
  if (!device) return Note(cudaErrorInvalidValue);
  *device = 0;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (!prop) return Note(cudaErrorInvalidValue);
  if (device < 0 || device >= Dev().devices) return Note(cudaErrorInvalidDevice);
  *prop = cudaDeviceProp{};
  // An H200's limits (sm_90), so that code sized from them plans as it would there.
  std::snprintf(prop->name, sizeof prop->name, "kinfer CUDA emulator (sm_90 limits)");
  prop->totalGlobalMem = Dev().total;
  prop->sharedMemPerBlock = 48 * 1024;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 2147483647;
  prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 132;
  prop->l2CacheSize = 60 * 1024 * 1024;
  prop->sharedMemPerBlockOptin = 232448;
  prop->sharedMemPerMultiprocessor = 233472;
  prop->memoryBusWidth = 6144;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (!value) return Note(cudaErrorInvalidValue);
  if (device < 0 || device >= Dev().devices) return Note(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = 1024; return cudaSuccess;
    case cudaDevAttrMultiProcessorCount: *value = 132; return cudaSuccess;
    case cudaDevAttrMemoryClockRate: *value = 3201000; return cudaSuccess;  // kHz
    case cudaDevAttrGlobalMemoryBusWidth: *value = 6144; return cudaSuccess;
    case cudaDevAttrL2CacheSize: *value = 60 * 1024 * 1024; return cudaSuccess;
  }
  return Note(cudaErrorInvalidValue);
}
cudaError_t cudaDeviceSynchronize() {
  EMU_LOCK();
  if (const cudaError_t e = kinfer_cudaemu::RefuseDuringCapture(); e != cudaSuccess) return Note(e);
  kinfer_cudaemu::RunAll();
  return d.sticky != cudaSuccess ? Note(d.sticky) : cudaSuccess;
}
cudaError_t cudaGetLastError() {
  const cudaError_t e = Dev().sticky != cudaSuccess ? Dev().sticky : kinfer_cudaemu::tl_last_error;
  kinfer_cudaemu::tl_last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() {
  return Dev().sticky != cudaSuccess ? Dev().sticky : kinfer_cudaemu::tl_last_error;
}
const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInvalidDeviceFunction: return "cudaErrorInvalidDeviceFunction";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureWrongThread: return "cudaErrorStreamCaptureWrongThread";
  }
  return "cudaErrorUnknown";
}
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected (emulator: KINFER_CUDA_EMU_DEVICES=0)";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorLaunchFailure: return "unspecified launch failure (the emulator printed which rule broke)";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidValue: return "invalid argument";
    default: return cudaGetErrorName(e);
  }
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  EMU_LOCK();
  if (!free_bytes || !total_bytes) return Note(cudaErrorInvalidValue);
  *total_bytes = d.total;
  *free_bytes = d.total - d.used;
  return cudaSuccess;
}
cudaError_t cudaMalloc(void** p, size_t bytes) { return kinfer_cudaemu::Allocate(p, bytes, false); }
cudaError_t cudaFree(void* p) { return kinfer_cudaemu::Release(p, false); }
cudaError_t cudaMallocHost(void** p, size_t bytes) { return kinfer_cudaemu::Allocate(p, bytes, true); }
cudaError_t cudaFreeHost(void* p) { return kinfer_cudaemu::Release(p, true); }

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t stream) {
  EMU_LOCK();
  if (const cudaError_t e = kinfer_cudaemu::CopyCheck(dst, src, n, kind); e != cudaSuccess) return Note(e);
  const cudaError_t e = kinfer_cudaemu::StreamDo(stream, [dst, src, n] { std::memmove(dst, src, n); });
  // A copy from or to pageable host memory returns only once the host side is done with (the
  // driver stages it), so it is not left pending.
  if (!kinfer_cudaemu::Stream(stream)->capturing && n > 0 &&
      (!kinfer_cudaemu::Find(src, n) || !kinfer_cudaemu::Find(dst, n))) {
    kinfer_cudaemu::RunStream(kinfer_cudaemu::Stream(stream), kinfer_cudaemu::Stream(stream)->issued);
  }
  return Note(e != cudaSuccess ? e : d.sticky);
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  EMU_LOCK();
  if (const cudaError_t e = kinfer_cudaemu::RefuseDuringCapture(); e != cudaSuccess) return Note(e);
  const cudaError_t e = cudaMemcpyAsync(dst, src, n, kind, nullptr);
  kinfer_cudaemu::RunAll();  // synchronous
  return e != cudaSuccess ? e : (d.sticky != cudaSuccess ? Note(d.sticky) : cudaSuccess);
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t n, cudaStream_t stream) {
  EMU_LOCK();
  if (n && !kinfer_cudaemu::IsDeviceRange(p, n)) return Note(cudaErrorInvalidValue);
  return Note(kinfer_cudaemu::StreamDo(stream, [p, value, n] { std::memset(p, value, n); },
                                       cudaGraphNodeTypeMemset));
}
cudaError_t cudaMemset(void* p, int value, size_t n) {
  EMU_LOCK();
  if (const cudaError_t e = kinfer_cudaemu::RefuseDuringCapture(); e != cudaSuccess) return Note(e);
  const cudaError_t e = cudaMemsetAsync(p, value, n, nullptr);
  kinfer_cudaemu::RunAll();  // synchronous
  return e != cudaSuccess ? e : (d.sticky != cudaSuccess ? Note(d.sticky) : cudaSuccess);
}
cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
  if (!s) return Note(cudaErrorInvalidValue);
  EMU_LOCK();
  *s = new CUstream_st();
  (*s)->blocking = (flags & cudaStreamNonBlocking) == 0;
  d.streams.push_back(*s);
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  EMU_LOCK();
  if (!s || s == &d.default_stream || !kinfer_cudaemu::Live(s) || s->capturing) {
    return Note(cudaErrorInvalidResourceHandle);
  }
  kinfer_cudaemu::RunStream(s, s->issued);  // its work completes
  d.streams.erase(std::find(d.streams.begin(), d.streams.end(), s));
  delete s;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  EMU_LOCK();
  if (kinfer_cudaemu::Stream(s)->capturing) {
    kinfer_cudaemu::Stream(s)->capture_invalid = true;
    return Note(cudaErrorStreamCaptureUnsupported);
  }
  kinfer_cudaemu::RunStream(kinfer_cudaemu::Stream(s), kinfer_cudaemu::Stream(s)->issued);
  return d.sticky != cudaSuccess ? Note(d.sticky) : cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned /*flags*/) {
  if (!e) return Note(cudaErrorInvalidValue);
  *e = new CUevent_st();
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  if (!e) return Note(cudaErrorInvalidResourceHandle);
  delete e;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  EMU_LOCK();
  if (!e) return Note(cudaErrorInvalidResourceHandle);
  if (kinfer_cudaemu::Stream(s)->capturing) {
    kinfer_cudaemu::Stream(s)->capture_invalid = true;
    return Note(cudaErrorStreamCaptureUnsupported);
  }
  e->stream = kinfer_cudaemu::Stream(s);
  e->pos = e->stream->issued;
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  EMU_LOCK();
  if (!e) return Note(cudaErrorInvalidResourceHandle);
  if (e->stream && kinfer_cudaemu::Live(e->stream)) kinfer_cudaemu::RunStream(e->stream, e->pos);
  return d.sticky != cudaSuccess ? Note(d.sticky) : cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags) {
  EMU_LOCK();
  if (!e) return Note(cudaErrorInvalidResourceHandle);
  if (flags != 0) return Note(cudaErrorInvalidValue);
  CUstream_st* st = kinfer_cudaemu::Stream(s);
  if (st->capturing) {  // an event recorded outside the capture: the capture cannot hold it
    st->capture_invalid = true;
    return Note(cudaErrorStreamCaptureUnsupported);
  }
  // A never-recorded event, or one whose stream is gone (its work done): nothing to wait for.
  if (e->stream == nullptr || e->pos == 0 || !kinfer_cudaemu::Live(e->stream)) return cudaSuccess;
  if (e->stream != st) kinfer_cudaemu::Push(st, EmuStreamOp{{}, e->stream, e->pos});
  if (!d.deferred) kinfer_cudaemu::RunAll();
  return cudaSuccess;
}
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode) {
  EMU_LOCK();
  if (!s) return Note(cudaErrorStreamCaptureUnsupported);  // not the legacy stream
  if (s->capturing) return Note(cudaErrorInvalidValue);
  s->capturing = true;
  s->capture_invalid = false;
  s->mode = mode;
  s->capture_thread = std::this_thread::get_id();
  s->ops.clear();
  s->kinds.clear();
  d.capturing.push_back(s);
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph) {
  EMU_LOCK();
  if (!s || !s->capturing || !graph) return Note(cudaErrorInvalidValue);
  if (s->capture_thread != std::this_thread::get_id() && s->mode != cudaStreamCaptureModeRelaxed) {
    return Note(cudaErrorStreamCaptureWrongThread);
  }
  s->capturing = false;
  d.capturing.erase(std::find(d.capturing.begin(), d.capturing.end(), s));
  *graph = nullptr;
  if (s->capture_invalid) {
    s->ops.clear();
    s->kinds.clear();
    return Note(cudaErrorStreamCaptureInvalidated);
  }
  const size_t n = s->ops.size();
  *graph = new CUgraph_st{std::move(s->ops), std::move(s->kinds), std::vector<cudaGraphEdgeData>(n),
                          std::vector<bool>(n, true)};
  if (n > 0) (*graph)->has_edge_into[0] = false;  // the first node has none
  s->ops.clear();
  s->kinds.clear();
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long /*flags*/) {
  EMU_LOCK();
  if (!exec || !graph) return Note(cudaErrorInvalidValue);
  for (size_t i = 1; i < graph->nodes.size(); ++i) {
    if (!graph->has_edge_into[i]) {  // the emulator runs its graphs in capture order only
      std::fprintf(stderr, "cuda-emu: cudaGraphInstantiate: node %zu lost its dependency on node %zu\n", i, i - 1);
      return Note(cudaErrorInvalidValue);
    }
  }
  *exec = new CUgraphExec_st{graph->ops};
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
  EMU_LOCK();
  if (!exec) return Note(cudaErrorInvalidValue);
  CUgraphExec_st* g = exec;
  return Note(kinfer_cudaemu::StreamDo(s, [g] {
    for (const auto& op : g->ops) {
      if (Dev().sticky != cudaSuccess) return;
      op();
    }
  }));
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}
cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count) {
  if (!graph || !count) return Note(cudaErrorInvalidValue);
  if (nodes) {
    const size_t n = std::min(*count, graph->nodes.size());
    for (size_t i = 0; i < n; ++i) nodes[i] = &graph->nodes[i];
    for (size_t i = n; i < *count; ++i) nodes[i] = nullptr;
  }
  *count = graph->nodes.size();
  return cudaSuccess;
}
cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, cudaGraphNodeType* type) {
  if (!node || !type) return Note(cudaErrorInvalidValue);
  *type = node->type;
  return cudaSuccess;
}
// The index of the edge from -> to in a chain graph: to's index, when from is the node before it.
static size_t ChainEdge(cudaGraph_t graph, cudaGraphNode_t from, cudaGraphNode_t to) {
  const size_t n = graph->nodes.size();
  if (n == 0 || to < &graph->nodes[0] || to > &graph->nodes[n - 1]) return 0;
  const size_t i = static_cast<size_t>(to - &graph->nodes[0]);
  return i >= 1 && from == &graph->nodes[i - 1] ? i : 0;
}
static bool SameEdgeData(const cudaGraphEdgeData& a, const cudaGraphEdgeData& b) {
  return a.from_port == b.from_port && a.to_port == b.to_port && a.type == b.type;
}
cudaError_t cudaGraphGetEdges(cudaGraph_t graph, cudaGraphNode_t* from, cudaGraphNode_t* to,
                              cudaGraphEdgeData* data, size_t* count) {
  if (!graph || !count || (from == nullptr) != (to == nullptr)) return Note(cudaErrorInvalidValue);
  std::vector<size_t> edges;
  for (size_t i = 1; i < graph->nodes.size(); ++i) {
    if (graph->has_edge_into[i]) edges.push_back(i);
  }
  if (from) {
    for (size_t k = 0; k < *count; ++k) {
      const bool real = k < edges.size();
      from[k] = real ? &graph->nodes[edges[k] - 1] : nullptr;
      to[k] = real ? &graph->nodes[edges[k]] : nullptr;
      if (data) data[k] = real ? graph->edge_into[edges[k]] : cudaGraphEdgeData{};
    }
  }
  *count = edges.size();
  return cudaSuccess;
}
cudaError_t cudaGraphRemoveDependencies(cudaGraph_t graph, const cudaGraphNode_t* from,
                                        const cudaGraphNode_t* to, const cudaGraphEdgeData* data,
                                        size_t n) {
  if (!graph || !from || !to) return Note(cudaErrorInvalidValue);
  for (size_t k = 0; k < n; ++k) {
    const size_t i = ChainEdge(graph, from[k], to[k]);
    const cudaGraphEdgeData want = data ? data[k] : cudaGraphEdgeData{};
    if (i == 0 || !graph->has_edge_into[i] || !SameEdgeData(graph->edge_into[i], want)) {
      return Note(cudaErrorInvalidValue);  // no such edge (with that data)
    }
    graph->has_edge_into[i] = false;
  }
  return cudaSuccess;
}
cudaError_t cudaGraphAddDependencies(cudaGraph_t graph, const cudaGraphNode_t* from,
                                     const cudaGraphNode_t* to, const cudaGraphEdgeData* data, size_t n) {
  if (!graph || !from || !to) return Note(cudaErrorInvalidValue);
  for (size_t k = 0; k < n; ++k) {
    const size_t i = ChainEdge(graph, from[k], to[k]);
    const cudaGraphEdgeData e = data ? data[k] : cudaGraphEdgeData{};
    if (i == 0 || graph->has_edge_into[i]) return Note(cudaErrorInvalidValue);  // outside the chain, or there
    if (e.to_port != 0) return Note(cudaErrorInvalidValue);
    if (e.type == cudaGraphDependencyTypeProgrammatic &&
        (graph->nodes[i - 1].type != cudaGraphNodeTypeKernel || graph->nodes[i].type != cudaGraphNodeTypeKernel ||
         (e.from_port != cudaGraphKernelNodePortProgrammatic && e.from_port != cudaGraphKernelNodePortLaunchCompletion))) {
      return Note(cudaErrorInvalidValue);  // programmatic edges join kernels, from a programmatic port
    }
    if (e.type == cudaGraphDependencyTypeDefault && e.from_port != cudaGraphKernelNodePortDefault) {
      return Note(cudaErrorInvalidValue);
    }
    graph->edge_into[i] = e;
    graph->has_edge_into[i] = true;
  }
  return cudaSuccess;
}
cudaError_t cudaGraphKernelNodeGetParams(cudaGraphNode_t node, cudaKernelNodeParams* params) {
  if (!node || !params || node->type != cudaGraphNodeTypeKernel) return Note(cudaErrorInvalidValue);
  *params = cudaKernelNodeParams{};
  params->func = const_cast<void*>(node->func);
  return cudaSuccess;
}
cudaError_t cudaFuncGetName(const char** name, const void* func) {
  EMU_LOCK();
  if (!name) return Note(cudaErrorInvalidValue);
  auto it = d.func_names.find(func);
  if (!func || it == d.func_names.end()) return Note(cudaErrorInvalidDeviceFunction);
  *name = it->second.c_str();
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}
