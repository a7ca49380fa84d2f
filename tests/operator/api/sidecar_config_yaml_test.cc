// RenderSidecarConfigYaml against the sidecar's own loader (kinfer::LoadSidecarConfigYaml), so the
// operator's mapping of spec.sidecar and the sidecar's config cannot drift apart.
#include "operator/api/sidecar_config_yaml.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "operator/api/units.h"
#include "sidecar/config/sidecar_config.h"
#include "tests/operator/api/yaml_to_json.h"

namespace kinfer::api {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::minutes;
using std::chrono::seconds;

const std::string kRoot = KINFER_SOURCE_DIR;

InferenceService Parse(const json& object) {
  auto isvc = ParseInferenceService(object);
  EXPECT_TRUE(isvc.ok()) << isvc.status().ToString();
  return isvc.ok() ? *isvc : InferenceService{};
}

json Sample(const std::string& name) {
  return testing::LoadYamlFile(kRoot + "/crds/samples/" + name);
}

SidecarConfig Load(const InferenceServiceSpec& spec) {
  const std::string yaml = RenderSidecarConfigYaml(spec, "test/x");
  auto config = LoadSidecarConfigYaml(yaml);
  EXPECT_TRUE(config.ok()) << config.status().ToString() << "\n" << yaml;
  return config.ok() ? *config : SidecarConfig{};
}

TEST(SidecarConfigYamlTest, EverySampleLoadsInTheSidecar) {
  for (const auto& entry : std::filesystem::directory_iterator(kRoot + "/crds/samples")) {
    if (entry.path().extension() != ".yaml") continue;
    SCOPED_TRACE(entry.path().string());
    Load(Parse(testing::LoadYamlFile(entry.path())).spec);
  }
}

TEST(SidecarConfigYamlTest, NoSidecarSectionGivesTheSidecarDefaults) {
  const SidecarConfig c = Load(Parse(Sample("minimal.yaml")).spec);
  const SidecarConfig d;
  EXPECT_EQ(c.listen.port, 8080);
  EXPECT_EQ(c.listen.host, "::");  // every interface, IPv4 and IPv6
  EXPECT_EQ(c.upstream.host, "127.0.0.1");
  EXPECT_EQ(c.upstream.port, kRuntimePort);
  EXPECT_EQ(c.max_body_bytes, d.max_body_bytes);
  EXPECT_EQ(c.connect_timeout, d.connect_timeout);
  EXPECT_EQ(c.upstream_timeout, d.upstream_timeout);
  EXPECT_EQ(c.drain_timeout, d.drain_timeout);
  EXPECT_EQ(c.client_write_timeout, d.client_write_timeout);
  EXPECT_EQ(c.client_idle_timeout, d.client_idle_timeout);
  EXPECT_EQ(c.max_connections, d.max_connections);
  EXPECT_EQ(c.default_class, d.default_class);
  ASSERT_EQ(c.classes.size(), d.classes.size());
  for (size_t i = 0; i < c.classes.size(); ++i) {
    EXPECT_EQ(c.classes[i].name, d.classes[i].name);
    EXPECT_EQ(c.classes[i].timeout, d.classes[i].timeout);
    EXPECT_EQ(c.classes[i].degrade.allow_fallback_model, d.classes[i].degrade.allow_fallback_model);
    EXPECT_EQ(c.classes[i].degrade.max_tokens_cap, d.classes[i].degrade.max_tokens_cap);
    EXPECT_EQ(c.classes[i].degrade.degrade_on.breaker_open,
              d.classes[i].degrade.degrade_on.breaker_open);
    EXPECT_EQ(c.classes[i].degrade.degrade_on.deadline_at_risk,
              d.classes[i].degrade.degrade_on.deadline_at_risk);
    EXPECT_EQ(c.classes[i].degrade.degrade_on.slo_breach,
              d.classes[i].degrade.degrade_on.slo_breach);
  }
  // The one default that is not the sidecar's own: left out, max_concurrency is the runtime's batch
  // (spec.runtime.maxRunningRequests, 64 by default), not the sidecar's 8.
  EXPECT_EQ(c.admission.max_concurrency, 64);
  EXPECT_EQ(c.admission.reserved_for_top, d.admission.reserved_for_top);
  EXPECT_EQ(c.admission.max_queue_total, d.admission.max_queue_total);
  EXPECT_EQ(c.admission.max_queue_per_class, d.admission.max_queue_per_class);
  EXPECT_EQ(c.admission.initial_service_time, d.admission.initial_service_time);
  EXPECT_EQ(c.admission.ewma_alpha, d.admission.ewma_alpha);
  EXPECT_EQ(c.admission.codel_target, d.admission.codel_target);
  EXPECT_EQ(c.admission.codel_interval, d.admission.codel_interval);
  EXPECT_EQ(c.admission.min_retry_after, d.admission.min_retry_after);
  EXPECT_EQ(c.rate_limits.default_limit.requests_per_second,
            d.rate_limits.default_limit.requests_per_second);
  EXPECT_EQ(c.rate_limits.max_tracked_keys, d.rate_limits.max_tracked_keys);
  EXPECT_TRUE(c.rate_limits.overrides.empty());
  EXPECT_EQ(c.breaker.window_type, d.breaker.window_type);
  EXPECT_EQ(c.breaker.window_size, d.breaker.window_size);
  EXPECT_EQ(c.breaker.minimum_calls, d.breaker.minimum_calls);
  EXPECT_EQ(c.breaker.failure_rate_threshold, d.breaker.failure_rate_threshold);
  EXPECT_EQ(c.breaker.slow_call_duration, d.breaker.slow_call_duration);
  EXPECT_EQ(c.breaker.slow_call_rate_threshold, d.breaker.slow_call_rate_threshold);
  EXPECT_EQ(c.breaker.open_duration, d.breaker.open_duration);
  EXPECT_EQ(c.breaker.half_open_permitted_calls, d.breaker.half_open_permitted_calls);
  EXPECT_EQ(c.fallback_model, "");
  EXPECT_FALSE(c.has_fallback_upstream);
  EXPECT_EQ(c.slo_ttft_p99_seconds, 0.0);
  EXPECT_EQ(c.top_class_only_when_primary_down, d.top_class_only_when_primary_down);
  EXPECT_EQ(c.cache_enabled, d.cache_enabled);
  EXPECT_EQ(c.cache.max_bytes, d.cache.max_bytes);
  EXPECT_EQ(c.cache.ttl, d.cache.ttl);
  EXPECT_EQ(c.cache.max_entry_bytes, d.cache.max_entry_bytes);
  EXPECT_EQ(c.retries.enabled, d.retries.enabled);
  EXPECT_EQ(c.retries.max_retries, d.retries.max_retries);
  EXPECT_EQ(c.retries.budget_percent, d.retries.budget_percent);
  EXPECT_EQ(c.retries.min_retries_per_second, d.retries.min_retries_per_second);
  EXPECT_EQ(c.retries.backoff, d.retries.backoff);
  EXPECT_EQ(c.ttft_buckets, d.ttft_buckets);
  EXPECT_EQ(c.e2e_buckets, d.e2e_buckets);
  EXPECT_EQ(c.stats_window.window, d.stats_window.window);
  EXPECT_EQ(c.stats_window.bucket_width, d.stats_window.bucket_width);
  EXPECT_TRUE(c.api_keys.empty());
  EXPECT_FALSE(c.require_api_key);
}

TEST(SidecarConfigYamlTest, RequiredApiKeysReachTheSidecar) {
  json object = Sample("minimal.yaml");
  object["spec"]["sidecar"] = {{"apiKeysSecretName", "keys"}, {"requireApiKey", true}};
  const std::string yaml = RenderSidecarConfigYaml(Parse(object).spec, "test/x");
  EXPECT_NE(yaml.find("require_api_key: true"), std::string::npos) << yaml;
  // The Secret's mapping is appended in the pod (the init container's script): with it the
  // sidecar takes the file.
  auto c = LoadSidecarConfigYaml(yaml + "api_keys:\n  sk-1: {tenant: a}\n");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->require_api_key);
}

TEST(SidecarConfigYamlTest, MaxConcurrencyLeftOutFollowsTheRuntimesBatch) {
  json object = Sample("minimal.yaml");
  object["spec"]["runtime"] = {{"maxRunningRequests", 24}};
  EXPECT_EQ(Load(Parse(object).spec).admission.max_concurrency, 24);
  object["spec"]["sidecar"] = {{"admission", {{"maxQueue", 300}}}};
  EXPECT_EQ(Load(Parse(object).spec).admission.max_concurrency, 24);
  // Given, it is passed through as it is, above or below the batch.
  object["spec"]["sidecar"]["admission"]["maxConcurrency"] = 6;
  EXPECT_EQ(Load(Parse(object).spec).admission.max_concurrency, 6);
  object["spec"]["sidecar"]["admission"]["maxConcurrency"] = 100;
  EXPECT_EQ(Load(Parse(object).spec).admission.max_concurrency, 100);
}

TEST(SidecarConfigYamlTest, FullSampleMapsEveryKey) {
  const SidecarConfig c = Load(Parse(Sample("full.yaml")).spec);
  EXPECT_EQ(c.max_body_bytes, 2u << 20);
  EXPECT_EQ(c.upstream_timeout, minutes(5));
  EXPECT_EQ(c.drain_timeout, seconds(60));
  EXPECT_EQ(c.client_write_timeout, seconds(45));
  EXPECT_EQ(c.client_idle_timeout, seconds(120));
  EXPECT_EQ(c.max_connections, 4096u);
  ASSERT_EQ(c.classes.size(), 3u);
  EXPECT_EQ(c.classes[0].name, "critical");
  EXPECT_EQ(c.classes[0].timeout, seconds(20));
  EXPECT_TRUE(c.classes[0].degrade.degrade_on.breaker_open);
  EXPECT_TRUE(c.classes[0].degrade.degrade_on.deadline_at_risk);
  EXPECT_FALSE(c.classes[0].degrade.degrade_on.slo_breach);
  EXPECT_EQ(c.classes[2].timeout, seconds(300));
  EXPECT_EQ(c.classes[2].degrade.max_tokens_cap, 256);
  EXPECT_EQ(c.admission.max_concurrency, 96);
  EXPECT_EQ(c.admission.reserved_for_top, 2);
  EXPECT_EQ(c.admission.max_queue_total, 512u);
  EXPECT_EQ(c.admission.max_queue_per_class, 256u);
  EXPECT_EQ(c.rate_limits.default_limit.requests_per_second, 20);
  EXPECT_EQ(c.rate_limits.default_limit.tokens_per_second, 20000);
  ASSERT_EQ(c.rate_limits.overrides.count("team-a"), 1u);
  EXPECT_EQ(c.rate_limits.overrides.at("team-a").requests_per_second, 100);
  EXPECT_EQ(c.rate_limits.overrides.at("team-a").tokens_per_second, 100000);
  EXPECT_EQ(c.breaker.window_type, CircuitBreakerWindowType::kTimeBased);
  EXPECT_EQ(c.breaker.minimum_calls, 20);
  EXPECT_EQ(c.fallback_model, "smollm2-135m-instruct");
  ASSERT_TRUE(c.has_fallback_upstream);
  EXPECT_EQ(c.fallback_upstream.port, kFallbackRuntimePort);
  EXPECT_EQ(c.slo_ttft_p99_seconds, 0.5);
  EXPECT_NE(std::find(c.ttft_buckets.begin(), c.ttft_buckets.end(), 0.5), c.ttft_buckets.end());
  EXPECT_EQ(c.cache.max_bytes, 128u << 20);
  EXPECT_EQ(c.cache.ttl, minutes(10));
  EXPECT_EQ(c.retries.backoff, milliseconds(25));
}

TEST(SidecarConfigYamlTest, EveryValueFormLoads) {
  json object = Sample("minimal.yaml");
  object["spec"]["slo"] = {{"ttftP99Seconds", 0.123456789}};
  object["spec"]["sidecar"] = {
      {"maxBodyBytes", 123456},
      {"timeouts", {{"connect", 1.5}, {"upstream", "90"}, {"drain", "0"}}},
      {"defaultClass", "b_2"},
      {"classes",
       {{{"name", "a-1"}, {"timeout", "250ms"}, {"degrade", {{"triggers", json::array()}}}},
        {{"name", "b_2"}, {"degrade", {{"fallbackModel", false}, {"maxTokensCap", 64}}}}}},
      {"rateLimits",
       {{"default", {{"requestsPerSecond", 0.25}, {"tokenBurst", 1e9}}},
        {"overrides",
         {{"tenant: \"quoted\" # not a comment", {{"requestsPerSecond", 1}}},
          {"on", {{"tokensPerSecond", 2}}},
          {"véronique", json::object()}}}}},
      {"circuitBreaker",
       {{"windowType", "count"}, {"windowSize", 100}, {"failureRateThreshold", 12.5}}},
      {"cache", {{"enabled", false}, {"maxBytes", "1GB"}, {"maxEntryBytes", 1000}}},
      {"metrics",
       {{"ttftBuckets", {0.05, 0.2, 1}},
        {"e2eBuckets", {1, 10}},
        {"statsWindow", "2m"},
        {"statsBucket", "5s"}}}};
  const SidecarConfig c = Load(Parse(object).spec);
  EXPECT_EQ(c.max_body_bytes, 123456u);
  EXPECT_EQ(c.connect_timeout, milliseconds(1500));
  EXPECT_EQ(c.upstream_timeout, seconds(90));
  EXPECT_EQ(c.drain_timeout, seconds(0));
  ASSERT_EQ(c.classes.size(), 2u);
  EXPECT_EQ(c.classes[0].timeout, milliseconds(250));
  EXPECT_FALSE(c.classes[0].degrade.degrade_on.breaker_open);
  EXPECT_FALSE(c.classes[1].degrade.allow_fallback_model);
  EXPECT_EQ(c.classes[1].timeout, seconds(60));
  EXPECT_EQ(c.default_class, "b_2");
  EXPECT_EQ(c.rate_limits.default_limit.requests_per_second, 0.25);
  EXPECT_EQ(c.rate_limits.default_limit.token_burst, 1e9);
  EXPECT_EQ(c.rate_limits.overrides.size(), 3u);
  EXPECT_EQ(c.rate_limits.overrides.at("tenant: \"quoted\" # not a comment").requests_per_second,
            1);
  EXPECT_EQ(c.rate_limits.overrides.at("on").tokens_per_second, 2);
  EXPECT_EQ(c.rate_limits.overrides.count("véronique"), 1u);
  EXPECT_EQ(c.breaker.window_type, CircuitBreakerWindowType::kCountBased);
  EXPECT_EQ(c.breaker.failure_rate_threshold, 12.5);
  EXPECT_FALSE(c.cache_enabled);
  EXPECT_EQ(c.cache.max_bytes, 1000000000u);
  EXPECT_EQ(c.cache.max_entry_bytes, 1000u);
  EXPECT_EQ(c.slo_ttft_p99_seconds, 0.123456789);
  EXPECT_EQ(c.ttft_buckets, (std::vector<double>{0.05, 0.123456789, 0.2, 1}));
  EXPECT_EQ(c.e2e_buckets, (std::vector<double>{1, 10}));
  EXPECT_EQ(c.stats_window.window, minutes(2));
  EXPECT_EQ(c.stats_window.bucket_width, seconds(5));
}

// The operator's duration and byte-size grammars are the sidecar's.
TEST(SidecarConfigYamlTest, UnitGrammarsAgreeWithTheSidecar) {
  for (const char* text :
       {"250ms", "30s", "2m", "1h",    "500us", "100ns", "1.5", "0",   ".5s", "1e3ms", "",
        "s",     "-1s", "1d", "1m30s", "abc",   " 1s",   "1s ", "+1s", "inf", "nan",   "0x10"}) {
    auto mine = ParseDurationText(text);
    auto theirs = ParseDuration(text);
    EXPECT_EQ(mine.ok(), theirs.ok()) << "'" << text << "'";
    if (mine.ok() && theirs.ok()) {
      EXPECT_EQ(*mine, *theirs) << text;
    }
  }
  for (const char* text :
       {"1048576", "64MiB", "512KiB", "1GiB", "1MB", "10KB", "100B", "1TB", "1TiB", "0", "", "MiB",
        "1.5MiB", "-1", "1mb", "18446744073709551616", "17179869184GiB"}) {
    auto mine = ParseByteSizeText(text);
    auto theirs = ParseByteSize(text);
    EXPECT_EQ(mine.ok(), theirs.ok()) << "'" << text << "'";
    if (mine.ok() && theirs.ok()) {
      EXPECT_EQ(*mine, *theirs) << text;
    }
  }
}

}  // namespace
}  // namespace kinfer::api
