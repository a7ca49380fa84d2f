// A small typed REST client for the Kubernetes API over cpprestsdk: get, list, create, update
// (PUT), merge patch, delete (with preconditions) and status writes on any resource described by
// a ResourceType, with JSON (nlohmann) bodies.
//
// Errors: a non-2xx answer becomes a Status whose message starts with the Kubernetes reason and
// the HTTP code, "Conflict (409): ...", and ends with " [retry after Ns]" when the server sent
// Retry-After. ErrorOf(status) reads them back so callers branch on the reason (IsNotFound,
// IsConflict, ...) rather than on StatusCode, which is only a coarse kind:
//   404 NotFound -> kNotFound; 409 AlreadyExists/Conflict -> kFailedPrecondition;
//   400/422 BadRequest/Invalid -> kInvalidArgument; 410 Gone/Expired -> kOutOfRange;
//   429 TooManyRequests -> kResourceExhausted; 500/503/504 and transport errors -> kUnavailable;
//   401/403 -> kFailedPrecondition; timeouts -> kDeadlineExceeded.
//
// Transport: https with the kubeconfig's CA (or the system roots), client certificate and bearer
// token; plain http when the server URL says so (the test API server). Every call has the
// request timeout of ClientOptions; a watch uses OpenStream with its own (longer) timeout.
//
// Thread safety: a Client is immutable after Create, and cpprestsdk's http_client may be used
// from any number of threads at once; so may a Client.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include <cpprest/http_client.h>
#include <nlohmann/json.hpp>

#include "common/status.h"
#include "operator/kube/kubeconfig.h"

namespace kinfer::kube {

using nlohmann::json;

// Which REST collection: /api/v1/... when group is empty, else /apis/{group}/{version}/...
struct ResourceType {
  std::string group;
  std::string version;
  std::string plural;
  bool namespaced = true;
};

// The kinds the operator uses.
namespace resources {
inline const ResourceType kConfigMaps{"", "v1", "configmaps", true};
inline const ResourceType kServices{"", "v1", "services", true};
inline const ResourceType kPods{"", "v1", "pods", true};
inline const ResourceType kEvents{"", "v1", "events", true};
inline const ResourceType kNamespaces{"", "v1", "namespaces", false};
inline const ResourceType kDeployments{"apps", "v1", "deployments", true};
inline const ResourceType kPodDisruptionBudgets{"policy", "v1", "poddisruptionbudgets", true};
inline const ResourceType kLeases{"coordination.k8s.io", "v1", "leases", true};
inline const ResourceType kInferenceServices{"serving.kinfer.dev", "v1alpha1", "inferenceservices",
                                             true};
}  // namespace resources

// What a failed call said, read back from its Status.
struct ApiError {
  std::string
      reason;         // "NotFound", "Conflict", "Expired", "TooManyRequests", ... or "" (transport)
  int http_code = 0;  // 0 for transport errors and timeouts
  std::optional<std::chrono::seconds> retry_after;
};
ApiError ErrorOf(const Status& status);
inline bool IsNotFound(const Status& s) { return ErrorOf(s).reason == "NotFound"; }
inline bool IsAlreadyExists(const Status& s) { return ErrorOf(s).reason == "AlreadyExists"; }
inline bool IsConflict(const Status& s) { return ErrorOf(s).reason == "Conflict"; }
inline bool IsInvalid(const Status& s) { return ErrorOf(s).reason == "Invalid"; }
inline bool IsGone(const Status& s) {
  ApiError e = ErrorOf(s);
  return e.http_code == 410 || e.reason == "Expired" || e.reason == "Gone";
}
inline bool IsTooManyRequests(const Status& s) { return ErrorOf(s).reason == "TooManyRequests"; }

// Builds the Status for an HTTP error answer (exposed for the watch's in-stream ERROR events).
// `body` is a metav1.Status (or anything); `retry_after_header` the header's value, if any.
Status StatusFromHttp(int http_code, const std::string& body,
                      const std::string& retry_after_header = {});

struct ClientOptions {
  std::chrono::milliseconds request_timeout{30000};
  std::string user_agent = "kinfer-operator";
  // How often the token is reread from the kubeconfig's tokenFile (or the service account's).
  std::chrono::milliseconds token_refresh{60000};
};

struct ListOptions {
  std::string label_selector;
  std::string field_selector;
  std::string resource_version;  // "" = most recent
  int64_t limit = 0;             // 0 = no paging
  std::string continue_token;
};

struct DeleteOptions {
  std::optional<std::string> precondition_uid;
  std::optional<std::string> precondition_resource_version;
  std::string propagation_policy;  // "", "Background", "Foreground", "Orphan"
};

class Client {
 public:
  // InvalidArgument when the config cannot make a client (bad URL).
  static StatusOr<std::unique_ptr<Client>> Create(const KubeConfig& config,
                                                  ClientOptions options = {});

  // `ns` is ignored for cluster-scoped resources. Each returns the object the server answered.
  StatusOr<json> Get(const ResourceType& rt, const std::string& ns, const std::string& name) const;
  // The whole list object (items, metadata.resourceVersion, metadata.continue).
  StatusOr<json> List(const ResourceType& rt, const std::string& ns,
                      const ListOptions& options = {}) const;
  // Namespace from `ns` (the object's own metadata.namespace is left to the server to check).
  StatusOr<json> Create(const ResourceType& rt, const std::string& ns, const json& object) const;
  // PUT to metadata.name; a stale metadata.resourceVersion is Conflict.
  StatusOr<json> Update(const ResourceType& rt, const std::string& ns, const json& object) const;
  // PUT to the status subresource.
  StatusOr<json> UpdateStatus(const ResourceType& rt, const std::string& ns,
                              const json& object) const;
  // application/merge-patch+json (RFC 7386); `subresource` e.g. "status" or "scale".
  StatusOr<json> MergePatch(const ResourceType& rt, const std::string& ns, const std::string& name,
                            const json& patch, const std::string& subresource = {}) const;
  // OK when deleted or marked for deletion (finalizers); NotFound when absent; Conflict when a
  // precondition fails.
  Status Delete(const ResourceType& rt, const std::string& ns, const std::string& name,
                const DeleteOptions& options = {}) const;

  // A GET whose body is read incrementally by the caller (watch streams). Returns once the
  // headers arrive; the response's status is not checked. `timeout` bounds the request (cpprestsdk
  // restarts it on each read). The stream keeps its own http_client alive.
  struct Stream {
    std::shared_ptr<web::http::client::http_client> http;
    web::http::http_response response;
  };
  StatusOr<Stream> OpenStream(const std::string& path_and_query, std::chrono::milliseconds timeout,
                              const pplx::cancellation_token& cancel) const;

  // "/api/v1/namespaces/ns/configmaps[/name[/sub]]" (no query).
  static std::string Path(const ResourceType& rt, const std::string& ns,
                          const std::string& name = {}, const std::string& subresource = {});
  const KubeConfig& config() const { return config_; }

 private:
  Client(KubeConfig config, ClientOptions options);
  web::http::client::http_client_config MakeConfig(std::chrono::milliseconds timeout) const;
  StatusOr<json> Do(const web::http::method& method, const std::string& path_and_query,
                    const json* body, const std::string& content_type) const;

  // The bearer token: config_.token, reread from config_.token_file at most every
  // options_.token_refresh (as client-go's cached token source does) so a rotated projected service
  // account token is picked up; a failed read keeps the last token.
  std::string Token() const;

  KubeConfig config_;
  ClientOptions options_;
  mutable std::mutex token_mu_;
  mutable std::string token_;                                      // protected by token_mu_
  mutable std::chrono::steady_clock::time_point token_read_at_{};  // protected by token_mu_
  std::unique_ptr<web::http::client::http_client> http_;
};

}  // namespace kinfer::kube
