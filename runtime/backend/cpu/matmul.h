// Quantized matrix multiplication for the CPU backend: y = W x for one or many tokens.
//
// Numerics track llama.cpp (ggml's vec_dot_type): the activation row is quantized like ggml does
// before the dot products (Q4_1 x Q8_1; Q4_0 and Q8_0 x Q8_0; Q4_K and Q6_K x Q8_K; F16 x F16;
// BF16 x BF16; F32 x F32), and every block's exact integer dot is scaled in fp32 by d_w * d_x
// (+ m * s for Q4_1), so results agree with ggml up to fp32 summation order.
//
// Work split: the activations are quantized once, split by tokens across workers; then weight
// rows (or tokens, when there are few rows) are split across workers. For Q4_0/Q4_1/Q8_0 with
// ntok >= 4 (AVX-512 VNNI; 8 with AVX2, Q4 only) a register-blocked GEMM reads each weight block
// once for several tokens; otherwise the matrix-vector kernels handle up to 4 tokens per weight
// read (AVX-512 VNNI for Q4_0/Q4_1, AVX2 for Q8_0, F32, F16, BF16, Q4_K, Q6_K; scalar on CPUs
// without AVX2). The ISA can be lowered for tests with KINFER_CPU_ISA / SetCpuIsaOverride.
//
// Thread safety: MatMul is called by the pool's owner (not inside Run). MatMulInPool is called
// inside pool.Run() by every worker with identical arguments; it uses the workers' scratch
// (ThreadPool::scratch) and Barrier(). Neither writes anything but y and that scratch.
#pragma once

#include <cstdint>

#include "runtime/backend/cpu/thread_pool.h"
#include "runtime/backend/cpu/weight_layout.h"
#include "runtime/gguf/ggml_types.h"

namespace kinfer {

// A row-major weight matrix: row r starts at data + r * RowBytes(), its bytes in `layout`
// (weight_layout.h; the GGUF tensor's own unless the loader regrouped them). Not owning (usually
// points into the model file's mapping or memory).
struct WeightMatrix {
  GgmlType type = GgmlType::kF32;
  const void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  WeightLayout layout = WeightLayout::kGguf;  // kQ4Grouped8 only for Q4_0 / Q4_1
  // Bytes of one row: cols / block size * block bytes.
  size_t RowBytes() const;
};

// Batch invariance: with the GEMM off, every token's row goes through the matrix-vector kernels,
// whose result for a row does not depend on how many rows share the call (the GEMM's fp32
// summation order differs from theirs and varies with the tile a row lands in). The batching
// engine turns it off by default so that a request's output does not depend on what it was
// batched with, on prefix-cache hits or on preemption (docs/batching.md); it costs prefill speed.
// Process-wide; set it before the engine starts. Default: on.
void SetMatMulGemmEnabled(bool enabled);
bool MatMulGemmEnabled();

// True for the weight types MatMul implements: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K.
bool MatMulSupports(GgmlType type);

// y[t * w.rows + r] = dot(row r of W, x[t * w.cols ... + w.cols)) for t in [0, ntok), r in
// [0, w.rows). Runs the work on `pool` and returns when y is complete.
// REQUIRES: MatMulSupports(w.type); w.cols is a multiple of the type's block size (256 for the
// k-quants, 32 for the other quantized types); x holds ntok * w.cols floats, y ntok * w.rows;
// x and y do not alias.
void MatMul(const WeightMatrix& w, const float* x, int64_t ntok, float* y, ThreadPool& pool);

// The same work, done by the calling worker's share, for callers already inside pool.Run() (fused
// layers). Every worker must call it with the same arguments. It calls pool.Barrier() once, after
// the activations are quantized (so x may be overwritten after that point by the caller's next
// phase only after the caller's own barrier); it does not wait at the end: call pool.Barrier()
// before reading y. Consecutive calls need no barrier in between (the scratch is double-buffered).
// REQUIRES: as MatMul; ith/nth as passed to the Run function, nth == pool.size().
void MatMulInPool(const WeightMatrix& w, const float* x, int64_t ntok, float* y, int ith, int nth,
                  ThreadPool& pool);

// Products of a few tokens for callers that split the rows themselves (a fused decode step inside
// pool.Run, each worker with its own copy of the input).
// MatVecServes(w, ntok): a ntok-token MatMul of w runs the matrix-vector kernels (not the GEMM),
// ntok <= kMaxMatVecTokens; only then may MatVecRows be used.
// PrepareMatVecInput puts ntok tokens' x (ntok rows of w.cols floats) in the form w's kernel
// reads, in `scratch`, and returns it (or x itself where that form is float: then x must outlive
// the products); MatVecRows computes y[t * w.rows + r] for t < ntok, r in [r0, r1) from it. A row
// computes exactly what a ntok-token MatMul computes for it, wherever the range starts or ends.
// SameMatVecInput(a, b, ntok): an input prepared for a serves b.
// Thread safety: none of these touches the pool; each reads w and writes only scratch or y.
constexpr int64_t kMaxMatVecTokens = 8;
struct MatVecInput {
  const void* data = nullptr;
  size_t row_bytes = 0;  // from one token's row to the next
};
bool MatVecServes(const WeightMatrix& w, int64_t ntok);
MatVecInput PrepareMatVecInput(const WeightMatrix& w, const float* x, int64_t ntok,
                               AlignedBuffer* scratch);
bool SameMatVecInput(const WeightMatrix& a, const WeightMatrix& b, int64_t ntok);
void MatVecRows(const WeightMatrix& w, const MatVecInput& in, int64_t ntok, float* y, int64_t r0,
                int64_t r1);

}  // namespace kinfer
