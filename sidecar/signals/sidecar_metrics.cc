#include "sidecar/signals/sidecar_metrics.h"

#include <algorithm>

namespace kinfer {

SidecarMetrics::SidecarMetrics(const std::vector<std::string>& class_names,
                               std::vector<double> ttft_buckets, std::vector<double> e2e_buckets)
    : class_names_(class_names) {
  auto& r = registry_;
  responses_ = &r.AddCounter("kinfer_sidecar_requests_total",
                             "Inference requests answered by the sidecar, by class and HTTP code.",
                             {"class", "code"});
  auto& admitted = r.AddCounter("kinfer_sidecar_admitted_total",
                                "Requests admitted and started upstream, by class.", {"class"});
  rejected_ = &r.AddCounter("kinfer_sidecar_rejected_total",
                            "Requests rejected (429/503) before reaching the upstream, by reason.",
                            {"class", "reason"});
  degraded_ = &r.AddCounter("kinfer_sidecar_degraded_total",
                            "Requests served degraded (fallback model and/or capped max_tokens).",
                            {"class", "reason"});
  auto& cache = r.AddCounter("kinfer_sidecar_cache_lookups_total",
                             "Response cache lookups of cacheable requests.", {"result"});
  auto& retries = r.AddCounter("kinfer_sidecar_retries_total",
                               "Upstream retries, allowed or denied by the retry budget.",
                               {"result"});
  upstream_errors_ = &r.AddCounter("kinfer_sidecar_upstream_errors_total",
                                   "Upstream attempts that failed, by kind.", {"kind"});
  client_disconnects_ = &r.AddCounter("kinfer_sidecar_client_disconnects_total",
                                       "Clients that went away before their response finished.")
                             .Get();
  auto& reloads = r.AddCounter("kinfer_sidecar_config_reloads_total",
                               "Configuration reloads on SIGHUP.", {"result"});
  auto& depth = r.AddGauge("kinfer_sidecar_queue_depth",
                           "Requests waiting in the admission queue, by class.", {"class"});
  in_flight_ = &r.AddGauge("kinfer_sidecar_in_flight", "Requests in flight to the upstream.").Get();
  connections_ = &r.AddGauge("kinfer_sidecar_connections",
                             "Client connections open now (kept-alive idle ones included).")
                      .Get();
  connections_rejected_ =
      &r.AddCounter("kinfer_sidecar_connections_rejected_total",
                    "Client connections answered 503 and closed because max_connections were open.")
           .Get();
  auto& breaker = r.AddGauge("kinfer_sidecar_breaker_state",
                             "Circuit breaker state (1 for the current state).", {"state"});
  auto& fallback_breaker = r.AddGauge(
      "kinfer_sidecar_fallback_breaker_state",
      "The fallback upstream's circuit breaker state (1 for the current state; all 0 without a "
      "fallback upstream).",
      {"state"});
  breaker_transitions_ = &r.AddGauge("kinfer_sidecar_breaker_transitions",
                                     "Circuit breaker state changes since start.")
                              .Get();
  cache_bytes_ = &r.AddGauge("kinfer_sidecar_cache_bytes", "Bytes held by the response cache.").Get();
  cache_entries_ =
      &r.AddGauge("kinfer_sidecar_cache_entries", "Responses held by the response cache.").Get();
  draining_ = &r.AddGauge("kinfer_sidecar_draining", "1 while draining after SIGTERM.").Get();
  standing_ = &r.AddGauge("kinfer_sidecar_standing_queue",
                          "1 while the admission queue is standing (CoDel): lower classes shed.")
                   .Get();
  auto& queue_wait = r.AddHistogram("kinfer_sidecar_queue_wait_seconds",
                                    "Time from arrival to the start upstream, by class.",
                                    e2e_buckets, {"class"});
  auto& ttft = r.AddHistogram("kinfer_sidecar_time_to_first_token_seconds",
                              "Time from arrival to the first response byte from the upstream "
                              "(the first token for streams), by class.",
                              std::move(ttft_buckets), {"class"});
  auto& e2e = r.AddHistogram("kinfer_sidecar_request_duration_seconds",
                             "Time from arrival to the last response byte, by class.",
                             std::move(e2e_buckets), {"class"});

  for (const std::string& name : class_names_) {
    admitted_.push_back(&admitted.WithLabels({name}));
    queue_depth_.push_back(&depth.WithLabels({name}));
    queue_wait_.push_back(&queue_wait.WithLabels({name}));
    ttft_.push_back(&ttft.WithLabels({name}));
    e2e_.push_back(&e2e.WithLabels({name}));
  }
  cache_hits_ = &cache.WithLabels({"hit"});
  cache_misses_ = &cache.WithLabels({"miss"});
  retries_allowed_ = &retries.WithLabels({"allowed"});
  retries_denied_ = &retries.WithLabels({"denied"});
  reloads_ok_ = &reloads.WithLabels({"ok"});
  reloads_failed_ = &reloads.WithLabels({"failed"});
  for (const char* state : {"CLOSED", "OPEN", "HALF_OPEN"}) {
    breaker_state_.push_back(&breaker.WithLabels({state}));
    fallback_breaker_state_.push_back(&fallback_breaker.WithLabels({state}));
  }
  SetBreakerState("CLOSED");
  SetFallbackBreakerState("");
}

size_t SidecarMetrics::Clamp(int priority) const {
  if (priority < 0) return 0;
  return std::min(static_cast<size_t>(priority), class_names_.size() - 1);
}

void SidecarMetrics::CountResponse(int priority, int http_status) {
  responses_->WithLabels({class_names_[Clamp(priority)], std::to_string(http_status)}).Inc();
}

void SidecarMetrics::CountRejected(int priority, std::string_view reason) {
  rejected_->WithLabels({class_names_[Clamp(priority)], std::string(reason)}).Inc();
}

void SidecarMetrics::CountDegraded(int priority, std::string_view reason) {
  degraded_->WithLabels({class_names_[Clamp(priority)], std::string(reason)}).Inc();
}

void SidecarMetrics::CountUpstreamError(std::string_view kind) {
  upstream_errors_->WithLabels({std::string(kind)}).Inc();
}

namespace {

void SetOneHot(const std::vector<metrics::Gauge*>& gauges, std::string_view state) {
  static constexpr std::string_view kStates[] = {"CLOSED", "OPEN", "HALF_OPEN"};
  for (size_t i = 0; i < gauges.size(); ++i) gauges[i]->Set(kStates[i] == state ? 1 : 0);
}

}  // namespace

void SidecarMetrics::SetBreakerState(std::string_view state) { SetOneHot(breaker_state_, state); }

void SidecarMetrics::SetFallbackBreakerState(std::string_view state) {
  SetOneHot(fallback_breaker_state_, state);
}

void SidecarMetrics::SetConnections(size_t open, uint64_t rejected_total) {
  connections_->Set(static_cast<double>(open));
  uint64_t seen = seen_rejected_connections_.load();
  while (rejected_total > seen &&
         !seen_rejected_connections_.compare_exchange_weak(seen, rejected_total)) {
  }
  if (rejected_total > seen) connections_rejected_->Inc(static_cast<double>(rejected_total - seen));
}

}  // namespace kinfer
