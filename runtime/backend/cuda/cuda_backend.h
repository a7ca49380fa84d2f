// CudaBackend: the ModelBackend on one NVIDIA GPU (built for Hopper, sm_90).
//
// Device memory, planned up front with plain cudaMalloc (never managed memory), in this order:
//
//   1. weights    every matrix in its GGUF quantized layout (the CPU's bytes), norms as fp32
//   2. fp16 copies dequantized FP16 copies of the matrices for the cuBLAS path, when they take
//                  at most a quarter of the memory left (else one scratch matrix, dequantized
//                  before each large product)
//   3. scratch    activations for max_batch_tokens tokens, quantized activations, the step's
//                  metadata (token ids, positions, slots, block tables), logits for
//                  max_logits_rows rows
//   4. KV cache   InitKvCache: [layer][block][slot][n_embd_kv] FP16 for K and for V, sized by the
//                  engine from KvMemoryBudgetBytes (a fraction of what is free after 1-3)
//
// A step: the host packs the step's metadata into a pinned buffer, one async copy sends it, the
// layers run on one stream, and the wanted logits rows (or their ids) come back into a pinned
// buffer. A step that returns ids can be launched and collected apart (LaunchSample /
// FinishSample), so that the engine streams the previous step's tokens while this one runs. Matrix
// products of fewer than gemm_min_tokens rows run the fused dequantizing kernels (activations
// quantized like the CPU's); larger ones FP16 x FP16 -> FP32 cuBLAS GEMMs on the FP16 copies.
// Pure decode steps (every sequence one token, one logits row) replay a CUDA graph captured per
// batch size on first use.
//
// Thread safety: as ModelBackend: the engine thread calls everything; the stream and all buffers
// belong to the backend.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/backend/model_backend.h"

namespace kinfer {

struct CudaBackendOptions {
  int device = 0;
  int max_batch_tokens = 2048;   // tokens per ForwardBatch (the CPU's limit is 512)
  int max_logits_rows = 256;     // logits rows computed per output pass (more run in passes)
  int gemm_min_tokens = 16;      // products with this many rows or more go through cuBLAS;
                                 // env KINFER_CUDA_GEMM_MIN_TOKENS overrides; 0 = never
  int prefill_min_tokens = 8;    // a sequence with this many tokens in a step takes the tiled
                                 // attention kernel
  bool fp16_weight_copies = true;
  bool tensor_core_attention = false;  // the WMMA prefill attention (env KINFER_CUDA_TC_ATTENTION=1);
                                       // off until a GPU run has checked and timed it
  bool cuda_graphs = true;       // env KINFER_CUDA_GRAPHS=0 turns them off
  // Decode attention with shared K/V reads and split positions (cuda_kernels.h AttentionDecode);
  // false, or env KINFER_CUDA_DECODE_ATTENTION=per_head: one block per (token, head), unsplit.
  bool shared_kv_decode = true;
  // Products on the matrix-vector path compute their own activations (cuda_kernels.h
  // MatVecFrom: RmsNorm or SwiGLU and the quantizer inside the product), 5 kernels a layer in
  // a decode step instead of 8; the same bits either way. Env KINFER_CUDA_FUSED_ACTIVATIONS=0
  // turns it off.
  bool fused_activations = true;
  // Programmatic dependent launch inside the decode graphs (Hopper): every edge from a kernel
  // into one of the backend's own kernels becomes programmatic, so a kernel is launched while
  // the one before it runs and waits on the device for its results (cuda_common.cuh
  // AwaitPrecedingKernels) instead of the next launch waiting for its completion. Edges into
  // cuBLAS's kernels stay ordinary. The same bits either way. Off until a GPU run has timed it
  // (kinfer-gpu-bench's single_stream_pdl); env KINFER_CUDA_PDL=1 turns it on.
  bool programmatic_launch = false;
  // A second stream for each step's uploads (its metadata and draw settings) and its ids' copy
  // back, ordered with the kernels by events: a chained step's upload runs while the step before
  // computes, and that step's ids come back while the chained one computes, so neither copy
  // sits between two steps' kernels. The same bits either way. Env KINFER_CUDA_COPY_STREAM=0
  // turns it off (one stream for everything).
  bool copy_stream = true;
  // Batch invariance (the CPU engine's --batch-invariant): a token's logits do not depend on
  // what else is in its step, on how its prompt was cut into chunks, or on prefix-cache hits
  // and preemption. Every product takes the matrix-vector kernels (no cuBLAS: gemm_min_tokens
  // is 0 and no FP16 copies are made), every token the decode attention kernel (no tiled
  // prefill: prefill_min_tokens is unbounded), its positions split at chunks set by its own
  // position count (cuda_kernels.h InvariantSplitChunk), so their summation order is the
  // token's own. Slower prompts (every weight read once per 8 tokens). Env
  // KINFER_CUDA_BATCH_INVARIANT=1 turns it on.
  bool batch_invariant = false;
};

struct CudaDeviceInfo {
  std::string name;
  int ordinal = 0;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  int64_t l2_bytes = 0;
  int64_t smem_per_block_optin = 0;
  int64_t total_bytes = 0;
  int64_t free_bytes_at_start = 0;
  double mem_clock_khz = 0;
  int mem_bus_bits = 0;
};

class CudaBackend final : public ModelBackend {
 public:
  // FAILED_PRECONDITION "no CUDA device: ..." without a device; INVALID_ARGUMENT / UNIMPLEMENTED
  // for a model the backend cannot run (the message names the tensor); RESOURCE_EXHAUSTED when
  // the weights and scratch do not fit.
  static StatusOr<std::unique_ptr<CudaBackend>> Create(std::shared_ptr<const GgufFile> file,
                                                       const CudaBackendOptions& options = {});
  ~CudaBackend() override;

  const LlamaHParams& hparams() const override;
  std::string name() const override { return "cuda"; }
  size_t KvBlockBytes(int block_size) const override;
  int64_t KvMemoryBudgetBytes(double fraction) const override;
  Status InitKvCache(int block_size, int num_blocks) override;
  Status ForwardBatch(std::span<const SequenceBatch> seqs, std::vector<float>* logits) override;

  // The same step, sampling greedily on the device: tokens gets one id per logits row (the
  // first maximum), and only the ids cross PCIe. The engine's path for all-greedy steps.
  Status ForwardBatchArgmax(std::span<const SequenceBatch> seqs, std::vector<int32_t>* tokens) override;

  // Draws every row on the device (SampleRows: greedy, top-k, top-p, min-p and temperature in
  // any combination, after the row's logit bias and penalties and its token mask:
  // AdjustLogitsRows), so CanSample keeps the default (true).
  Status ForwardBatchSample(std::span<const SequenceBatch> seqs, std::span<const DrawParams> rows,
                            std::vector<int32_t>* tokens) override;
  // Draws the other rows on the device as ForwardBatchSample does, and copies back only the
  // host rows' logits (from the device's logits buffer, pass by pass, outside any graph).
  Status ForwardBatchSampleMixed(std::span<const SequenceBatch> seqs,
                                 std::span<const DrawParams> rows, std::span<const int32_t> host_rows,
                                 std::vector<int32_t>* tokens,
                                 std::vector<float>* host_logits) override;
  // The same step in two halves: LaunchSample packs and uploads the step's metadata, enqueues
  // the layers (or replays the batch size's graph), the draw and the ids' copy back, and
  // returns; FinishSample waits for that step's event and reads the ids. Every other step call
  // is FAILED_PRECONDITION while a step is launched.
  Status LaunchSample(std::span<const SequenceBatch> seqs,
                      std::span<const DrawParams> rows) override;
  // The next step enqueued behind the launched one: a chained token is written into the
  // metadata as -1 - its row, and the embedding kernel reads the row's id from the device
  // buffer the step before drew into. Host buffers alternate between the two steps.
  Status LaunchSampleChained(std::span<const SequenceBatch> seqs, std::span<const DrawParams> rows,
                             std::span<const int32_t> chain) override;
  Status FinishSample(std::vector<int32_t>* tokens) override;
  bool LaunchIsAsync() const override { return true; }
  Status DeviceHealth() override;

  int max_batch_tokens() const override;
  const CudaDeviceInfo& device_info() const;
  // Bytes of quantized weights read by one decode step (every matrix once, as the CPU counts).
  size_t weight_bytes_per_token() const;
  // Bytes of weights the products of a step of `tokens` tokens and `logits_rows` logits rows
  // read: every layer matrix once and the output matrix once per pass of logits rows, each in
  // the form its path reads (quantized for the matrix-vector kernels; the FP16 copy for cuBLAS,
  // or without copies the quantized matrix plus its FP16 scratch written and read). What a
  // benchmark sets against the device's bandwidth.
  size_t WeightBytesRead(int tokens, int logits_rows) const;
  // Device bytes: weights, fp16 copies, scratch; the KV cache.
  int64_t weights_device_bytes() const;
  int64_t fp16_copy_bytes() const;
  int64_t scratch_device_bytes() const;
  int64_t kv_device_bytes() const;
  // Graphs captured so far (one per decode batch size).
  int graphs_captured() const;
  // Kernel nodes of the graph captured last (0 before the first): the launches of one decode
  // step, which bound its time at small batch.
  int last_graph_kernels() const;
  // Programmatic edges of the graph captured last (0 unless programmatic_launch).
  int last_graph_programmatic_edges() const;

  struct Impl;

 private:
  explicit CudaBackend(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kinfer
