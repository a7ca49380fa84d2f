// HugePageMemory: anonymous memory whose start is aligned to 2 MiB and advised for transparent
// huge pages (MADV_HUGEPAGE), for buffers that are streamed end to end every step (the model's
// weights, the bandwidth probe's buffer), where 4 KiB pages cost a TLB miss every 4 KiB.
//
// The advice is only advice: with the kernel's transparent_hugepage setting at `never` the memory
// is ordinary pages. Pages are not touched here (first touch places them).
//
// Thread safety: an owner type like std::unique_ptr; data() may be read from any thread.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"

namespace kinfer {

class HugePageMemory {
 public:
  // At least `bytes` (> 0) of zeroed, writable memory. RESOURCE_EXHAUSTED with the reason when
  // the mapping fails.
  static StatusOr<HugePageMemory> Map(size_t bytes);

  HugePageMemory(HugePageMemory&& other) noexcept;
  HugePageMemory& operator=(HugePageMemory&& other) noexcept;
  HugePageMemory(const HugePageMemory&) = delete;
  HugePageMemory& operator=(const HugePageMemory&) = delete;
  ~HugePageMemory();

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }  // the bytes asked for
  // No writes from here on (mprotect PROT_READ; a failure leaves it writable).
  void MakeReadOnly();

 private:
  HugePageMemory() = default;
  void* mapping_ = nullptr;  // what munmap gets
  size_t mapping_size_ = 0;
  uint8_t* data_ = nullptr;  // 2 MiB aligned, inside the mapping
  size_t size_ = 0;
};

}  // namespace kinfer
