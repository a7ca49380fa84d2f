#include "bench/sim/baseline_policies.h"

#include <algorithm>
#include <cmath>

namespace kinfer::sim {

// A small allowance for floating-point noise in window arithmetic.
constexpr double kEps = 1e-9;

SchedulePolicy::SchedulePolicy(std::string name, std::vector<int> window_counts, double window_s,
                               double lead_s)
    : name_(std::move(name)),
      counts_(std::move(window_counts)),
      window_s_(window_s),
      lead_s_(lead_s) {
  if (counts_.empty()) counts_.push_back(1);
}

SchedulePolicy SchedulePolicy::Constant(std::string name, int replicas) {
  return SchedulePolicy(std::move(name), {replicas}, 1e18, 0);
}

int SchedulePolicy::CountAt(double t_s) const {
  const double k = std::floor(std::max(0.0, t_s) / window_s_ + kEps);
  const size_t i = std::min(static_cast<size_t>(k), counts_.size() - 1);
  return counts_[i];
}

int SchedulePolicy::DesiredAt(double t_s) const {
  int best = CountAt(t_s);
  for (double t = (std::floor(t_s / window_s_ + kEps) + 1) * window_s_; t <= t_s + lead_s_ + kEps;
       t += window_s_) {
    best = std::max(best, CountAt(t));
  }
  return best;
}

std::optional<int> SchedulePolicy::Tick(const ClusterSnapshot& cluster) {
  return DesiredAt(cluster.now_s);
}

std::optional<int> HpaPolicy::Tick(const ClusterSnapshot& cluster) {
  for (const PodSnapshot& p : cluster.pods) {
    if (p.ready) in_flight_sum_ += p.in_flight;
  }
  ready_sum_ += cluster.ready;
  const double now = cluster.now_s;
  if (last_sync_s_ >= 0 && now - last_sync_s_ < config_.sync_period_s - kEps) return std::nullopt;
  last_sync_s_ = now;
  const double in_flight = in_flight_sum_, ready_samples = ready_sum_;
  in_flight_sum_ = ready_sum_ = 0;
  const int current = cluster.requested;
  if (cluster.ready == 0 || ready_samples <= 0) return std::nullopt;  // no metrics at all

  const double target = config_.target_utilization * config_.capacity_per_pod;
  const double per_pod = in_flight / ready_samples;  // average in flight per ready pod
  const double ratio = per_pod / target;
  int recommend = current;
  if (std::abs(ratio - 1) > config_.tolerance) {
    if (ratio > 1 && cluster.starting > 0) {
      // Pods not yet ready count as 0% on a scale-up (the controller's unready-pod rule).
      const int all = cluster.ready + cluster.starting;
      const double ratio_all = per_pod * cluster.ready / (target * all);
      if (ratio_all > 1 + config_.tolerance) {
        recommend = static_cast<int>(std::ceil(ratio_all * all - kEps));
      }
    } else {
      recommend = static_cast<int>(std::ceil(ratio * cluster.ready - kEps));
    }
  }
  // Scale-down stabilization: the highest recommendation over the window.
  recommendations_.emplace_back(now, recommend);
  while (!recommendations_.empty() &&
         recommendations_.front().first < now - config_.scale_down_stabilization_s - kEps) {
    recommendations_.pop_front();
  }
  int desired = recommend;
  if (recommend < current) {
    for (const auto& [t, r] : recommendations_) desired = std::max(desired, r);
    desired = std::min(desired, current);
  } else if (recommend > current) {
    desired = std::min(recommend, std::max(2 * current, current + 4));
  }
  return desired;
}

double KpaPolicy::Average(double now, double window_s) const {
  double sum = 0;
  int n = 0;
  for (auto it = samples_.rbegin(); it != samples_.rend() && it->first > now - window_s - kEps;
       ++it) {
    sum += it->second;
    ++n;
  }
  return n ? sum / n : 0;
}

std::optional<int> KpaPolicy::Tick(const ClusterSnapshot& cluster) {
  const double now = cluster.now_s;
  double concurrency = 0;
  for (const PodSnapshot& p : cluster.pods) {
    if (p.ready) concurrency += p.queue_depth + p.in_flight;
  }
  samples_.emplace_back(now, concurrency);
  while (!samples_.empty() && samples_.front().first <= now - config_.stable_window_s - kEps) {
    samples_.pop_front();
  }
  if (last_decision_s_ >= 0 && now - last_decision_s_ < config_.tick_s - kEps) return std::nullopt;
  last_decision_s_ = now;

  const double ready = std::max(1, cluster.ready);
  const double max_up = std::ceil(config_.max_scale_up_rate * ready);
  const double max_down = std::floor(ready / config_.max_scale_down_rate);
  const double dspc = std::ceil(Average(now, config_.stable_window_s) / config_.target_concurrency);
  const double dppc = std::ceil(Average(now, config_.panic_window_s) / config_.target_concurrency);
  const int stable = static_cast<int>(std::min(std::max(dspc, max_down), max_up));
  const int panic = static_cast<int>(std::min(std::max(dppc, max_down), max_up));
  const bool over = dppc / ready >= config_.panic_threshold;
  if (over) {
    panic_time_s_ = now;
  } else if (panic_time_s_ >= 0 && panic_time_s_ + config_.stable_window_s < now) {
    panic_time_s_ = -1;
    max_panic_pods_ = 0;
  }
  int desired = stable;
  if (panic_time_s_ >= 0) {
    ++panic_ticks_;
    desired = std::max(desired, panic);
    // No scale-down while panicking.
    if (desired > max_panic_pods_) {
      max_panic_pods_ = desired;
    } else {
      desired = max_panic_pods_;
    }
  }
  return desired;
}

std::map<std::string, double> KpaPolicy::Counters() const {
  return {{"panic_ticks", panic_ticks_}};
}

}  // namespace kinfer::sim
