// kinfer-sim: replays an LLM request trace against simulated replicas under kinfer's autoscaler
// and the baselines, and writes one JSON object per policy. See docs/simulator.md.
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "bench/sim/experiment.h"
#include "common/flags.h"

#ifndef KINFER_SIM_DEFAULT_PERF_MODEL
#define KINFER_SIM_DEFAULT_PERF_MODEL "../shared/data/perf_model.csv"
#endif

namespace {

constexpr const char* kUsage = R"(usage: kinfer-sim --trace FILE [options]

Replays a request trace (CSV: TIMESTAMP,ContextTokens,GeneratedTokens; or JSONL: timestamp ms,
input_length, output_length) against simulated continuous-batching replicas scaled by each
policy, and reports SLO attainment and replica-hours per policy.

  --trace FILE               the trace (required)
  --slo-ttft SECONDS         TTFT SLO (default 2)
  --slo-target FRACTION      attainment that counts as meeting the SLO when planning (0.99)
  --json OUT                 write the results document here
  --timeline OUT.csv         write load, replicas and P99 per policy and period
  --timeline-period SECONDS  timeline row length (default 10)
  --kinfer-log OUT.csv       write every decision of kinfer's core (time, inputs, terms, reason)
  --misses OUT.csv           write every request over the SLO (or shed), per policy
  --policies LIST            comma-separated from kinfer,static,hpa,kpa,oracle (default: all)
  --cold-start SECONDS       pod creation to ready (default 60)
  --seed N                   load-balancer ties and calibration draws (default 1)
  --balancer KIND            least-request (default): fewest outstanding requests;
                             least-tokens: fewest prompt tokens still to prefill
  --balancer-choices K       least request: 0 compares all ready pods (default); K >= 1: the
                             fewest outstanding of K random pods (2 = Envoy's default P2C)
  --slow-start-window SECONDS  Envoy slow start for newly ready pods (default 0: none)
  --slow-start-aggression A  ramp (t / window)^(1/A) (default 1, Envoy's)
  --slow-start-min-weight F  floor of the ramp (default 0.1, Envoy's min_weight_percent 10)
  --time-scale X             multiply arrival times by X (0.5 = twice the rate; default 1)
  --length-scale X           multiply prompt and output lengths by X (default 1)
  --perf-model FILE          perf_model.csv (default )" KINFER_SIM_DEFAULT_PERF_MODEL R"()
  --model NAME               perf model rows: model (default llama2-70b)
  --hardware NAME            ... hardware (default h100-80gb)
  --tp N                     ... tensor parallel degree (default 4)
  --max-running N            requests admitted to a replica's engine (default 64)
  --max-prefill-tokens N     prompt tokens per prefill iteration (default 8192)
  --queue-deadline SECONDS   shed requests queued longer in a sidecar (default 0: never)
  --min-replicas N, --max-replicas N   bounds for every policy (default 1, 64)
  --capacity C               per-replica concurrency for the load targets (default: calibrated)
  --kinfer-tick SECONDS      how often kinfer's core decides (default 1)
  --kinfer-target-fraction F kinfer target load = F x capacity (default 1.5)
  --kinfer-rate-fraction F   kinfer target req/s per replica = F x calibrated max rate
                             (default 1.1; 0: no rate term)
  --kinfer-target-rps R      kinfer target req/s per replica as given (overrides the fraction;
                             what a CR's targetRequestsPerSecondPerReplica carries)
  --calibration-draws N      independent draws the replica calibration averages (default 40)
  --calibration-requests N   requests per calibration draw (default 20000)
  --kinfer-scale-down-delay SECONDS   the core's stabilization window (default 120)
  --kinfer-max-scale-up-rate X        the core's scale-up factor per tick (default: the core's)
  --kinfer-slo-term 0|1      0 runs the core without its SLO term (diagnostic; default 1)
  --kinfer-scale-down-utilization F, --kinfer-scale-down-p99-fraction F, --kinfer-tolerance F,
  --kinfer-stable-window SECONDS, --kinfer-slo-max-step N   override those settings of the core
                             (diagnostics; default: the core's)
  --hpa-target F             HPA utilisation target (default 0.7)
  --kpa-target F             KPA target utilisation of capacity (default 0.7)
  --warmup SECONDS           replay the trace's start this long before it (default 600)
  --threads N                policies simulated at once (default 2)
)";

double Double(kinfer::FlagReader& flags, double lo, double hi) {
  const std::string v = flags.Value();
  double out = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || p != v.data() + v.size() || !std::isfinite(out) || out < lo ||
      out > hi) {
    std::ostringstream msg;
    msg << "flag " << flags.name() << " wants a number in [" << lo << ", " << hi << "], got '" << v
        << "'";
    flags.Fail(msg.str());
  }
  return out;
}

std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

void PrintTable(const kinfer::sim::ExperimentResult& r) {
  std::printf("%-8s %10s %9s %9s %8s %8s %7s %6s\n", "policy", "attainment", "p99_ttft",
              "rep_hours", "vs_orcl", "mean_rep", "scales", "shed");
  for (const auto& p : r.results) {
    const auto& s = p.summary;
    std::printf("%-8s %9.3f%% %8.3fs %9.3f %8.3f %8.2f %7d %6zu\n", s.policy.c_str(),
                100 * s.slo_attainment, s.p99_ttft_s, s.replica_hours, p.replica_hours_vs_oracle,
                s.mean_replicas, s.scale_events, s.shed);
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kinfer::sim;
  kinfer::FlagReader flags(argc, argv, "kinfer-sim");
  std::string trace_path, json_path, timeline_path, kinfer_log_path, misses_path,
      perf_path = KINFER_SIM_DEFAULT_PERF_MODEL;
  double time_scale = 1;
  double length_scale = 1;
  ServiceModelSpec spec;
  ExperimentOptions opt;
  opt.sim.timeline_period_s = 10;
  while (flags.Next()) {
    if (flags.Is("--help", "-h")) {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (flags.Is("--trace")) {
      trace_path = flags.Value();
    } else if (flags.Is("--slo-ttft")) {
      opt.sim.slo_ttft_s = Double(flags, 1e-3, 3600);
    } else if (flags.Is("--slo-target")) {
      opt.plan.target_attainment = Double(flags, 0.01, 1);
    } else if (flags.Is("--json")) {
      json_path = flags.Value();
    } else if (flags.Is("--timeline")) {
      timeline_path = flags.Value();
    } else if (flags.Is("--kinfer-log")) {
      kinfer_log_path = flags.Value();
      opt.record_kinfer_decisions = true;
    } else if (flags.Is("--misses")) {
      misses_path = flags.Value();
    } else if (flags.Is("--timeline-period")) {
      opt.sim.timeline_period_s = Double(flags, 1, 3600);
    } else if (flags.Is("--policies")) {
      opt.policies = SplitList(flags.Value());
    } else if (flags.Is("--cold-start")) {
      opt.sim.cold_start_s = Double(flags, 0, 3600);
    } else if (flags.Is("--seed")) {
      opt.sim.seed = static_cast<uint64_t>(flags.Int(0, INT64_MAX));
    } else if (flags.Is("--balancer-choices")) {
      opt.sim.balancer.choices = static_cast<int>(flags.Int(0, 64));
    } else if (flags.Is("--balancer")) {
      const std::string v = flags.Value();
      if (!ParseBalancerKind(v, &opt.sim.balancer.kind)) {
        flags.Fail("flag --balancer wants least-request or least-tokens, got '" + v + "'");
      }
    } else if (flags.Is("--slow-start-window")) {
      opt.sim.balancer.slow_start_window_s = Double(flags, 0, 86400);
    } else if (flags.Is("--slow-start-aggression")) {
      opt.sim.balancer.slow_start_aggression = Double(flags, 0.01, 100);
    } else if (flags.Is("--slow-start-min-weight")) {
      opt.sim.balancer.slow_start_min_weight = Double(flags, 0.001, 1);
    } else if (flags.Is("--time-scale")) {
      time_scale = Double(flags, 1e-6, 1e6);
    } else if (flags.Is("--length-scale")) {
      length_scale = Double(flags, 1e-6, 1e6);
    } else if (flags.Is("--perf-model")) {
      perf_path = flags.Value();
    } else if (flags.Is("--model")) {
      spec.model = flags.Value();
    } else if (flags.Is("--hardware")) {
      spec.hardware = flags.Value();
    } else if (flags.Is("--tp")) {
      spec.tensor_parallel = static_cast<int>(flags.Int(1, 64));
    } else if (flags.Is("--max-running")) {
      opt.sim.limits.max_running = static_cast<int>(flags.Int(1, 1 << 20));
    } else if (flags.Is("--max-prefill-tokens")) {
      opt.sim.limits.max_prefill_tokens = flags.Int(1, 1LL << 40);
    } else if (flags.Is("--queue-deadline")) {
      opt.sim.limits.queue_deadline_s = Double(flags, 0, 86400);
    } else if (flags.Is("--min-replicas")) {
      opt.sim.min_replicas = static_cast<int>(flags.Int(1, 100000));
    } else if (flags.Is("--max-replicas")) {
      opt.sim.max_replicas = static_cast<int>(flags.Int(1, 100000));
    } else if (flags.Is("--capacity")) {
      opt.capacity = Double(flags, 1e-3, 1e9);
    } else if (flags.Is("--kinfer-tick")) {
      opt.kinfer_tick_s = Double(flags, 1, 60);
    } else if (flags.Is("--kinfer-target-fraction")) {
      opt.kinfer_target_fraction = Double(flags, 0.01, 10);
    } else if (flags.Is("--kinfer-scale-down-delay")) {
      opt.kinfer.scale_down_delay = std::chrono::duration_cast<kinfer::autoscale::Duration>(
          std::chrono::duration<double>(Double(flags, 0, 86400)));
    } else if (flags.Is("--kinfer-max-scale-up-rate")) {
      opt.kinfer.max_scale_up_rate = Double(flags, 1, 1000);
    } else if (flags.Is("--kinfer-slo-term")) {
      opt.kinfer_slo_term = flags.Int(0, 1) == 1;
    } else if (flags.Is("--kinfer-scale-down-utilization")) {
      opt.kinfer.scale_down_utilization = Double(flags, 0.01, 1);
    } else if (flags.Is("--kinfer-scale-down-p99-fraction")) {
      opt.kinfer.scale_down_p99_fraction = Double(flags, 0.01, 1);
    } else if (flags.Is("--kinfer-tolerance")) {
      opt.kinfer.tolerance = Double(flags, 0, 0.99);
    } else if (flags.Is("--kinfer-stable-window")) {
      opt.kinfer.stable_window = std::chrono::duration_cast<kinfer::autoscale::Duration>(
          std::chrono::duration<double>(Double(flags, 1, 86400)));
    } else if (flags.Is("--kinfer-rate-fraction")) {
      opt.kinfer_rate_fraction = Double(flags, 0, 10);
    } else if (flags.Is("--kinfer-target-rps")) {
      opt.kinfer_target_rps = Double(flags, 0, 1e9);
    } else if (flags.Is("--calibration-draws")) {
      opt.calibration_streams = static_cast<int>(flags.Int(1, 10000));
    } else if (flags.Is("--calibration-requests")) {
      opt.calibration_requests = static_cast<int>(flags.Int(10, 10000000));
    } else if (flags.Is("--kinfer-slo-max-step")) {
      opt.kinfer.slo_max_step = static_cast<int>(flags.Int(0, 1000));
    } else if (flags.Is("--hpa-target")) {
      opt.hpa_target_utilization = Double(flags, 0.01, 10);
    } else if (flags.Is("--kpa-target")) {
      opt.kpa_target_utilization = Double(flags, 0.01, 10);
    } else if (flags.Is("--warmup")) {
      opt.warmup_s = Double(flags, 0, 86400);
    } else if (flags.Is("--threads")) {
      opt.threads = static_cast<int>(flags.Int(1, 64));
    } else {
      flags.Unknown();
    }
  }
  if (trace_path.empty()) flags.Fail("--trace is required");

  auto fail = [](const kinfer::Status& st) {
    std::fprintf(stderr, "kinfer-sim: %s\n", st.ToString().c_str());
    return 1;
  };
  const auto wall_start = std::chrono::steady_clock::now();
  kinfer::StatusOr<Trace> trace = LoadTrace(trace_path);
  if (!trace.ok()) return fail(trace.status());
  if (kinfer::Status st = ScaleTraceTime(*trace, time_scale); !st.ok()) return fail(st);
  if (kinfer::Status st = ScaleTraceLengths(*trace, length_scale); !st.ok()) return fail(st);
  kinfer::StatusOr<ServiceModel> model = ServiceModel::LoadPerfCsv(perf_path, spec);
  if (!model.ok()) return fail(model.status());

  kinfer::StatusOr<ExperimentResult> result = RunExperiment(*trace, *model, opt);
  if (!result.ok()) return fail(result.status());
  nlohmann::json doc = ExperimentJson(*trace, *model, opt, *result);
  doc["time_scale"] = time_scale;
  doc["length_scale"] = length_scale;

  std::printf("trace %s: %zu requests over %.0f s; %s; SLO TTFT %.3g s; cold start %.0f s\n",
              trace->source.c_str(), trace->requests.size(), trace->span_s(),
              model->description().c_str(), opt.sim.slo_ttft_s, opt.sim.cold_start_s);
  std::printf(
      "replica capacity: %.3f req/s (+-%.3f, %d draws) within the SLO at %.2f concurrent; "
      "kinfer target %.3f req/s per replica; oracle peak %d replicas (window %d)\n",
      result->calibration.max_rps, result->calibration.max_rps_stderr, result->calibration.streams,
      result->calibration.concurrency, KinferTargetRps(opt, *result), result->oracle.peak_count,
      result->oracle.peak_window);
  PrintTable(*result);

  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << doc.dump(2) << "\n";
    if (!out) return fail(kinfer::Internal("cannot write '" + json_path + "'"));
  }
  if (!timeline_path.empty()) {
    std::ofstream out(timeline_path);
    WriteTimelineCsv(out, result->results);
    if (!out) return fail(kinfer::Internal("cannot write '" + timeline_path + "'"));
  }
  if (!kinfer_log_path.empty()) {
    std::ofstream out(kinfer_log_path);
    out << "t_s,current,ready,starting,desired,reason,panic,observed_load,p99_ttft_panic_s,"
           "p99_ttft_stable_s,load_stable,load_panic,request_rate_stable,desired_by_load,"
           "desired_by_rate,desired_by_slo,ttft_observations_panic,cold_start_hold\n";
    char buf[384];
    for (const KinferDecisionRow& d : result->kinfer_decisions) {
      std::snprintf(
          buf, sizeof buf,
          "%.0f,%d,%d,%d,%d,%s,%d,%.1f,%.3f,%.3f,%.2f,%.2f,%.3f,%d,%d,%d,%llu,%d\n", d.t_s,
          d.current, d.ready, d.starting, d.desired, d.reason.c_str(), d.panic ? 1 : 0,
          d.observed_load, d.p99_ttft_panic_s, d.p99_ttft_stable_s, d.load_stable, d.load_panic,
          d.request_rate_stable, d.desired_by_load, d.desired_by_rate, d.desired_by_slo,
          static_cast<unsigned long long>(d.ttft_observations_panic), d.cold_start_hold ? 1 : 0);
      out << buf;
    }
    if (!out) return fail(kinfer::Internal("cannot write '" + kinfer_log_path + "'"));
  }
  if (!misses_path.empty()) {
    std::ofstream out(misses_path);
    WriteMissesCsv(out, result->results);
    if (!out) return fail(kinfer::Internal("cannot write '" + misses_path + "'"));
  }
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  std::fprintf(stderr, "kinfer-sim: done in %.2f s\n", wall);
  return 0;
}
