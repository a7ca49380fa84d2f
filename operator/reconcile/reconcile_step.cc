#include "operator/reconcile/reconcile_step.h"

#include "operator/api/inference_service.h"
#include "operator/reconcile/object_diff.h"
#include "operator/reconcile/status.h"

namespace kinfer::reconcile {

ReconcileResult ReconcileStep(const nlohmann::json& object, const Observed& observed,
                              const PlannerOptions& options,
                              const std::optional<autoscale::Decision>& decision,
                              std::string_view now) {
  ReconcileResult result;
  StatusOr<api::InferenceService> isvc = api::ParseInferenceService(object);
  if (isvc.ok()) {
    if (Status policy = CheckSpecPolicy(*isvc, options); !policy.ok()) isvc = policy;
  }
  if (!isvc.ok()) {
    result.spec_error = isvc.status();
    result.status = ComputeInvalidSpecStatus(object, result.spec_error, now);
  } else {
    result.plan = Plan(*isvc, observed, options);
    result.status = ComputeStatus(*isvc, observed, result.plan, decision, now);
  }
  const nlohmann::json& stored = At(object, {"status"});
  result.status_changed = stored.is_null() ? !result.status.empty() : stored != result.status;
  return result;
}

}  // namespace kinfer::reconcile
