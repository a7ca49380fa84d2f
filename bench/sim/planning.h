// Planning: the counts that need knowledge of the whole trace, found by simulating with fixed
// replica counts.
//   * FewestReplicasFor(): the fewest replicas that serve the requests arriving in a window
//     within the SLO (attainment >= target), the window replayed after `warmup_s` of the arrivals
//     before it (at the same count, so a window starts with the backlog it would inherit).
//   * PlanOracle(): that count for every window (minute) of the trace: the oracle's schedule.
//     Static provisioning for the peak is the largest of them (the hardest minute).
//   * CalibrateReplica(): one replica's capacity under the trace's request mix: the highest
//     Poisson arrival rate it serves within the SLO, and the concurrency (queue + in flight) it
//     holds at that rate. Load-based policies take their per-replica targets from it.
//
// Thread safety: plain functions; they share nothing.
#pragma once

#include <vector>

#include "bench/sim/service_model.h"
#include "bench/sim/simulator.h"
#include "bench/sim/trace.h"

namespace kinfer::sim {

struct PlanOptions {
  double window_s = 60;             // the oracle's look-ahead window
  double warmup_s = 60;             // arrivals replayed before a window
  double target_attainment = 0.99;  // what "within the SLO" means for a window
};

int FewestReplicasFor(const Trace& trace, const ServiceModel& model, const SimConfig& config,
                      const PlanOptions& options, double from_s, double to_s);

struct OraclePlan {
  std::vector<int> window_counts;  // one per window of the trace
  int peak_count = 0;              // the largest
  int peak_window = 0;             // its index (the first, on ties)
};

OraclePlan PlanOracle(const Trace& trace, const ServiceModel& model, const SimConfig& config,
                      const PlanOptions& options);

struct ReplicaCapacity {
  double max_rps = 0;      // highest Poisson rate served within the SLO
  double concurrency = 0;  // average queue + in flight at that rate (Little's law)
  // The standard error of max_rps: the draws' sample standard deviation / sqrt(draws); 0 with
  // one draw. How far the measurement itself may be off (a draw's rate varies by several %).
  double max_rps_stderr = 0;
  int streams = 0;  // draws behind the means
};

// Replays `requests` requests with lengths drawn from the trace at Poisson arrivals against one
// replica and bisects the rate; does so for `streams` independent draws (stream k seeded from
// config.seed and k) and returns the means. A single draw's max_rps varies by about 2.3% (one
// standard deviation; 20000 requests of the Azure conversation mix on the H100 model); the mean
// of n draws by 2.3% / sqrt(n). The draws run on up to `threads` threads; the result does not
// depend on the thread count.
ReplicaCapacity CalibrateReplica(const Trace& trace, const ServiceModel& model,
                                 const SimConfig& config, const PlanOptions& options,
                                 int requests = 20000, int streams = 5, int threads = 1);

}  // namespace kinfer::sim
