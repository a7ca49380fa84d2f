#include "bench/sim/stats.h"

#include <algorithm>
#include <cmath>

namespace kinfer::sim {

double Quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(values.size())));
  rank = std::clamp<size_t>(rank, 1, values.size());
  std::nth_element(values.begin(), values.begin() + static_cast<long>(rank - 1), values.end());
  return values[rank - 1];
}

Summary Summarize(const Trace& trace, const SimRun& run, double slo_ttft_s, double from_s,
                  double to_s) {
  Summary s;
  s.policy = run.policy;
  std::vector<double> ttfts;
  size_t good = 0;
  double sum = 0;
  for (size_t i = 0; i < trace.requests.size(); ++i) {
    const double t = trace.requests[i].arrival_s;
    if (t < from_s || t >= to_s) continue;
    ++s.requests;
    const RequestOutcome& o = run.outcomes[i];
    if (o.ttft_s >= 0) {
      ++s.served;
      ttfts.push_back(o.ttft_s);
      sum += o.ttft_s;
      good += o.ttft_s <= slo_ttft_s;
    } else if (o.shed) {
      ++s.shed;
    } else {
      ++s.unserved;
    }
  }
  s.slo_attainment = s.requests ? static_cast<double>(good) / static_cast<double>(s.requests) : 1;
  if (!ttfts.empty()) {
    s.mean_ttft_s = sum / static_cast<double>(ttfts.size());
    s.max_ttft_s = *std::max_element(ttfts.begin(), ttfts.end());
    s.p50_ttft_s = Quantile(ttfts, 0.50);
    s.p90_ttft_s = Quantile(ttfts, 0.90);
    s.p99_ttft_s = Quantile(std::move(ttfts), 0.99);
  }
  s.replica_hours = run.replica_seconds / 3600.0;
  s.mean_replicas = run.measured_s > 0 ? run.replica_seconds / run.measured_s : 0;
  s.peak_replicas = run.peak_pods;
  s.scale_events = run.scale_events;
  s.scale_ups = run.scale_ups;
  s.scale_downs = run.scale_downs;
  return s;
}

double Attainment(const Trace& trace, const SimRun& run, double slo_ttft_s, double from_s,
                  double to_s) {
  size_t n = 0, good = 0;
  for (size_t i = 0; i < trace.requests.size(); ++i) {
    const double t = trace.requests[i].arrival_s;
    if (t < from_s || t >= to_s) continue;
    ++n;
    const double ttft = run.outcomes[i].ttft_s;
    good += ttft >= 0 && ttft <= slo_ttft_s;
  }
  return n ? static_cast<double>(good) / static_cast<double>(n) : 1.0;
}

}  // namespace kinfer::sim
