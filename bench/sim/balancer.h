// Balancer: the front that spreads a Deployment's requests over its ready pods (a Kubernetes
// Service behind an Envoy-based proxy or gateway, or an LLM-aware endpoint picker).
//
// Two ways to choose, and Envoy's slow start for newly ready pods on top of either:
//
//   * kLeastRequest (the default): the ready pod with the fewest outstanding requests (sidecar
//     queue + engine). choices = 0 compares every ready pod, ties at random (Envoy LEAST_REQUEST's
//     FULL_SCAN selection); choices = k >= 1 compares k pods drawn at random with replacement,
//     the first drawn wins ties (N_CHOICES; Envoy's default is k = 2).
//   * kLeastTokens: the ready pod with the fewest prompt tokens still to prefill (queued,
//     waiting for prefill or in the running prefill), ties by fewest outstanding requests, then
//     at random: what LLM-aware pickers do when they score queued work rather than requests.
//
// Slow start (window > 0) models Envoy's `slow_start_config` for LEAST_REQUEST
// (source/extensions/load_balancing_policies: least_request_lb.cc, load_balancer_impl.cc):
//   * A pod is in slow start for `window` seconds after it becomes ready (Envoy: after it joins
//     the cluster healthy). Its weight factor is
//         f = max(min_weight, (max(t, 1 ms) / window)^(1 / aggression)),  t = time since ready,
//     and 1 once t >= window. Envoy's defaults: aggression 1 (linear), min_weight_percent 10%.
//   * Pods present when the balancer starts (the simulation's initial pods) never are.
//   * Least request: at every membership change (a pod becomes ready, or leaves as a scale-down
//     drains it) the balancer is rebuilt. When a pod is in slow start then, it switches to a
//     weighted earliest-deadline-first schedule over the ready pods with weights
//         w = f / (outstanding + 1)          (Envoy's active_request_bias 1.0, the default)
//     and keeps that schedule until the next membership change, even after the window has
//     passed (Envoy builds its EDF scheduler in refresh() and picks from it while it exists;
//     after the window f is 1, so w = 1 / (outstanding + 1)). Otherwise it picks unweighted
//     (full scan or k choices, as above). The EDF schedule, as Envoy's EdfScheduler: each pod has
//     a deadline; a pick takes the earliest (ties: the earlier inserted), moves the schedule's
//     clock to it, and puts the pod back at clock + 1 / w with w computed then (before the new
//     request counts); the other pods' weights are those of their last insertion. A rebuild puts
//     every ready pod at clock + 1 / w. (Envoy also does a seed-dependent number of picks when it
//     builds the schedule, to randomise the start; not modelled.)
//   * Least tokens: an LLM endpoint picker has no Envoy slow start; with window > 0 kinfer-sim
//     applies the same factor f to it by dividing a pod's scores (prompt tokens, then outstanding
//     requests + 1) by f, so that a new pod looks f times as loaded as it is.
//
// Deterministic: the same calls with the same random engine give the same picks.
// Thread safety: not thread-safe; one per simulation.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace kinfer::sim {

enum class BalancerKind { kLeastRequest, kLeastTokens };

// "least-request" / "least-tokens"; false for anything else.
bool ParseBalancerKind(const std::string& name, BalancerKind* out);
std::string BalancerKindName(BalancerKind kind);

struct BalancerConfig {
  BalancerKind kind = BalancerKind::kLeastRequest;
  // Ready pods compared per request (least request, unweighted): 0 = all of them; k >= 1 = k
  // picked at random with replacement.
  int choices = 0;
  double slow_start_window_s = 0;  // 0: no slow start
  double slow_start_aggression = 1.0;
  double slow_start_min_weight = 0.1;  // Envoy's min_weight_percent, as a fraction
};

// What the balancer sees of one ready pod.
struct Endpoint {
  int id = 0;
  int outstanding = 0;            // sidecar queue + engine
  int64_t prefill_tokens = 0;     // prompt tokens not yet prefilled
  double slow_start_from_s = -1;  // when it became ready; < 0: never in slow start
};

// Envoy's slow-start weight factor for a pod ready for `since_ready_s` seconds.
double SlowStartFactor(const BalancerConfig& config, double since_ready_s);

class Balancer {
 public:
  explicit Balancer(BalancerConfig config) : config_(config) {}

  const BalancerConfig& config() const { return config_; }

  // The set of ready pods changed (or the balancer starts): `ready` is the new set.
  void Rebuild(const std::vector<Endpoint>& ready, double now);
  // Index into `ready` of the pod that gets the next request (REQUIRES: ready is non-empty and
  // is the set of the last Rebuild(), with current loads).
  size_t Pick(const std::vector<Endpoint>& ready, double now, std::mt19937_64& rng);

  // True while least request picks from its weighted schedule (tests, diagnostics).
  bool weighted() const { return weighted_; }

 private:
  double Factor(const Endpoint& e, double now) const;
  double EdfWeight(const Endpoint& e, double now) const;
  size_t PickLeastRequest(const std::vector<Endpoint>& ready, std::mt19937_64& rng) const;
  size_t PickLeastTokens(const std::vector<Endpoint>& ready, double now,
                         std::mt19937_64& rng) const;

  BalancerConfig config_;
  bool weighted_ = false;
  // The EDF schedule, by pod id (deadline < 0: not in it).
  double clock_ = 0;
  std::vector<double> deadline_;
  std::vector<uint64_t> order_;
  uint64_t next_order_ = 0;
};

}  // namespace kinfer::sim
