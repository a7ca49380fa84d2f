// CpuBackend: the ModelBackend of the CPU: a LlamaModel (its thread pool and kernels) and a
// PagedKvCache in host memory. ForwardBatch is LlamaModel::ForwardBatch, bit for bit.
//
// Thread safety: as ModelBackend (the engine thread calls everything).
#pragma once

#include <memory>

#include "runtime/backend/model_backend.h"
#include "runtime/model/kv_cache.h"
#include "runtime/model/llama_model.h"

namespace kinfer {

class CpuBackend final : public ModelBackend {
 public:
  // Loads the model on n_threads workers (LlamaModel::Load's errors).
  static StatusOr<std::unique_ptr<CpuBackend>> Create(std::shared_ptr<const GgufFile> file,
                                                      int n_threads);
  // A backend over a model loaded elsewhere (tests, benchmarks, the draft-model path); `model`
  // must outlive it.
  static std::unique_ptr<CpuBackend> Borrow(LlamaModel* model);

  const LlamaHParams& hparams() const override { return model_->hparams(); }
  std::string name() const override { return "cpu"; }
  int max_batch_tokens() const override { return LlamaModel::kMaxBatch; }
  size_t KvBlockBytes(int block_size) const override;
  int64_t KvMemoryBudgetBytes(double fraction) const override;
  Status InitKvCache(int block_size, int num_blocks) override;
  Status ForwardBatch(std::span<const SequenceBatch> seqs, std::vector<float>* logits) override;

  // The wrapped model and cache (tests, benchmarks). cache() is null before InitKvCache.
  LlamaModel* model() { return model_; }
  PagedKvCache* cache() { return cache_.get(); }

 private:
  CpuBackend(std::unique_ptr<LlamaModel> owned, LlamaModel* model)
      : owned_(std::move(owned)), model_(model) {}
  std::unique_ptr<LlamaModel> owned_;  // null when borrowed
  LlamaModel* model_;
  std::unique_ptr<PagedKvCache> cache_;
};

// MemAvailable of /proc/meminfo in bytes; 0 when it cannot be read.
int64_t HostMemAvailableBytes();

}  // namespace kinfer
