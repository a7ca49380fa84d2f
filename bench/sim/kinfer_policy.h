// KinferPolicy: kinfer's real decision core (operator/autoscale/autoscaler.h) driven by the
// simulated pods, as kinfer-operator drives it from the sidecars' metrics.
//
// Every decide_every_s seconds it builds one PodSample per pod of the Deployment (ready and
// starting; a starting pod has no sidecar yet, so it reports has_metrics = false) with the queue
// depth and in-flight count at that instant and the TTFT histogram delta since the previous
// decision (the sidecar's bucket edges plus the SLO edge), and calls Autoscaler::Tick(now,
// requested replicas, samples). The decision's count is the policy's answer.
//
// Thread safety: not thread-safe; one instance per simulation run.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench/sim/policy.h"
#include "operator/autoscale/autoscaler.h"

namespace kinfer::sim {

// One decision of the core, for the decision log (kinfer-sim --kinfer-log).
struct KinferDecisionRow {
  double t_s = 0;
  int current = 0;  // requested replicas passed in
  int ready = 0;
  int starting = 0;
  int desired = 0;
  std::string reason;
  bool panic = false;
  double observed_load = 0;
  double p99_ttft_panic_s = -1;  // < 0: no data
  double p99_ttft_stable_s = -1;
  // The terms and their inputs (autoscaler.h Decision).
  double load_stable = 0;
  double load_panic = 0;
  double request_rate_stable = 0;
  int desired_by_load = 0;
  int desired_by_rate = 0;
  int desired_by_slo = 0;
  uint64_t ttft_observations_panic = 0;
  bool cold_start_hold = false;
};

class KinferPolicy : public Policy {
 public:
  // INVALID_ARGUMENT when the config does not validate.
  static StatusOr<std::unique_ptr<KinferPolicy>> Create(const autoscale::AutoscalerConfig& config,
                                                        double decide_every_s,
                                                        int initial_replicas);

  std::string name() const override { return "kinfer"; }
  int InitialReplicas() const override { return initial_replicas_; }
  std::optional<int> Tick(const ClusterSnapshot& cluster) override;
  // Decisions by reason ("reason.<name>") and ticks in panic ("panic_ticks").
  std::map<std::string, double> Counters() const override { return counters_; }
  // Keeps every decision from now on (off by default: a long run makes many).
  void RecordDecisions() { record_ = true; }
  const std::vector<KinferDecisionRow>& decisions() const { return decisions_; }

 private:
  KinferPolicy(autoscale::Autoscaler autoscaler, double decide_every_s, int initial_replicas);

  autoscale::Autoscaler autoscaler_;
  double decide_every_s_;
  int initial_replicas_;
  double last_decision_s_ = -1;
  std::map<int, std::vector<uint64_t>> pending_ttft_;  // per pod, since the last decision
  std::map<std::string, double> counters_;
  bool record_ = false;
  std::vector<KinferDecisionRow> decisions_;
};

}  // namespace kinfer::sim
