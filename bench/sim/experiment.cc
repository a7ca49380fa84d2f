#include "bench/sim/experiment.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <memory>
#include <thread>

#include "bench/sim/baseline_policies.h"

namespace kinfer::sim {

const std::vector<std::string>& KnownPolicies() {
  static const std::vector<std::string> kNames = {"kinfer", "static", "hpa", "kpa", "oracle"};
  return kNames;
}

namespace {

double Round(double v, int digits) {
  const double scale = std::pow(10.0, digits);
  return std::round(v * scale) / scale;
}

}  // namespace

double KinferTargetRps(const ExperimentOptions& options, const ExperimentResult& result) {
  return options.kinfer_target_rps.value_or(options.kinfer_rate_fraction *
                                            result.calibration.max_rps);
}

StatusOr<ExperimentResult> RunExperiment(const Trace& trace, const ServiceModel& model,
                                         const ExperimentOptions& options) {
  const auto& known = KnownPolicies();
  for (const std::string& p : options.policies) {
    if (std::find(known.begin(), known.end(), p) == known.end()) {
      return InvalidArgument("unknown policy '" + p +
                             "' (known: kinfer, static, hpa, kpa, oracle)");
    }
  }
  if (trace.requests.empty()) return InvalidArgument("the trace has no request");
  const SimConfig& sim = options.sim;
  if (sim.min_replicas < 1 || sim.max_replicas < sim.min_replicas) {
    return InvalidArgument("need 1 <= min replicas <= max replicas");
  }
  if (sim.limits.max_running < 1 || sim.limits.max_prefill_tokens < 1) {
    return InvalidArgument("max running requests and max prefill tokens must be >= 1");
  }
  if (!(sim.slo_ttft_s > 0)) return InvalidArgument("the TTFT SLO must be > 0 seconds");
  if (!(sim.cold_start_s >= 0)) return InvalidArgument("the cold start must be >= 0 seconds");

  if (!(options.warmup_s >= 0)) return InvalidArgument("the warm-up must be >= 0 seconds");

  ExperimentResult result;
  if (options.calibration_requests < 10 || options.calibration_streams < 1) {
    return InvalidArgument("calibration needs >= 10 requests and >= 1 stream");
  }
  if (options.kinfer_target_rps && !(*options.kinfer_target_rps >= 0)) {
    return InvalidArgument("kinfer's target requests per second must be >= 0 (0: no rate term)");
  }
  result.calibration =
      CalibrateReplica(trace, model, sim, options.plan, options.calibration_requests,
                       options.calibration_streams, options.threads);
  result.capacity = options.capacity.value_or(result.calibration.concurrency);
  if (!(result.capacity > 0)) {
    return InvalidArgument(
        "a replica cannot serve this trace's requests within the SLO at any "
        "rate (calibrated capacity 0); give --capacity");
  }
  // Warm-up: a whole number of the oracle's windows, so that its windows stay aligned.
  const double window = options.plan.window_s;
  const double warmup = std::ceil(options.warmup_s / window - 1e-9) * window;
  const Trace run_trace = WithWarmup(trace, warmup);
  SimConfig run_sim = sim;
  run_sim.warmup_s = warmup;
  run_sim.first_tick_s = std::min(window, warmup / 2);
  const int warmup_windows = static_cast<int>(std::llround(warmup / window));

  // The oracle's plan over the extended trace; its report counts the trace's own windows.
  const OraclePlan full = PlanOracle(run_trace, model, sim, options.plan);
  result.oracle.window_counts.assign(full.window_counts.begin() + warmup_windows,
                                     full.window_counts.end());
  if (result.oracle.window_counts.empty()) result.oracle.window_counts.push_back(sim.min_replicas);
  for (size_t w = 0; w < result.oracle.window_counts.size(); ++w) {
    if (result.oracle.window_counts[w] > result.oracle.peak_count) {
      result.oracle.peak_count = result.oracle.window_counts[w];
      result.oracle.peak_window = static_cast<int>(w);
    }
  }
  const int initial = full.window_counts.front();

  autoscale::AutoscalerConfig kc = options.kinfer;
  kc.min_replicas = sim.min_replicas;
  kc.max_replicas = sim.max_replicas;
  kc.slo_ttft_p99_seconds = options.kinfer_slo_term ? sim.slo_ttft_s : 0;
  kc.target_load_per_replica = options.kinfer_target_fraction * result.capacity;
  result.kinfer_target_load = kc.target_load_per_replica;
  kc.target_requests_per_second_per_replica = KinferTargetRps(options, result);

  // Build every policy first (errors surface before any run).
  std::vector<std::unique_ptr<Policy>> policies;
  for (const std::string& name : options.policies) {
    if (name == "kinfer") {
      KINFER_ASSIGN_OR_RETURN(auto p, KinferPolicy::Create(kc, options.kinfer_tick_s, initial));
      if (options.record_kinfer_decisions) p->RecordDecisions();
      policies.push_back(std::move(p));
    } else if (name == "static") {
      policies.push_back(std::make_unique<SchedulePolicy>(
          SchedulePolicy::Constant("static", result.oracle.peak_count)));
    } else if (name == "oracle") {
      policies.push_back(
          std::make_unique<SchedulePolicy>("oracle", full.window_counts, window, sim.cold_start_s));
    } else if (name == "hpa") {
      HpaConfig c;
      c.target_utilization = options.hpa_target_utilization;
      c.capacity_per_pod = result.capacity;
      c.initial_replicas = initial;
      policies.push_back(std::make_unique<HpaPolicy>(c));
    } else if (name == "kpa") {
      KpaConfig c;
      c.target_concurrency = options.kpa_target_utilization * result.capacity;
      c.initial_replicas = initial;
      policies.push_back(std::make_unique<KpaPolicy>(c));
    }
  }

  result.results.resize(policies.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i; (i = next.fetch_add(1)) < policies.size();) {
      SimRun run = Simulate(run_trace, model, run_sim, *policies[i]);
      PolicyResult& r = result.results[i];
      r.summary = Summarize(run_trace, run, sim.slo_ttft_s, warmup);
      const size_t replayed = run_trace.requests.size() - trace.requests.size();
      for (size_t q = replayed; q < run_trace.requests.size(); ++q) {
        const RequestOutcome& o = run.outcomes[q];
        if (o.ttft_s >= 0 && o.ttft_s <= sim.slo_ttft_s) continue;
        const TraceRequest& req = run_trace.requests[q];
        r.misses.push_back(MissRecord{q - replayed, req.arrival_s - warmup, o.ttft_s, o.shed, o.pod,
                                      req.input_tokens, req.output_tokens});
      }
      r.counters = policies[i]->Counters();
      r.timeline = std::move(run.timeline);
    }
  };
  const int threads = std::clamp<int>(options.threads, 1, static_cast<int>(policies.size()));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();

  for (const auto& p : policies) {
    if (const auto* k = dynamic_cast<const KinferPolicy*>(p.get())) {
      for (const KinferDecisionRow& row : k->decisions()) {
        if (row.t_s < warmup) continue;
        result.kinfer_decisions.push_back(row);
        result.kinfer_decisions.back().t_s -= warmup;
      }
    }
  }

  double oracle_hours = -1;
  for (const PolicyResult& r : result.results) {
    if (r.summary.policy == "oracle") oracle_hours = r.summary.replica_hours;
  }
  if (oracle_hours > 0) {
    for (PolicyResult& r : result.results) {
      r.replica_hours_vs_oracle = r.summary.replica_hours / oracle_hours;
    }
  }
  return result;
}

nlohmann::json ExperimentJson(const Trace& trace, const ServiceModel& model,
                              const ExperimentOptions& options, const ExperimentResult& result) {
  const SimConfig& sim = options.sim;
  nlohmann::json j;
  j["trace"] = trace.source;
  j["requests"] = trace.requests.size();
  j["span_s"] = Round(trace.span_s(), 3);
  j["service_model"] = model.description();
  j["slo_ttft_s"] = sim.slo_ttft_s;
  j["slo_target_attainment"] = options.plan.target_attainment;
  j["cold_start_s"] = sim.cold_start_s;
  j["seed"] = sim.seed;
  j["balancer"] = {{"kind", BalancerKindName(sim.balancer.kind)},
                   {"choices", sim.balancer.choices},
                   {"slow_start_window_s", sim.balancer.slow_start_window_s},
                   {"slow_start_aggression", sim.balancer.slow_start_aggression},
                   {"slow_start_min_weight", sim.balancer.slow_start_min_weight}};
  j["balancer_choices"] = sim.balancer.choices;
  j["warmup_s"] = options.warmup_s;
  j["min_replicas"] = sim.min_replicas;
  j["max_replicas"] = sim.max_replicas;
  j["replica"] = {{"max_running", sim.limits.max_running},
                  {"max_prefill_tokens", sim.limits.max_prefill_tokens},
                  {"queue_deadline_s", sim.limits.queue_deadline_s}};
  j["calibration"] = {{"max_rps_per_replica", Round(result.calibration.max_rps, 4)},
                      {"max_rps_stderr", Round(result.calibration.max_rps_stderr, 4)},
                      {"draws", result.calibration.streams},
                      {"requests_per_draw", options.calibration_requests},
                      {"concurrency_at_max_rps", Round(result.calibration.concurrency, 3)},
                      {"capacity_used", Round(result.capacity, 3)}};
  j["targets"] = {
      {"kinfer_target_load_per_replica", Round(result.kinfer_target_load, 3)},
      {"kinfer_target_requests_per_second_per_replica", Round(KinferTargetRps(options, result), 4)},
      {"kinfer_tick_s", options.kinfer_tick_s},
      {"kinfer_slo_term", options.kinfer_slo_term},
      {"kinfer_scale_down_delay_s",
       std::chrono::duration<double>(options.kinfer.scale_down_delay).count()},
      {"kinfer_max_scale_up_rate", options.kinfer.max_scale_up_rate},
      {"hpa_target_utilization", options.hpa_target_utilization},
      {"hpa_capacity_per_pod", Round(result.capacity, 3)},
      {"kpa_target_concurrency", Round(options.kpa_target_utilization * result.capacity, 3)}};
  j["oracle_plan"] = {{"window_s", options.plan.window_s},
                      {"window_counts", result.oracle.window_counts},
                      {"peak_count", result.oracle.peak_count},
                      {"peak_window", result.oracle.peak_window}};
  nlohmann::json policies = nlohmann::json::array();
  for (const PolicyResult& r : result.results) policies.push_back(PolicyJson(r));
  j["policies"] = policies;
  return j;
}

}  // namespace kinfer::sim
