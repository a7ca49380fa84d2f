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

namespace {

std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The number after `key` at the start of a line of `text` ("key 123" or "key: 123 kB"); -1 when
// absent.
int64_t FieldOf(std::string_view text, std::string_view key) {
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t eol = std::min(text.find('\n', pos), text.size());
    const std::string_view line = text.substr(pos, eol - pos);
    if (line.size() > key.size() && line.substr(0, key.size()) == key &&
        (line[key.size()] == ' ' || line[key.size()] == ':' || line[key.size()] == '\t')) {
      std::istringstream ss(std::string(line.substr(key.size() + 1)));
      int64_t v = -1;
      if (ss >> v) return v;
      return -1;
    }
    pos = eol + 1;
  }
  return -1;
}

// A lone integer ("12345\n"); -1 for anything else ("max", empty).
int64_t LoneNumber(std::string_view text) {
  std::istringstream ss{std::string(text)};
  int64_t v = -1;
  std::string rest;
  if (!(ss >> v) || (ss >> rest)) return -1;
  return v;
}

// The memory cgroup's directory of this process: v2 ("0::/path" in /proc/self/cgroup, under
// /sys/fs/cgroup) or v1 (the "memory" controller's line, under /sys/fs/cgroup/memory). Inside a
// container with its own cgroup namespace the path is "/" and the root files are its own.
struct CgroupFiles {
  std::string limit, usage, stat;
};
CgroupFiles ReadCgroupMemory() {
  const std::string self = ReadSmallFile("/proc/self/cgroup");
  std::istringstream lines(self);
  std::string line, v1_path, v2_path;
  bool has_v2 = false;
  while (std::getline(lines, line)) {
    const size_t a = line.find(':');
    const size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    const std::string path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && controllers.empty()) {
      has_v2 = true;
      v2_path = path;
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      v1_path = path;
    }
  }
  CgroupFiles f;
  const auto try_dir = [&](const std::string& dir, const char* limit, const char* usage) {
    f.limit = ReadSmallFile(dir + "/" + limit);
    if (f.limit.empty()) return false;
    f.usage = ReadSmallFile(dir + "/" + usage);
    f.stat = ReadSmallFile(dir + "/memory.stat");
    return true;
  };
  if (!v1_path.empty()) {
    if (try_dir("/sys/fs/cgroup/memory" + v1_path, "memory.limit_in_bytes", "memory.usage_in_bytes") ||
        try_dir("/sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.usage_in_bytes")) {
      return f;
    }
  }
  if (has_v2) {
    if (try_dir("/sys/fs/cgroup" + v2_path, "memory.max", "memory.current") ||
        try_dir("/sys/fs/cgroup", "memory.max", "memory.current")) {
      return f;
    }
  }
  return {};
}

}  // namespace

int64_t MemAvailableFrom(std::string_view meminfo, std::string_view limit, std::string_view usage,
                         std::string_view stat) {
  const int64_t kib = FieldOf(meminfo, "MemAvailable");
  int64_t avail = kib >= 0 ? kib * 1024 : 0;
  const int64_t max = LoneNumber(limit);
  const int64_t used = LoneNumber(usage);
  if (max < 0 || used < 0 || (avail > 0 && max >= avail + used)) return avail;
  int64_t inactive = FieldOf(stat, "total_inactive_file");  // v1, hierarchical
  if (inactive < 0) inactive = FieldOf(stat, "inactive_file");
  const int64_t working_set = std::max<int64_t>(0, used - std::max<int64_t>(0, inactive));
  const int64_t left = std::max<int64_t>(0, max - working_set);
  return avail > 0 ? std::min(avail, left) : left;
}

int64_t HostMemAvailableBytes() {
  const CgroupFiles cg = ReadCgroupMemory();
  return MemAvailableFrom(ReadSmallFile("/proc/meminfo"), cg.limit, cg.usage, cg.stat);
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
