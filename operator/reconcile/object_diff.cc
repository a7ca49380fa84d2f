#include "operator/reconcile/object_diff.h"

#include <cstdint>
#include <cstdio>

#include "operator/api/units.h"

namespace kinfer::reconcile {

namespace {

using nlohmann::json;

// What Go's omitempty leaves out of the API server's JSON: a desired zero value matches a
// missing key.
bool IsEmpty(const json& v) {
  if (v.is_null()) return true;
  if (v.is_object() || v.is_array()) return v.empty();
  if (v.is_string()) return v.get_ref<const std::string&>().empty();
  if (v.is_boolean()) return !v.get<bool>();
  if (v.is_number()) return v.get<double>() == 0;
  return false;
}

std::string QuantityText(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number()) return v.dump();
  return std::string();
}

// kQuantityMap: the value of a "limits" or "requests" key; kQuantity: one of its amounts.
enum class Mode { kNormal, kQuantityMap, kQuantity };

bool Derivative(const json& desired, const json& observed, Mode mode) {
  if (desired.is_null()) return true;
  if (desired.is_object()) {
    if (!observed.is_object()) return desired.empty() && observed.is_null();
    for (const auto& [key, value] : desired.items()) {
      auto it = observed.find(key);
      if (it == observed.end()) {
        if (!IsEmpty(value)) return false;
        continue;
      }
      const Mode child = mode == Mode::kQuantityMap               ? Mode::kQuantity
                         : (key == "limits" || key == "requests") ? Mode::kQuantityMap
                                                                  : Mode::kNormal;
      if (!Derivative(value, *it, child)) return false;
    }
    return true;
  }
  if (desired.is_array()) {
    if (!observed.is_array()) return desired.empty() && observed.is_null();
    if (desired.size() != observed.size()) return false;
    for (size_t i = 0; i < desired.size(); ++i) {
      if (!Derivative(desired[i], observed[i], Mode::kNormal)) return false;
    }
    return true;
  }
  if (mode == Mode::kQuantity && (desired.is_string() || desired.is_number()) &&
      (observed.is_string() || observed.is_number())) {
    return api::QuantitiesEqual(QuantityText(desired), QuantityText(observed));
  }
  return desired == observed;
}

}  // namespace

bool DeepDerivative(const json& desired, const json& observed) {
  return Derivative(desired, observed, Mode::kNormal);
}

json ReplacePatch(const json& observed, const json& desired) {
  if (!observed.is_object() || !desired.is_object()) return desired;
  json patch = json::object();
  for (const auto& [key, value] : desired.items()) {
    auto it = observed.find(key);
    if (it == observed.end()) {
      patch[key] = value;
    } else if (*it != value) {
      patch[key] = (it->is_object() && value.is_object()) ? ReplacePatch(*it, value) : value;
    }
  }
  for (const auto& [key, value] : observed.items()) {
    if (!desired.contains(key)) patch[key] = nullptr;
  }
  return patch;
}

const json& At(const json& object, std::initializer_list<std::string_view> path) {
  static const json kNull;
  const json* cur = &object;
  for (std::string_view key : path) {
    if (!cur->is_object()) return kNull;
    auto it = cur->find(key);
    if (it == cur->end()) return kNull;
    cur = &*it;
  }
  return *cur;
}

void SetAt(json& patch, std::initializer_list<std::string_view> path, json value) {
  json* cur = &patch;
  size_t i = 0;
  for (std::string_view key : path) {
    if (!cur->is_object()) *cur = json::object();
    json& next = (*cur)[std::string(key)];
    if (++i == path.size()) {
      next = std::move(value);
      return;
    }
    cur = &next;
  }
}

std::string Fnv1a64Hex(std::string_view text) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return std::string(buf, 16);
}

}  // namespace kinfer::reconcile
