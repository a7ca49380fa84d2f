// ReconcileStep: one level-based reconcile of one InferenceService, pure. The kube side reads the
// object and what exists (Observed), calls this, applies result.plan (ConfigMap, Service,
// Deployment, PDB in that order: create, merge-patch, delete), and writes result.status through
// the status subresource when result.status_changed. It keeps no state between calls.
//
// A spec the operator cannot serve (ParseInferenceService fails) plans nothing (every action
// kNone: existing objects keep serving the last good spec) and yields Ready False / Degraded True
// with reason InvalidSpec; the kube side should not requeue it with backoff (a spec change
// brings a new event), so it never hot-loops.
//
// Thread safety: pure; call from any thread.
#pragma once

#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "operator/autoscale/autoscaler.h"
#include "operator/reconcile/planner.h"

namespace kinfer::reconcile {

struct ReconcileResult {
  Status spec_error;   // OK, or why the spec cannot be served
  ReconcilePlan plan;  // every action kNone when spec_error is not OK
  nlohmann::json status;
  bool status_changed = false;  // status differs from the object's stored status
};

ReconcileResult ReconcileStep(const nlohmann::json& object, const Observed& observed,
                              const PlannerOptions& options,
                              const std::optional<autoscale::Decision>& decision,
                              std::string_view now);

}  // namespace kinfer::reconcile
