// GPU test helpers: skip without a device (with the reason), device buffers, random data.
#pragma once

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/backend/model_backend.h"

// Skips the test when no CUDA device works: "no CUDA device: <cuda error string>".
#define KINFER_REQUIRE_CUDA()                                  \
  do {                                                         \
    const ::kinfer::Status _usable = ::kinfer::CudaDeviceUsable(); \
    if (!_usable.ok()) GTEST_SKIP() << _usable.message();      \
  } while (0)

namespace kinfer::testing {

// Device memory holding a copy of a host vector (or n zeroed elements); freed at scope end.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p_), std::max<size_t>(1, n) * sizeof(T)), cudaSuccess);
    cudaMemset(p_, 0, std::max<size_t>(1, n) * sizeof(T));
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) {
    cudaMemcpy(p_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  DeviceBuffer(const void* bytes, size_t n) : DeviceBuffer(n) {
    cudaMemcpy(p_, bytes, n * sizeof(T), cudaMemcpyHostToDevice);
  }
  ~DeviceBuffer() { cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const { return p_; }
  std::vector<T> ToHost() const {
    std::vector<T> h(n_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost);
    return h;
  }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

inline std::vector<float> RandomFloats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

}  // namespace kinfer::testing
