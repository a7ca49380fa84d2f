// The CUDA emulator's own rules (runtime/backend/cuda/emu): thread indices, barriers, warp
// shuffles, WMMA, launch checks, faults, memory red zones, streams and graph capture, cuBLAS.
// Kernels here are launched with ::kinfer_cudaemu::Launch directly (what cuda_emu_rewrite.py
// makes of <<<...>>>).
#include <gtest/gtest.h>

#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <mma.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

namespace {

using ::kinfer_cudaemu::Launch;

template <typename T>
T* DeviceCopy(const std::vector<T>& h) {
  T* d = nullptr;
  EXPECT_EQ(cudaMalloc(&d, h.size() * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  return d;
}
template <typename T>
std::vector<T> HostCopy(const T* d, size_t n) {
  std::vector<T> h(n);
  EXPECT_EQ(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

__global__ void IndexKernel(int* out) {
  const int t = (blockIdx.y * gridDim.x + blockIdx.x) * blockDim.x * blockDim.y +
                threadIdx.y * blockDim.x + threadIdx.x;
  out[t] = t;
}

__global__ void WarpSumKernel(const float* x, float* out) {
  float v = x[blockIdx.x * blockDim.x + threadIdx.x];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31;
  if (lane == 0) out[(blockIdx.x * blockDim.x + threadIdx.x) / 32] = v;
}

// Every lane's result of the xor butterfly, by shuffles and by WarpButterflyReduce (what the
// backend's WarpSum and WarpSumInt run under the emulator).
__global__ void ButterflyKernel(const float* x, const int* xi, float* shfl, float* gathered, int* shfl_i,
                                int* gathered_i) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = x[i];
  int vi = xi[i];
  for (int o = 16; o > 0; o >>= 1) {
    v += __shfl_xor_sync(0xffffffffu, v, o);
    vi += __shfl_xor_sync(0xffffffffu, vi, o);
  }
  shfl[i] = v;
  shfl_i[i] = vi;
  gathered[i] = ::kinfer_cudaemu::WarpButterflyReduce(0xffffffffu, x[i], [](float a, float b) { return a + b; });
  gathered_i[i] = ::kinfer_cudaemu::WarpButterflyReduce(0xffffffffu, xi[i], [](int a, int b) { return a + b; });
}

__global__ void GatherExitedLaneKernel(int* out) {
  if (threadIdx.x == 5) return;
  out[threadIdx.x] = ::kinfer_cudaemu::WarpButterflyReduce(0xffffffffu, 1, [](int a, int b) { return a + b; });
}

// Block sum through shared memory: correct only with both barriers.
__global__ void BlockSumKernel(const int* x, int* out, bool second_barrier) {
  __shared__ int s[256];
  s[threadIdx.x] = x[blockIdx.x * blockDim.x + threadIdx.x];
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    int v = 0;
    if (threadIdx.x < stride) v = s[threadIdx.x] + s[threadIdx.x + stride];
    if (second_barrier) __syncthreads();
    if (threadIdx.x < stride) s[threadIdx.x] = v;
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}

// Reads shared memory written by another thread without a barrier: the emulator's reverse
// resumption order makes the missing barrier visible.
__global__ void MissingBarrierKernel(int* out) {
  __shared__ int s[64];
  s[threadIdx.x] = static_cast<int>(threadIdx.x) + 1;
  __syncthreads();
  s[threadIdx.x] = s[(threadIdx.x + 1) % 64] * 10;  // race: the neighbour may have written already
  __syncthreads();
  out[threadIdx.x] = s[threadIdx.x];
}

__global__ void DivergentBarrierKernel(int* out) {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, static_cast<int>(threadIdx.x), 1);
  }
}

__global__ void ShuffleExitedLaneKernel(int* out) {
  if (threadIdx.x == 3) return;
  out[threadIdx.x] = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x), 3);
}

__global__ void OverrunKernel(int* out, int n) {
  out[threadIdx.x] = 1;  // launched with more threads than n
  (void)n;
}

__global__ void DynamicSharedKernel(float* out) {
  // `extern __shared__ float s[];`, as cuda_emu_rewrite.py writes it:
  float* s = reinterpret_cast<float*>(::kinfer_cudaemu::DynamicShared());
  s[threadIdx.x] = static_cast<float>(threadIdx.x);
  __syncthreads();
  out[threadIdx.x] = s[blockDim.x - 1 - threadIdx.x];
}

__global__ void WmmaKernel(const half* a, const half* b, float* c) {
  using namespace nvcuda;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 0.0f);
  wmma::load_matrix_sync(fa, a, 16);
  wmma::load_matrix_sync(fb, b, 16);
  wmma::mma_sync(acc, fa, fb, acc);
  wmma::store_matrix_sync(c, acc, 16, wmma::mem_row_major);
}

__global__ void AddOneKernel(int* x) { x[threadIdx.x] += 1; }

// Wrong on a GPU: block b reads what block b - 1 writes in the same launch.
__global__ void ChainKernel(int* out) {
  if (threadIdx.x == 0) out[blockIdx.x] = blockIdx.x == 0 ? 1 : out[blockIdx.x - 1] + 1;
}

class CudaEmuTest : public ::testing::Test {
 protected:
  void TearDown() override { cudaGetLastError(); }
};

TEST(CudaEmuRulesTest, IndicesCoverTheGridExactlyOnce) {
  const int n = 3 * 2 * 64;
  int* d = DeviceCopy(std::vector<int>(n, -1));
  Launch("IndexKernel", IndexKernel, dim3(3, 2), dim3(32, 2))(d);
  std::vector<int> want(n);
  std::iota(want.begin(), want.end(), 0);
  EXPECT_EQ(HostCopy(d, n), want);
  cudaFree(d);
}

TEST(CudaEmuRulesTest, BlocksDoNotRunInIndexOrder) {
  const int n = 8;
  int* d = DeviceCopy(std::vector<int>(n, 0));
  Launch("ChainKernel", ChainKernel, dim3(n), dim3(32))(d);
  std::vector<int> as_if_in_order(n);
  std::iota(as_if_in_order.begin(), as_if_in_order.end(), 1);
  EXPECT_NE(HostCopy(d, n), as_if_in_order) << "a kernel counting on block order should not pass";
  cudaFree(d);
}

TEST(CudaEmuRulesTest, WarpShufflesReduceEachWarp) {
  std::vector<float> x(256);
  std::iota(x.begin(), x.end(), 0.0f);
  float* dx = DeviceCopy(x);
  float* dout = DeviceCopy(std::vector<float>(8, 0.0f));
  Launch("WarpSumKernel", WarpSumKernel, dim3(2), dim3(128))(dx, dout);
  const std::vector<float> got = HostCopy(dout, 8);
  for (int w = 0; w < 8; ++w) {
    float want = 0;
    for (int i = 0; i < 32; ++i) want += x[w * 32 + i];
    EXPECT_EQ(got[w], want) << "warp " << w;
  }
  cudaFree(dx);
  cudaFree(dout);
}

// Floats over 12 orders of magnitude, so that the order of the additions shows in the bits.
TEST(CudaEmuRulesTest, AnAllGatherButterflyEqualsTheShufflesBitForBit) {
  const int n = 8 * 32;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> expo(-20, 20), big(-1000000, 1000000);
  std::vector<float> x(n);
  std::vector<int> xi(n);
  for (int i = 0; i < n; ++i) {
    x[i] = std::ldexp(mant(rng), expo(rng));
    xi[i] = big(rng);
  }
  float* dx = DeviceCopy(x);
  int* dxi = DeviceCopy(xi);
  float* d_shfl = DeviceCopy(std::vector<float>(n, 0.0f));
  float* d_gath = DeviceCopy(std::vector<float>(n, 0.0f));
  int* d_shfl_i = DeviceCopy(std::vector<int>(n, 0));
  int* d_gath_i = DeviceCopy(std::vector<int>(n, 0));
  Launch("ButterflyKernel", ButterflyKernel, dim3(2), dim3(128))(dx, dxi, d_shfl, d_gath, d_shfl_i, d_gath_i);
  const std::vector<float> shfl = HostCopy(d_shfl, n), gath = HostCopy(d_gath, n);
  const std::vector<int> shfl_i = HostCopy(d_shfl_i, n), gath_i = HostCopy(d_gath_i, n);
  int lanes_differing_from_lane0 = 0;
  for (int i = 0; i < n; ++i) {
    uint32_t a, b;
    std::memcpy(&a, &shfl[i], 4);
    std::memcpy(&b, &gath[i], 4);
    EXPECT_EQ(a, b) << "thread " << i;
    EXPECT_EQ(shfl_i[i], gath_i[i]) << "thread " << i;
    lanes_differing_from_lane0 += shfl[i] != shfl[i & ~31];
  }
  EXPECT_EQ(lanes_differing_from_lane0, 0);
  // The order matters here: summing warp 0 left to right gives other bits.
  float serial = 0.0f;
  for (int i = 0; i < 32; ++i) serial += x[i];
  EXPECT_NE(serial, shfl[0]) << "the values do not show the order of the additions";
  for (void* p : {static_cast<void*>(dx), static_cast<void*>(dxi), static_cast<void*>(d_shfl),
                  static_cast<void*>(d_gath), static_cast<void*>(d_shfl_i), static_cast<void*>(d_gath_i)}) {
    cudaFree(p);
  }
}

TEST(CudaEmuRulesTest, BarriersOrderSharedMemoryAndAMissingOneShows) {
  std::vector<int> x(512);
  std::iota(x.begin(), x.end(), 1);
  int* dx = DeviceCopy(x);
  int* dout = DeviceCopy(std::vector<int>(2, 0));
  Launch("BlockSumKernel", BlockSumKernel, dim3(2), dim3(256))(dx, dout, true);
  EXPECT_EQ(HostCopy(dout, 2), (std::vector<int>{256 * 257 / 2, (512 * 513 - 256 * 257) / 2}));

  int* race = DeviceCopy(std::vector<int>(64, 0));
  Launch("MissingBarrierKernel", MissingBarrierKernel, dim3(1), dim3(64))(race);
  const std::vector<int> got = HostCopy(race, 64);
  std::vector<int> as_if_ordered(64);
  for (int t = 0; t < 64; ++t) as_if_ordered[t] = ((t + 1) % 64 + 1) * 10;
  EXPECT_NE(got, as_if_ordered) << "the emulator's resumption order should expose the race";
  cudaFree(dx);
  cudaFree(dout);
  cudaFree(race);
}

TEST(CudaEmuRulesTest, WmmaMultipliesTiles) {
  std::vector<half> a(256), b(256);
  std::vector<float> af(256), bf(256);
  for (int i = 0; i < 256; ++i) {
    af[i] = static_cast<float>((i * 7) % 11 - 5) / 4;
    bf[i] = static_cast<float>((i * 5) % 13 - 6) / 8;
    a[i] = __float2half_rn(af[i]);
    b[i] = __float2half_rn(bf[i]);
  }
  half* da = DeviceCopy(a);
  half* db = DeviceCopy(b);
  float* dc = DeviceCopy(std::vector<float>(256, 0.0f));
  Launch("WmmaKernel", WmmaKernel, dim3(1), dim3(32))(da, db, dc);
  const std::vector<float> c = HostCopy(dc, 256);
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 16; ++j) {
      float want = 0;
      for (int k = 0; k < 16; ++k) want += af[i * 16 + k] * bf[j * 16 + k];  // b col-major
      EXPECT_EQ(c[i * 16 + j], want) << i << "," << j;
    }
  }
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
}

TEST(CudaEmuRulesTest, DynamicSharedMemoryIsPerBlockAndLimited) {
  float* d = DeviceCopy(std::vector<float>(128, 0.0f));
  Launch("DynamicSharedKernel", DynamicSharedKernel, dim3(1), dim3(128), 128 * sizeof(float))(d);
  const std::vector<float> got = HostCopy(d, 128);
  for (int t = 0; t < 128; ++t) EXPECT_EQ(got[t], 127 - t);
  // Over 48 KiB needs cudaFuncSetAttribute first, as on the device.
  Launch("DynamicSharedKernel", DynamicSharedKernel, dim3(1), dim3(128), 64 * 1024)(d);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  ASSERT_EQ(cudaFuncSetAttribute(DynamicSharedKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024),
            cudaSuccess);
  Launch("DynamicSharedKernel", DynamicSharedKernel, dim3(1), dim3(128), 64 * 1024)(d);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  cudaFree(d);
}

TEST(CudaEmuRulesTest, BadConfigurationsAreLaunchErrors) {
  int* d = DeviceCopy(std::vector<int>(4, 0));
  Launch("AddOneKernel", AddOneKernel, dim3(1), dim3(2048))(d);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  Launch("AddOneKernel", AddOneKernel, dim3(0), dim3(4))(d);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // not sticky
  Launch("AddOneKernel", AddOneKernel, dim3(1), dim3(4))(d);
  EXPECT_EQ(HostCopy(d, 4), (std::vector<int>{1, 1, 1, 1}));
  cudaFree(d);
}

TEST(CudaEmuRulesTest, StreamCaptureRecordsAndAGraphReplays) {
  int* d = DeviceCopy(std::vector<int>(4, 0));
  int* host = nullptr;
  ASSERT_EQ(cudaMallocHost(&host, 4 * sizeof(int)), cudaSuccess);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  Launch("AddOneKernel", AddOneKernel, dim3(1), dim3(4), 0, s)(d);
  ASSERT_EQ(cudaMemcpyAsync(host, d, 4 * sizeof(int), cudaMemcpyDeviceToHost, s), cudaSuccess);
  EXPECT_EQ(host[0], -1) << "capture runs nothing (pinned memory starts poisoned)";
  cudaGraph_t g;
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
  cudaGraphDestroy(g);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(std::vector<int>(host, host + 4), (std::vector<int>{3, 3, 3, 3}));
  // Allocating or synchronizing while capturing breaks the capture, as the driver's rules say.
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 16), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  cudaGetLastError();
  cudaGraphExecDestroy(exec);
  cudaStreamDestroy(s);
  cudaFreeHost(host);
  cudaFree(d);
}

// Deferred streams: work runs when the host waits for it, in issue order. A pinned buffer
// rewritten before the copy that reads it has run gives that copy the new contents (the hazard
// a GPU has), an event runs the work issued before it and no more, and a stream or device
// synchronization, a synchronous copy and cudaFree run the rest.
TEST(CudaEmuRulesTest, DeferredStreamsRunWhenTheHostWaits) {
  const bool before = kinfer_cudaemu::SetDeferredStreams(true);
  int* d = DeviceCopy(std::vector<int>(4, 0));  // (a synchronous copy: already there)
  int *in = nullptr, *out = nullptr;
  ASSERT_EQ(cudaMallocHost(&in, 4 * sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMallocHost(&out, 8 * sizeof(int)), cudaSuccess);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  cudaEvent_t first, second;
  ASSERT_EQ(cudaEventCreateWithFlags(&first, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&second, cudaEventDisableTiming), cudaSuccess);
  for (int i = 0; i < 4; ++i) in[i] = 10 + i;
  ASSERT_EQ(cudaMemcpyAsync(d, in, 4 * sizeof(int), cudaMemcpyHostToDevice, s), cudaSuccess);
  Launch("AddOneKernel", AddOneKernel, dim3(1), dim3(4), 0, s)(d);
  ASSERT_EQ(cudaMemcpyAsync(out, d, 4 * sizeof(int), cudaMemcpyDeviceToHost, s), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(first, s), cudaSuccess);
  for (int i = 0; i < 4; ++i) in[i] = 20 + i;  // before the first upload has run
  Launch("AddOneKernel", AddOneKernel, dim3(1), dim3(4), 0, s)(d);
  ASSERT_EQ(cudaMemcpyAsync(out + 4, d, 4 * sizeof(int), cudaMemcpyDeviceToHost, s), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(second, s), cudaSuccess);
  EXPECT_EQ(out[0], -1) << "nothing has run yet (pinned memory starts poisoned)";
  ASSERT_EQ(cudaEventSynchronize(first), cudaSuccess);
  EXPECT_EQ(std::vector<int>(out, out + 4), (std::vector<int>{21, 22, 23, 24}))
      << "the upload read the buffer when it ran, after the host rewrote it";
  EXPECT_EQ(out[4], -1) << "work issued after the event has not run";
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(std::vector<int>(out + 4, out + 8), (std::vector<int>{22, 23, 24, 25}));
  // cudaFree waits for the work before it.
  int* other = DeviceCopy(std::vector<int>(1, 0));
  Launch("AddOneKernel", AddOneKernel, dim3(1), dim3(4), 0, s)(d);
  ASSERT_EQ(cudaMemcpyAsync(out, d, 4 * sizeof(int), cudaMemcpyDeviceToHost, s), cudaSuccess);
  EXPECT_EQ(out[0], 21) << "not run yet: the first copy's value";
  ASSERT_EQ(cudaFree(other), cudaSuccess);
  EXPECT_EQ(out[0], 23);
  kinfer_cudaemu::SetDeferredStreams(before);
  cudaEventDestroy(first);
  cudaEventDestroy(second);
  cudaStreamDestroy(s);
  cudaFreeHost(in);
  cudaFreeHost(out);
  cudaFree(d);
}

// Two streams run each in its own order: a stream runs the other's work only where it waits for
// it (cudaStreamWaitEvent), so a kernel on a compute stream that does not wait for the upload on
// a copy stream reads what was there before (the hazard a GPU has), and one that waits reads the
// upload. Synchronizing one stream leaves the other's work pending; an event waits for its own
// stream's work only; waiting on a never-recorded event is no wait; a capturing stream cannot
// wait for an event recorded outside the capture.
TEST(CudaEmuRulesTest, StreamsRunInTheirOwnOrderAndWaitOnlyThroughEvents) {
  const bool before = kinfer_cudaemu::SetDeferredStreams(true);
  int* d = DeviceCopy(std::vector<int>(4, 0));
  int *in = nullptr, *out = nullptr;
  ASSERT_EQ(cudaMallocHost(&in, 4 * sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMallocHost(&out, 8 * sizeof(int)), cudaSuccess);
  cudaStream_t copy, compute;
  ASSERT_EQ(cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking), cudaSuccess);
  cudaEvent_t uploaded, never;
  ASSERT_EQ(cudaEventCreateWithFlags(&uploaded, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&never, cudaEventDisableTiming), cudaSuccess);
  for (int i = 0; i < 4; ++i) in[i] = 10 + i;
  // No wait: the compute stream's kernel and copy run before the upload.
  ASSERT_EQ(cudaMemcpyAsync(d, in, 4 * sizeof(int), cudaMemcpyHostToDevice, copy), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(uploaded, copy), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(compute, never), cudaSuccess);
  Launch("AddOneKernel", AddOneKernel, dim3(1), dim3(4), 0, compute)(d);
  ASSERT_EQ(cudaMemcpyAsync(out, d, 4 * sizeof(int), cudaMemcpyDeviceToHost, compute), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(compute), cudaSuccess);
  EXPECT_EQ(std::vector<int>(out, out + 4), (std::vector<int>{1, 1, 1, 1}))
      << "the compute stream did not wait for the copy stream";
  ASSERT_EQ(cudaEventSynchronize(uploaded), cudaSuccess);
  // With the wait: the upload lands first.
  for (int i = 0; i < 4; ++i) in[i] = 20 + i;
  ASSERT_EQ(cudaMemcpyAsync(d, in, 4 * sizeof(int), cudaMemcpyHostToDevice, copy), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(uploaded, copy), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(compute, uploaded), cudaSuccess);
  Launch("AddOneKernel", AddOneKernel, dim3(1), dim3(4), 0, compute)(d);
  ASSERT_EQ(cudaMemcpyAsync(out + 4, d, 4 * sizeof(int), cudaMemcpyDeviceToHost, compute), cudaSuccess);
  // Work on the copy stream after the event is not waited for.
  ASSERT_EQ(cudaMemsetAsync(d, 0, 4 * sizeof(int), copy), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(compute), cudaSuccess);
  EXPECT_EQ(std::vector<int>(out + 4, out + 8), (std::vector<int>{21, 22, 23, 24}));
  ASSERT_EQ(cudaStreamSynchronize(copy), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(out, d, 4 * sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(std::vector<int>(out, out + 4), (std::vector<int>(4, 0)));
  // A capturing stream cannot wait for an event from outside: the capture is invalidated.
  ASSERT_EQ(cudaStreamBeginCapture(compute, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  EXPECT_NE(cudaStreamWaitEvent(compute, uploaded), cudaSuccess);
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(compute, &graph), cudaErrorStreamCaptureInvalidated);
  cudaGetLastError();
  kinfer_cudaemu::SetDeferredStreams(before);
  cudaEventDestroy(uploaded);
  cudaEventDestroy(never);
  cudaStreamDestroy(copy);
  cudaStreamDestroy(compute);
  cudaFreeHost(in);
  cudaFreeHost(out);
  cudaFree(d);
}

// A captured graph's edges, as the backend rewrites them for programmatic dependent launch: a
// chain the driver's edge calls can read, remove and add back, with its rules (programmatic
// edges join two kernels from a programmatic port; a node left without its dependency cannot be
// instantiated); kernels carry their names.
TEST(CudaEmuRulesTest, GraphEdgesCanBeMadeProgrammaticUnderTheDriversRules) {
  int* d = DeviceCopy(std::vector<int>(4, 0));
  int* host = nullptr;
  ASSERT_EQ(cudaMallocHost(&host, 4 * sizeof(int)), cudaSuccess);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  Launch("AddOneKernel", AddOneKernel, dim3(1), dim3(4), 0, s)(d);
  Launch("AddOneKernel", AddOneKernel, dim3(1), dim3(4), 0, s)(d);
  ASSERT_EQ(cudaMemcpyAsync(host, d, 4 * sizeof(int), cudaMemcpyDeviceToHost, s), cudaSuccess);
  cudaGraph_t g;
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);

  size_t n = 0;
  ASSERT_EQ(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &n), cudaSuccess);
  ASSERT_EQ(n, 2u);
  cudaGraphNode_t from[2], to[2];
  cudaGraphEdgeData data[2];
  ASSERT_EQ(cudaGraphGetEdges(g, from, to, data, &n), cudaSuccess);
  EXPECT_EQ(data[0].type, cudaGraphDependencyTypeDefault);
  cudaKernelNodeParams params{};
  ASSERT_EQ(cudaGraphKernelNodeGetParams(to[0], &params), cudaSuccess);
  const char* name = nullptr;
  ASSERT_EQ(cudaFuncGetName(&name, params.func), cudaSuccess);
  EXPECT_STREQ(name, "kinfer_cudaemu::AddOneKernel");
  EXPECT_EQ(cudaGraphKernelNodeGetParams(to[1], &params), cudaErrorInvalidValue);  // a copy

  cudaGraphEdgeData pdl{};
  pdl.from_port = cudaGraphKernelNodePortProgrammatic;
  pdl.type = cudaGraphDependencyTypeProgrammatic;
  cudaGraphEdgeData no_port = pdl;
  no_port.from_port = cudaGraphKernelNodePortDefault;
  ASSERT_EQ(cudaGraphRemoveDependencies(g, &from[0], &to[0], &data[0], 1), cudaSuccess);
  EXPECT_EQ(cudaGraphRemoveDependencies(g, &from[0], &to[0], &data[0], 1), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGraphAddDependencies(g, &from[0], &to[0], &no_port, 1), cudaErrorInvalidValue);
  ASSERT_EQ(cudaGraphAddDependencies(g, &from[0], &to[0], &pdl, 1), cudaSuccess);
  ASSERT_EQ(cudaGraphRemoveDependencies(g, &from[1], &to[1], &data[1], 1), cudaSuccess);
  EXPECT_EQ(cudaGraphAddDependencies(g, &from[1], &to[1], &pdl, 1), cudaErrorInvalidValue);  // into a copy
  cudaGraphExec_t exec;
  EXPECT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaErrorInvalidValue);  // the copy lost its edge
  ASSERT_EQ(cudaGraphAddDependencies(g, &from[1], &to[1], &data[1], 1), cudaSuccess);
  ASSERT_EQ(cudaGraphGetEdges(g, from, to, data, &n), cudaSuccess);
  EXPECT_EQ(data[0].type, cudaGraphDependencyTypeProgrammatic);
  EXPECT_EQ(data[1].type, cudaGraphDependencyTypeDefault);
  ASSERT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
  cudaGraphDestroy(g);
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(std::vector<int>(host, host + 4), (std::vector<int>{2, 2, 2, 2}));
  EXPECT_EQ(cudaFuncGetName(&name, nullptr), cudaErrorInvalidDeviceFunction);
  cudaGetLastError();
  cudaGraphExecDestroy(exec);
  cudaStreamDestroy(s);
  cudaFreeHost(host);
  cudaFree(d);
}

TEST(CudaEmuRulesTest, MemoryIsPoisonedCountedAndCopiesAreChecked) {
  size_t free0 = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free0, &total), cudaSuccess);
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 1 << 20), cudaSuccess);
  size_t free1 = 0;
  ASSERT_EQ(cudaMemGetInfo(&free1, &total), cudaSuccess);
  EXPECT_EQ(free0 - free1, static_cast<size_t>(1 << 20));
  const std::vector<float> fresh = HostCopy(d, 4);
  EXPECT_TRUE(std::isnan(fresh[0])) << "never-written device memory reads as NaN";
  std::vector<float> h(8);
  EXPECT_EQ(cudaMemcpy(h.data(), d, h.size() * sizeof(float), cudaMemcpyHostToDevice), cudaErrorInvalidValue)
      << "a device source with the host-to-device direction";
  EXPECT_EQ(cudaMemcpy(d + (1 << 18) - 2, h.data(), 8 * sizeof(float), cudaMemcpyHostToDevice),
            cudaErrorInvalidValue)
      << "a copy running past the allocation";
  void* huge = nullptr;
  EXPECT_EQ(cudaMalloc(&huge, total), cudaErrorMemoryAllocation);
  cudaGetLastError();
  cudaFree(d);
}

TEST(CudaEmuRulesTest, CublasGemmExMatchesAPlainProduct) {
  // C (m x n, column-major) = A^T B with A stored k x m (the backend's W^T X^T form).
  const int m = 5, n = 3, k = 40;
  std::vector<uint16_t> a(k * m), b(k * n);
  std::vector<float> af(a.size()), bf(b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    af[i] = static_cast<float>(static_cast<int>(i % 9) - 4) / 8;
    a[i] = __half_as_ushort(__float2half_rn(af[i]));
  }
  for (size_t i = 0; i < b.size(); ++i) {
    bf[i] = static_cast<float>(static_cast<int>(i % 7) - 3) / 4;
    b[i] = __half_as_ushort(__float2half_rn(bf[i]));
  }
  uint16_t* da = DeviceCopy(a);
  uint16_t* db = DeviceCopy(b);
  float* dc = DeviceCopy(std::vector<float>(m * n, 1.0f));
  cublasHandle_t h;
  ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  const float alpha = 1.0f, beta = 1.0f;
  ASSERT_EQ(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, da, CUDA_R_16F, k, db, CUDA_R_16F, k,
                         &beta, dc, CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  const std::vector<float> c = HostCopy(dc, m * n);
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < m; ++i) {
      float want = 1.0f;
      for (int p = 0; p < k; ++p) want += af[i * k + p] * bf[j * k + p];
      EXPECT_FLOAT_EQ(c[j * m + i], want) << i << "," << j;
    }
  }
  cublasDestroy(h);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
}

// Faults are sticky for the process, as a faulting kernel's are for its context: these run last,
// each in its own process (death tests), so the other tests keep a healthy device.
TEST(CudaEmuFaultDeathTest, BrokenRulesAreNamedAndSticky) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        int* d = DeviceCopy(std::vector<int>(32, 0));
        Launch("DivergentBarrierKernel", DivergentBarrierKernel, dim3(1), dim3(32))(d);
        std::exit(cudaDeviceSynchronize() == cudaErrorLaunchFailure &&
                          cudaMemcpy(d, d, 4, cudaMemcpyDeviceToDevice) == cudaErrorLaunchFailure
                      ? 0
                      : 1);
      },
      ::testing::ExitedWithCode(0), "DivergentBarrierKernel: block \\(0,0,0\\): divergent barriers");
  EXPECT_EXIT(
      {
        int* d = DeviceCopy(std::vector<int>(32, 0));
        Launch("ShuffleExitedLaneKernel", ShuffleExitedLaneKernel, dim3(1), dim3(32))(d);
        std::exit(cudaDeviceSynchronize() == cudaErrorLaunchFailure ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "reads lane 3, which has exited");
  EXPECT_EXIT(
      {
        int* d = DeviceCopy(std::vector<int>(32, 0));
        Launch("GatherExitedLaneKernel", GatherExitedLaneKernel, dim3(1), dim3(32))(d);
        std::exit(cudaDeviceSynchronize() == cudaErrorLaunchFailure ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "a warp reduction reads lane 5, which has exited");
  EXPECT_EXIT(
      {
        int* d = DeviceCopy(std::vector<int>(48, 0));
        Launch("GatherExitedLaneKernel", GatherExitedLaneKernel, dim3(1), dim3(48))(d);
        std::exit(cudaDeviceSynchronize() == cudaErrorLaunchFailure ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "a warp reduction in a partial warp of 16 lanes");
  EXPECT_EXIT(
      {
        int* d = DeviceCopy(std::vector<int>(8, 0));
        Launch("OverrunKernel", OverrunKernel, dim3(1), dim3(9))(d, 8);
        std::exit(cudaDeviceSynchronize() == cudaErrorLaunchFailure ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "OverrunKernel: wrote past the end of a 32-byte device allocation");
  EXPECT_EXIT(
      {
        std::vector<int> host(8);
        Launch("AddOneKernel", AddOneKernel, dim3(1), dim3(8))(host.data());
        std::exit(cudaGetLastError() == cudaErrorLaunchFailure ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "pointer argument 0 .* is neither device nor pinned memory");
}

}  // namespace
