#include "operator/reconcile/status.h"

#include <ctime>

#include "operator/reconcile/object_diff.h"

namespace kinfer::reconcile {

namespace {

using nlohmann::json;

int IntAt(const json& object, std::initializer_list<std::string_view> path, int fallback = 0) {
  const json& v = At(object, path);
  return v.is_number_integer() ? v.get<int>() : fallback;
}

api::Condition Make(const char* type, const char* status, const char* reason, std::string message,
                    int64_t generation) {
  return api::Condition{type, status, reason, std::move(message), generation, ""};
}

std::string Plural(int n, const char* what) {
  return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
}

std::string StrOf(const json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// The Deployment's condition of this type (with `status` and `reason` when given), or null.
const json* DeploymentCondition(const Observed& observed, const char* type, const char* status,
                                const char* reason = nullptr) {
  if (!observed.deployment) return nullptr;
  const json& conditions = At(*observed.deployment, {"status", "conditions"});
  if (!conditions.is_array()) return nullptr;
  for (const json& c : conditions) {
    if (c.is_object() && StrOf(c, "type") == type &&
        (status == nullptr || StrOf(c, "status") == status) &&
        (reason == nullptr || StrOf(c, "reason") == reason)) {
      return &c;
    }
  }
  return nullptr;
}

api::Condition Degraded(const api::InferenceService& isvc, const Observed& observed,
                        const ReconcilePlan& plan) {
  const int64_t gen = isvc.metadata.generation;
  if (!plan.conflicts.empty()) {
    std::string message;
    for (const std::string& c : plan.conflicts)
      message.append(message.empty() ? "" : "; ").append(c);
    return Make(kConditionDegraded, "True", "ReconcileError", message, gen);
  }
  if (observed.pods) {
    const PodSummary& p = *observed.pods;
    const std::pair<int, const char*> problems[] = {
        {p.model_checksum_mismatch, "ModelChecksumMismatch"},
        {p.model_not_found, "ModelNotFound"},
        {p.model_download_failed, "ModelDownloadFailed"},
        {p.image_pull_failing, "ImagePullFailed"},
        {p.container_config_error, "ContainerConfigError"},
        {p.crash_looping, "PodsCrashLooping"},
        {p.unschedulable, "PodsUnschedulable"}};
    for (const auto& [count, reason] : problems) {
      if (count > 0) {
        return Make(kConditionDegraded, "True", reason,
                    Plural(count, "pod") + " failing; " + p.first_problem, gen);
      }
    }
  }
  // Pods the ReplicaSet could not create: a quota, a Pod Security admission rejection, a missing
  // PriorityClass. No pod exists to say so; the Deployment's ReplicaFailure does.
  if (const json* c = DeploymentCondition(observed, "ReplicaFailure", "True")) {
    const std::string reason = StrOf(*c, "reason");
    return Make(kConditionDegraded, "True", "PodCreationFailed",
                "the Deployment cannot create pods" + (reason.empty() ? "" : " (" + reason + ")") +
                    ": " + StrOf(*c, "message"),
                gen);
  }
  if (DeploymentCondition(observed, "Progressing", nullptr, "ProgressDeadlineExceeded")) {
    return Make(kConditionDegraded, "True", "ProgressDeadlineExceeded",
                "the Deployment's rollout made no progress within its deadline", gen);
  }
  return Make(kConditionDegraded, "False", "AsExpected", "no problems seen", gen);
}

api::Condition Ready(const api::InferenceService& isvc, int ready) {
  const int64_t gen = isvc.metadata.generation;
  const api::InferenceServiceSpec& spec = isvc.spec;
  const int required =
      spec.autoscaling.enabled ? spec.autoscaling.min_replicas : spec.replicas.value_or(0);
  const std::string counts =
      std::to_string(ready) + " of " + std::to_string(required) + " required pods ready";
  if (required == 0)
    return Make(kConditionReady, "False", "ScaledToZero", "spec.replicas is 0", gen);
  if (ready >= required)
    return Make(kConditionReady, "True", "MinimumReplicasAvailable", counts, gen);
  if (ready == 0) return Make(kConditionReady, "False", "NoReadyReplicas", counts, gen);
  return Make(kConditionReady, "False", "MinimumReplicasUnavailable", counts, gen);
}

api::Condition Progressing(const api::InferenceService& isvc, const Observed& observed,
                           const ReconcilePlan& plan, int total, int ready) {
  const int64_t gen = isvc.metadata.generation;
  const int want = plan.desired_replicas;
  if (plan.deployment.action == Action::kCreate) {
    return Make(kConditionProgressing, "True", "RolloutInProgress", "creating the Deployment", gen);
  }
  if (plan.deployment.action == Action::kUpdate &&
      At(plan.deployment.patch, {"spec", "template"}).is_object()) {
    return Make(kConditionProgressing, "True", "RolloutInProgress",
                "rolling out a new pod template", gen);
  }
  if (observed.deployment) {
    const json& d = *observed.deployment;
    const int spec_replicas = IntAt(d, {"spec", "replicas"}, 1);
    const int updated = IntAt(d, {"status", "updatedReplicas"});
    const int existing = IntAt(d, {"status", "replicas"});
    const bool generation_seen =
        IntAt(d, {"status", "observedGeneration"}) >= IntAt(d, {"metadata", "generation"});
    if (!generation_seen || updated < spec_replicas || existing > updated) {
      return Make(
          kConditionProgressing, "True", "RolloutInProgress",
          std::to_string(updated) + " of " + std::to_string(spec_replicas) + " pods updated", gen);
    }
  }
  if (want > ready) {
    return Make(kConditionProgressing, "True", "ScalingUp",
                std::to_string(ready) + " of " + std::to_string(want) + " desired pods ready", gen);
  }
  if (want < total) {
    return Make(kConditionProgressing, "True", "ScalingDown",
                std::to_string(total) + " pods, " + std::to_string(want) + " desired", gen);
  }
  return Make(kConditionProgressing, "False", "RolloutComplete",
              Plural(want, "pod") + " up to date and ready", gen);
}

std::optional<api::Condition> ScalingActive(const api::InferenceService& isvc,
                                            const std::optional<autoscale::Decision>& decision) {
  const int64_t gen = isvc.metadata.generation;
  if (!isvc.spec.autoscaling.enabled) {
    return Make(kConditionScalingActive, "False", "ManualScaling",
                "spec.replicas sizes the service (kubectl scale, an HPA or KEDA may change it)",
                gen);
  }
  if (decision) {
    if (decision->reason == "metrics_missing") {
      return Make(kConditionScalingActive, "False", "MetricsMissing",
                  "too few ready pods reported metrics; the replica count is frozen", gen);
    }
    return Make(kConditionScalingActive, "True", "AutoscalerActive",
                "desired " + std::to_string(decision->desired) + " (" + decision->reason + ")",
                gen);
  }
  const api::Condition* prev = isvc.status.FindCondition(kConditionScalingActive);
  if (prev && prev->reason != "ManualScaling" && prev->reason != "InvalidSpec") {
    api::Condition c = *prev;  // no tick this reconcile: what the last one said stands
    c.observed_generation = gen;
    return c;
  }
  return Make(kConditionScalingActive, "Unknown", "AwaitingMetrics",
              "the autoscaler has not decided yet; minReplicas holds", gen);
}

std::string ScaleReason(const api::InferenceService& isvc, const ReconcilePlan& plan,
                        const std::optional<autoscale::Decision>& decision) {
  const api::AutoscalingSpec& a = isvc.spec.autoscaling;
  if (!a.enabled) return "manual";
  if (decision && decision->desired == plan.desired_replicas) return decision->reason;
  if (plan.desired_replicas == a.min_replicas) return "min_replicas";
  if (plan.desired_replicas == a.max_replicas) return "max_replicas";
  return decision ? decision->reason : "initial";
}

// Conditions in the canonical order, then any others the old status had.
std::vector<api::Condition> Ordered(std::vector<api::Condition> conditions) {
  std::vector<api::Condition> out;
  for (const char* type :
       {kConditionReady, kConditionProgressing, kConditionDegraded, kConditionScalingActive}) {
    for (const api::Condition& c : conditions) {
      if (c.type == type) out.push_back(c);
    }
  }
  for (const api::Condition& c : conditions) {
    const bool known = c.type == kConditionReady || c.type == kConditionProgressing ||
                       c.type == kConditionDegraded || c.type == kConditionScalingActive;
    if (!known) out.push_back(c);
  }
  return out;
}

}  // namespace

void SetCondition(std::vector<api::Condition>* conditions, api::Condition c, std::string_view now) {
  for (api::Condition& old : *conditions) {
    if (old.type != c.type) continue;
    c.last_transition_time = old.status == c.status && !old.last_transition_time.empty()
                                 ? old.last_transition_time
                                 : std::string(now);
    old = std::move(c);
    return;
  }
  c.last_transition_time = std::string(now);
  conditions->push_back(std::move(c));
}

json ComputeStatus(const api::InferenceService& isvc, const Observed& observed,
                   const ReconcilePlan& plan, const std::optional<autoscale::Decision>& decision,
                   std::string_view now) {
  const api::InferenceServiceStatus& prev = isvc.status;
  api::InferenceServiceStatus s;
  s.observed_generation = isvc.metadata.generation;
  int total = 0, ready = 0;
  if (observed.pods) {
    total = observed.pods->total;
    ready = observed.pods->ready;
  } else if (observed.deployment && !plan.deployment.conflict) {  // another's counts its own pods
    total = IntAt(*observed.deployment, {"status", "replicas"});
    ready = IntAt(*observed.deployment, {"status", "readyReplicas"});
  }
  s.replicas = total;
  s.ready_replicas = ready;
  s.desired_replicas = plan.desired_replicas;
  s.selector = api::SelectorString(isvc.metadata.name);
  s.url = api::ServiceUrl(isvc.metadata);
  // A frozen tick measured nothing (its load counts only the few pods that answered): what the
  // last good tick saw stands.
  if (decision && decision->reason != "metrics_missing") {
    s.observed_queue_depth = decision->observed_load;
    s.observed_p99_ttft_seconds =
        decision->p99_ttft_stable ? decision->p99_ttft_stable : decision->p99_ttft_panic;
  } else {
    s.observed_queue_depth = prev.observed_queue_depth;
    s.observed_p99_ttft_seconds = prev.observed_p99_ttft_seconds;
  }
  if (!prev.desired_replicas || *prev.desired_replicas != plan.desired_replicas ||
      prev.last_scale_time.empty()) {
    s.last_scale_time = std::string(now);
    s.last_scale_reason = ScaleReason(isvc, plan, decision);
  } else {
    s.last_scale_time = prev.last_scale_time;
    s.last_scale_reason = prev.last_scale_reason;
  }

  s.conditions = prev.conditions;
  SetCondition(&s.conditions, Ready(isvc, ready), now);
  SetCondition(&s.conditions, Progressing(isvc, observed, plan, total, ready), now);
  SetCondition(&s.conditions, Degraded(isvc, observed, plan), now);
  if (auto c = ScalingActive(isvc, decision)) SetCondition(&s.conditions, std::move(*c), now);
  s.conditions = Ordered(std::move(s.conditions));
  return api::ToJson(s);
}

json ComputeInvalidSpecStatus(const json& object, const Status& error, std::string_view now) {
  api::InferenceServiceStatus s = api::ParseInferenceServiceStatus(At(object, {"status"}));
  const json& generation = At(object, {"metadata", "generation"});
  const int64_t gen = generation.is_number_integer() ? generation.get<int64_t>() : 0;
  s.observed_generation = gen;
  const json& name = At(object, {"metadata", "name"});
  if (name.is_string() && s.selector.empty())
    s.selector = api::SelectorString(name.get<std::string>());
  const std::string message = error.message();
  SetCondition(&s.conditions, Make(kConditionReady, "False", "InvalidSpec", message, gen), now);
  SetCondition(&s.conditions,
               Make(kConditionProgressing, "False", "InvalidSpec",
                    "the operator changes nothing until the spec is fixed", gen),
               now);
  SetCondition(&s.conditions, Make(kConditionDegraded, "True", "InvalidSpec", message, gen), now);
  SetCondition(
      &s.conditions,
      Make(kConditionScalingActive, "False", "InvalidSpec", "the spec cannot be served", gen), now);
  s.conditions = Ordered(std::move(s.conditions));
  return api::ToJson(s);
}

json WithWriteFailure(const json& object, const json& status, std::string_view message,
                      std::string_view now) {
  const json& generation = At(object, {"metadata", "generation"});
  const int64_t gen = generation.is_number_integer() ? generation.get<int64_t>() : 0;
  // The transition time as the stored status would give it, then set over the computed one.
  std::vector<api::Condition> stored = api::ParseInferenceServiceStatus(At(object, {"status"})).conditions;
  SetCondition(&stored, Make(kConditionDegraded, "True", "ApiError", std::string(message), gen), now);
  api::InferenceServiceStatus s = api::ParseInferenceServiceStatus(status);
  for (const api::Condition& c : stored) {
    if (c.type != kConditionDegraded) continue;
    bool replaced = false;
    for (api::Condition& mine : s.conditions) {
      if (mine.type == kConditionDegraded) {
        mine = c;
        replaced = true;
      }
    }
    if (!replaced) s.conditions.push_back(c);
  }
  s.conditions = Ordered(std::move(s.conditions));
  return api::ToJson(s);
}

std::string FormatRfc3339(std::chrono::system_clock::time_point t) {
  const std::time_t secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace kinfer::reconcile
