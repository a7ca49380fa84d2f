// The desired ConfigMap, Service, PDB and Deployment (the pod template: pod_template.cc).
#include "operator/reconcile/desired_objects.h"

#include <algorithm>
#include <cmath>

#include "operator/api/sidecar_config_yaml.h"
#include "operator/api/units.h"
#include "operator/reconcile/object_diff.h"

namespace kinfer::reconcile {

namespace {

using nlohmann::json;

json Metadata(const api::ObjectMeta& meta, const std::string& name) {
  json m = {{"name", name},
            {"labels", Labels(meta)},
            {"ownerReferences", json::array({OwnerReference(meta)})}};
  if (!meta.namespace_name.empty()) m["namespace"] = meta.namespace_name;
  return m;
}

}  // namespace

std::string ConfigMapName(const api::ObjectMeta& meta) { return meta.name + "-sidecar"; }

json Labels(const api::ObjectMeta& meta) {
  return {{"app.kubernetes.io/name", "kinfer-inference"},
          {"app.kubernetes.io/instance", meta.name},
          {"app.kubernetes.io/component", "inference"},
          {"app.kubernetes.io/part-of", "kinfer"},
          {"app.kubernetes.io/managed-by", "kinfer-operator"},
          {api::kInferenceServiceLabel, meta.name}};
}

json SelectorLabels(const api::ObjectMeta& meta) {
  return {{api::kInferenceServiceLabel, meta.name}};
}

json OwnerReference(const api::ObjectMeta& meta) {
  return {{"apiVersion", api::kApiVersion},
          {"kind", api::kKind},
          {"name", meta.name},
          {"uid", meta.uid},
          {"controller", true},
          {"blockOwnerDeletion", true}};
}

int64_t TerminationGracePeriodSeconds(const api::InferenceServiceSpec& spec,
                                      const PlannerOptions& options) {
  std::chrono::nanoseconds longest = spec.sidecar.timeouts.drain.value;
  for (const api::PriorityClassSpec& c : spec.sidecar.classes)
    longest = std::max(longest, c.timeout.value);
  return options.sidecar_pre_stop_seconds + api::CeilSeconds(longest) +
         options.drain_margin_seconds;
}

namespace {

// kinfer-runtime's defaults (runtime/main.cc) of the flags that follow the sidecar's settings.
constexpr int64_t kRuntimeWriteTimeoutSeconds = 30;
constexpr uint64_t kRuntimeDefaultMaxBodyBytes = uint64_t{1} << 20;

// The runtime flags that follow the sidecar's settings, so that a runtime never refuses what the
// sidecar lets through. Each is passed only above the runtime's own default, so a spec that
// leaves them alone keeps the pod template it had. The parser bounds both fields to the flags'
// ranges (api::kRuntimeMaxWriteTimeoutSeconds, api::kRuntimeMaxBodyBytes).
//  * --write-timeout: the sidecar stops reading the runtime while its own client is slow
//    (clientWrite), and the runtime must not give up before the sidecar does.
//  * --max-body-bytes: a body the sidecar accepts (maxBodyBytes) is forwarded to the runtime,
//    which would answer 413 past its own limit.
std::vector<std::string> SidecarCoupledRuntimeArgs(const api::InferenceServiceSpec& spec) {
  std::vector<std::string> args;
  if (const int64_t client_write = api::CeilSeconds(spec.sidecar.timeouts.client_write.value);
      client_write > kRuntimeWriteTimeoutSeconds) {
    args.insert(args.end(), {"--write-timeout", std::to_string(client_write)});
  }
  if (const uint64_t body = spec.sidecar.max_body_bytes.bytes;
      body > kRuntimeDefaultMaxBodyBytes) {
    args.insert(args.end(), {"--max-body-bytes", std::to_string(body)});
  }
  return args;
}

}  // namespace

std::vector<std::string> RuntimeArgs(const api::InferenceServiceSpec& spec) {
  // kinfer-runtime takes --model, --model-name, --host, --port, --ctx-size, --threads, the
  // batching flags --max-batch-tokens, --max-running and the speculative-decoding flags
  // (runtime/main.cc); GPU pods also get --kv-cache-fraction from kvCacheFraction (on a CPU pod
  // a fraction of the node's free memory is not what the field means, so the runtime's
  // token-count default stays), and every runtime the flags that follow the sidecar's settings
  // (SidecarCoupledRuntimeArgs: --write-timeout, --max-body-bytes).
  const std::string model_path = ModelFilePath(spec.model, "/models/model");
  std::vector<std::string> args = {
      "--model", model_path,  "--model-name", spec.model.name,
      "--host",  "127.0.0.1", "--port",       std::to_string(api::kRuntimePort)};
  if (spec.runtime.context_size > 0) {
    args.insert(args.end(), {"--ctx-size", std::to_string(spec.runtime.context_size)});
  }
  args.insert(args.end(), {"--max-batch-tokens", std::to_string(spec.runtime.max_batch_tokens),
                           "--max-running", std::to_string(spec.runtime.max_running_requests)});
  if (spec.resources.gpus == 0) args.insert(args.end(), {"--device", "cpu"});
  const std::vector<std::string> coupled = SidecarCoupledRuntimeArgs(spec);
  args.insert(args.end(), coupled.begin(), coupled.end());
  if (spec.resources.gpus > 0) {
    std::ostringstream f;
    f << spec.runtime.kv_cache_fraction;
    args.insert(args.end(), {"--kv-cache-fraction", f.str()});
  }
  if (const auto& sp = spec.runtime.speculative; sp && sp->enabled) {
    // The CR turns speculation on for the service: every request speculates unless it says not.
    args.insert(args.end(), {"--spec-default=true", "--spec-tokens",
                             std::to_string(sp->num_speculative_tokens)});
    if (std::optional<std::string> draft = DraftModelFilePath(spec)) {
      args.insert(args.end(), {"--draft-model", *draft});
    }
  }
  if (!spec.resources.cpu.empty()) {
    auto cores = api::ParseQuantity(spec.resources.cpu);
    const long double whole = cores.ok() ? std::floor(*cores) : 1;
    const int threads = static_cast<int>(std::clamp<long double>(whole, 1, 1024));
    args.insert(args.end(), {"--threads", std::to_string(threads)});
  }
  args.insert(args.end(), spec.runtime.extra_args.begin(), spec.runtime.extra_args.end());
  return args;
}

std::vector<std::string> FallbackRuntimeArgs(const api::InferenceServiceSpec& spec) {
  const api::ModelSpec& fb = *spec.fallback_model;
  std::vector<std::string> args = {"--model",     ModelFilePath(fb, kFallbackMountDir),
                                   "--model-name", fb.name,
                                   "--host",       "127.0.0.1",
                                   "--port",       std::to_string(api::kFallbackRuntimePort),
                                   "--device",     "cpu"};
  const std::vector<std::string> coupled = SidecarCoupledRuntimeArgs(spec);
  args.insert(args.end(), coupled.begin(), coupled.end());
  return args;
}

bool WantsPodDisruptionBudget(const api::InferenceServiceSpec& spec) {
  return spec.autoscaling.enabled ? spec.autoscaling.max_replicas > 1
                                  : spec.replicas.value_or(0) > 1;
}

json BuildConfigMap(const api::InferenceService& isvc) {
  const std::string origin =
      (isvc.metadata.namespace_name.empty() ? "" : isvc.metadata.namespace_name + "/") +
      isvc.metadata.name;
  return {{"apiVersion", "v1"},
          {"kind", "ConfigMap"},
          {"metadata", Metadata(isvc.metadata, ConfigMapName(isvc.metadata))},
          {"data", {{kSidecarConfigKey, api::RenderSidecarConfigYaml(isvc.spec, origin)}}}};
}

std::string TemplateHash(const json& pod_template, const json& config_map) {
  return Fnv1a64Hex(pod_template.dump() + "\n" + At(config_map, {"data"}).dump());
}

json BuildDeployment(const api::InferenceService& isvc, int replicas,
                     const std::string& template_hash, json pod_template) {
  pod_template["metadata"]["annotations"][kTemplateHashAnnotation] = template_hash;
  json metadata = Metadata(isvc.metadata, isvc.metadata.name);
  metadata["annotations"] = {{kReplicasAnnotation, std::to_string(replicas)}};
  return {
      {"apiVersion", "apps/v1"},
      {"kind", "Deployment"},
      {"metadata", std::move(metadata)},
      {"spec",
       {{"replicas", replicas},
        {"selector", {{"matchLabels", SelectorLabels(isvc.metadata)}}},
        // Keep serving capacity during a rollout: a new pod must be ready before an old one
        // goes (needs room for one more pod's GPUs).
        {"strategy",
         {{"type", "RollingUpdate"}, {"rollingUpdate", {{"maxSurge", 1}, {"maxUnavailable", 0}}}}},
        // Model downloads and loads are slow: report a stuck rollout after 30 min, not 10.
        {"progressDeadlineSeconds", 1800},
        {"template", std::move(pod_template)}}}};
}

json BuildService(const api::InferenceService& isvc) {
  return {{"apiVersion", "v1"},
          {"kind", "Service"},
          {"metadata", Metadata(isvc.metadata, isvc.metadata.name)},
          {"spec",
           {{"type", "ClusterIP"},
            {"selector", SelectorLabels(isvc.metadata)},
            {"ports", json::array({{{"name", "http"},
                                    {"port", api::kSidecarPort},
                                    {"targetPort", "http"},
                                    {"protocol", "TCP"}}})}}}};
}

json BuildPodDisruptionBudget(const api::InferenceService& isvc) {
  return {
      {"apiVersion", "policy/v1"},
      {"kind", "PodDisruptionBudget"},
      {"metadata", Metadata(isvc.metadata, isvc.metadata.name)},
      {"spec",
       {{"maxUnavailable", 1}, {"selector", {{"matchLabels", SelectorLabels(isvc.metadata)}}}}}};
}

}  // namespace kinfer::reconcile
