// ToJson(InferenceServiceSpec): the effective spec in the CRD's JSON shape.
#include "operator/api/inference_service.h"

namespace kinfer::api {

namespace {

using nlohmann::json;

json Model(const ModelSpec& m) {
  json out = {{"name", m.name}, {"uri", m.uri}, {"format", m.format}};
  if (!m.sha256.empty()) out["sha256"] = m.sha256;
  return out;
}

json Limit(const RateLimitSpec& l) {
  return {{"requestsPerSecond", l.requests_per_second},
          {"requestBurst", l.request_burst},
          {"tokensPerSecond", l.tokens_per_second},
          {"tokenBurst", l.token_burst}};
}

json Sidecar(const SidecarSpec& s) {
  json classes = json::array();
  for (const PriorityClassSpec& c : s.classes) {
    classes.push_back({{"name", c.name},
                       {"timeout", c.timeout.text},
                       {"degrade",
                        {{"fallbackModel", c.degrade.fallback_model},
                         {"maxTokensCap", c.degrade.max_tokens_cap},
                         {"triggers", c.degrade.triggers}}}});
  }
  json overrides = json::object();
  for (const auto& [tenant, limit] : s.rate_limits.overrides) overrides[tenant] = Limit(limit);
  const AdmissionSpec& a = s.admission;
  const CircuitBreakerSpec& b = s.circuit_breaker;
  json metrics = {{"statsWindow", s.metrics.stats_window.text},
                  {"statsBucket", s.metrics.stats_bucket.text}};
  if (s.metrics.ttft_buckets) metrics["ttftBuckets"] = *s.metrics.ttft_buckets;
  if (s.metrics.e2e_buckets) metrics["e2eBuckets"] = *s.metrics.e2e_buckets;
  json out = {{"maxBodyBytes", s.max_body_bytes.text},
              {"maxConnections", s.max_connections},
              {"timeouts",
               {{"connect", s.timeouts.connect.text},
                {"upstream", s.timeouts.upstream.text},
                {"drain", s.timeouts.drain.text},
                {"clientWrite", s.timeouts.client_write.text},
                {"clientIdle", s.timeouts.client_idle.text}}},
              {"defaultClass", s.default_class},
              {"classes", std::move(classes)},
              {"admission",
               {{"maxConcurrency", a.max_concurrency},
                {"reservedForTop", a.reserved_for_top},
                {"maxQueue", a.max_queue},
                {"maxQueuePerClass", a.max_queue_per_class},
                {"initialServiceTime", a.initial_service_time.text},
                {"ewmaAlpha", a.ewma_alpha},
                {"codelTarget", a.codel_target.text},
                {"codelInterval", a.codel_interval.text},
                {"minRetryAfter", a.min_retry_after.text}}},
              {"rateLimits",
               {{"default", Limit(s.rate_limits.default_limit)},
                {"overrides", std::move(overrides)},
                {"maxTrackedKeys", s.rate_limits.max_tracked_keys}}},
              {"circuitBreaker",
               {{"windowType", b.window_type},
                {"windowSize", b.window_size},
                {"minimumCalls", b.minimum_calls},
                {"failureRateThreshold", b.failure_rate_threshold},
                {"slowCallDuration", b.slow_call_duration.text},
                {"slowCallRateThreshold", b.slow_call_rate_threshold},
                {"openDuration", b.open_duration.text},
                {"halfOpenPermittedCalls", b.half_open_permitted_calls}}},
              {"degrade", {{"topClassOnlyWhenPrimaryDown", s.top_class_only_when_primary_down}}},
              {"cache",
               {{"enabled", s.cache.enabled},
                {"maxBytes", s.cache.max_bytes.text},
                {"ttl", s.cache.ttl.text},
                {"maxEntryBytes", s.cache.max_entry_bytes.text}}},
              {"retries",
               {{"enabled", s.retries.enabled},
                {"maxRetries", s.retries.max_retries},
                {"budgetPercent", s.retries.budget_percent},
                {"minRetriesPerSecond", s.retries.min_retries_per_second},
                {"backoff", s.retries.backoff.text}}},
              {"metrics", std::move(metrics)}};
  if (!s.image.empty()) out["image"] = s.image;
  if (!s.api_keys_secret_name.empty()) out["apiKeysSecretName"] = s.api_keys_secret_name;
  out["requireApiKey"] = s.require_api_key;
  return out;
}

}  // namespace

json ToJson(const InferenceServiceSpec& spec) {
  json runtime = {{"maxBatchTokens", spec.runtime.max_batch_tokens},
                  {"maxRunningRequests", spec.runtime.max_running_requests},
                  {"kvCacheFraction", spec.runtime.kv_cache_fraction},
                  {"contextSize", spec.runtime.context_size}};
  if (!spec.runtime.image.empty()) runtime["image"] = spec.runtime.image;
  if (const auto& sp = spec.runtime.speculative) {
    runtime["speculative"] = {{"enabled", sp->enabled},
                              {"method", sp->method},
                              {"numSpeculativeTokens", sp->num_speculative_tokens}};
    if (sp->draft_model) runtime["speculative"]["draftModel"] = Model(*sp->draft_model);
  }
  if (!spec.runtime.extra_args.empty()) runtime["extraArgs"] = spec.runtime.extra_args;

  json resources = {{"gpus", spec.resources.gpus},
                    {"gpuResourceName", spec.resources.gpu_resource_name}};
  if (!spec.resources.cpu.empty()) resources["cpu"] = spec.resources.cpu;
  if (!spec.resources.memory.empty()) resources["memory"] = spec.resources.memory;

  const AutoscalingSpec& a = spec.autoscaling;
  json metrics_source = {{"type", a.metrics_source_type}};
  if (a.prometheus) {
    json queries = json::object();
    if (!a.prometheus->queue_depth_query.empty())
      queries["queueDepth"] = a.prometheus->queue_depth_query;
    if (!a.prometheus->in_flight_query.empty()) queries["inFlight"] = a.prometheus->in_flight_query;
    if (!a.prometheus->ttft_buckets_query.empty())
      queries["ttftBuckets"] = a.prometheus->ttft_buckets_query;
    metrics_source["prometheus"] = {{"url", a.prometheus->url}};
    if (!queries.empty()) metrics_source["prometheus"]["queries"] = std::move(queries);
  }
  json out = {{"model", Model(spec.model)},
              {"runtime", std::move(runtime)},
              {"sidecar", Sidecar(spec.sidecar)},
              {"resources", std::move(resources)},
              {"autoscaling",
               {{"enabled", a.enabled},
                {"minReplicas", a.min_replicas},
                {"maxReplicas", a.max_replicas},
                {"targetQueueDepthPerReplica", a.target_queue_depth_per_replica},
                {"targetRequestsPerSecondPerReplica", a.target_requests_per_second_per_replica},
                {"stableWindowSeconds", a.stable_window_seconds},
                {"panicWindowPercent", a.panic_window_percent},
                {"panicThreshold", a.panic_threshold},
                {"scaleDownDelaySeconds", a.scale_down_delay_seconds},
                {"maxScaleUpRate", a.max_scale_up_rate},
                {"maxScaleDownRate", a.max_scale_down_rate},
                {"metricsSource", std::move(metrics_source)}}}};
  if (spec.fallback_model) out["fallbackModel"] = Model(*spec.fallback_model);
  if (!spec.node_selector.empty()) out["nodeSelector"] = spec.node_selector;
  if (spec.tolerations.is_array()) out["tolerations"] = spec.tolerations;
  if (spec.affinity.is_object()) out["affinity"] = spec.affinity;
  if (!spec.priority_class_name.empty()) out["priorityClassName"] = spec.priority_class_name;
  if (spec.slo_ttft_p99_seconds) out["slo"] = {{"ttftP99Seconds", *spec.slo_ttft_p99_seconds}};
  if (spec.replicas) out["replicas"] = *spec.replicas;
  return out;
}

}  // namespace kinfer::api
