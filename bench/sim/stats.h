// Stats: the figures a run is judged by, from its per-request outcomes.
//
// slo_attainment is the share of the requests (arriving in the measured range) whose first token
// came within the SLO; a shed request, or one never served, counts as a miss. TTFT quantiles
// are over the served requests (nearest rank). replica_hours is the cost (simulator.h).
//
// Thread safety: plain functions over values.
#pragma once

#include <cstddef>
#include <limits>
#include <string>
#include <vector>

#include "bench/sim/simulator.h"
#include "bench/sim/trace.h"

namespace kinfer::sim {

// The q-quantile (0 < q <= 1) by nearest rank; 0 for an empty input. Takes a copy to reorder.
double Quantile(std::vector<double> values, double q);

struct Summary {
  std::string policy;
  size_t requests = 0;
  size_t served = 0;    // got a first token
  size_t shed = 0;      // dropped by a sidecar queue deadline
  size_t unserved = 0;  // neither (still waiting when the simulation stopped)
  double slo_attainment = 0;
  double p50_ttft_s = 0;
  double p90_ttft_s = 0;
  double p99_ttft_s = 0;
  double mean_ttft_s = 0;
  double max_ttft_s = 0;
  double replica_hours = 0;
  double mean_replicas = 0;  // replica_hours / the measured span
  int peak_replicas = 0;
  int scale_events = 0;
  int scale_ups = 0;
  int scale_downs = 0;
};

// Figures over the requests arriving in [from_s, to_s); the cost figures are the whole run's.
Summary Summarize(const Trace& trace, const SimRun& run, double slo_ttft_s,
                  double from_s = -std::numeric_limits<double>::infinity(),
                  double to_s = std::numeric_limits<double>::infinity());

// Just the attainment over [from_s, to_s); 1 when no request arrived there.
double Attainment(const Trace& trace, const SimRun& run, double slo_ttft_s, double from_s,
                  double to_s);

}  // namespace kinfer::sim
