// The controller against the real test API server: what users and operators of operators expect
// of it (docs/operator.md), each pinned by watching the API server, never the controller's
// internals: objects appear with owner references, status and Events are written, a steady state
// makes zero writes, spec changes roll the Deployment, invalid specs become a condition without a
// hot loop, and conflicts, injected 5xx/429, dropped watches and an API server restart all
// converge.
#include "operator/controller/controller.h"

#include <cpprest/http_listener.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <thread>

#include "operator/controller/autoscale_loop.h"
#include "tests/operator/kube/log_capture.h"
#include "tests/operator/kube/test_apiserver.h"

namespace kinfer::controller {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
namespace rs = kube::resources;

bool WaitUntil(const std::function<bool()>& pred, milliseconds timeout = milliseconds(10000)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(milliseconds(20));
  }
  return pred();
}

json Isvc(const std::string& name, json spec_extra = json::object()) {
  json spec = {{"model",
                {{"name", "smollm2-135m-instruct"},
                 {"uri", "pvc://models/smollm2-135m-instruct-q4_1.gguf"}}}};
  spec.merge_patch(spec_extra);
  return {{"apiVersion", "serving.kinfer.dev/v1alpha1"},
          {"kind", "InferenceService"},
          {"metadata", {{"name", name}, {"namespace", "default"}}},
          {"spec", spec}};
}

const json* Find(const json& j, std::initializer_list<const char*> path) {
  const json* v = &j;
  for (const char* k : path) {
    if (!v->is_object() || !v->contains(k)) return nullptr;
    v = &(*v)[k];
  }
  return v;
}

std::string Condition(const json& isvc, const std::string& type, std::string* reason = nullptr) {
  const json* conds = Find(isvc, {"status", "conditions"});
  if (conds == nullptr) return "";
  for (const json& c : *conds) {
    if (c.value("type", "") == type) {
      if (reason != nullptr) *reason = c.value("reason", "");
      return c.value("status", "");
    }
  }
  return "";
}

class ControllerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new testing::TestApiServer(
        {"--bookmark-interval", "0.2", "--deployment-controller", "--too-large-wait", "0.5"});
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }

  void SetUp() override {
    ASSERT_TRUE(server_->ok()) << "the test API server did not start";
    server_->Post("/_test/reset");
    kube::KubeConfig cfg;
    cfg.server = server_->url();
    kube::ClientOptions test_agent;
    test_agent.user_agent = "kinfer-test";
    client_ = std::move(kube::Client::Create(cfg, test_agent)).value();
    op_client_ = std::move(kube::Client::Create(cfg)).value();  // user agent kinfer-operator
  }
  void TearDown() override {
    if (loop_) loop_->Stop();
    if (controller_) controller_->Stop();
  }

  void StartController(ControllerOptions o = {}) {
    o.planner.allowed_host_paths = {"/models"};  // the samples' file:// models
    o.backoff.base = milliseconds(5);
    o.backoff.max = milliseconds(500);
    o.watch.initial_backoff = milliseconds(20);
    o.watch.max_backoff = milliseconds(200);
    o.watch.timeout_seconds = 30;
    o.watch.stream_timeout = milliseconds(5000);
    metrics_ = std::make_unique<OperatorMetrics>();
    events_ = std::make_unique<EventRecorder>(op_client_.get(), "kinfer-operator", "test");
    controller_ = std::make_unique<Controller>(op_client_.get(), o, metrics_.get(), events_.get());
    controller_->StartInformers();
    ASSERT_TRUE(controller_->WaitForSync(milliseconds(5000)));
    controller_->StartWorkers();
  }

  std::optional<json> Get(const kube::ResourceType& rt, const std::string& name) {
    auto o = client_->Get(rt, "default", name);
    if (!o.ok()) return std::nullopt;
    return *o;
  }
  int64_t OperatorWrites() {
    json stats = server_->Get("/_test/stats");
    const json* w = Find(stats, {"writes", "byUserAgent"});
    if (w == nullptr) return 0;
    int64_t n = 0;
    for (auto it = w->begin(); it != w->end(); ++it) {
      if (it.key().rfind("kinfer-operator", 0) == 0) n += it.value().get<int64_t>();
    }
    return n;
  }
  bool IsReady(const std::string& name) {
    auto o = Get(rs::kInferenceServices, name);
    return o && Condition(*o, "Ready") == "True";
  }
  std::vector<json> EventsOf(const std::string& name) {
    kube::ListOptions lo;
    lo.field_selector = "involvedObject.name=" + name;
    auto l = client_->List(rs::kEvents, "default", lo);
    if (!l.ok()) return {};
    return (*l)["items"].get<std::vector<json>>();
  }
  bool HasEvent(const std::string& name, const std::string& reason) {
    for (const json& e : EventsOf(name)) {
      if (e.value("reason", "") == reason) return true;
    }
    return false;
  }

  // The controller and an autoscaler of 100 ms ticks (not started) that scrapes every pod's
  // sidecar page at 127.0.0.1:port.
  void StartAutoscalerOn(int port) {
    StartController();
    AutoscaleLoopOptions ao;
    ao.interval = milliseconds(100);
    ao.address_of = [port](const json&) { return "127.0.0.1:" + std::to_string(port); };
    loop_ = std::make_unique<AutoscaleLoop>(controller_.get(), ao, metrics_.get());
  }

  // An autoscaled InferenceService from 1 to max_replicas; stable window 6 s -> panic window
  // 0.6 s, so panic reacts within a few ticks. Returns once its Deployment exists.
  void CreateAutoscaled(const std::string& name, int max_replicas) {
    ASSERT_TRUE(client_
                    ->Create(rs::kInferenceServices, "default",
                             Isvc(name, {{"autoscaling",
                                          {{"minReplicas", 1},
                                           {"maxReplicas", max_replicas},
                                           {"stableWindowSeconds", 6}}}}))
                    .ok());
    ASSERT_TRUE(WaitUntil([&] { return Get(rs::kDeployments, name).has_value(); }));
  }

  // A pod of InferenceService `isvc` with `status`.
  void AddPod(const std::string& isvc, const std::string& name, const json& status) {
    json pod = {{"apiVersion", "v1"},
                {"kind", "Pod"},
                {"metadata",
                 {{"name", name},
                  {"namespace", "default"},
                  {"labels", {{"serving.kinfer.dev/inferenceservice", isvc}}}}},
                {"spec", {{"containers", {{{"name", "sidecar"}, {"image", "x"}}}}}}};
    ASSERT_TRUE(client_->Create(rs::kPods, "default", pod).ok());
    ASSERT_TRUE(client_->MergePatch(rs::kPods, "default", name, {{"status", status}}, "status").ok());
  }

  // A running pod that is Ready, at 127.0.0.1.
  static json ReadyStatus() {
    return {{"phase", "Running"},
            {"podIP", "127.0.0.1"},
            {"conditions", {{{"type", "Ready"}, {"status", "True"}}}}};
  }

  static testing::TestApiServer* server_;
  std::unique_ptr<kube::Client> client_;
  std::unique_ptr<kube::Client> op_client_;
  std::unique_ptr<OperatorMetrics> metrics_;
  std::unique_ptr<EventRecorder> events_;
  std::unique_ptr<Controller> controller_;
  std::unique_ptr<AutoscaleLoop> loop_;
};
testing::TestApiServer* ControllerTest::server_ = nullptr;

TEST_F(ControllerTest, CreateMakesOwnedObjectsStatusAndEventsThenGoesQuiet) {
  StartController();
  ASSERT_TRUE(client_->Create(rs::kInferenceServices, "default", Isvc("chat")).ok());

  ASSERT_TRUE(WaitUntil([&] { return IsReady("chat"); })) << "never became Ready";
  json isvc = *Get(rs::kInferenceServices, "chat");
  const std::string uid = isvc["metadata"]["uid"];
  for (auto [rt, name] : {std::pair{&rs::kDeployments, "chat"},
                          {&rs::kServices, "chat"},
                          {&rs::kConfigMaps, "chat-sidecar"},
                          {&rs::kPodDisruptionBudgets, "chat"}}) {
    std::optional<json> o = Get(*rt, name);
    ASSERT_TRUE(o) << rt->plural << " " << name << " missing";
    const json& owners = (*o)["metadata"]["ownerReferences"];
    ASSERT_EQ(owners.size(), 1u) << rt->plural;
    EXPECT_EQ(owners[0]["uid"], uid);
    EXPECT_EQ(owners[0]["controller"], true);
  }
  EXPECT_EQ(isvc["status"]["observedGeneration"], isvc["metadata"]["generation"]);
  EXPECT_EQ(isvc["status"]["selector"], "serving.kinfer.dev/inferenceservice=chat");
  EXPECT_EQ(isvc["status"]["url"], "http://chat.default.svc.cluster.local:8080");
  EXPECT_TRUE(HasEvent("chat", "Created"));

  // Steady state: nothing to write, even when every key is reconciled again.
  ASSERT_TRUE(WaitUntil([&] { return controller_->QueueLen() == 0; }));
  std::this_thread::sleep_for(milliseconds(300));
  const int64_t before = OperatorWrites();
  for (int i = 0; i < 3; ++i) {
    ReconcileOutcome o = controller_->Reconcile("default/chat");
    EXPECT_TRUE(o.status.ok()) << o.status.ToString();
    EXPECT_EQ(o.writes, 0);
  }
  std::this_thread::sleep_for(milliseconds(500));
  EXPECT_EQ(OperatorWrites(), before);
}

TEST_F(ControllerTest, SpecChangeRollsTheDeploymentAndKeepsOthersFields) {
  StartController();
  ASSERT_TRUE(client_
                  ->Create(rs::kInferenceServices, "default",
                           Isvc("roll", {{"autoscaling", {{"enabled", false}}}, {"replicas", 2}}))
                  .ok());
  ASSERT_TRUE(WaitUntil([&] { return IsReady("roll"); }));
  json dep = *Get(rs::kDeployments, "roll");
  const std::string hash =
      dep["spec"]["template"]["metadata"]["annotations"]["serving.kinfer.dev/template-hash"];
  EXPECT_EQ(dep["spec"]["replicas"], 2);
  // Someone else's annotation on the Deployment is kept across the operator's patches.
  ASSERT_TRUE(client_
                  ->MergePatch(rs::kDeployments, "default", "roll",
                               {{"metadata", {{"annotations", {{"team", "a"}}}}}})
                  .ok());

  ASSERT_TRUE(client_
                  ->MergePatch(rs::kInferenceServices, "default", "roll",
                               {{"spec", {{"runtime", {{"image", "example/runtime:2"}}}}}})
                  .ok());
  ASSERT_TRUE(WaitUntil([&] {
    json d = *Get(rs::kDeployments, "roll");
    return d["spec"]["template"]["metadata"]["annotations"]["serving.kinfer.dev/template-hash"] !=
           hash;
  }));
  dep = *Get(rs::kDeployments, "roll");
  EXPECT_EQ(dep["metadata"]["annotations"]["team"], "a");
  bool found = false;
  for (const json& c : dep["spec"]["template"]["spec"]["containers"]) {
    if (c["name"] == "runtime") found = c["image"] == "example/runtime:2";
  }
  EXPECT_TRUE(found) << dep["spec"]["template"]["spec"]["containers"].dump();

  // kubectl scale through the InferenceService's /scale reaches the Deployment.
  ASSERT_TRUE(client_
                  ->MergePatch(rs::kInferenceServices, "default", "roll",
                               {{"spec", {{"replicas", 3}}}}, "scale")
                  .ok());
  ASSERT_TRUE(WaitUntil([&] { return (*Get(rs::kDeployments, "roll"))["spec"]["replicas"] == 3; }));
  ASSERT_TRUE(WaitUntil([&] {
    return (*Get(rs::kInferenceServices, "roll"))["status"].value("desiredReplicas", 0) == 3;
  }));
  EXPECT_TRUE(WaitUntil([&] { return HasEvent("roll", "Scaled"); }));
}

TEST_F(ControllerTest, InvalidSpecIsAConditionNotAHotLoop) {
  StartController();
  // The CRD admits this URI; the operator cannot mount a path that climbs out with "..".
  ASSERT_TRUE(client_
                  ->Create(rs::kInferenceServices, "default",
                           Isvc("bad", {{"model", {{"uri", "file:///models/../etc/x.gguf"}}}}))
                  .ok());
  ASSERT_TRUE(WaitUntil([&] {
    auto o = Get(rs::kInferenceServices, "bad");
    std::string reason;
    return o && Condition(*o, "Degraded", &reason) == "True" && reason == "InvalidSpec";
  }));
  EXPECT_FALSE(Get(rs::kDeployments, "bad").has_value());
  EXPECT_TRUE(WaitUntil([&] { return HasEvent("bad", "InvalidSpec"); }));
  std::this_thread::sleep_for(milliseconds(300));
  const double reconciles = metrics_->reconciles.WithLabels({"invalid_spec"}).Value();
  std::this_thread::sleep_for(milliseconds(1000));
  EXPECT_EQ(metrics_->reconciles.WithLabels({"invalid_spec"}).Value(), reconciles)
      << "an invalid spec must not be retried until it changes";

  // Fixing the spec brings the objects.
  ASSERT_TRUE(client_
                  ->MergePatch(rs::kInferenceServices, "default", "bad",
                               {{"spec", {{"model", {{"uri", "file:///models/x.gguf"}}}}}})
                  .ok());
  EXPECT_TRUE(WaitUntil([&] { return IsReady("bad"); }));
}

TEST_F(ControllerTest, DeletionIsLeftToGarbageCollectionAndNothingIsRecreated) {
  StartController();
  ASSERT_TRUE(client_->Create(rs::kInferenceServices, "default", Isvc("gone")).ok());
  ASSERT_TRUE(WaitUntil([&] { return Get(rs::kDeployments, "gone").has_value(); }));
  ASSERT_TRUE(client_->Delete(rs::kInferenceServices, "default", "gone").ok());
  EXPECT_TRUE(WaitUntil([&] {
    return !Get(rs::kDeployments, "gone") && !Get(rs::kServices, "gone") &&
           !Get(rs::kConfigMaps, "gone-sidecar");
  }));
  std::this_thread::sleep_for(milliseconds(500));
  EXPECT_FALSE(Get(rs::kDeployments, "gone").has_value());
}

TEST_F(ControllerTest, ObjectsDeletedOrEditedBySomeoneElseAreRepaired) {
  StartController();
  ASSERT_TRUE(client_->Create(rs::kInferenceServices, "default", Isvc("heal")).ok());
  ASSERT_TRUE(WaitUntil([&] { return IsReady("heal"); }));
  ASSERT_TRUE(client_->Delete(rs::kServices, "default", "heal").ok());
  EXPECT_TRUE(WaitUntil([&] { return Get(rs::kServices, "heal").has_value(); }));
  ASSERT_TRUE(client_
                  ->MergePatch(rs::kConfigMaps, "default", "heal-sidecar",
                               {{"data", {{"sidecar.yaml", "garbage: 1\n"}}}})
                  .ok());
  EXPECT_TRUE(WaitUntil([&] {
    return (*Get(rs::kConfigMaps, "heal-sidecar"))["data"]["sidecar.yaml"] != "garbage: 1\n";
  }));
}

TEST_F(ControllerTest, AnUnlabelledObjectOfTheSameNameIsAdopted) {
  // A Service "adopt" made by hand, without our label: the cache never sees it, so the create
  // meets AlreadyExists and the controller plans again from the live objects.
  json svc = {{"apiVersion", "v1"},
              {"kind", "Service"},
              {"metadata", {{"name", "adopt"}, {"namespace", "default"}}},
              {"spec", {{"ports", {{{"port", 80}}}}}}};
  ASSERT_TRUE(client_->Create(rs::kServices, "default", svc).ok());
  StartController();
  ASSERT_TRUE(client_->Create(rs::kInferenceServices, "default", Isvc("adopt")).ok());
  EXPECT_TRUE(WaitUntil([&] {
    auto s = Get(rs::kServices, "adopt");
    return s && (*s)["metadata"].contains("ownerReferences") &&
           (*s)["metadata"]["labels"].contains("serving.kinfer.dev/inferenceservice");
  }));
  EXPECT_TRUE(WaitUntil([&] { return IsReady("adopt"); }));
}

// A Deployment of the same name that is not ours (another selector): ReconcileError, as long as
// it stands, and its pods do not make the service Ready. Deleting it, as the condition says, is
// noticed without any event (the caches watch only our labelled objects).
TEST_F(ControllerTest, AForeignDeploymentBlocksUntilDeletedAndCountsForNothing) {
  const json foreign = json::parse(R"({
    "apiVersion": "apps/v1", "kind": "Deployment",
    "metadata": {"name": "blocked", "namespace": "default"},
    "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "x"}},
             "template": {"metadata": {"labels": {"app": "x"}},
                          "spec": {"containers": [{"name": "c", "image": "example/x:1"}]}}}})");
  ASSERT_TRUE(client_->Create(rs::kDeployments, "default", foreign).ok());
  ControllerOptions o;
  o.conflict_recheck = milliseconds(200);
  StartController(o);
  ASSERT_TRUE(client_->Create(rs::kInferenceServices, "default", Isvc("blocked")).ok());
  std::string reason;
  ASSERT_TRUE(WaitUntil([&] {
    auto isvc = Get(rs::kInferenceServices, "blocked");
    return isvc && Condition(*isvc, "Degraded", &reason) == "True" && reason == "ReconcileError";
  }));
  std::this_thread::sleep_for(milliseconds(500));  // the foreign Deployment's pods get ready
  EXPECT_NE(Condition(*Get(rs::kInferenceServices, "blocked"), "Ready"), "True");
  ASSERT_TRUE(client_->Delete(rs::kDeployments, "default", "blocked").ok());
  EXPECT_TRUE(WaitUntil([&] {
    auto d = Get(rs::kDeployments, "blocked");
    return d && Find(*d, {"metadata", "labels", "serving.kinfer.dev/inferenceservice"}) != nullptr;
  }));
  EXPECT_TRUE(WaitUntil([&] { return IsReady("blocked"); }));
  auto isvc = Get(rs::kInferenceServices, "blocked");
  EXPECT_EQ(Condition(*isvc, "Degraded", &reason), "False") << reason;
}

// A write the API server keeps refusing (RBAC without PodDisruptionBudgets, say) still leaves a
// status saying so, written once, not once a retry; fixing it recovers.
TEST_F(ControllerTest, AWriteThatKeepsFailingIsInTheStatusWrittenOnce) {
  StartController();
  server_->Post("/_test/faults", {{"nextErrors", 1000000},
                                  {"nextErrorCode", 403},
                                  {"verbs", {"create"}},
                                  {"resources", {"configmaps"}}});
  ASSERT_TRUE(client_->Create(rs::kInferenceServices, "default", Isvc("denied")).ok());
  std::string reason;
  ASSERT_TRUE(WaitUntil([&] {
    auto isvc = Get(rs::kInferenceServices, "denied");
    return isvc && Condition(*isvc, "Degraded", &reason) == "True" && reason == "ApiError";
  }));
  auto isvc = Get(rs::kInferenceServices, "denied");
  EXPECT_EQ(Condition(*isvc, "Ready"), "False");
  const json* selector = Find(*isvc, {"status", "selector"});
  ASSERT_NE(selector, nullptr);
  EXPECT_EQ(*selector, "serving.kinfer.dev/inferenceservice=denied");
  const double status_writes = metrics_->api_writes.WithLabels({"update_status", "inferenceservices"}).Value();
  std::this_thread::sleep_for(milliseconds(1500));  // retries with backoff (5 ms .. 500 ms here)
  EXPECT_GE(metrics_->reconcile_errors.Get().Value(), 3);
  EXPECT_EQ(metrics_->api_writes.WithLabels({"update_status", "inferenceservices"}).Value(), status_writes);
  server_->Post("/_test/faults", {{"clear", true}});
  EXPECT_TRUE(WaitUntil([&] { return IsReady("denied"); }));
  EXPECT_EQ(Condition(*Get(rs::kInferenceServices, "denied"), "Degraded", &reason), "False") << reason;
}

// RBAC without inferenceservices/status: the failure is a Warning Event and a warning with the
// server's answer, logged once while it lasts, not once a retry (it used to be silent).
TEST_F(ControllerTest, AFailingStatusWriteIsAnEventAndALoggedWarning) {
  testing::LogCapture log;
  StartController();
  server_->Post("/_test/faults", {{"nextErrors", 1000000},
                                  {"nextErrorCode", 403},
                                  {"verbs", {"update"}},
                                  {"resources", {"inferenceservices/status"}}});
  ASSERT_TRUE(client_->Create(rs::kInferenceServices, "default", Isvc("nostatus")).ok());
  EXPECT_TRUE(WaitUntil([&] { return HasEvent("nostatus", "ApiError"); }));
  std::this_thread::sleep_for(milliseconds(1000));  // retries with backoff
  EXPECT_GE(metrics_->reconcile_errors.Get().Value(), 3);
  server_->Post("/_test/faults", {{"clear", true}});
  EXPECT_TRUE(WaitUntil([&] { return IsReady("nostatus"); }));
  const std::vector<std::string> warnings = log.LinesWith("reconcile default/nostatus failed");
  for (const std::string& line : warnings) {
    EXPECT_NE(line.find("403"), std::string::npos) << line;
    EXPECT_NE(line.find("[warning]"), std::string::npos) << line;
  }
  EXPECT_EQ(warnings.size(), 1u) << ::testing::PrintToString(log.Lines());
}

TEST_F(ControllerTest, InjectedErrorsAndConflictsConverge) {
  StartController();
  // The next 3 creates of Deployments fail with 500, status updates meet 409s, and patches are
  // throttled with 429 + Retry-After 1.
  server_->Post("/_test/faults", {{"nextErrors", 3},
                                  {"nextErrorCode", 500},
                                  {"verbs", {"create"}},
                                  {"resources", {"deployments"}}});
  ASSERT_TRUE(client_->Create(rs::kInferenceServices, "default", Isvc("flaky")).ok());
  EXPECT_TRUE(WaitUntil([&] { return Get(rs::kDeployments, "flaky").has_value(); }));
  server_->Post("/_test/faults", {{"clear", true},
                                  {"nextErrors", 2},
                                  {"nextErrorCode", 409},
                                  {"verbs", {"update"}},
                                  {"resources", {"inferenceservices/status"}}});
  EXPECT_TRUE(WaitUntil([&] { return IsReady("flaky"); }));
  EXPECT_GE(metrics_->reconcile_errors.Get().Value(), 3);
  EXPECT_TRUE(HasEvent("flaky", "ApiError"));

  server_->Post("/_test/faults", {{"clear", true},
                                  {"nextErrors", 1},
                                  {"nextErrorCode", 429},
                                  {"retryAfterSeconds", 1},
                                  {"verbs", {"patch"}},
                                  {"resources", {"deployments"}}});
  ASSERT_TRUE(client_
                  ->MergePatch(rs::kInferenceServices, "default", "flaky",
                               {{"spec", {{"runtime", {{"image", "example/r:3"}}}}}})
                  .ok());
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(WaitUntil([&] {
    return (*Get(rs::kDeployments, "flaky"))["spec"]["template"]["spec"]["containers"].dump().find(
               "example/r:3") != std::string::npos;
  }));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, milliseconds(900))
      << "Retry-After: 1 must delay the retry by a second";
  server_->Post("/_test/faults", {{"clear", true}});
}

TEST_F(ControllerTest, DroppedWatchesAndCompactionDoNotLoseEvents) {
  StartController();
  ASSERT_TRUE(client_->Create(rs::kInferenceServices, "default", Isvc("w1")).ok());
  ASSERT_TRUE(WaitUntil([&] { return IsReady("w1"); }));
  server_->Post("/_test/faults", {{"dropWatches", true}, {"dropMode", "reset"}});
  ASSERT_TRUE(client_->Create(rs::kInferenceServices, "default", Isvc("w2")).ok());
  server_->Post("/_test/compact");
  server_->Post("/_test/faults", {{"dropWatches", true}});
  ASSERT_TRUE(client_->Create(rs::kInferenceServices, "default", Isvc("w3")).ok());
  EXPECT_TRUE(WaitUntil([&] { return IsReady("w2") && IsReady("w3"); }));
  kube::WatchStats s = controller_->InformerStats();
  EXPECT_GT(s.stream_errors + s.relists, 0);
  controller_->UpdateMetrics();
  EXPECT_TRUE(metrics_->registry.ExposeText().find("kinfer_operator_watch_restarts_total") !=
              std::string::npos);
  server_->Post("/_test/faults", {{"clear", true}});
}

TEST_F(ControllerTest, ManyInferenceServicesConvergeAndGoQuiet) {
  StartController();
  json items = json::array();
  for (int i = 0; i < 1000; ++i) {
    std::string name = "m";
    name += std::to_string(i);  // ("m" + std::to_string(i) meets a GCC 12 -Wrestrict false positive)
    json o = Isvc(name);
    items.push_back(o);
  }
  server_->Post("/_test/objects", {{"items", items}});
  ASSERT_TRUE(WaitUntil(
      [&] {
        kube::ListOptions lo;
        lo.label_selector = "serving.kinfer.dev/inferenceservice";
        auto l = client_->List(rs::kDeployments, "default", lo);
        return l.ok() && (*l)["items"].size() == 1000;
      },
      milliseconds(60000)));
  ASSERT_TRUE(WaitUntil([&] { return IsReady("m0") && IsReady("m999"); }, milliseconds(60000)));
  ASSERT_TRUE(WaitUntil([&] { return controller_->QueueLen() == 0; }, milliseconds(60000)));
  std::this_thread::sleep_for(milliseconds(1000));
  const int64_t before = OperatorWrites();
  std::this_thread::sleep_for(milliseconds(1500));
  EXPECT_EQ(OperatorWrites(), before) << "a steady state makes zero writes";
}

// A fake sidecar: serves a fixed /metrics page (queue depth, in flight) on 127.0.0.1.
// A loopback port the kernel had free a moment ago (bind to port 0, read it back, close).
int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  int port = 0;
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  if (fd >= 0) close(fd);
  return port;
}

// Starts a fake HTTP server (its constructor takes the port and throws when it cannot bind) on a
// free loopback port, picking again if another test took the port in between; null when 20
// picks all failed. (A fixed port next to the API server's was taken by a test running beside
// this one under ctest -j2 on 2026-12-02.)
template <class Fake>
std::unique_ptr<Fake> OnAFreePort() {
  for (int attempt = 0; attempt < 20; ++attempt) {
    const int port = FreeLoopbackPort();
    if (port == 0) continue;
    try {
      return std::make_unique<Fake>(port);
    } catch (const std::exception&) {
      // taken meanwhile: pick again
    }
  }
  return nullptr;
}

class FakeSidecarPage {
 public:
  explicit FakeSidecarPage(int port)
      : port_(port), listener_("http://127.0.0.1:" + std::to_string(port)) {
    listener_.support([this](web::http::http_request req) {
      std::string page;
      {
        std::lock_guard<std::mutex> l(mu_);
        page = page_;
      }
      req.reply(web::http::status_codes::OK, page, "text/plain; version=0.0.4");
    });
    listener_.open().wait();
  }
  ~FakeSidecarPage() { listener_.close().wait(); }
  int port() const { return port_; }
  void Set(double queue, double in_flight) {
    std::lock_guard<std::mutex> l(mu_);
    page_ =
        "# TYPE kinfer_sidecar_queue_depth gauge\n"
        "kinfer_sidecar_queue_depth{class=\"standard\"} " +
        std::to_string(queue) + "\n" +
        "# TYPE kinfer_sidecar_in_flight gauge\nkinfer_sidecar_in_flight " +
        std::to_string(in_flight) + "\n";
  }

 private:
  int port_;
  web::http::experimental::listener::http_listener listener_;
  std::mutex mu_;
  std::string page_;
};

TEST_F(ControllerTest, TheAutoscalerScalesOnTheSidecarsQueue) {
  std::unique_ptr<FakeSidecarPage> page = OnAFreePort<FakeSidecarPage>();
  ASSERT_NE(page, nullptr) << "no free loopback port for the sidecar page";
  page->Set(40, 8);  // 48 requests waiting or running on one pod: 6x the target of 8
  StartAutoscalerOn(page->port());
  CreateAutoscaled("auto", 4);
  AddPod("auto", "auto-0", ReadyStatus());
  loop_->Start();
  ASSERT_TRUE(WaitUntil([&] { return (*Get(rs::kDeployments, "auto"))["spec"]["replicas"] == 4; },
                        milliseconds(15000)));
  json isvc = *Get(rs::kInferenceServices, "auto");
  ASSERT_TRUE(WaitUntil([&] {
    isvc = *Get(rs::kInferenceServices, "auto");
    return isvc["status"].value("desiredReplicas", 0) == 4;
  }));
  const std::string reason = isvc["status"].value("lastScaleReason", "");
  EXPECT_TRUE(reason.rfind("scale_up", 0) == 0 || reason == "max_replicas") << reason;
  EXPECT_GT(isvc["status"].value("observedQueueDepth", 0.0), 0.0);
  EXPECT_TRUE(WaitUntil([&] { return HasEvent("auto", "Scaled"); }));
  EXPECT_GT(metrics_->autoscaler_decisions.WithLabels({isvc["status"]["lastScaleReason"]}).Value(),
            0);
}

// Two evicted pods (phase Failed, never deleted) beside the one serving pod: they are neither
// replicas nor capacity on its way, so the overload scales up at once (they held every decision
// at scale_up_pending and showed as 3 replicas). Then the page goes away: ScalingActive turns
// False MetricsMissing within a few ticks, though the replica count and load stay as they were.
TEST_F(ControllerTest, EvictedPodsAreNotCapacityAndMissingMetricsShowAtOnce) {
  std::unique_ptr<FakeSidecarPage> page = OnAFreePort<FakeSidecarPage>();
  ASSERT_NE(page, nullptr) << "no free loopback port for the sidecar page";
  page->Set(16, 0);  // twice the target of 8 on one pod
  StartAutoscalerOn(page->port());
  CreateAutoscaled("evict", 2);
  AddPod("evict", "evict-0", ReadyStatus());
  for (const char* name : {"evict-gone-1", "evict-gone-2"}) {
    AddPod("evict", name,
           {{"phase", "Failed"},
            {"reason", "Evicted"},
            {"conditions", {{{"type", "Ready"}, {"status", "False"}}}}});
  }
  loop_->Start();
  ASSERT_TRUE(WaitUntil([&] { return (*Get(rs::kDeployments, "evict"))["spec"]["replicas"] == 2; },
                        milliseconds(10000)))
      << "evicted pods held the scale-up";
  json isvc;
  ASSERT_TRUE(WaitUntil([&] {
    isvc = *Get(rs::kInferenceServices, "evict");
    std::string reason;
    return Condition(isvc, "ScalingActive", &reason) == "True" && reason == "AutoscalerActive";
  }));
  EXPECT_EQ(isvc["status"].value("replicas", -1), 1) << isvc["status"].dump();

  page.reset();  // the scrape fails from now on
  std::string reason;
  EXPECT_TRUE(WaitUntil(
      [&] {
        return Condition(*Get(rs::kInferenceServices, "evict"), "ScalingActive", &reason) ==
                   "False" &&
               reason == "MetricsMissing";
      },
      milliseconds(5000)))
      << reason;
  EXPECT_EQ((*Get(rs::kDeployments, "evict"))["spec"]["replicas"], 2);  // frozen, not shrunk
  // What the last good tick saw stands (a frozen tick measured nothing; it read 0 before).
  EXPECT_GT((*Get(rs::kInferenceServices, "evict"))["status"].value("observedQueueDepth", 0.0), 0.0);
}

// A fake Prometheus HTTP API: answers /api/v1/query with one series per pod for the queue-depth
// and in-flight queries (and TTFT buckets), and records the PromQL it was asked.
class FakePrometheus {
 public:
  explicit FakePrometheus(int port)
      : url_("http://127.0.0.1:" + std::to_string(port)), listener_(url_) {
    listener_.support([this](web::http::http_request req) {
      auto q = web::uri::split_query(req.request_uri().query());
      std::string expr = web::uri::decode(q["query"]);
      bool fail = false;
      {
        std::lock_guard<std::mutex> l(mu_);
        queries_.push_back(expr);
        if (expr.find("_bucket") != std::string::npos) {
          fail = fail_ttft_ > 0;
          if (fail) --fail_ttft_;
          ttft_at_.emplace_back(std::chrono::steady_clock::now(), fail);
        }
      }
      if (fail) {
        req.reply(web::http::status_codes::ServiceUnavailable, "busy", "text/plain");
        return;
      }
      json result = json::array();
      auto series = [&](json labels, double v) {
        result.push_back({{"metric", labels}, {"value", {1.0, std::to_string(v)}}});
      };
      if (expr.find("kinfer_sidecar_queue_depth") != std::string::npos) {
        series({{"pod", "prom-0"}}, 40);
      } else if (expr.find("kinfer_sidecar_in_flight") != std::string::npos) {
        series({{"pod", "prom-0"}}, 8);
      } else if (expr.find("_bucket") != std::string::npos) {
        series({{"pod", "prom-0"}, {"le", "0.5"}}, 3);
        series({{"pod", "prom-0"}, {"le", "+Inf"}}, 3);
      }
      json body = {{"status", "success"}, {"data", {{"resultType", "vector"}, {"result", result}}}};
      req.reply(web::http::status_codes::OK, body.dump(), "application/json");
    });
    listener_.open().wait();
  }
  ~FakePrometheus() { listener_.close().wait(); }
  const std::string& url() const { return url_; }
  std::vector<std::string> queries() {
    std::lock_guard<std::mutex> l(mu_);
    return queries_;
  }
  // The next `n` TTFT queries are answered 503.
  void FailNextTtft(int n) {
    std::lock_guard<std::mutex> l(mu_);
    fail_ttft_ = n;
  }
  // When each TTFT query came, and whether it was failed.
  std::vector<std::pair<std::chrono::steady_clock::time_point, bool>> ttft_queries() {
    std::lock_guard<std::mutex> l(mu_);
    return ttft_at_;
  }

 private:
  std::string url_;
  web::http::experimental::listener::http_listener listener_;
  std::mutex mu_;
  std::vector<std::string> queries_;
  int fail_ttft_ = 0;
  std::vector<std::pair<std::chrono::steady_clock::time_point, bool>> ttft_at_;
};

TEST_F(ControllerTest, TheAutoscalerAsksPrometheusWhenTheServiceNamesIt) {
  std::unique_ptr<FakePrometheus> prom_server = OnAFreePort<FakePrometheus>();
  ASSERT_NE(prom_server, nullptr) << "no free loopback port for the fake Prometheus";
  FakePrometheus& prom = *prom_server;
  StartController();
  AutoscaleLoopOptions ao;
  ao.interval = milliseconds(100);
  loop_ = std::make_unique<AutoscaleLoop>(controller_.get(), ao, metrics_.get());
  ASSERT_TRUE(
      client_
          ->Create(
              rs::kInferenceServices, "default",
              Isvc("prom", {{"autoscaling",
                             {{"minReplicas", 1},
                              {"maxReplicas", 3},
                              {"stableWindowSeconds", 6},
                              {"metricsSource",
                               {{"type", "prometheus"}, {"prometheus", {{"url", prom.url()}}}}}}}}))
          .ok());
  ASSERT_TRUE(WaitUntil([&] { return Get(rs::kDeployments, "prom").has_value(); }));
  json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata",
               {{"name", "prom-0"},
                {"namespace", "default"},
                {"labels", {{"serving.kinfer.dev/inferenceservice", "prom"}}}}},
              {"spec", {{"containers", {{{"name", "sidecar"}, {"image", "x"}}}}}}};
  ASSERT_TRUE(client_->Create(rs::kPods, "default", pod).ok());
  ASSERT_TRUE(client_
                  ->MergePatch(rs::kPods, "default", "prom-0",
                               {{"status",
                                 {{"phase", "Running"},
                                  {"conditions", {{{"type", "Ready"}, {"status", "True"}}}}}}},
                               "status")
                  .ok());
  loop_->Start();
  ASSERT_TRUE(WaitUntil([&] { return (*Get(rs::kDeployments, "prom"))["spec"]["replicas"] == 3; },
                        milliseconds(15000)));
  std::this_thread::sleep_for(milliseconds(1500));  // about 15 ticks, 2-3 panic windows
  std::vector<std::string> asked = prom.queries();
  auto has = [&](const std::string& needle) {
    return std::any_of(asked.begin(), asked.end(),
                       [&](const std::string& q) { return q.find(needle) != std::string::npos; });
  };
  EXPECT_TRUE(
      has("sum by (pod) (kinfer_sidecar_queue_depth{namespace=\"default\", pod=~\"prom-.*\"})"));
  EXPECT_TRUE(has("kinfer_sidecar_in_flight{namespace=\"default\""));
  EXPECT_TRUE(has("[1s]")) << "the TTFT increase runs over the panic window (0.6 s, rounded up)";
  // TTFT is asked once per panic window, not every tick.
  const auto ttft_queries = std::count_if(asked.begin(), asked.end(), [](const std::string& q) {
    return q.find("_bucket") != std::string::npos;
  });
  const auto depth_queries = std::count_if(asked.begin(), asked.end(), [](const std::string& q) {
    return q.find("queue_depth") != std::string::npos;
  });
  EXPECT_GE(ttft_queries, 2);
  EXPECT_LT(ttft_queries * 3, depth_queries);

  // A failed TTFT answer leaves its range uncovered: it is asked again at the next tick (100 ms),
  // not a panic window (>= 1 s) later with the failed range counted as covered.
  prom.FailNextTtft(1);
  std::vector<std::pair<std::chrono::steady_clock::time_point, bool>> at;
  ASSERT_TRUE(WaitUntil([&] {
    at = prom.ttft_queries();
    auto failed = std::find_if(at.begin(), at.end(), [](const auto& e) { return e.second; });
    return failed != at.end() && failed + 1 != at.end();
  }));
  auto failed = std::find_if(at.begin(), at.end(), [](const auto& e) { return e.second; });
  EXPECT_LT((failed + 1)->first - failed->first, milliseconds(900))
      << "the failed range was not asked again at once";
}

TEST(ApiServerRestartTest, TheControllerResumesAfterTheApiServerRestarts) {
  char dir[] = "/tmp/kinfer-restart-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string state = std::string(dir) + "/state.json";
  auto server = std::make_unique<testing::TestApiServer>(std::vector<std::string>{
      "--deployment-controller", "--state-file", state, "--bookmark-interval", "0.2"});
  ASSERT_TRUE(server->ok());
  const int port = server->port();
  kube::KubeConfig cfg;
  cfg.server = server->url();
  auto client = std::move(kube::Client::Create(cfg)).value();
  OperatorMetrics metrics;
  ControllerOptions o;
  o.watch.initial_backoff = milliseconds(20);
  o.watch.max_backoff = milliseconds(200);
  o.watch.stream_timeout = milliseconds(3000);
  Controller controller(client.get(), o, &metrics, nullptr);
  controller.StartInformers();
  ASSERT_TRUE(controller.WaitForSync(milliseconds(5000)));
  controller.StartWorkers();
  auto ready = [&](const std::string& name) {
    auto g = client->Get(rs::kInferenceServices, "default", name);
    return g.ok() && Condition(*g, "Ready") == "True";
  };
  ASSERT_TRUE(client->Create(rs::kInferenceServices, "default", Isvc("before")).ok());
  ASSERT_TRUE(WaitUntil([&] { return ready("before"); }));

  server.reset();  // SIGTERM: state saved, watches broken
  server = std::make_unique<testing::TestApiServer>(
      std::vector<std::string>{"--deployment-controller", "--state-file", state,
                               "--bookmark-interval", "0.2", "--port", std::to_string(port)});
  ASSERT_TRUE(server->ok());
  // The first request may meet the connection the old server closed (the client's pool); the
  // operator retries such failures with backoff, and so does this test.
  Status created;
  ASSERT_TRUE(WaitUntil([&] {
    created = client->Create(rs::kInferenceServices, "default", Isvc("after")).status();
    return created.ok() || kube::IsAlreadyExists(created);
  })) << created.ToString();
  EXPECT_TRUE(WaitUntil([&] { return ready("after"); }, milliseconds(15000)));
  EXPECT_TRUE(ready("before"));
  EXPECT_GT(controller.InformerStats().stream_errors + controller.InformerStats().relists, 0);
  controller.Stop();
  std::remove(state.c_str());
  rmdir(dir);
}

}  // namespace
}  // namespace kinfer::controller
