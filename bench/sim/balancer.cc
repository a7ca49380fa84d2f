#include "bench/sim/balancer.h"

#include <algorithm>
#include <cmath>

namespace kinfer::sim {

bool ParseBalancerKind(const std::string& name, BalancerKind* out) {
  if (name == "least-request") {
    *out = BalancerKind::kLeastRequest;
  } else if (name == "least-tokens") {
    *out = BalancerKind::kLeastTokens;
  } else {
    return false;
  }
  return true;
}

std::string BalancerKindName(BalancerKind kind) {
  return kind == BalancerKind::kLeastTokens ? "least-tokens" : "least-request";
}

double SlowStartFactor(const BalancerConfig& config, double since_ready_s) {
  const double window = config.slow_start_window_s;
  if (!(window > 0) || since_ready_s >= window) return 1.0;
  const double time_factor = std::max(0.001, since_ready_s) / window;
  const double a = config.slow_start_aggression > 0 ? config.slow_start_aggression : 1.0;
  const double ramp = a == 1.0 ? time_factor : std::pow(time_factor, 1.0 / a);
  return std::max(ramp, config.slow_start_min_weight);
}

double Balancer::Factor(const Endpoint& e, double now) const {
  if (e.slow_start_from_s < 0) return 1.0;
  return SlowStartFactor(config_, now - e.slow_start_from_s);
}

double Balancer::EdfWeight(const Endpoint& e, double now) const {
  return Factor(e, now) / (static_cast<double>(e.outstanding) + 1.0);
}

void Balancer::Rebuild(const std::vector<Endpoint>& ready, double now) {
  weighted_ = false;
  if (config_.kind != BalancerKind::kLeastRequest || !(config_.slow_start_window_s > 0)) return;
  for (const Endpoint& e : ready) {
    if (e.slow_start_from_s >= 0 && now - e.slow_start_from_s < config_.slow_start_window_s) {
      weighted_ = true;
    }
  }
  if (!weighted_ || ready.size() <= 1) {
    // Envoy builds no EDF schedule for a single host either.
    weighted_ = false;
    return;
  }
  std::fill(deadline_.begin(), deadline_.end(), -1.0);
  for (const Endpoint& e : ready) {
    if (static_cast<size_t>(e.id) >= deadline_.size()) {
      deadline_.resize(e.id + 1, -1.0);
      order_.resize(e.id + 1, 0);
    }
    deadline_[e.id] = clock_ + 1.0 / EdfWeight(e, now);
    order_[e.id] = next_order_++;
  }
}

size_t Balancer::PickLeastRequest(const std::vector<Endpoint>& ready, std::mt19937_64& rng) const {
  if (config_.choices > 0) {
    size_t best = ready.size();
    for (int k = 0; k < config_.choices; ++k) {
      const size_t i = rng() % ready.size();
      if (best == ready.size() || ready[i].outstanding < ready[best].outstanding) best = i;
    }
    return best;
  }
  size_t best = 0;
  int ties = 1;
  for (size_t i = 1; i < ready.size(); ++i) {
    if (ready[i].outstanding < ready[best].outstanding) {
      best = i;
      ties = 1;
    } else if (ready[i].outstanding == ready[best].outstanding) {
      ++ties;
    }
  }
  if (ties > 1) {
    int pick = static_cast<int>(rng() % static_cast<uint64_t>(ties));
    const int load = ready[best].outstanding;
    for (size_t i = 0; i < ready.size(); ++i) {
      if (ready[i].outstanding == load && pick-- == 0) return i;
    }
  }
  return best;
}

size_t Balancer::PickLeastTokens(const std::vector<Endpoint>& ready, double now,
                                 std::mt19937_64& rng) const {
  // Scores divided by the slow-start factor (1 without slow start): prompt tokens first, then
  // outstanding requests + 1.
  auto score = [&](const Endpoint& e) {
    const double f = Factor(e, now);
    return std::make_pair(static_cast<double>(e.prefill_tokens) / f,
                          (static_cast<double>(e.outstanding) + 1.0) / f);
  };
  size_t best = 0;
  auto best_score = score(ready[0]);
  int ties = 1;
  for (size_t i = 1; i < ready.size(); ++i) {
    const auto s = score(ready[i]);
    if (s < best_score) {
      best = i;
      best_score = s;
      ties = 1;
    } else if (s == best_score) {
      ++ties;
    }
  }
  if (ties > 1) {
    int pick = static_cast<int>(rng() % static_cast<uint64_t>(ties));
    for (size_t i = 0; i < ready.size(); ++i) {
      if (score(ready[i]) == best_score && pick-- == 0) return i;
    }
  }
  return best;
}

size_t Balancer::Pick(const std::vector<Endpoint>& ready, double now, std::mt19937_64& rng) {
  if (config_.kind == BalancerKind::kLeastTokens) return PickLeastTokens(ready, now, rng);
  if (!weighted_) return PickLeastRequest(ready, rng);
  // Earliest deadline first; the picked pod goes back with its weight of now.
  size_t best = 0;
  for (size_t i = 1; i < ready.size(); ++i) {
    const double d = deadline_[ready[i].id], b = deadline_[ready[best].id];
    if (d < b || (d == b && order_[ready[i].id] < order_[ready[best].id])) best = i;
  }
  const Endpoint& e = ready[best];
  clock_ = deadline_[e.id];
  deadline_[e.id] = clock_ + 1.0 / EdfWeight(e, now);
  order_[e.id] = next_order_++;
  return best;
}

}  // namespace kinfer::sim
