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

#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/backend/cpu/chunk_queue.h"
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

// One sequence's part of a batched step (ForwardBatch): its new tokens at positions
// [pos0, pos0 + tokens.size()) and its block table in the PagedKvCache, which must cover
// positions [0, pos0 + tokens.size()) (rows before pos0 hold its earlier keys and values).
struct SequenceBatch {
  std::span<const int32_t> tokens;
  int pos0 = 0;
  std::span<const int32_t> blocks;
  bool want_logits = true;  // the logits of its last token (of its last num_logits tokens)
  // With want_logits: how many of its last tokens get a logits row (speculative decoding
  // verifies k drafted tokens plus one in a step, so it needs k + 1 rows). 1..tokens.size().
  int num_logits = 1;
  ForwardMode mode = ForwardMode::kPrompt;
  // When >= 0, llama.cpp's numerics are chosen per position instead of per call: positions below
  // prompt_len take the prompt path, later ones (generated tokens) the decode path. Then a token
  // computes the same whatever chunk or step it lands in (the batching engine's rule: a prompt
  // split by chunked prefill or a sequence recomputed after preemption matches one run alone).
  int prompt_len = -1;
};

// Reading a llama GGUF's tensors with the checks every backend applies (errors name the tensor):
// a 2-D weight of shape [cols, rows] (ne[0] = input width) of a type this runtime reads, whole
// blocks per row, as a view into the file;
StatusOr<WeightMatrix> ReadWeightMatrix(const GgufFile& f, const std::string& name, int64_t cols,
                                        int64_t rows);
// and a norm vector of n F32 / F16 / BF16 values, as floats.
StatusOr<std::vector<float>> ReadNormVector(const GgufFile& f, const std::string& name, int64_t n);

// The rules every backend's ForwardBatch checks, with the messages it returns: a non-empty step
// of at most max_tokens tokens in all; per sequence, tokens present and inside [0, n_vocab), a
// non-negative pos0, a block table that covers [0, pos0 + tokens) with blocks inside
// [0, num_blocks), and num_logits in 1..tokens when want_logits. On success *rows is the number of
// logits rows the step returns. INVALID_ARGUMENT naming the sequence otherwise.
Status ValidateSequenceBatches(std::span<const SequenceBatch> seqs, int n_vocab, int block_size,
                               int num_blocks, int64_t max_tokens, size_t* rows);

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

  // A batched step over several sequences sharing a paged cache (the continuous-batching
  // engine's call): one pass of matrix-matrix products over all the sequences' tokens together,
  // RoPE at each token's own position, keys and values written through each block table, and
  // attention of each token over its own sequence's positions only. Logits: num_logits rows of
  // n_vocab per sequence with want_logits (its last num_logits tokens, in position order), in
  // sequence order.
  // INVALID_ARGUMENT for an empty step, more than kMaxBatch tokens in all, an id outside the
  // vocabulary, a block table too short for its positions or naming a block outside the cache,
  // or a cache whose shape is not this model's. A sequence's tokens go through the same per-row
  // kernels as alone, but the matrix products see all the step's rows: a batch of 4 or more rows
  // takes the register-blocked GEMM, whose fp32 summation order differs from the matrix-vector
  // kernel's, so logits can differ in the last bits from a one-sequence run (docs/batching.md).
  Status ForwardBatch(std::span<const SequenceBatch> seqs, PagedKvCache* cache,
                      std::vector<float>* logits);
  // A paged cache shaped for this model.
  std::unique_ptr<PagedKvCache> NewPagedKvCache(int block_size, int num_blocks) const;

  static constexpr int kMaxBatch = 512;

  // A step in which every sequence advances by one token (decode steps; up to kMaxMatVecTokens
  // sequences, where the general path too would run the matrix-vector kernels) runs the whole
  // forward pass as one thread-pool job, five barriers a layer, instead of the general path's
  // jobs and barriers per product, and hands rows out in chunks (ChunkQueue) so that a slow
  // worker does not hold the other at the barrier; same kernels, same inputs, same bits. false
  // sends such steps through the general path (for tests that compare the two, and benchmarks).
  void set_one_token_step(bool on) { one_token_step_ = on; }

 private:
  struct Layer {
    std::vector<float> attn_norm;
    std::vector<float> ffn_norm;
    WeightMatrix wq, wk, wv, wo, w_gate, w_up, w_down;
  };

  // One sequence's slice of a step, as the kernels see it.
  struct Segment {
    const int32_t* tokens = nullptr;
    int n = 0;
    int pos0 = 0;
    const int32_t* blocks = nullptr;
    int logits_from = 0;  // logits for tokens [logits_from, n); n = none
    // Positions below this take llama.cpp's batch path (attention probabilities rounded to FP16,
    // see Attention); positions at or above it the single-token path.
    int round_below = 0;
    void round_probs_all(bool on) { round_below = on ? std::numeric_limits<int>::max() : 0; }
  };

  LlamaModel(std::shared_ptr<const GgufFile> file, LlamaHParams hp, int n_threads);
  // Runs the segments (at most kMaxBatch tokens in all) through every layer, writing keys and
  // values through `kv`, and the wanted logits rows, segment by segment, to logits_out.
  void RunSegments(std::span<const Segment> segs, const KvLayout& kv, float* logits_out);
  void Attention(int layer, std::span<const Segment> segs, const KvLayout& kv);
  // The one-token step (set_one_token_step): whether these segments take it, and the step, every
  // layer inside one pool_.Run.
  bool TakesOneTokenStep(std::span<const Segment> segs) const;
  void RunOneTokenStep(std::span<const Segment> segs, const KvLayout& kv, float* logits_out);
  // Worker ith's attention of step token g's head h over its segment's positions [0, pos],
  // into attn_, with ith's part of scores_ (ReserveScores(max_pos) first, max_pos > pos).
  void AttendHead(int layer, int g, int h, const Segment& sg, const KvLayout& kv, int ith);
  void ReserveScores(int max_pos);

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
  std::vector<int> tok_seg_, tok_local_;  // per token of a step: its segment and index in it
  // The one-token step's: RoPE angles of each token's position, and each worker's own residual
  // stream, its normed copy and its quantized activations ([token][...]).
  std::vector<float> rope_cos_, rope_sin_;
  struct alignas(64) WorkerVectors {
    std::vector<float> x, xn;
    AlignedBuffer act[3];
  };
  std::vector<WorkerVectors> worker_vectors_;
  std::vector<ChunkQueue> chunk_queues_;  // the step's phases' (n_layer x 5, then the output)
  bool one_token_step_ = true;
};

}  // namespace kinfer
