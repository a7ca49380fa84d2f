// MatMul / MatMulInPool: activation quantization, work split and dispatch to the kernel table.
//
// Scratch protocol inside pool.Run(): worker i quantizes its own token range into its own
// WorkerScratch buffer (act[calls & 1]), growing it if needed; Barrier(); then every worker reads
// any worker's buffer. Consecutive calls alternate the two buffers, so worker i may already
// write call N+1's buffer while worker j still reads call N's: a buffer is written again only in
// call N+2, after call N+1's barrier, which worker j passes only once it has finished call N.
#include "runtime/backend/cpu/matmul.h"

#include <atomic>
#include <cstdlib>
#include <string_view>

#include <algorithm>
#include <cassert>
#include <vector>

#include "runtime/backend/cpu/kernels.h"

namespace kinfer {
namespace {

using cpu_internal::ActKind;

int64_t BlockElems(GgmlType t) {
  switch (t) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
      return 1;
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ8_0:
      return 32;
    case GgmlType::kQ4_K:
    case GgmlType::kQ6_K:
      return 256;
    default:
      return 0;
  }
}

size_t BlockBytes(GgmlType t) {
  switch (t) {
    case GgmlType::kF32:
      return 4;
    case GgmlType::kF16:
    case GgmlType::kBF16:
      return 2;
    case GgmlType::kQ4_0:
      return sizeof(BlockQ4_0);
    case GgmlType::kQ4_1:
      return sizeof(BlockQ4_1);
    case GgmlType::kQ8_0:
      return sizeof(BlockQ8_0);
    case GgmlType::kQ4_K:
      return sizeof(BlockQ4_K);
    case GgmlType::kQ6_K:
      return sizeof(BlockQ6_K);
    default:
      return 0;
  }
}

// Token range [start(i), start(i+1)) is quantized by worker i.
inline int64_t SplitStart(int64_t n, int i, int nth) { return n * i / nth; }

}  // namespace

size_t WeightMatrix::RowBytes() const {
  const int64_t be = BlockElems(type);
  return be == 0 ? 0 : static_cast<size_t>(cols / be) * BlockBytes(type);
}

bool MatMulSupports(GgmlType type) { return BlockElems(type) != 0; }

namespace {
// KINFER_MATMUL_GEMM=0 starts with the GEMM off (benchmarks of the batch-invariant path).
bool GemmDefault() {
  const char* v = std::getenv("KINFER_MATMUL_GEMM");
  return v == nullptr || std::string_view(v) != "0";
}
std::atomic<bool> g_gemm_enabled{GemmDefault()};
}  // namespace

void SetMatMulGemmEnabled(bool enabled) {
  g_gemm_enabled.store(enabled, std::memory_order_relaxed);
}
bool MatMulGemmEnabled() { return g_gemm_enabled.load(std::memory_order_relaxed); }

namespace {

// How a call's products run: the activation format, its order, the kernel and the row unit of
// the worker split. One plan for MatMulInPool and the single-token entry points, so that a row
// computes the same bits through either.
struct Plan {
  ActKind kind;
  bool interleaved;
  bool gemm;  // else the matrix-vector kernels
  cpu_internal::MatKernelFn fn;
  int64_t unit;
};

Plan PlanFor(const WeightMatrix& w, int64_t ntok) {
  assert(MatMulSupports(w.type) && w.cols % BlockElems(w.type) == 0);
  const cpu_internal::KernelTable& kt = cpu_internal::Kernels();
  const int type_id = static_cast<int>(w.type);
  const bool grouped = w.layout == WeightLayout::kQ4Grouped8;
  assert(!grouped || Q4Groupable(w.type));
  const cpu_internal::MatKernelFn* gemm_fns = grouped ? kt.gemm_q4g8 : kt.gemm;
  const bool gemm = ntok >= kt.gemm_min_tokens && gemm_fns[type_id] != nullptr &&
                    g_gemm_enabled.load(std::memory_order_relaxed);
  // Grouped weights meet the interleaved activation order in every kernel (kernels.h).
  return Plan{cpu_internal::ActKindFor(w.type), gemm || grouped, gemm,
              gemm ? gemm_fns[type_id] : (grouped ? kt.matvec_q4g8 : kt.matvec)[type_id],
              gemm ? kt.gemm_rows : 4};
}

}  // namespace

void MatMulInPool(const WeightMatrix& w, const float* x, int64_t ntok, float* y, int ith, int nth,
                  ThreadPool& pool) {
  assert(nth == pool.size());
  const cpu_internal::KernelTable& kt = cpu_internal::Kernels();
  const Plan plan = PlanFor(w, ntok);
  const ActKind kind = plan.kind;
  const size_t row_bytes = cpu_internal::ActRowBytes(kind, w.cols);

  // Phase 1: quantize my token range.
  WorkerScratch& mine = pool.scratch(ith);
  const int parity = static_cast<int>(mine.calls++ & 1);
  if (kind != ActKind::kF32) {
    const int64_t t0 = SplitStart(ntok, ith, nth), t1 = SplitStart(ntok, ith + 1, nth);
    uint8_t* buf = mine.act[parity].Reserve(std::max<size_t>(1, (t1 - t0) * row_bytes));
    const cpu_internal::QuantizeFn quantize = kt.quantize[static_cast<int>(kind)];
    for (int64_t t = t0; t < t1; ++t)
      quantize(x + t * w.cols, buf + (t - t0) * row_bytes, w.cols, plan.interleaved);
  }
  pool.Barrier();

  // Phase 2: pointers to every token's row, then my share of the products.
  thread_local std::vector<const void*> act;
  act.resize(ntok);
  if (kind == ActKind::kF32) {
    for (int64_t t = 0; t < ntok; ++t) act[t] = x + t * w.cols;
  } else {
    for (int i = 0; i < nth; ++i) {
      const uint8_t* buf = pool.scratch(i).act[parity].data();
      const int64_t t0 = SplitStart(ntok, i, nth), t1 = SplitStart(ntok, i + 1, nth);
      for (int64_t t = t0; t < t1; ++t) act[t] = buf + (t - t0) * row_bytes;
    }
  }
  const cpu_internal::MatArgs args{
      static_cast<const uint8_t*>(w.data), w.RowBytes(), w.cols, act.data(), y, w.rows};
  // Split rows, in multiples of the kernel's preferred panel; split tokens when rows are few.
  const int64_t unit = plan.unit;
  if (w.rows >= static_cast<int64_t>(nth) * 4 * unit || ntok < nth) {
    const int64_t units = (w.rows + unit - 1) / unit;
    const int64_t r0 = std::min(w.rows, SplitStart(units, ith, nth) * unit);
    const int64_t r1 = std::min(w.rows, SplitStart(units, ith + 1, nth) * unit);
    if (r0 < r1) plan.fn(args, r0, r1, 0, ntok);
  } else {
    const int64_t t0 = SplitStart(ntok, ith, nth), t1 = SplitStart(ntok, ith + 1, nth);
    if (t0 < t1) plan.fn(args, 0, w.rows, t0, t1);
  }
}

bool MatVecServes(const WeightMatrix& w, int64_t ntok) {
  return ntok >= 1 && ntok <= kMaxMatVecTokens && !PlanFor(w, ntok).gemm;
}

MatVecInput PrepareMatVecInput(const WeightMatrix& w, const float* x, int64_t ntok,
                               AlignedBuffer* scratch) {
  const Plan plan = PlanFor(w, ntok);
  if (plan.kind == ActKind::kF32) return {x, w.cols * sizeof(float)};
  const size_t row_bytes = cpu_internal::ActRowBytes(plan.kind, w.cols);
  uint8_t* buf = scratch->Reserve(row_bytes * ntok);
  const cpu_internal::QuantizeFn quantize =
      cpu_internal::Kernels().quantize[static_cast<int>(plan.kind)];
  for (int64_t t = 0; t < ntok; ++t) {
    quantize(x + t * w.cols, buf + t * row_bytes, w.cols, plan.interleaved);
  }
  return {buf, row_bytes};
}

bool SameMatVecInput(const WeightMatrix& a, const WeightMatrix& b, int64_t ntok) {
  const Plan pa = PlanFor(a, ntok), pb = PlanFor(b, ntok);
  return a.cols == b.cols && pa.kind == pb.kind && pa.interleaved == pb.interleaved;
}

void MatVecRows(const WeightMatrix& w, const MatVecInput& in, int64_t ntok, float* y, int64_t r0,
                int64_t r1) {
  assert(0 <= r0 && r0 <= r1 && r1 <= w.rows && MatVecServes(w, ntok));
  if (r0 == r1) return;
  const Plan plan = PlanFor(w, ntok);
  const void* act[kMaxMatVecTokens];
  for (int64_t t = 0; t < ntok; ++t)
    act[t] = static_cast<const uint8_t*>(in.data) + t * in.row_bytes;
  const cpu_internal::MatArgs args{
      static_cast<const uint8_t*>(w.data), w.RowBytes(), w.cols, act, y, w.rows};
  plan.fn(args, r0, r1, 0, ntok);
}

void MatMul(const WeightMatrix& w, const float* x, int64_t ntok, float* y, ThreadPool& pool) {
  pool.Run([&](int ith, int nth) { MatMulInPool(w, x, ntok, y, ith, nth, pool); });
}

}  // namespace kinfer
