#include "operator/controller/operator_metrics.h"

namespace kinfer::controller {

namespace {
const std::vector<double> kLatencyBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                             0.25,  0.5,    1,     2.5,  5,     10};
}

OperatorMetrics::OperatorMetrics()
    : reconciles(registry.AddCounter("kinfer_operator_reconcile_total",
                                     "Reconciles of InferenceServices, by result.", {"result"})),
      reconcile_errors(
          registry.AddCounter("kinfer_operator_reconcile_errors_total",
                              "Reconciles that failed and were requeued with backoff.")),
      reconcile_seconds(registry.AddHistogram("kinfer_operator_reconcile_time_seconds",
                                              "Time of one reconcile (read, plan, apply, status).",
                                              kLatencyBuckets)),
      queue_depth(registry.AddGauge("kinfer_operator_workqueue_depth",
                                    "InferenceServices waiting in the work queue (ready now).")),
      queue_adds(registry.AddCounter("kinfer_operator_workqueue_adds_total",
                                     "Keys added to the work queue by watch events and resyncs.")),
      queue_retries(registry.AddCounter("kinfer_operator_workqueue_retries_total",
                                        "Keys requeued with backoff after a failed reconcile.")),
      watch_restarts(registry.AddCounter(
          "kinfer_operator_watch_restarts_total",
          "Watches restarted: a fresh list (410 Expired, an ERROR event) or a broken stream.",
          {"resource", "reason"})),
      watch_synced(registry.AddGauge("kinfer_operator_watch_synced",
                                     "1 once the resource's informer holds its first list.",
                                     {"resource"})),
      api_writes(registry.AddCounter(
          "kinfer_operator_api_writes_total",
          "Writes to the API server that succeeded, by verb and resource.", {"verb", "resource"})),
      api_write_errors(
          registry.AddCounter("kinfer_operator_api_write_errors_total",
                              "Writes to the API server that failed, by verb, resource "
                              "and Kubernetes reason.",
                              {"verb", "resource", "reason"})),
      events(registry.AddCounter("kinfer_operator_events_total",
                                 "Events recorded on InferenceServices.", {"type", "reason"})),
      leader(registry.AddGauge("kinfer_operator_leader",
                               "1 while this process holds the leader Lease (or runs without "
                               "leader election).")),
      inference_services(registry.AddGauge("kinfer_operator_inferenceservices",
                                           "InferenceServices in the informer cache.")),
      autoscaler_decisions(registry.AddCounter("kinfer_operator_autoscaler_decisions_total",
                                               "Autoscaler decisions, by reason.", {"reason"})),
      autoscaler_scrape_errors(
          registry.AddCounter("kinfer_operator_autoscaler_scrape_errors_total",
                              "Sidecar /metrics scrapes that failed or timed out.")),
      autoscaler_tick_seconds(registry.AddHistogram(
          "kinfer_operator_autoscaler_tick_seconds",
          "Time of one autoscaler tick over every autoscaled InferenceService (scrape + decide).",
          kLatencyBuckets)) {}

}  // namespace kinfer::controller
