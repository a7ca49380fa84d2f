// The reconcile planner: level-based and pure. Given an InferenceService, what exists now
// (Observed) and the operator's options, Plan() returns the objects the operator wants and, per
// object, what to do: create it, patch the fields the operator owns, delete it, or nothing.
// Applying the plan is the kube side's job (one place, idempotent); this file does no I/O and
// keeps no state between calls, so the same inputs always give the same plan.
//
// Objects (docs/operator.md has the table of owned fields):
//   ConfigMap  NAME-sidecar   the sidecar's config file (api::RenderSidecarConfigYaml)
//   Service    NAME           ClusterIP on the sidecar port 8080
//   Deployment NAME           runtime (+ fallback runtime) + sidecar pods
//   PDB        NAME           maxUnavailable 1, only while the service may run more than one pod
// each with labels serving.kinfer.dev/inferenceservice=NAME (and app.kubernetes.io/*) and an owner
// reference to the InferenceService (controller, blockOwnerDeletion) so deletion is garbage
// collection's job.
//
// The zero-writes rule: a steady state plans kNone for every object. Comparisons ignore what the
// API server adds (DeepDerivative) and fields owned by others (annotations other controllers add,
// the Deployment's replicas while someone else sizes it; see DesiredReplicas); patches carry only
// owned fields that differ.
//
// Thread safety: pure functions of their arguments; call from any thread.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "operator/api/inference_service.h"
#include "operator/reconcile/pod_summary.h"

namespace kinfer::reconcile {

// Operator-wide settings (kinfer-operator flags; the Helm chart's defaultImages).
struct PlannerOptions {
  std::string default_runtime_image = "kinfer/kinfer-runtime:0.1.0";  // --default-runtime-image
  std::string default_sidecar_image = "kinfer/kinfer-sidecar:0.1.0";  // --default-sidecar-image
  // The image of the model init containers (download, sha256 check): needs /bin/sh, sha256sum
  // and curl or wget. "" = the runtime image.
  std::string model_fetcher_image;
  // The sidecar's preStop sleep: time for endpoints to drop the pod before the sidecar stops
  // accepting (SIGTERM).
  int sidecar_pre_stop_seconds = 5;
  // Added to the longest request time in the termination grace period (process exit, slack).
  int drain_margin_seconds = 10;
  // The sidecar container's requests (no limits: its cache and queues are sized by spec.sidecar).
  std::string sidecar_cpu_request = "100m";
  std::string sidecar_memory_request = "128Mi";
  // Node directories a file:// model may come from (--allow-host-path-models): a file:// URI
  // mounts its directory from the node, so whoever may create an InferenceService could read any
  // node path (the kubelet's, the control plane's keys). None by default: file:// is refused
  // (InvalidSpec) unless the file is below one of these.
  std::vector<std::string> allowed_host_paths;
};

// The operator's own policy on a parsed spec (what the CRD and the parser cannot know): a file://
// model outside allowed_host_paths. INVALID_ARGUMENT naming the field and the flag.
Status CheckSpecPolicy(const api::InferenceService& isvc, const PlannerOptions& options);

// What exists now, read by the kube side before planning.
struct Observed {
  // The objects as the API server returns them; nullopt = not found.
  std::optional<nlohmann::json> config_map;
  std::optional<nlohmann::json> service;
  std::optional<nlohmann::json> deployment;
  std::optional<nlohmann::json> pdb;
  // The pods (SummarizePods over the pods matching the selector); nullopt = not listed, and
  // status then reads the Deployment's status counts.
  std::optional<PodSummary> pods;
  // The autoscaler's latest desired replica count (autoscale::Decision::desired), when
  // spec.autoscaling.enabled and it has decided at least once in this process.
  std::optional<int> autoscaler_desired_replicas;
};

enum class Action { kNone, kCreate, kUpdate, kDelete };
std::string_view ActionName(Action action);  // "none", "create", "update", "delete"

struct ObjectPlan {
  std::string api_version;  // "apps/v1", "v1", "policy/v1"
  std::string kind;         // "Deployment", ...
  std::string name;
  std::string namespace_name;
  Action action = Action::kNone;
  // The whole object the operator wants (kCreate sends it); null when it must not exist.
  nlohmann::json desired;
  // kUpdate: an RFC 7386 merge patch (application/merge-patch+json) holding only owned fields
  // that differ; null otherwise.
  nlohmann::json patch;
  // kDelete: the uid of the object observed, sent as the delete's precondition (a same-named
  // object someone made since the cache saw ours is not deleted).
  std::string uid;
  // Why this action ("created", "template hash 1a2b... -> 3c4d...", "replicas 2 -> 3", "in sync").
  std::string reason;
  // The object of this name is not ours to manage (another controller's, or an immutable selector
  // that differs): listed in ReconcilePlan::conflicts; its status says nothing of this service.
  bool conflict = false;
};

struct ReconcilePlan {
  ObjectPlan config_map;
  ObjectPlan service;
  ObjectPlan deployment;
  ObjectPlan pdb;
  int desired_replicas = 0;
  std::string template_hash;  // the pod-template hash the Deployment should carry
  // Objects of this name that another controller owns (or whose immutable selector differs):
  // not touched; reported as condition Degraded, reason ReconcileError.
  std::vector<std::string> conflicts;

  // The four object plans in apply order: ConfigMap, Service, Deployment, PDB.
  std::vector<const ObjectPlan*> Objects() const;
  // Objects whose action is not kNone.
  int Writes() const;
};

// The replica count the operator wants for the Deployment:
//   autoscaling off: spec.replicas;
//   on: the autoscaler's decision, else the last one recorded in status.desiredReplicas, else
//       the existing Deployment's replicas, else minReplicas; clamped to [min, max].
int DesiredReplicas(const api::InferenceService& isvc, const Observed& observed);

// The plan. REQUIRES: `isvc` came from api::ParseInferenceService (a valid spec). While the
// InferenceService is being deleted every action is kNone (garbage collection removes the rest).
ReconcilePlan Plan(const api::InferenceService& isvc, const Observed& observed,
                   const PlannerOptions& options);

}  // namespace kinfer::reconcile
