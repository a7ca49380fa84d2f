#include "sidecar/config/sidecar_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

namespace kinfer {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// The error message of a load that must fail.
std::string LoadError(const std::string& yaml) {
  StatusOr<SidecarConfig> config = LoadSidecarConfigYaml(yaml);
  EXPECT_FALSE(config.ok()) << "loaded:\n" << yaml;
  if (config.ok()) return "";
  EXPECT_EQ(config.status().code(), StatusCode::kInvalidArgument);
  return config.status().message();
}

SidecarConfig Load(const std::string& yaml) {
  StatusOr<SidecarConfig> config = LoadSidecarConfigYaml(yaml);
  EXPECT_TRUE(config.ok()) << config.status().ToString() << "\n" << yaml;
  return config.ok() ? *config : SidecarConfig();
}

bool StrictlyIncreasing(const std::vector<double>& v) {
  return std::adjacent_find(v.begin(), v.end(), std::greater_equal<double>()) == v.end();
}

// Every field of the two configs, so that the example file cannot drift from the defaults.
void ExpectSameConfig(const SidecarConfig& a, const SidecarConfig& b) {
  EXPECT_EQ(a.listen.host, b.listen.host);
  EXPECT_EQ(a.listen.port, b.listen.port);
  EXPECT_EQ(a.upstream.host, b.upstream.host);
  EXPECT_EQ(a.upstream.port, b.upstream.port);
  EXPECT_EQ(a.upstream.base_path, b.upstream.base_path);
  EXPECT_EQ(a.max_body_bytes, b.max_body_bytes);
  EXPECT_EQ(a.connect_timeout, b.connect_timeout);
  EXPECT_EQ(a.upstream_timeout, b.upstream_timeout);
  EXPECT_EQ(a.drain_timeout, b.drain_timeout);
  EXPECT_EQ(a.client_write_timeout, b.client_write_timeout);

  ASSERT_EQ(a.classes.size(), b.classes.size());
  for (size_t i = 0; i < a.classes.size(); ++i) {
    SCOPED_TRACE("class " + std::to_string(i));
    const PriorityClassConfig& x = a.classes[i];
    const PriorityClassConfig& y = b.classes[i];
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.timeout, y.timeout);
    EXPECT_EQ(x.degrade.allow_fallback_model, y.degrade.allow_fallback_model);
    EXPECT_EQ(x.degrade.max_tokens_cap, y.degrade.max_tokens_cap);
    EXPECT_EQ(x.degrade.degrade_on.breaker_open, y.degrade.degrade_on.breaker_open);
    EXPECT_EQ(x.degrade.degrade_on.deadline_at_risk, y.degrade.degrade_on.deadline_at_risk);
    EXPECT_EQ(x.degrade.degrade_on.slo_breach, y.degrade.degrade_on.slo_breach);
  }
  EXPECT_EQ(a.default_class, b.default_class);
  EXPECT_EQ(a.api_keys.size(), b.api_keys.size());

  const AdmissionConfig& p = a.admission;
  const AdmissionConfig& q = b.admission;
  EXPECT_EQ(p.num_priorities, q.num_priorities);
  EXPECT_EQ(p.max_concurrency, q.max_concurrency);
  EXPECT_EQ(p.reserved_for_top, q.reserved_for_top);
  EXPECT_EQ(p.max_queue_total, q.max_queue_total);
  EXPECT_EQ(p.max_queue_per_class, q.max_queue_per_class);
  EXPECT_EQ(p.initial_service_time, q.initial_service_time);
  EXPECT_EQ(p.ewma_alpha, q.ewma_alpha);
  EXPECT_EQ(p.codel_target, q.codel_target);
  EXPECT_EQ(p.codel_interval, q.codel_interval);
  EXPECT_EQ(p.min_retry_after, q.min_retry_after);

  const RateLimit& l = a.rate_limits.default_limit;
  const RateLimit& m = b.rate_limits.default_limit;
  EXPECT_EQ(l.requests_per_second, m.requests_per_second);
  EXPECT_EQ(l.request_burst, m.request_burst);
  EXPECT_EQ(l.tokens_per_second, m.tokens_per_second);
  EXPECT_EQ(l.token_burst, m.token_burst);
  EXPECT_EQ(a.rate_limits.overrides.size(), b.rate_limits.overrides.size());
  EXPECT_EQ(a.rate_limits.max_tracked_keys, b.rate_limits.max_tracked_keys);

  EXPECT_EQ(a.breaker.window_type, b.breaker.window_type);
  EXPECT_EQ(a.breaker.window_size, b.breaker.window_size);
  EXPECT_EQ(a.breaker.minimum_calls, b.breaker.minimum_calls);
  EXPECT_EQ(a.breaker.failure_rate_threshold, b.breaker.failure_rate_threshold);
  EXPECT_EQ(a.breaker.slow_call_duration, b.breaker.slow_call_duration);
  EXPECT_EQ(a.breaker.slow_call_rate_threshold, b.breaker.slow_call_rate_threshold);
  EXPECT_EQ(a.breaker.open_duration, b.breaker.open_duration);
  EXPECT_EQ(a.breaker.half_open_permitted_calls, b.breaker.half_open_permitted_calls);

  EXPECT_EQ(a.fallback_model, b.fallback_model);
  EXPECT_EQ(a.fallback_upstream_text, b.fallback_upstream_text);
  EXPECT_EQ(a.has_fallback_upstream, b.has_fallback_upstream);
  EXPECT_EQ(a.slo_ttft_p99_seconds, b.slo_ttft_p99_seconds);
  EXPECT_EQ(a.top_class_only_when_primary_down, b.top_class_only_when_primary_down);

  EXPECT_EQ(a.cache_enabled, b.cache_enabled);
  EXPECT_EQ(a.cache.max_bytes, b.cache.max_bytes);
  EXPECT_EQ(a.cache.ttl, b.cache.ttl);
  EXPECT_EQ(a.cache.max_entry_bytes, b.cache.max_entry_bytes);

  EXPECT_EQ(a.retries.enabled, b.retries.enabled);
  EXPECT_EQ(a.retries.max_retries, b.retries.max_retries);
  EXPECT_EQ(a.retries.budget_percent, b.retries.budget_percent);
  EXPECT_EQ(a.retries.min_retries_per_second, b.retries.min_retries_per_second);
  EXPECT_EQ(a.retries.backoff, b.retries.backoff);

  EXPECT_EQ(a.ttft_buckets, b.ttft_buckets);
  EXPECT_EQ(a.e2e_buckets, b.e2e_buckets);
  EXPECT_EQ(a.stats_window.window, b.stats_window.window);
  EXPECT_EQ(a.stats_window.bucket_width, b.stats_window.bucket_width);
}

// ---- defaults and the example file -------------------------------------------------------------

TEST(SidecarConfigTest, DefaultsValidate) {
  SidecarConfig config;
  EXPECT_TRUE(config.Validate().ok()) << config.Validate().ToString();
  ASSERT_EQ(config.classes.size(), 3u);
  EXPECT_EQ(config.classes[0].name, "critical");
  EXPECT_EQ(config.classes[0].timeout, 30s);
  EXPECT_EQ(config.classes[1].name, "standard");
  EXPECT_EQ(config.classes[1].timeout, 60s);
  EXPECT_EQ(config.classes[2].name, "batch");
  EXPECT_EQ(config.classes[2].timeout, 120s);
  EXPECT_EQ(config.classes[2].degrade.max_tokens_cap, 256);
  EXPECT_EQ(config.ClassIndex("standard"), 1);
  EXPECT_EQ(config.ClassIndex("gold"), -1);
  EXPECT_EQ(config.breaker.window_type, CircuitBreakerWindowType::kTimeBased);
  EXPECT_EQ(config.breaker.window_size, 10);
  EXPECT_EQ(config.breaker.minimum_calls, 20);
  EXPECT_EQ(config.breaker.open_duration, 10s);
  EXPECT_EQ(config.breaker.half_open_permitted_calls, 3);
  EXPECT_EQ(config.ttft_buckets.size(), 13u);
  EXPECT_EQ(config.e2e_buckets.size(), 14u);
  EXPECT_TRUE(StrictlyIncreasing(config.ttft_buckets));
  EXPECT_TRUE(StrictlyIncreasing(config.e2e_buckets));
  EXPECT_EQ(config.MakeAdmissionConfig().num_priorities, 3);
  EXPECT_EQ(config.MakeDegradeConfig().classes.size(), 3u);
  EXPECT_TRUE(config.MakeDegradeConfig().top_class_only_when_primary_down);
}

TEST(SidecarConfigTest, ExampleFileLoadsToExactlyTheDefaults) {
  StatusOr<SidecarConfig> loaded =
      LoadSidecarConfigFile(KINFER_SOURCE_DIR "/sidecar/kinfer-sidecar.example.yaml");
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ExpectSameConfig(*loaded, SidecarConfig());
}

TEST(SidecarConfigTest, EmptyDocumentAndEmptySectionsKeepDefaults) {
  ExpectSameConfig(Load(""), SidecarConfig());
  ExpectSameConfig(Load("# nothing but a comment\n"), SidecarConfig());
  ExpectSameConfig(Load("admission:\ncache:\napi_keys:\n"), SidecarConfig());
}

TEST(SidecarConfigTest, MissingFileIsNotFound) {
  StatusOr<SidecarConfig> loaded = LoadSidecarConfigFile("/nonexistent/kinfer-sidecar.yaml");
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), StatusCode::kNotFound);
}

// ---- every key reaches its field
// -----------------------------------------------------------------

TEST(SidecarConfigTest, LoadsEverySection) {
  SidecarConfig c = Load(R"(
listen: "127.0.0.1:9000"
upstream: "http://runtime:8081/v1/"
max_body_bytes: 2MiB
connect_timeout: 500ms
upstream_timeout: 2m
drain_timeout: 0
client_write_timeout: 5s
default_class: low
classes:
  - {name: high, timeout: 5s, degrade: {on: [breaker_open]}}
  - name: low
    degrade: {fallback_model: false, max_tokens_cap: 64, on: [slo, deadline]}
api_keys:
  sk-1: {class: high, tenant: team-a}
  sk-2: {}
admission: {max_concurrency: 4, reserved_for_top: 2, max_queue: 10, max_queue_per_class: 5,
            initial_service_time: 2s, ewma_alpha: 0.5, codel_target: 10ms, codel_interval: 1s,
            min_retry_after: 0}
rate_limits:
  default: {requests_per_second: 5, request_burst: 10, tokens_per_second: 1000, token_burst: 4000}
  overrides: {team-a: {requests_per_second: 50}}
  max_tracked_keys: 100
circuit_breaker: {window_type: count, window_size: 50, minimum_calls: 10,
                  failure_rate_threshold: 25.5, slow_call_duration: 3s,
                  slow_call_rate_threshold: 80, open_duration: 1m, half_open_permitted_calls: 2}
degrade: {fallback_model: small, fallback_upstream: "http://[::1]:9001",
          slo_ttft_p99: 2s, top_class_only_when_primary_down: false}
cache: {enabled: false, max_bytes: 1GiB, ttl: 1h, max_entry_bytes: 10KB}
retries: {enabled: false, max_retries: 3, budget_percent: 20, min_retries_per_second: 0,
          backoff: 100us}
metrics: {ttft_buckets: [0.1, 1, 10], e2e_buckets: [1, 60], stats_window: 30s, stats_bucket: 500ms}
)");
  EXPECT_EQ(c.listen.host, "127.0.0.1");
  EXPECT_EQ(c.listen.port, 9000);
  EXPECT_EQ(c.upstream.host, "runtime");
  EXPECT_EQ(c.upstream.base_path, "/v1");
  EXPECT_EQ(c.max_body_bytes, 2u << 20);
  EXPECT_EQ(c.connect_timeout, 500ms);
  EXPECT_EQ(c.upstream_timeout, 2min);
  EXPECT_EQ(c.drain_timeout, 0s);
  EXPECT_EQ(c.client_write_timeout, 5s);

  ASSERT_EQ(c.classes.size(), 2u);  // the list replaces the defaults
  EXPECT_EQ(c.default_class, "low");
  EXPECT_EQ(c.classes[0].timeout, 5s);
  EXPECT_TRUE(c.classes[0].degrade.degrade_on.breaker_open);
  EXPECT_FALSE(c.classes[0].degrade.degrade_on.deadline_at_risk);
  EXPECT_FALSE(c.classes[0].degrade.degrade_on.slo_breach);
  EXPECT_EQ(c.classes[1].timeout, 60s);  // the struct default
  EXPECT_FALSE(c.classes[1].degrade.allow_fallback_model);
  EXPECT_EQ(c.classes[1].degrade.max_tokens_cap, 64);
  EXPECT_FALSE(c.classes[1].degrade.degrade_on.breaker_open);
  EXPECT_TRUE(c.classes[1].degrade.degrade_on.deadline_at_risk);
  EXPECT_TRUE(c.classes[1].degrade.degrade_on.slo_breach);

  ASSERT_EQ(c.api_keys.size(), 2u);
  EXPECT_EQ(c.api_keys.at("sk-1").class_name, "high");
  EXPECT_EQ(c.api_keys.at("sk-1").tenant, "team-a");
  EXPECT_EQ(c.api_keys.at("sk-2").class_name, "");

  EXPECT_EQ(c.admission.num_priorities, 2);
  EXPECT_EQ(c.admission.max_concurrency, 4);
  EXPECT_EQ(c.admission.reserved_for_top, 2);
  EXPECT_EQ(c.admission.max_queue_total, 10u);
  EXPECT_EQ(c.admission.max_queue_per_class, 5u);
  EXPECT_EQ(c.admission.initial_service_time, 2s);
  EXPECT_EQ(c.admission.ewma_alpha, 0.5);
  EXPECT_EQ(c.admission.codel_target, 10ms);
  EXPECT_EQ(c.admission.codel_interval, 1s);
  EXPECT_EQ(c.admission.min_retry_after, 0s);

  EXPECT_EQ(c.rate_limits.default_limit.requests_per_second, 5);
  EXPECT_EQ(c.rate_limits.default_limit.token_burst, 4000);
  EXPECT_EQ(c.rate_limits.overrides.at("team-a").requests_per_second, 50);
  EXPECT_EQ(c.rate_limits.overrides.at("team-a").tokens_per_second, 0);
  EXPECT_EQ(c.rate_limits.max_tracked_keys, 100u);

  EXPECT_EQ(c.breaker.window_type, CircuitBreakerWindowType::kCountBased);
  EXPECT_EQ(c.breaker.window_size, 50);
  EXPECT_EQ(c.breaker.minimum_calls, 10);
  EXPECT_EQ(c.breaker.failure_rate_threshold, 25.5);
  EXPECT_EQ(c.breaker.slow_call_duration, 3s);
  EXPECT_EQ(c.breaker.slow_call_rate_threshold, 80);
  EXPECT_EQ(c.breaker.open_duration, 1min);
  EXPECT_EQ(c.breaker.half_open_permitted_calls, 2);

  EXPECT_EQ(c.fallback_model, "small");
  EXPECT_TRUE(c.has_fallback_upstream);
  EXPECT_EQ(c.fallback_upstream_text, "http://[::1]:9001");
  EXPECT_EQ(c.fallback_upstream.host, "::1");
  EXPECT_EQ(c.fallback_upstream.port, 9001);
  EXPECT_EQ(c.slo_ttft_p99_seconds, 2.0);
  EXPECT_FALSE(c.top_class_only_when_primary_down);

  EXPECT_FALSE(c.cache_enabled);
  EXPECT_EQ(c.cache.max_bytes, size_t{1} << 30);
  EXPECT_EQ(c.cache.ttl, 1h);
  EXPECT_EQ(c.cache.max_entry_bytes, 10000u);

  EXPECT_FALSE(c.retries.enabled);
  EXPECT_EQ(c.retries.max_retries, 3);
  EXPECT_EQ(c.retries.budget_percent, 20);
  EXPECT_EQ(c.retries.min_retries_per_second, 0);
  EXPECT_EQ(c.retries.backoff, 100us);

  EXPECT_EQ(c.ttft_buckets, (std::vector<double>{0.1, 1, 2, 10}));  // the SLO edge added
  EXPECT_EQ(c.e2e_buckets, (std::vector<double>{1, 60}));
  EXPECT_EQ(c.stats_window.window, 30s);
  EXPECT_EQ(c.stats_window.bucket_width, 500ms);

  AdmissionConfig admission = c.MakeAdmissionConfig();
  EXPECT_EQ(admission.num_priorities, 2);
  EXPECT_EQ(admission.max_concurrency, 4);
  DegradeConfig degrade = c.MakeDegradeConfig();
  ASSERT_EQ(degrade.classes.size(), 2u);
  EXPECT_EQ(degrade.classes[1].max_tokens_cap, 64);
  EXPECT_FALSE(degrade.classes[1].allow_fallback_model);
  EXPECT_FALSE(degrade.classes[0].degrade_on.slo_breach);
  EXPECT_EQ(degrade.slo_ttft_p99, 2.0);
  EXPECT_FALSE(degrade.top_class_only_when_primary_down);
}

// ---- SLO bucket edge
// -----------------------------------------------------------------------------

TEST(SidecarConfigTest, SloEdgeIsInsertedIntoTtftBuckets) {
  SidecarConfig c = Load("degrade: {slo_ttft_p99: 300ms}\n");
  EXPECT_EQ(c.ttft_buckets.size(), SidecarConfig().ttft_buckets.size() + 1);
  EXPECT_NE(std::find(c.ttft_buckets.begin(), c.ttft_buckets.end(), 0.3), c.ttft_buckets.end());
  EXPECT_TRUE(StrictlyIncreasing(c.ttft_buckets));

  // Already an edge: unchanged. Beyond the last edge: appended.
  EXPECT_EQ(Load("degrade: {slo_ttft_p99: 250ms}\n").ttft_buckets, SidecarConfig().ttft_buckets);
  EXPECT_EQ(Load("degrade: {slo_ttft_p99: 2m}\n").ttft_buckets.back(), 120.0);
  // No SLO: no edge.
  EXPECT_EQ(Load("degrade: {slo_ttft_p99: 0}\n").ttft_buckets, SidecarConfig().ttft_buckets);
}

TEST(SidecarConfigTest, InsertSloBucketEdgeWorksOnConfigsBuiltInCode) {
  SidecarConfig c;
  c.slo_ttft_p99_seconds = 0.75;
  c.InsertSloBucketEdge();
  c.InsertSloBucketEdge();  // idempotent
  EXPECT_EQ(std::count(c.ttft_buckets.begin(), c.ttft_buckets.end(), 0.75), 1);
  EXPECT_TRUE(StrictlyIncreasing(c.ttft_buckets));
  EXPECT_TRUE(c.Validate().ok());
}

// ---- text parsers
// --------------------------------------------------------------------------------

TEST(ParseDurationTest, UnitsAndPlainSeconds) {
  EXPECT_EQ(*ParseDuration("250ms"), 250ms);
  EXPECT_EQ(*ParseDuration("30s"), 30s);
  EXPECT_EQ(*ParseDuration("2m"), 2min);
  EXPECT_EQ(*ParseDuration("1h"), 1h);
  EXPECT_EQ(*ParseDuration("500us"), 500us);
  EXPECT_EQ(*ParseDuration("100ns"), 100ns);
  EXPECT_EQ(*ParseDuration("1.5"), 1500ms);
  EXPECT_EQ(*ParseDuration("0.1"), 100ms);
  EXPECT_EQ(*ParseDuration("1.5m"), 90s);
  EXPECT_EQ(*ParseDuration("0"), 0s);
}

TEST(ParseDurationTest, RejectsBadUnitsNegativesAndNonFinite) {
  for (const char* bad :
       {"", "ms", "5x", "5 s", "10d", "5sec", "-1s", "-0.5", "inf", "nan", "1e300h", "s5", " 5s"}) {
    StatusOr<std::chrono::nanoseconds> d = ParseDuration(bad);
    ASSERT_FALSE(d.ok()) << "'" << bad << "'";
    EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(d.status().message(), HasSubstr("bad duration '" + std::string(bad) + "'"));
  }
  EXPECT_THAT(ParseDuration("5x").status().message(), HasSubstr("unknown unit 'x'"));
  EXPECT_THAT(ParseDuration("-1s").status().message(), HasSubstr(">= 0"));
}

TEST(ParseByteSizeTest, UnitsAreDecimalOrBinary) {
  EXPECT_EQ(*ParseByteSize("1048576"), 1048576u);
  EXPECT_EQ(*ParseByteSize("64MiB"), 64u << 20);
  EXPECT_EQ(*ParseByteSize("512KiB"), 512u << 10);
  EXPECT_EQ(*ParseByteSize("1GiB"), 1u << 30);
  EXPECT_EQ(*ParseByteSize("2TiB"), uint64_t{2} << 40);
  EXPECT_EQ(*ParseByteSize("1MB"), 1000000u);
  EXPECT_EQ(*ParseByteSize("10KB"), 10000u);
  EXPECT_EQ(*ParseByteSize("100B"), 100u);
  EXPECT_EQ(*ParseByteSize("0"), 0u);
}

TEST(ParseByteSizeTest, RejectsSignsFractionsUnknownUnitsAndOverflow) {
  for (const char* bad : {"", "-1", "+1", "1.5MiB", "10XB", "10 MiB", "MiB", "10mib", "20000000TiB",
                          "99999999999999999999"}) {
    StatusOr<uint64_t> n = ParseByteSize(bad);
    ASSERT_FALSE(n.ok()) << "'" << bad << "'";
    EXPECT_THAT(n.status().message(), HasSubstr("bad byte size '" + std::string(bad) + "'"));
  }
  EXPECT_THAT(ParseByteSize("20000000TiB").status().message(), HasSubstr("too large"));
}

TEST(ParseHostPortTest, Forms) {
  HostPort hp = *ParseHostPort("127.0.0.1:9000");
  EXPECT_EQ(hp.host, "127.0.0.1");
  EXPECT_EQ(hp.port, 9000);
  hp = *ParseHostPort(":8080");
  EXPECT_EQ(hp.host, "::");  // IPv4 and IPv6
  EXPECT_EQ(hp.port, 8080);
  hp = *ParseHostPort("[::1]:443");
  EXPECT_EQ(hp.host, "::1");
  EXPECT_EQ(hp.port, 443);
  hp = *ParseHostPort("localhost:0");
  EXPECT_EQ(hp.host, "localhost");
  EXPECT_EQ(hp.port, 0);
  EXPECT_EQ(ParseHostPort("h:65535")->port, 65535);
}

TEST(ParseHostPortTest, RejectsBadPortsAndForms) {
  for (const char* bad :
       {"", "8080", "host", "host:", "host:65536", "host:99999", "host:-1", "host:abc", "host:80x",
        "::1:80", "[::1]8080", "[::1", "[]:80", "a b:80", "h/x:80"}) {
    StatusOr<HostPort> hp = ParseHostPort(bad);
    ASSERT_FALSE(hp.ok()) << "'" << bad << "'";
    EXPECT_EQ(hp.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(hp.status().message(), HasSubstr("bad address '" + std::string(bad) + "'"));
  }
  EXPECT_THAT(ParseHostPort("h:99999").status().message(), HasSubstr("[0, 65535]"));
  EXPECT_THAT(ParseHostPort("::1:80").status().message(), HasSubstr("brackets"));
}

TEST(ParseUpstreamUrlTest, HostPortAndBasePath) {
  UpstreamUrl u = *ParseUpstreamUrl("http://127.0.0.1:8081");
  EXPECT_EQ(u.host, "127.0.0.1");
  EXPECT_EQ(u.port, 8081);
  EXPECT_EQ(u.base_path, "");
  u = *ParseUpstreamUrl("http://runtime");
  EXPECT_EQ(u.host, "runtime");
  EXPECT_EQ(u.port, 80);
  u = *ParseUpstreamUrl("http://runtime/");
  EXPECT_EQ(u.base_path, "");
  u = *ParseUpstreamUrl("http://h:9000/openai/v1/");
  EXPECT_EQ(u.port, 9000);
  EXPECT_EQ(u.base_path, "/openai/v1");
  u = *ParseUpstreamUrl("http://[::1]:8081/base");
  EXPECT_EQ(u.host, "::1");
  EXPECT_EQ(u.base_path, "/base");
}

TEST(ParseUpstreamUrlTest, RejectsHttpsOtherSchemesAndBadParts) {
  EXPECT_THAT(ParseUpstreamUrl("https://runtime:8443").status().message(),
              HasSubstr("https is not supported"));
  for (const char* bad :
       {"", "runtime:8081", "ftp://h", "http://", "http://:80", "http://h:0", "http://h:70000",
        "http://h?x=1", "http://u@h", "http://h/#frag", "HTTP://h"}) {
    StatusOr<UpstreamUrl> u = ParseUpstreamUrl(bad);
    ASSERT_FALSE(u.ok()) << "'" << bad << "'";
    EXPECT_THAT(u.status().message(), HasSubstr("bad upstream URL '" + std::string(bad) + "'"));
  }
}

// ---- YAML errors
// ---------------------------------------------------------------------------------

TEST(SidecarConfigTest, UnknownKeysNameTheirPath) {
  EXPECT_THAT(LoadError("admission:\n  max_qeue: 3\n"),
              HasSubstr("unknown key 'admission.max_qeue' (line 2)"));
  EXPECT_THAT(LoadError("admission:\n  max_qeue: 3\n"), HasSubstr("max_queue"));  // the known keys
  EXPECT_THAT(LoadError("listne: ':80'\n"), HasSubstr("unknown key 'listne'"));
  EXPECT_THAT(LoadError("classes: [{name: a, degrade: {fallbak_model: true}}]\n"),
              HasSubstr("unknown key 'classes[0].degrade.fallbak_model'"));
  EXPECT_THAT(LoadError("rate_limits: {overrides: {team-a: {rps: 3}}}\n"),
              HasSubstr("unknown key 'rate_limits.overrides.team-a.rps'"));
  EXPECT_THAT(LoadError("metrics: {stats_windw: 10s}\n"),
              HasSubstr("unknown key 'metrics.stats_windw'"));
}

TEST(SidecarConfigTest, DuplicateKeysAreRejected) {
  EXPECT_THAT(LoadError("cache:\n  ttl: 1m\n  ttl: 2m\n"), HasSubstr("duplicate key 'cache.ttl'"));
}

TEST(SidecarConfigTest, ApiKeyErrorsDoNotEchoTheKey) {
  std::string error = LoadError("api_keys:\n  sk-secret-123: {clas: critical}\n");
  EXPECT_THAT(error, HasSubstr("unknown key 'api_keys[0].clas'"));
  EXPECT_THAT(error, ::testing::Not(HasSubstr("sk-secret-123")));
}

TEST(SidecarConfigTest, WrongTypesNameTheKey) {
  EXPECT_THAT(LoadError("admission: {max_concurrency: lots}\n"),
              HasSubstr("admission.max_concurrency: expected an integer, got 'lots' (line 1)"));
  EXPECT_THAT(LoadError("admission: {max_concurrency: 2.5}\n"),
              HasSubstr("admission.max_concurrency: expected an integer"));
  EXPECT_THAT(LoadError("admission: {max_queue: -1}\n"),
              HasSubstr("admission.max_queue: expected a non-negative integer"));
  EXPECT_THAT(LoadError("cache: {enabled: maybe}\n"),
              HasSubstr("cache.enabled: expected true or false"));
  EXPECT_THAT(LoadError("retries: {budget_percent: [1]}\n"),
              HasSubstr("retries.budget_percent: expected a finite number, got a list"));
  EXPECT_THAT(LoadError("classes: critical\n"), HasSubstr("classes: expected a list"));
  EXPECT_THAT(LoadError("admission: [1, 2]\n"), HasSubstr("admission: expected a map, got a list"));
  EXPECT_THAT(LoadError("- 1\n- 2\n"), HasSubstr("top level: expected a map"));
  EXPECT_THAT(LoadError("metrics: {ttft_buckets: [0.1, x]}\n"),
              HasSubstr("metrics.ttft_buckets[1]: expected a finite number, got 'x'"));
  EXPECT_THAT(LoadError("connect_timeout: 5 parsecs\n"),
              HasSubstr("connect_timeout: bad duration '5 parsecs'"));
  EXPECT_THAT(LoadError("cache: {max_bytes: lots}\n"), HasSubstr("cache.max_bytes: bad byte size"));
  EXPECT_THAT(LoadError("listen: 8080\n"), HasSubstr("listen: bad address '8080'"));
  EXPECT_THAT(LoadError("upstream: https://x\n"), HasSubstr("upstream: bad upstream URL"));
  EXPECT_THAT(LoadError("circuit_breaker: {window_type: sliding}\n"),
              HasSubstr("circuit_breaker.window_type: expected one of count, time, got 'sliding'"));
  EXPECT_THAT(LoadError("classes: [{name: a, degrade: {on: [breaker_open, panic]}}]\n"
                        "default_class: a\n"),
              HasSubstr("classes[0].degrade.on[1]: expected one of breaker_open, deadline, slo"));
  EXPECT_THAT(LoadError("drain_timeout:\n"),
              HasSubstr("drain_timeout: expected a string, got no value"));
}

TEST(SidecarConfigTest, SyntaxErrorsNameTheLine) {
  std::string error = LoadError("listen: ':8080'\nadmission:\n  max_concurrency: [1, 2\n");
  EXPECT_THAT(error, StartsWith("YAML syntax error at line"));
  EXPECT_THAT(LoadError("a: b: c\n"), HasSubstr("line 1"));
}

TEST(SidecarConfigTest, FileErrorsArePrefixedWithThePath) {
  const std::string path = ::testing::TempDir() + "/sidecar_config_test_bad.yaml";
  {
    std::ofstream out(path);
    out << "admission:\n  max_qeue: 1\n";
  }
  StatusOr<SidecarConfig> loaded = LoadSidecarConfigFile(path);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(loaded.status().message(), StartsWith(path + ": unknown key 'admission.max_qeue'"));
  std::remove(path.c_str());
}

TEST(SidecarConfigTest, DirectoryIsNotFoundNotAnException) {
  StatusOr<SidecarConfig> loaded = LoadSidecarConfigFile(KINFER_SOURCE_DIR "/sidecar");
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), StatusCode::kNotFound);
}

// ---- cross-field validation
// ------------------------------------------------------------------------

TEST(SidecarConfigTest, ClassRulesAreEnforced) {
  EXPECT_THAT(LoadError("classes: []\n"), HasSubstr("classes: must name at least one class"));
  EXPECT_THAT(LoadError("classes: [{name: Gold}]\ndefault_class: Gold\n"),
              HasSubstr("classes[0].name: 'Gold' must match [a-z0-9_-]+"));
  EXPECT_THAT(LoadError("classes: [{timeout: 1s}]\n"), HasSubstr("classes[0].name"));
  EXPECT_THAT(LoadError("classes: [{name: a}, {name: a}]\ndefault_class: a\n"),
              HasSubstr("classes[1].name: 'a' is given twice"));
  EXPECT_THAT(LoadError("classes: [{name: a, timeout: 0}]\ndefault_class: a\n"),
              HasSubstr("classes[0].timeout: must be > 0"));
  EXPECT_THAT(LoadError("classes: [{name: a, degrade: {max_tokens_cap: -1}}]\ndefault_class: a\n"),
              HasSubstr("classes[0].degrade.max_tokens_cap: must be >= 0"));
  EXPECT_THAT(LoadError("default_class: gold\n"),
              HasSubstr("default_class: 'gold' is not in classes"));
  // The defaults' default_class (standard) is not in a replaced list.
  EXPECT_THAT(LoadError("classes: [{name: a}]\n"), HasSubstr("default_class"));
}

TEST(SidecarConfigTest, ApiKeyWithUnknownClassIsRejected) {
  std::string error = LoadError("api_keys:\n  sk-abc: {class: gold, tenant: team-a}\n");
  EXPECT_THAT(error, HasSubstr("api_keys"));
  EXPECT_THAT(error, HasSubstr("'gold'"));
  EXPECT_THAT(error, HasSubstr("team-a"));
  EXPECT_THAT(error, ::testing::Not(HasSubstr("sk-abc")));
  EXPECT_TRUE(LoadSidecarConfigYaml("api_keys: {sk-abc: {class: batch}}\n").ok());
}

TEST(SidecarConfigTest, RequiredApiKeysNeedSomeKeys) {
  EXPECT_THAT(LoadError("require_api_key: true\n"), StartsWith("require_api_key: "));
  auto c = LoadSidecarConfigYaml("require_api_key: true\napi_keys: {sk-abc: {class: batch}}\n");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->require_api_key);
}

TEST(SidecarConfigTest, PolicyErrorsCarryTheSectionName) {
  EXPECT_THAT(LoadError("admission: {reserved_for_top: 8}\n"), StartsWith("admission: "));
  EXPECT_THAT(LoadError("admission: {max_queue_per_class: 1000}\n"), StartsWith("admission: "));
  EXPECT_THAT(LoadError("circuit_breaker: {failure_rate_threshold: 0}\n"),
              StartsWith("circuit_breaker: failure_rate_threshold"));
  EXPECT_THAT(LoadError("circuit_breaker: {open_duration: 0}\n"),
              StartsWith("circuit_breaker: open_duration"));
  EXPECT_THAT(LoadError("rate_limits: {max_tracked_keys: 0}\n"), StartsWith("rate_limits: "));
  EXPECT_THAT(LoadError("cache: {max_bytes: 1KiB, max_entry_bytes: 1MiB}\n"),
              StartsWith("cache: "));
  EXPECT_THAT(LoadError("metrics: {stats_window: 1500ms}\n"), StartsWith("metrics "));
  EXPECT_THAT(LoadError("retries: {budget_percent: 150}\n"),
              StartsWith("retries.budget_percent: must be in [0, 100]"));
  EXPECT_THAT(LoadError("metrics: {e2e_buckets: [1, 1]}\n"),
              StartsWith("metrics.e2e_buckets: must be"));
  EXPECT_THAT(LoadError("metrics: {ttft_buckets: []}\n"), StartsWith("metrics.ttft_buckets"));
  EXPECT_THAT(LoadError("degrade: {fallback_upstream: 'http://h:1'}\n"),
              StartsWith("degrade.fallback_upstream: set, but degrade.fallback_model is empty"));
  EXPECT_THAT(LoadError("connect_timeout: 0\n"), StartsWith("connect_timeout: must be > 0"));
  EXPECT_THAT(LoadError("client_write_timeout: 0\n"),
              StartsWith("client_write_timeout: must be > 0"));
}

// Startup binds with make_address (an IP address, no name lookup): --check-config judges alike.
TEST(SidecarConfigTest, ListenHostMustBeAnIpAddress) {
  for (const char* bad : {"localhost:19250", "1.2.3:80", "example.com:80", "256.1.1.1:80"}) {
    EXPECT_THAT(LoadError(std::string("listen: \"") + bad + "\"\n"), StartsWith("listen: '"))
        << bad;
  }
  EXPECT_THAT(LoadError("listen: \"localhost:19250\"\n"), HasSubstr("127.0.0.1"));
  for (const char* good : {"127.0.0.1:0", ":8080", "0.0.0.0:80", "[::1]:80", "[::]:80"}) {
    SidecarConfig c;
    c.listen = *ParseHostPort(good);
    EXPECT_TRUE(c.Validate().ok()) << good << ": " << c.Validate().message();
  }
}

TEST(SidecarConfigTest, ValidateCatchesConfigsBuiltInCode) {
  SidecarConfig c;
  c.admission.max_concurrency = 0;
  EXPECT_THAT(c.Validate().message(), StartsWith("admission: max_concurrency"));
  c = SidecarConfig();
  c.slo_ttft_p99_seconds = -1;
  EXPECT_THAT(c.Validate().message(), StartsWith("degrade: slo_ttft_p99"));
  c = SidecarConfig();
  c.api_keys["k"] = {.class_name = "nope", .tenant = ""};
  EXPECT_THAT(c.Validate().message(), StartsWith("api_keys: "));
  c = SidecarConfig();
  c.upstream.port = 0;
  EXPECT_THAT(c.Validate().message(), StartsWith("upstream: "));
}

}  // namespace
}  // namespace kinfer
