#include "bench/sim/planning.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <random>
#include <thread>

#include "bench/sim/baseline_policies.h"
#include "bench/sim/stats.h"

namespace kinfer::sim {

// Fixed-count runs need no policy ticks (simulator.h SimConfig::tick_s).
constexpr double kNoTicks = 1e12;
// The lowest rate the calibration tries.
constexpr double kMinRps = 1.0 / 1024;

int FewestReplicasFor(const Trace& trace, const ServiceModel& model, const SimConfig& config,
                      const PlanOptions& options, double from_s, double to_s) {
  const double start = std::max(0.0, from_s - options.warmup_s);
  Trace window = SliceTrace(trace, start, to_s);
  if (window.requests.empty()) return config.min_replicas;
  for (TraceRequest& r : window.requests) r.arrival_s -= start;
  if (const double missing = options.warmup_s - (from_s - start); missing > 0) {
    // Too close to the trace's start for a full warm-up: the window's own arrivals, shifted
    // back, stand in for the load before the trace (the system is taken to be in steady state).
    Trace before = SliceTrace(window, from_s - start, from_s - start + missing);
    for (TraceRequest& r : window.requests) r.arrival_s += missing;
    for (TraceRequest& r : before.requests) r.arrival_s -= from_s - start;
    window.requests.insert(window.requests.begin(), before.requests.begin(), before.requests.end());
    from_s += missing;
    to_s += missing;
  }
  SimConfig c = config;
  c.timeline_period_s = 0;
  c.tick_s = kNoTicks;
  c.horizon_s = to_s - start;
  for (int n = config.min_replicas; n < config.max_replicas; ++n) {
    SchedulePolicy fixed = SchedulePolicy::Constant("fixed", n);
    const SimRun run = Simulate(window, model, c, fixed);
    if (Attainment(window, run, config.slo_ttft_s, from_s - start, to_s - start) >=
        options.target_attainment) {
      return n;
    }
  }
  return config.max_replicas;
}

OraclePlan PlanOracle(const Trace& trace, const ServiceModel& model, const SimConfig& config,
                      const PlanOptions& options) {
  OraclePlan plan;
  const int windows =
      std::max(1, static_cast<int>(std::ceil(trace.span_s() / options.window_s + 1e-9)));
  for (int w = 0; w < windows; ++w) {
    const double from = w * options.window_s;
    // The last window includes the last arrival.
    const double to = w == windows - 1 ? trace.span_s() + 1e-6 : from + options.window_s;
    const int n = FewestReplicasFor(trace, model, config, options, from, to);
    plan.window_counts.push_back(n);
    if (n > plan.peak_count) {
      plan.peak_count = n;
      plan.peak_window = w;
    }
  }
  return plan;
}

namespace {

// Poisson arrivals at `rps` with lengths from `lengths`, using fixed unit-rate gaps so that the
// trace changes only in scale as the rate changes (the bisection then sees a monotone world).
Trace PoissonTrace(const std::vector<double>& unit_gaps, const std::vector<TraceRequest>& lengths,
                   double rps) {
  Trace t;
  t.source = "poisson";
  double now = 0;
  for (size_t i = 0; i < unit_gaps.size(); ++i) {
    TraceRequest r = lengths[i];
    r.arrival_s = now;
    t.requests.push_back(r);
    now += unit_gaps[i] / rps;
  }
  return t;
}

}  // namespace

ReplicaCapacity CalibrateReplica(const Trace& trace, const ServiceModel& model,
                                 const SimConfig& config, const PlanOptions& options, int requests,
                                 int streams, int threads) {
  SimConfig c = config;
  c.timeline_period_s = 0;
  c.warmup_s = 0;
  c.first_tick_s = 0;
  c.min_replicas = c.max_replicas = 1;
  c.tick_s = kNoTicks;
  streams = std::max(streams, 1);
  // One draw: its highest rate within the SLO and the concurrency at that rate.
  auto draw = [&](int stream) -> ReplicaCapacity {
    std::mt19937_64 rng(config.seed * 1000003ULL + 0x5eed5eedULL + static_cast<uint64_t>(stream));
    std::vector<double> gaps;
    std::vector<TraceRequest> lengths;
    for (int i = 0; i < requests; ++i) {
      // Inverse-CDF exponential from 53 random bits: the same on every platform.
      const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
      gaps.push_back(-std::log1p(-u));
      lengths.push_back(trace.requests[rng() % trace.requests.size()]);
    }
    SimConfig sc = c;
    auto serve = [&](double rps, double* concurrency) {
      Trace t = PoissonTrace(gaps, lengths, rps);
      sc.horizon_s = t.span_s();
      SchedulePolicy one = SchedulePolicy::Constant("one", 1);
      const SimRun run = Simulate(t, model, sc, one);
      // The first 10% warm the replica up.
      const double from = t.requests[t.requests.size() / 10].arrival_s;
      const double attainment = Attainment(t, run, config.slo_ttft_s, from, 1e300);
      if (concurrency) {
        double in_system = 0;
        for (size_t i = 0; i < t.requests.size(); ++i) {
          if (run.outcomes[i].done_s >= 0) {
            in_system += run.outcomes[i].done_s - t.requests[i].arrival_s;
          }
        }
        *concurrency = in_system / std::max(1e-9, t.span_s());
      }
      return attainment >= options.target_attainment;
    };
    // Bracket [lo, hi) by doubling or halving from 1 req/s (down to kMinRps: below that the
    // replica is taken not to serve the mix at all), then bisect to 0.1%.
    double lo = 0, hi = 1;
    if (serve(1, nullptr)) {
      lo = 1;
      for (hi = 2; serve(hi, nullptr) && hi < 1e6; hi *= 2) lo = hi;
    } else {
      for (double r = 0.5; r >= kMinRps; r /= 2) {
        if (serve(r, nullptr)) {
          lo = r;
          break;
        }
        hi = r;
      }
    }
    while (lo > 0 && hi - lo > 1e-3 * lo) {
      const double mid = (lo + hi) / 2;
      (serve(mid, nullptr) ? lo : hi) = mid;
    }
    ReplicaCapacity one;
    one.max_rps = lo;
    if (lo > 0) serve(lo, &one.concurrency);
    return one;
  };

  std::vector<ReplicaCapacity> draws(streams);
  std::atomic<int> next{0};
  auto worker = [&] {
    for (int k; (k = next.fetch_add(1)) < streams;) draws[k] = draw(k);
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < std::clamp(threads, 1, streams); ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();

  // Summed in stream order, so the thread count changes nothing.
  ReplicaCapacity mean;
  mean.streams = streams;
  for (const ReplicaCapacity& d : draws) {
    mean.max_rps += d.max_rps / streams;
    mean.concurrency += d.concurrency / streams;
  }
  if (streams > 1) {
    double ss = 0;
    for (const ReplicaCapacity& d : draws) {
      ss += (d.max_rps - mean.max_rps) * (d.max_rps - mean.max_rps);
    }
    mean.max_rps_stderr = std::sqrt(ss / (streams - 1)) / std::sqrt(static_cast<double>(streams));
  }
  return mean;
}

}  // namespace kinfer::sim
