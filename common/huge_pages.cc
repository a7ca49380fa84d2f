#include "common/huge_pages.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

namespace kinfer {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

size_t RoundUp(size_t n) { return (n + kHugePage - 1) / kHugePage * kHugePage; }

}  // namespace

StatusOr<HugePageMemory> HugePageMemory::Map(size_t bytes) {
  const size_t rounded = RoundUp(bytes == 0 ? 1 : bytes);
  const size_t len = rounded + kHugePage;  // room to align the start
  void* m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    return ResourceExhausted("cannot map " + std::to_string(bytes) +
                             " bytes of memory: " + std::strerror(errno));
  }
  HugePageMemory h;
  h.mapping_ = m;
  h.mapping_size_ = len;
  h.data_ = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(m) + kHugePage - 1) &
                                       ~(uintptr_t{kHugePage} - 1));
  h.size_ = bytes;
  (void)madvise(h.data_, rounded, MADV_HUGEPAGE);  // advice only (see the header)
  return h;
}

HugePageMemory::HugePageMemory(HugePageMemory&& other) noexcept
    : mapping_(std::exchange(other.mapping_, nullptr)),
      mapping_size_(std::exchange(other.mapping_size_, 0)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

HugePageMemory& HugePageMemory::operator=(HugePageMemory&& other) noexcept {
  if (this != &other) {
    if (mapping_ != nullptr) munmap(mapping_, mapping_size_);
    mapping_ = std::exchange(other.mapping_, nullptr);
    mapping_size_ = std::exchange(other.mapping_size_, 0);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

HugePageMemory::~HugePageMemory() {
  if (mapping_ != nullptr) munmap(mapping_, mapping_size_);
}

void HugePageMemory::MakeReadOnly() {
  if (data_ != nullptr) (void)mprotect(data_, RoundUp(size_), PROT_READ);
}

}  // namespace kinfer
