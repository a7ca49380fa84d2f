// SidecarMetrics: every Prometheus series kinfer-sidecar exports (docs/metrics.md lists them),
// declared in one place, with the per-class children looked up once so the hot path touches
// only atomics.
//
// Label values: `class` is a configured class name; `reason`, `result`, `kind` and `code` take the
// small fixed sets documented in docs/metrics.md, so cardinality stays bounded.
//
// Thread safety: as common/metrics (updates are atomics; any thread).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/metrics/metrics.h"

namespace kinfer {

class SidecarMetrics {
 public:
  // class_names: the configured classes, most important first. Histogram bucket edges in seconds.
  SidecarMetrics(const std::vector<std::string>& class_names, std::vector<double> ttft_buckets,
                 std::vector<double> e2e_buckets);

  SidecarMetrics(const SidecarMetrics&) = delete;
  SidecarMetrics& operator=(const SidecarMetrics&) = delete;

  // Responses sent for the policy-managed endpoints, by class and HTTP status code.
  void CountResponse(int priority, int http_status);
  void CountAdmitted(int priority) { admitted_[Clamp(priority)]->Inc(); }
  // reason: rate_limited_requests, rate_limited_tokens, token_limit_exceeded, queue_full,
  // class_full, deadline_unreachable, standing_queue, deadline_expired, displaced, breaker_open,
  // draining (and duplicate_id, which the proxy's unique ids never cause).
  void CountRejected(int priority, std::string_view reason);
  // reason: breaker_open, deadline, slo.
  void CountDegraded(int priority, std::string_view reason);
  void CountCache(bool hit) { (hit ? cache_hits_ : cache_misses_)->Inc(); }
  // result: allowed, denied.
  void CountRetry(bool allowed) { (allowed ? retries_allowed_ : retries_denied_)->Inc(); }
  // kind: connect, timeout, reset, status_5xx.
  void CountUpstreamError(std::string_view kind);
  void CountClientDisconnect() { client_disconnects_->Inc(); }
  void CountReload(bool ok) { (ok ? reloads_ok_ : reloads_failed_)->Inc(); }

  void ObserveQueueWait(int priority, double seconds) { queue_wait_[Clamp(priority)]->Observe(seconds); }
  void ObserveTtft(int priority, double seconds) { ttft_[Clamp(priority)]->Observe(seconds); }
  void ObserveE2e(int priority, double seconds) { e2e_[Clamp(priority)]->Observe(seconds); }

  // Gauges, set from the policy state before each scrape.
  void SetQueueDepth(int priority, double depth) { queue_depth_[Clamp(priority)]->Set(depth); }
  void SetInFlight(double n) { in_flight_->Set(n); }
  // The listener's counts: client connections open now, refused for max_connections since start.
  void SetConnections(size_t open, uint64_t rejected_total);
  // state: "CLOSED", "OPEN", "HALF_OPEN" (one-hot over the three).
  void SetBreakerState(std::string_view state);
  // The fallback upstream's breaker: as SetBreakerState; "" (all 0) without a fallback upstream.
  void SetFallbackBreakerState(std::string_view state);
  void SetBreakerTransitions(double n) { breaker_transitions_->Set(n); }
  void SetCache(double bytes, double entries) { cache_bytes_->Set(bytes), cache_entries_->Set(entries); }
  void SetDraining(bool draining) { draining_->Set(draining ? 1 : 0); }
  void SetStandingQueue(bool standing) { standing_->Set(standing ? 1 : 0); }

  std::string ExposeText() const { return registry_.ExposeText(); }
  const std::vector<std::string>& class_names() const { return class_names_; }

 private:
  size_t Clamp(int priority) const;

  metrics::Registry registry_;
  std::vector<std::string> class_names_;
  metrics::Family<metrics::Counter>* responses_;
  metrics::Family<metrics::Counter>* rejected_;
  metrics::Family<metrics::Counter>* degraded_;
  metrics::Family<metrics::Counter>* upstream_errors_;
  std::vector<metrics::Counter*> admitted_;
  std::vector<metrics::Gauge*> queue_depth_;
  std::vector<metrics::Histogram*> queue_wait_;
  std::vector<metrics::Histogram*> ttft_;
  std::vector<metrics::Histogram*> e2e_;
  metrics::Counter* cache_hits_;
  metrics::Counter* cache_misses_;
  metrics::Counter* retries_allowed_;
  metrics::Counter* retries_denied_;
  metrics::Counter* client_disconnects_;
  metrics::Counter* reloads_ok_;
  metrics::Counter* reloads_failed_;
  metrics::Gauge* in_flight_;
  metrics::Gauge* connections_;
  metrics::Counter* connections_rejected_;
  std::atomic<uint64_t> seen_rejected_connections_{0};
  std::vector<metrics::Gauge*> breaker_state_;  // CLOSED, OPEN, HALF_OPEN
  std::vector<metrics::Gauge*> fallback_breaker_state_;  // the same, for the fallback upstream
  metrics::Gauge* breaker_transitions_;
  metrics::Gauge* cache_bytes_;
  metrics::Gauge* cache_entries_;
  metrics::Gauge* draining_;
  metrics::Gauge* standing_;
};

}  // namespace kinfer
