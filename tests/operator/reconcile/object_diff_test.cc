// DeepDerivative, ReplacePatch and the pod summary: the comparisons behind the zero-writes rule
// and the counts behind the Degraded reasons.
#include "operator/reconcile/object_diff.h"

#include <gtest/gtest.h>

#include "operator/reconcile/pod_summary.h"

namespace kinfer::reconcile {
namespace {

using nlohmann::json;

TEST(ObjectDiffTest, DerivativeIgnoresWhatTheServerAdds) {
  const json desired = {{"a", 1}, {"b", {{"c", "x"}}}, {"list", {{{"k", 1}}}}};
  json observed = desired;
  observed["extra"] = true;
  observed["b"]["defaulted"] = 3;
  observed["list"][0]["protocol"] = "TCP";
  EXPECT_TRUE(DeepDerivative(desired, observed));
  observed["b"]["c"] = "y";
  EXPECT_FALSE(DeepDerivative(desired, observed));
  EXPECT_FALSE(DeepDerivative(json{{"list", {1, 2}}}, json{{"list", {1}}}));
  EXPECT_TRUE(DeepDerivative(json{{"n", 1}}, json{{"n", 1.0}}));
}

TEST(ObjectDiffTest, OmittedZeroValuesMatch) {
  EXPECT_TRUE(DeepDerivative(json{{"readOnly", false}, {"value", ""}, {"m", json::object()}},
                             json::object()));
  EXPECT_FALSE(DeepDerivative(json{{"readOnly", true}}, json::object()));
  EXPECT_FALSE(DeepDerivative(json{{"readOnly", false}}, json{{"readOnly", true}}));
}

TEST(ObjectDiffTest, QuantitiesCompareByValueOnlyUnderLimitsAndRequests) {
  const json desired = {{"resources", {{"limits", {{"cpu", "0.5"}, {"memory", "1Gi"}}}}}};
  const json observed = {{"resources", {{"limits", {{"cpu", "500m"}, {"memory", "1073741824"}}}}}};
  EXPECT_TRUE(DeepDerivative(desired, observed));
  EXPECT_FALSE(DeepDerivative(json{{"x", "0.5"}}, json{{"x", "500m"}}));
  EXPECT_FALSE(
      DeepDerivative(json{{"limits", {{"cpu", "1"}}}}, json{{"limits", {{"cpu", "999m"}}}}));
}

TEST(ObjectDiffTest, ReplacePatchTurnsObservedIntoDesired) {
  const json observed = {
      {"keep", 1}, {"change", {{"a", 1}, {"gone", 2}}}, {"drop", "x"}, {"list", {1, 2}}};
  const json desired = {{"keep", 1}, {"change", {{"a", 2}}}, {"list", {3}}, {"new", true}};
  const json patch = ReplacePatch(observed, desired);
  EXPECT_EQ(patch, (json{{"change", {{"a", 2}, {"gone", nullptr}}},
                         {"drop", nullptr},
                         {"list", {3}},
                         {"new", true}}));
  json applied = observed;
  applied.merge_patch(patch);
  EXPECT_EQ(applied, desired);
  EXPECT_EQ(ReplacePatch(desired, desired), json::object());
}

TEST(ObjectDiffTest, PathHelpersAndHash) {
  json patch;
  SetAt(patch, {"a", "b", "c"}, 1);
  EXPECT_EQ(patch, (json{{"a", {{"b", {{"c", 1}}}}}}));
  EXPECT_EQ(At(patch, {"a", "b", "c"}), 1);
  EXPECT_TRUE(At(patch, {"a", "x", "c"}).is_null());
  EXPECT_EQ(Fnv1a64Hex(""), "cbf29ce484222325");  // the FNV-1a offset basis: stable everywhere
  EXPECT_NE(Fnv1a64Hex("a"), Fnv1a64Hex("b"));
}

json Pod(const std::string& name, bool ready, json status_extra = json::object()) {
  json pod = {
      {"metadata", {{"name", name}}},
      {"status", {{"conditions", {{{"type", "Ready"}, {"status", ready ? "True" : "False"}}}}}}};
  pod["status"].update(status_extra);
  return pod;
}

TEST(PodSummaryTest, CountsReadinessAndProblems) {
  std::vector<json> pods;
  pods.push_back(Pod("a", true));
  pods.push_back(Pod("b", false,
                     {{"initContainerStatuses",
                       {{{"name", "fetch-model"},
                         {"state", {{"waiting", {{"reason", "CrashLoopBackOff"}}}}},
                         {"lastState",
                          {{"terminated",
                            {{"exitCode", kExitModelChecksumMismatch},
                             {"message", "ModelChecksumMismatch: x\n"}}}}}}}}}));
  pods.push_back(Pod("c", false,
                     {{"containerStatuses",
                       {{{"name", "runtime"},
                         {"state", {{"waiting", {{"reason", "CrashLoopBackOff"}}}}},
                         {"lastState", {{"terminated", {{"exitCode", 1}}}}}}}}}));
  pods.push_back(
      Pod("d", false,
          {{"containerStatuses",
            {{{"name", "sidecar"}, {"state", {{"waiting", {{"reason", "ImagePullBackOff"}}}}}}}}}));
  pods.push_back(Pod("e", false,
                     {{"initContainerStatuses",
                       {{{"name", "verify-model"},
                         {"state", {{"terminated", {{"exitCode", kExitModelNotFound}}}}}}}}}));
  json going = Pod("f", true);
  going["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z";
  pods.push_back(going);
  const PodSummary s = SummarizePods(pods);
  EXPECT_EQ(s.total, 5);
  EXPECT_EQ(s.ready, 1);
  EXPECT_EQ(s.terminating, 1);
  EXPECT_EQ(s.model_checksum_mismatch, 1);
  EXPECT_EQ(s.crash_looping, 1);
  EXPECT_EQ(s.image_pull_failing, 1);
  EXPECT_EQ(s.model_not_found, 1);
  EXPECT_EQ(s.model_download_failed, 0);
  EXPECT_EQ(s.first_problem, "pod b: container fetch-model: ModelChecksumMismatch: x");
}

// A pod the scheduler cannot place (a GPU resource no node offers) and a container the kubelet
// cannot create (the API keys' Secret is missing) are problems with the cause in the message; a
// pod that only waits for a node while another problem shows counts under that problem.
TEST(PodSummaryTest, UnschedulablePodsAndContainerConfigErrorsAreProblems) {
  json unschedulable = Pod("u", false);
  unschedulable["status"]["conditions"].push_back(
      {{"type", "PodScheduled"},
       {"status", "False"},
       {"reason", "Unschedulable"},
       {"message", "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}});
  unschedulable["status"]["phase"] = "Pending";
  json config = Pod("k", false,
                    {{"containerStatuses",
                      {{{"name", "sidecar"},
                        {"state",
                         {{"waiting",
                           {{"reason", "CreateContainerConfigError"},
                            {"message", "secret \"keys\" not found"}}}}}}}}});
  const PodSummary s = SummarizePods({unschedulable, config});
  EXPECT_EQ(s.total, 2);
  EXPECT_EQ(s.unschedulable, 1);
  EXPECT_EQ(s.container_config_error, 1);
  EXPECT_EQ(s.first_problem,
            "pod u: Unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu.");
  const PodSummary k = SummarizePods({config});
  EXPECT_EQ(k.first_problem,
            "pod k: container sidecar: CreateContainerConfigError secret \"keys\" not found");
  // Scheduled (True): no problem.
  json placed = Pod("p", false);
  placed["status"]["conditions"].push_back({{"type", "PodScheduled"}, {"status", "True"}});
  EXPECT_EQ(SummarizePods({placed}).unschedulable, 0);
}

// The kubelet keeps a failed try in lastState after the retry succeeds (or while it runs): only
// a container waiting to run again is judged by its last exit.
TEST(PodSummaryTest, AModelInitContainerThatFailedOnceThenCompletedIsNoProblem) {
  const json failed_before = {{"terminated", {{"exitCode", kExitModelNotFound}, {"message", "model file not found"}}}};
  std::vector<json> pods;
  pods.push_back(Pod("done", true,
                     {{"initContainerStatuses",
                       {{{"name", "verify-model"},
                         {"state", {{"terminated", {{"exitCode", 0}, {"reason", "Completed"}}}}},
                         {"lastState", failed_before}}}}}));
  pods.push_back(Pod("retrying", false,
                     {{"initContainerStatuses",
                       {{{"name", "fetch-model"},
                         {"state", {{"running", {{"startedAt", "2026-12-07T00:00:00Z"}}}}},
                         {"lastState", failed_before}}}}}));
  PodSummary s = SummarizePods(pods);
  EXPECT_EQ(s.model_not_found, 0);
  EXPECT_EQ(s.first_problem, "");
  pods.push_back(Pod("backing-off", false,
                     {{"initContainerStatuses",
                       {{{"name", "verify-model"},
                         {"state", {{"waiting", {{"reason", "CrashLoopBackOff"}}}}},
                         {"lastState", failed_before}}}}}));
  s = SummarizePods(pods);
  EXPECT_EQ(s.model_not_found, 1);
  EXPECT_EQ(s.first_problem, "pod backing-off: container verify-model: model file not found");
}

}  // namespace
}  // namespace kinfer::reconcile
