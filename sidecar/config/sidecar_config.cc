// SidecarConfig: defaults, validation, the text parsers and the YAML loader (see the header).
//
// The loader is table-driven: every YAML mapping is read by ReadMap() against a list of Fields
// (a key and the reader that stores its value), so the unknown-key and duplicate-key checks and
// the key paths in error messages live in one place. yaml-cpp reports errors by throwing; every
// one of its exceptions is caught in LoadSidecarConfigYaml() and returned as a Status.
#include "sidecar/config/sidecar_config.h"

#include <arpa/inet.h>

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <functional>
#include <optional>
#include <set>
#include <type_traits>
#include <utility>

namespace kinfer {

using std::chrono::nanoseconds;
using namespace std::chrono_literals;

namespace {

static_assert(sizeof(size_t) >= sizeof(uint64_t), "byte sizes are stored in size_t fields");

// ---- small text helpers ----

// Parses the whole of `text` as a number (integral or floating) with std::from_chars.
template <typename T>
bool ParseWhole(std::string_view text, T* out) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *out);
  return !text.empty() && ec == std::errc() && ptr == end;
}

// A name -> value table (units, enum names); looked up by exact name.
template <typename T, size_t N>
using NameTable = std::pair<std::string_view, T>[N];

template <typename T, size_t N>
const T* FindName(const NameTable<T, N>& table, std::string_view name) {
  for (const auto& [key, value] : table) {
    if (key == name) return &value;
  }
  return nullptr;
}

// "a, b, c" (empty names, which stand for "no unit", are left out).
template <typename T, size_t N>
std::string Names(const NameTable<T, N>& table) {
  std::string out;
  for (const auto& [key, value] : table) {
    if (key.empty()) continue;
    if (!out.empty()) out += ", ";
    out += key;
  }
  return out;
}

constexpr NameTable<double, 7> kDurationUnits = {{"", 1e9},  {"ns", 1},   {"us", 1e3},  {"ms", 1e6},
                                                 {"s", 1e9}, {"m", 60e9}, {"h", 3600e9}};

// clang-format off
constexpr NameTable<uint64_t, 10> kByteUnits = {
    {"", 1}, {"B", 1}, {"KB", 1000}, {"MB", 1000'000}, {"GB", 1000'000'000},
    {"TB", 1000'000'000'000}, {"KiB", 1ull << 10}, {"MiB", 1ull << 20}, {"GiB", 1ull << 30},
    {"TiB", 1ull << 40}};
// clang-format on

constexpr NameTable<CircuitBreakerWindowType, 2> kWindowTypes = {
    {"count", CircuitBreakerWindowType::kCountBased},
    {"time", CircuitBreakerWindowType::kTimeBased}};

// degrade.on entries: the trigger names are the x-kinfer-degraded values (DegradeReasonName).
constexpr NameTable<bool DegradeTriggers::*, 3> kTriggers = {
    {"breaker_open", &DegradeTriggers::breaker_open},
    {"deadline", &DegradeTriggers::deadline_at_risk},
    {"slo", &DegradeTriggers::slo_breach}};

StatusOr<uint16_t> ParsePort(std::string_view text) {
  unsigned port = 0;
  if (!ParseWhole(text, &port) || port > 65535) {
    return InvalidArgument("port '" + std::string(text) + "' is not an integer in [0, 65535]");
  }
  return static_cast<uint16_t>(port);
}

// "host[:port]" or "[v6][:port]"; no port gives `default_port`, or an error when it is nullopt.
// The host may be empty (the callers decide what that means).
StatusOr<HostPort> SplitHostPort(std::string_view text, std::optional<uint16_t> default_port) {
  HostPort out;
  std::string_view rest;
  if (text.starts_with('[')) {
    size_t close = text.find(']');
    if (close == std::string_view::npos) return InvalidArgument("missing ']' after an IPv6 host");
    out.host = text.substr(1, close - 1);
    if (out.host.empty()) return InvalidArgument("empty IPv6 host '[]'");
    rest = text.substr(close + 1);
    if (!rest.empty() && rest[0] != ':') return InvalidArgument("expected ':PORT' after ']'");
  } else {
    size_t colon = text.find(':');
    if (colon != text.rfind(':')) return InvalidArgument("an IPv6 host needs brackets: [::1]:80");
    out.host = text.substr(0, colon);
    if (colon != std::string_view::npos) rest = text.substr(colon);
  }
  if (out.host.find_first_of(" \t/@?#[]") != std::string::npos) {
    return InvalidArgument("bad host '" + out.host + "'");
  }
  if (rest.empty()) {
    if (!default_port) return InvalidArgument("missing ':PORT'");
    out.port = *default_port;
  } else {
    KINFER_ASSIGN_OR_RETURN(out.port, ParsePort(rest.substr(1)));
  }
  return out;
}

// ---- YAML reading ----

using Node = YAML::Node;
// Reads one value into the config. `path` is the key path for messages ("admission.max_queue").
using FieldReader = std::function<Status(const Node& value, const std::string& path)>;
struct Field {
  std::string_view key;
  FieldReader read;
};
using Fields = std::vector<Field>;

std::string Join(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

// " (line N)" where yaml-cpp knows where `node` came from.
std::string Where(const Node& node) {
  const YAML::Mark mark = node.Mark();
  return mark.is_null() ? "" : " (line " + std::to_string(mark.line + 1) + ")";
}

Status Bad(const Node& node, const std::string& path, std::string_view what) {
  return InvalidArgument((path.empty() ? std::string("top level") : path) + ": " +
                         std::string(what) + Where(node));
}

std::string Describe(const Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      return "'" + node.Scalar() + "'";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a map";
    default:
      return "no value";
  }
}

template <typename T>
constexpr std::string_view TypeName() {
  if constexpr (std::is_same_v<T, bool>)
    return "true or false";
  else if constexpr (std::is_same_v<T, std::string>)
    return "a string";
  else if constexpr (std::is_unsigned_v<T>)
    return "a non-negative integer";
  else if constexpr (std::is_integral_v<T>)
    return "an integer";
  else
    return "a finite number";
}

// One scalar: bool, integer (range-checked by from_chars), finite floating point, or string.
template <typename T>
Status Decode(const Node& node, const std::string& path, T* out) {
  bool ok = node.IsScalar();
  if (ok) {
    if constexpr (std::is_same_v<T, bool>) {
      ok = YAML::convert<bool>::decode(node, *out);
    } else if constexpr (std::is_same_v<T, std::string>) {
      *out = node.Scalar();
    } else {
      ok = ParseWhole(node.Scalar(), out);
      if constexpr (std::is_floating_point_v<T>) ok = ok && std::isfinite(*out);
    }
  }
  if (ok) return Status::Ok();
  return Bad(node, path, "expected " + std::string(TypeName<T>()) + ", got " + Describe(node));
}

// One of the names in `table`.
template <typename T, size_t N>
Status DecodeName(const Node& node, const std::string& path, const NameTable<T, N>& table, T* out) {
  std::string name;
  KINFER_RETURN_IF_ERROR(Decode(node, path, &name));
  if (const T* value = FindName(table, name)) {
    *out = *value;
    return Status::Ok();
  }
  return Bad(node, path, "expected one of " + Names(table) + ", got '" + name + "'");
}

// A list, each element read by read_one(node, "path[i]", &element); replaces *out when all read.
template <typename T, typename ReadOne>
Status ReadList(const Node& node, const std::string& path, std::vector<T>* out, ReadOne read_one) {
  if (!node.IsSequence()) return Bad(node, path, "expected a list, got " + Describe(node));
  std::vector<T> items(node.size());
  for (size_t i = 0; i < items.size(); ++i) {
    KINFER_RETURN_IF_ERROR(read_one(node[i], path + "[" + std::to_string(i) + "]", &items[i]));
  }
  *out = std::move(items);
  return Status::Ok();
}

// A mapping whose keys must be among `fields`. Null (every key commented out) keeps the defaults.
Status ReadMap(const Node& node, const std::string& path, const Fields& fields) {
  if (node.IsNull()) return Status::Ok();
  if (!node.IsMap()) return Bad(node, path, "expected a map, got " + Describe(node));
  std::set<std::string> seen;
  for (const auto& entry : node) {
    std::string key;
    KINFER_RETURN_IF_ERROR(Decode(entry.first, path, &key));
    const std::string key_path = Join(path, key);
    auto field =
        std::find_if(fields.begin(), fields.end(), [&](const Field& f) { return f.key == key; });
    if (field == fields.end()) {
      std::string known;
      for (const Field& f : fields) known.append(known.empty() ? "" : ", ").append(f.key);
      return InvalidArgument("unknown key '" + key_path + "'" + Where(entry.first) +
                             "; known keys: " + known);
    }
    if (!seen.insert(key).second) {
      return InvalidArgument("duplicate key '" + key_path + "'" + Where(entry.first));
    }
    KINFER_RETURN_IF_ERROR(field->read(entry.second, key_path));
  }
  return Status::Ok();
}

// ---- field readers ----

template <typename T>
FieldReader Value(T* out) {
  return [out](const Node& node, const std::string& path) { return Decode(node, path, out); };
}

template <typename T, size_t N>
FieldReader NameValue(T* out, const NameTable<T, N>& table) {
  return [out, &table](const Node& node, const std::string& path) {
    return DecodeName(node, path, table, out);
  };
}

FieldReader Section(Fields fields) {
  return [fields = std::move(fields)](const Node& node, const std::string& path) {
    return ReadMap(node, path, fields);
  };
}

// A string turned into a value by `parse` (ParseDuration, ...) and handed to `store`.
template <typename Parse, typename Store>
FieldReader Parsed(Parse parse, Store store) {
  return [parse, store](const Node& node, const std::string& path) -> Status {
    std::string text;
    KINFER_RETURN_IF_ERROR(Decode(node, path, &text));
    auto parsed = parse(text);
    if (!parsed.ok()) return Bad(node, path, parsed.status().message());
    store(std::move(parsed).value());
    return Status::Ok();
  };
}

template <typename T>
auto Assign(T* out) {
  return [out](T value) { *out = std::move(value); };
}

template <typename Rep, typename Period>
FieldReader DurationValue(std::chrono::duration<Rep, Period>* out) {
  return Parsed(ParseDuration, [out](nanoseconds value) {
    *out = std::chrono::duration_cast<std::chrono::duration<Rep, Period>>(value);
  });
}

// A duration stored as seconds in a double (the SLO).
FieldReader SecondsValue(double* out) {
  return Parsed(ParseDuration,
                [out](nanoseconds value) { *out = std::chrono::duration<double>(value).count(); });
}

template <typename T>
FieldReader ByteSizeValue(T* out) {
  return Parsed(ParseByteSize, [out](uint64_t value) { *out = static_cast<T>(value); });
}

FieldReader Buckets(std::vector<double>* out) {
  return [out](const Node& node, const std::string& path) {
    return ReadList(node, path, out, Decode<double>);
  };
}

// degrade.on: a list of trigger names; the listed triggers are on, the others off.
FieldReader Triggers(DegradeTriggers* out) {
  return [out](const Node& node, const std::string& path) -> Status {
    std::vector<bool DegradeTriggers::*> on;
    KINFER_RETURN_IF_ERROR(ReadList(
        node, path, &on, [](const Node& n, const std::string& p, bool DegradeTriggers::** member) {
          return DecodeName(n, p, kTriggers, member);
        }));
    DegradeTriggers triggers{false, false, false};
    for (bool DegradeTriggers::*member : on) triggers.*member = true;
    *out = triggers;
    return Status::Ok();
  };
}

// A map from names the operator picks (tenants, API keys) to entries read with fields_for(entry).
// API keys are secrets: their paths name the entry's position ("api_keys[2]"), not the key.
template <typename V>
FieldReader NamedMap(std::unordered_map<std::string, V>* out, Fields (*fields_for)(V*),
                     bool secret_names) {
  return [=](const Node& node, const std::string& path) -> Status {
    if (!node.IsNull() && !node.IsMap()) {
      return Bad(node, path, "expected a map, got " + Describe(node));
    }
    std::unordered_map<std::string, V> entries;
    size_t index = 0;
    for (const auto& entry : node) {
      std::string name;
      KINFER_RETURN_IF_ERROR(Decode(entry.first, path, &name));
      const std::string entry_path =
          secret_names ? path + "[" + std::to_string(index++) + "]" : Join(path, name);
      if (name.empty()) return Bad(entry.first, entry_path, "empty name");
      auto [it, inserted] = entries.try_emplace(name);
      if (!inserted) return Bad(entry.first, entry_path, "given twice");
      KINFER_RETURN_IF_ERROR(ReadMap(entry.second, entry_path, fields_for(&it->second)));
    }
    *out = std::move(entries);
    return Status::Ok();
  };
}

Fields ApiKeyFields(SidecarConfig::ApiKey* key) {
  return {{"class", Value(&key->class_name)}, {"tenant", Value(&key->tenant)}};
}

Fields RateLimitFields(RateLimit* limit) {
  return {{"requests_per_second", Value(&limit->requests_per_second)},
          {"request_burst", Value(&limit->request_burst)},
          {"tokens_per_second", Value(&limit->tokens_per_second)},
          {"token_burst", Value(&limit->token_burst)}};
}

Status ReadClass(const Node& node, const std::string& path, PriorityClassConfig* c) {
  return ReadMap(node, path,
                 {{"name", Value(&c->name)},
                  {"timeout", DurationValue(&c->timeout)},
                  {"degrade", Section({{"fallback_model", Value(&c->degrade.allow_fallback_model)},
                                       {"max_tokens_cap", Value(&c->degrade.max_tokens_cap)},
                                       {"on", Triggers(&c->degrade.degrade_on)}})}});
}

// degrade.fallback_upstream: "" = the primary upstream.
FieldReader FallbackUpstream(SidecarConfig* c) {
  using TextAndUrl = std::pair<std::string, UpstreamUrl>;
  return Parsed(
      [](std::string_view text) -> StatusOr<TextAndUrl> {
        if (text.empty()) return TextAndUrl();
        KINFER_ASSIGN_OR_RETURN(UpstreamUrl url, ParseUpstreamUrl(text));
        return TextAndUrl(text, std::move(url));
      },
      [c](TextAndUrl parsed) {
        c->has_fallback_upstream = !parsed.first.empty();
        c->fallback_upstream_text = std::move(parsed.first);
        c->fallback_upstream = std::move(parsed.second);
      });
}

// Every key of the file; the example file documents them in the same order.
Fields TopLevelFields(SidecarConfig* c) {
  AdmissionConfig& a = c->admission;
  CircuitBreakerConfig& b = c->breaker;
  RetryConfig& r = c->retries;
  return {
      {"listen", Parsed(ParseHostPort, Assign(&c->listen))},
      {"upstream", Parsed(ParseUpstreamUrl, Assign(&c->upstream))},
      {"max_body_bytes", ByteSizeValue(&c->max_body_bytes)},
      {"connect_timeout", DurationValue(&c->connect_timeout)},
      {"upstream_timeout", DurationValue(&c->upstream_timeout)},
      {"drain_timeout", DurationValue(&c->drain_timeout)},
      {"client_write_timeout", DurationValue(&c->client_write_timeout)},
      {"client_idle_timeout", DurationValue(&c->client_idle_timeout)},
      {"max_connections", Value(&c->max_connections)},
      {"default_class", Value(&c->default_class)},
      {"classes",
       [c](const Node& node, const std::string& path) {
         return ReadList(node, path, &c->classes, ReadClass);
       }},
      {"api_keys", NamedMap(&c->api_keys, ApiKeyFields, /*secret_names=*/true)},
      {"require_api_key", Value(&c->require_api_key)},
      {"admission", Section({{"max_concurrency", Value(&a.max_concurrency)},
                             {"reserved_for_top", Value(&a.reserved_for_top)},
                             {"max_queue", Value(&a.max_queue_total)},
                             {"max_queue_per_class", Value(&a.max_queue_per_class)},
                             {"initial_service_time", DurationValue(&a.initial_service_time)},
                             {"ewma_alpha", Value(&a.ewma_alpha)},
                             {"codel_target", DurationValue(&a.codel_target)},
                             {"codel_interval", DurationValue(&a.codel_interval)},
                             {"min_retry_after", DurationValue(&a.min_retry_after)}})},
      {"rate_limits",
       Section({{"default", Section(RateLimitFields(&c->rate_limits.default_limit))},
                {"overrides", NamedMap(&c->rate_limits.overrides, RateLimitFields, false)},
                {"max_tracked_keys", Value(&c->rate_limits.max_tracked_keys)}})},
      {"circuit_breaker",
       Section({{"window_type", NameValue(&b.window_type, kWindowTypes)},
                {"window_size", Value(&b.window_size)},
                {"minimum_calls", Value(&b.minimum_calls)},
                {"failure_rate_threshold", Value(&b.failure_rate_threshold)},
                {"slow_call_duration", DurationValue(&b.slow_call_duration)},
                {"slow_call_rate_threshold", Value(&b.slow_call_rate_threshold)},
                {"open_duration", DurationValue(&b.open_duration)},
                {"half_open_permitted_calls", Value(&b.half_open_permitted_calls)}})},
      {"degrade", Section({{"fallback_model", Value(&c->fallback_model)},
                           {"fallback_upstream", FallbackUpstream(c)},
                           {"slo_ttft_p99", SecondsValue(&c->slo_ttft_p99_seconds)},
                           {"top_class_only_when_primary_down",
                            Value(&c->top_class_only_when_primary_down)}})},
      {"cache", Section({{"enabled", Value(&c->cache_enabled)},
                         {"max_bytes", ByteSizeValue(&c->cache.max_bytes)},
                         {"ttl", DurationValue(&c->cache.ttl)},
                         {"max_entry_bytes", ByteSizeValue(&c->cache.max_entry_bytes)}})},
      {"retries", Section({{"enabled", Value(&r.enabled)},
                           {"max_retries", Value(&r.max_retries)},
                           {"budget_percent", Value(&r.budget_percent)},
                           {"min_retries_per_second", Value(&r.min_retries_per_second)},
                           {"backoff", DurationValue(&r.backoff)}})},
      {"metrics", Section({{"ttft_buckets", Buckets(&c->ttft_buckets)},
                           {"e2e_buckets", Buckets(&c->e2e_buckets)},
                           {"stats_window", DurationValue(&c->stats_window.window)},
                           {"stats_bucket", DurationValue(&c->stats_window.bucket_width)}})},
  };
}

// ---- validation helpers ----

bool ValidClassName(std::string_view name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_' || ch == '-';
  });
}

Status CheckBuckets(const std::vector<double>& buckets, std::string_view key) {
  bool ok = !buckets.empty();
  for (size_t i = 0; ok && i < buckets.size(); ++i) {
    ok = std::isfinite(buckets[i]) && buckets[i] > 0 && (i == 0 || buckets[i] > buckets[i - 1]);
  }
  if (ok) return Status::Ok();
  return InvalidArgument(std::string(key) +
                         ": must be non-empty, finite, > 0 and strictly increasing");
}

// A default class: the DegradeClassConfig defaults (fallback allowed, every trigger on; the first
// class's "breaker_open only" rule is top_class_only_when_primary_down) with a token cap.
PriorityClassConfig MakeClass(std::string name, nanoseconds timeout, int64_t max_tokens_cap) {
  PriorityClassConfig c;
  c.name = std::move(name);
  c.timeout = timeout;
  c.degrade.max_tokens_cap = max_tokens_cap;
  return c;
}

}  // namespace

// ---- public parsers ----

StatusOr<HostPort> ParseHostPort(std::string_view text) {
  StatusOr<HostPort> parsed = SplitHostPort(text, std::nullopt);
  if (!parsed.ok()) {
    return parsed.status().WithContext("bad address '" + std::string(text) +
                                       "' (expected HOST:PORT, :PORT or [v6]:PORT)");
  }
  if (parsed->host.empty()) parsed->host = "::";  // both families (SessionAcceptor::Listen)
  return parsed;
}

StatusOr<UpstreamUrl> ParseUpstreamUrl(std::string_view text) {
  const std::string context = "bad upstream URL '" + std::string(text) + "'";
  constexpr std::string_view kScheme = "http://";
  if (text.starts_with("https://")) {
    return InvalidArgument(context +
                           ": https is not supported (the upstream runs on localhost in "
                           "the same pod; use http://)");
  }
  if (!text.starts_with(kScheme)) {
    return InvalidArgument(context + ": expected http://host[:port][/base]");
  }
  std::string_view rest = text.substr(kScheme.size());
  if (rest.find_first_of("?#@") != std::string_view::npos) {
    return InvalidArgument(context + ": user info, query and fragment are not supported");
  }
  const size_t slash = rest.find('/');
  StatusOr<HostPort> authority = SplitHostPort(rest.substr(0, slash), 80);
  if (!authority.ok()) return authority.status().WithContext(context);
  if (authority->host.empty()) return InvalidArgument(context + ": missing host");
  if (authority->port == 0) return InvalidArgument(context + ": port must be in [1, 65535]");

  UpstreamUrl url;
  url.host = std::move(authority->host);
  url.port = authority->port;
  if (slash != std::string_view::npos) url.base_path = rest.substr(slash);
  while (url.base_path.ends_with('/')) url.base_path.pop_back();
  return url;
}

StatusOr<nanoseconds> ParseDuration(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return InvalidArgument("bad duration '" + std::string(text) + "': " + std::string(why));
  };
  double value = 0;
  const char* end = text.data() + text.size();
  auto [unit_begin, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc()) return bad("expected a number and a unit, such as 250ms, 30s or 2m");
  const std::string_view unit(unit_begin, static_cast<size_t>(end - unit_begin));
  const double* ns_per_unit = FindName(kDurationUnits, unit);
  if (!ns_per_unit) {
    return bad("unknown unit '" + std::string(unit) + "' (use " + Names(kDurationUnits) +
               ", or none for seconds)");
  }
  if (!std::isfinite(value)) return bad("must be finite");
  if (value < 0) return bad("must be >= 0");
  const double ns = value * *ns_per_unit;
  if (ns >= 9.2e18) return bad("too large");
  return nanoseconds(std::llround(ns));
}

StatusOr<uint64_t> ParseByteSize(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return InvalidArgument("bad byte size '" + std::string(text) + "': " + std::string(why));
  };
  const size_t digits = std::min(text.find_first_not_of("0123456789"), text.size());
  uint64_t count = 0;
  if (digits == 0) return bad("expected an integer with an optional unit, such as 64MiB");
  if (!ParseWhole(text.substr(0, digits), &count)) return bad("too large");
  const uint64_t* multiplier = FindName(kByteUnits, text.substr(digits));
  if (!multiplier) {
    return bad("unknown unit '" + std::string(text.substr(digits)) + "' (use " + Names(kByteUnits) +
               ")");
  }
  if (count > UINT64_MAX / *multiplier) return bad("too large");
  return count * *multiplier;
}

// ---- SidecarConfig ----

SidecarConfig::SidecarConfig()
    : classes{MakeClass("critical", 30s, 0), MakeClass("standard", 60s, 0),
              MakeClass("batch", 120s, 256)},
      ttft_buckets{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
      e2e_buckets{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300} {
  admission.num_priorities = static_cast<int>(classes.size());
  breaker.window_type = CircuitBreakerWindowType::kTimeBased;
  breaker.window_size = 10;
  breaker.minimum_calls = 20;
  breaker.failure_rate_threshold = 50;
  breaker.slow_call_duration = 30s;
  breaker.slow_call_rate_threshold = 100;
  breaker.open_duration = 10s;
  breaker.half_open_permitted_calls = 3;
}

int SidecarConfig::ClassIndex(std::string_view name) const {
  for (size_t i = 0; i < classes.size(); ++i) {
    if (classes[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

AdmissionConfig SidecarConfig::MakeAdmissionConfig() const {
  AdmissionConfig config = admission;
  config.num_priorities = static_cast<int>(classes.size());
  return config;
}

DegradeConfig SidecarConfig::MakeDegradeConfig() const {
  DegradeConfig config;
  config.classes.clear();
  for (const PriorityClassConfig& c : classes) config.classes.push_back(c.degrade);
  config.top_class_only_when_primary_down = top_class_only_when_primary_down;
  config.slo_ttft_p99 = slo_ttft_p99_seconds;
  return config;
}

void SidecarConfig::InsertSloBucketEdge() {
  const double slo = slo_ttft_p99_seconds;
  if (!(slo > 0) || !std::isfinite(slo)) return;
  auto it = std::lower_bound(ttft_buckets.begin(), ttft_buckets.end(), slo);
  if (it == ttft_buckets.end() || *it != slo) ttft_buckets.insert(it, slo);
}

Status SidecarConfig::Validate() const {
  // Startup binds with make_address, which takes an IP address only (no name is resolved, and
  // "1.2.3" is no IPv4 address): judge the host the same way here, so --check-config agrees.
  {
    in6_addr addr;
    if (inet_pton(AF_INET, listen.host.c_str(), &addr) != 1 &&
        inet_pton(AF_INET6, listen.host.c_str(), &addr) != 1) {
      return InvalidArgument("listen: '" + listen.host +
                             "' is not an IPv4 or IPv6 address (host names are not resolved: "
                             "write 127.0.0.1 for localhost, :PORT for all interfaces)");
    }
  }
  if (upstream.host.empty() || upstream.port == 0) {
    return InvalidArgument("upstream: needs a host and a port in [1, 65535]");
  }
  if (max_body_bytes == 0) return InvalidArgument("max_body_bytes: must be > 0");
  if (connect_timeout <= 0s) return InvalidArgument("connect_timeout: must be > 0");
  if (upstream_timeout <= 0s) return InvalidArgument("upstream_timeout: must be > 0");
  if (drain_timeout < 0s) return InvalidArgument("drain_timeout: must be >= 0");
  if (client_write_timeout <= 0s) return InvalidArgument("client_write_timeout: must be > 0");
  if (client_idle_timeout <= 0s) return InvalidArgument("client_idle_timeout: must be > 0");
  if (max_connections > (uint64_t{1} << 20)) {
    return InvalidArgument("max_connections: must be at most 1048576 (0: from the open-file limit)");
  }

  if (classes.empty()) return InvalidArgument("classes: must name at least one class");
  for (size_t i = 0; i < classes.size(); ++i) {
    const PriorityClassConfig& c = classes[i];
    const std::string path = "classes[" + std::to_string(i) + "]";
    if (!ValidClassName(c.name)) {
      return InvalidArgument(path + ".name: '" + c.name + "' must match [a-z0-9_-]+");
    }
    if (ClassIndex(c.name) != static_cast<int>(i)) {
      return InvalidArgument(path + ".name: '" + c.name + "' is given twice");
    }
    if (c.timeout <= 0s) return InvalidArgument(path + ".timeout: must be > 0");
    if (c.degrade.max_tokens_cap < 0) {
      return InvalidArgument(path + ".degrade.max_tokens_cap: must be >= 0");
    }
  }
  if (ClassIndex(default_class) < 0) {
    return InvalidArgument("default_class: '" + default_class + "' is not in classes");
  }
  if (require_api_key && api_keys.empty()) {
    return InvalidArgument("require_api_key: true with no api_keys would refuse every request");
  }
  for (const auto& [key, entry] : api_keys) {
    if (!entry.class_name.empty() && ClassIndex(entry.class_name) < 0) {
      // The key itself is a secret: name its tenant, not the key.
      const std::string which = entry.tenant.empty() ? "a key with no tenant"
                                                     : "the key of tenant '" + entry.tenant + "'";
      return InvalidArgument("api_keys: " + which + " names class '" + entry.class_name +
                             "', which is not in classes");
    }
  }

  KINFER_RETURN_IF_ERROR(MakeAdmissionConfig().Validate().WithContext("admission"));
  KINFER_RETURN_IF_ERROR(rate_limits.Validate().WithContext("rate_limits"));
  KINFER_RETURN_IF_ERROR(breaker.Validate().WithContext("circuit_breaker"));
  if (has_fallback_upstream && fallback_model.empty()) {
    return InvalidArgument("degrade.fallback_upstream: set, but degrade.fallback_model is empty");
  }
  KINFER_RETURN_IF_ERROR(MakeDegradeConfig().Validate().WithContext("degrade"));
  KINFER_RETURN_IF_ERROR(cache.Validate().WithContext("cache"));

  if (retries.max_retries < 0) return InvalidArgument("retries.max_retries: must be >= 0");
  if (!(retries.budget_percent >= 0 && retries.budget_percent <= 100)) {
    return InvalidArgument("retries.budget_percent: must be in [0, 100]");
  }
  if (retries.min_retries_per_second < 0) {
    return InvalidArgument("retries.min_retries_per_second: must be >= 0");
  }
  if (retries.backoff < 0s) return InvalidArgument("retries.backoff: must be >= 0");

  KINFER_RETURN_IF_ERROR(CheckBuckets(ttft_buckets, "metrics.ttft_buckets"));
  KINFER_RETURN_IF_ERROR(CheckBuckets(e2e_buckets, "metrics.e2e_buckets"));
  return stats_window.Validate().WithContext("metrics (stats_window, stats_bucket)");
}

// ---- loading ----

StatusOr<SidecarConfig> LoadSidecarConfigYaml(std::string_view yaml_text) {
  SidecarConfig config;
  try {
    const Node root = YAML::Load(std::string(yaml_text));
    KINFER_RETURN_IF_ERROR(ReadMap(root, "", TopLevelFields(&config)));
  } catch (const YAML::ParserException& e) {
    return InvalidArgument("YAML syntax error at line " + std::to_string(e.mark.line + 1) + ": " +
                           e.msg);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(std::string("YAML error: ") + e.what());
  }
  config.admission.num_priorities = static_cast<int>(config.classes.size());
  config.InsertSloBucketEdge();
  KINFER_RETURN_IF_ERROR(config.Validate());
  return config;
}

StatusOr<SidecarConfig> LoadSidecarConfigFile(const std::string& path) {
  // istream::read turns a read error (a directory, EIO) into badbit; a streambuf iterator would
  // let libstdc++'s exception escape.
  std::ifstream in(path, std::ios::binary);
  std::string text;
  char chunk[4096];
  while (in.read(chunk, sizeof chunk), in.gcount() > 0) text.append(chunk, in.gcount());
  if (!in.is_open() || in.bad()) return NotFound("cannot read config file '" + path + "'");
  StatusOr<SidecarConfig> config = LoadSidecarConfigYaml(text);
  if (!config.ok()) return config.status().WithContext(path);
  return config;
}

}  // namespace kinfer
