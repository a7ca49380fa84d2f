// kinfer-forward-bench: single-stream speed of the runtime library on one GGUF model.
//
//   kinfer-forward-bench --model PATH [--threads 2] [--prefill 512] [--decode 128] [--repeats 3]
//                [--load memory|mmap] [--regroup 1|0] [--one-token-step 1|0|ab]
//                [--batch N] [--json OUT]
//
// Measures, best of --repeats after a warm-up:
//   prefill tokens/s : one Forward() over a --prefill-token prompt into an empty KV cache
//   decode tokens/s  : --decode steps of --batch sequences (default 1) of one token each
//                      (ForwardBatch, greedy), after a 16-token prompt each; all sequences' tokens
//   bandwidth        : the machine's read bandwidth with --threads workers, and the decode bound
//                      = bandwidth / weight bytes read per token (a step reads them once for
//                      all its sequences)
// --load: how the weights are held (GgufLoad; kinfer-runtime's --load, default memory).
// --regroup 0: in memory, keep the GGUF layout instead of the CPU kernels' (weight_layout.h), to
// measure what the regrouping buys.
// --one-token-step 0: decode steps through the general path (a pool job per product) instead of
// the one-job step (LlamaModel::set_one_token_step), to measure what that buys; `ab` alternates
// the two step by step in one run and adds each one's median step time (the machine's noise
// then falls on both alike).
// Prints one JSON object (and writes it to --json).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/backend/cpu/bandwidth.h"
#include "runtime/backend/cpu/cpu_features.h"
#include "runtime/backend/cpu/weight_layout.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/llama_model.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

void Usage() {
  std::fprintf(stderr,
               "usage: kinfer-forward-bench --model PATH [--threads N] [--prefill N] [--decode N] "
               "[--repeats N] [--load memory|mmap] [--regroup 1|0] [--one-token-step 1|0|ab] "
               "[--batch N] [--json OUT]\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_path, json_out, load = "memory";
  int threads = 2, prefill = 512, decode = 128, repeats = 3, regroup = 1, one_token_step = 1,
      batch = 1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        Usage();
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--model") model_path = next();
    else if (a == "--threads") threads = std::atoi(next().c_str());
    else if (a == "--prefill") prefill = std::atoi(next().c_str());
    else if (a == "--decode") decode = std::atoi(next().c_str());
    else if (a == "--repeats") repeats = std::atoi(next().c_str());
    else if (a == "--json") json_out = next();
    else if (a == "--load") load = next();
    else if (a == "--regroup") regroup = std::atoi(next().c_str());
    else if (a == "--batch") batch = std::atoi(next().c_str());
    else if (a == "--one-token-step") {
      const std::string v = next();
      one_token_step = v == "ab" ? 2 : std::atoi(v.c_str());
    }
    else {
      Usage();
      return 2;
    }
  }
  if (model_path.empty() || threads < 1 || prefill < 1 || decode < 1 || repeats < 1 || batch < 1 ||
      (load != "memory" && load != "mmap")) {
    Usage();
    return 2;
  }
  // As kinfer-runtime loads it: in memory, with the CPU kernels' weight layout.
  auto file = kinfer::GgufFile::Open(
      model_path, load == "mmap" ? kinfer::GgufLoad::kMmap : kinfer::GgufLoad::kMemory,
      regroup != 0 ? kinfer::GgufPrepareFn(kinfer::PrepareTensorForCpu) : kinfer::GgufPrepareFn());
  if (!file.ok()) {
    std::fprintf(stderr, "kinfer-forward-bench: %s\n", file.status().ToString().c_str());
    return 1;
  }
  std::shared_ptr<const kinfer::GgufFile> shared(std::move(file).value());
  auto model_or = kinfer::LlamaModel::Load(shared, threads);
  if (!model_or.ok()) {
    std::fprintf(stderr, "kinfer-forward-bench: %s\n", model_or.status().ToString().c_str());
    return 1;
  }
  kinfer::LlamaModel& model = **model_or;
  model.set_one_token_step(one_token_step == 1);
  const int vocab = model.hparams().n_vocab;

  // Token ids do not change the cost of a forward pass; a fixed pseudo-random prompt keeps the
  // benchmark independent of the tokenizer.
  const int short_prompt = 16;  // the decode runs' prompt: the first 16 of these tokens
  std::vector<int32_t> prompt(std::max(prefill, short_prompt));
  uint32_t s = 12345;
  for (int32_t& t : prompt) {
    s = s * 1664525u + 1013904223u;
    t = static_cast<int32_t>((s >> 8) % static_cast<uint32_t>(vocab));
  }
  std::vector<float> logits;

  double best_prefill = 1e30;
  for (int r = 0; r <= repeats; ++r) {  // r == 0 is the warm-up
    auto cache = model.NewKvCache(prefill + 8);
    auto t0 = Clock::now();
    kinfer::Status st = model.Forward(std::span<const int32_t>(prompt.data(), prefill),
                                      cache.get(), false, &logits);
    auto t1 = Clock::now();
    if (!st.ok()) {
      std::fprintf(stderr, "kinfer-forward-bench: prefill: %s\n", st.ToString().c_str());
      return 1;
    }
    if (r > 0) best_prefill = std::min(best_prefill, Seconds(t0, t1));
  }

  double best_decode = 1e30;
  std::vector<double> step_s[2];  // per-step seconds ([0] general, [1] one-job under ab)
  // One decode run: `batch` sequences with the same 16-token prompt, then `decode` steps of one
  // token each; returns the steps' seconds, or a negative value on an error. One sequence runs
  // through Forward() on a contiguous cache, several through ForwardBatch() on a paged one.
  auto run_decode = [&](bool record) -> double {
    const int bs = 16;
    const int blocks = (short_prompt + decode + bs) / bs;
    auto contiguous = batch == 1 ? model.NewKvCache(short_prompt + decode + 8) : nullptr;
    auto cache = batch > 1 ? model.NewPagedKvCache(bs, batch * blocks) : nullptr;
    auto forward = [&](std::span<const kinfer::SequenceBatch> seqs) {
      if (batch > 1) return model.ForwardBatch(seqs, cache.get(), &logits);
      return model.Forward(seqs[0].tokens, contiguous.get(), false, &logits, seqs[0].mode);
    };
    std::vector<std::vector<int32_t>> tables(batch);
    std::vector<kinfer::SequenceBatch> step(batch);
    for (int b = 0; b < batch; ++b) {
      for (int k = 0; k < blocks; ++k) tables[b].push_back(b * blocks + k);
      step[b].tokens = std::span<const int32_t>(prompt.data(), short_prompt);
      step[b].blocks = tables[b];
    }
    kinfer::Status st = forward(step);
    if (!st.ok()) {
      std::fprintf(stderr, "kinfer-forward-bench: decode prompt: %s\n", st.ToString().c_str());
      return -1;
    }
    std::vector<int32_t> next(batch);
    auto t0 = Clock::now();
    for (int i = 0; i < decode; ++i) {
      for (int b = 0; b < batch; ++b) {
        const float* row = logits.data() + static_cast<size_t>(b) * vocab;
        next[b] = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
        step[b].tokens = std::span<const int32_t>(&next[b], 1);
        step[b].pos0 = short_prompt + i;
        step[b].mode = kinfer::ForwardMode::kDecode;
      }
      // --one-token-step ab: odd steps one way, even steps the other (same bits either way).
      if (one_token_step == 2) model.set_one_token_step(i % 2 == 1);
      const auto s0 = Clock::now();
      st = forward(step);
      if (record) step_s[one_token_step == 2 ? i % 2 : 0].push_back(Seconds(s0, Clock::now()));
      if (!st.ok()) {
        std::fprintf(stderr, "kinfer-forward-bench: decode: %s\n", st.ToString().c_str());
        return -1;
      }
    }
    return Seconds(t0, Clock::now());
  };
  for (int r = 0; r <= repeats; ++r) {
    const double sec = run_decode(r > 0);
    if (sec < 0) return 1;
    if (r > 0) best_decode = std::min(best_decode, sec);
  }

  kinfer::ThreadPool pool(threads);
  const double bw = kinfer::MeasureReadBandwidthGBs(threads, pool);
  const double weight_bytes = static_cast<double>(model.weight_bytes_per_token());
  const double decode_tok_s = static_cast<double>(batch) * decode / best_decode;
  // Every step reads the weights once, for all its sequences.
  const double bound = batch * bw * 1e9 / weight_bytes;

  nlohmann::json j = {
      {"engine", "kinfer"},
      {"isa", kinfer::ActiveIsaName()},
      {"threads", threads},
      {"load", load},
      {"regroup", regroup != 0},
      {"one_token_step",
       one_token_step == 2 ? nlohmann::json("ab") : nlohmann::json(one_token_step == 1)},
      {"prefill_tokens", prefill},
      {"prefill_tok_s", prefill / best_prefill},
      {"decode_tokens", decode},
      {"batch", batch},
      {"decode_tok_s", decode_tok_s},
      {"weight_bytes_per_token", weight_bytes},
      {"read_bandwidth_gb_s", bw},
      {"decode_bound_tok_s", bound},
      {"decode_fraction_of_bound", decode_tok_s / bound},
  };
  if (one_token_step == 2) {
    auto median_ms = [](std::vector<double> v) {
      std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
      return v[v.size() / 2] * 1e3;
    };
    j["ab_median_step_ms_general"] = median_ms(step_s[0]);
    j["ab_median_step_ms_one_job"] = median_ms(step_s[1]);
  }
  std::cout << j.dump(2) << std::endl;
  if (!json_out.empty()) std::ofstream(json_out) << j.dump(2) << "\n";
  return 0;
}
