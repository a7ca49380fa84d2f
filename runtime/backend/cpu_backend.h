// CpuBackend: the ModelBackend of the CPU: a LlamaModel (its thread pool and kernels) and a
// PagedKvCache in host memory. ForwardBatch is LlamaModel::ForwardBatch, bit for bit.
//
// Thread safety: as ModelBackend (the engine thread calls everything).
#pragma once

#include <memory>
#include <string_view>

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

// The memory this process may still take, in bytes: /proc/meminfo's MemAvailable, lowered to
// what the memory limit of its cgroup leaves when it runs under one (a Kubernetes pod's
// resources.limits.memory; /proc/meminfo shows the node's). 0 when nothing can be read.
int64_t HostMemAvailableBytes();

// The pure part of HostMemAvailableBytes, over the files' texts (empty = absent):
// meminfo = /proc/meminfo; limit, usage, stat = the cgroup's memory.max, memory.current and
// memory.stat (v2) or memory.limit_in_bytes, memory.usage_in_bytes and memory.stat (v1). The
// cgroup leaves limit - working set, where the working set is usage less the inactive file
// pages (`inactive_file`, v1 `total_inactive_file`), as the kubelet counts it for eviction. A
// limit of "max" (v2) or one above the meminfo figure (v1's "no limit" is 2^63 rounded to pages)
// does not lower it.
int64_t MemAvailableFrom(std::string_view meminfo, std::string_view limit, std::string_view usage,
                         std::string_view stat);

}  // namespace kinfer
