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

  const LlamaHParams& hparams() const override { return model_->hparams(); }
  std::string name() const override { return "cpu"; }
  size_t KvBlockBytes(int block_size) const override;
  int64_t KvMemoryBudgetBytes(double fraction) const override;
  Status InitKvCache(int block_size, int num_blocks) override;
  Status ForwardBatch(std::span<const SequenceBatch> seqs, std::vector<float>* logits) override;

  // The wrapped model and cache (tests, benchmarks). cache() is null before InitKvCache.
  LlamaModel* model() { return model_.get(); }
  PagedKvCache* cache() { return cache_.get(); }

 private:
  explicit CpuBackend(std::unique_ptr<LlamaModel> model) : model_(std::move(model)) {}
  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<PagedKvCache> cache_;
};

// MemAvailable of /proc/meminfo in bytes; 0 when it cannot be read.
int64_t HostMemAvailableBytes();

}  // namespace kinfer
