#include "operator/api/json_fields.h"

#include <cmath>
#include <sstream>

#include "operator/api/units.h"

namespace kinfer::api {

namespace {

std::string NumberText(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

}  // namespace

bool JsonToInt64(const nlohmann::json& value, int64_t* out) {
  if (value.is_number_integer()) {
    if (value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      return false;
    }
    *out = value.get<int64_t>();
    return true;
  }
  if (value.is_number_float()) {
    const double d = value.get<double>();
    if (!std::isfinite(d) || std::trunc(d) != d || std::fabs(d) > 9e15) return false;
    *out = static_cast<int64_t>(d);
    return true;
  }
  return false;
}

FieldReader::FieldReader(const nlohmann::json* object, std::string path, Status* error)
    : object_(object && object->is_object() ? object : nullptr),
      path_(std::move(path)),
      error_(error) {}

const nlohmann::json* FieldReader::Raw(std::string_view key) const {
  if (!object_) return nullptr;
  auto it = object_->find(key);
  if (it == object_->end() || it->is_null()) return nullptr;
  return &*it;
}

std::string FieldReader::PathOf(std::string_view key) const {
  if (key.empty()) return path_;
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

void FieldReader::Fail(std::string_view key, const std::string& message) {
  if (error_->ok()) *error_ = InvalidArgument(PathOf(key) + ": " + message);
}

void FieldReader::Int64(std::string_view key, int64_t* out, int64_t lo, int64_t hi) {
  const nlohmann::json* v = Raw(key);
  if (!v) return;
  int64_t value = 0;
  if (!JsonToInt64(*v, &value)) return Fail(key, "expected an integer, got " + v->dump());
  if (value < lo || value > hi) {
    return Fail(key, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                         std::to_string(value));
  }
  *out = value;
}

void FieldReader::Int(std::string_view key, int* out, int64_t lo, int64_t hi) {
  int64_t value = *out;
  Int64(key, &value, lo, hi);
  *out = static_cast<int>(value);
}

void FieldReader::Number(std::string_view key, double* out, double lo, double hi,
                         bool lo_exclusive) {
  const nlohmann::json* v = Raw(key);
  if (!v) return;
  if (!v->is_number()) return Fail(key, "expected a number, got " + v->dump());
  const double value = v->get<double>();
  const bool above_lo = lo_exclusive ? value > lo : value >= lo;
  if (!std::isfinite(value) || !above_lo || value > hi) {
    return Fail(key, std::string("must be in ") + (lo_exclusive ? "(" : "[") + NumberText(lo) +
                         ", " + NumberText(hi) + "], got " + NumberText(value));
  }
  *out = value;
}

void FieldReader::Bool(std::string_view key, bool* out) {
  const nlohmann::json* v = Raw(key);
  if (!v) return;
  if (!v->is_boolean()) return Fail(key, "expected true or false, got " + v->dump());
  *out = v->get<bool>();
}

void FieldReader::String(std::string_view key, std::string* out, size_t max_length) {
  const nlohmann::json* v = Raw(key);
  if (!v) return;
  if (!v->is_string()) return Fail(key, "expected a string, got " + v->dump());
  const auto& s = v->get_ref<const std::string&>();
  if (s.size() > max_length) {
    return Fail(key, "longer than " + std::to_string(max_length) + " characters");
  }
  *out = s;
}

void FieldReader::Enum(std::string_view key, std::string* out,
                       std::initializer_list<std::string_view> values) {
  std::string value = *out;
  String(key, &value);
  if (!Has(key) || !ok()) return;
  std::string names;
  for (std::string_view v : values) {
    if (v == value) {
      *out = value;
      return;
    }
    names.append(names.empty() ? "" : ", ").append(v);
  }
  Fail(key, "'" + value + "' is not one of " + names);
}

void FieldReader::Duration(std::string_view key, DurationValue* out, bool positive) {
  const nlohmann::json* v = Raw(key);
  if (!v) return;
  std::string text;
  if (v->is_string()) {
    text = v->get<std::string>();
  } else if (v->is_number()) {
    text = v->dump();  // a plain number of seconds
  } else {
    return Fail(key, "expected a duration such as 30s, got " + v->dump());
  }
  auto parsed = ParseDurationText(text);
  if (!parsed.ok()) return Fail(key, parsed.status().message());
  if (positive && parsed->count() <= 0) return Fail(key, "must be > 0, got '" + text + "'");
  *out = DurationValue{text, *parsed};
}

void FieldReader::Bytes(std::string_view key, ByteSize* out, bool positive) {
  const nlohmann::json* v = Raw(key);
  if (!v) return;
  std::string text;
  if (v->is_string()) {
    text = v->get<std::string>();
  } else if (v->is_number_unsigned() || v->is_number_integer()) {
    int64_t n = 0;
    if (!JsonToInt64(*v, &n) || n < 0) return Fail(key, "must be >= 0, got " + v->dump());
    text = std::to_string(n);
  } else {
    return Fail(key, "expected a byte size such as 64MiB, got " + v->dump());
  }
  auto parsed = ParseByteSizeText(text);
  if (!parsed.ok()) return Fail(key, parsed.status().message());
  if (positive && *parsed == 0) return Fail(key, "must be > 0");
  *out = ByteSize{text, *parsed};
}

void FieldReader::Quantity(std::string_view key, std::string* out) {
  const nlohmann::json* v = Raw(key);
  if (!v) return;
  std::string text;
  int64_t n = 0;
  if (v->is_string()) {
    text = v->get<std::string>();
  } else if (JsonToInt64(*v, &n)) {
    text = std::to_string(n);
  } else if (v->is_number()) {
    text = v->dump();
  } else {
    return Fail(key, "expected a quantity such as 4, 500m or 16Gi, got " + v->dump());
  }
  auto parsed = ParseQuantity(text);
  if (!parsed.ok()) return Fail(key, parsed.status().message());
  if (*parsed < 0) return Fail(key, "must be >= 0, got '" + text + "'");
  *out = text;
}

FieldReader FieldReader::Object(std::string_view key) {
  const nlohmann::json* v = Raw(key);
  if (v && !v->is_object()) {
    Fail(key, "expected an object, got " + v->dump());
    return FieldReader(nullptr, PathOf(key), error_);
  }
  return FieldReader(v, PathOf(key), error_);
}

FieldReader FieldReader::Element(const nlohmann::json& value, std::string path) {
  if (!value.is_object() && error_->ok()) {
    *error_ = InvalidArgument(path + ": expected an object, got " + value.dump());
  }
  return FieldReader(&value, std::move(path), error_);
}

}  // namespace kinfer::api
