// InferenceService (serving.kinfer.dev/v1alpha1): the C++ types of the CRD
// (crds/serving.kinfer.dev_inferenceservices.yaml, reference docs/crd.md) and their JSON.
//
// Contract:
//  * Every field of the schema has a member here; every default of the schema is the member's
//    default, so a parsed object always holds effective values. ParseInferenceService applies them
//    itself (a defensive copy of what the API server does: objects stored before a default
//    existed, or written with validation off, still parse to the same values).
//  * ParseInferenceService also makes the checks the schema cannot express (docs/crd.md "Rules
//    across fields" and the sidecar's own rules, such as cache.maxEntryBytes <= cache.maxBytes, a
//    stats window that is a multiple of its bucket, extraArgs that would move the runtime off the
//    pod layout) and re-checks the CEL rules. A failure is INVALID_ARGUMENT whose message starts
//    with the field path ("spec.sidecar.cache.maxEntryBytes: ..."): the reconciler turns it into a
//    condition with reason InvalidSpec and changes nothing; it never crashes or hot-loops on it.
//  * Unknown fields are ignored (the API server prunes them; newer fields stay readable).
//
// Pure: no I/O. Thread-safe (plain values, no shared state).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace kinfer::api {

inline constexpr char kGroup[] = "serving.kinfer.dev";
inline constexpr char kApiVersion[] = "serving.kinfer.dev/v1alpha1";
inline constexpr char kKind[] = "InferenceService";

// A duration as written ("30s") and its value.
struct DurationValue {
  std::string text;
  std::chrono::nanoseconds value{0};
};

// A byte size as written ("64MiB", or an integer as its decimal text) and its value.
struct ByteSize {
  std::string text;
  uint64_t bytes = 0;
};

struct ObjectMeta {
  std::string name;
  std::string namespace_name;
  std::string uid;
  std::string resource_version;
  int64_t generation = 0;
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
  bool deleting = false;  // metadata.deletionTimestamp is set
};

// Where a model file comes from (from ModelSpec::uri).
enum class ModelSource { kPvc, kHostPath, kHttp };

struct ModelSpec {
  std::string name;
  std::string uri;
  std::string format = "gguf";
  std::string sha256;  // "" = not pinned
  // Derived from uri by the parser:
  ModelSource source = ModelSource::kPvc;
  std::string pvc_claim;  // kPvc: the claim
  std::string path;  // kPvc: the file inside the claim; kHostPath: the absolute path; kHttp: ""
};

struct SpeculativeSpec {
  bool enabled = false;
  std::string method = "draft";  // draft | ngram
  int num_speculative_tokens = 4;
  std::optional<ModelSpec> draft_model;
};

struct RuntimeSpec {
  std::string image;  // "" = the operator's default
  int max_batch_tokens = 2048;
  int max_running_requests = 64;
  double kv_cache_fraction = 0.9;
  int64_t context_size = 0;
  std::optional<SpeculativeSpec> speculative;
  std::vector<std::string> extra_args;
};

struct ClassDegradeSpec {
  bool fallback_model = true;
  int64_t max_tokens_cap = 0;
  std::vector<std::string> triggers{"breaker_open", "deadline", "slo"};
};

struct PriorityClassSpec {
  std::string name;
  DurationValue timeout{"60s", std::chrono::seconds(60)};
  ClassDegradeSpec degrade;
};

// The largest values of kinfer-runtime's flags (runtime/main.cc) that sidecar fields are passed on
// to: clientWrite becomes --write-timeout (at most 86400 s), maxBodyBytes --max-body-bytes (at most
// 2^32). The schema and ParseInferenceService refuse larger values, so a CR can never make the
// runtime exit 2 on its flags (a crash-looping pod with no condition to say why).
inline constexpr int64_t kRuntimeMaxWriteTimeoutSeconds = 86400;
inline constexpr uint64_t kRuntimeMaxBodyBytes = uint64_t{1} << 32;

struct SidecarTimeoutsSpec {
  DurationValue connect{"2s", std::chrono::seconds(2)};
  DurationValue upstream{"10m", std::chrono::minutes(10)};
  DurationValue drain{"30s", std::chrono::seconds(30)};
  DurationValue client_write{"30s", std::chrono::seconds(30)};
  DurationValue client_idle{"75s", std::chrono::seconds(75)};
};

struct AdmissionSpec {
  // Requests in flight to the runtime. Left out of the CR (0 here) it follows
  // spec.runtime.maxRunningRequests, the runtime's batch: ParseInferenceService resolves it, so a
  // parsed spec always holds the value the sidecar gets.
  int max_concurrency = 0;
  int reserved_for_top = 1;
  int max_queue = 256;
  int max_queue_per_class = 128;
  DurationValue initial_service_time{"1s", std::chrono::seconds(1)};
  double ewma_alpha = 0.2;
  DurationValue codel_target{"5ms", std::chrono::milliseconds(5)};
  DurationValue codel_interval{"100ms", std::chrono::milliseconds(100)};
  DurationValue min_retry_after{"1s", std::chrono::seconds(1)};
};

struct RateLimitSpec {
  double requests_per_second = 0;
  double request_burst = 0;
  double tokens_per_second = 0;
  double token_burst = 0;
};

struct RateLimitsSpec {
  RateLimitSpec default_limit;
  std::map<std::string, RateLimitSpec> overrides;
  int64_t max_tracked_keys = 10000;
};

struct CircuitBreakerSpec {
  std::string window_type = "time";  // count | time
  int window_size = 10;
  int minimum_calls = 20;
  double failure_rate_threshold = 50;
  DurationValue slow_call_duration{"30s", std::chrono::seconds(30)};
  double slow_call_rate_threshold = 100;
  DurationValue open_duration{"10s", std::chrono::seconds(10)};
  int half_open_permitted_calls = 3;
};

struct CacheSpec {
  bool enabled = true;
  ByteSize max_bytes{"64MiB", 64ull << 20};
  DurationValue ttl{"5m", std::chrono::minutes(5)};
  ByteSize max_entry_bytes{"1MiB", 1ull << 20};
};

struct RetriesSpec {
  bool enabled = true;
  int max_retries = 1;
  double budget_percent = 10;
  int64_t min_retries_per_second = 3;
  DurationValue backoff{"25ms", std::chrono::milliseconds(25)};
};

struct SidecarMetricsSpec {
  std::optional<std::vector<double>> ttft_buckets;  // nullopt = the sidecar's defaults
  std::optional<std::vector<double>> e2e_buckets;
  DurationValue stats_window{"60s", std::chrono::seconds(60)};
  DurationValue stats_bucket{"1s", std::chrono::seconds(1)};
};

// The sidecar's classes when spec.sidecar.classes is left out: critical (30s), standard (60s),
// batch (120s, degraded max_tokens cap 256), the sidecar's built-in list.
std::vector<PriorityClassSpec> DefaultPriorityClasses();

struct SidecarSpec {
  std::string image;  // "" = the operator's default
  ByteSize max_body_bytes{"1MiB", 1ull << 20};
  int64_t max_connections = 0;  // 0: the sidecar's default, from its open-file limit
  SidecarTimeoutsSpec timeouts;
  std::string default_class = "standard";
  std::vector<PriorityClassSpec> classes = DefaultPriorityClasses();
  std::string api_keys_secret_name;  // "" = none
  // Requests without a key of the Secret's mapping get 401 (require_api_key); needs the Secret.
  bool require_api_key = false;
  AdmissionSpec admission;
  RateLimitsSpec rate_limits;
  CircuitBreakerSpec circuit_breaker;
  bool top_class_only_when_primary_down = true;  // degrade.topClassOnlyWhenPrimaryDown
  CacheSpec cache;
  RetriesSpec retries;
  SidecarMetricsSpec metrics;
};

struct ResourcesSpec {
  int gpus = 1;
  std::string gpu_resource_name = "nvidia.com/gpu";
  std::string cpu;     // a quantity; "" = none requested
  std::string memory;  // a quantity; "" = none requested
};

struct PrometheusSourceSpec {
  std::string url;
  std::string queue_depth_query;  // "" = built-in
  std::string in_flight_query;
  std::string ttft_buckets_query;
};

struct AutoscalingSpec {
  bool enabled = true;
  int min_replicas = 1;
  int max_replicas = 10;
  double target_queue_depth_per_replica = 8;
  double target_requests_per_second_per_replica = 0;  // 0 = off
  int stable_window_seconds = 60;
  double panic_window_percent = 10;
  double panic_threshold = 2;
  int scale_down_delay_seconds = 300;
  double max_scale_up_rate = 10;
  double max_scale_down_rate = 2;
  std::string metrics_source_type = "pods";  // pods | prometheus
  std::optional<PrometheusSourceSpec> prometheus;
};

struct InferenceServiceSpec {
  ModelSpec model;
  std::optional<ModelSpec> fallback_model;
  RuntimeSpec runtime;
  SidecarSpec sidecar;
  ResourcesSpec resources;
  std::map<std::string, std::string> node_selector;
  nlohmann::json tolerations;  // an array of core/v1 Toleration, or null
  nlohmann::json affinity;     // a core/v1 Affinity, or null
  std::string priority_class_name;
  std::optional<double> slo_ttft_p99_seconds;  // spec.slo.ttftP99Seconds
  AutoscalingSpec autoscaling;
  std::optional<int> replicas;  // required iff !autoscaling.enabled
};

// metav1.Condition.
struct Condition {
  std::string type;
  std::string status;  // "True", "False", "Unknown"
  std::string reason;
  std::string message;
  int64_t observed_generation = 0;
  std::string last_transition_time;  // RFC 3339
  bool operator==(const Condition&) const = default;
};

struct InferenceServiceStatus {
  std::optional<int64_t> observed_generation;
  std::vector<Condition> conditions;
  std::optional<int> replicas;
  std::optional<int> ready_replicas;
  std::optional<int> desired_replicas;
  std::string selector;
  std::string url;
  std::optional<double> observed_queue_depth;
  std::optional<double> observed_p99_ttft_seconds;
  std::string last_scale_time;
  std::string last_scale_reason;

  // The condition of `type`, or nullptr.
  const Condition* FindCondition(std::string_view type) const;
};

struct InferenceService {
  ObjectMeta metadata;
  InferenceServiceSpec spec;
  InferenceServiceStatus status;
};

// Parses an InferenceService object (as the API server returns it) with the CRD defaults applied
// and the semantic checks above. INVALID_ARGUMENT naming the field on a bad spec (see Contract);
// a bad status is not an error (the operator rewrites it): unreadable status fields are dropped.
StatusOr<InferenceService> ParseInferenceService(const nlohmann::json& object);

// Parses status alone (lenient: unreadable fields are left unset).
InferenceServiceStatus ParseInferenceServiceStatus(const nlohmann::json& status);

// The effective spec as CRD JSON (camelCase keys, every defaulted field written out; optional
// fields left out when unset). ParseInferenceService of an object with this spec gives the same
// values back.
nlohmann::json ToJson(const InferenceServiceSpec& spec);

// The status object as the API server stores it (unset optional fields and empty strings left
// out; conditions in the order given).
nlohmann::json ToJson(const InferenceServiceStatus& status);
nlohmann::json ToJson(const Condition& condition);

// The label every object and pod of an InferenceService carries, and its selector string.
inline constexpr char kInferenceServiceLabel[] = "serving.kinfer.dev/inferenceservice";
std::string SelectorString(const std::string& name);
// http://NAME.NAMESPACE.svc.cluster.local:8080
std::string ServiceUrl(const ObjectMeta& metadata);

}  // namespace kinfer::api
