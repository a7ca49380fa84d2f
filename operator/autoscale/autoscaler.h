// Autoscaler: kinfer's replica decision on queue depth and P99 time to first token. A pure class
// with time passed in; the same code runs in kinfer-operator (fed by the pods' sidecars) and in
// the simulator kinfer-sim (fed by simulated replicas).
//
// Each Tick() gets one sample per pod (what its sidecar reported since the previous tick) and
// returns the desired replica count with a reason. The rules (docs/autoscaling.md states each one
// with its default and worked examples):
//  * Demand: a pod's load is queue_depth + in_flight (requests waiting in or admitted by its
//    sidecar). Each tick's total load is kept in a window; desired-by-load = ceil(mean total load
//    / target_load_per_replica) over the stable window (60 s) and, separately, over the panic
//    window (panic_window_percent of it, default 10% = 6 s). Every tick in a window weighs the
//    same. When (mean panic-window load / target) >= panic_threshold (2.0) x the ready replicas
//    (at least 1), the autoscaler panics: it uses the higher of the two desires and does not scale
//    down until the panic has lasted a stable window without recurring (Knative KPA).
//  * Request rate (when target_requests_per_second_per_replica > 0; off by default): first
//    tokens per second (the TTFT histograms' observation counts, silent ready pods filled in)
//    over the stable window; desired-by-rate = ceil(rate / target rps). The decision takes the
//    higher of the load and rate terms. Unlike queue + in-flight, the rate does not shrink when
//    more pods serve it faster, so it also guards scale-down (below).
//  * Warm-up: for its first stable window (and after a gap of more than a stable window between
//    ticks) an Autoscaler does not scale up on the stable mean alone; panic and SLO still act.
//  * SLO term: when slo_ttft_p99_seconds > 0, the P99 TTFT over the panic window (merged TTFT
//    histogram deltas of all pods, quantile as Prometheus histogram_quantile; ttft_histogram.h)
//    rests on at least min_ttft_observations (10) observations and is above the SLO, desire
//    ceil(ready * p99 / slo), so the overshoot is answered in proportion, but at most
//    slo_max_step (1) above max(ready, ceil(panic-window load as reported / target)): latency
//    that the load does not explain (a backlog still draining, long prompts) adds pods one
//    step at a time; capped by the scale-up rate too.
//  * Tolerance: changes within +-tolerance (10%) of the current count are ignored.
//  * Scale-down only when the desire has stayed lower for scale_down_delay (the stabilization
//    window: the highest desire seen over it wins; a new Autoscaler first needs that much history)
//    AND, when an SLO is set and the stable window holds at least min_ttft_observations, the P99
//    over the stable window is at most scale_down_p99_fraction (0.7) x the SLO, AND the
//    replicas left keep headroom: a cut to m needs the highest tick load in the stable window
//    <= scale_down_utilization (0.8) x target x m, and with the rate term on the stable-window
//    rate <= scale_down_utilization x target rps x m (the count goes no lower than that allows).
//    Never while panicking or during a cold-start episode (below).
//  * Rates: at most max_scale_up_rate x (and at least +1) up, max_scale_down_rate / down (and at
//    least -1) per tick.
//  * Starting pods count as capacity on the way: a desire that ready + starting already covers
//    does not raise the count (reason "scale_up_pending"). A scale-up starts a cold-start
//    episode that lasts while the pods it asked for are cold: TTFTs observed during the episode
//    do not feed the SLO term (they measure the backlog, not the capacity on its way); during its
//    first panic window (the grace) the load term may still raise the ask while the windows fill
//    with the new level; after the grace (the hold) queue beyond the highest total queue seen in
//    the grace is backlog the coming pods will drain and is not counted as demand (in-flight
//    requests still are). The episode ends one panic window after the asked pods are all ready
//    (the windows then see the new capacity at work), cold_start_timeout (300 s) after its last
//    raise, or when `current` falls below the ask. So a steady overload does not make the ask
//    grow tick after tick while pods start; the price is that demand that shows only as more
//    queue on saturated pods waits for the episode to end.
//  * Missing metrics: when more than missing_metrics_freeze_fraction (50%) of the ready pods sent
//    no sample this tick (or all of them did, whatever the fraction), or no pod is ready while
//    `current` > 0, the decision is frozen at the current count (reason "metrics_missing") and
//    the tick is not recorded. A freeze longer than stable_window restarts the warm-up and the
//    scale-down delay, as a gap in the ticks does. A smaller share of
//    missing ready pods is filled in with the mean queue depth and in-flight of the ready pods that
//    reported.
//  * Bounds: the result is clamped to [min_replicas, max_replicas].
//  * Malformed samples: negative or non-finite queue_depth/in_flight count as 0; a malformed TTFT
//    histogram is ignored.
//
// Thread safety: not thread-safe; one Autoscaler per InferenceService, called from one thread.
// Copies are deep (each copy has its own windows). No clock reads, no randomness.
// Time: `now` must not decrease (an earlier `now` is treated as the latest seen). Memory: one
// window entry per tick over the stable window (at most 65536) plus at most
// max_replicas - min_replicas + 1 stabilization entries. Tick at a fixed interval (the operator
// every 1-2 s, kinfer-sim every simulated second): every tick weighs the same in the means.
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
  // >= 1: no scale to zero (the load is measured in the pods' sidecars: with no pod, none is seen).
  int min_replicas = 1;
  int max_replicas = 10;                              // >= min_replicas
  double target_load_per_replica = 8.0;               // queue_depth + in_flight per replica, > 0
  Duration stable_window = std::chrono::seconds(60);  // > 0
  double panic_window_percent = 10.0;                 // (0, 100]
  double panic_threshold = 2.0;                       // > 1
  double slo_ttft_p99_seconds = 0.0;                  // 0 = no SLO term
  double tolerance = 0.1;                             // [0, 1)
  Duration scale_down_delay = std::chrono::seconds(300);  // >= 0
  double scale_down_p99_fraction = 0.7;                   // (0, 1]
  double max_scale_up_rate = 10.0;   // >= 1: at most this factor up per tick (and at least +1)
  double max_scale_down_rate = 2.0;  // >= 1: at most divide by this per tick (and at least -1)
  double missing_metrics_freeze_fraction = 0.5;  // [0, 1]
  // TTFT observations a window needs before its P99 may act (the SLO term on the panic window,
  // the scale-down gate on the stable window). >= 1.
  int min_ttft_observations = 10;
  // Longest a cold-start episode waits for the pods a scale-up asked for (pods stuck Pending or
  // crash-looping do not hold scale-ups back for longer). >= 0; 0 turns the hold off.
  Duration cold_start_timeout = std::chrono::seconds(300);
  // Scale-down headroom: a cut to m replicas needs the highest total load of any tick in the
  // stable window to fit m replicas at this share of target_load_per_replica (the count goes
  // only as low as that allows). (0, 1]; 1 = the load as it is must fit the target.
  double scale_down_utilization = 0.8;
  // The SLO term asks at most this many replicas above the higher of the ready replicas and
  // what the panic-window load (as reported) needs at the target. >= 0; 0 = no cap (the term
  // is then ceil(ready * p99 / slo), bounded only by the rate).
  int slo_max_step = 1;
  // Request-rate term: first tokens per second (TTFT observations) per replica the autoscaler
  // aims for; desire ceil(stable-window rate / this), and a cut to m needs the stable-window
  // rate <= scale_down_utilization x this x m. >= 0; 0 = off
  // (spec.autoscaling.targetRequestsPerSecondPerReplica).
  double target_requests_per_second_per_replica = 0;

  // OK, or INVALID_ARGUMENT naming the first bad field.
  Status Validate() const;
  // Every field (a field added later cannot be forgotten by a comparison written by hand).
  bool operator==(const AutoscalerConfig&) const = default;
};

// What one pod reported for the last interval. Pods being deleted (terminating) are not listed.
struct PodSample {
  std::string pod;
  bool ready = false;       // serving traffic
  bool has_metrics = true;  // a sample arrived this tick (false: scrape failed or timed out)
  // queue_depth, in_flight and the TTFT histogram are read only when has_metrics is true.
  double queue_depth = 0;  // requests waiting in the sidecar's queue
  double in_flight = 0;    // requests admitted to the runtime
  // TTFT observations since the previous sample, as a histogram: ttft_upper_bounds are the
  // bucket edges in seconds (without +Inf), ttft_counts has one count per edge plus one for +Inf
  // (NOT cumulative). Empty when the pod saw no requests.
  std::vector<double> ttft_upper_bounds;
  std::vector<uint64_t> ttft_counts;
};

struct Decision {
  int desired = 0;
  // "steady", "scale_up_load", "scale_up_panic", "scale_up_slo", "scale_down",
  // "within_tolerance", "scale_down_delayed", "metrics_missing", "min_replicas", "max_replicas",
  // "scale_up_pending" (a higher desire waits for pods already starting: a cold-start hold, or
  // ready + starting already covers it).
  std::string reason;
  bool panic = false;
  // Total queue_depth + in_flight this tick, the ready pods that sent nothing filled in with the
  // mean of those that did.
  double observed_load = 0;
  // Over all TTFT observations in the window (including those a cold-start episode keeps from
  // the SLO term); nullopt without data.
  std::optional<double> p99_ttft_panic;   // seconds, over the panic window
  std::optional<double> p99_ttft_stable;  // seconds, over the stable window

  // The inputs of the decision, for status, logs and the simulator's timeline.
  int ready = 0;            // pods ready this tick
  int starting = 0;         // pods listed but not ready
  double load_stable = 0;   // mean counted load over the stable window
  double load_panic = 0;    // mean counted load over the panic window
  int desired_by_load = 0;  // the load term (in panic the higher of the panic and stable desires)
  int desired_by_slo = 0;   // the SLO term; 0 when it is off, quiet or short of observations
  int desired_by_rate = 0;  // the request-rate term; 0 when it is off
  double request_rate_stable = 0;        // first tokens per second over the stable window
  uint64_t ttft_observations_panic = 0;  // observations behind p99_ttft_panic
  bool cold_start_hold = false;          // a cold-start episode is on (see above)
};

class Autoscaler {
 public:
  // REQUIRES: config.Validate().ok().
  explicit Autoscaler(const AutoscalerConfig& config);
  // INVALID_ARGUMENT (from Validate()) for a bad config.
  static StatusOr<Autoscaler> Create(const AutoscalerConfig& config);

  // Copies are deep: the copy's windows and timers evolve on their own. A moved-from Autoscaler
  // may only be assigned to or destroyed.
  Autoscaler(const Autoscaler& other);
  Autoscaler& operator=(const Autoscaler& other);
  Autoscaler(Autoscaler&&) noexcept = default;
  Autoscaler& operator=(Autoscaler&&) noexcept = default;
  ~Autoscaler() = default;

  // `current` is the replica count now requested (the Deployment's spec.replicas; a negative
  // value counts as 0); `samples` has one entry per pod that exists (ready or starting). Call it
  // at a fixed interval (1-2 s).
  Decision Tick(TimePoint now, int current, const std::vector<PodSample>& samples);

  const AutoscalerConfig& config() const { return config_; }
  // Applies a changed config (the CR was edited), keeping the windows, the panic state and the
  // stabilization history; the new window lengths apply from the next Tick(). INVALID_ARGUMENT
  // (and the old config stays) when the new one fails Validate().
  Status Reconfigure(const AutoscalerConfig& config);

  // The panic window: stable_window * panic_window_percent / 100.
  static Duration PanicWindow(const AutoscalerConfig& config);

 private:
  AutoscalerConfig config_;
  // Implementation state (windows of load and TTFT histograms, panic and scale-down timers) is
  // private to autoscaler.cc's design.
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace kinfer::autoscale
