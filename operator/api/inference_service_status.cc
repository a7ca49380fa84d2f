// InferenceService status: lenient parsing (the operator rewrites whatever it cannot read) and
// the JSON the status subresource stores.
#include <string>

#include "operator/api/inference_service.h"
#include "operator/api/json_fields.h"

namespace kinfer::api {

namespace {

using nlohmann::json;

std::string StringOr(const json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::optional<int64_t> IntOr(const json& object, const char* key) {
  auto it = object.find(key);
  int64_t value = 0;
  if (it == object.end() || !JsonToInt64(*it, &value)) return std::nullopt;
  return value;
}

std::optional<int> Int32Or(const json& object, const char* key) {
  auto v = IntOr(object, key);
  if (!v || *v < 0 || *v > INT32_MAX) return std::nullopt;
  return static_cast<int>(*v);
}

std::optional<double> NumberOr(const json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

}  // namespace

const Condition* InferenceServiceStatus::FindCondition(std::string_view type) const {
  for (const Condition& c : conditions) {
    if (c.type == type) return &c;
  }
  return nullptr;
}

InferenceServiceStatus ParseInferenceServiceStatus(const json& status) {
  InferenceServiceStatus s;
  if (!status.is_object()) return s;
  s.observed_generation = IntOr(status, "observedGeneration");
  if (auto it = status.find("conditions"); it != status.end() && it->is_array()) {
    for (const json& c : *it) {
      if (!c.is_object()) continue;
      Condition cond;
      cond.type = StringOr(c, "type");
      if (cond.type.empty()) continue;
      cond.status = StringOr(c, "status");
      cond.reason = StringOr(c, "reason");
      cond.message = StringOr(c, "message");
      cond.observed_generation = IntOr(c, "observedGeneration").value_or(0);
      cond.last_transition_time = StringOr(c, "lastTransitionTime");
      s.conditions.push_back(std::move(cond));
    }
  }
  s.replicas = Int32Or(status, "replicas");
  s.ready_replicas = Int32Or(status, "readyReplicas");
  s.desired_replicas = Int32Or(status, "desiredReplicas");
  s.selector = StringOr(status, "selector");
  s.url = StringOr(status, "url");
  s.observed_queue_depth = NumberOr(status, "observedQueueDepth");
  s.observed_p99_ttft_seconds = NumberOr(status, "observedP99TtftSeconds");
  s.last_scale_time = StringOr(status, "lastScaleTime");
  s.last_scale_reason = StringOr(status, "lastScaleReason");
  return s;
}

json ToJson(const Condition& c) {
  return json{{"type", c.type},
              {"status", c.status},
              {"reason", c.reason},
              {"message", c.message},
              {"observedGeneration", c.observed_generation},
              {"lastTransitionTime", c.last_transition_time}};
}

json ToJson(const InferenceServiceStatus& s) {
  json out = json::object();
  if (s.observed_generation) out["observedGeneration"] = *s.observed_generation;
  if (!s.conditions.empty()) {
    json conditions = json::array();
    for (const Condition& c : s.conditions) conditions.push_back(ToJson(c));
    out["conditions"] = std::move(conditions);
  }
  if (s.replicas) out["replicas"] = *s.replicas;
  if (s.ready_replicas) out["readyReplicas"] = *s.ready_replicas;
  if (s.desired_replicas) out["desiredReplicas"] = *s.desired_replicas;
  if (!s.selector.empty()) out["selector"] = s.selector;
  if (!s.url.empty()) out["url"] = s.url;
  if (s.observed_queue_depth) out["observedQueueDepth"] = *s.observed_queue_depth;
  if (s.observed_p99_ttft_seconds) out["observedP99TtftSeconds"] = *s.observed_p99_ttft_seconds;
  if (!s.last_scale_time.empty()) out["lastScaleTime"] = s.last_scale_time;
  if (!s.last_scale_reason.empty()) out["lastScaleReason"] = s.last_scale_reason;
  return out;
}

std::string SelectorString(const std::string& name) {
  return std::string(kInferenceServiceLabel) + "=" + name;
}

std::string ServiceUrl(const ObjectMeta& metadata) {
  const std::string ns = metadata.namespace_name.empty() ? "default" : metadata.namespace_name;
  return "http://" + metadata.name + "." + ns + ".svc.cluster.local:8080";
}

}  // namespace kinfer::api
