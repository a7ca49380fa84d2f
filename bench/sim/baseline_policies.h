// The baselines kinfer is measured against, each as its controller behaves by default:
//   * SchedulePolicy: a count fixed in advance per window: static provisioning for the peak (one
//     count throughout) and the oracle (planning.h computes its counts from the future arrivals).
//   * HpaPolicy: the Kubernetes HorizontalPodAutoscaler (v2) on a per-pod utilisation metric.
//   * KpaPolicy: Knative's KPA on per-pod concurrency, with stable and panic windows.
// Their rules and defaults are written out in docs/simulator.md.
//
// Thread safety: not thread-safe; one instance per simulation run.
#pragma once

#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "bench/sim/policy.h"

namespace kinfer::sim {

// Runs window_counts[k] replicas during [k * window_s, (k + 1) * window_s); with lead_s > 0 the
// count for a window is requested lead_s ahead of it (one cold start), so at time t the desire is
// the largest count of the windows that [t, t + lead_s] touches. After the last window it keeps
// the last count.
class SchedulePolicy : public Policy {
 public:
  SchedulePolicy(std::string name, std::vector<int> window_counts, double window_s, double lead_s);
  // One count throughout.
  static SchedulePolicy Constant(std::string name, int replicas);

  std::string name() const override { return name_; }
  int InitialReplicas() const override { return CountAt(0); }
  std::optional<int> Tick(const ClusterSnapshot& cluster) override;
  // The desire at time t.
  int DesiredAt(double t_s) const;

 private:
  int CountAt(double t_s) const;

  std::string name_;
  std::vector<int> counts_;
  double window_s_;
  double lead_s_;
};

struct HpaConfig {
  double target_utilization = 0.7;  // of capacity_per_pod
  double capacity_per_pod = 1;      // in-flight requests that make a pod 100% utilised, > 0
  double sync_period_s = 15;
  double tolerance = 0.1;
  double scale_down_stabilization_s = 300;
  int initial_replicas = 1;
};

// Every sync period: utilisation = in-flight requests of the ready pods (averaged over the
// period's one-second samples) / (ready pods x capacity_per_pod); ratio = utilisation / target;
// within 1 +- tolerance no change; else desired = ceil(ready x ratio), where on a scale-up the
// pods still starting count at 0% (so a cold start is not asked for twice). Scale-up at most
// max(2 x current, current + 4) per period; scale-down to the highest recommendation of the last
// stabilization window.
class HpaPolicy : public Policy {
 public:
  explicit HpaPolicy(HpaConfig config) : config_(config) {}
  std::string name() const override { return "hpa"; }
  int InitialReplicas() const override { return config_.initial_replicas; }
  std::optional<int> Tick(const ClusterSnapshot& cluster) override;

 private:
  HpaConfig config_;
  double in_flight_sum_ = 0;  // since the last sync
  double ready_sum_ = 0;
  double last_sync_s_ = -1;
  std::deque<std::pair<double, int>> recommendations_;  // (time, count)
};

struct KpaConfig {
  double target_concurrency = 1;  // per pod (containerConcurrency x target utilisation), > 0
  double stable_window_s = 60;
  double panic_window_s = 6;
  double panic_threshold = 2.0;
  double tick_s = 2;
  double max_scale_up_rate = 1000;
  double max_scale_down_rate = 2;
  int initial_replicas = 1;
};

// Knative's KPA (pkg/autoscaler/scaling/autoscaler.go): the concurrency seen by the pods' queue
// proxies (queue + in flight) is sampled each second; every tick, desired-stable =
// ceil(average over the stable window / target) and desired-panic likewise over the panic
// window, both kept within [ready / max_scale_down_rate, ready x max_scale_up_rate]. It panics
// when desired-panic / ready >= panic_threshold and stays in panic until the threshold has not
// been crossed for a stable window; in panic it takes the larger desire and never scales down.
class KpaPolicy : public Policy {
 public:
  explicit KpaPolicy(KpaConfig config) : config_(config) {}
  std::string name() const override { return "kpa"; }
  int InitialReplicas() const override { return config_.initial_replicas; }
  std::optional<int> Tick(const ClusterSnapshot& cluster) override;
  std::map<std::string, double> Counters() const override;

 private:
  double Average(double now, double window_s) const;

  KpaConfig config_;
  std::deque<std::pair<double, double>> samples_;  // (time, total concurrency)
  double last_decision_s_ = -1;
  double panic_time_s_ = -1;  // last tick over the panic threshold; < 0: not panicking
  int max_panic_pods_ = 0;
  double panic_ticks_ = 0;
};

}  // namespace kinfer::sim
