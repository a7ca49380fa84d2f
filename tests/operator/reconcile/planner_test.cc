// Plan(): every sample plans its objects and reaches a steady state with zero writes, even after
// the API server's defaulting and other controllers' additions; a spec change rolls the Deployment
// with a new template hash, a status change does nothing; fields owned by others stay; owner
// references; the replica rules; the PDB rule; conflicts.
#include "operator/reconcile/planner.h"
#include "operator/reconcile/reconcile_step.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <string>

#include "operator/reconcile/desired_objects.h"
#include "operator/reconcile/object_diff.h"
#include "tests/operator/api/yaml_to_json.h"
#include "tests/operator/reconcile/fake_cluster.h"

namespace kinfer::reconcile {
namespace {

using nlohmann::json;
using testing::FakeCluster;

const std::string kRoot = KINFER_SOURCE_DIR;

json SampleObject(const std::string& name) {
  json object = testing::LoadYamlFile(kRoot + "/crds/samples/" + name);
  object["metadata"]["uid"] = "isvc-uid-1";
  object["metadata"]["generation"] = 1;
  if (!object["metadata"].contains("namespace")) object["metadata"]["namespace"] = "default";
  return object;
}

api::InferenceService Parse(const json& object) {
  auto isvc = api::ParseInferenceService(object);
  EXPECT_TRUE(isvc.ok()) << isvc.status().ToString();
  return isvc.ok() ? *isvc : api::InferenceService{};
}

std::string Actions(const ReconcilePlan& plan) {
  std::string s;
  for (const ObjectPlan* p : plan.Objects()) {
    s += p->kind + ":" + std::string(ActionName(p->action)) + "(" + p->reason + ") ";
  }
  return s;
}

// Plans and applies until nothing is left to do; returns the last plan (all kNone).
ReconcilePlan Converge(const api::InferenceService& isvc, FakeCluster& cluster,
                       const PlannerOptions& options = {}) {
  for (int round = 0; round < 5; ++round) {
    ReconcilePlan plan = Plan(isvc, cluster.observed, options);
    if (plan.Writes() == 0) return plan;
    cluster.Apply(plan);
  }
  ReconcilePlan plan = Plan(isvc, cluster.observed, options);
  ADD_FAILURE() << "no steady state: " << Actions(plan);
  return plan;
}

class PlannerTest : public ::testing::Test {
 protected:
  PlannerOptions options_;
};

TEST_F(PlannerTest, EverySampleCreatesItsObjectsThenMakesZeroWrites) {
  for (const auto& entry : std::filesystem::directory_iterator(kRoot + "/crds/samples")) {
    if (entry.path().extension() != ".yaml") continue;
    SCOPED_TRACE(entry.path().string());
    json object = testing::LoadYamlFile(entry.path());
    object["metadata"]["uid"] = "u1";
    const api::InferenceService isvc = Parse(object);
    FakeCluster cluster;
    const ReconcilePlan first = Plan(isvc, cluster.observed, options_);
    EXPECT_EQ(first.config_map.action, Action::kCreate);
    EXPECT_EQ(first.service.action, Action::kCreate);
    EXPECT_EQ(first.deployment.action, Action::kCreate);
    EXPECT_EQ(first.pdb.action,
              WantsPodDisruptionBudget(isvc.spec) ? Action::kCreate : Action::kNone);
    EXPECT_TRUE(first.conflicts.empty());
    cluster.Apply(first);
    // Applying what was created (with the API server's defaults) and planning again: no writes.
    const ReconcilePlan second = Plan(isvc, cluster.observed, options_);
    EXPECT_EQ(second.Writes(), 0) << Actions(second);
    for (const ObjectPlan* p : second.Objects()) EXPECT_EQ(p->action, Action::kNone) << p->kind;
    EXPECT_EQ(second.template_hash, first.template_hash);
  }
}

TEST_F(PlannerTest, SamePlanForSameInputs) {
  const api::InferenceService isvc = Parse(SampleObject("full.yaml"));
  const ReconcilePlan a = Plan(isvc, {}, options_), b = Plan(isvc, {}, options_);
  EXPECT_EQ(a.deployment.desired, b.deployment.desired);
  EXPECT_EQ(a.template_hash, b.template_hash);
  EXPECT_EQ(a.template_hash.size(), 16u);
}

TEST_F(PlannerTest, SteadyStateIgnoresWhatOthersAdd) {
  const api::InferenceService isvc = Parse(SampleObject("full.yaml"));
  FakeCluster cluster;
  Converge(isvc, cluster, options_);
  json& d = *cluster.observed.deployment;
  d["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = "3";
  d["metadata"]["labels"]["team"] = "search";
  d["metadata"]["ownerReferences"].push_back(
      {{"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"name", "audit"}, {"uid", "other"}});
  d["spec"]["template"]["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"] =
      "2025-01-02T00:00:00Z";
  d["spec"]["template"]["spec"]["containers"][0]["env"] = {{{"name", "INJECTED"}, {"value", "1"}}};
  (*cluster.observed.service)["metadata"]["annotations"] = {{"cloud.example.com/lb", "internal"}};
  (*cluster.observed.config_map)["data"]["notes.txt"] = "kept";
  const ReconcilePlan plan = Plan(isvc, cluster.observed, options_);
  EXPECT_EQ(plan.Writes(), 0) << Actions(plan);
}

TEST_F(PlannerTest, NormalizedQuantitiesAreNotADifference) {
  json object = SampleObject("manual-replicas.yaml");
  object["spec"]["resources"]["cpu"] = "0.5";
  object["spec"]["resources"]["memory"] = "1024Mi";
  const api::InferenceService isvc = Parse(object);
  FakeCluster cluster;
  cluster.Apply(Plan(isvc, cluster.observed, options_));
  EXPECT_EQ(At(*cluster.observed.deployment,
               {"spec", "template", "spec", "containers"})[0]["resources"]["limits"]["cpu"],
            "500m");
  EXPECT_EQ(Plan(isvc, cluster.observed, options_).Writes(), 0);
}

TEST_F(PlannerTest, SpecChangeRollsTheDeploymentWithANewTemplateHash) {
  json object = SampleObject("full.yaml");
  FakeCluster cluster;
  const ReconcilePlan before = Converge(Parse(object), cluster, options_);
  object["spec"]["runtime"]["image"] = "registry.example.com/kinfer/kinfer-runtime:0.2.0";
  object["metadata"]["generation"] = 2;
  const ReconcilePlan plan = Plan(Parse(object), cluster.observed, options_);
  EXPECT_NE(plan.template_hash, before.template_hash);
  ASSERT_EQ(plan.deployment.action, Action::kUpdate) << Actions(plan);
  EXPECT_EQ(At(plan.deployment.patch,
               {"spec", "template", "metadata", "annotations", kTemplateHashAnnotation}),
            plan.template_hash);
  EXPECT_EQ(At(plan.deployment.patch, {"spec", "template", "spec", "containers"})[0]["image"],
            "registry.example.com/kinfer/kinfer-runtime:0.2.0");
  // Only what the operator owns and what changed: no replicas, no strategy, no metadata.
  EXPECT_TRUE(At(plan.deployment.patch, {"spec", "replicas"}).is_null());
  EXPECT_TRUE(At(plan.deployment.patch, {"metadata"}).is_null());
  EXPECT_EQ(plan.config_map.action, Action::kNone);
  EXPECT_EQ(plan.service.action, Action::kNone);
  cluster.Apply(plan);
  EXPECT_EQ(Plan(Parse(object), cluster.observed, options_).Writes(), 0);
}

TEST_F(PlannerTest, SidecarPolicyChangeUpdatesTheConfigAndRollsThePods) {
  json object = SampleObject("minimal.yaml");
  FakeCluster cluster;
  const ReconcilePlan before = Converge(Parse(object), cluster, options_);
  object["spec"]["sidecar"] = {{"admission", {{"maxConcurrency", 32}}}};
  const ReconcilePlan plan = Plan(Parse(object), cluster.observed, options_);
  ASSERT_EQ(plan.config_map.action, Action::kUpdate);
  EXPECT_NE(At(plan.config_map.patch, {"data", kSidecarConfigKey})
                .get<std::string>()
                .find("max_concurrency: 32"),
            std::string::npos);
  ASSERT_EQ(plan.deployment.action, Action::kUpdate);
  EXPECT_NE(plan.template_hash, before.template_hash);
  // The pod spec is unchanged: the patch is the hash annotation, which rolls the pods so they
  // read the new file.
  EXPECT_TRUE(At(plan.deployment.patch, {"spec", "template", "spec"}).is_null());
  cluster.Apply(plan);
  EXPECT_EQ(Plan(Parse(object), cluster.observed, options_).Writes(), 0);
}

TEST_F(PlannerTest, StatusOnlyChangeDoesNothing) {
  json object = SampleObject("full.yaml");
  FakeCluster cluster;
  const ReconcilePlan before = Converge(Parse(object), cluster, options_);
  object["status"] = {{"observedQueueDepth", 42.0},
                      {"observedP99TtftSeconds", 0.9},
                      {"conditions",
                       {{{"type", "Ready"},
                         {"status", "True"},
                         {"reason", "MinimumReplicasAvailable"},
                         {"message", ""},
                         {"lastTransitionTime", "2025-01-01T00:00:00Z"}}}}};
  const ReconcilePlan plan = Plan(Parse(object), cluster.observed, options_);
  EXPECT_EQ(plan.Writes(), 0) << Actions(plan);
  EXPECT_EQ(plan.template_hash, before.template_hash);
}

TEST_F(PlannerTest, ScalingBoundsDoNotRollPods) {
  json object = SampleObject("full.yaml");
  FakeCluster cluster;
  const ReconcilePlan before = Converge(Parse(object), cluster, options_);
  object["spec"]["autoscaling"]["maxReplicas"] = 30;
  object["spec"]["autoscaling"]["targetQueueDepthPerReplica"] = 4;
  const ReconcilePlan plan = Plan(Parse(object), cluster.observed, options_);
  EXPECT_EQ(plan.template_hash, before.template_hash);
  EXPECT_EQ(plan.Writes(), 0) << Actions(plan);
}

TEST_F(PlannerTest, PatchesKeepWhatOthersAdded) {
  json object = SampleObject("full.yaml");
  FakeCluster cluster;
  Converge(Parse(object), cluster, options_);
  json& d = *cluster.observed.deployment;
  d["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = "1";
  d["spec"]["template"]["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"] = "t";
  d["spec"]["template"]["metadata"]["labels"]["sidecar.istio.io/inject"] = "false";
  object["spec"]["nodeSelector"] = {{"pool", "l4"}};
  cluster.Apply(Plan(Parse(object), cluster.observed, options_));
  const json& after = *cluster.observed.deployment;
  EXPECT_EQ(At(after, {"metadata", "annotations", "deployment.kubernetes.io/revision"}), "1");
  EXPECT_EQ(At(after, {"spec", "template", "metadata", "annotations",
                       "kubectl.kubernetes.io/restartedAt"}),
            "t");
  EXPECT_EQ(At(after, {"spec", "template", "metadata", "labels", "sidecar.istio.io/inject"}),
            "false");
  EXPECT_EQ(At(after, {"spec", "template", "spec", "nodeSelector"}), (json{{"pool", "l4"}}));
  EXPECT_EQ(At(after, {"spec", "template", "spec", "dnsPolicy"}),
            "ClusterFirst");  // server default kept
}

TEST_F(PlannerTest, RemovedPassthroughFieldsAreRemoved) {
  json object = SampleObject("full.yaml");
  FakeCluster cluster;
  Converge(Parse(object), cluster, options_);
  object["spec"].erase("nodeSelector");
  object["spec"].erase("tolerations");
  object["spec"]["affinity"] = {{"nodeAffinity",
                                 {{"requiredDuringSchedulingIgnoredDuringExecution",
                                   {{"nodeSelectorTerms", json::array()}}}}}};
  Converge(Parse(object), cluster, options_);
  const json& pod = At(*cluster.observed.deployment, {"spec", "template", "spec"});
  EXPECT_FALSE(pod.contains("nodeSelector"));
  EXPECT_FALSE(pod.contains("tolerations"));
  EXPECT_FALSE(pod["affinity"].contains("podAntiAffinity")) << pod["affinity"].dump();
  EXPECT_TRUE(pod["affinity"].contains("nodeAffinity"));
}

TEST_F(PlannerTest, TemplateDriftIsRepaired) {
  const api::InferenceService isvc = Parse(SampleObject("minimal.yaml"));
  FakeCluster cluster;
  Converge(isvc, cluster, options_);
  (*cluster.observed.deployment)["spec"]["template"]["spec"]["containers"][0]["image"] =
      "evil:latest";
  const ReconcilePlan plan = Plan(isvc, cluster.observed, options_);
  ASSERT_EQ(plan.deployment.action, Action::kUpdate);
  EXPECT_EQ(plan.deployment.reason, "template drift");
  cluster.Apply(plan);
  EXPECT_EQ(
      At(*cluster.observed.deployment, {"spec", "template", "spec", "containers"})[0]["image"],
      options_.default_runtime_image);
}

TEST_F(PlannerTest, EveryObjectHasTheControllerOwnerReference) {
  const api::InferenceService isvc = Parse(SampleObject("full.yaml"));
  const ReconcilePlan plan = Plan(isvc, {}, options_);
  for (const ObjectPlan* p : plan.Objects()) {
    const json& refs = At(p->desired, {"metadata", "ownerReferences"});
    ASSERT_EQ(refs.size(), 1u) << p->kind;
    EXPECT_EQ(refs[0]["apiVersion"], "serving.kinfer.dev/v1alpha1");
    EXPECT_EQ(refs[0]["kind"], "InferenceService");
    EXPECT_EQ(refs[0]["name"], "gemma3-chat");
    EXPECT_EQ(refs[0]["uid"], "isvc-uid-1");
    EXPECT_EQ(refs[0]["controller"], true);
    EXPECT_EQ(refs[0]["blockOwnerDeletion"], true);
    EXPECT_EQ(At(p->desired, {"metadata", "namespace"}), "llm");
    EXPECT_EQ(At(p->desired, {"metadata", "labels", api::kInferenceServiceLabel}), "gemma3-chat");
  }
}

TEST_F(PlannerTest, AdoptsAnOrphanAndLeavesOthersObjectsAlone) {
  const api::InferenceService isvc = Parse(SampleObject("minimal.yaml"));
  FakeCluster cluster;
  Converge(isvc, cluster, options_);
  json& svc = *cluster.observed.service;
  svc["metadata"]["ownerReferences"] = {
      {{"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"name", "n"}, {"uid", "x"}}};
  ReconcilePlan plan = Plan(isvc, cluster.observed, options_);
  ASSERT_EQ(plan.service.action, Action::kUpdate);
  const json& refs = At(plan.service.patch, {"metadata", "ownerReferences"});
  ASSERT_EQ(refs.size(), 2u);  // the other reference is kept
  EXPECT_EQ(refs[1]["uid"], "isvc-uid-1");

  svc["metadata"]["ownerReferences"] = {{{"apiVersion", "apps/v1"},
                                         {"kind", "Deployment"},
                                         {"name", "other"},
                                         {"uid", "y"},
                                         {"controller", true}}};
  svc["spec"]["ports"][0]["port"] = 9999;
  plan = Plan(isvc, cluster.observed, options_);
  EXPECT_EQ(plan.service.action, Action::kNone);
  ASSERT_EQ(plan.conflicts.size(), 1u);
  EXPECT_NE(plan.conflicts[0].find("Service default/smollm2"), std::string::npos)
      << plan.conflicts[0];
}

TEST_F(PlannerTest, ManualReplicasFollowSpecAndLeaveOthersScaleAlone) {
  json object = SampleObject("manual-replicas.yaml");
  FakeCluster cluster;
  ReconcilePlan plan = Converge(Parse(object), cluster, options_);
  EXPECT_EQ(plan.desired_replicas, 2);
  EXPECT_EQ(At(*cluster.observed.deployment, {"spec", "replicas"}), 2);
  // An HPA (or kubectl scale deployment) sizes the Deployment: kept.
  (*cluster.observed.deployment)["spec"]["replicas"] = 5;
  EXPECT_EQ(Plan(Parse(object), cluster.observed, options_).Writes(), 0);
  // spec.replicas changes (kubectl scale kisvc, /scale): written.
  object["spec"]["replicas"] = 3;
  plan = Plan(Parse(object), cluster.observed, options_);
  ASSERT_EQ(plan.deployment.action, Action::kUpdate);
  EXPECT_EQ(At(plan.deployment.patch, {"spec", "replicas"}), 3);
  EXPECT_EQ(At(plan.deployment.patch, {"metadata", "annotations", kReplicasAnnotation}), "3");
  EXPECT_TRUE(At(plan.deployment.patch, {"spec", "template"}).is_null());
  cluster.Apply(plan);
  EXPECT_EQ(Plan(Parse(object), cluster.observed, options_).Writes(), 0);
}

TEST_F(PlannerTest, AutoscaledReplicasAreTheDecisionClamped) {
  json object = SampleObject("full.yaml");  // min 2, max 20
  const api::InferenceService isvc = Parse(object);
  Observed observed;
  EXPECT_EQ(DesiredReplicas(isvc, observed), 2);  // nothing yet: minReplicas
  observed.autoscaler_desired_replicas = 7;
  EXPECT_EQ(DesiredReplicas(isvc, observed), 7);
  observed.autoscaler_desired_replicas = 50;
  EXPECT_EQ(DesiredReplicas(isvc, observed), 20);
  observed.autoscaler_desired_replicas = 0;
  EXPECT_EQ(DesiredReplicas(isvc, observed), 2);
  // After an operator restart (no decision yet) the count does not drop to minReplicas.
  observed.autoscaler_desired_replicas.reset();
  observed.deployment = json{{"spec", {{"replicas", 6}}}};
  EXPECT_EQ(DesiredReplicas(isvc, observed), 6);
  object["status"] = {{"desiredReplicas", 9}};
  EXPECT_EQ(DesiredReplicas(Parse(object), observed), 9);
}

TEST_F(PlannerTest, AutoscaledReplicasAreEnforced) {
  const api::InferenceService isvc = Parse(SampleObject("full.yaml"));
  FakeCluster cluster;
  cluster.observed.autoscaler_desired_replicas = 4;
  Converge(isvc, cluster, options_);
  EXPECT_EQ(At(*cluster.observed.deployment, {"spec", "replicas"}), 4);
  (*cluster.observed.deployment)["spec"]["replicas"] = 9;  // someone else scaled it
  const ReconcilePlan plan = Plan(isvc, cluster.observed, options_);
  ASSERT_EQ(plan.deployment.action, Action::kUpdate);
  EXPECT_EQ(At(plan.deployment.patch, {"spec", "replicas"}), 4);
  EXPECT_EQ(plan.deployment.reason, "replicas 9 -> 4");
  cluster.observed.autoscaler_desired_replicas = 12;
  cluster.Apply(Plan(isvc, cluster.observed, options_));
  EXPECT_EQ(At(*cluster.observed.deployment, {"spec", "replicas"}), 12);
}

// A file:// model mounts a node directory: refused unless the operator names a directory above
// it (--allow-host-path-models), for the model, the fallback and the draft alike.
TEST_F(PlannerTest, HostPathModelsOnlyBelowTheAllowedDirectories) {
  json object = SampleObject("minimal.yaml");
  object["spec"]["model"]["uri"] = "file:///models/m.gguf";
  const api::InferenceService isvc = Parse(object);
  PlannerOptions none;
  Status st = CheckSpecPolicy(isvc, none);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("spec.model.uri"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("--allow-host-path-models"), std::string::npos) << st.ToString();
  PlannerOptions models;
  models.allowed_host_paths = {"/models/"};
  EXPECT_TRUE(CheckSpecPolicy(isvc, models).ok());
  PlannerOptions other;
  other.allowed_host_paths = {"/mod", "/data"};  // a name's prefix is no directory above it
  EXPECT_FALSE(CheckSpecPolicy(isvc, other).ok());
  json fallback = SampleObject("minimal.yaml");
  fallback["spec"]["fallbackModel"] = {{"name", "small"}, {"uri", "file:///var/lib/kubelet/x.gguf"}};
  st = CheckSpecPolicy(Parse(fallback), models);
  EXPECT_NE(st.message().find("spec.fallbackModel.uri"), std::string::npos) << st.ToString();
  // Through ReconcileStep it is an InvalidSpec condition and nothing is created.
  const ReconcileResult r = ReconcileStep(object, Observed{}, none, std::nullopt, "2025-01-01T00:00:00Z");
  EXPECT_FALSE(r.spec_error.ok());
  EXPECT_EQ(r.plan.Writes(), 0);
}

TEST_F(PlannerTest, BudgetOnlyWhileMoreThanOnePodMayRun) {
  json object = SampleObject("manual-replicas.yaml");
  FakeCluster cluster;
  Converge(Parse(object), cluster, options_);
  ASSERT_TRUE(cluster.observed.pdb);
  EXPECT_EQ(At(*cluster.observed.pdb, {"spec", "maxUnavailable"}), 1);
  object["spec"]["replicas"] = 1;
  ReconcilePlan plan = Plan(Parse(object), cluster.observed, options_);
  EXPECT_EQ(plan.pdb.action, Action::kDelete);
  // The delete names the uid it saw (a precondition: a budget made anew since is not deleted).
  (*cluster.observed.pdb)["metadata"]["uid"] = "pdb-uid-1";
  EXPECT_EQ(Plan(Parse(object), cluster.observed, options_).pdb.uid, "pdb-uid-1");
  cluster.Apply(plan);
  EXPECT_FALSE(cluster.observed.pdb);
  EXPECT_EQ(Plan(Parse(object), cluster.observed, options_).Writes(), 0);
  // A budget of that name that is not ours is left alone.
  cluster.observed.pdb = json{{"apiVersion", "policy/v1"},
                              {"kind", "PodDisruptionBudget"},
                              {"metadata", {{"name", "smollm2-manual"}}}};
  EXPECT_EQ(Plan(Parse(object), cluster.observed, options_).pdb.action, Action::kNone);
  // Autoscaled with maxReplicas > 1: a budget, whatever the current count.
  EXPECT_TRUE(WantsPodDisruptionBudget(Parse(SampleObject("minimal.yaml")).spec));
}

TEST_F(PlannerTest, ABudgetSomeoneEditedIsRepaired) {
  const api::InferenceService isvc = Parse(SampleObject("minimal.yaml"));
  FakeCluster cluster;
  Converge(isvc, cluster, options_);
  json& pdb = *cluster.observed.pdb;
  pdb["spec"].erase("maxUnavailable");
  pdb["spec"]["minAvailable"] = 1;
  const ReconcilePlan plan = Plan(isvc, cluster.observed, options_);
  ASSERT_EQ(plan.pdb.action, Action::kUpdate);
  EXPECT_EQ(plan.pdb.patch, (json{{"spec", {{"maxUnavailable", 1}, {"minAvailable", nullptr}}}}));
}

TEST_F(PlannerTest, AnImmutableSelectorThatDiffersIsAConflict) {
  const api::InferenceService isvc = Parse(SampleObject("minimal.yaml"));
  FakeCluster cluster;
  Converge(isvc, cluster, options_);
  (*cluster.observed.deployment)["spec"]["selector"]["matchLabels"]["app"] = "old";
  const ReconcilePlan plan = Plan(isvc, cluster.observed, options_);
  EXPECT_EQ(plan.deployment.action, Action::kNone);
  ASSERT_EQ(plan.conflicts.size(), 1u);
  EXPECT_NE(plan.conflicts[0].find("immutable"), std::string::npos);
}

TEST_F(PlannerTest, NothingWhileDeletingOrWhileAChildIsGoing) {
  json object = SampleObject("minimal.yaml");
  object["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z";
  EXPECT_EQ(Plan(Parse(object), {}, options_).Writes(), 0);
  object["metadata"].erase("deletionTimestamp");
  FakeCluster cluster;
  Converge(Parse(object), cluster, options_);
  (*cluster.observed.deployment)["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z";
  (*cluster.observed.deployment)["spec"]["replicas"] = 7;
  EXPECT_EQ(Plan(Parse(object), cluster.observed, options_).deployment.action, Action::kNone);
}

}  // namespace
}  // namespace kinfer::reconcile
