// CUDA emulation: nvcuda::wmma for 16x16x16 tiles (half inputs, float accumulators). Every lane
// holds the whole tile (the hardware spreads it over the warp; kernels that only load, multiply
// and store cannot tell), and each call is a warp-wide convergence point as on the device.
// Products of halves are exact in float; sums are in float, k in order.
#pragma once

#include "runtime/backend/cuda/emu/cuda_emu.h"
#include "runtime/backend/cuda/emu/cuda_emu_fp16.h"

namespace nvcuda {
namespace wmma {

struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the emulator models 16x16x16 tiles only");
  static constexpr int kRows = std::is_same_v<Use, matrix_b> ? K : M;
  static constexpr int kCols = std::is_same_v<Use, matrix_a> ? K : N;
  static constexpr int num_elements = kRows * kCols;
  T x[kRows * kCols];  // the tile, row-major
};

template <typename Use, int M, int N, int K, typename T, typename Layout, typename V>
void fill_fragment(fragment<Use, M, N, K, T, Layout>& f, V v) {
  __syncwarp();
  for (auto& e : f.x) e = T(v);
}

// A or B from memory in the fragment's own layout.
template <typename Use, int M, int N, int K, typename T, typename Layout>
void load_matrix_sync(fragment<Use, M, N, K, T, Layout>& f, const T* p, unsigned ldm) {
  static_assert(!std::is_same_v<Layout, void>, "an accumulator load needs a layout_t");
  __syncwarp();
  using F = fragment<Use, M, N, K, T, Layout>;
  for (int r = 0; r < F::kRows; ++r) {
    for (int c = 0; c < F::kCols; ++c) {
      f.x[r * F::kCols + c] = std::is_same_v<Layout, row_major> ? p[r * ldm + c] : p[c * ldm + r];
    }
  }
}
template <int M, int N, int K>
void load_matrix_sync(fragment<accumulator, M, N, K, float, void>& f, const float* p, unsigned ldm,
                      layout_t layout) {
  __syncwarp();
  for (int r = 0; r < M; ++r) {
    for (int c = 0; c < N; ++c) f.x[r * N + c] = layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r];
  }
}
template <int M, int N, int K>
void store_matrix_sync(float* p, const fragment<accumulator, M, N, K, float, void>& f, unsigned ldm,
                       layout_t layout) {
  __syncwarp();
  for (int r = 0; r < M; ++r) {
    for (int c = 0; c < N; ++c) {
      (layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r]) = f.x[r * N + c];
    }
  }
}
template <int M, int N, int K, typename LA, typename LB>
void mma_sync(fragment<accumulator, M, N, K, float, void>& d, const fragment<matrix_a, M, N, K, half, LA>& a,
              const fragment<matrix_b, M, N, K, half, LB>& b, const fragment<accumulator, M, N, K, float, void>& c) {
  __syncwarp();
  // Each lane computes the tile: the halves widened once, then each row's 16 sums over k in order
  // (the j loop innermost, which the compiler can vectorize; each element's additions keep their
  // order).
  float fa[M * K], fb[K * N], out[M * N];
  for (int i = 0; i < M * K; ++i) fa[i] = __half2float(a.x[i]);
  for (int i = 0; i < K * N; ++i) fb[i] = __half2float(b.x[i]);
  for (int i = 0; i < M; ++i) {
    float* o = out + i * N;
    for (int j = 0; j < N; ++j) o[j] = c.x[i * N + j];
    for (int k = 0; k < K; ++k) {
      const float aik = fa[i * K + k];
      const float* bk = fb + k * N;
      for (int j = 0; j < N; ++j) o[j] += aik * bk[j];
    }
  }
  for (int i = 0; i < M * N; ++i) d.x[i] = out[i];
}

}  // namespace wmma
}  // namespace nvcuda
