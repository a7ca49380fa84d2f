// GgufValue typed accessors and GgufFile's metadata / tensor lookups.
#include <limits>

#include "runtime/gguf/gguf_file.h"

namespace kinfer {
namespace {

std::string_view ValueTypeName(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8:
      return "uint8";
    case GgufValueType::kInt8:
      return "int8";
    case GgufValueType::kUint16:
      return "uint16";
    case GgufValueType::kInt16:
      return "int16";
    case GgufValueType::kUint32:
      return "uint32";
    case GgufValueType::kInt32:
      return "int32";
    case GgufValueType::kFloat32:
      return "float32";
    case GgufValueType::kBool:
      return "bool";
    case GgufValueType::kString:
      return "string";
    case GgufValueType::kArray:
      return "array";
    case GgufValueType::kUint64:
      return "uint64";
    case GgufValueType::kInt64:
      return "int64";
    case GgufValueType::kFloat64:
      return "float64";
  }
  return "unknown";
}

Status WrongType(const GgufValue& v, std::string_view wanted) {
  return InvalidArgument("value of type " + std::string(ValueTypeName(v.type)) + " is not " +
                         std::string(wanted));
}

Status Missing(std::string_view key) {
  return NotFound("metadata key '" + std::string(key) + "' not found");
}

}  // namespace

StatusOr<int64_t> GgufValue::AsInt() const {
  if (const auto* u = std::get_if<uint64_t>(&data)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return InvalidArgument("value " + std::to_string(*u) + " does not fit in int64");
    }
    return static_cast<int64_t>(*u);
  }
  if (const auto* i = std::get_if<int64_t>(&data)) return *i;
  return WrongType(*this, "an integer");
}

StatusOr<uint64_t> GgufValue::AsUint() const {
  if (const auto* u = std::get_if<uint64_t>(&data)) return *u;
  if (const auto* i = std::get_if<int64_t>(&data)) {
    if (*i < 0) return InvalidArgument("value " + std::to_string(*i) + " is negative");
    return static_cast<uint64_t>(*i);
  }
  return WrongType(*this, "an integer");
}

StatusOr<double> GgufValue::AsFloat() const {
  if (const auto* d = std::get_if<double>(&data)) return *d;
  if (const auto* u = std::get_if<uint64_t>(&data)) return static_cast<double>(*u);
  if (const auto* i = std::get_if<int64_t>(&data)) return static_cast<double>(*i);
  return WrongType(*this, "numeric");
}

StatusOr<bool> GgufValue::AsBool() const {
  if (const auto* b = std::get_if<bool>(&data)) return *b;
  return WrongType(*this, "a bool");
}

StatusOr<std::string> GgufValue::AsString() const {
  if (const auto* s = std::get_if<std::string>(&data)) return *s;
  return WrongType(*this, "a string");
}

int64_t GgufTensorInfo::num_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;  // validated at parse time not to overflow
  return n;
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

// Runs `get` on the value under `key`, prefixing errors with the key.
template <typename T, typename Fn>
StatusOr<T> Lookup(const GgufFile& f, std::string_view key, Fn get) {
  const GgufValue* v = f.Find(key);
  if (v == nullptr) return Missing(key);
  StatusOr<T> r = get(*v);
  if (!r.ok()) return r.status().WithContext("metadata '" + std::string(key) + "'");
  return r;
}

template <typename T, typename Fn>
StatusOr<std::vector<T>> LookupArray(const GgufFile& f, std::string_view key, Fn get) {
  return Lookup<std::vector<T>>(f, key, [&](const GgufValue& v) -> StatusOr<std::vector<T>> {
    const auto* arr = std::get_if<GgufValue::Array>(&v.data);
    if (arr == nullptr) return WrongType(v, "an array");
    std::vector<T> out;
    out.reserve(arr->items.size());
    for (size_t i = 0; i < arr->items.size(); ++i) {
      StatusOr<T> e = get(arr->items[i]);
      if (!e.ok()) return e.status().WithContext("element " + std::to_string(i));
      out.push_back(std::move(e).value());
    }
    return out;
  });
}

}  // namespace

StatusOr<int64_t> GgufFile::GetInt(std::string_view key) const {
  return Lookup<int64_t>(*this, key, [](const GgufValue& v) { return v.AsInt(); });
}

StatusOr<double> GgufFile::GetFloat(std::string_view key) const {
  return Lookup<double>(*this, key, [](const GgufValue& v) { return v.AsFloat(); });
}

StatusOr<bool> GgufFile::GetBool(std::string_view key) const {
  return Lookup<bool>(*this, key, [](const GgufValue& v) { return v.AsBool(); });
}

StatusOr<std::string> GgufFile::GetString(std::string_view key) const {
  return Lookup<std::string>(*this, key, [](const GgufValue& v) { return v.AsString(); });
}

StatusOr<std::vector<std::string>> GgufFile::GetStringArray(std::string_view key) const {
  return LookupArray<std::string>(*this, key, [](const GgufValue& v) { return v.AsString(); });
}

StatusOr<std::vector<float>> GgufFile::GetFloatArray(std::string_view key) const {
  return LookupArray<float>(*this, key, [](const GgufValue& v) -> StatusOr<float> {
    KINFER_ASSIGN_OR_RETURN(double d, v.AsFloat());
    return static_cast<float>(d);
  });
}

StatusOr<std::vector<int64_t>> GgufFile::GetIntArray(std::string_view key) const {
  return LookupArray<int64_t>(*this, key, [](const GgufValue& v) { return v.AsInt(); });
}

}  // namespace kinfer
