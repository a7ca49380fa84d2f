// GgufFile: mapping (Open / FromBuffer) and the validating parser.
//
// Layout of a GGUF v2/v3 file (all integers little-endian):
//
//   offset 0   "GGUF" | u32 version | u64 n_tensors | u64 n_kv
//              n_kv x   { string key | u32 value_type | value }
//              n_tensors x { string name | u32 n_dims | u64 ne[n_dims] | u32 ggml_type | u64 offset
//              } padding to general.alignment (default 32)
//   data_start tensor bytes; each tensor at data_start + offset (offset % alignment == 0)
//
//   string = u64 length + bytes;  array value = u32 element_type | u64 count | elements
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

#include "runtime/gguf/byte_cursor.h"
#include "runtime/gguf/gguf_file.h"

namespace kinfer {
namespace {

using gguf_internal::ByteCursor;

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr int kMaxArrayDepth = 16;       // arrays of arrays nest at most this deep
constexpr uint64_t kDefaultAlignment = 32;
// Smallest encodings, used to bound counts by the bytes left before reserving anything:
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;                  // empty key, type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // empty name, 1 dim

std::string At(size_t offset) { return "offset " + std::to_string(offset) + ": "; }

// Smallest number of bytes one element of `type` takes; 0 for an unknown type.
uint64_t MinValueBytes(uint32_t type) {
  switch (static_cast<GgufValueType>(type)) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
      return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32:
      return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
    case GgufValueType::kString:
      return 8;
    case GgufValueType::kArray:
      return 4 + 8;
  }
  return 0;
}

template <typename Raw, typename Stored>
Status ReadScalar(ByteCursor& c, GgufValue* v, std::string_view what) {
  Raw raw{};
  KINFER_RETURN_IF_ERROR(c.Read(&raw, what));
  v->data = static_cast<Stored>(raw);
  return Status::Ok();
}

// Reads one value of `type` at the cursor. `key` names the entry in error messages.
Status ReadValue(ByteCursor& c, uint32_t type, int depth, const std::string& key, GgufValue* v) {
  const size_t at = c.pos();
  if (MinValueBytes(type) == 0) {
    return InvalidArgument(At(at) + "metadata '" + key + "': unknown value type " +
                           std::to_string(type));
  }
  v->type = static_cast<GgufValueType>(type);
  switch (v->type) {
    case GgufValueType::kUint8:
      return ReadScalar<uint8_t, uint64_t>(c, v, "uint8 value");
    case GgufValueType::kInt8:
      return ReadScalar<int8_t, int64_t>(c, v, "int8 value");
    case GgufValueType::kUint16:
      return ReadScalar<uint16_t, uint64_t>(c, v, "uint16 value");
    case GgufValueType::kInt16:
      return ReadScalar<int16_t, int64_t>(c, v, "int16 value");
    case GgufValueType::kUint32:
      return ReadScalar<uint32_t, uint64_t>(c, v, "uint32 value");
    case GgufValueType::kInt32:
      return ReadScalar<int32_t, int64_t>(c, v, "int32 value");
    case GgufValueType::kUint64:
      return ReadScalar<uint64_t, uint64_t>(c, v, "uint64 value");
    case GgufValueType::kInt64:
      return ReadScalar<int64_t, int64_t>(c, v, "int64 value");
    case GgufValueType::kFloat32:
      return ReadScalar<float, double>(c, v, "float32 value");
    case GgufValueType::kFloat64:
      return ReadScalar<double, double>(c, v, "float64 value");
    case GgufValueType::kBool: {
      uint8_t b = 0;
      KINFER_RETURN_IF_ERROR(c.Read(&b, "bool value"));
      v->data = (b != 0);
      return Status::Ok();
    }
    case GgufValueType::kString: {
      std::string s;
      KINFER_RETURN_IF_ERROR(c.ReadString(&s, "string value of '" + key + "'"));
      v->data = std::move(s);
      return Status::Ok();
    }
    case GgufValueType::kArray:
      break;
  }
  // Array.
  uint32_t elem_type = 0;
  uint64_t count = 0;
  KINFER_RETURN_IF_ERROR(c.Read(&elem_type, "array element type"));
  const uint64_t min_bytes = MinValueBytes(elem_type);
  if (min_bytes == 0) {
    return InvalidArgument(At(at) + "metadata '" + key + "': unknown array element type " +
                           std::to_string(elem_type));
  }
  if (static_cast<GgufValueType>(elem_type) == GgufValueType::kArray &&
      depth + 1 >= kMaxArrayDepth) {
    return InvalidArgument(At(at) + "metadata '" + key + "': arrays nested deeper than " +
                           std::to_string(kMaxArrayDepth));
  }
  const size_t count_at = c.pos();
  KINFER_RETURN_IF_ERROR(c.Read(&count, "array count"));
  if (count > c.remaining() / min_bytes) {
    return DataLoss(At(count_at) + "metadata '" + key + "': array count " + std::to_string(count) +
                    " needs at least " + std::to_string(min_bytes) + " bytes each but only " +
                    std::to_string(c.remaining()) + " bytes are left");
  }
  GgufValue::Array arr;
  arr.element_type = static_cast<GgufValueType>(elem_type);
  arr.items.resize(static_cast<size_t>(count));
  for (auto& item : arr.items) {
    KINFER_RETURN_IF_ERROR(ReadValue(c, elem_type, depth + 1, key, &item));
  }
  v->data = std::move(arr);
  return Status::Ok();
}

// a * b into *out; false on overflow of int64.
bool MulOverflows(int64_t a, int64_t b, int64_t* out) { return __builtin_mul_overflow(a, b, out); }
bool AddOverflows(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_add_overflow(a, b, out);
}

std::string Range(uint64_t begin, uint64_t end) {
  // Appended piecewise: "[" + std::to_string(..) trips a GCC 12 -Wrestrict false positive.
  std::string r("[");
  r.append(std::to_string(begin)).append(", ").append(std::to_string(end)).append(")");
  return r;
}

}  // namespace

GgufFile::~GgufFile() {
  if (mapping_ != nullptr) munmap(mapping_, size_);
}

namespace {

// Reads all of `fd` (`size` bytes) into huge-page memory.
StatusOr<HugePageMemory> ReadIntoMemory(int fd, size_t size, const std::string& path) {
  StatusOr<HugePageMemory> mem = HugePageMemory::Map(size);
  if (!mem.ok()) {
    return InvalidArgument(path + ": cannot allocate " + std::to_string(size) +
                           " bytes to read the file into: " + mem.status().message());
  }
  uint8_t* start = mem->data();
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, start + done, size - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = n < 0 ? std::strerror(errno) : "the file shrank while being read";
      return InvalidArgument(path + ": read failed at byte " + std::to_string(done) + ": " + why);
    }
    done += static_cast<size_t>(n);
  }
  // The copy is ours now; the page cache's need not stay resident beside it.
  (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  return mem;  // writable until Open has parsed and prepared it
}

}  // namespace

StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path, GgufLoad load,
                                                    const GgufPrepareFn& prepare) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    std::string msg = path + ": " + std::strerror(err);
    return err == ENOENT ? NotFound(msg) : InvalidArgument(msg);
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgument(path + ": not a regular file");
  }
  if (st.st_size == 0) {
    ::close(fd);
    return DataLoss(path + ": offset 0: empty file, expected a GGUF header");
  }
  const size_t size = static_cast<size_t>(st.st_size);
  std::unique_ptr<GgufFile> file(new GgufFile());  // private constructor: no make_unique
  file->size_ = size;
  if (load == GgufLoad::kMemory) {
    StatusOr<HugePageMemory> mem = ReadIntoMemory(fd, size, path);
    ::close(fd);
    if (!mem.ok()) return mem.status();
    file->base_ = mem->data();
    file->memory_ = std::move(mem).value();
  } else {
    void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    const int map_err = errno;
    ::close(fd);  // the mapping keeps the file alive
    if (map == MAP_FAILED) {
      return InvalidArgument(path + ": mmap failed: " + std::strerror(map_err));
    }
    file->base_ = static_cast<const uint8_t*>(map);
    file->mapping_ = map;
  }
  Status st_parse = file->Parse();
  if (!st_parse.ok()) return st_parse.WithContext(path);
  if (file->memory_) {
    if (prepare) {
      for (GgufTensorInfo& t : file->tensors_) {
        // The bytes are inside memory_, which this file owns and has not yet sealed.
        t.layout = prepare(t, file->memory_->data() + (t.data - file->base_));
      }
    }
    file->memory_->MakeReadOnly();
  }
  return file;
}

StatusOr<std::unique_ptr<GgufFile>> GgufFile::FromBuffer(const uint8_t* data, size_t size) {
  if (data == nullptr && size != 0) return InvalidArgument("FromBuffer: null data");
  std::unique_ptr<GgufFile> file(new GgufFile());  // private constructor: no make_unique
  file->base_ = data;
  file->size_ = size;
  KINFER_RETURN_IF_ERROR(file->Parse());
  return file;
}

Status GgufFile::Parse() {
  ByteCursor c(base_, size_);
  uint64_t n_tensors = 0, n_kv = 0;
  KINFER_RETURN_IF_ERROR(ParseHeader(c, &n_tensors, &n_kv));
  KINFER_RETURN_IF_ERROR(ParseMetadata(c, n_kv));
  KINFER_RETURN_IF_ERROR(ParseTensorInfos(c, n_tensors));
  return PlaceTensorData(c.pos());
}

Status GgufFile::ParseHeader(ByteCursor& c, uint64_t* n_tensors_out, uint64_t* n_kv_out) {
  uint32_t magic = 0;
  KINFER_RETURN_IF_ERROR(c.Read(&magic, "magic"));
  if (magic != kMagic) {
    char hex[16];
    std::snprintf(hex, sizeof(hex), "0x%08x", magic);
    return InvalidArgument(At(0) + "bad magic " + hex + ", not a GGUF file");
  }
  KINFER_RETURN_IF_ERROR(c.Read(&version_, "version"));
  if (version_ != 2 && version_ != 3) {
    std::string why = "unsupported GGUF version " + std::to_string(version_);
    if (version_ == 1) why += " (v1 used 32-bit counts; re-convert the model)";
    if ((version_ & 0xFFFFu) == 0 && version_ != 0) why += " (a big-endian file?)";
    return InvalidArgument(At(4) + why + "; only versions 2 and 3 are read");
  }
  uint64_t& n_tensors = *n_tensors_out;
  uint64_t& n_kv = *n_kv_out;
  KINFER_RETURN_IF_ERROR(c.Read(&n_tensors, "tensor count"));
  KINFER_RETURN_IF_ERROR(c.Read(&n_kv, "metadata count"));
  if (n_kv > c.remaining() / kMinKvBytes) {
    return DataLoss(At(16) + "metadata count " + std::to_string(n_kv) + " cannot fit in the " +
                    std::to_string(c.remaining()) + " bytes left");
  }
  if (n_tensors > c.remaining() / kMinTensorInfoBytes) {
    return DataLoss(At(8) + "tensor count " + std::to_string(n_tensors) + " cannot fit in the " +
                    std::to_string(c.remaining()) + " bytes left");
  }
  return Status::Ok();
}

Status GgufFile::ParseMetadata(ByteCursor& c, uint64_t n_kv) {
  metadata_.reserve(static_cast<size_t>(n_kv));
  for (uint64_t i = 0; i < n_kv; ++i) {
    const size_t at = c.pos();
    std::string key;
    KINFER_RETURN_IF_ERROR(c.ReadString(&key, "metadata key " + std::to_string(i)));
    if (metadata_index_.count(key) != 0) {
      return InvalidArgument(At(at) + "duplicate metadata key '" + key + "'");
    }
    uint32_t type = 0;
    KINFER_RETURN_IF_ERROR(c.Read(&type, "value type of '" + key + "'"));
    GgufValue value;
    KINFER_RETURN_IF_ERROR(ReadValue(c, type, 0, key, &value));
    metadata_index_.emplace(key, metadata_.size());
    metadata_.emplace_back(std::move(key), std::move(value));
  }

  alignment_ = kDefaultAlignment;
  if (const GgufValue* a = Find("general.alignment")) {
    StatusOr<uint64_t> v = a->AsUint();
    if (!v.ok() || *v == 0 || (*v & (*v - 1)) != 0) {
      return InvalidArgument("metadata 'general.alignment' must be a non-zero power of two, got " +
                             (v.ok() ? std::to_string(*v) : v.status().message()));
    }
    alignment_ = *v;
  }
  return Status::Ok();
}

Status GgufFile::ParseTensorInfos(ByteCursor& c, uint64_t n_tensors) {
  // Checked again now that the metadata is behind us: the bound is tighter.
  if (n_tensors > c.remaining() / kMinTensorInfoBytes) {
    return DataLoss(At(c.pos()) + "tensor count " + std::to_string(n_tensors) +
                    " cannot fit in the " + std::to_string(c.remaining()) + " bytes left");
  }
  tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    const size_t at = c.pos();
    GgufTensorInfo t;
    KINFER_RETURN_IF_ERROR(c.ReadString(&t.name, "name of tensor " + std::to_string(i)));
    const std::string who = "tensor '" + t.name + "'";
    if (tensor_index_.count(t.name) != 0) {
      return InvalidArgument(At(at) + "duplicate " + who);
    }
    uint32_t n_dims = 0;
    const size_t dims_at = c.pos();
    KINFER_RETURN_IF_ERROR(c.Read(&n_dims, "n_dims of " + who));
    if (n_dims < 1 || n_dims > 4) {
      return InvalidArgument(At(dims_at) + who + ": n_dims " + std::to_string(n_dims) +
                             " outside [1, 4]");
    }
    int64_t elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const size_t dim_at = c.pos();
      uint64_t ne = 0;
      KINFER_RETURN_IF_ERROR(c.Read(&ne, "dims of " + who));
      if (ne == 0 || ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return InvalidArgument(At(dim_at) + who + ": dimension " + std::to_string(d) + " is " +
                               std::to_string(ne) + ", must be in [1, 2^63)");
      }
      if (MulOverflows(elements, static_cast<int64_t>(ne), &elements)) {
        return InvalidArgument(At(dim_at) + who + ": element count overflows int64");
      }
      t.dims.push_back(static_cast<int64_t>(ne));
    }
    uint32_t type_id = 0;
    const size_t type_at = c.pos();
    KINFER_RETURN_IF_ERROR(c.Read(&type_id, "type of " + who));
    t.type = static_cast<GgmlType>(type_id);
    if (!GgmlTypeKnown(t.type)) {
      return InvalidArgument(At(type_at) + who + ": unknown ggml type id " +
                             std::to_string(type_id));
    }
    const int64_t block = GgmlBlockSize(t.type);
    if (t.dims[0] % block != 0) {
      return InvalidArgument(At(dims_at + 4) + who + ": row length " + std::to_string(t.dims[0]) +
                             " is not a multiple of the " + std::string(GgmlTypeName(t.type)) +
                             " block size " + std::to_string(block));
    }
    int64_t bytes = t.dims[0] / block;
    bool overflow = MulOverflows(bytes, static_cast<int64_t>(GgmlTypeSize(t.type)), &bytes);
    for (size_t d = 1; d < t.dims.size() && !overflow; ++d) {
      overflow = MulOverflows(bytes, t.dims[d], &bytes);
    }
    if (overflow) {
      return InvalidArgument(At(dims_at) + who + ": byte size overflows int64");
    }
    t.size_bytes = static_cast<uint64_t>(bytes);
    const size_t offset_at = c.pos();
    KINFER_RETURN_IF_ERROR(c.Read(&t.offset, "data offset of " + who));
    if (t.offset % alignment_ != 0) {
      return InvalidArgument(At(offset_at) + who + ": data offset " + std::to_string(t.offset) +
                             " is not a multiple of the alignment " + std::to_string(alignment_));
    }
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }
  return Status::Ok();
}

Status GgufFile::PlaceTensorData(size_t infos_end) {
  if (tensors_.empty()) return Status::Ok();  // nothing to place; trailing padding is optional
  uint64_t data_start = 0;
  if (AddOverflows(infos_end, alignment_ - 1, &data_start)) {
    return InvalidArgument("alignment " + std::to_string(alignment_) + " overflows the data start");
  }
  data_start &= ~(alignment_ - 1);
  if (data_start > size_) {
    return DataLoss(At(infos_end) + "data section starts at " + std::to_string(data_start) +
                    ", past end of file (size " + std::to_string(size_) + ")");
  }
  for (GgufTensorInfo& t : tensors_) {
    uint64_t begin = 0, end = 0;
    if (AddOverflows(data_start, t.offset, &begin)) {
      return DataLoss("tensor '" + t.name + "': data offset " + std::to_string(t.offset) +
                      " is past end of file (size " + std::to_string(size_) + ")");
    }
    if (AddOverflows(begin, t.size_bytes, &end) || end > size_) {
      std::string where("[");
      where.append(std::to_string(begin)).append(", ");
      where.append(end >= begin ? std::to_string(end)
                                : std::to_string(begin) + " + " + std::to_string(t.size_bytes));
      where.append(")");
      return DataLoss("tensor '" + t.name + "': data " + where +
                      " extends past end of file (size " + std::to_string(size_) + ")");
    }
    t.data = base_ + begin;
  }
  // No two tensors may share bytes.
  std::vector<const GgufTensorInfo*> by_offset;
  by_offset.reserve(tensors_.size());
  for (const GgufTensorInfo& t : tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo& prev = *by_offset[i - 1];
    const GgufTensorInfo& cur = *by_offset[i];
    if (prev.offset + prev.size_bytes > cur.offset) {
      return InvalidArgument(
          "tensors '" + prev.name + "' " +
          Range(data_start + prev.offset, data_start + prev.offset + prev.size_bytes) + " and '" +
          cur.name + "' " +
          Range(data_start + cur.offset, data_start + cur.offset + cur.size_bytes) + " overlap");
    }
  }
  return Status::Ok();
}

}  // namespace kinfer
