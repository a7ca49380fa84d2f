// The operator's own Prometheus metrics (served on --metrics-bind-address at /metrics), named
// after controller-runtime's so existing dashboards translate: reconciles and their latency and
// errors, the work queue, watch restarts, API writes, Events and leadership. docs/metrics.md
// lists every series.
//
// Thread safety: every member may be used from any thread (common/metrics is lock-free on
// updates).
#pragma once

#include <string>

#include "common/metrics/metrics.h"

namespace kinfer::controller {

struct OperatorMetrics {
  OperatorMetrics();

  metrics::Registry registry;
  // result: success | error | invalid_spec | requeue (a conflict answered by a requeue)
  metrics::Family<metrics::Counter>& reconciles;
  metrics::Family<metrics::Counter>& reconcile_errors;
  metrics::Family<metrics::Histogram>& reconcile_seconds;
  metrics::Family<metrics::Gauge>& queue_depth;
  metrics::Family<metrics::Counter>& queue_adds;
  metrics::Family<metrics::Counter>& queue_retries;
  // resource: inferenceservices, deployments, ...; reason: relist | stream_error
  metrics::Family<metrics::Counter>& watch_restarts;
  metrics::Family<metrics::Gauge>& watch_synced;
  // verb: create | patch | delete | update_status; resource as above
  metrics::Family<metrics::Counter>& api_writes;
  metrics::Family<metrics::Counter>& api_write_errors;
  metrics::Family<metrics::Counter>& events;  // type, reason
  metrics::Family<metrics::Gauge>& leader;
  metrics::Family<metrics::Gauge>& inference_services;
  // The autoscaler (issue 6): decisions by reason, desired replicas per InferenceService.
  metrics::Family<metrics::Counter>& autoscaler_decisions;
  metrics::Family<metrics::Counter>& autoscaler_scrape_errors;
  metrics::Family<metrics::Histogram>& autoscaler_tick_seconds;
};

}  // namespace kinfer::controller
