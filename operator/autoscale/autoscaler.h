// Autoscaler: kinfer's replica decision on queue depth and P99 time to first token. A pure class
// with time passed in; the same code runs in kinfer-operator (fed by the pods' sidecars) and in
// the simulator kinfer-sim (fed by simulated replicas).
//
// Each Tick() gets one sample per pod (what its sidecar reported since the previous tick) and
// returns the desired replica count with a reason. The rules (docs/autoscaling.md states each one
// with its default):
//  * Demand: a pod's load is queue_depth + in_flight (requests waiting in or admitted by its
//    sidecar). Desired-by-load = ceil(total load / target_load_per_replica), averaged over the
//    stable window (60 s) and, separately, over the panic window (panic_window_percent of it,
//    default 10% = 6 s). When the panic-window desire is >= panic_threshold (2.0) x the ready
//    replicas, the autoscaler panics: it uses the panic desire and does not scale down until the
//    panic has lasted a stable window without recurring (Knative KPA).
//  * SLO term: when the P99 TTFT over the panic window (merged TTFT histogram deltas of all pods)
//    is above slo_ttft_p99_seconds, desire at least ready * (p99 / slo), capped by the scale-up
//    rate, so the overshoot is answered in proportion.
//  * Tolerance: changes within +-tolerance (10%) of the current count are ignored.
//  * Scale-down only when the desire has stayed lower for scale_down_delay (the stabilization
//    window: the highest desire seen over it wins) AND the P99 over the stable window is at most
//    scale_down_p99_fraction (0.7) x the SLO.
//  * Rates: at most max_scale_up_rate x (and at least +1) up, max_scale_down_rate / down per tick.
//  * Starting pods count as capacity on the way: desired is compared with ready + starting, so a
//    cold start does not make the autoscaler ask again for the pods it is already waiting for.
//  * Missing metrics: when more than missing_metrics_freeze_fraction (50%) of the ready pods sent
//    no sample this tick, the decision is frozen at the current count (reason "metrics_missing").
//  * Bounds: the result is clamped to [min_replicas, max_replicas].
//
// Thread safety: not thread-safe; one Autoscaler per InferenceService, called from one thread.
// Time: `now` must not decrease.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace kinfer::autoscale {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;
using Duration = std::chrono::nanoseconds;

struct AutoscalerConfig {
  int min_replicas = 1;
  int max_replicas = 10;
  double target_load_per_replica = 8.0;  // queue_depth + in_flight per replica, > 0
  Duration stable_window = std::chrono::seconds(60);
  double panic_window_percent = 10.0;  // (0, 100]
  double panic_threshold = 2.0;        // > 1
  double slo_ttft_p99_seconds = 0.0;   // 0 = no SLO term
  double tolerance = 0.1;              // [0, 1)
  Duration scale_down_delay = std::chrono::seconds(300);
  double scale_down_p99_fraction = 0.7;  // (0, 1]
  double max_scale_up_rate = 10.0;       // >= 1: at most this factor up per tick
  double max_scale_down_rate = 2.0;      // >= 1: at most divide by this per tick
  double missing_metrics_freeze_fraction = 0.5;  // [0, 1]

  // OK, or INVALID_ARGUMENT naming the first bad field.
  Status Validate() const;
};

// What one pod reported for the last interval.
struct PodSample {
  std::string pod;
  bool ready = false;       // serving traffic
  bool has_metrics = true;  // a sample arrived this tick (false: scrape failed or timed out)
  double queue_depth = 0;   // requests waiting in the sidecar's queue
  double in_flight = 0;     // requests admitted to the runtime
  // TTFT observations since the previous sample, as a histogram: ttft_upper_bounds are the
  // bucket edges in seconds (without +Inf), ttft_counts has one count per edge plus one for +Inf
  // (NOT cumulative). Empty when the pod saw no requests.
  std::vector<double> ttft_upper_bounds;
  std::vector<uint64_t> ttft_counts;
};

struct Decision {
  int desired = 0;
  // "steady", "scale_up_load", "scale_up_panic", "scale_up_slo", "scale_down",
  // "within_tolerance", "scale_down_delayed", "metrics_missing", "min_replicas", "max_replicas".
  std::string reason;
  bool panic = false;
  double observed_load = 0;             // total queue_depth + in_flight this tick
  std::optional<double> p99_ttft_panic;   // seconds, over the panic window; nullopt without data
  std::optional<double> p99_ttft_stable;  // seconds, over the stable window
};

class Autoscaler {
 public:
  // REQUIRES: config.Validate().ok().
  explicit Autoscaler(const AutoscalerConfig& config);
  static StatusOr<Autoscaler> Create(const AutoscalerConfig& config);

  // `current` is the replica count now requested (the Deployment's spec.replicas); `samples` has
  // one entry per pod that exists (ready or starting).
  Decision Tick(TimePoint now, int current, const std::vector<PodSample>& samples);

  const AutoscalerConfig& config() const { return config_; }
  // Applies a changed config (the CR was edited), keeping the windows.
  Status Reconfigure(const AutoscalerConfig& config);

 private:
  AutoscalerConfig config_;
  // Implementation state (windows of load and TTFT histograms, panic and scale-down timers) is
  // private to autoscaler.cc's design.
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace kinfer::autoscale
