// kinfer-engine-overhead: what the engine thread itself costs per step, over a backend that
// computes nothing (NullBackend below: no weights, no KV cache; a step returns at once).
//
//   kinfer-engine-overhead --model FILE [--backend null|cpu|cuda] [--batch 1,64,256]
//                          [--tokens 128] [--modes device_greedy,device_sampled,host_sampled]
//                          [--device-us 0] [--overlap on|off] [--plan-ahead auto|on|off]
//                          [--chain auto|on|off] [--stream-interval 1] [--json OUT]
//
// --backend null (the default) measures the engine alone; cpu and cuda (CreateBackend) the engine
// over a real backend, where the time per step is the whole step's (scripts/gpu-check.sh runs
// both on the GPU machine). --device-us N gives the null backend a simulated device that takes
// N us a sampling step, to measure how much of the engine's time the EventPump takes off the
// step's path (EngineOptions::overlap_streaming; --overlap off: the engine thread pushes), and
// how much planning each step while the one before is computed takes off it
// (EngineOptions::plan_ahead; auto: on over an asynchronous backend, CUDA or --device-us > 0),
// and launching it behind the one in flight before that one's tokens are back
// (EngineOptions::chain_steps; the simulated device then starts it when the one before ends).
// --stream-interval N has each stream event carry N tokens (EngineOptions::stream_interval):
// fewer events to push and fewer reader wake-ups; the "events/req" column counts what a reader
// received.
//
// For each batch size B, B requests (one chat prompt, ignore_eos, `tokens` tokens each) are
// submitted at once and read by B threads, as the HTTP handlers read them. Three ways a step's
// tokens are chosen:
//   device_greedy   ForwardBatchSample, greedy rows (on CUDA only the ids cross PCIe)
//   device_sampled  ForwardBatchSample, llama.cpp's defaults (temperature 0.8, top-k 40, top-p
//                   0.95, min-p 0.05)
//   host_sampled    the same settings with EngineOptions::backend_sampling off: every logits
//                   row (n_vocab floats) is copied to the engine and drawn there
//   device_penalized  device_sampled with frequency and presence penalties 0.5 and a repetition
//                   penalty 1.1 over the last 64 tokens: the engine lists each row's entries
//                   every step (LogitAdjustments; not in the default --modes)
//   device_logprobs   device_sampled with logprobs and 5 alternatives a token, reported by the
//                   backend and turned into each event's logprobs (not in the default --modes)
//   device_spec     device_sampled with prompt-lookup speculation (3 draft tokens): each
//                   request's draft rows are drawn with their draft to verify (DrawParams::draft)
//                   and only ids come back (not in the default --modes)
//   device_json_mix device_sampled with one request in 8 in JSON mode: its rows' masks go with
//                   the draw (DrawParams::mask), built on the host each step (not in the
//                   default --modes). The null backend's token is not one JSON mode allows, so
//                   each mask is the first one, from the constraint's cache: the figure counts
//                   building the masks' words, not walking the grammar
//   host_spec       the same with backend_sampling off: every request's 4 rows reach the engine,
//                   which verifies them (Sampler::Verify). In both, the null backend's text
//                   cycles through 4 tokens, each row putting almost all its mass on the next,
//                   so every draft is accepted either way and a full step has 4 rows a request
//                   ("full steps" count those)
// NullBackend checks each step as every backend does (ValidateSequenceBatches), copies one
// logits row per sampled sequence on the logits path, and answers a fixed ordinary token.
// Reported per run: engine steps, wall time and tokens/s (ramp-up included), and the median time
// between consecutive steps that held all B requests: the engine's own time per decode step, the
// least a step can take on any device with this engine. Prints a table; --json the figures.
#include <algorithm>
#include <atomic>
#include <functional>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/backend/model_backend.h"
#include "runtime/engine/engine.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/llama_hparams.h"
#include "runtime/tokenizer/tokenizer.h"

namespace kinfer {
namespace {

// Forwards to a backend and records when each step starts and how many logits rows it has.
// Its first step waits until Open(): the run submits every request of the batch first, so that
// they decode together even when the submitting thread is preempted between two submits (with a
// backend that computes nothing, one request can otherwise run to its end before the next
// arrives, and no step holds the whole batch).
class TimedBackend final : public ModelBackend {
 public:
  explicit TimedBackend(std::unique_ptr<ModelBackend> inner) : b_(std::move(inner)) {}
  void Open() {
    open_.store(true);
    open_.notify_all();
  }
  const LlamaHParams& hparams() const override { return b_->hparams(); }
  std::string name() const override { return b_->name(); }
  int max_batch_tokens() const override { return b_->max_batch_tokens(); }
  size_t KvBlockBytes(int block_size) const override { return b_->KvBlockBytes(block_size); }
  int64_t KvMemoryBudgetBytes(double f) const override { return b_->KvMemoryBudgetBytes(f); }
  Status InitKvCache(int block_size, int num_blocks) override {
    return b_->InitKvCache(block_size, num_blocks);
  }
  Status ForwardBatch(std::span<const SequenceBatch> seqs, std::vector<float>* logits) override {
    open_.wait(false);
    const auto t = std::chrono::steady_clock::now();
    Status st = b_->ForwardBatch(seqs, logits);
    calls_.push_back(Call{t, std::chrono::steady_clock::now(),
                          logits->size() / static_cast<size_t>(hparams().n_vocab)});
    return st;
  }
  bool CanSample(const DrawParams& p) const override { return b_->CanSample(p); }
  Status ForwardBatchSample(std::span<const SequenceBatch> seqs, std::span<const DrawParams> draws,
                            std::vector<int32_t>* tokens) override {
    open_.wait(false);
    const auto t = std::chrono::steady_clock::now();
    Status st = b_->ForwardBatchSample(seqs, draws, tokens);
    calls_.push_back(Call{t, std::chrono::steady_clock::now(), draws.size()});
    return st;
  }
  Status LaunchSample(std::span<const SequenceBatch> seqs,
                      std::span<const DrawParams> draws) override {
    open_.wait(false);
    calls_.push_back(Call{std::chrono::steady_clock::now(), {}, draws.size()});
    return b_->LaunchSample(seqs, draws);
  }
  Status LaunchSampleChained(std::span<const SequenceBatch> seqs, std::span<const DrawParams> draws,
                             std::span<const int32_t> chain) override {
    Status st = b_->LaunchSampleChained(seqs, draws, chain);
    if (st.ok()) calls_.push_back(Call{std::chrono::steady_clock::now(), {}, draws.size()});
    return st;
  }
  bool LaunchIsAsync() const override { return b_->LaunchIsAsync(); }
  Status FinishSample(std::vector<int32_t>* tokens) override {
    Status st = b_->FinishSample(tokens);
    // The earliest launched step not yet finished (a chained one may have been launched since).
    while (unfinished_ < calls_.size() && calls_[unfinished_].done.time_since_epoch().count() != 0) {
      ++unfinished_;
    }
    if (unfinished_ < calls_.size()) calls_[unfinished_++].done = std::chrono::steady_clock::now();
    return st;
  }
  int64_t steps() const { return static_cast<int64_t>(calls_.size()); }
  // Medians over consecutive steps that both had `rows` logits rows (every request running):
  // the time between their starts (the time per step at that batch size), and the time from
  // one step's results to the next step's start (the host's work that the device waits for).
  double MedianIntervalSeconds(size_t rows) const {
    return Median(rows, [](const Call& a, const Call& b) { return b.t - a.t; });
  }
  // (A chained step is launched before the results of the one before: no gap.)
  double MedianGapSeconds(size_t rows) const {
    return Median(rows, [](const Call& a, const Call& b) {
      return std::max(b.t - a.done, std::chrono::steady_clock::duration::zero());
    });
  }
  size_t full_steps(size_t rows) const {
    size_t n = 0;
    for (const Call& c : calls_) n += c.rows == rows ? 1 : 0;
    return n;
  }

 private:
  struct Call {
    std::chrono::steady_clock::time_point t, done;  // started; its results back
    size_t rows;
  };
  template <typename F>
  double Median(size_t rows, F span) const {
    std::vector<double> d;
    for (size_t i = 1; i < calls_.size(); ++i) {
      if (calls_[i].rows == rows && calls_[i - 1].rows == rows) {
        d.push_back(std::chrono::duration<double>(span(calls_[i - 1], calls_[i])).count());
      }
    }
    if (d.empty()) return 0;
    std::nth_element(d.begin(), d.begin() + d.size() / 2, d.end());
    return d[d.size() / 2];
  }
  std::unique_ptr<ModelBackend> b_;
  std::atomic<bool> open_{false};
  std::vector<Call> calls_;  // the engine thread's; read after the engine is gone
  size_t unfinished_ = 0;    // calls_ before it have their results
};

// With device_us > 0 a sampling step also takes that long on a simulated device:
// FinishSample waits until the launch plus device_us, as a real device's stream would.
class NullBackend final : public ModelBackend {
 public:
  // peaked: the text cycles through `token` and the 3 ids after it (the token at position p is
  // the (p mod 4)-th), which prompt lookup drafts 3 tokens ahead; each logits row puts almost all
  // its mass on its position's next token, so the host draws what the device path answers.
  NullBackend(LlamaHParams hp, int32_t token, int device_us, bool peaked)
      : hp_(hp), token_(token), peaked_(peaked), row_(hp.n_vocab),
        device_(std::chrono::microseconds(device_us)) {
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
    Answers(seqs, &answers_);
    logits->resize(rows * row_.size());
    for (size_t r = 0; r < rows; ++r) {
      float* out = logits->data() + r * row_.size();
      std::memcpy(out, row_.data(), row_.size() * sizeof(float));
      if (peaked_) out[answers_[r]] = 60.0f;
    }
    return Status::Ok();
  }
  Status ForwardBatchSample(std::span<const SequenceBatch> seqs, std::span<const DrawParams> draws,
                            std::vector<int32_t>* tokens) override {
    size_t rows = 0;
    KINFER_RETURN_IF_ERROR(Check(seqs, &rows));
    if (draws.size() != rows) return InvalidArgument("draw settings do not match the rows");
    Answers(seqs, tokens);
    for (const DrawParams& d : draws) {  // a report as a device's: the token and its neighbours
      if (!d.wants_logprobs()) continue;
      DrawnLogprobs& o = *d.logprobs_out;
      o.token = token_;
      o.logprob = -0.25f;
      o.rank = 1;
      o.n_top = std::min(d.logprobs, kMaxDrawnLogprobs);
      for (int j = 0; j < o.n_top; ++j) {
        o.top_ids[j] = token_ + j;
        o.top_logprobs[j] = -0.25f - static_cast<float>(j);
      }
    }
    return Status::Ok();
  }
  Status LaunchSample(std::span<const SequenceBatch> seqs,
                      std::span<const DrawParams> draws) override {
    done_at_[0] = std::chrono::steady_clock::now() + device_;
    return ModelBackend::LaunchSample(seqs, draws);
  }
  // The device starts a chained step when the step before it ends (or now, if that is later).
  Status LaunchSampleChained(std::span<const SequenceBatch> seqs, std::span<const DrawParams> draws,
                             std::span<const int32_t> chain) override {
    KINFER_RETURN_IF_ERROR(ModelBackend::LaunchSampleChained(seqs, draws, chain));
    done_at_[1] = std::max(std::chrono::steady_clock::now(), done_at_[0]) + device_;
    return Status::Ok();
  }
  bool LaunchIsAsync() const override { return device_.count() > 0; }
  Status FinishSample(std::vector<int32_t>* tokens) override {
    // As a stream synchronisation waits: polling, yielding the core to runnable threads (CUDA's
    // cudaDeviceScheduleYield; on a machine with spare cores it spins).
    while (std::chrono::steady_clock::now() < done_at_[0]) std::this_thread::yield();
    done_at_[0] = done_at_[1];
    return ModelBackend::FinishSample(tokens);
  }

 private:
  Status Check(std::span<const SequenceBatch> seqs, size_t* rows) {
    return ValidateSequenceBatches(seqs, hp_.n_vocab, block_size_, num_blocks_, max_batch_tokens(),
                                   rows);
  }
  // Each logits row's token: token_, or (peaked) the cycle's token after the row's position.
  void Answers(std::span<const SequenceBatch> seqs, std::vector<int32_t>* out) const {
    out->clear();
    for (const SequenceBatch& s : seqs) {
      if (!s.want_logits) continue;
      const int last = s.pos0 + static_cast<int>(s.tokens.size()) - 1;
      for (int p = last - s.num_logits + 1; p <= last; ++p) {
        out->push_back(peaked_ ? token_ + (p + 1) % 4 : token_);
      }
    }
  }
  LlamaHParams hp_;
  int32_t token_;
  bool peaked_;
  std::vector<int32_t> answers_;
  std::vector<float> row_;
  int block_size_ = 16, num_blocks_ = 0;
  std::chrono::microseconds device_;
  std::chrono::steady_clock::time_point done_at_[2];  // the launched steps', earliest first
};

struct Run {
  std::string mode;
  int batch = 0;
  int64_t steps = 0;
  int64_t tokens = 0;
  double seconds = 0;
  size_t full_steps = 0;      // steps with every request in them
  double step_seconds = 0;    // their median interval
  double gap_seconds = 0;     // their median host gap (results back to the next start)
  int64_t steps_ahead = 0;    // steps planned while the one before was computed
  int64_t steps_chained = 0;  // of those, launched before the one before had returned
  int64_t events = 0;         // stream events the readers received, all requests
};

// A fresh backend per run: "null" (peaked for the spec modes), or CreateBackend's device.
using BackendMaker = std::function<StatusOr<std::unique_ptr<ModelBackend>>(bool peaked)>;

// `knobs`: the engine options the flags set (overlap_streaming, plan_ahead, chain_steps,
// stream_interval); the rest are set here.
StatusOr<Run> Measure(const BackendMaker& make, const Tokenizer& tok, int batch, int tokens,
                      const std::string& mode, const EngineOptions& knobs) {
  auto made = make(mode == "device_spec" || mode == "host_spec");
  if (!made.ok()) return made.status();
  TimedBackend backend(std::move(made).value());
  EngineOptions o = knobs;
  o.context_length = 512;
  o.max_running = batch;
  o.max_queued_requests = batch + 1;
  o.max_batch_tokens = 2048;
  o.kv_cache_tokens = int64_t{batch} * 512;
  o.backend_sampling = mode != "host_sampled" && mode != "host_spec";
  const bool spec = mode == "device_spec" || mode == "host_spec";
  if (spec) {
    o.spec.default_on = true;
    o.spec.max_tokens = 3;
  }
  const size_t full_rows = static_cast<size_t>(batch) * (spec ? 4 : 1);
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
  if (mode == "device_logprobs") r.sampling.logprobs = 5;
  if (mode == "device_penalized") {
    r.sampling.frequency_penalty = 0.5f;
    r.sampling.presence_penalty = 0.5f;
    r.sampling.repetition_penalty = 1.1f;
    r.sampling.penalty_last_n = 64;
  }
  Run out;
  out.mode = mode;
  out.batch = batch;
  std::atomic<int64_t> received{0};
  std::atomic<int64_t> events{0};
  {
    Engine engine(&backend, &tok, o);
    const auto t0 = std::chrono::steady_clock::now();
    // Every request first, the backend's first step held until they are all in, then their
    // readers.
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < batch; ++i) {
      GenerationRequest ri = r;
      ri.json_object = mode == "device_json_mix" && i % 8 == 0;
      auto s = engine.Submit(ri);
      if (!s.ok()) {
        std::fprintf(stderr, "submit: %s\n", s.status().ToString().c_str());
        break;
      }
      streams.push_back(*s);
    }
    backend.Open();
    std::vector<std::thread> readers;
    for (const std::shared_ptr<RequestStream>& s : streams) {
      readers.emplace_back([stream = s, &received, &events] {
        StreamEvent ev;
        while (stream->Next(&ev, std::chrono::seconds(60))) {
          received.fetch_add(static_cast<int64_t>(ev.tokens.size()));
          events.fetch_add(1);
          if (ev.finish != FinishReason::kNone) break;
        }
      });
    }
    for (std::thread& t : readers) t.join();
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    out.steps_ahead = engine.Stats().steps_planned_ahead;
    out.steps_chained = engine.Stats().steps_chained;
  }
  out.steps = backend.steps();
  out.tokens = received.load();
  out.events = events.load();
  if (out.tokens != int64_t{batch} * tokens) {
    return Internal("a run streamed " + std::to_string(out.tokens) + " tokens of " +
                    std::to_string(int64_t{batch} * tokens));
  }
  out.full_steps = backend.full_steps(full_rows);
  out.step_seconds = backend.MedianIntervalSeconds(full_rows);
  out.gap_seconds = backend.MedianGapSeconds(full_rows);
  return out;
}

int Main(int argc, char** argv) {
  std::string model, json, backend = "null";
  std::vector<int> batches = {1, 64, 256};
  int tokens = 128;
  int device_us = 0;
  EngineOptions knobs;  // overlap_streaming, plan_ahead, chain_steps, stream_interval
  bool& overlap = knobs.overlap_streaming;
  EngineOptions::PlanAhead& ahead = knobs.plan_ahead;
  EngineOptions::ChainSteps& chain = knobs.chain_steps;
  std::vector<std::string> modes = {"device_greedy", "device_sampled", "host_sampled"};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--model" && i + 1 < argc) {
      model = argv[++i];
    } else if (a == "--backend" && i + 1 < argc) {
      backend = argv[++i];
    } else if (a == "--json" && i + 1 < argc) {
      json = argv[++i];
    } else if (a == "--tokens" && i + 1 < argc) {
      tokens = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--device-us" && i + 1 < argc) {
      device_us = std::max(0, std::atoi(argv[++i]));
    } else if (a == "--overlap" && i + 1 < argc) {
      overlap = std::string(argv[++i]) != "off";
    } else if (a == "--plan-ahead" && i + 1 < argc) {
      const std::string v = argv[++i];
      if (v != "auto" && v != "on" && v != "off") {
        std::fprintf(stderr, "kinfer-engine-overhead: --plan-ahead auto|on|off, not '%s'\n",
                     v.c_str());
        return 2;
      }
      ahead = v == "on"    ? EngineOptions::PlanAhead::kAlways
              : v == "off" ? EngineOptions::PlanAhead::kOff
                           : EngineOptions::PlanAhead::kAuto;
    } else if (a == "--chain" && i + 1 < argc) {
      const std::string v = argv[++i];
      if (v != "auto" && v != "on" && v != "off") {
        std::fprintf(stderr, "kinfer-engine-overhead: --chain auto|on|off, not '%s'\n", v.c_str());
        return 2;
      }
      chain = v == "on"    ? EngineOptions::ChainSteps::kAlways
              : v == "off" ? EngineOptions::ChainSteps::kOff
                           : EngineOptions::ChainSteps::kAuto;
    } else if (a == "--stream-interval" && i + 1 < argc) {
      knobs.stream_interval = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--modes" && i + 1 < argc) {
      modes.clear();
      std::stringstream ss(argv[++i]);
      for (std::string m; std::getline(ss, m, ',');) {
        if (m != "device_greedy" && m != "device_sampled" && m != "host_sampled" &&
            m != "device_penalized" && m != "device_logprobs" && m != "device_spec" &&
            m != "host_spec" && m != "device_json_mix") {
          std::fprintf(stderr, "kinfer-engine-overhead: unknown mode '%s'\n", m.c_str());
          return 2;
        }
        modes.push_back(m);
      }
    } else if (a == "--batch" && i + 1 < argc) {
      batches.clear();
      std::stringstream ss(argv[++i]);
      for (std::string b; std::getline(ss, b, ',');) batches.push_back(std::max(1, std::atoi(b.c_str())));
    } else {
      std::fprintf(
          stderr,
          "usage: kinfer-engine-overhead --model FILE [--backend null|cpu|cuda] "
          "[--batch 1,64,256] [--tokens N] [--modes device_greedy,device_sampled,host_sampled,device_penalized,device_logprobs,"
          "device_spec,host_spec,device_json_mix] "
          "[--device-us N] [--overlap on|off] [--plan-ahead auto|on|off] [--chain auto|on|off] "
          "[--stream-interval N] [--json OUT]\n");
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
  std::shared_ptr<const GgufFile> file(std::move(f).value());
  auto hp = ReadLlamaHParams(*file);
  auto tok = Tokenizer::FromGguf(*file);
  if (!hp.ok() || !tok.ok()) {
    std::fprintf(stderr, "%s\n", (!hp.ok() ? hp.status() : tok.status()).ToString().c_str());
    return 1;
  }
  const int32_t token = (*tok)->Encode(" the", false, false).front();
  const LlamaHParams hparams = *hp;
  BackendMaker make;
  if (backend == "null") {
    make = [&](bool peaked) -> StatusOr<std::unique_ptr<ModelBackend>> {
      return std::unique_ptr<ModelBackend>(new NullBackend(hparams, token, device_us, peaked));
    };
  } else {
    make = [&](bool) { return CreateBackend(backend, file, 2); };
  }
  std::string results;  // JSON objects, comma-separated
  std::printf("%-15s %6s %7s %9s %12s %11s %14s %12s %8s %11s\n", "mode", "batch", "steps",
              "seconds", "tokens/s", "full steps", "ms/full step", "ms host gap", "chained",
              "events/req");
  for (int b : batches) {
    for (const std::string& mode : modes) {
      StatusOr<Run> run = Measure(make, **tok, b, tokens, mode, knobs);
      if (!run.ok()) {
        std::fprintf(stderr, "%s\n", run.status().ToString().c_str());
        return 1;
      }
      const Run& r = *run;
      const double ms = 1e3 * r.step_seconds;
      std::printf("%-15s %6d %7lld %9.3f %12.0f %11zu %14.4f %12.4f %8lld %11.1f\n",
                  r.mode.c_str(), r.batch, static_cast<long long>(r.steps), r.seconds,
                  r.tokens / r.seconds, r.full_steps, ms, 1e3 * r.gap_seconds,
                  static_cast<long long>(r.steps_chained),
                  static_cast<double>(r.events) / r.batch);
      std::fflush(stdout);
      char line[512];
      std::snprintf(line, sizeof line,
                    "%s    {\"mode\": \"%s\", \"batch\": %d, \"steps\": %lld, \"tokens\": %lld, "
                    "\"seconds\": %.6f, \"full_steps\": %zu, \"ms_per_full_step\": %.6f, "
                    "\"ms_host_gap\": %.6f, \"tokens_per_s\": %.1f, \"steps_planned_ahead\": %lld, "
                    "\"steps_chained\": %lld, \"events\": %lld}",
                    results.empty() ? "" : ",\n", r.mode.c_str(), r.batch,
                    static_cast<long long>(r.steps), static_cast<long long>(r.tokens), r.seconds,
                    r.full_steps, ms, 1e3 * r.gap_seconds, r.tokens / r.seconds,
                    static_cast<long long>(r.steps_ahead), static_cast<long long>(r.steps_chained),
                    static_cast<long long>(r.events));
      results += line;
    }
  }
  if (!json.empty()) {
    FILE* out = std::fopen(json.c_str(), "w");
    if (!out) {
      std::fprintf(stderr, "cannot write %s\n", json.c_str());
      return 1;
    }
    std::fprintf(out,
                 "{\n  \"model\": \"%s\", \"backend\": \"%s\", \"tokens_per_request\": %d, "
                 "\"device_us\": %d, \"overlap_streaming\": %s, \"plan_ahead\": \"%s\", "
                 "\"chain\": \"%s\", \"stream_interval\": %d,\n",
                 model.c_str(), backend.c_str(), tokens, device_us, overlap ? "true" : "false",
                 ahead == EngineOptions::PlanAhead::kAlways ? "on"
                 : ahead == EngineOptions::PlanAhead::kOff  ? "off"
                                                            : "auto",
                 chain == EngineOptions::ChainSteps::kAlways ? "on"
                 : chain == EngineOptions::ChainSteps::kOff  ? "off"
                                                             : "auto",
                 knobs.stream_interval);
    std::fprintf(out, "  \"results\": [\n%s\n  ]\n}\n", results.c_str());
    std::fclose(out);
  }
  return 0;
}

}  // namespace
}  // namespace kinfer

int main(int argc, char** argv) { return kinfer::Main(argc, argv); }
