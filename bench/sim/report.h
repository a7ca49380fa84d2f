// Report: kinfer-sim's outputs. The JSON document holds the run's settings and one object per
// policy; the timeline CSV one row per policy and period (for the plots).
//
// Thread safety: plain functions over values.
#pragma once

#include <map>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/sim/simulator.h"
#include "bench/sim/stats.h"

namespace kinfer::sim {

// One request of the trace that missed the SLO (over it, shed, or never served).
struct MissRecord {
  size_t request = 0;    // index in the trace (without the warm-up replay)
  double arrival_s = 0;  // from the warm-up's end, like the timeline
  double ttft_s = -1;    // < 0: never got a first token
  bool shed = false;
  int pod = -1;  // the pod that got it (-1: none)
  int input_tokens = 0;
  int output_tokens = 0;
};

struct PolicyResult {
  Summary summary;
  std::vector<MissRecord> misses;       // in arrival order
  double replica_hours_vs_oracle = -1;  // < 0 when no oracle ran
  std::map<std::string, double> counters;
  std::vector<TimelineRow> timeline;
};

// One policy's JSON object: policy, slo_attainment, p99_ttft_s, replica_hours, scale_events,
// shed_requests, replica_hours_vs_oracle (null without an oracle) and the other figures.
nlohmann::json PolicyJson(const PolicyResult& result);

// Header plus rows: policy,t_s,arrival_rps,ready,requested,pods,queue_depth,in_flight,
// p99_ttft_s,first_tokens (p99 empty for a period without first tokens).
void WriteTimelineCsv(std::ostream& out, const std::vector<PolicyResult>& results);

// Header plus one row per request that missed the SLO, per policy:
// policy,request,arrival_s,ttft_s,shed,pod,input_tokens,output_tokens (ttft empty when none).
void WriteMissesCsv(std::ostream& out, const std::vector<PolicyResult>& results);

}  // namespace kinfer::sim
