// Where the API server is and how to authenticate: a kubeconfig file (`--kubeconfig`, then
// $KUBECONFIG) or, when neither is given, the in-cluster service account.
//
// Parsing is pure (text in, value out); errors are InvalidArgument naming the kubeconfig field
// (`clusters[prod].cluster.server: missing`). Relative file paths in a kubeconfig are resolved
// against the kubeconfig's directory, as kubectl does. Files named by the config (CA, token,
// client certificate and key) are read at load time, so a loaded KubeConfig is self-contained;
// token_file is kept so a client can reread a rotated service account token.
//
// Thread safety: plain values and free functions; no shared state.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace kinfer::kube {

struct KubeConfig {
  std::string server;            // "https://host:6443" or "http://127.0.0.1:8001"; no trailing '/'
  std::string ca_pem;            // PEM bundle to trust; empty: the system's roots
  std::string ca_file;           // where ca_pem came from (if a file)
  bool insecure_skip_tls_verify = false;
  std::string token;             // bearer token; empty: none
  std::string token_file;        // where token came from (if a file); reread to rotate
  std::string client_cert_pem;   // client certificate (mTLS); empty: none
  std::string client_key_pem;
  std::string client_cert_file;  // where they came from (if files)
  std::string client_key_file;
  std::string ns = "default";    // the context's namespace (or the service account's)
  std::string context;           // the context used ("" for in-cluster)
};

// Parses a kubeconfig. `context` empty: current-context. `base_dir`: directory relative paths are
// resolved against ("" = as given). Reads the files the config names.
StatusOr<KubeConfig> ParseKubeconfig(std::string_view yaml, std::string_view context = {},
                                     const std::string& base_dir = {});
// Reads and parses a kubeconfig file.
StatusOr<KubeConfig> LoadKubeconfigFile(const std::string& path, std::string_view context = {});

// The in-cluster environment. FromProcess() reads KUBERNETES_SERVICE_HOST/PORT and uses the
// standard service account paths; tests fill it by hand.
struct InClusterEnv {
  std::string host;
  std::string port;
  std::string token_path = "/var/run/secrets/kubernetes.io/serviceaccount/token";
  std::string ca_path = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";
  std::string namespace_path = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";
  static InClusterEnv FromProcess();
};

// https://host:port with the service account token and CA. FailedPrecondition when host or port
// is unset (not in a cluster); InvalidArgument when the token cannot be read.
StatusOr<KubeConfig> LoadInCluster(const InClusterEnv& env);

// The operator's rule: `kubeconfig_flag` if set, else $KUBECONFIG (its first entry), else
// in-cluster. `getenv` is injectable for tests (default: std::getenv).
StatusOr<KubeConfig> LoadDefault(
    const std::string& kubeconfig_flag, std::string_view context = {},
    const std::function<std::optional<std::string>(const char*)>& getenv = {},
    const InClusterEnv* in_cluster = nullptr);

// Standard base64 (with or without padding; whitespace ignored). InvalidArgument on bad input.
StatusOr<std::string> Base64Decode(std::string_view in);

}  // namespace kinfer::kube
