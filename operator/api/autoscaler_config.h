// MakeAutoscalerConfig: the autoscaler's config (operator/autoscale/autoscaler.h) from
// spec.autoscaling and spec.slo. Pure; thread-safe.
#pragma once

#include "operator/api/inference_service.h"
#include "operator/autoscale/autoscaler.h"

namespace kinfer::api {

// Maps spec.autoscaling (bounds, target load, windows, panic, scale-down delay, rates) and
// spec.slo.ttftP99Seconds (0 = no SLO term) onto AutoscalerConfig; the fields the CRD does not
// expose (tolerance, scale_down_p99_fraction, missing-metrics freeze, min TTFT observations,
// cold-start timeout, scale-down utilization, SLO step, the request-rate target, which stays off)
// keep the autoscaler's defaults. The result passes Validate() for every spec
// ParseInferenceService accepts (the parser checks it).
autoscale::AutoscalerConfig MakeAutoscalerConfig(const InferenceServiceSpec& spec);

}  // namespace kinfer::api
