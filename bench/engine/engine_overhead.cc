// kinfer-engine-overhead: what the engine thread itself costs per step, over a backend that
// computes nothing (NullBackend below: no weights, no KV cache; a step returns at once).
//
//   kinfer-engine-overhead --model FILE [--batch 1,64,256] [--tokens 128] [--json OUT]
//
// For each batch size B, B requests (one chat prompt, ignore_eos, `tokens` tokens each) are
// submitted at once and read by B threads, as the HTTP handlers read them. Three ways a step's
// tokens are chosen:
//   device_greedy   ForwardBatchSample, greedy rows (on CUDA only the ids cross PCIe)
//   device_sampled  ForwardBatchSample, llama.cpp's defaults (temperature 0.8, top-k 40, top-p
//                   0.95, min-p 0.05)
//   host_sampled    the same settings with EngineOptions::backend_sampling off: every logits
//                   row (n_vocab floats) is copied to the engine and drawn there
// NullBackend checks each step as every backend does (ValidateSequenceBatches), copies one
// logits row per sampled sequence on the logits path, and answers a fixed ordinary token.
// Reported per run: engine steps, wall time and tokens/s (ramp-up included), and the median time
// between consecutive steps that held all B requests: the engine's own time per decode step, the
// least a step can take on any device with this engine. Prints a table; --json the figures.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/backend/model_backend.h"
#include "runtime/engine/engine.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/llama_hparams.h"
#include "runtime/tokenizer/tokenizer.h"

namespace kinfer {
namespace {

class NullBackend final : public ModelBackend {
 public:
  NullBackend(LlamaHParams hp, int32_t token) : hp_(hp), token_(token), row_(hp.n_vocab) {
    std::mt19937 rng(7);
    std::normal_distribution<float> d(0.0f, 3.0f);
    for (float& x : row_) x = d(rng);
  }
  const LlamaHParams& hparams() const override { return hp_; }
  std::string name() const override { return "null"; }
  int max_batch_tokens() const override { return 2048; }
  size_t KvBlockBytes(int block_size) const override { return 1; }
  int64_t KvMemoryBudgetBytes(double fraction) const override { return 0; }
  Status InitKvCache(int block_size, int num_blocks) override {
    block_size_ = block_size;
    num_blocks_ = num_blocks;
    return Status::Ok();
  }
  Status ForwardBatch(std::span<const SequenceBatch> seqs, std::vector<float>* logits) override {
    size_t rows = 0;
    KINFER_RETURN_IF_ERROR(Check(seqs, &rows));
    logits->resize(rows * row_.size());
    for (size_t r = 0; r < rows; ++r) {
      std::memcpy(logits->data() + r * row_.size(), row_.data(), row_.size() * sizeof(float));
    }
    return Status::Ok();
  }
  Status ForwardBatchSample(std::span<const SequenceBatch> seqs, std::span<const DrawParams> draws,
                            std::vector<int32_t>* tokens) override {
    size_t rows = 0;
    KINFER_RETURN_IF_ERROR(Check(seqs, &rows));
    if (draws.size() != rows) return InvalidArgument("draw settings do not match the rows");
    tokens->assign(rows, token_);
    return Status::Ok();
  }
  int64_t steps() const { return steps_.load(); }
  // The median time between the starts of consecutive steps that both had `rows` logits rows:
  // the engine's own time per step at that batch size, once every request is running.
  double MedianIntervalSeconds(size_t rows) const {
    std::vector<double> d;
    for (size_t i = 1; i < calls_.size(); ++i) {
      if (calls_[i].rows == rows && calls_[i - 1].rows == rows) {
        d.push_back(std::chrono::duration<double>(calls_[i].t - calls_[i - 1].t).count());
      }
    }
    if (d.empty()) return 0;
    std::nth_element(d.begin(), d.begin() + d.size() / 2, d.end());
    return d[d.size() / 2];
  }
  size_t full_steps(size_t rows) const {
    size_t n = 0;
    for (const Call& c : calls_) n += c.rows == rows ? 1 : 0;
    return n;
  }

 private:
  Status Check(std::span<const SequenceBatch> seqs, size_t* rows) {
    const auto now = std::chrono::steady_clock::now();
    steps_.fetch_add(1);
    KINFER_RETURN_IF_ERROR(ValidateSequenceBatches(seqs, hp_.n_vocab, block_size_, num_blocks_,
                                                   max_batch_tokens(), rows));
    calls_.push_back(Call{now, *rows});
    return Status::Ok();
  }
  struct Call {
    std::chrono::steady_clock::time_point t;
    size_t rows;
  };
  std::vector<Call> calls_;  // the engine thread's; read after the engine is gone
  LlamaHParams hp_;
  int32_t token_;
  std::vector<float> row_;
  int block_size_ = 16, num_blocks_ = 0;
  std::atomic<int64_t> steps_{0};
};

struct Run {
  std::string mode;
  int batch = 0;
  int64_t steps = 0;
  int64_t tokens = 0;
  double seconds = 0;
  size_t full_steps = 0;      // steps with every request in them
  double step_seconds = 0;    // their median interval
};

Run Measure(const LlamaHParams& hp, const Tokenizer& tok, int32_t token, int batch, int tokens,
            const std::string& mode) {
  NullBackend backend(hp, token);
  EngineOptions o;
  o.context_length = 512;
  o.max_running = batch;
  o.max_queued_requests = batch + 1;
  o.max_batch_tokens = 2048;
  o.kv_cache_tokens = int64_t{batch} * 512;
  o.backend_sampling = mode != "host_sampled";
  GenerationRequest r;
  r.prompt_tokens = tok.Encode(
      "<|im_start|>user\nWrite a story about a lighthouse keeper.<|im_end|>\n<|im_start|>assistant\n",
      false, true);
  r.max_tokens = tokens;
  r.ignore_eos = true;
  if (mode == "device_greedy") {
    r.sampling.temperature = 0.0f;
  } else {
    r.sampling.temperature = 0.8f;
    r.sampling.top_k = 40;
    r.sampling.top_p = 0.95f;
    r.sampling.min_p = 0.05f;
    r.sampling.seed = 1;
  }
  Run out;
  out.mode = mode;
  out.batch = batch;
  std::atomic<int64_t> received{0};
  {
    Engine engine(&backend, &tok, o);
    const auto t0 = std::chrono::steady_clock::now();
    // Every request first (Submit takes microseconds, so the engine admits them within a step
    // or two), then their readers.
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < batch; ++i) {
      auto s = engine.Submit(r);
      if (!s.ok()) {
        std::fprintf(stderr, "submit: %s\n", s.status().ToString().c_str());
        break;
      }
      streams.push_back(*s);
    }
    std::vector<std::thread> readers;
    for (const std::shared_ptr<RequestStream>& s : streams) {
      readers.emplace_back([stream = s, &received] {
        StreamEvent ev;
        while (stream->Next(&ev, std::chrono::seconds(60))) {
          received.fetch_add(static_cast<int64_t>(ev.tokens.size()));
          if (ev.finish != FinishReason::kNone) break;
        }
      });
    }
    for (std::thread& t : readers) t.join();
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  out.steps = backend.steps();
  out.tokens = received.load();
  out.full_steps = backend.full_steps(static_cast<size_t>(batch));
  out.step_seconds = backend.MedianIntervalSeconds(static_cast<size_t>(batch));
  return out;
}

int Main(int argc, char** argv) {
  std::string model, json;
  std::vector<int> batches = {1, 64, 256};
  int tokens = 128;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--model" && i + 1 < argc) {
      model = argv[++i];
    } else if (a == "--json" && i + 1 < argc) {
      json = argv[++i];
    } else if (a == "--tokens" && i + 1 < argc) {
      tokens = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--batch" && i + 1 < argc) {
      batches.clear();
      std::stringstream ss(argv[++i]);
      for (std::string b; std::getline(ss, b, ',');) batches.push_back(std::max(1, std::atoi(b.c_str())));
    } else {
      std::fprintf(stderr,
                   "usage: kinfer-engine-overhead --model FILE [--batch 1,64,256] [--tokens N] "
                   "[--json OUT]\n");
      return 2;
    }
  }
  if (model.empty()) {
    std::fprintf(stderr, "kinfer-engine-overhead: --model is required\n");
    return 2;
  }
  auto f = GgufFile::Open(model);
  if (!f.ok()) {
    std::fprintf(stderr, "%s\n", f.status().ToString().c_str());
    return 1;
  }
  auto hp = ReadLlamaHParams(**f);
  auto tok = Tokenizer::FromGguf(**f);
  if (!hp.ok() || !tok.ok()) {
    std::fprintf(stderr, "%s\n", (!hp.ok() ? hp.status() : tok.status()).ToString().c_str());
    return 1;
  }
  const int32_t token = (*tok)->Encode(" the", false, false).front();
  nlohmann::json results = nlohmann::json::array();
  std::printf("%-15s %6s %7s %9s %12s %11s %14s\n", "mode", "batch", "steps", "seconds",
              "tokens/s", "full steps", "ms/full step");
  for (int b : batches) {
    for (const char* mode : {"device_greedy", "device_sampled", "host_sampled"}) {
      const Run r = Measure(*hp, **tok, token, b, tokens, mode);
      const double ms = 1e3 * r.step_seconds;
      std::printf("%-15s %6d %7lld %9.3f %12.0f %11zu %14.4f\n", r.mode.c_str(), r.batch,
                  static_cast<long long>(r.steps), r.seconds, r.tokens / r.seconds, r.full_steps,
                  ms);
      std::fflush(stdout);
      results.push_back({{"mode", r.mode},
                         {"batch", r.batch},
                         {"steps", r.steps},
                         {"tokens", r.tokens},
                         {"seconds", r.seconds},
                         {"full_steps", r.full_steps},
                         {"ms_per_full_step", ms},
                         {"tokens_per_s", r.tokens / r.seconds}});
    }
  }
  if (!json.empty()) {
    FILE* out = std::fopen(json.c_str(), "w");
    if (!out) {
      std::fprintf(stderr, "cannot write %s\n", json.c_str());
      return 1;
    }
    const std::string text =
        nlohmann::json{{"model", model}, {"tokens_per_request", tokens}, {"results", results}}.dump(2);
    std::fputs(text.c_str(), out);
    std::fputs("\n", out);
    std::fclose(out);
  }
  return 0;
}

}  // namespace
}  // namespace kinfer

int main(int argc, char** argv) { return kinfer::Main(argc, argv); }
