// The REST client against the real test API server (tests/kube/apiserver).
#include "operator/kube/client.h"

#include <cpprest/http_listener.h>
#include <gtest/gtest.h>

#include <fstream>
#include <mutex>
#include <thread>

#include "tests/operator/api/yaml_to_json.h"
#include "tests/operator/kube/test_apiserver.h"

namespace kinfer::kube {
namespace {

namespace rs = resources;

class ClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new testing::TestApiServer(); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(server_->ok()) << "the test API server did not start";
    server_->Post("/_test/reset");
    KubeConfig cfg;
    cfg.server = server_->url();
    cfg.token = "test-token";
    ClientOptions opts;
    opts.request_timeout = std::chrono::milliseconds(2000);
    auto c = Client::Create(cfg, opts);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    client_ = std::move(c).value();
  }

  static json ConfigMap(const std::string& name, const std::string& value) {
    return {{"apiVersion", "v1"},
            {"kind", "ConfigMap"},
            {"metadata", {{"name", name}, {"labels", {{"app", "kinfer"}}}}},
            {"data", {{"k", value}}}};
  }

  static testing::TestApiServer* server_;
  std::unique_ptr<Client> client_;
};
testing::TestApiServer* ClientTest::server_ = nullptr;

TEST_F(ClientTest, PathsFollowTheRestLayout) {
  EXPECT_EQ(Client::Path(rs::kConfigMaps, "ns", "a"), "/api/v1/namespaces/ns/configmaps/a");
  EXPECT_EQ(Client::Path(rs::kInferenceServices, "ns", "a", "status"),
            "/apis/serving.kinfer.dev/v1alpha1/namespaces/ns/inferenceservices/a/status");
  EXPECT_EQ(Client::Path(rs::kNamespaces, "ignored", "x"), "/api/v1/namespaces/x");
  EXPECT_EQ(Client::Path(rs::kDeployments, ""), "/apis/apps/v1/deployments");
}

TEST_F(ClientTest, ConfigMapRoundTrip) {
  StatusOr<json> created = client_->Create(rs::kConfigMaps, "default", ConfigMap("cm", "v1"));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_FALSE((*created)["metadata"]["uid"].get<std::string>().empty());

  StatusOr<json> got = client_->Get(rs::kConfigMaps, "default", "cm");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ((*got)["data"]["k"], "v1");

  (void)client_->Create(rs::kConfigMaps, "default", [] {
    json o = ConfigMap("other", "x");
    o["metadata"]["labels"]["app"] = "else";
    return o;
  }());
  ListOptions lo;
  lo.label_selector = "app=kinfer";
  StatusOr<json> list = client_->List(rs::kConfigMaps, "default", lo);
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ((*list)["items"].size(), 1u);
  EXPECT_FALSE((*list)["metadata"]["resourceVersion"].get<std::string>().empty());

  json upd = *got;
  upd["data"]["k"] = "v2";
  StatusOr<json> updated = client_->Update(rs::kConfigMaps, "default", upd);
  ASSERT_TRUE(updated.ok()) << updated.status().ToString();
  EXPECT_EQ((*updated)["data"]["k"], "v2");

  StatusOr<json> patched =
      client_->MergePatch(rs::kConfigMaps, "default", "cm", {{"data", {{"p", "q"}}}});
  ASSERT_TRUE(patched.ok()) << patched.status().ToString();
  EXPECT_EQ((*patched)["data"]["k"], "v2");
  EXPECT_EQ((*patched)["data"]["p"], "q");

  ASSERT_TRUE(client_->Delete(rs::kConfigMaps, "default", "cm").ok());
  Status gone = client_->Get(rs::kConfigMaps, "default", "cm").status();
  EXPECT_TRUE(IsNotFound(gone)) << gone.ToString();
  EXPECT_EQ(gone.code(), StatusCode::kNotFound);
  EXPECT_TRUE(IsNotFound(client_->Delete(rs::kConfigMaps, "default", "cm")));
}

TEST_F(ClientTest, CreateTwiceIsAlreadyExists) {
  ASSERT_TRUE(client_->Create(rs::kConfigMaps, "default", ConfigMap("cm", "a")).ok());
  Status s = client_->Create(rs::kConfigMaps, "default", ConfigMap("cm", "a")).status();
  EXPECT_TRUE(IsAlreadyExists(s)) << s.ToString();
  EXPECT_EQ(ErrorOf(s).http_code, 409);
}

TEST_F(ClientTest, StaleUpdateIsConflict) {
  StatusOr<json> v1 = client_->Create(rs::kConfigMaps, "default", ConfigMap("cm", "a"));
  ASSERT_TRUE(v1.ok());
  json first = *v1;
  first["data"]["k"] = "b";
  ASSERT_TRUE(client_->Update(rs::kConfigMaps, "default", first).ok());
  first["data"]["k"] = "c";  // still carries the old resourceVersion
  Status s = client_->Update(rs::kConfigMaps, "default", first).status();
  EXPECT_TRUE(IsConflict(s)) << s.ToString();
  EXPECT_EQ(ErrorOf(s).http_code, 409);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
}

TEST_F(ClientTest, InferenceServiceRoundTripWithStatusAndUidPrecondition) {
  json isvc = testing::LoadYamlFile(std::string(KINFER_SOURCE_DIR) + "/crds/samples/minimal.yaml");
  StatusOr<json> created = client_->Create(rs::kInferenceServices, "default", isvc);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_EQ((*created)["metadata"]["generation"], 1);
  std::string uid = (*created)["metadata"]["uid"];

  json with_status = *created;
  with_status["status"] = {{"replicas", 2}};
  StatusOr<json> st = client_->UpdateStatus(rs::kInferenceServices, "default", with_status);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ((*st)["status"]["replicas"], 2);
  EXPECT_EQ((*st)["metadata"]["generation"], 1) << "a status write does not bump generation";

  StatusOr<json> scaled = client_->MergePatch(rs::kInferenceServices, "default", "smollm2",
                                              {{"spec", {{"replicas", 3}}}}, "scale");
  // The sample's autoscaler is on: the CRD's CEL rule refuses a scale write (422 Invalid).
  if (!scaled.ok()) {
    EXPECT_TRUE(IsInvalid(scaled.status())) << scaled.status().ToString();
  }

  DeleteOptions wrong;
  wrong.precondition_uid = "not-the-uid";
  Status s = client_->Delete(rs::kInferenceServices, "default", "smollm2", wrong);
  EXPECT_TRUE(IsConflict(s)) << s.ToString();
  DeleteOptions right;
  right.precondition_uid = uid;
  EXPECT_TRUE(client_->Delete(rs::kInferenceServices, "default", "smollm2", right).ok());
  EXPECT_TRUE(IsNotFound(client_->Get(rs::kInferenceServices, "default", "smollm2").status()));
}

TEST_F(ClientTest, SchemaViolationIsInvalid) {
  json isvc = testing::LoadYamlFile(std::string(KINFER_SOURCE_DIR) + "/crds/samples/minimal.yaml");
  isvc["spec"].erase("model");
  Status s = client_->Create(rs::kInferenceServices, "default", isvc).status();
  EXPECT_TRUE(IsInvalid(s)) << s.ToString();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
}

TEST_F(ClientTest, TooManyRequestsCarriesRetryAfter) {
  server_->Post(
      "/_test/faults",
      {{"nextErrors", 1}, {"nextErrorCode", 429}, {"retryAfterSeconds", 7}, {"verbs", {"get"}}});
  Status s = client_->Get(rs::kConfigMaps, "default", "anything").status();
  EXPECT_TRUE(IsTooManyRequests(s)) << s.ToString();
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  ApiError e = ErrorOf(s);
  EXPECT_EQ(e.http_code, 429);
  ASSERT_TRUE(e.retry_after.has_value());
  EXPECT_EQ(*e.retry_after, std::chrono::seconds(7));
  // The fault is spent: the next call gets the real answer.
  EXPECT_TRUE(IsNotFound(client_->Get(rs::kConfigMaps, "default", "anything").status()));
}

TEST_F(ClientTest, ServerErrorIsUnavailable) {
  server_->Post("/_test/faults", {{"nextErrors", 1}, {"nextErrorCode", 503}});
  Status s = client_->List(rs::kConfigMaps, "default").status();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
}

TEST_F(ClientTest, SlowServerHitsTheRequestTimeout) {
  KubeConfig cfg;
  cfg.server = server_->url();
  ClientOptions opts;
  opts.request_timeout = std::chrono::milliseconds(200);
  auto c = Client::Create(cfg, opts);
  ASSERT_TRUE(c.ok());
  server_->Post("/_test/faults", {{"latencyMs", 1500}, {"verbs", {"list"}}});
  Status s = (*c)->List(rs::kConfigMaps, "default").status();
  server_->Post("/_test/faults", {{"clear", true}});
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
}

TEST_F(ClientTest, UnreachableServerIsUnavailable) {
  KubeConfig cfg;
  cfg.server = "http://127.0.0.1:1";
  auto c = Client::Create(cfg);
  ASSERT_TRUE(c.ok());
  Status s = (*c)->Get(rs::kConfigMaps, "default", "x").status();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
}

TEST(ClientTokenTest, ARotatedTokenFileIsReread) {
  // A server that records the Authorization header of each request.
  std::mutex mu;
  std::vector<std::string> seen;
  int port = 0;
  for (int p = 38100; p < 38200 && port == 0; ++p) {
    web::http::experimental::listener::http_listener l("http://127.0.0.1:" + std::to_string(p));
    try {
      l.open().wait();
      l.close().wait();
      port = p;
    } catch (const std::exception&) {
    }
  }
  ASSERT_NE(port, 0);
  web::http::experimental::listener::http_listener server("http://127.0.0.1:" +
                                                          std::to_string(port));
  server.support([&](web::http::http_request req) {
    std::lock_guard<std::mutex> l(mu);
    seen.push_back(req.headers().has("Authorization") ? req.headers()["Authorization"] : "");
    req.reply(200, "{}", "application/json");
  });
  server.open().wait();

  char dir[] = "/tmp/kinfer-token-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/token";
  std::ofstream(path) << "first\n";
  KubeConfig cfg;
  cfg.server = "http://127.0.0.1:" + std::to_string(port);
  cfg.token = "first";
  cfg.token_file = path;
  ClientOptions o;
  o.token_refresh = std::chrono::milliseconds(50);
  auto c = std::move(Client::Create(cfg, o)).value();
  ASSERT_TRUE(c->Get(resources::kConfigMaps, "default", "x").ok());
  std::ofstream(path) << "second\n";  // the kubelet rotated the projected token
  ASSERT_TRUE(c->Get(resources::kConfigMaps, "default", "x").ok());  // within the refresh period
  std::this_thread::sleep_for(std::chrono::milliseconds(80));
  ASSERT_TRUE(c->Get(resources::kConfigMaps, "default", "x").ok());
  std::remove(path.c_str());  // a failed read keeps the last token
  std::this_thread::sleep_for(std::chrono::milliseconds(80));
  ASSERT_TRUE(c->Get(resources::kConfigMaps, "default", "x").ok());
  server.close().wait();
  rmdir(dir);
  std::lock_guard<std::mutex> l(mu);
  EXPECT_EQ(seen, (std::vector<std::string>{"Bearer first", "Bearer first", "Bearer second",
                                            "Bearer second"}));
}

TEST(ErrorOfTest, ParsesMetaV1Status) {
  Status s = StatusFromHttp(
      410,
      R"({"kind":"Status","code":410,"reason":"Expired","message":"too old resource version"})");
  EXPECT_TRUE(IsGone(s));
  EXPECT_EQ(ErrorOf(s).reason, "Expired");
  Status t = StatusFromHttp(429, "not json", "3");
  EXPECT_EQ(ErrorOf(t).reason, "TooManyRequests");
  EXPECT_EQ(ErrorOf(t).retry_after, std::chrono::seconds(3));
  EXPECT_EQ(ErrorOf(Status()).http_code, 0);
}

}  // namespace
}  // namespace kinfer::kube
