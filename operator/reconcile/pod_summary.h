// PodSummary: what the reconciler needs to know about an InferenceService's pods (how many exist,
// how many are ready, and what is failing), counted from pod objects as the API server returns
// them. The kube side lists the pods by the label selector and calls SummarizePods; the planner
// and ComputeStatus only read the counts.
//
// The model init containers (the reconciler's pod template) report what failed by exit code and
// termination message; the codes below are theirs.
//
// Pure; thread-safe.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kinfer::reconcile {

// Exit codes of the model init containers ("fetch-*" downloads, "verify-*" checks a file).
inline constexpr int kExitModelChecksumMismatch = 3;
inline constexpr int kExitModelDownloadFailed = 4;
inline constexpr int kExitModelNotFound = 5;

struct PodSummary {
  int total = 0;        // pods not being deleted
  int ready = 0;        // of those, condition Ready True
  int terminating = 0;  // pods with a deletionTimestamp (draining)
  // Pods with each problem (a pod counts once, under its first problem in this order):
  int model_checksum_mismatch = 0;  // a model init container exited kExitModelChecksumMismatch
  int model_not_found = 0;          // ... kExitModelNotFound
  int model_download_failed = 0;    // ... kExitModelDownloadFailed
  int image_pull_failing = 0;       // a container waiting in ErrImagePull / ImagePullBackOff
  // A container waiting in CreateContainerConfigError / CreateContainerError: a Secret or
  // ConfigMap (or a key of one) it names is missing, say the API keys' Secret.
  int container_config_error = 0;
  int crash_looping = 0;            // a container waiting in CrashLoopBackOff
  // Condition PodScheduled False with reason Unschedulable: no node has what the pod asks for
  // (a GPU resource no node offers, taints, too little memory), or none yet (a cluster autoscaler
  // adding one). The message is the scheduler's.
  int unschedulable = 0;
  // "pod NAME: container C: ..." for the first problem seen (the condition's message).
  std::string first_problem;
};

// A pod in a terminal phase (Failed, e.g. evicted, or Succeeded): it serves nothing and never
// will, and the kubelet leaves it until someone deletes it. Like the ReplicaSet controller's
// active-pod filter, it counts neither as a replica nor as capacity on its way.
bool PodTerminated(const nlohmann::json& pod);

// Adds one pod object to `summary` (a terminated pod adds nothing).
void AddPod(const nlohmann::json& pod, PodSummary* summary);
// SummarizePods(pods) = AddPod of each.
PodSummary SummarizePods(const std::vector<nlohmann::json>& pods);

}  // namespace kinfer::reconcile
