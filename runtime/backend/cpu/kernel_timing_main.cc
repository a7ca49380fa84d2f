// kinfer-cpu-kernel-timing: times MatMul on SmolLM2-135M's shapes (random weights of the real
// types) and prints a table: decode (ntok = 1) in GB/s of weights read, prefill (ntok = 512) in
// GFLOP/s, a whole-model decode pass (30 layers + output, ~96 MB of distinct weights, so nothing
// stays in cache) in tokens/s, and the machine's read bandwidth bound.
//
// Usage: kinfer-cpu-kernel-timing [threads=2] [repeats=5] [wall]. Timings are best-of-repeats;
// with 1 thread they are process CPU time unless `wall` is given.
// A benchmark program, not a test (style.md: benchmarks are programs).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <ctime>
#include <vector>

#include "runtime/backend/cpu/bandwidth.h"
#include "runtime/backend/cpu/cpu_features.h"
#include "runtime/backend/cpu/kernels.h"
#include "runtime/backend/cpu/matmul.h"
#include "runtime/backend/cpu/thread_pool.h"
#include "runtime/backend/cpu/weight_layout.h"

namespace kinfer {
namespace {

struct Matrix {
  std::vector<uint8_t> bytes;
  WeightMatrix w;
};

// Q4 matrices in `layout` (the shapes table uses what the loader would choose).
Matrix MakeMatrix(GgmlType type, int64_t rows, int64_t cols, std::mt19937& rng,
                  WeightLayout layout = PreferQ4Grouped8() ? WeightLayout::kQ4Grouped8 : WeightLayout::kGguf) {
  Matrix m;
  m.w = WeightMatrix{type, nullptr, rows, cols};
  m.bytes.resize(m.w.RowBytes() * rows);
  for (size_t i = 0; i + 4 <= m.bytes.size(); i += 4) {
    const uint32_t v = rng();
    std::memcpy(&m.bytes[i], &v, 4);
  }
  // Sane fp16 scales (0.01) in every block header.
  const uint16_t h = cpu_internal::FloatToHalf(0.01f);
  const size_t bb = type == GgmlType::kQ4_1 ? 20 : 34;
  for (size_t off = 0; off + bb <= m.bytes.size(); off += bb) {
    std::memcpy(&m.bytes[off], &h, 2);
    if (type == GgmlType::kQ4_1) std::memcpy(&m.bytes[off + 2], &h, 2);
  }
  if (layout == WeightLayout::kQ4Grouped8 && Q4Groupable(type)) {
    RegroupQ4(type, m.bytes.data(), rows, cols);
    m.w.layout = layout;
  }
  m.w.data = m.bytes.data();
  return m;
}

// With one thread, CPU time of the process (robust when other processes share the cores);
// otherwise wall time.
bool g_cpu_clock = false;

double Now() {
  if (g_cpu_clock) {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

template <typename F>
double BestSeconds(int repeats, F&& f) {
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    const double t0 = Now();
    f();
    best = std::min(best, Now() - t0);
  }
  return best;
}

int Main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 5;
  ThreadPool pool(threads);
  std::mt19937 rng(42);
  g_cpu_clock = threads == 1 && !(argc > 3 && std::strcmp(argv[3], "wall") == 0);
  std::printf("isa %s, %d threads, best of %d, %s time; Q4 weights %s\n", ActiveIsaName(), threads, repeats,
              g_cpu_clock ? "process CPU" : "wall", PreferQ4Grouped8() ? "regrouped (kQ4Grouped8)" : "as in GGUF");

  {  // Synchronisation costs: an empty Run, and a Run with 2 barriers.
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 20000; ++i) pool.Run([](int, int) {});
    const auto t1 = std::chrono::steady_clock::now();
    for (int i = 0; i < 20000; ++i) pool.Run([&](int, int) { pool.Barrier(); pool.Barrier(); });
    const auto t2 = std::chrono::steady_clock::now();
    std::printf("empty Run %.2f us, Run + 2 Barrier %.2f us (wall)\n",
                std::chrono::duration<double>(t1 - t0).count() / 20000 * 1e6,
                std::chrono::duration<double>(t2 - t1).count() / 20000 * 1e6);
  }
  struct Shape {
    const char* name;
    GgmlType type;
    int64_t rows, cols;
  };
  const Shape shapes[] = {{"attn_q/o 576x576", GgmlType::kQ4_1, 576, 576},
                          {"attn_k/v 192x576", GgmlType::kQ4_1, 192, 576},
                          {"ffn_gate/up 1536x576", GgmlType::kQ4_1, 1536, 576},
                          {"ffn_down 576x1536", GgmlType::kQ4_1, 576, 1536},
                          {"output 49152x576 Q8_0", GgmlType::kQ8_0, 49152, 576}};
  std::printf("%-24s %5s %10s %9s %9s\n", "shape", "ntok", "time_us", "GB/s", "GFLOP/s");
  for (const Shape& s : shapes) {
    // Several copies so a decode-shaped product streams from memory, not from the cache.
    const int copies = std::max<int64_t>(1, (64ll << 20) / (s.rows * s.cols / 2));
    std::vector<Matrix> ms;
    for (int c = 0; c < copies; ++c) ms.push_back(MakeMatrix(s.type, s.rows, s.cols, rng));
    for (int64_t ntok : {int64_t{1}, int64_t{4}, int64_t{8}, int64_t{16}, int64_t{512}}) {
      if (ntok > 1 && s.rows > 10000) continue;
      std::vector<float> x(ntok * s.cols), y(ntok * s.rows);
      std::normal_distribution<float> nd;
      for (auto& v : x) v = nd(rng);
      const int inner = ntok < 512 ? copies : 1;
      int next = 0;
      const double sec = BestSeconds(repeats * (ntok == 1 ? 4 : 1), [&] {
        for (int i = 0; i < inner; ++i) {
          MatMul(ms[next].w, x.data(), ntok, y.data(), pool);
          next = (next + 1) % copies;
        }
      }) / inner;
      const double bytes = static_cast<double>(ms[0].w.RowBytes() * s.rows);
      const double flops = 2.0 * s.rows * s.cols * ntok;
      std::printf("%-24s %5lld %10.1f %9.2f %9.1f\n", s.name, static_cast<long long>(ntok), sec * 1e6,
                  bytes / sec / 1e9, flops / sec / 1e9);
    }
  }

  // Compute cost of the matrix-vector kernels without the memory: one small matrix that stays in
  // L2, called over and over (with 1 thread and process CPU time this is robust to neighbours).
  std::printf("\n%-24s %5s %14s\n", "cache-resident", "ntok", "ns/block/thread");
  struct Hot {
    const char* name;
    GgmlType type;
    WeightLayout layout;
    int64_t rows, cols;
  };
  for (const Hot& h : {Hot{"192x576 Q4_1", GgmlType::kQ4_1, WeightLayout::kGguf, 192, 576},
                       Hot{"192x576 Q4_1 grouped8", GgmlType::kQ4_1, WeightLayout::kQ4Grouped8, 192, 576},
                       Hot{"64x1536 Q4_1", GgmlType::kQ4_1, WeightLayout::kGguf, 64, 1536},
                       Hot{"64x1536 Q4_1 grouped8", GgmlType::kQ4_1, WeightLayout::kQ4Grouped8, 64, 1536},
                       Hot{"192x576 Q8_0", GgmlType::kQ8_0, WeightLayout::kGguf, 192, 576}}) {
    const Matrix hot = MakeMatrix(h.type, h.rows, h.cols, rng, h.layout);
    for (int64_t ntok : {int64_t{1}, int64_t{4}}) {
      std::vector<float> x(ntok * h.cols, 0.5f), y(ntok * h.rows);
      constexpr int kCalls = 200;
      const double sec = BestSeconds(repeats, [&] {
        for (int i = 0; i < kCalls; ++i) MatMul(hot.w, x.data(), ntok, y.data(), pool);
      }) / kCalls;
      const double blocks_per_thread = static_cast<double>(h.rows) * (h.cols / 32) / threads;
      std::printf("%-24s %5lld %14.2f\n", h.name, static_cast<long long>(ntok), sec * 1e9 / blocks_per_thread);
    }
  }

  // Whole-model decode: the 7 products of 30 layers plus the output matrix, distinct weights;
  // the Q4_1 layers as in the GGUF file and regrouped (weight_layout.h), alternating so that
  // both see the same machine.
  auto make_model = [&](WeightLayout layout) {
    std::vector<Matrix> model;
    for (int l = 0; l < 30; ++l) {
      for (auto [rows, cols] : {std::pair<int64_t, int64_t>{576, 576}, {192, 576}, {192, 576}, {576, 576},
                                {1536, 576}, {1536, 576}, {576, 1536}}) {
        model.push_back(MakeMatrix(GgmlType::kQ4_1, rows, cols, rng, layout));
      }
    }
    model.push_back(MakeMatrix(GgmlType::kQ8_0, 49152, 576, rng));
    return model;
  };
  const std::vector<Matrix> model_gguf = make_model(WeightLayout::kGguf);
  const std::vector<Matrix> model = make_model(WeightLayout::kQ4Grouped8);
  double total_bytes = 0;
  for (const auto& m : model) total_bytes += static_cast<double>(m.bytes.size());
  std::vector<float> x(1536, 0.5f), y(49152);
  double sec[2] = {1e30, 1e30};
  for (int round = 0; round < 2 * repeats; ++round) {
    const std::vector<Matrix>& ms = round % 2 == 0 ? model_gguf : model;
    sec[round % 2] = std::min(sec[round % 2], BestSeconds(1, [&] {
                                for (const auto& m : ms) MatMul(m.w, x.data(), 1, y.data(), pool);
                              }));
  }
  const double bw = MeasureReadBandwidthGBs(threads, pool);
  std::printf("\n");
  for (int i = 0; i < 2; ++i) {
    std::printf("whole-model decode matmuls, Q4_1 %-9s: %.2f ms/token = %.1f tokens/s, %.2f GB/s (%.0f MB)\n",
                i == 0 ? "as GGUF" : "grouped8", sec[i] * 1e3, 1.0 / sec[i], total_bytes / sec[i] / 1e9,
                total_bytes / 1e6);
  }
  std::printf("read bandwidth (%d threads): %.2f GB/s -> bound %.1f tokens/s; achieved %.0f%% (as GGUF), %.0f%% "
              "(grouped8)\n",
              threads, bw, bw * 1e9 / total_bytes, 100.0 * total_bytes / sec[0] / 1e9 / bw,
              100.0 * total_bytes / sec[1] / 1e9 / bw);

  // Whole-model prefill of 512 tokens (matmuls only), same weights.
  std::vector<float> xp(512 * 1536, 0.25f), yp(512 * 1536);
  const double psec = BestSeconds(std::max(1, repeats / 2), [&] {
    for (size_t i = 0; i + 1 < model.size(); ++i) MatMul(model[i].w, xp.data(), 512, yp.data(), pool);
  });
  double pflops = 0;
  for (size_t i = 0; i + 1 < model.size(); ++i) pflops += 2.0 * model[i].w.rows * model[i].w.cols * 512;
  std::printf("prefill 512 tokens, 30 layers' matmuls (no output): %.1f ms = %.0f tokens/s, %.1f GFLOP/s\n",
              psec * 1e3, 512 / psec, pflops / psec / 1e9);
  return 0;
}

}  // namespace
}  // namespace kinfer

int main(int argc, char** argv) { return kinfer::Main(argc, argv); }
