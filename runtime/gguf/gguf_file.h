// GgufFile: a read-only view of a GGUF v3 (and v2) file, memory-mapped.
//
// Parsing validates everything before handing out a view: header, every metadata key/value (all
// 13 value types, nested arrays), tensor infos (dims, type, offset), alignment, and that each
// tensor's bytes lie inside the file. A truncated, corrupt or hostile file yields a DATA_LOSS /
// INVALID_ARGUMENT Status whose message names the problem and the byte offset; the reader never
// reads out of bounds and never allocates more than the file size justifies.
//
// Thread safety: immutable after Open(); all const methods may be called from any thread.
// Ownership: the GgufFile owns the mapping; every pointer and string_view it returns lives as long
// as the GgufFile.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/status.h"
#include "runtime/gguf/ggml_types.h"

namespace kinfer {

// On-disk ids of metadata value types (gguf_type).
enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

// One metadata value. Arrays hold their element type and the elements (arrays of arrays nest).
struct GgufValue {
  struct Array {
    GgufValueType element_type = GgufValueType::kUint8;
    std::vector<GgufValue> items;
  };
  GgufValueType type = GgufValueType::kUint8;
  std::variant<uint64_t, int64_t, double, bool, std::string, Array> data;

  // Typed accessors: NOT_FOUND-free conversions; INVALID_ARGUMENT when the type does not fit
  // (an integer accessor accepts any integer type whose value is in range).
  StatusOr<int64_t> AsInt() const;
  StatusOr<uint64_t> AsUint() const;
  StatusOr<double> AsFloat() const;  // any numeric type
  StatusOr<bool> AsBool() const;
  StatusOr<std::string> AsString() const;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // ne[0] (innermost, contiguous) first; 1..4 dims
  GgmlType type = GgmlType::kF32;
  uint64_t offset = 0;        // relative to the start of the data section
  uint64_t size_bytes = 0;    // validated: dims product / block size * type size
  const uint8_t* data = nullptr;  // into the mapping; aligned to the file's alignment

  int64_t num_elements() const;
};

class GgufFile {
 public:
  // Maps and validates `path`. NOT_FOUND if it does not exist; DATA_LOSS / INVALID_ARGUMENT when
  // the file is not a valid GGUF file (message names the problem and the offset).
  static StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);

  // Parses a buffer the caller owns and keeps alive longer than the returned file (fuzzing, tests).
  static StatusOr<std::unique_ptr<GgufFile>> FromBuffer(const uint8_t* data, size_t size);

  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  size_t file_size() const { return size_; }

  // Metadata, in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  // nullptr when the key is absent.
  const GgufValue* Find(std::string_view key) const;
  // Typed lookups: NOT_FOUND when absent, INVALID_ARGUMENT when of another type.
  StatusOr<int64_t> GetInt(std::string_view key) const;
  StatusOr<double> GetFloat(std::string_view key) const;
  StatusOr<bool> GetBool(std::string_view key) const;
  StatusOr<std::string> GetString(std::string_view key) const;
  // String array (e.g. tokenizer.ggml.tokens), float array, integer array.
  StatusOr<std::vector<std::string>> GetStringArray(std::string_view key) const;
  StatusOr<std::vector<float>> GetFloatArray(std::string_view key) const;
  StatusOr<std::vector<int64_t>> GetIntArray(std::string_view key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  // nullptr when absent.
  const GgufTensorInfo* FindTensor(std::string_view name) const;

 private:
  GgufFile() = default;
  Status Parse();

  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  bool owns_mapping_ = false;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::map<std::string, size_t, std::less<>> metadata_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// Dequantizes `n` elements of a tensor row of `type` starting at `src` into `dst` (reference,
// scalar; the fast kernels in backend/cpu are checked against it). REQUIRES: n is a multiple of
// the type's block size and the type is supported.
void DequantizeRow(GgmlType type, const void* src, float* dst, int64_t n);

// IEEE half and bfloat16 conversions.
float Fp16ToFp32(ggml_fp16_t h);
ggml_fp16_t Fp32ToFp16(float f);
float Bf16ToFp32(ggml_bf16_t h);

}  // namespace kinfer
