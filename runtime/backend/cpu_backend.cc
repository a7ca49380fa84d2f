#include "runtime/backend/cpu_backend.h"

#include <fstream>
#include <new>
#include <sstream>
#include <string>

namespace kinfer {

StatusOr<std::unique_ptr<CpuBackend>> CpuBackend::Create(std::shared_ptr<const GgufFile> file,
                                                         int n_threads) {
  KINFER_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> model,
                          LlamaModel::Load(std::move(file), n_threads));
  LlamaModel* raw = model.get();
  return std::unique_ptr<CpuBackend>(new CpuBackend(std::move(model), raw));
}

std::unique_ptr<CpuBackend> CpuBackend::Borrow(LlamaModel* model) {
  return std::unique_ptr<CpuBackend>(new CpuBackend(nullptr, model));
}

size_t CpuBackend::KvBlockBytes(int block_size) const {
  const LlamaHParams& hp = model_->hparams();
  return PagedKvCache::BlockBytes(hp.n_layer, hp.n_embd_kv(), block_size);
}

int64_t HostMemAvailableBytes() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemAvailable:", 0) == 0) {
      std::istringstream ss(line.substr(13));
      int64_t kib = 0;
      ss >> kib;
      return kib * 1024;
    }
  }
  return 0;
}

int64_t CpuBackend::KvMemoryBudgetBytes(double fraction) const {
  if (!(fraction > 0.0)) return 0;
  if (fraction > 1.0) fraction = 1.0;
  return static_cast<int64_t>(static_cast<double>(HostMemAvailableBytes()) * fraction);
}

Status CpuBackend::InitKvCache(int block_size, int num_blocks) {
  if (block_size < 1 || num_blocks < 1) {
    return InvalidArgument("KV cache needs block_size >= 1 and num_blocks >= 1, got " +
                           std::to_string(block_size) + " and " + std::to_string(num_blocks));
  }
  cache_.reset();
  try {
    cache_ = model_->NewPagedKvCache(block_size, num_blocks);
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("KV cache of " + std::to_string(num_blocks) + " blocks (" +
                             std::to_string(KvBlockBytes(block_size) * num_blocks) +
                             " bytes) does not fit in host memory");
  }
  return Status::Ok();
}

Status CpuBackend::ForwardBatch(std::span<const SequenceBatch> seqs, std::vector<float>* logits) {
  if (!cache_) return FailedPrecondition("ForwardBatch before InitKvCache");
  return model_->ForwardBatch(seqs, cache_.get(), logits);
}

}  // namespace kinfer
