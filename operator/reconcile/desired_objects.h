// The objects the operator wants for an InferenceService, built from its spec alone (no observed
// state, so the same spec always gives the same objects and the same pod-template hash).
//
// The pod (one per replica):
//   init  verify-model / fetch-model      the model file exists and matches sha256 (pvc, file),
//                                         or is downloaded into an emptyDir and checked (http)
//         (the same for the fallback model)
//         sidecar-config                  only with spec.sidecar.apiKeysSecretName: appends the
//                                         Secret's api_keys.yaml to the generated config
//   main  runtime           127.0.0.1:8081  the model; GPU/cpu/memory requests = limits
//         runtime-fallback  127.0.0.1:8082  the fallback model, on CPU (spec.fallbackModel)
//         sidecar           :8080 (v4+v6)   readiness /ready, liveness /health; the only port
// Graceful scale-down: the sidecar's preStop sleeps (endpoints drop the pod), then SIGTERM makes it
// drain; each runtime's preStop waits until the sidecar has stopped listening and closed its
// connections to that runtime, so the runtime outlives every stream. terminationGracePeriodSeconds
// covers the longest of the drain timeout and the class timeouts plus the margins.
//
// Pure; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "operator/api/inference_service.h"
#include "operator/reconcile/planner.h"

namespace kinfer::reconcile {

inline constexpr char kTemplateHashAnnotation[] = "serving.kinfer.dev/template-hash";
// On the Deployment: the replica count the operator last wrote (see Plan()).
inline constexpr char kReplicasAnnotation[] = "serving.kinfer.dev/replicas";
inline constexpr char kSidecarConfigKey[] = "sidecar.yaml";
inline constexpr char kApiKeysSecretKey[] = "api_keys.yaml";

std::string ConfigMapName(const api::ObjectMeta& meta);  // NAME-sidecar

// The labels of every object and pod; the selector uses only kInferenceServiceLabel.
nlohmann::json Labels(const api::ObjectMeta& meta);
nlohmann::json SelectorLabels(const api::ObjectMeta& meta);
// {apiVersion, kind, name, uid, controller: true, blockOwnerDeletion: true}
nlohmann::json OwnerReference(const api::ObjectMeta& meta);

// Seconds: sidecar preStop + max(drain timeout, longest class timeout), rounded up, + margin.
int64_t TerminationGracePeriodSeconds(const api::InferenceServiceSpec& spec,
                                      const PlannerOptions& options);

// Where a model's file is inside the pod, with its volume mounted at `mount_dir`.
std::string ModelFilePath(const api::ModelSpec& model, const std::string& mount_dir);
// Where the runtime container finds the draft model for speculative decoding: the draftModel's
// file under /models/draft, else the fallback model's under /models/fallback (both mounted into
// the runtime container); nullopt when speculation is off or its method is ngram.
std::optional<std::string> DraftModelFilePath(const api::InferenceServiceSpec& spec);
inline constexpr char kDraftMountDir[] = "/models/draft";
inline constexpr char kFallbackMountDir[] = "/models/fallback";

// kinfer-runtime's arguments for the primary model (extraArgs last); --device cpu when the pod has
// no GPUs (resources.gpus 0), so the runtime never picks up a device it was not given.
std::vector<std::string> RuntimeArgs(const api::InferenceServiceSpec& spec);
// kinfer-runtime's arguments for the fallback model (the runtime-fallback container on
// 127.0.0.1:kFallbackRuntimePort). Always --device cpu: the pod's GPUs belong to the primary
// runtime, and in an image that sets NVIDIA_VISIBLE_DEVICES=all the runtime's default (auto)
// would take GPU 0 anyway. It takes the same sidecar-coupled flags as the primary
// (--write-timeout, --max-body-bytes), since the sidecar degrades to it with the same requests.
// REQUIRES: spec.fallback_model.
std::vector<std::string> FallbackRuntimeArgs(const api::InferenceServiceSpec& spec);

// Whether the PDB should exist: the service may run more than one pod (autoscaling maxReplicas
// > 1, or spec.replicas > 1).
bool WantsPodDisruptionBudget(const api::InferenceServiceSpec& spec);

nlohmann::json BuildConfigMap(const api::InferenceService& isvc);
// The pod template without the hash annotation.
nlohmann::json BuildPodTemplate(const api::InferenceService& isvc, const PlannerOptions& options);
// Hash of the pod template (without the annotation) and the sidecar config: what must roll pods.
std::string TemplateHash(const nlohmann::json& pod_template, const nlohmann::json& config_map);
// The Deployment with the template-hash annotation on its pod template.
nlohmann::json BuildDeployment(const api::InferenceService& isvc, int replicas,
                               const std::string& template_hash, nlohmann::json pod_template);
nlohmann::json BuildService(const api::InferenceService& isvc);
nlohmann::json BuildPodDisruptionBudget(const api::InferenceService& isvc);

}  // namespace kinfer::reconcile
