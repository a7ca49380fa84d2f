// End-to-end tests of kinfer-sim's experiment on the CI fixture (the first 10 minutes of the
// Azure conversation trace, H100 llama2-70b TP4): every policy runs quickly, the bounds hold, the
// output is identical under a seed, and the kinfer policy drives the real decision core.
#include "bench/sim/experiment.h"

#include <algorithm>
#include <chrono>
#include <sstream>

#include <gtest/gtest.h>

#include "bench/sim/kinfer_policy.h"

namespace kinfer::sim {
namespace {

const std::string kFixtures = std::string(KINFER_SOURCE_DIR) + "/tests/fixtures/traces/";

class ExperimentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t = LoadTrace(kFixtures + "azure_conv_first10min.csv");
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    trace_ = std::move(t).value();
    auto m = ServiceModel::LoadPerfCsv(kFixtures + "perf_model_llama2-70b_h100.csv", {});
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_.emplace(std::move(m).value());
    options_.sim.slo_ttft_s = 2;
    options_.sim.cold_start_s = 60;
    options_.sim.timeline_period_s = 10;
    options_.calibration_requests = 4000;  // the full calibration is 40 x 20000: slower, same code
    options_.calibration_streams = 2;
  }

  const PolicyResult& Get(const ExperimentResult& r, const std::string& name) {
    for (const PolicyResult& p : r.results) {
      if (p.summary.policy == name) return p;
    }
    ADD_FAILURE() << "no result for " << name;
    return r.results.front();
  }

  Trace trace_;
  std::optional<ServiceModel> model_;
  ExperimentOptions options_;
};

TEST_F(ExperimentTest, RunsEveryPolicyOnTheFixtureInAFewSeconds) {
  const auto start = std::chrono::steady_clock::now();
  auto r = RunExperiment(trace_, *model_, options_);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_LT(seconds, 10);
  ASSERT_EQ(r->results.size(), 5u);
  for (const PolicyResult& p : r->results) {
    EXPECT_EQ(p.summary.requests, trace_.requests.size()) << p.summary.policy;
    EXPECT_EQ(p.summary.unserved, 0u) << p.summary.policy;
    EXPECT_GT(p.summary.replica_hours, 0) << p.summary.policy;
    EXPECT_FALSE(p.timeline.empty()) << p.summary.policy;
  }
  const PolicyResult& oracle = Get(*r, "oracle");
  const PolicyResult& stat = Get(*r, "static");
  EXPECT_DOUBLE_EQ(oracle.replica_hours_vs_oracle, 1.0);
  // Static provisions every window for the hardest one: never worse than the oracle, never
  // cheaper.
  EXPECT_GE(stat.summary.slo_attainment, oracle.summary.slo_attainment);
  EXPECT_GE(stat.summary.replica_hours, oracle.summary.replica_hours);
  EXPECT_EQ(stat.summary.scale_events, 0);
  EXPECT_GE(oracle.summary.slo_attainment, 0.98);
  // The calibration found a replica that serves this mix at some rate.
  EXPECT_GT(r->calibration.max_rps, 0.5);
  EXPECT_GT(r->capacity, 1);
}

TEST_F(ExperimentTest, SameSeedGivesTheSameJson) {
  options_.sim.seed = 7;
  auto a = RunExperiment(trace_, *model_, options_);
  auto b = RunExperiment(trace_, *model_, options_);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(ExperimentJson(trace_, *model_, options_, *a).dump(),
            ExperimentJson(trace_, *model_, options_, *b).dump());
  std::ostringstream ta, tb;
  WriteTimelineCsv(ta, a->results);
  WriteTimelineCsv(tb, b->results);
  EXPECT_EQ(ta.str(), tb.str());
  // Threads change nothing either.
  options_.threads = 1;
  auto c = RunExperiment(trace_, *model_, options_);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(ExperimentJson(trace_, *model_, options_, *a).dump(),
            ExperimentJson(trace_, *model_, options_, *c).dump());
}

// The calibration's draws run on several threads and are summed in draw order: the same figures
// on one thread or three. One draw has no spread to report; several do, and their mean moves
// less from seed to seed than one draw does.
TEST_F(ExperimentTest, CalibrationIsTheSameOnAnyThreadCountAndReportsItsSpread) {
  const int requests = 3000;
  const ReplicaCapacity one_thread =
      CalibrateReplica(trace_, *model_, options_.sim, options_.plan, requests, 6, 1);
  const ReplicaCapacity three_threads =
      CalibrateReplica(trace_, *model_, options_.sim, options_.plan, requests, 6, 3);
  EXPECT_EQ(one_thread.max_rps, three_threads.max_rps);
  EXPECT_EQ(one_thread.concurrency, three_threads.concurrency);
  EXPECT_EQ(one_thread.max_rps_stderr, three_threads.max_rps_stderr);
  EXPECT_EQ(one_thread.streams, 6);
  EXPECT_GT(one_thread.max_rps_stderr, 0);
  EXPECT_LT(one_thread.max_rps_stderr, 0.2 * one_thread.max_rps);

  const ReplicaCapacity single =
      CalibrateReplica(trace_, *model_, options_.sim, options_.plan, requests, 1, 2);
  EXPECT_EQ(single.streams, 1);
  EXPECT_EQ(single.max_rps_stderr, 0);
  EXPECT_GT(single.max_rps, 0.5);

  // Over seeds, single draws scatter more than means of 6 draws.
  auto spread = [&](int draws) {
    double lo = 1e9, hi = 0;
    for (uint64_t seed = 1; seed <= 4; ++seed) {
      SimConfig c = options_.sim;
      c.seed = seed;
      const double r =
          CalibrateReplica(trace_, *model_, c, options_.plan, requests, draws, 2).max_rps;
      lo = std::min(lo, r);
      hi = std::max(hi, r);
    }
    return hi - lo;
  };
  EXPECT_LT(spread(6), spread(1));
}

// A target rate given as such (a CR's targetRequestsPerSecondPerReplica) replaces the fraction of
// the calibrated rate, reaches the core, and is reported; a negative one is refused.
TEST_F(ExperimentTest, AGivenTargetRateReplacesTheCalibratedFraction) {
  options_.policies = {"kinfer"};
  options_.record_kinfer_decisions = true;
  options_.kinfer_target_rps = 0.25;  // far below what a replica serves: the rate term asks more
  auto low = RunExperiment(trace_, *model_, options_);
  ASSERT_TRUE(low.ok()) << low.status().ToString();
  EXPECT_DOUBLE_EQ(KinferTargetRps(options_, *low), 0.25);
  const nlohmann::json j = ExperimentJson(trace_, *model_, options_, *low);
  EXPECT_DOUBLE_EQ(j["targets"]["kinfer_target_requests_per_second_per_replica"].get<double>(),
                   0.25);
  EXPECT_GT(j["calibration"]["max_rps_stderr"].get<double>(), 0);
  EXPECT_EQ(j["calibration"]["draws"], 2);
  int by_rate = 0;
  for (const KinferDecisionRow& d : low->kinfer_decisions) {
    by_rate = std::max(by_rate, d.desired_by_rate);
    // desired_by_rate = ceil(rate / 0.25)
    if (d.request_rate_stable > 0) {
      EXPECT_GE(d.desired_by_rate * 0.25, d.request_rate_stable - 1e-9);
    }
  }
  EXPECT_GT(by_rate, 4);

  options_.kinfer_target_rps.reset();
  auto calibrated = RunExperiment(trace_, *model_, options_);
  ASSERT_TRUE(calibrated.ok());
  EXPECT_DOUBLE_EQ(KinferTargetRps(options_, *calibrated),
                   options_.kinfer_rate_fraction * calibrated->calibration.max_rps);
  EXPECT_LT(Get(*calibrated, "kinfer").summary.replica_hours,
            Get(*low, "kinfer").summary.replica_hours);

  options_.kinfer_target_rps = -1;
  EXPECT_EQ(RunExperiment(trace_, *model_, options_).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(ExperimentTest, JsonHasTheRequiredFieldsPerPolicy) {
  options_.policies = {"static", "oracle"};
  auto r = RunExperiment(trace_, *model_, options_);
  ASSERT_TRUE(r.ok());
  const nlohmann::json j = ExperimentJson(trace_, *model_, options_, *r);
  ASSERT_EQ(j["policies"].size(), 2u);
  for (const auto& p : j["policies"]) {
    for (const char* key : {"policy", "slo_attainment", "p99_ttft_s", "replica_hours",
                            "scale_events", "shed_requests", "replica_hours_vs_oracle"}) {
      EXPECT_TRUE(p.contains(key)) << key;
    }
  }
  EXPECT_EQ(j["policies"][0]["policy"], "static");
}

TEST_F(ExperimentTest, BadSettingsAreInvalidArgument) {
  options_.policies = {"kinfer", "vpa"};
  EXPECT_EQ(RunExperiment(trace_, *model_, options_).status().code(), StatusCode::kInvalidArgument);
  options_.policies = {"static"};
  options_.sim.min_replicas = 3;
  options_.sim.max_replicas = 2;
  EXPECT_EQ(RunExperiment(trace_, *model_, options_).status().code(), StatusCode::kInvalidArgument);
  options_.sim.min_replicas = 1;
  options_.kinfer.tolerance = 2;  // the core rejects it
  options_.policies = {"kinfer"};
  EXPECT_EQ(RunExperiment(trace_, *model_, options_).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(ExperimentTest, AnSloNoReplicaCanMeetIsAClearErrorQuickly) {
  options_.sim.slo_ttft_s = 0.01;  // below the fixed prefill cost (49 ms)
  const auto start = std::chrono::steady_clock::now();
  auto r = RunExperiment(trace_, *model_, options_);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("--capacity"), std::string::npos);
}

TEST_F(ExperimentTest, MissesListEveryRequestOverTheSlo) {
  options_.policies = {"oracle", "kpa"};
  options_.sim.slo_ttft_s = 1;  // tight enough that some requests miss
  auto r = RunExperiment(trace_, *model_, options_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const PolicyResult& p : r->results) {
    const double missed = static_cast<double>(p.summary.requests) * (1 - p.summary.slo_attainment);
    EXPECT_NEAR(static_cast<double>(p.misses.size()), missed, 0.5) << p.summary.policy;
    for (const MissRecord& m : p.misses) {
      ASSERT_LT(m.request, trace_.requests.size());
      EXPECT_EQ(m.input_tokens, trace_.requests[m.request].input_tokens);
      EXPECT_NEAR(m.arrival_s, trace_.requests[m.request].arrival_s, 1e-6);
      EXPECT_TRUE(m.ttft_s > 1 || m.ttft_s < 0) << m.ttft_s;
    }
  }
  std::ostringstream csv;
  WriteMissesCsv(csv, r->results);
  EXPECT_EQ(csv.str().rfind("policy,request,arrival_s,ttft_s,", 0), 0u);
}

// kinfer-sim on kinfer-runtime's measured CPU curve: the fixture's requests cut to a sixteenth of
// their lengths (CPU-sized prompts), half the rate, a 3 s SLO and a 30 s cold start (the scenario
// of docs/benchmarks.md, there on the whole trace): every policy runs and the kinfer core scales
// on it.
TEST_F(ExperimentTest, RunsEveryPolicyOnKinferRuntimesMeasuredCurve) {
  auto m = ServiceModel::LoadPerfCsv(
      std::string(KINFER_SOURCE_DIR) + "/bench/sim/perf_kinfer_runtime_cpu.csv",
      ServiceModelSpec{"smollm2-135m-q4_1", "cpu-2t", 1});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_TRUE(ScaleTraceLengths(trace_, 1.0 / 16).ok());
  ASSERT_TRUE(ScaleTraceTime(trace_, 2).ok());
  options_.sim.slo_ttft_s = 3;
  options_.sim.cold_start_s = 30;
  options_.sim.limits.max_running = 16;
  options_.sim.limits.max_prefill_tokens = 256;
  auto r = RunExperiment(trace_, *m, options_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(r->calibration.max_rps, 0.05);
  ASSERT_EQ(r->results.size(), 5u);
  for (const PolicyResult& p : r->results) {
    EXPECT_EQ(p.summary.requests, trace_.requests.size()) << p.summary.policy;
    EXPECT_EQ(p.summary.unserved, 0u) << p.summary.policy;
    EXPECT_GT(p.summary.slo_attainment, 0.8) << p.summary.policy;
  }
  const PolicyResult& kinfer = Get(*r, "kinfer");
  EXPECT_GT(kinfer.summary.peak_replicas, 1);  // a CPU replica cannot carry this alone
  EXPECT_GE(kinfer.summary.slo_attainment, 0.95);
}

TEST(KinferPolicyTest, AskTheCoreForMoreReplicasUnderADeepQueue) {
  autoscale::AutoscalerConfig config;
  config.max_replicas = 20;
  config.target_load_per_replica = 10;
  config.slo_ttft_p99_seconds = 2;
  auto p = KinferPolicy::Create(config, 2, 2);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const std::vector<double> edges = {0.5, 1, 2, 5};
  int desired = 2;
  for (int t = 0; t <= 10; ++t) {
    ClusterSnapshot c;
    c.now_s = t;
    c.ready = 2;
    c.requested = 2;
    c.ttft_edges = &edges;
    for (int i = 0; i < 2; ++i) {
      PodSnapshot pod;
      pod.id = i;
      pod.ready = true;
      pod.queue_depth = 40;
      pod.in_flight = 10;
      pod.ttft_counts = {0, 0, 0, 5, 5};  // half over 5 s
      c.pods.push_back(pod);
    }
    if (auto d = (*p)->Tick(c)) desired = *d;
  }
  EXPECT_GT(desired, 2);
  EXPECT_GT((*p)->Counters().size(), 0u);
}

}  // namespace
}  // namespace kinfer::sim
