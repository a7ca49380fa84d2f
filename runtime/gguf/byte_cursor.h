// ByteCursor: bounds-checked little-endian reads over a byte buffer (internal to runtime/gguf).
//
// Every read checks the remaining length first, so a truncated or lying input yields a DATA_LOSS
// Status naming what was being read and at which byte offset; nothing is read out of bounds.
// Thread safety: a plain value; one cursor per parsing thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>

#include "common/status.h"

namespace kinfer::gguf_internal {

class ByteCursor {
 public:
  ByteCursor(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  size_t pos() const { return pos_; }
  size_t size() const { return size_; }
  size_t remaining() const { return size_ - pos_; }

  // Reads one little-endian scalar (the project only targets little-endian hosts).
  template <typename T>
  Status Read(T* out, std::string_view what) {
    static_assert(std::is_trivially_copyable_v<T>);
    KINFER_RETURN_IF_ERROR(Need(sizeof(T), what));
    std::memcpy(out, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::Ok();
  }

  // Reads a GGUF string: uint64 length, then that many bytes (not NUL-terminated). The length is
  // checked against the remaining bytes before anything is allocated.
  Status ReadString(std::string* out, std::string_view what) {
    const size_t at = pos_;
    uint64_t len = 0;
    KINFER_RETURN_IF_ERROR(Read(&len, what));
    if (len > remaining()) {
      pos_ = at;
      return DataLoss("offset " + std::to_string(at) + ": " + std::string(what) + " length " +
                      std::to_string(len) + " exceeds the " + std::to_string(size_ - at - 8) +
                      " bytes left in the file");
    }
    out->assign(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return Status::Ok();
  }

 private:
  Status Need(size_t n, std::string_view what) const {
    if (n <= remaining()) return Status::Ok();
    return DataLoss("offset " + std::to_string(pos_) + ": file truncated reading " +
                    std::string(what) + " (need " + std::to_string(n) + " bytes, " +
                    std::to_string(remaining()) + " left)");
  }

  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace kinfer::gguf_internal
