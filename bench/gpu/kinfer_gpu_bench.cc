// kinfer-gpu-bench: the CUDA backend's speed on one model, as a program (not a test).
//
//   kinfer-gpu-bench --model FILE [--json OUT.json] [--note TEXT] [--quick] [--only NAME,...]
//                    [--tiny]
// (--tiny: 16-token contexts, 4 steps, 64-token prompts: for checking the program's own logic,
// as tests/python/test_gpu_bench_emu.py does over the CUDA emulation; not for figures.)
//
// Measures, with greedy sampling on the device (ForwardBatchArgmax: only token ids cross PCIe):
//   single-stream decode tokens/s (128-token prompt, then 256 steps);
//   decode throughput at batch 1, 8, 64, 256 (each sequence 128 tokens of context, 64 steps);
//   prefill tokens/s on 2048-token prompts (one prompt a step);
//   and, to settle two defaults: decode at batch 8/32/64 with every product on the fused
//   matrix-vector kernels, and prefill with the tensor-core attention;
//   and decode at batch 64 and 256 drawing with llama.cpp's default settings (temperature 0.8,
//   top-k 40, top-p 0.95, min-p 0.05) on the device (ForwardBatchSample), against the logits
//   copied back and drawn on the host (ForwardBatch + DrawToken) at batch 64, and a mixed step
//   at 64 (decode_mixed: row 0 drawn on the host, ForwardBatchSampleMixed), and at 64 with
//   every row's penalties applied on the device (decode_penalized) or every row's logprobs (5
//   alternatives) computed on the device (decode_logprobs) or every row's grammar mask (half the
//   vocabulary) applied on the device (decode_masked);
//   single-stream decode at a 2,000-token context; and single stream (128 and 2,000 tokens of
//   context) and batch 256 again with the per-head decode attention
//   (CudaBackendOptions::shared_kv_decode off): the shared K/V reads' and splits' gain;
//   and single stream and batch 64 and 256 with chained steps (*_chained: each step launched
//   behind the one before, its tokens read on the device; LaunchSampleChained, what the engine
//   does), where every other figure waits for each step's ids on the host before the next;
//   chained single stream and batch 256 again with one stream (*_chained_one_stream:
//   CudaBackendOptions::copy_stream off): the copy stream's gain; and single stream (128 and
//   2,000 tokens of context), batch 64 and prefill_2048 with the batch-invariant kernels
//   (*_batch_invariant: CudaBackendOptions::batch_invariant): their cost.
// Beside each: the step's FLOPs (2 x weights x tokens + attention) and bytes moved (the weights
// the step's products read, CudaBackend::WeightBytesRead: quantized on the matrix-vector path,
// the FP16 copies on cuBLAS's; + the KV read by attention), as achieved TFLOP/s and GB/s against the
// device's datasheet ceilings (DeviceCeilings: the H200's 990 TFLOP/s dense bf16 and 4.8 TB/s;
// an H100's own where the device is one). Prints a table, writes JSON.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/backend/cuda/cuda_backend.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/sample/draw.h"
#include "runtime/sample/penalties.h"

namespace kinfer {
namespace {

// Dense FP16/BF16 tensor FLOP/s and HBM bytes/s from NVIDIA's datasheets, by device name; the
// issue states its goals for an H200. A device not listed is measured against the H200's and
// says so. (The memory clock and bus width the device reports give a bandwidth too, written to
// the JSON beside these; for HBM it is near the datasheet's, not the same.)
struct Ceilings {
  double flops = 0;
  double bytes = 0;
  std::string source;
};
Ceilings DeviceCeilings(const std::string& name) {
  auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  if (has("H200")) return {989e12, 4.8e12, "H200 datasheet"};
  if (has("H100") && has("PCIe")) return {756e12, 2.0e12, "H100 PCIe datasheet"};
  if (has("H100") && has("NVL")) return {835e12, 3.9e12, "H100 NVL datasheet"};
  if (has("H100")) return {989e12, 3.35e12, "H100 SXM datasheet"};
  return {989e12, 4.8e12, "H200 datasheet (this device is not in the bench's table)"};
}
constexpr int kBlock = 16;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Result {
  std::string name;
  int batch = 0;
  int tokens = 0;
  double seconds = 0;
  double flops = 0;
  double bytes = 0;
  double tok_s() const { return tokens / seconds; }
};

// --only: the result names to measure (empty: all). --tiny: everything small.
std::vector<std::string> g_only;
bool g_tiny = false;
bool Wanted(const std::string& name) {
  return g_only.empty() || std::find(g_only.begin(), g_only.end(), name) != g_only.end();
}

class Bench {
 public:
  Bench(CudaBackend* b, bool quick) : b_(b), quick_(quick), hp_(b->hparams()) {
    const double d = hp_.n_embd, dq = hp_.n_head * hp_.head_dim, dkv = hp_.n_embd_kv(), ff = hp_.n_ff;
    params_ = hp_.n_layer * (d * dq + 2 * d * dkv + dq * d + 3 * d * ff) + d * hp_.n_vocab;
  }
  double params() const { return params_; }

  // Attention FLOPs of one token at context c (QK and PV), all layers.
  double AttnFlops(double ctx) const { return 4.0 * ctx * hp_.n_head * hp_.head_dim * hp_.n_layer; }
  // KV bytes read by one token at context c.
  double KvBytes(double ctx) const { return 2.0 * ctx * hp_.n_embd_kv() * 2.0 * hp_.n_layer; }

  std::vector<int32_t> RandomTokens(int n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> u(100, hp_.n_vocab - 1);
    std::vector<int32_t> t(n);
    for (int32_t& x : t) x = u(rng);
    return t;
  }

  // How a decode step's tokens are chosen: greedy on the device, or drawn on the device or on the
  // host with llama.cpp's defaults (top-k 40) or with top-p alone over the whole vocabulary
  // (OpenAI's and vLLM's knob: top_p 0.9, temperature 0.7).
  // kMixed: llama.cpp's defaults on the device but row 0 (a request with logprobs, say) drawn
  // on the host from its logits, the only row copied back (ForwardBatchSampleMixed).
  // kDeviceLogprobs: llama.cpp's defaults on the device, every row reporting its logprobs with
  // 5 alternatives (LogprobRows).
  // kDevicePenalized: llama.cpp's defaults on the device with every row's frequency, presence
  // and repetition penalties over its last 64 tokens (LogitAdjustments, AdjustLogitsRows).
  // kDeviceMasked: llama.cpp's defaults on the device with every row's grammar mask (DrawParams::
  // mask: every other token id, 6 KB a row uploaded each step; AdjustLogitsRows).
  enum class Pick { kDeviceArgmax, kDeviceDraw, kHostDraw, kDeviceNucleus, kHostNucleus, kChained,
                    kMixed, kDevicePenalized, kDeviceLogprobs, kDeviceMasked };

  // B sequences with `ctx` prompt tokens each, then `steps` decode steps of all B.
  // A name --only leaves out is not measured (r->name is left empty, whatever r held).
  Status Decode(const std::string& name, int B, int ctx, int steps, Result* r,
                Pick pick = Pick::kDeviceArgmax) {
    r->name.clear();
    if (!Wanted(name)) return Status::Ok();
    if (g_tiny) {
      ctx = std::min(ctx, 16);
      steps = std::min(steps, 4);
    }
    const int blocks_per_seq = (ctx + steps + kBlock) / kBlock + 1;
    std::vector<std::vector<int32_t>> tables(B), toks(B);
    for (int i = 0; i < B; ++i) {
      for (int k = 0; k < blocks_per_seq; ++k) tables[i].push_back(i * blocks_per_seq + k);
      toks[i] = RandomTokens(ctx, 17 + i);
    }
    // Prefill, as many sequences a step as fit.
    const int per_step = std::max(1, b_->max_batch_tokens() / ctx);
    std::vector<int32_t> ids;
    for (int i0 = 0; i0 < B; i0 += per_step) {
      std::vector<SequenceBatch> seqs;
      for (int i = i0; i < std::min(B, i0 + per_step); ++i) {
        SequenceBatch s;
        s.tokens = toks[i];
        s.blocks = tables[i];
        seqs.push_back(s);
      }
      KINFER_RETURN_IF_ERROR(b_->ForwardBatchArgmax(seqs, &ids));
      for (size_t k = 0; k < seqs.size(); ++k) toks[i0 + k].push_back(ids[k]);
    }
    std::vector<SequenceBatch> seqs(B);
    std::vector<float> logits;
    std::vector<LogitAdjust> adjust;  // kDevicePenalized's entries, rebuilt each step
    std::vector<DrawnLogprobs> lps(static_cast<size_t>(B));  // kDeviceLogprobs' reports
    std::vector<uint64_t> mask;                              // kDeviceMasked's
    DrawCandidates cand;
    double t0 = 0;
    const int warm = 3;
    if (pick == Pick::kChained) {
      // Greedy on the device, each step launched behind the one before: its tokens are that
      // step's rows (chain[i] = i), read on the device.
      const std::vector<DrawParams> greedy(B);  // (temperature 0)
      std::vector<int32_t> chain(B);
      for (int i = 0; i < B; ++i) chain[i] = i;
      const std::vector<int32_t> unknown = {0};  // a chained token's place: not read
      std::vector<int> base(B);  // the position of each sequence's first decoded token
      for (int i = 0; i < B; ++i) base[i] = static_cast<int>(toks[i].size()) - 1;
      for (int step = 0; step < steps + warm; ++step) {
        if (step == warm) t0 = Now();
        for (int i = 0; i < B; ++i) {
          const int pos = base[i] + step;
          seqs[i].tokens = step == 0 ? std::span<const int32_t>(toks[i]).subspan(pos) : unknown;
          seqs[i].pos0 = pos;
          seqs[i].blocks = tables[i];
          seqs[i].mode = ForwardMode::kDecode;
        }
        if (step == 0) {
          KINFER_RETURN_IF_ERROR(b_->LaunchSample(seqs, greedy));
        } else {
          KINFER_RETURN_IF_ERROR(b_->LaunchSampleChained(seqs, greedy, chain));
          KINFER_RETURN_IF_ERROR(b_->FinishSample(&ids));
          for (int i = 0; i < B; ++i) toks[i].push_back(ids[i]);
        }
      }
      KINFER_RETURN_IF_ERROR(b_->FinishSample(&ids));
    } else {
    for (int step = 0; step < steps + warm; ++step) {
      if (step == warm) t0 = Now();
      for (int i = 0; i < B; ++i) {
        seqs[i].tokens = std::span<const int32_t>(toks[i]).subspan(toks[i].size() - 1);
        seqs[i].pos0 = static_cast<int>(toks[i].size()) - 1;
        seqs[i].blocks = tables[i];
        seqs[i].mode = ForwardMode::kDecode;
      }
      if (pick == Pick::kDeviceArgmax) {
        KINFER_RETURN_IF_ERROR(b_->ForwardBatchArgmax(seqs, &ids));
      } else {
        const bool nucleus = pick == Pick::kDeviceNucleus || pick == Pick::kHostNucleus;
        std::vector<DrawParams> draws(B);
        for (DrawParams& d : draws) {
          d.temperature = nucleus ? 0.7f : 0.8f;
          d.top_k = nucleus ? 0 : 40;
          d.top_p = nucleus ? 0.9f : 0.95f;
          d.min_p = nucleus ? 0.0f : 0.05f;
          d.noise_key = rng_();
        }
        if (pick == Pick::kDevicePenalized) {
          SamplingParams pen;
          pen.frequency_penalty = 0.5f;
          pen.presence_penalty = 0.5f;
          pen.repetition_penalty = 1.1f;
          adjust.clear();
          std::vector<size_t> ends;
          for (int i = 0; i < B; ++i) {
            LogitAdjustments(pen, std::span<const int32_t>(toks[i]).first(toks[i].size() - 1),
                             hp_.n_vocab, &adjust, &draws[i]);
            ends.push_back(adjust.size());
          }
          for (int i = 0; i < B; ++i) {
            const size_t b = i == 0 ? 0 : ends[i - 1];
            draws[i].adjust = std::span<const LogitAdjust>(adjust).subspan(b, ends[i] - b);
          }
        }
        if (pick == Pick::kDeviceLogprobs) {
          for (int i = 0; i < B; ++i) {
            draws[i].logprobs = 5;
            draws[i].logprobs_out = &lps[static_cast<size_t>(i)];
          }
        }
        if (pick == Pick::kDeviceMasked) {
          static const int32_t kFallback[] = {2};
          mask.assign((static_cast<size_t>(hp_.n_vocab) + 63) / 64, 0x5555555555555555ull);
          for (DrawParams& d : draws) {
            d.mask = mask;
            d.mask_fallback = kFallback;
          }
        }
        if (pick == Pick::kDeviceDraw || pick == Pick::kDeviceNucleus ||
            pick == Pick::kDevicePenalized || pick == Pick::kDeviceLogprobs ||
            pick == Pick::kDeviceMasked) {
          KINFER_RETURN_IF_ERROR(b_->ForwardBatchSample(seqs, draws, &ids));
        } else if (pick == Pick::kMixed) {
          const std::vector<int32_t> host = {0};
          KINFER_RETURN_IF_ERROR(b_->ForwardBatchSampleMixed(seqs, draws, host, &ids, &logits));
          ids[0] = DrawToken(std::span<const float>(logits.data(), hp_.n_vocab), draws[0], &cand);
        } else {
          KINFER_RETURN_IF_ERROR(b_->ForwardBatch(seqs, &logits));
          const size_t nv = hp_.n_vocab;
          ids.resize(B);
          for (int i = 0; i < B; ++i) {
            ids[i] = DrawToken(std::span<const float>(logits.data() + i * nv, nv), draws[i],
                               &cand);
          }
        }
      }
      for (int i = 0; i < B; ++i) toks[i].push_back(ids[i]);
    }
    }
    r->name = name;
    r->batch = B;
    r->tokens = B * steps;
    r->seconds = Now() - t0;
    const double mean_ctx = ctx + warm + steps / 2.0;
    r->flops = steps * B * (2.0 * params_ + AttnFlops(mean_ctx));
    r->bytes = steps * (static_cast<double>(b_->WeightBytesRead(B, B)) + B * KvBytes(mean_ctx));
    return Status::Ok();
  }

  Status Prefill(int len, int reps, Result* r, const std::string& suffix = "") {
    r->name.clear();
    if (!Wanted("prefill_" + std::to_string(len) + suffix)) return Status::Ok();
    if (g_tiny) {
      len = std::min(len, 64);
      reps = std::min(reps, 1);
    }
    std::vector<int32_t> table;
    for (int k = 0; k < (len + kBlock - 1) / kBlock; ++k) table.push_back(k);
    const std::vector<int32_t> toks = RandomTokens(len, 99);
    SequenceBatch s;
    s.tokens = toks;
    s.blocks = table;
    std::vector<int32_t> ids;
    KINFER_RETURN_IF_ERROR(b_->ForwardBatchArgmax(std::span<const SequenceBatch>(&s, 1), &ids));  // warm
    const double t0 = Now();
    for (int i = 0; i < reps; ++i) {
      KINFER_RETURN_IF_ERROR(b_->ForwardBatchArgmax(std::span<const SequenceBatch>(&s, 1), &ids));
    }
    r->name = "prefill_" + std::to_string(len) + suffix;
    r->batch = 1;
    r->tokens = len * reps;
    r->seconds = Now() - t0;
    // Causal attention: token t attends t + 1 positions; mean (len + 1) / 2.
    r->flops = reps * (2.0 * params_ * len + len * AttnFlops((len + 1) / 2.0));
    r->bytes = reps * (static_cast<double>(b_->WeightBytesRead(len, 1)) + len * KvBytes((len + 1) / 2.0));
    return Status::Ok();
  }

 private:
  CudaBackend* b_;
  bool quick_;
  LlamaHParams hp_;
  double params_ = 0;
  std::mt19937_64 rng_{5};
};

int Main(int argc, char** argv) {
  std::string model, json, note;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--model" && i + 1 < argc) model = argv[++i];
    else if (a == "--json" && i + 1 < argc) json = argv[++i];
    else if (a == "--note" && i + 1 < argc) note = argv[++i];
    else if (a == "--quick") quick = true;
    else if (a == "--tiny") g_tiny = quick = true;
    else if (a == "--only" && i + 1 < argc) {
      std::stringstream ss(argv[++i]);
      for (std::string n; std::getline(ss, n, ',');) g_only.push_back(n);
    } else {
      std::fprintf(stderr, "usage: kinfer-gpu-bench --model FILE [--json OUT] [--note TEXT] [--quick] "
                           "[--only NAME,...] [--tiny]\n");
      return 2;
    }
  }
  if (model.empty()) {
    std::fprintf(stderr, "kinfer-gpu-bench: --model is required\n");
    return 2;
  }
  auto f = GgufFile::Open(model);
  if (!f.ok()) {
    std::fprintf(stderr, "%s\n", f.status().ToString().c_str());
    return 1;
  }
  std::shared_ptr<const GgufFile> file(std::move(f).value());
  CudaBackendOptions opt;
  opt.max_batch_tokens = 2048;
  auto b = CudaBackend::Create(file, opt);
  if (!b.ok()) {
    std::fprintf(stderr, "%s\n", b.status().ToString().c_str());
    return 1;
  }
  CudaBackend* be = b->get();
  const int blocks = 256 * ((128 + 64 + 3 + kBlock) / kBlock + 1) + 256;
  if (Status s = be->InitKvCache(kBlock, std::max(blocks, 2048 / kBlock + 1)); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  const CudaDeviceInfo& d = be->device_info();
  std::printf("device: %s (cc %d.%d, %d SMs, L2 %lld MB), model %s\n", d.name.c_str(), d.cc_major,
              d.cc_minor, d.sm_count, static_cast<long long>(d.l2_bytes >> 20), model.c_str());
  std::printf("device memory: weights %lld MB, fp16 copies %lld MB, scratch %lld MB, KV %lld MB\n",
              static_cast<long long>(be->weights_device_bytes() >> 20),
              static_cast<long long>(be->fp16_copy_bytes() >> 20),
              static_cast<long long>(be->scratch_device_bytes() >> 20),
              static_cast<long long>(be->kv_device_bytes() >> 20));
  const Ceilings peak = DeviceCeilings(d.name);
  // DDR: two transfers a clock.
  const double reported_bytes = 2.0 * d.mem_clock_khz * 1e3 * d.mem_bus_bits / 8.0;
  std::printf("ceilings: %.0f TFLOP/s, %.0f GB/s (%s); the reported memory clock and bus give %.0f GB/s\n",
              peak.flops / 1e12, peak.bytes / 1e9, peak.source.c_str(), reported_bytes / 1e9);
  Bench bench(be, quick);
  std::vector<Result> results;
  auto run = [&](Status s, const Result& r) {  // (r by reference: filled by the call beside it)
    if (!s.ok()) {
      std::fprintf(stderr, "%s failed: %s\n", r.name.c_str(), s.ToString().c_str());
      return false;
    }
    if (r.name.empty()) return true;  // left out by --only
    results.push_back(r);
    std::printf("%-18s batch %4d  %10.0f tok/s  %8.3f TFLOP/s (%.2f%% of %.0f)  %8.1f GB/s (%.1f%% of %.0f)\n",
                r.name.c_str(), r.batch, r.tok_s(), r.flops / r.seconds / 1e12,
                100.0 * r.flops / r.seconds / peak.flops, peak.flops / 1e12,
                r.bytes / r.seconds / 1e9, 100.0 * r.bytes / r.seconds / peak.bytes,
                peak.bytes / 1e9);
    std::fflush(stdout);
    return true;
  };
  bool ok = true;
  {
    Result r;
    ok &= run(bench.Decode("single_stream", 1, 128, quick ? 32 : 256, &r), r);
  }
  for (int B : {1, 8, 64, 256}) {
    Result r;
    ok &= run(bench.Decode("decode_batch", B, 128, quick ? 8 : 64, &r), r);
  }
  {
    Result r;
    ok &= run(bench.Prefill(2048, quick ? 2 : 10, &r), r);
  }
  // Chained steps: the device goes from one step to the next without waiting for the host.
  {
    Result r;
    ok &= run(bench.Decode("single_stream_chained", 1, 128, quick ? 32 : 256, &r, Bench::Pick::kChained), r);
  }
  for (int B : {64, 256}) {
    Result r;
    ok &= run(bench.Decode("decode_batch_chained", B, 128, quick ? 8 : 64, &r, Bench::Pick::kChained), r);
  }
  // A long context, where splitting a token's positions over blocks matters.
  {
    Result r;
    ok &= run(bench.Decode("single_stream_ctx2000", 1, 2000, quick ? 16 : 128, &r), r);
  }
  // What drawing on the device saves: the logits' trip to the host and the host's draw.
  for (int B : {64, 256}) {
    Result r;
    ok &= run(bench.Decode("decode_sampled_dev", B, 128, quick ? 8 : 64, &r, Bench::Pick::kDeviceDraw), r);
  }
  {
    Result r;
    ok &= run(bench.Decode("decode_sampled_host", 64, 128, quick ? 8 : 32, &r, Bench::Pick::kHostDraw), r);
  }
  // One request of 64 needing its logits on the host (logprobs): the others still drawn on the
  // device, one row copied back (a mixed step), against decode_sampled_dev and _host at 64.
  {
    Result r;
    ok &= run(bench.Decode("decode_mixed", 64, 128, quick ? 8 : 32, &r, Bench::Pick::kMixed), r);
  }
  // Every row with penalties: their entries built on the host and applied on the device, against
  // decode_sampled_dev at 64 (until 2026-12-05 such a step went all to the host).
  {
    Result r;
    ok &= run(bench.Decode("decode_penalized", 64, 128, quick ? 8 : 32, &r, Bench::Pick::kDevicePenalized), r);
  }
  // Every row's logprobs (5 alternatives) on the device, against decode_sampled_dev at 64 (until
  // 2026-12-05 such a step went all to the host).
  {
    Result r;
    ok &= run(bench.Decode("decode_logprobs", 64, 128, quick ? 8 : 32, &r, Bench::Pick::kDeviceLogprobs), r);
  }
  // Every row's grammar mask applied on the device, against decode_sampled_dev at 64 (until
  // 2026-12-06 a constrained row's logits came back and were masked and drawn on the host).
  {
    Result r;
    ok &= run(bench.Decode("decode_masked", 64, 128, quick ? 8 : 32, &r, Bench::Pick::kDeviceMasked), r);
  }
  // Top-p over the whole vocabulary: the device bisects the row; the host sorts a growing prefix
  // after an exp of every logit.
  for (int B : {64, 256}) {
    Result r;
    ok &= run(bench.Decode("decode_top_p_dev", B, 128, quick ? 8 : 32, &r, Bench::Pick::kDeviceNucleus), r);
  }
  {
    Result r;
    ok &= run(bench.Decode("decode_top_p_host", 64, 128, quick ? 4 : 8, &r, Bench::Pick::kHostNucleus), r);
  }
  // The choices still to be settled by measurement: the products' path at mid batch sizes
  // (fused matrix-vector kernels vs cuBLAS) and the prefill attention (FMA vs tensor cores).
  {
    CudaBackendOptions o2 = opt;
    o2.gemm_min_tokens = 0;
    auto mv = CudaBackend::Create(file, o2);
    if (mv.ok() && (*mv)->InitKvCache(kBlock, 64 * ((128 + 64 + 3 + kBlock) / kBlock + 1) + 64).ok()) {
      Bench b2(mv->get(), quick);
      for (int B : {8, 32, 64}) {
        Result r;
        ok &= run(b2.Decode("decode_matvec_only", B, 128, quick ? 8 : 64, &r), r);
      }
    }
  }
  {
    CudaBackendOptions o3 = opt;
    o3.tensor_core_attention = true;
    auto tc = CudaBackend::Create(file, o3);
    if (tc.ok() && (*tc)->InitKvCache(kBlock, 2048 / kBlock + 1).ok()) {
      Bench b3(tc->get(), quick);
      Result r;
      ok &= run(b3.Prefill(2048, quick ? 2 : 10, &r, "_tc_attention"), r);
    }
  }
  // Single stream with the quantizer launches back (MatVecFrom off): what computing the
  // activations inside the products gains where kernels, not bytes, set the pace.
  {
    CudaBackendOptions o5 = opt;
    o5.fused_activations = false;
    auto uf = CudaBackend::Create(file, o5);
    if (uf.ok() && (*uf)->InitKvCache(kBlock, blocks).ok()) {
      Bench b5(uf->get(), quick);
      Result r;
      ok &= run(b5.Decode("single_stream_unfused", 1, 128, quick ? 32 : 256, &r), r);
    }
  }
  // Programmatic dependent launch inside the decode graphs (off by default until timed here).
  {
    CudaBackendOptions o6 = opt;
    o6.programmatic_launch = true;
    auto pd = CudaBackend::Create(file, o6);
    if (pd.ok() && (*pd)->InitKvCache(kBlock, blocks).ok()) {
      Bench b6(pd->get(), quick);
      Result r;
      ok &= run(b6.Decode("single_stream_pdl", 1, 128, quick ? 32 : 256, &r), r);
      std::printf("single_stream_pdl: %d of %d kernels wait programmatically\n",
                  (*pd)->last_graph_programmatic_edges(), (*pd)->last_graph_kernels());
      ok &= run(b6.Decode("decode_batch_pdl", 64, 128, quick ? 8 : 64, &r), r);
    }
  }
  // Chained steps with one stream (uploads and the ids' copy back between two steps' kernels),
  // against single_stream_chained and decode_batch_chained at 256: what the copy stream gains.
  {
    CudaBackendOptions o7 = opt;
    o7.copy_stream = false;
    auto os = CudaBackend::Create(file, o7);
    if (os.ok() && (*os)->InitKvCache(kBlock, blocks).ok()) {
      Bench b7(os->get(), quick);
      Result r;
      ok &= run(b7.Decode("single_stream_chained_one_stream", 1, 128, quick ? 32 : 256, &r, Bench::Pick::kChained), r);
      ok &= run(b7.Decode("decode_batch_chained_one_stream", 256, 128, quick ? 8 : 64, &r, Bench::Pick::kChained), r);
    }
  }
  // Batch invariance (--batch-invariant on CUDA): what its kernels cost against the defaults
  // (single_stream, single_stream_ctx2000, decode_batch at 64, prefill_2048).
  {
    CudaBackendOptions o8 = opt;
    o8.batch_invariant = true;
    auto bi = CudaBackend::Create(file, o8);
    if (bi.ok() && (*bi)->InitKvCache(kBlock, std::max(blocks, 2048 / kBlock + 1)).ok()) {
      Bench b8(bi->get(), quick);
      Result r;
      ok &= run(b8.Decode("single_stream_batch_invariant", 1, 128, quick ? 32 : 256, &r), r);
      ok &= run(b8.Decode("single_stream_ctx2000_batch_invariant", 1, 2000, quick ? 16 : 128, &r), r);
      ok &= run(b8.Decode("decode_batch_batch_invariant", 64, 128, quick ? 8 : 64, &r), r);
      ok &= run(b8.Prefill(2048, quick ? 2 : 5, &r, "_batch_invariant"), r);
    }
  }
  // The decode attention before shared K/V reads and splits (one block per token and head):
  // what they gain.
  {
    CudaBackendOptions o4 = opt;
    o4.shared_kv_decode = false;
    auto ph = CudaBackend::Create(file, o4);
    if (ph.ok() && (*ph)->InitKvCache(kBlock, std::max(blocks, 2048 / kBlock + 1)).ok()) {
      Bench b4(ph->get(), quick);
      Result r;
      ok &= run(b4.Decode("single_stream_per_head_attn", 1, 128, quick ? 32 : 256, &r), r);
      ok &= run(b4.Decode("single_stream_ctx2000_per_head_attn", 1, 2000, quick ? 16 : 128, &r), r);
      ok &= run(b4.Decode("decode_batch_per_head_attn", 256, 128, quick ? 8 : 64, &r), r);
    }
  }
  if (!json.empty()) {
    FILE* out = std::fopen(json.c_str(), "w");
    if (!out) {
      std::fprintf(stderr, "cannot write %s\n", json.c_str());
      return 1;
    }
    std::fprintf(out, "{\n  \"device\": \"%s\", \"sm_count\": %d, \"l2_bytes\": %lld,\n", d.name.c_str(),
                 d.sm_count, static_cast<long long>(d.l2_bytes));
    std::fprintf(out, "  \"model\": \"%s\", \"note\": \"%s\", \"params\": %.0f, \"weight_bytes_per_step\": %zu,\n",
                 model.c_str(), note.c_str(), bench.params(), be->weight_bytes_per_token());
    std::fprintf(out, "  \"fp16_copy_bytes\": %lld, \"weight_bytes_read_batch_256\": %zu,\n",
                 static_cast<long long>(be->fp16_copy_bytes()), be->WeightBytesRead(256, 256));
    std::fprintf(out,
                 "  \"graphs_captured\": %d, \"peak_flops\": %.0f, \"peak_bytes_per_s\": %.0f, "
                 "\"peak_source\": \"%s\", \"reported_bytes_per_s\": %.0f,\n",
                 be->graphs_captured(), peak.flops, peak.bytes, peak.source.c_str(), reported_bytes);
    std::fprintf(out, "  \"results\": [\n");
    for (size_t i = 0; i < results.size(); ++i) {
      const Result& r = results[i];
      std::fprintf(out,
                   "    {\"name\": \"%s\", \"batch\": %d, \"tokens\": %d, \"seconds\": %.6f, \"tokens_per_s\": %.1f, "
                   "\"flops\": %.4g, \"tflops_per_s\": %.4f, \"bytes\": %.4g, \"gb_per_s\": %.2f}%s\n",
                   r.name.c_str(), r.batch, r.tokens, r.seconds, r.tok_s(), r.flops,
                   r.flops / r.seconds / 1e12, r.bytes, r.bytes / r.seconds / 1e9,
                   i + 1 < results.size() ? "," : "");
    }
    std::fprintf(out, "  ]\n}\n");
    std::fclose(out);
  }
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace kinfer

int main(int argc, char** argv) { return kinfer::Main(argc, argv); }
