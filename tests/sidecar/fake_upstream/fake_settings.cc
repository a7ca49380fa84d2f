#include "tests/sidecar/fake_upstream/fake_settings.h"

#include <charconv>
#include <string>
#include <string_view>

namespace kinfer::fake {
namespace {

constexpr int64_t kHour = 3'600'000;  // ms; the longest delay a knob accepts

struct IntKnob {
  const char* key;     // JSON key in POST /control
  const char* header;  // the per-request header
  int64_t min;
  int64_t max;
  int64_t FakeSettings::*field;
};

struct BoolKnob {
  const char* key;
  const char* header;
  bool FakeSettings::*field;
};

// The one list of per-request knobs.
constexpr IntKnob kIntKnobs[] = {
    {"latency_ms", "x-fake-latency-ms", 0, kHour, &FakeSettings::latency_ms},
    {"status", "x-fake-status", 200, 599, &FakeSettings::status},
    {"chunks", "x-fake-chunks", 0, 1'000'000, &FakeSettings::chunks},
    {"chunk_interval_ms", "x-fake-chunk-interval-ms", 0, kHour, &FakeSettings::chunk_interval_ms},
    {"disconnect_after_chunks", "x-fake-disconnect-after-chunks", -1, 1'000'000,
     &FakeSettings::disconnect_after_chunks},
};
constexpr BoolKnob kBoolKnobs[] = {
    {"hang", "x-fake-hang", &FakeSettings::hang},
    {"reset", "x-fake-reset", &FakeSettings::reset},
};
constexpr int64_t kMaxFailFirst = 1'000'000'000;
constexpr int64_t kMaxCapacity = 1'000'000;

Status RangeError(std::string_view name, int64_t min, int64_t max) {
  return InvalidArgument(std::string(name) + ": must be an integer in [" + std::to_string(min) +
                         ", " + std::to_string(max) + "]");
}

// Integers in JSON: integer numbers only (1.0 is rejected, as a typo check). Booleans: true/false
// or 0/1.
Status JsonInt(const nlohmann::json& v, std::string_view key, int64_t min, int64_t max,
               int64_t& out) {
  if (!v.is_number_integer()) return RangeError(key, min, max);
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(max)) {
    return RangeError(key, min, max);
  }
  const int64_t x = v.get<int64_t>();
  if (x < min || x > max) return RangeError(key, min, max);
  out = x;
  return Status::Ok();
}

Status JsonBool(const nlohmann::json& v, std::string_view key, bool& out) {
  if (v.is_boolean()) {
    out = v.get<bool>();
  } else if (v.is_number_integer() && (v.get<int64_t>() == 0 || v.get<int64_t>() == 1)) {
    out = v.get<int64_t>() == 1;
  } else {
    return InvalidArgument(std::string(key) + ": must be a boolean");
  }
  return Status::Ok();
}

Status HeaderInt(std::string_view text, std::string_view name, int64_t min, int64_t max,
                 int64_t& out) {
  int64_t x = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, x);
  if (ec != std::errc() || ptr != end || x < min || x > max) return RangeError(name, min, max);
  out = x;
  return Status::Ok();
}

Status HeaderBool(std::string_view text, std::string_view name, bool& out) {
  auto is = [&](std::string_view word) {
    if (word.size() != text.size()) return false;
    for (size_t i = 0; i < word.size(); ++i) {
      char c = text[i];
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      if (c != word[i]) return false;
    }
    return true;
  };
  if (is("1") || is("true") || is("yes") || is("on")) {
    out = true;
  } else if (is("0") || is("false") || is("no") || is("off")) {
    out = false;
  } else {
    return InvalidArgument(std::string(name) + ": must be a boolean (1/0/true/false)");
  }
  return Status::Ok();
}

}  // namespace

Status MergeControlJson(const nlohmann::json& body, GlobalKnobs& knobs) {
  if (!body.is_object()) return InvalidArgument("control body must be a JSON object");
  GlobalKnobs next = knobs;
  for (const auto& [key, value] : body.items()) {
    bool known = false;
    for (const IntKnob& k : kIntKnobs) {
      if (key == k.key) {
        KINFER_RETURN_IF_ERROR(JsonInt(value, key, k.min, k.max, next.settings.*k.field));
        known = true;
      }
    }
    for (const BoolKnob& k : kBoolKnobs) {
      if (key == k.key) {
        KINFER_RETURN_IF_ERROR(JsonBool(value, key, next.settings.*k.field));
        known = true;
      }
    }
    if (key == "fail_first") {
      KINFER_RETURN_IF_ERROR(JsonInt(value, key, 0, kMaxFailFirst, next.fail_first));
      known = true;
    } else if (key == "capacity") {
      KINFER_RETURN_IF_ERROR(JsonInt(value, key, 0, kMaxCapacity, next.capacity));
      known = true;
    }
    if (!known) return InvalidArgument("unknown control key '" + key + "'");
  }
  knobs = next;
  return Status::Ok();
}

Status ApplyHeaderOverrides(const boost::beast::http::fields& headers, FakeSettings& settings) {
  FakeSettings next = settings;
  for (const IntKnob& k : kIntKnobs) {
    auto it = headers.find(k.header);
    if (it == headers.end()) continue;
    std::string_view text(it->value().data(), it->value().size());
    KINFER_RETURN_IF_ERROR(HeaderInt(text, k.header, k.min, k.max, next.*k.field));
  }
  for (const BoolKnob& k : kBoolKnobs) {
    auto it = headers.find(k.header);
    if (it == headers.end()) continue;
    std::string_view text(it->value().data(), it->value().size());
    KINFER_RETURN_IF_ERROR(HeaderBool(text, k.header, next.*k.field));
  }
  settings = next;
  return Status::Ok();
}

nlohmann::json ToJson(const GlobalKnobs& knobs) {
  nlohmann::json j = nlohmann::json::object();
  for (const IntKnob& k : kIntKnobs) j[k.key] = knobs.settings.*k.field;
  for (const BoolKnob& k : kBoolKnobs) j[k.key] = knobs.settings.*k.field;
  j["fail_first"] = knobs.fail_first;
  j["capacity"] = knobs.capacity;
  return j;
}

}  // namespace kinfer::fake
