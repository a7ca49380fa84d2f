#include "bench/sim/report.h"

#include <cmath>
#include <cstdio>

namespace kinfer::sim {
namespace {

// Rounds for a stable, readable document (and identical text across identical runs).
double Round(double v, int digits) {
  const double scale = std::pow(10.0, digits);
  return std::round(v * scale) / scale;
}

}  // namespace

nlohmann::json PolicyJson(const PolicyResult& result) {
  const Summary& s = result.summary;
  nlohmann::json j = nlohmann::json::object();
  j["policy"] = s.policy;
  j["slo_attainment"] = Round(s.slo_attainment, 6);
  j["p99_ttft_s"] = Round(s.p99_ttft_s, 4);
  j["replica_hours"] = Round(s.replica_hours, 4);
  j["scale_events"] = s.scale_events;
  j["shed_requests"] = s.shed;
  j["replica_hours_vs_oracle"] = result.replica_hours_vs_oracle >= 0
                                     ? nlohmann::json(Round(result.replica_hours_vs_oracle, 4))
                                     : nlohmann::json(nullptr);
  j["requests"] = s.requests;
  j["served_requests"] = s.served;
  j["unserved_requests"] = s.unserved;
  j["p50_ttft_s"] = Round(s.p50_ttft_s, 4);
  j["p90_ttft_s"] = Round(s.p90_ttft_s, 4);
  j["mean_ttft_s"] = Round(s.mean_ttft_s, 4);
  j["max_ttft_s"] = Round(s.max_ttft_s, 4);
  j["mean_replicas"] = Round(s.mean_replicas, 4);
  j["peak_replicas"] = s.peak_replicas;
  j["scale_ups"] = s.scale_ups;
  j["scale_downs"] = s.scale_downs;
  nlohmann::json counters = nlohmann::json::object();
  for (const auto& [k, v] : result.counters) counters[k] = v;
  j["counters"] = counters;
  return j;
}

void WriteTimelineCsv(std::ostream& out, const std::vector<PolicyResult>& results) {
  out << "policy,t_s,arrival_rps,ready,requested,pods,queue_depth,in_flight,p99_ttft_s,"
         "first_tokens\n";
  char buf[256];
  for (const PolicyResult& r : results) {
    for (const TimelineRow& row : r.timeline) {
      char p99[32] = "";
      if (row.p99_ttft_s >= 0) std::snprintf(p99, sizeof p99, "%.4f", row.p99_ttft_s);
      std::snprintf(buf, sizeof buf, "%s,%.0f,%.3f,%d,%d,%d,%d,%d,%s,%d\n",
                    r.summary.policy.c_str(), row.t_s, row.arrival_rps, row.ready, row.requested,
                    row.pods, row.queue_depth, row.in_flight, p99, row.first_tokens);
      out << buf;
    }
  }
}

void WriteMissesCsv(std::ostream& out, const std::vector<PolicyResult>& results) {
  out << "policy,request,arrival_s,ttft_s,shed,pod,input_tokens,output_tokens\n";
  char buf[256];
  for (const PolicyResult& r : results) {
    for (const MissRecord& m : r.misses) {
      char ttft[32] = "";
      if (m.ttft_s >= 0) std::snprintf(ttft, sizeof ttft, "%.4f", m.ttft_s);
      std::snprintf(buf, sizeof buf, "%s,%zu,%.3f,%s,%d,%d,%d,%d\n", r.summary.policy.c_str(),
                    m.request, m.arrival_s, ttft, m.shed ? 1 : 0, m.pod, m.input_tokens,
                    m.output_tokens);
      out << buf;
    }
  }
}

}  // namespace kinfer::sim
