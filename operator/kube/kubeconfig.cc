#include "operator/kube/kubeconfig.h"

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace kinfer::kube {
namespace {

StatusOr<std::string> ReadFile(const std::string& path, const std::string& field) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return InvalidArgument(field + ": cannot read file " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Resolve(const std::string& path, const std::string& base_dir) {
  if (path.empty() || path[0] == '/' || base_dir.empty()) return path;
  return base_dir + "/" + path;
}

std::string TrimSpace(std::string s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  size_t e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

// Finds the entry named `name` in a list of {name, <key>: {...}}; returns its <key> map.
StatusOr<YAML::Node> FindNamed(const YAML::Node& root, const char* list, const char* key,
                               const std::string& name) {
  YAML::Node items = root[list];
  if (!items || !items.IsSequence()) return InvalidArgument(std::string(list) + ": missing");
  for (const YAML::Node& item : items) {
    if (!item.IsMap() || !item["name"]) continue;
    if (item["name"].as<std::string>() != name) continue;
    YAML::Node body = item[key];
    if (!body) body = YAML::Node(YAML::NodeType::Map);
    if (!body.IsMap()) {
      return InvalidArgument(std::string(list) + "[" + name + "]." + key + ": not a map");
    }
    return body;
  }
  return InvalidArgument(std::string(list) + ": no entry named \"" + name + "\"");
}

std::string Str(const YAML::Node& m, const char* key) {
  YAML::Node n = m[key];
  return n && n.IsScalar() ? n.as<std::string>() : std::string();
}

// Fills `pem`/`file` from "<key>-data" (base64) or "<key>" (a path).
Status DataOrFile(const YAML::Node& m, const std::string& prefix, const char* key,
                  const std::string& base_dir, std::string* pem, std::string* file) {
  std::string data_key = std::string(key) + "-data";
  std::string data = Str(m, data_key.c_str());
  if (!data.empty()) {
    StatusOr<std::string> d = Base64Decode(data);
    if (!d.ok()) return d.status().WithContext(prefix + data_key);
    *pem = std::move(d).value();
    return Status();
  }
  std::string path = Str(m, key);
  if (path.empty()) return Status();
  *file = Resolve(path, base_dir);
  KINFER_ASSIGN_OR_RETURN(*pem, ReadFile(*file, prefix + key));
  return Status();
}

StatusOr<KubeConfig> Parse(const YAML::Node& root, std::string_view context_arg,
                           const std::string& base_dir) {
  if (!root.IsMap()) return InvalidArgument("kubeconfig: not a YAML map");
  KubeConfig cfg;
  std::string context(context_arg);
  if (context.empty()) context = Str(root, "current-context");
  if (context.empty()) return InvalidArgument("current-context: missing (and no context given)");
  cfg.context = context;
  KINFER_ASSIGN_OR_RETURN(YAML::Node ctx, FindNamed(root, "contexts", "context", context));
  std::string cluster_name = Str(ctx, "cluster");
  if (cluster_name.empty()) {
    return InvalidArgument("contexts[" + context + "].context.cluster: missing");
  }
  std::string user_name = Str(ctx, "user");
  if (std::string ns = Str(ctx, "namespace"); !ns.empty()) cfg.ns = ns;

  KINFER_ASSIGN_OR_RETURN(YAML::Node cluster,
                          FindNamed(root, "clusters", "cluster", cluster_name));
  std::string cprefix = "clusters[" + cluster_name + "].cluster.";
  cfg.server = Str(cluster, "server");
  if (cfg.server.empty()) return InvalidArgument(cprefix + "server: missing");
  if (cfg.server.rfind("https://", 0) != 0 && cfg.server.rfind("http://", 0) != 0) {
    return InvalidArgument(cprefix + "server: \"" + cfg.server + "\" is not an http(s) URL");
  }
  while (!cfg.server.empty() && cfg.server.back() == '/') cfg.server.pop_back();
  if (YAML::Node n = cluster["insecure-skip-tls-verify"]; n) {
    try {
      cfg.insecure_skip_tls_verify = n.as<bool>();
    } catch (const YAML::Exception&) {
      return InvalidArgument(cprefix + "insecure-skip-tls-verify: not a bool");
    }
  }
  KINFER_RETURN_IF_ERROR(DataOrFile(cluster, cprefix, "certificate-authority", base_dir,
                                    &cfg.ca_pem, &cfg.ca_file));

  if (!user_name.empty()) {
    KINFER_ASSIGN_OR_RETURN(YAML::Node user, FindNamed(root, "users", "user", user_name));
    std::string uprefix = "users[" + user_name + "].user.";
    cfg.token = Str(user, "token");
    if (cfg.token.empty()) {
      if (std::string f = Str(user, "tokenFile"); !f.empty()) {
        cfg.token_file = Resolve(f, base_dir);
        KINFER_ASSIGN_OR_RETURN(std::string t, ReadFile(cfg.token_file, uprefix + "tokenFile"));
        cfg.token = TrimSpace(std::move(t));
      }
    }
    KINFER_RETURN_IF_ERROR(DataOrFile(user, uprefix, "client-certificate", base_dir,
                                      &cfg.client_cert_pem, &cfg.client_cert_file));
    KINFER_RETURN_IF_ERROR(DataOrFile(user, uprefix, "client-key", base_dir,
                                      &cfg.client_key_pem, &cfg.client_key_file));
    if (cfg.client_cert_pem.empty() != cfg.client_key_pem.empty()) {
      return InvalidArgument(uprefix + "client-certificate and client-key: give both or neither");
    }
    if (user["exec"] || user["auth-provider"]) {
      if (cfg.token.empty() && cfg.client_cert_pem.empty()) {
        return Unimplemented(uprefix + "exec/auth-provider: not supported; use a token or a "
                                       "client certificate");
      }
    }
  }
  return cfg;
}

}  // namespace

StatusOr<std::string> Base64Decode(std::string_view in) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;
    if (c == '/' || c == '_') return 63;
    return -1;
  };
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  bool padding = false;
  for (char c : in) {
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    if (c == '=') {
      padding = true;
      continue;
    }
    int v = value(c);
    if (v < 0 || padding) return InvalidArgument("invalid base64");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  if (bits >= 6) return InvalidArgument("invalid base64 length");
  return out;
}

StatusOr<KubeConfig> ParseKubeconfig(std::string_view yaml, std::string_view context,
                                     const std::string& base_dir) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return InvalidArgument(std::string("kubeconfig: invalid YAML: ") + e.what());
  }
  try {
    return Parse(root, context, base_dir);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(std::string("kubeconfig: ") + e.what());
  }
}

StatusOr<KubeConfig> LoadKubeconfigFile(const std::string& path, std::string_view context) {
  KINFER_ASSIGN_OR_RETURN(std::string text, ReadFile(path, "kubeconfig"));
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  if (dir.empty()) dir = "/";
  StatusOr<KubeConfig> cfg = ParseKubeconfig(text, context, dir);
  if (!cfg.ok()) return cfg.status().WithContext(path);
  return cfg;
}

InClusterEnv InClusterEnv::FromProcess() {
  InClusterEnv env;
  if (const char* h = std::getenv("KUBERNETES_SERVICE_HOST")) env.host = h;
  if (const char* p = std::getenv("KUBERNETES_SERVICE_PORT")) env.port = p;
  return env;
}

StatusOr<KubeConfig> LoadInCluster(const InClusterEnv& env) {
  if (env.host.empty() || env.port.empty()) {
    return FailedPrecondition(
        "not running in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be "
        "set (or give --kubeconfig / KUBECONFIG)");
  }
  KubeConfig cfg;
  std::string host = env.host;
  if (host.find(':') != std::string::npos) host = "[" + host + "]";  // IPv6
  cfg.server = "https://" + host + ":" + env.port;
  cfg.token_file = env.token_path;
  KINFER_ASSIGN_OR_RETURN(std::string token, ReadFile(env.token_path, "service account token"));
  cfg.token = TrimSpace(std::move(token));
  cfg.ca_file = env.ca_path;
  KINFER_ASSIGN_OR_RETURN(cfg.ca_pem, ReadFile(env.ca_path, "service account ca.crt"));
  std::ifstream ns(env.namespace_path);
  if (ns) {
    std::string n;
    std::getline(ns, n);
    n = TrimSpace(n);
    if (!n.empty()) cfg.ns = n;
  }
  return cfg;
}

StatusOr<KubeConfig> LoadDefault(
    const std::string& kubeconfig_flag, std::string_view context,
    const std::function<std::optional<std::string>(const char*)>& getenv,
    const InClusterEnv* in_cluster) {
  if (!kubeconfig_flag.empty()) return LoadKubeconfigFile(kubeconfig_flag, context);
  std::optional<std::string> env;
  if (getenv) {
    env = getenv("KUBECONFIG");
  } else if (const char* e = std::getenv("KUBECONFIG")) {
    env = std::string(e);
  }
  if (env.has_value() && !env->empty()) {
    std::string first = env->substr(0, env->find(':'));
    return LoadKubeconfigFile(first, context);
  }
  if (in_cluster != nullptr) return LoadInCluster(*in_cluster);
  return LoadInCluster(InClusterEnv::FromProcess());
}

}  // namespace kinfer::kube
