#include "bench/sim/kinfer_policy.h"

#include <chrono>

namespace kinfer::sim {

constexpr double kClockOffsetSeconds = 1e6;

StatusOr<std::unique_ptr<KinferPolicy>> KinferPolicy::Create(
    const autoscale::AutoscalerConfig& config, double decide_every_s, int initial_replicas) {
  KINFER_RETURN_IF_ERROR(config.Validate().WithContext("kinfer autoscaler config"));
  if (!(decide_every_s > 0)) return InvalidArgument("kinfer tick must be > 0 seconds");
  return std::unique_ptr<KinferPolicy>(
      new KinferPolicy(autoscale::Autoscaler(config), decide_every_s, initial_replicas));
}

KinferPolicy::KinferPolicy(autoscale::Autoscaler autoscaler, double decide_every_s,
                           int initial_replicas)
    : autoscaler_(std::move(autoscaler)),
      decide_every_s_(decide_every_s),
      initial_replicas_(initial_replicas) {}

std::optional<int> KinferPolicy::Tick(const ClusterSnapshot& cluster) {
  for (const PodSnapshot& p : cluster.pods) {
    std::vector<uint64_t>& acc = pending_ttft_[p.id];
    if (acc.size() != p.ttft_counts.size()) acc.assign(p.ttft_counts.size(), 0);
    for (size_t i = 0; i < acc.size(); ++i) acc[i] += p.ttft_counts[i];
  }
  const double now = cluster.now_s;
  if (last_decision_s_ >= 0 && now - last_decision_s_ < decide_every_s_ - 1e-9) {
    return std::nullopt;
  }
  last_decision_s_ = now;

  std::vector<autoscale::PodSample> samples;
  samples.reserve(cluster.pods.size());
  for (const PodSnapshot& p : cluster.pods) {
    autoscale::PodSample s;
    s.pod = "pod-" + std::to_string(p.id);
    s.ready = p.ready;
    s.has_metrics = p.ready;  // a starting pod's sidecar does not answer yet
    if (p.ready) {
      s.queue_depth = p.queue_depth;
      s.in_flight = p.in_flight;
      std::vector<uint64_t>& acc = pending_ttft_[p.id];
      uint64_t total = 0;
      for (uint64_t c : acc) total += c;
      if (total > 0) {
        s.ttft_upper_bounds = *cluster.ttft_edges;
        s.ttft_counts = acc;
      }
    }
    samples.push_back(std::move(s));
  }
  pending_ttft_.clear();

  // Simulated time on the core's clock, offset so that no tick lands on the clock's epoch.
  const auto t = autoscale::TimePoint(std::chrono::duration_cast<autoscale::Duration>(
      std::chrono::duration<double>(kClockOffsetSeconds + now)));
  const autoscale::Decision d = autoscaler_.Tick(t, cluster.requested, samples);
  counters_["reason." + d.reason] += 1;
  if (d.panic) counters_["panic_ticks"] += 1;
  if (record_) {
    decisions_.push_back(KinferDecisionRow{
        now, cluster.requested, cluster.ready, cluster.starting, d.desired, d.reason, d.panic,
        d.observed_load, d.p99_ttft_panic.value_or(-1), d.p99_ttft_stable.value_or(-1),
        d.load_stable, d.load_panic, d.request_rate_stable, d.desired_by_load, d.desired_by_rate,
        d.desired_by_slo, d.ttft_observations_panic, d.cold_start_hold});
  }
  return d.desired;
}

}  // namespace kinfer::sim
