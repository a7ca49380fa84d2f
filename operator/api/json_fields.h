// FieldReader: reads the fields of one JSON object into typed members, keeping each member's
// default when its key is absent or null, and remembering the first error with the field's path
// ("spec.runtime.maxBatchTokens: must be in [64, 1048576], got 3"). Used by the InferenceService
// parser; internal to kinfer_operator_api.
//
// Not thread-safe (one reader per parse); pure.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "operator/api/inference_service.h"

namespace kinfer::api {

class FieldReader {
 public:
  // `object` may be nullptr or a JSON null: the section is absent and every field keeps its
  // default. `error` is shared by a reader and its children; only the first error is kept.
  FieldReader(const nlohmann::json* object, std::string path, Status* error);

  // The value at `key`, or nullptr when absent or null (or when this reader has no object).
  const nlohmann::json* Raw(std::string_view key) const;
  bool Has(std::string_view key) const { return Raw(key) != nullptr; }
  // "<path>.<key>"
  std::string PathOf(std::string_view key) const;
  const std::string& path() const { return path_; }
  // Records "<path>.<key>: <message>" (or "<path>: <message>" for an empty key) unless an error
  // is already recorded.
  void Fail(std::string_view key, const std::string& message);
  bool ok() const { return error_->ok(); }

  void Int(std::string_view key, int* out, int64_t lo, int64_t hi);
  void Int64(std::string_view key, int64_t* out, int64_t lo, int64_t hi);
  // In [lo, hi], or (lo, hi] when lo_exclusive.
  void Number(std::string_view key, double* out, double lo, double hi, bool lo_exclusive = false);
  void Bool(std::string_view key, bool* out);
  void String(std::string_view key, std::string* out, size_t max_length = 1 << 20);
  void Enum(std::string_view key, std::string* out, std::initializer_list<std::string_view> values);
  // A duration string in the sidecar's grammar; > 0 when `positive`.
  void Duration(std::string_view key, DurationValue* out, bool positive);
  // An integer or a byte-size string; > 0 when `positive`.
  void Bytes(std::string_view key, ByteSize* out, bool positive);
  // A Kubernetes quantity given as an integer or a string ("" when absent).
  void Quantity(std::string_view key, std::string* out);
  // A child object reader; a present value that is not an object is an error (the child then
  // reads nothing).
  FieldReader Object(std::string_view key);
  // A reader of `value` (an element of a list or a map read by hand) at `path`, sharing this
  // reader's error; a value that is not an object is an error.
  FieldReader Element(const nlohmann::json& value, std::string path);

 private:
  const nlohmann::json* object_;
  std::string path_;
  Status* error_;
};

// Reads a JSON integer (or an integral float); false otherwise.
bool JsonToInt64(const nlohmann::json& value, int64_t* out);

}  // namespace kinfer::api
