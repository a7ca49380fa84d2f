// LlamaModel: the weights of a llama-architecture GGUF model and its forward pass on the CPU.
//
//   x = embed(tokens)
//   per layer:  x += Wo * Attn(RoPE(Wq*n(x)), RoPE(Wk*n(x)), Wv*n(x))     n = RMSNorm * weight
//               x += Wdown * (SiLU(Wgate*n(x)) .* Wup*n(x))
//   logits = Wout * n(x)      (Wout = token_embd when the file has no output.weight: tied)
//
// Numerics follow llama.cpp's CPU path so that outputs match it token for token: activations are
// quantized to the weight type's dot-product partner (Q8_1 for Q4_1, ...), keys and values are
// stored in FP16 and queries are rounded to FP16 before Q.K, RoPE angles are computed by the same
// float recurrence, and norms and softmax accumulate in double.
//
// Thread safety: the weights are immutable after Load(); Forward() uses the model's thread pool and
// scratch buffers, so one thread (the engine thread) calls it at a time.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/backend/cpu/matmul.h"
#include "runtime/backend/cpu/thread_pool.h"
#include "runtime/model/kv_cache.h"
#include "runtime/model/llama_hparams.h"

namespace kinfer {

class GgufFile;

// Which of llama.cpp's numerics to follow for a one-token batch: a prompt (batch path: attention
// probabilities rounded to FP16 before they meet V) or a decode step (single-token path: kept in
// FP32). Batches of more than one token always take the batch path. Passing the mode explicitly
// keeps a prompt's last token on the prompt path when a cached prefix leaves only one to compute.
enum class ForwardMode { kPrompt, kDecode };

class LlamaModel {
 public:
  // Validates the architecture, hyper-parameters and every tensor's name, type and shape.
  // Errors name the tensor and what is wrong. The model keeps `file` alive (weights are views).
  static StatusOr<std::unique_ptr<LlamaModel>> Load(std::shared_ptr<const GgufFile> file,
                                                    int n_threads);

  const LlamaHParams& hparams() const { return hp_; }
  int n_threads() const { return pool_.size(); }
  // Bytes of weights read by one decode step (every matrix once), for bandwidth bounds.
  size_t weight_bytes_per_token() const { return weight_bytes_per_token_; }

  // A cache for one sequence of up to `capacity` positions.
  std::unique_ptr<KvCache> NewKvCache(int capacity) const;

  // Runs `tokens` at positions [cache->size(), cache->size() + tokens.size()), appends their keys
  // and values to the cache, and writes logits: for the last token only (logits->size() ==
  // n_vocab) or, with all_logits, for every token ([tokens.size()][n_vocab]).
  // INVALID_ARGUMENT for an empty batch or an id outside the vocabulary, OUT_OF_RANGE when the
  // cache would overflow. Large batches are processed in chunks of kMaxBatch tokens.
  Status Forward(std::span<const int32_t> tokens, KvCache* cache, bool all_logits,
                 std::vector<float>* logits, ForwardMode mode = ForwardMode::kPrompt);

  static constexpr int kMaxBatch = 512;

 private:
  struct Layer {
    std::vector<float> attn_norm;
    std::vector<float> ffn_norm;
    WeightMatrix wq, wk, wv, wo, w_gate, w_up, w_down;
  };

  LlamaModel(std::shared_ptr<const GgufFile> file, LlamaHParams hp, int n_threads);
  Status ForwardChunk(std::span<const int32_t> tokens, KvCache* cache, bool all_logits,
                      float* logits_out, bool decode_step);
  void Attention(int layer, int n_tokens, int pos0, KvCache* cache, bool round_probs);

  std::shared_ptr<const GgufFile> file_;
  LlamaHParams hp_;
  ThreadPool pool_;
  WeightMatrix tok_embd_;
  WeightMatrix output_;
  std::vector<float> output_norm_;
  std::vector<Layer> layers_;
  size_t weight_bytes_per_token_ = 0;

  // Scratch, sized for kMaxBatch tokens; used only inside Forward().
  std::vector<float> x_, xn_, q_, k_, v_, attn_, gate_, up_, ffn_out_, scores_;
};

}  // namespace kinfer
