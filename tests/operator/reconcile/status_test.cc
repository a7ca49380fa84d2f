// ComputeStatus / ReconcileStep: conditions in the metav1.Condition shape, lastTransitionTime kept
// while a status holds, replica counts, URL and selector, the autoscaler's observations, scale
// time and reason; a spec the operator cannot serve is a condition with a reason, never a write
// to the objects and never a status that changes on every reconcile.
#include "operator/reconcile/status.h"

#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "operator/reconcile/object_diff.h"
#include "operator/reconcile/reconcile_step.h"
#include "tests/operator/api/yaml_to_json.h"
#include "tests/operator/reconcile/fake_cluster.h"

namespace kinfer::reconcile {
namespace {

using nlohmann::json;

const std::string kRoot = KINFER_SOURCE_DIR;
constexpr char kT1[] = "2025-03-01T10:00:00Z";
constexpr char kT2[] = "2025-03-01T10:05:00Z";
constexpr char kT3[] = "2025-03-01T10:09:00Z";

json SampleObject(const std::string& name) {
  json object = testing::LoadYamlFile(kRoot + "/crds/samples/" + name);
  object["metadata"]["uid"] = "u1";
  object["metadata"]["generation"] = 4;
  return object;
}

const json& Condition(const json& status, const std::string& type) {
  for (const json& c : status["conditions"]) {
    if (c["type"] == type) return c;
  }
  static const json kNull;
  ADD_FAILURE() << "no condition " << type << " in " << status.dump();
  return kNull;
}

PodSummary Pods(int total, int ready) {
  PodSummary p;
  p.total = total;
  p.ready = ready;
  return p;
}

TEST(StatusTest, FreshObjectReportsEveryCondition) {
  const json object = SampleObject("minimal.yaml");
  Observed observed;
  observed.pods = PodSummary{};
  const ReconcileResult r = ReconcileStep(object, observed, {}, std::nullopt, kT1);
  ASSERT_TRUE(r.spec_error.ok());
  EXPECT_TRUE(r.status_changed);
  const json& s = r.status;
  EXPECT_EQ(s["observedGeneration"], 4);
  EXPECT_EQ(s["replicas"], 0);
  EXPECT_EQ(s["readyReplicas"], 0);
  EXPECT_EQ(s["desiredReplicas"], 1);
  EXPECT_EQ(s["selector"], "serving.kinfer.dev/inferenceservice=smollm2");
  EXPECT_EQ(s["url"], "http://smollm2.default.svc.cluster.local:8080");
  EXPECT_EQ(s["lastScaleTime"], kT1);
  EXPECT_EQ(s["lastScaleReason"], "min_replicas");
  ASSERT_EQ(s["conditions"].size(), 4u);
  const std::vector<std::string> order = {"Ready", "Progressing", "Degraded", "ScalingActive"};
  for (size_t i = 0; i < order.size(); ++i) {
    const json& c = s["conditions"][i];
    EXPECT_EQ(c["type"], order[i]);
    for (const char* key :
         {"status", "reason", "message", "observedGeneration", "lastTransitionTime"}) {
      EXPECT_TRUE(c.contains(key)) << order[i] << " lacks " << key;
    }
    EXPECT_EQ(c["observedGeneration"], 4);
    EXPECT_EQ(c["lastTransitionTime"], kT1);
  }
  EXPECT_EQ(Condition(s, "Ready")["status"], "False");
  EXPECT_EQ(Condition(s, "Ready")["reason"], "NoReadyReplicas");
  EXPECT_EQ(Condition(s, "Progressing")["reason"], "RolloutInProgress");
  EXPECT_EQ(Condition(s, "Degraded")["status"], "False");
  EXPECT_EQ(Condition(s, "ScalingActive")["status"], "Unknown");
}

TEST(StatusTest, SteadyStateKeepsTransitionTimesAndWritesNothing) {
  json object = SampleObject("full.yaml");
  testing::FakeCluster cluster;
  cluster.observed.pods = PodSummary{};
  ReconcileResult r = ReconcileStep(object, cluster.observed, {}, std::nullopt, kT1);
  cluster.Apply(r.plan);
  object["status"] = r.status;
  // Pods come up.
  cluster.observed.pods = Pods(2, 2);
  r = ReconcileStep(object, cluster.observed, {}, std::nullopt, kT2);
  EXPECT_EQ(r.plan.Writes(), 0);
  EXPECT_TRUE(r.status_changed);
  EXPECT_EQ(Condition(r.status, "Ready")["status"], "True");
  EXPECT_EQ(Condition(r.status, "Ready")["lastTransitionTime"], kT2);
  EXPECT_EQ(Condition(r.status, "Progressing")["status"], "False");
  EXPECT_EQ(Condition(r.status, "Progressing")["lastTransitionTime"], kT2);
  EXPECT_EQ(Condition(r.status, "Degraded")["lastTransitionTime"], kT1);  // stayed False
  object["status"] = r.status;
  // Nothing changes: the same status (no status write) and no object writes.
  r = ReconcileStep(object, cluster.observed, {}, std::nullopt, kT3);
  EXPECT_EQ(r.plan.Writes(), 0);
  EXPECT_FALSE(r.status_changed) << r.status.dump(1);
}

TEST(StatusTest, ReasonChangeWithinAStatusKeepsTheTransitionTime) {
  std::vector<api::Condition> conditions;
  SetCondition(&conditions, {"Ready", "False", "NoReadyReplicas", "0 of 2", 1, ""}, kT1);
  SetCondition(&conditions, {"Ready", "False", "MinimumReplicasUnavailable", "1 of 2", 2, ""}, kT2);
  ASSERT_EQ(conditions.size(), 1u);
  EXPECT_EQ(conditions[0].last_transition_time, kT1);
  EXPECT_EQ(conditions[0].reason, "MinimumReplicasUnavailable");
  EXPECT_EQ(conditions[0].observed_generation, 2);
  SetCondition(&conditions, {"Ready", "True", "MinimumReplicasAvailable", "2 of 2", 2, ""}, kT3);
  EXPECT_EQ(conditions[0].last_transition_time, kT3);
}

TEST(StatusTest, ReadyRules) {
  auto ready = [](const json& object, PodSummary pods) {
    Observed observed;
    observed.pods = pods;
    return Condition(ReconcileStep(object, observed, {}, std::nullopt, kT1).status, "Ready");
  };
  const json full = SampleObject("full.yaml");  // minReplicas 2
  EXPECT_EQ(ready(full, Pods(3, 1))["reason"], "MinimumReplicasUnavailable");
  EXPECT_EQ(ready(full, Pods(3, 2))["reason"], "MinimumReplicasAvailable");
  json manual = SampleObject("manual-replicas.yaml");
  manual["spec"]["replicas"] = 0;
  EXPECT_EQ(ready(manual, Pods(0, 0))["reason"], "ScaledToZero");
  EXPECT_EQ(ready(manual, Pods(0, 0))["status"], "False");
}

TEST(StatusTest, PodProblemsAreDegradedWithAReason) {
  const json object = SampleObject("full.yaml");
  Observed observed;
  PodSummary pods = Pods(2, 0);
  pods.model_checksum_mismatch = 2;
  pods.crash_looping = 1;
  pods.first_problem = "pod a: container fetch-model: ModelChecksumMismatch: ...";
  observed.pods = pods;
  const ReconcileResult r = ReconcileStep(object, observed, {}, std::nullopt, kT1);
  const json& degraded = Condition(r.status, "Degraded");
  EXPECT_EQ(degraded["status"], "True");
  EXPECT_EQ(degraded["reason"], "ModelChecksumMismatch");
  EXPECT_NE(degraded["message"].get<std::string>().find("2 pods failing"), std::string::npos);
}

// Pods the scheduler cannot place, and pods the ReplicaSet cannot create at all (a quota, a Pod
// Security rejection: no pod exists to show it), are Degraded with the cause, not "no problems
// seen" until the rollout's 30-minute progress deadline.
TEST(StatusTest, UnschedulableAndUncreatablePodsAreDegradedWithTheCause) {
  const json object = SampleObject("full.yaml");
  Observed observed;
  PodSummary pods = Pods(1, 0);
  pods.unschedulable = 1;
  pods.first_problem = "pod a: Unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu.";
  observed.pods = pods;
  ReconcileResult r = ReconcileStep(object, observed, {}, std::nullopt, kT1);
  EXPECT_EQ(Condition(r.status, "Degraded")["reason"], "PodsUnschedulable");
  EXPECT_NE(Condition(r.status, "Degraded")["message"].get<std::string>().find("nvidia.com/gpu"),
            std::string::npos);

  Observed none;
  // The Deployment as the operator made it, with the status the controller gives it.
  json deployment = ReconcileStep(object, Observed{}, {}, std::nullopt, kT1).plan.deployment.desired;
  ASSERT_TRUE(deployment.is_object());
  deployment["status"]["conditions"] = json::array(
      {{{"type", "Available"}, {"status", "False"}, {"reason", "MinimumReplicasUnavailable"}},
       {{"type", "ReplicaFailure"},
        {"status", "True"},
        {"reason", "FailedCreate"},
        {"message", "pods \"x\" is forbidden: exceeded quota: gpus"}}});
  none.deployment = deployment;
  r = ReconcileStep(object, none, {}, std::nullopt, kT1);
  const json& degraded = Condition(r.status, "Degraded");
  EXPECT_EQ(degraded["status"], "True");
  EXPECT_EQ(degraded["reason"], "PodCreationFailed");
  EXPECT_EQ(degraded["message"],
            "the Deployment cannot create pods (FailedCreate): pods \"x\" is forbidden: exceeded "
            "quota: gpus");
  // Once it can (status False), nothing is reported.
  none.deployment->at("status").at("conditions")[1]["status"] = "False";
  r = ReconcileStep(object, none, {}, std::nullopt, kT1);
  EXPECT_EQ(Condition(r.status, "Degraded")["status"], "False");
}

TEST(StatusTest, AConflictIsAReconcileError) {
  const json object = SampleObject("minimal.yaml");
  Observed observed;
  json ref = {{"kind", "Foo"}, {"name", "bar"}, {"uid", "x"}, {"controller", true}};
  json service = {{"apiVersion", "v1"}, {"kind", "Service"}};
  service["metadata"] = {{"name", "smollm2"}, {"ownerReferences", json::array({ref})}};
  observed.service = service;
  const ReconcileResult r = ReconcileStep(object, observed, {}, std::nullopt, kT1);
  EXPECT_EQ(r.plan.service.action, Action::kNone);
  EXPECT_EQ(Condition(r.status, "Degraded")["reason"], "ReconcileError");
  EXPECT_NE(Condition(r.status, "Degraded")["message"].get<std::string>().find("Foo bar"),
            std::string::npos);
}

TEST(StatusTest, AutoscalerDecisionIsReported) {
  json object = SampleObject("full.yaml");
  Observed observed;
  observed.pods = Pods(2, 2);
  autoscale::Decision d;
  d.desired = 5;
  d.reason = "scale_up_load";
  d.observed_load = 37.5;
  d.p99_ttft_stable = 0.42;
  observed.autoscaler_desired_replicas = d.desired;
  ReconcileResult r = ReconcileStep(object, observed, {}, d, kT1);
  EXPECT_EQ(r.status["desiredReplicas"], 5);
  EXPECT_EQ(r.status["observedQueueDepth"], 37.5);
  EXPECT_EQ(r.status["observedP99TtftSeconds"], 0.42);
  EXPECT_EQ(r.status["lastScaleReason"], "scale_up_load");
  EXPECT_EQ(r.status["lastScaleTime"], kT1);
  EXPECT_EQ(Condition(r.status, "ScalingActive")["reason"], "AutoscalerActive");
  EXPECT_EQ(Condition(r.status, "Progressing")["reason"],
            "RolloutInProgress");  // Deployment created
  object["status"] = r.status;
  // No tick this reconcile: the observations, the count and the condition carry over.
  observed.autoscaler_desired_replicas.reset();
  r = ReconcileStep(object, observed, {}, std::nullopt, kT2);
  EXPECT_EQ(r.status["desiredReplicas"], 5);
  EXPECT_EQ(r.status["observedQueueDepth"], 37.5);
  EXPECT_EQ(r.status["lastScaleTime"], kT1);
  EXPECT_EQ(Condition(r.status, "ScalingActive")["reason"], "AutoscalerActive");
  object["status"] = r.status;
  // Metrics missing: decisions frozen.
  d.reason = "metrics_missing";
  r = ReconcileStep(object, observed, {}, d, kT3);
  EXPECT_EQ(Condition(r.status, "ScalingActive")["status"], "False");
  EXPECT_EQ(Condition(r.status, "ScalingActive")["reason"], "MetricsMissing");
  EXPECT_EQ(Condition(r.status, "ScalingActive")["lastTransitionTime"], kT3);
}

TEST(StatusTest, ManualScaling) {
  json object = SampleObject("manual-replicas.yaml");
  testing::FakeCluster cluster;
  cluster.observed.pods = Pods(2, 2);
  ReconcileResult r = ReconcileStep(object, cluster.observed, {}, std::nullopt, kT1);
  cluster.Apply(r.plan);
  EXPECT_EQ(r.status["desiredReplicas"], 2);
  EXPECT_EQ(r.status["lastScaleReason"], "manual");
  EXPECT_EQ(Condition(r.status, "ScalingActive")["reason"], "ManualScaling");
  object["status"] = r.status;
  object["spec"]["replicas"] = 4;  // kubectl scale kisvc smollm2-manual --replicas=4
  r = ReconcileStep(object, cluster.observed, {}, std::nullopt, kT2);
  EXPECT_EQ(r.plan.deployment.action, Action::kUpdate);
  EXPECT_EQ(r.status["lastScaleTime"], kT2);
  EXPECT_EQ(Condition(r.status, "Progressing")["reason"], "ScalingUp");
}

TEST(StatusTest, ASpecTheOperatorCannotServeIsAConditionNotAWrite) {
  json object = SampleObject("minimal.yaml");
  testing::FakeCluster cluster;
  cluster.observed.pods = Pods(1, 1);
  ReconcileResult r = ReconcileStep(object, cluster.observed, {}, std::nullopt, kT1);
  cluster.Apply(r.plan);
  object["status"] = r.status;
  EXPECT_EQ(Condition(r.status, "Ready")["status"], "True");

  object["spec"]["model"]["uri"] = "s3://bucket/model.gguf";
  object["metadata"]["generation"] = 5;
  r = ReconcileStep(object, cluster.observed, {}, std::nullopt, kT2);
  EXPECT_FALSE(r.spec_error.ok());
  EXPECT_EQ(r.plan.Writes(), 0);  // the objects of the last good spec keep serving
  const json& ready = Condition(r.status, "Ready");
  EXPECT_EQ(ready["status"], "False");
  EXPECT_EQ(ready["reason"], "InvalidSpec");
  EXPECT_EQ(
      ready["message"].get<std::string>().rfind("spec.model.uri: scheme 's3' is not supported", 0),
      0u);
  EXPECT_EQ(Condition(r.status, "Degraded")["status"], "True");
  EXPECT_EQ(Condition(r.status, "Degraded")["reason"], "InvalidSpec");
  EXPECT_EQ(r.status["observedGeneration"], 5);
  EXPECT_EQ(r.status["desiredReplicas"], 1);  // what was there stays
  // Reconciled again (a resync): the same status, so no write and no hot loop.
  object["status"] = r.status;
  r = ReconcileStep(object, cluster.observed, {}, std::nullopt, kT3);
  EXPECT_FALSE(r.status_changed);
  EXPECT_EQ(r.plan.Writes(), 0);
  // Fixed: Ready and Degraded move back.
  object["spec"]["model"]["uri"] = "pvc://models/smollm2-135m-instruct-q4_1.gguf";
  object["metadata"]["generation"] = 6;
  r = ReconcileStep(object, cluster.observed, {}, std::nullopt, kT3);
  EXPECT_TRUE(r.spec_error.ok());
  EXPECT_EQ(r.plan.Writes(), 0);
  EXPECT_EQ(Condition(r.status, "Degraded")["status"], "False");
  EXPECT_EQ(Condition(r.status, "Degraded")["lastTransitionTime"], kT3);
  EXPECT_EQ(Condition(r.status, "Ready")["status"], "True");
  EXPECT_EQ(Condition(r.status, "Ready")["observedGeneration"], 6);
}

TEST(StatusTest, StatusValidatesAgainstTheCrdShape) {
  // Every condition reason matches the CRD's pattern; every field is one the schema defines.
  const json crd = testing::LoadYamlFile(kRoot + "/crds/serving.kinfer.dev_inferenceservices.yaml");
  const json& schema =
      crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"];
  Observed observed;
  observed.pods = Pods(1, 1);
  autoscale::Decision d;
  d.desired = 1;
  d.reason = "steady";
  d.p99_ttft_panic = 0.1;
  const json status = ReconcileStep(SampleObject("full.yaml"), observed, {}, d, kT1).status;
  for (const auto& [key, value] : status.items()) {
    EXPECT_TRUE(schema["properties"].contains(key)) << key;
  }
  const std::regex reason(
      schema["properties"]["conditions"]["items"]["properties"]["reason"]["pattern"]
          .get<std::string>());
  for (const json& c : status["conditions"]) {
    EXPECT_TRUE(std::regex_match(c["reason"].get<std::string>(), reason)) << c["reason"];
    for (const auto& [key, value] : c.items()) {
      EXPECT_TRUE(schema["properties"]["conditions"]["items"]["properties"].contains(key)) << key;
    }
  }
}

TEST(StatusTest, Rfc3339) {
  EXPECT_EQ(FormatRfc3339(std::chrono::system_clock::from_time_t(0)), "1970-01-01T00:00:00Z");
  EXPECT_EQ(FormatRfc3339(std::chrono::system_clock::from_time_t(1740823200)),
            "2025-03-01T10:00:00Z");
}

}  // namespace
}  // namespace kinfer::reconcile
