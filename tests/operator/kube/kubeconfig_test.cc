#include "operator/kube/kubeconfig.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace kinfer::kube {
namespace {

constexpr char kTwoContexts[] = R"(
apiVersion: v1
kind: Config
current-context: dev
clusters:
- name: dev-cluster
  cluster:
    server: http://127.0.0.1:8001/
- name: prod-cluster
  cluster:
    server: https://prod.example:6443
    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==
    insecure-skip-tls-verify: false
contexts:
- name: dev
  context: {cluster: dev-cluster, user: dev-user, namespace: team-a}
- name: prod
  context: {cluster: prod-cluster, user: prod-user}
users:
- name: dev-user
  user:
    token: abc123
- name: prod-user
  user:
    client-certificate-data: Y2VydA==
    client-key-data: a2V5
)";

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/kubeconfig_test.XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string Write(const std::string& name, const std::string& text) const {
    std::string p = path_ + "/" + name;
    std::ofstream(p) << text;
    return p;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(KubeconfigTest, CurrentContextWithToken) {
  StatusOr<KubeConfig> cfg = ParseKubeconfig(kTwoContexts);
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->server, "http://127.0.0.1:8001");
  EXPECT_EQ(cfg->token, "abc123");
  EXPECT_EQ(cfg->ns, "team-a");
  EXPECT_EQ(cfg->context, "dev");
  EXPECT_TRUE(cfg->ca_pem.empty());
}

TEST(KubeconfigTest, NamedContextWithClientCertAndCaData) {
  StatusOr<KubeConfig> cfg = ParseKubeconfig(kTwoContexts, "prod");
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->server, "https://prod.example:6443");
  EXPECT_EQ(cfg->ca_pem, "-----BEGIN CERTIFICATE-----\n");
  EXPECT_EQ(cfg->client_cert_pem, "cert");
  EXPECT_EQ(cfg->client_key_pem, "key");
  EXPECT_EQ(cfg->ns, "default");
  EXPECT_FALSE(cfg->insecure_skip_tls_verify);
}

TEST(KubeconfigTest, ErrorsNameTheField) {
  auto err = [](const std::string& yaml, std::string_view ctx = {}) {
    StatusOr<KubeConfig> cfg = ParseKubeconfig(yaml, ctx);
    EXPECT_FALSE(cfg.ok());
    return cfg.status().message();
  };
  EXPECT_NE(err(kTwoContexts, "nope").find("contexts: no entry named \"nope\""),
            std::string::npos);
  EXPECT_NE(err("clusters: []\n").find("current-context"), std::string::npos);
  EXPECT_NE(err(R"(
current-context: c
contexts: [{name: c, context: {cluster: x}}]
clusters: [{name: x, cluster: {}}]
)").find("clusters[x].cluster.server: missing"),
            std::string::npos);
  EXPECT_NE(err(R"(
current-context: c
contexts: [{name: c, context: {cluster: x}}]
clusters: [{name: x, cluster: {server: "ftp://a"}}]
)").find("clusters[x].cluster.server"),
            std::string::npos);
  EXPECT_NE(err(R"(
current-context: c
contexts: [{name: c, context: {cluster: x}}]
clusters: [{name: x, cluster: {server: "https://a", certificate-authority-data: "!!"}}]
)").find("clusters[x].cluster.certificate-authority-data"),
            std::string::npos);
  EXPECT_NE(err(R"(
current-context: c
contexts: [{name: c, context: {cluster: x, user: u}}]
clusters: [{name: x, cluster: {server: "https://a"}}]
users: [{name: u, user: {client-certificate-data: Y2VydA==}}]
)").find("users[u].user.client-certificate and client-key"),
            std::string::npos);
  EXPECT_NE(err("a: [").find("invalid YAML"), std::string::npos);
}

TEST(KubeconfigTest, RelativeFilesResolveAgainstTheKubeconfigDir) {
  TempDir dir;
  dir.Write("ca.crt", "CA PEM");
  dir.Write("token", "tok-from-file\n");
  std::string path = dir.Write("config", R"(
current-context: c
contexts: [{name: c, context: {cluster: x, user: u}}]
clusters: [{name: x, cluster: {server: "https://a:6443", certificate-authority: ca.crt}}]
users: [{name: u, user: {tokenFile: token}}]
)");
  StatusOr<KubeConfig> cfg = LoadKubeconfigFile(path);
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->ca_pem, "CA PEM");
  EXPECT_EQ(cfg->ca_file, dir.path() + "/ca.crt");
  EXPECT_EQ(cfg->token, "tok-from-file");
  EXPECT_EQ(cfg->token_file, dir.path() + "/token");
}

TEST(KubeconfigTest, MissingReferencedFileNamesTheField) {
  StatusOr<KubeConfig> cfg = ParseKubeconfig(R"(
current-context: c
contexts: [{name: c, context: {cluster: x}}]
clusters: [{name: x, cluster: {server: "https://a", certificate-authority: /nonexistent/ca}}]
)");
  ASSERT_FALSE(cfg.ok());
  EXPECT_NE(cfg.status().message().find("clusters[x].cluster.certificate-authority"),
            std::string::npos);
}

TEST(KubeconfigTest, InClusterFromInjectedPaths) {
  TempDir dir;
  InClusterEnv env;
  env.host = "10.0.0.1";
  env.port = "443";
  env.token_path = dir.Write("token", "sa-token\n");
  env.ca_path = dir.Write("ca.crt", "SA CA");
  env.namespace_path = dir.Write("namespace", "kinfer-system\n");
  StatusOr<KubeConfig> cfg = LoadInCluster(env);
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->server, "https://10.0.0.1:443");
  EXPECT_EQ(cfg->token, "sa-token");
  EXPECT_EQ(cfg->ca_pem, "SA CA");
  EXPECT_EQ(cfg->ns, "kinfer-system");
}

TEST(KubeconfigTest, InClusterWithoutEnvIsFailedPrecondition) {
  StatusOr<KubeConfig> cfg = LoadInCluster(InClusterEnv{});
  ASSERT_FALSE(cfg.ok());
  EXPECT_EQ(cfg.status().code(), StatusCode::kFailedPrecondition);
}

TEST(KubeconfigTest, LoadDefaultOrder) {
  TempDir dir;
  std::string flag = dir.Write("flag", kTwoContexts);
  std::string envfile = dir.Write("env", R"(
current-context: c
contexts: [{name: c, context: {cluster: x}}]
clusters: [{name: x, cluster: {server: "http://from-env:1"}}]
)");
  auto getenv = [&](const char* name) -> std::optional<std::string> {
    if (std::string(name) == "KUBECONFIG") return envfile + ":/other";
    return std::nullopt;
  };
  StatusOr<KubeConfig> a = LoadDefault(flag, {}, getenv);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->server, "http://127.0.0.1:8001");
  StatusOr<KubeConfig> b = LoadDefault("", {}, getenv);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->server, "http://from-env:1");
  InClusterEnv none;
  StatusOr<KubeConfig> c =
      LoadDefault("", {}, [](const char*) { return std::optional<std::string>(); }, &none);
  EXPECT_EQ(c.status().code(), StatusCode::kFailedPrecondition);
}

TEST(Base64Test, DecodesWithAndWithoutPadding) {
  EXPECT_EQ(*Base64Decode("aGVsbG8="), "hello");
  EXPECT_EQ(*Base64Decode("aGVsbG8"), "hello");
  EXPECT_EQ(*Base64Decode("aGVs\nbG8h"), "hello!");
  EXPECT_FALSE(Base64Decode("a").ok());
  EXPECT_FALSE(Base64Decode("a*bc").ok());
}

}  // namespace
}  // namespace kinfer::kube
