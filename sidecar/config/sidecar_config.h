// SidecarConfig: everything kinfer-sidecar is configured with, and its YAML loader.
//
// Contract:
//  * Every field has a default; the sidecar runs with SidecarConfig{} (no file). The YAML file
//    `sidecar/kinfer-sidecar.example.yaml` documents every key with its default; a key missing
//    from a file keeps its default.
//  * LoadSidecarConfig* reject, with INVALID_ARGUMENT naming the key path ("admission.max_queue:
//    must be >= 1"), an unknown key (a typo must not be silently ignored), a value of the wrong
//    type, and anything the policy classes' Validate() rejects. YAML syntax errors carry the line.
//  * Durations in YAML are strings with a unit ("250ms", "30s", "2m", "1h", "500us") or plain
//    numbers meaning seconds ("1.5"). Byte sizes are integers or strings with a unit
//    ("64MiB", "512KiB", "1MB" = 10^6).
//  * Priority classes are given as an ordered list; index 0 is the most important (the
//    AdmissionQueue / DegradePolicy convention). Their count sets admission.num_priorities and
//    the size of degrade.classes. A `classes` list in YAML replaces the default list; its entries
//    (and api_keys / rate_limits.overrides entries) start from the struct defaults, not from a
//    default class of the same name.
//  * A section left empty in YAML (`admission:` with every key commented out) keeps its defaults;
//    a scalar key with no value is an error. A key given twice is an error.
//
// Pure: no I/O except LoadSidecarConfigFile, which reads one file. Thread-safe (no shared state).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "sidecar/policy/admission_queue.h"
#include "sidecar/policy/circuit_breaker.h"
#include "sidecar/policy/degrade_policy.h"
#include "sidecar/policy/latency_window.h"
#include "sidecar/policy/rate_limiter.h"
#include "sidecar/policy/response_cache.h"

namespace kinfer {

// A host:port to listen on or connect to.
struct HostPort {
  std::string host;
  uint16_t port = 0;
};

// An http:// URL split into its parts (https is not supported upstream: the runtime is on
// localhost in the same pod).
struct UpstreamUrl {
  std::string host = "127.0.0.1";
  uint16_t port = 8081;
  std::string base_path;  // prefix put before the request path, "" or "/something" (no trailing /)
};

// "HOST:PORT", ":PORT" (all interfaces of IPv4 and IPv6, host "::"), or "[v6]:PORT" (host
// without the brackets). The port is in [0, 65535]; 0 = any free port (tests listen on it).
StatusOr<HostPort> ParseHostPort(std::string_view text);
// "http://host[:port][/base]"; the port defaults to 80 and must be in [1, 65535]; trailing '/'
// are dropped from the base path. https, user info, query and fragment are INVALID_ARGUMENT.
StatusOr<UpstreamUrl> ParseUpstreamUrl(std::string_view text);
// "250ms", "30s", "2m", "1h", "500us", "100ns", or a plain number of seconds ("1.5", "0").
// Negative or non-finite values are INVALID_ARGUMENT.
StatusOr<std::chrono::nanoseconds> ParseDuration(std::string_view text);
// "1048576", "64MiB", "512KiB", "1GiB", "1MB", "10KB", "100B" (also "TB", "TiB"); integers only,
// no sign. Overflow past 2^64 - 1 is INVALID_ARGUMENT.
StatusOr<uint64_t> ParseByteSize(std::string_view text);

struct PriorityClassConfig {
  std::string name;                                             // unique, [a-z0-9_-]+
  std::chrono::nanoseconds timeout = std::chrono::seconds(60);  // default x-kinfer-timeout
  DegradeClassConfig degrade;                                   // per-class degrade rules
};

struct RetryConfig {
  bool enabled = true;
  int max_retries = 1;             // extra attempts per request, >= 0
  double budget_percent = 10.0;    // retries allowed as % of recent requests, in [0, 100]
  int min_retries_per_second = 3;  // retries always allowed at this rate, >= 0
  std::chrono::nanoseconds backoff = std::chrono::milliseconds(25);  // before a retry, >= 0
};

struct SidecarConfig {
  HostPort listen{"::", 8080};
  UpstreamUrl upstream;

  // Requests: bodies larger than this get 413.
  uint64_t max_body_bytes = 1 << 20;
  // Connecting to the upstream; a failure counts as a connection failure (retryable).
  std::chrono::nanoseconds connect_timeout = std::chrono::seconds(2);
  // Upper bound on one upstream exchange (header + whole body); beyond it the request fails 504.
  std::chrono::nanoseconds upstream_timeout = std::chrono::minutes(10);
  // SIGTERM: how long in-flight requests may take to finish before the sidecar exits.
  std::chrono::nanoseconds drain_timeout = std::chrono::seconds(30);
  // How long a write to the client may stall (the client not reading) before the sidecar closes
  // the connection and cancels the upstream request, freeing its admission slot.
  std::chrono::nanoseconds client_write_timeout = std::chrono::seconds(30);
  // A client connection waiting for (the rest of) a request, an idle kept-alive one included,
  // closes after this.
  std::chrono::nanoseconds client_idle_timeout = std::chrono::seconds(75);
  // Client connections held open at most; one more is answered 503 with Retry-After and closed.
  // 0: from the open-file limit (common/file_limit.h: half of it less a reserve, at most 65536).
  uint64_t max_connections = 0;

  // Priority classes, most important first. Default: critical, standard, batch.
  std::vector<PriorityClassConfig> classes;  // filled by the defaults in SidecarConfig()
  std::string default_class = "standard";    // class of requests with no header and no key map
  // API key (the bearer token, or x-api-key) -> class name and tenant.
  struct ApiKey {
    std::string class_name;  // "" = default_class
    std::string tenant;      // "" = the key itself
  };
  std::unordered_map<std::string, ApiKey> api_keys;
  // Only keys of api_keys are served: any other request (no key, or an unknown one) gets 401, and
  // x-kinfer-priority may lower a key's class but not raise it. Off, keys are not authenticated:
  // they only pick a class and a rate-limit bucket for clients that cooperate.
  bool require_api_key = false;

  AdmissionConfig admission;  // num_priorities is set from classes.size()

  // Rate limits, keyed by tenant (from api_keys) or the API key itself; requests without a key
  // are keyed "anonymous".
  RateLimiterConfig rate_limits;

  // Defaults tightened for a sidecar: a 10 s time-based window, minimum_calls 20, 50% failures,
  // slow = 30 s at 100%, 10 s open, 3 probes.
  CircuitBreakerConfig breaker;

  // Degrade: the fallback (small) model's name as the upstream knows it; "" = no fallback.
  std::string fallback_model;
  // Where the fallback is served; empty = the same upstream as the primary.
  std::string fallback_upstream_text;
  UpstreamUrl fallback_upstream;
  bool has_fallback_upstream = false;
  double slo_ttft_p99_seconds = 0.0;  // 0 = no SLO (the "slo" degrade trigger is off)
  bool top_class_only_when_primary_down = true;

  bool cache_enabled = true;
  ResponseCacheConfig cache;

  RetryConfig retries;

  // Metrics: histogram bucket edges in seconds (the SLO edge is added when missing).
  std::vector<double> ttft_buckets;  // filled by the defaults in SidecarConfig()
  std::vector<double> e2e_buckets;
  // The window behind /stats and the degrade rule's P99.
  LatencyWindowConfig stats_window;

  SidecarConfig();

  // Index of a class by name, or -1.
  int ClassIndex(std::string_view name) const;
  // The configs the policy classes take, derived from the fields above.
  AdmissionConfig MakeAdmissionConfig() const;
  DegradeConfig MakeDegradeConfig() const;
  // Adds slo_ttft_p99_seconds as an edge of ttft_buckets when it is > 0 and not one already,
  // keeping the (sorted) buckets sorted. The loader calls it; call it after setting the SLO in
  // code. Validate() does not require the edge.
  void InsertSloBucketEdge();
  // OK, or INVALID_ARGUMENT naming the first bad key (runs every policy Validate(), its message
  // prefixed with the YAML section: "admission: ...", "circuit_breaker: ...").
  Status Validate() const;
};

// Parses YAML text over the defaults, inserts the SLO bucket edge and validates. The error names
// the key path and, where yaml-cpp knows it, the line ("... (line 12)"). Never throws.
StatusOr<SidecarConfig> LoadSidecarConfigYaml(std::string_view yaml_text);
// Reads and parses one file; NOT_FOUND when it cannot be read. Errors are prefixed with the path.
StatusOr<SidecarConfig> LoadSidecarConfigFile(const std::string& path);

}  // namespace kinfer
