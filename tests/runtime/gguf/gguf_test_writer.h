// GgufTestWriter: builds GGUF files in memory for the reader's tests, including invalid ones.
//
// The writer does not validate anything: tests set a bad version, a lying count, n_dims 0 or an
// unaligned offset on purpose. Tensor data is laid out like ggml does (each tensor at the next
// multiple of the alignment after the previous one) unless a tensor names its own offset; the file
// ends right after the last tensor's bytes, so every strict prefix of a file with tensors is
// invalid.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/gguf/gguf_file.h"

namespace kinfer::testing {

// Little-endian byte encoder for metadata values and raw fields.
class Enc {
 public:
  template <typename T>
  Enc& Pod(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    bytes_.insert(bytes_.end(), p, p + sizeof(T));
    return *this;
  }
  Enc& U32(uint32_t v) { return Pod(v); }
  Enc& U64(uint64_t v) { return Pod(v); }
  Enc& Str(std::string_view s) {
    U64(s.size());
    bytes_.insert(bytes_.end(), s.begin(), s.end());
    return *this;
  }
  Enc& Raw(const std::vector<uint8_t>& b) {
    bytes_.insert(bytes_.end(), b.begin(), b.end());
    return *this;
  }
  // Array header: element type and count; the caller appends the elements.
  Enc& ArrayHeader(GgufValueType elem, uint64_t count) {
    return U32(static_cast<uint32_t>(elem)).U64(count);
  }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

struct TestTensor {
  std::string name;
  std::vector<uint64_t> dims;
  uint32_t type = 0;
  std::vector<uint8_t> data;
  std::optional<uint64_t> offset;  // default: next aligned position
  std::optional<uint32_t> n_dims;  // default: dims.size()
};

class GgufTestWriter {
 public:
  uint32_t magic = 0x46554747;
  uint32_t version = 3;
  uint64_t alignment = 32;  // used to lay out data; also written if WriteAlignment() was called
  std::optional<uint64_t> n_tensors_override;
  std::optional<uint64_t> n_kv_override;

  // Adds a key with a value already encoded (without its type id).
  void AddKv(std::string key, GgufValueType type, const Enc& value) {
    AddKvRawType(std::move(key), static_cast<uint32_t>(type), value);
  }
  void AddKvRawType(std::string key, uint32_t type, const Enc& value) {
    Enc e;
    e.Str(key).U32(type).Raw(value.bytes());
    kvs_.push_back(e.bytes());
  }
  void AddU32(std::string key, uint32_t v) {
    AddKv(std::move(key), GgufValueType::kUint32, Enc().U32(v));
  }
  void AddString(std::string key, std::string_view v) {
    AddKv(std::move(key), GgufValueType::kString, Enc().Str(v));
  }
  void WriteAlignment(uint64_t a) {
    alignment = a;
    AddU32("general.alignment", static_cast<uint32_t>(a));
  }

  void AddTensor(TestTensor t) { tensors_.push_back(std::move(t)); }
  // A tensor of `type` with the given dims and deterministic bytes of the right size.
  void AddTensor(std::string name, std::vector<uint64_t> dims, GgmlType type) {
    uint64_t n = 1;
    for (uint64_t d : dims) n *= d;
    const uint64_t bytes = n / GgmlBlockSize(type) * GgmlTypeSize(type);
    TestTensor t{std::move(name), std::move(dims), static_cast<uint32_t>(type), {}, {}, {}};
    t.data.resize(bytes);
    for (size_t i = 0; i < t.data.size(); ++i) t.data[i] = static_cast<uint8_t>(i * 37 + 11);
    // Keep fp16 scales finite: clear the top exponent bit of every byte.
    for (auto& b : t.data) b &= 0xBF;
    tensors_.push_back(std::move(t));
  }

  std::vector<uint8_t> Build() const {
    Enc e;
    e.U32(magic).U32(version);
    e.U64(n_tensors_override.value_or(tensors_.size()));
    e.U64(n_kv_override.value_or(kvs_.size()));
    for (const auto& kv : kvs_) e.Raw(kv);
    std::vector<uint64_t> offsets;
    uint64_t next = 0;
    for (const auto& t : tensors_) {
      const uint64_t off = t.offset.value_or(next);
      offsets.push_back(off);
      next = AlignUp(off + t.data.size());
      e.Str(t.name).U32(t.n_dims.value_or(static_cast<uint32_t>(t.dims.size())));
      for (uint64_t d : t.dims) e.U64(d);
      e.U32(t.type).U64(off);
    }
    std::vector<uint8_t> out = e.bytes();
    if (tensors_.empty()) return out;
    const uint64_t data_start = AlignUp(out.size());
    uint64_t end = data_start;
    for (size_t i = 0; i < tensors_.size(); ++i) {  // data-less (hostile) tensors take no room
      if (tensors_[i].data.empty()) continue;
      end = std::max<uint64_t>(end, data_start + offsets[i] + tensors_[i].data.size());
    }
    out.resize(end, 0);
    for (size_t i = 0; i < tensors_.size(); ++i) {
      if (!tensors_[i].data.empty()) {
        std::memcpy(out.data() + data_start + offsets[i], tensors_[i].data.data(),
                    tensors_[i].data.size());
      }
    }
    return out;
  }

 private:
  uint64_t AlignUp(uint64_t x) const { return (x + alignment - 1) / alignment * alignment; }

  std::vector<std::vector<uint8_t>> kvs_;
  std::vector<TestTensor> tensors_;
};

}  // namespace kinfer::testing
