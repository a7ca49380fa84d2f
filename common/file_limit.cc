#include "common/file_limit.h"

#include <sys/resource.h>

#include <algorithm>

namespace kinfer {
namespace {

constexpr uint64_t kMostFiles = uint64_t{1} << 20;
constexpr uint64_t kReservedFiles = 128;

uint64_t Finite(rlim_t v) { return v == RLIM_INFINITY ? kMostFiles : static_cast<uint64_t>(v); }

}  // namespace

uint64_t OpenFileLimit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return 1024;
  return Finite(r.rlim_cur);
}

uint64_t RaiseOpenFileLimit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return 1024;
  const uint64_t want = std::min(Finite(r.rlim_max), kMostFiles);
  if (Finite(r.rlim_cur) < want) {
    rlimit raised = r;
    raised.rlim_cur = static_cast<rlim_t>(want);
    if (setrlimit(RLIMIT_NOFILE, &raised) != 0) return Finite(r.rlim_cur);
  }
  return OpenFileLimit();
}

size_t DefaultMaxConnections() {
  const uint64_t files = OpenFileLimit();
  const uint64_t usable = files > kReservedFiles ? (files - kReservedFiles) / 2 : 0;
  return static_cast<size_t>(std::clamp<uint64_t>(usable, 16, 65536));
}

}  // namespace kinfer
