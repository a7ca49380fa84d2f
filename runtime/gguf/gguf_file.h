// GgufFile: a read-only view of a GGUF v3 (and v2) file, memory-mapped or read into memory.
//
// Parsing validates everything before handing out a view: header, every metadata key/value (all
// 13 value types, nested arrays), tensor infos (dims, type, offset), alignment, and that each
// tensor's bytes lie inside the file. A truncated, corrupt or hostile file yields a DATA_LOSS /
// INVALID_ARGUMENT Status whose message names the problem and the byte offset; the reader never
// reads out of bounds and never allocates more than the file size justifies.
//
// What is checked (and the error kind):
//   - magic "GGUF", version 2 or 3 (v2 and v3 are the same layout for little-endian files;
//     v1 and big-endian files are refused)                                     INVALID_ARGUMENT
//   - every read inside the buffer; string lengths and array / metadata / tensor counts bounded
//     by the bytes left *before* anything is reserved                          DATA_LOSS
//   - value types 0..12; arrays of arrays nest at most 16 deep; no duplicate keys
//                                                                               INVALID_ARGUMENT
//   - general.alignment (any integer type) a non-zero power of two; default 32  INVALID_ARGUMENT
//   - tensors: n_dims 1..4, each dim in [1, 2^63), element and byte counts without int64
//     overflow, a known ggml type id (GgmlTypeKnown; a known but unsupported type such as Q5_K
//     is listed, the loader checks GgmlTypeSupported), dims[0] a multiple of the block size,
//     offset a multiple of the alignment, no duplicate names, no two tensors sharing bytes
//                                                                               INVALID_ARGUMENT
//   - data section start (aligned end of the tensor infos) and every tensor's bytes inside the
//     file, e.g. "tensor 'blk.0.attn_q.weight': data [a, b) extends past end of file (size N)"
//                                                                               DATA_LOSS
// Memory: metadata is copied into GgufValue trees (about 50 bytes per array element, so at most
// ~50x the file's metadata bytes for arrays of 1-byte values); tensor data is never copied.
//
// Thread safety: immutable after Open(); all const methods may be called from any thread.
// Ownership: the GgufFile owns the mapping or the memory; every pointer and string_view it
// returns lives as long as the GgufFile. A mapped file (GgufLoad::kMmap) truncated by another
// process while mapped raises SIGBUS on access (the usual mmap caveat); the reader does not guard
// against that. A file read into memory (kMemory) is a private copy: the file may change after.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/huge_pages.h"
#include "common/status.h"
#include "runtime/gguf/fp16.h"
#include "runtime/gguf/ggml_types.h"

namespace kinfer {

namespace gguf_internal {
class ByteCursor;
}  // namespace gguf_internal

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
// Storage by type: uint8/16/32/64 -> uint64_t; int8/16/32/64 -> int64_t; float32/64 -> double
// (float32 widened exactly); bool -> bool; string -> std::string (bytes as stored, not checked
// for UTF-8); array -> Array (element_type kept even when empty).
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
  uint64_t offset = 0;            // relative to the start of the data section
  uint64_t size_bytes = 0;        // validated: dims product / block size * type size
  const uint8_t* data = nullptr;  // into the mapping; aligned to the file's alignment
  // How `data` is laid out: 0 = as the file stores it. Other values are the tag a GgufPrepareFn
  // returned for it (Open with kMemory); this reader gives them no meaning.
  uint32_t layout = 0;

  int64_t num_elements() const;
};

// How Open() makes the file's bytes addressable.
enum class GgufLoad {
  // mmap(2) of the file, read-only and private: nothing is read until touched, and the pages
  // are the page cache's (shared with other processes mapping the same file).
  kMmap,
  // The whole file read into anonymous memory that is 2 MiB aligned and advised
  // MADV_HUGEPAGE, then made read-only; the page cache's copy is dropped after the read
  // (POSIX_FADV_DONTNEED). Costs a read of the file at load and its size in resident memory;
  // with transparent huge pages on (the `madvise` or `always` setting), a decode step that
  // streams every weight takes far fewer TLB misses than over 4 KiB file pages (about 10% of
  // the CPU decode step on the development machine; docs/benchmarks.md).
  kMemory,
};

// Called by Open(kMemory) once per tensor, in file order, after the file is parsed and before its
// memory becomes read-only: it may rewrite the tensor's size_bytes bytes at `data` in place and
// returns the tag to store in GgufTensorInfo::layout (0 when it left them as they are). Used by
// the CPU backend to regroup quantized weights for its kernels (runtime/backend/cpu/weight_layout.h).
using GgufPrepareFn = std::function<uint32_t(const GgufTensorInfo& info, uint8_t* data)>;

class GgufFile {
 public:
  // Maps and validates `path`. NOT_FOUND if it does not exist; INVALID_ARGUMENT if it cannot be
  // opened or mapped (not a regular file, permissions); DATA_LOSS / INVALID_ARGUMENT when the file
  // is not a valid GGUF file (message starts with the path, then names the problem and offset).
  // With kMemory, also INVALID_ARGUMENT when the memory cannot be had or the read fails.
  // `prepare` runs only with kMemory (a mapping is never written); with kMmap it is ignored.
  static StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path,
                                                  GgufLoad load = GgufLoad::kMmap,
                                                  const GgufPrepareFn& prepare = {});

  // Parses a buffer the caller owns and keeps alive longer than the returned file (fuzzing, tests).
  // Tensor data pointers point into `data` and are only as aligned as `data` is.
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
  // Parse() runs the four steps in file order; each validates what it reads before storing it.
  Status Parse();
  Status ParseHeader(gguf_internal::ByteCursor& c, uint64_t* n_tensors, uint64_t* n_kv);
  Status ParseMetadata(gguf_internal::ByteCursor& c, uint64_t n_kv);  // also sets alignment_
  Status ParseTensorInfos(gguf_internal::ByteCursor& c, uint64_t n_tensors);
  Status PlaceTensorData(size_t infos_end);  // data start, bounds, overlap; sets data pointers

  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  // The file's mapping to munmap (kMmap, Open), or the memory it was read into (kMemory).
  void* mapping_ = nullptr;
  std::optional<HugePageMemory> memory_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::map<std::string, size_t, std::less<>> metadata_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// Dequantizes `n` elements of a tensor row of `type` starting at `src` into `dst` (reference,
// scalar; the fast kernels in backend/cpu are checked against it). Bit-exact with ggml's
// dequantize_row_* and gguf-py's dequantize. `src` needs no alignment. REQUIRES: n is a multiple
// of the type's block size, the type is supported (asserted in debug builds; otherwise nothing
// is written), `src` holds n / block_size blocks and `dst` holds n floats.
void DequantizeRow(GgmlType type, const void* src, float* dst, int64_t n);

// IEEE half and bfloat16 conversions (Fp16ToFp32, Fp32ToFp16, Bf16ToFp32): runtime/gguf/fp16.h.

}  // namespace kinfer
