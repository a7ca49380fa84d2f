// ParseInferenceService: spec and metadata (status: inference_service_status.cc). Every default
// below is the CRD's; every range is the CRD's, re-checked; the cross-field rules are the CEL
// rules and the ones the schema cannot express (see inference_service.h).
#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <string_view>

#include "operator/api/autoscaler_config.h"
#include "operator/api/inference_service.h"
#include "operator/api/json_fields.h"

namespace kinfer::api {

namespace {

using nlohmann::json;

bool IsLower(char c) { return c >= 'a' && c <= 'z'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsAlnum(char c) { return IsLower(c) || IsDigit(c) || (c >= 'A' && c <= 'Z'); }

// [a-z0-9]([-a-z0-9]*[a-z0-9])? of at most max_length.
bool IsDnsLabel(std::string_view s, size_t max_length = 63) {
  if (s.empty() || s.size() > max_length) return false;
  for (char c : s) {
    if (!(IsLower(c) || IsDigit(c) || c == '-')) return false;
  }
  return s.front() != '-' && s.back() != '-';
}

// A DNS-1035 label: also starts with a letter.
bool IsDns1035Label(std::string_view s, size_t max_length) {
  return IsDnsLabel(s, max_length) && IsLower(s.front());
}

// Dot-separated DNS labels, at most 253 characters.
bool IsDnsSubdomain(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  size_t start = 0;
  while (true) {
    const size_t dot = s.find('.', start);
    if (!IsDnsLabel(s.substr(start, dot == std::string_view::npos ? dot : dot - start))) {
      return false;
    }
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

// [A-Za-z0-9][A-Za-z0-9._:-]*
bool IsModelName(std::string_view s) {
  if (s.empty() || !IsAlnum(s.front())) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return IsAlnum(c) || c == '.' || c == '_' || c == ':' || c == '-';
  });
}

// [a-z0-9_-]+
bool IsClassName(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return IsLower(c) || IsDigit(c) || c == '_' || c == '-';
  });
}

bool HasSpaceOrControl(std::string_view s) {
  return std::any_of(s.begin(), s.end(),
                     [](char c) { return static_cast<unsigned char>(c) <= 0x20 || c == 0x7f; });
}

// A relative path of non-empty segments, none of them "." or "..".
bool IsCleanRelativePath(std::string_view p) {
  if (p.empty() || p.front() == '/' || p.back() == '/') return false;
  size_t start = 0;
  while (true) {
    const size_t slash = p.find('/', start);
    const std::string_view seg =
        p.substr(start, slash == std::string_view::npos ? slash : slash - start);
    if (seg.empty() || seg == "." || seg == "..") return false;
    if (slash == std::string_view::npos) return true;
    start = slash + 1;
  }
}

// Derives source, claim and path from m->uri. INVALID_ARGUMENT (message without the path) for a
// form the operator cannot serve.
Status ParseModelUri(ModelSpec* m) {
  const std::string& uri = m->uri;
  if (HasSpaceOrControl(uri))
    return InvalidArgument("must not contain spaces or control characters");
  if (uri.starts_with("pvc://")) {
    const std::string_view rest = std::string_view(uri).substr(6);
    const size_t slash = rest.find('/');
    if (slash == std::string_view::npos) {
      return InvalidArgument("'" + uri + "': expected pvc://CLAIM/PATH");
    }
    const std::string_view claim = rest.substr(0, slash), path = rest.substr(slash + 1);
    if (!IsDnsSubdomain(claim) || claim.find('.') != std::string_view::npos) {
      return InvalidArgument("'" + uri + "': the claim name must be a DNS label");
    }
    if (!IsCleanRelativePath(path)) {
      return InvalidArgument(
          "'" + uri + "': the path in the claim must name a file, without '.' or '..' segments");
    }
    m->source = ModelSource::kPvc;
    m->pvc_claim = std::string(claim);
    m->path = std::string(path);
    return Status::Ok();
  }
  if (uri.starts_with("file://")) {
    const std::string_view path = std::string_view(uri).substr(7);
    if (!path.starts_with("/") || !IsCleanRelativePath(path.substr(1))) {
      return InvalidArgument("'" + uri +
                             "': expected file:///ABSOLUTE/PATH without '.' or '..' segments");
    }
    if (path.rfind('/') == 0) {
      return InvalidArgument("'" + uri +
                             "': the file must be in a directory other than / (that directory is "
                             "mounted from the node)");
    }
    m->source = ModelSource::kHostPath;
    m->pvc_claim.clear();
    m->path = std::string(path);
    return Status::Ok();
  }
  if (uri.starts_with("http://") || uri.starts_with("https://")) {
    const size_t host_begin = uri.find("://") + 3;
    if (host_begin >= uri.size() || uri[host_begin] == '/') {
      return InvalidArgument("'" + uri + "': missing host");
    }
    if (m->sha256.empty()) {
      return InvalidArgument("a model downloaded over http(s) must be pinned with sha256");
    }
    m->source = ModelSource::kHttp;
    m->pvc_claim.clear();
    m->path.clear();
    return Status::Ok();
  }
  const size_t colon = uri.find(':');
  const std::string scheme = colon == std::string::npos ? uri : uri.substr(0, colon);
  return InvalidArgument(
      "scheme '" + scheme +
      "' is not supported (use pvc://CLAIM/PATH, file:///PATH or http(s)://...)");
}

void ReadModel(FieldReader r, ModelSpec* m) {
  if (!r.Has("name")) r.Fail("name", "is required");
  if (!r.Has("uri")) r.Fail("uri", "is required");
  r.String("name", &m->name, 128);
  if (r.ok() && !IsModelName(m->name)) {
    r.Fail("name", "'" + m->name + "' must match [A-Za-z0-9][A-Za-z0-9._:-]*");
  }
  r.String("uri", &m->uri, 2048);
  r.Enum("format", &m->format, {"gguf"});
  r.String("sha256", &m->sha256);
  if (r.ok() && !m->sha256.empty() &&
      (m->sha256.size() != 64 || !std::all_of(m->sha256.begin(), m->sha256.end(), [](char c) {
         return IsDigit(c) || (c >= 'a' && c <= 'f');
       }))) {
    r.Fail("sha256", "must be 64 lowercase hex digits");
  }
  if (!r.ok()) return;
  if (Status s = ParseModelUri(m); !s.ok()) r.Fail("uri", s.message());
}

// Flags the operator sets itself, each from the spec field named beside it: the pod layout
// (runtime on 127.0.0.1:8081), the model, and what the sidecar's admission and limits are
// coupled to. kinfer-runtime's flags are last-wins, so one of these in extraArgs would silently
// undo the field (a --max-body-bytes below the sidecar's answered 413 to bodies it accepted).
// --threads stays open: it only tunes the CPU work (the operator derives it from resources.cpu).
struct OwnedFlag {
  std::string_view flag;
  std::string_view field;
};
constexpr OwnedFlag kOperatorRuntimeFlags[] = {
    {"--model", "spec.model"},
    {"--model-name", "spec.model.name"},
    {"--host", "the pod layout (the runtime on 127.0.0.1:8081)"},
    {"--port", "the pod layout (the runtime on 127.0.0.1:8081)"},
    {"--ctx-size", "spec.runtime.contextSize"},
    {"--max-batch-tokens", "spec.runtime.maxBatchTokens"},
    {"--max-running", "spec.runtime.maxRunningRequests (the sidecar admits as many)"},
    {"--max-body-bytes", "spec.sidecar.maxBodyBytes (the runtime takes what the sidecar lets in)"},
    {"--write-timeout", "spec.sidecar.timeouts.clientWrite"},
    {"--device", "spec.resources.gpus"},
    {"--kv-cache-fraction", "spec.runtime.kvCacheFraction"},
    {"--spec-default", "spec.runtime.speculative"},
    {"--spec-tokens", "spec.runtime.speculative.numSpeculativeTokens"},
    {"--draft-model", "spec.runtime.speculative.draftModel"},
};

void ReadRuntime(FieldReader r, RuntimeSpec* rt) {
  r.String("image", &rt->image, 512);
  r.Int("maxBatchTokens", &rt->max_batch_tokens, 64, 1048576);
  r.Int("maxRunningRequests", &rt->max_running_requests, 1, 4096);
  if (r.ok() && rt->max_running_requests >= rt->max_batch_tokens) {
    r.Fail("maxRunningRequests",
           "must be less than maxBatchTokens (" + std::to_string(rt->max_batch_tokens) +
               "): kinfer-runtime runs at most maxBatchTokens - 1 requests at once and would "
               "lower it silently, while the sidecar admits as many as maxRunningRequests");
  }
  r.Number("kvCacheFraction", &rt->kv_cache_fraction, 0, 1, /*lo_exclusive=*/true);
  r.Int64("contextSize", &rt->context_size, 0, 16777216);
  if (r.Has("speculative")) {
    FieldReader s = r.Object("speculative");
    SpeculativeSpec spec;
    s.Bool("enabled", &spec.enabled);
    s.Enum("method", &spec.method, {"draft", "ngram"});
    s.Int("numSpeculativeTokens", &spec.num_speculative_tokens, 1, 16);
    if (s.Has("draftModel")) {
      spec.draft_model.emplace();
      ReadModel(s.Object("draftModel"), &*spec.draft_model);
    }
    rt->speculative = std::move(spec);
  }
  if (const json* args = r.Raw("extraArgs")) {
    if (!args->is_array()) return r.Fail("extraArgs", "expected a list of strings");
    if (args->size() > 64) return r.Fail("extraArgs", "at most 64 items");
    for (size_t i = 0; i < args->size(); ++i) {
      const std::string key = "extraArgs[" + std::to_string(i) + "]";
      const json& a = (*args)[i];
      if (!a.is_string() || a.get_ref<const std::string&>().size() > 1024) {
        return r.Fail(key, "expected a string of at most 1024 characters");
      }
      const std::string& text = a.get_ref<const std::string&>();
      const std::string_view flag = std::string_view(text).substr(0, text.find('='));
      for (const OwnedFlag& owned : kOperatorRuntimeFlags) {
        if (flag == owned.flag) {
          return r.Fail(key, std::string(owned.flag) + " is set by the operator from " +
                                 std::string(owned.field) + "; set that instead");
        }
      }
      rt->extra_args.push_back(text);
    }
  }
}

void ReadRateLimit(FieldReader r, RateLimitSpec* l) {
  constexpr double kMax = 1e15;
  r.Number("requestsPerSecond", &l->requests_per_second, 0, kMax);
  r.Number("requestBurst", &l->request_burst, 0, kMax);
  r.Number("tokensPerSecond", &l->tokens_per_second, 0, kMax);
  r.Number("tokenBurst", &l->token_burst, 0, kMax);
}

void ReadBuckets(FieldReader& r, std::string_view key, std::optional<std::vector<double>>* out) {
  const json* v = r.Raw(key);
  if (!v) return;
  if (!v->is_array() || v->empty() || v->size() > 64) {
    return r.Fail(key, "expected a list of 1 to 64 numbers");
  }
  std::vector<double> edges;
  for (const json& e : *v) {
    if (!e.is_number()) return r.Fail(key, "expected numbers, got " + e.dump());
    const double d = e.get<double>();
    if (!std::isfinite(d) || d <= 0 || (!edges.empty() && d <= edges.back())) {
      return r.Fail(key, "must be finite, > 0 and strictly increasing");
    }
    edges.push_back(d);
  }
  *out = std::move(edges);
}

void ReadClasses(FieldReader& r, SidecarSpec* sc) {
  const json* v = r.Raw("classes");
  if (!v) return;
  if (!v->is_array() || v->empty() || v->size() > 16) {
    return r.Fail("classes", "expected a list of 1 to 16 classes");
  }
  std::vector<PriorityClassSpec> classes;
  std::set<std::string> names;
  for (size_t i = 0; i < v->size() && r.ok(); ++i) {
    FieldReader c = r.Element((*v)[i], r.PathOf("classes[" + std::to_string(i) + "]"));
    PriorityClassSpec pc;
    if (!c.Has("name")) c.Fail("name", "is required");
    c.String("name", &pc.name, 63);
    if (c.ok() && !IsClassName(pc.name)) c.Fail("name", "'" + pc.name + "' must match [a-z0-9_-]+");
    if (c.ok() && !names.insert(pc.name).second) c.Fail("name", "'" + pc.name + "' is given twice");
    c.Duration("timeout", &pc.timeout, /*positive=*/true);
    FieldReader d = c.Object("degrade");
    d.Bool("fallbackModel", &pc.degrade.fallback_model);
    d.Int64("maxTokensCap", &pc.degrade.max_tokens_cap, 0, INT32_MAX);
    if (const json* t = d.Raw("triggers")) {
      if (!t->is_array() || t->size() > 3) {
        d.Fail("triggers", "expected a list of breaker_open, deadline, slo");
      } else {
        std::vector<std::string> triggers;
        for (const json& name : *t) {
          const bool known =
              name.is_string() && (name == "breaker_open" || name == "deadline" || name == "slo");
          if (!known) {
            d.Fail("triggers", name.dump() + " is not one of breaker_open, deadline, slo");
            break;
          }
          if (std::find(triggers.begin(), triggers.end(), name.get<std::string>()) !=
              triggers.end()) {
            d.Fail("triggers", name.dump() + " is given twice");
            break;
          }
          triggers.push_back(name.get<std::string>());
        }
        pc.degrade.triggers = std::move(triggers);
      }
    }
    classes.push_back(std::move(pc));
  }
  sc->classes = std::move(classes);
}

void ReadSidecar(FieldReader r, SidecarSpec* sc) {
  r.String("image", &sc->image, 512);
  r.Bytes("maxBodyBytes", &sc->max_body_bytes, /*positive=*/true);
  if (r.ok() && sc->max_body_bytes.bytes > kRuntimeMaxBodyBytes) {
    r.Fail("maxBodyBytes", "'" + sc->max_body_bytes.text +
                               "' must be at most 4GiB (4294967296): it is also kinfer-runtime's "
                               "--max-body-bytes, which takes at most 4294967296");
  }
  r.Int64("maxConnections", &sc->max_connections, 0, int64_t{1} << 20);
  FieldReader t = r.Object("timeouts");
  t.Duration("connect", &sc->timeouts.connect, true);
  t.Duration("upstream", &sc->timeouts.upstream, true);
  t.Duration("drain", &sc->timeouts.drain, false);
  t.Duration("clientWrite", &sc->timeouts.client_write, true);
  if (t.ok() &&
      sc->timeouts.client_write.value > std::chrono::seconds(kRuntimeMaxWriteTimeoutSeconds)) {
    t.Fail("clientWrite", "'" + sc->timeouts.client_write.text +
                              "' must be at most 24h (86400s): it is also kinfer-runtime's "
                              "--write-timeout, which takes at most 86400 seconds");
  }
  t.Duration("clientIdle", &sc->timeouts.client_idle, true);
  r.String("defaultClass", &sc->default_class, 63);
  ReadClasses(r, sc);
  if (r.ok() &&
      std::none_of(sc->classes.begin(), sc->classes.end(),
                   [&](const PriorityClassSpec& c) { return c.name == sc->default_class; })) {
    r.Fail("defaultClass", "'" + sc->default_class + "' must name one of the classes" +
                               (r.Has("classes") ? "" : " (critical, standard, batch)"));
  }
  r.String("apiKeysSecretName", &sc->api_keys_secret_name, 253);
  if (r.ok() && !sc->api_keys_secret_name.empty() && !IsDnsSubdomain(sc->api_keys_secret_name)) {
    r.Fail("apiKeysSecretName", "must be a DNS subdomain (a Secret name)");
  }
  r.Bool("requireApiKey", &sc->require_api_key);
  if (r.ok() && sc->require_api_key && sc->api_keys_secret_name.empty()) {
    r.Fail("requireApiKey", "needs spec.sidecar.apiKeysSecretName (the keys it accepts)");
  }

  AdmissionSpec& a = sc->admission;
  FieldReader ar = r.Object("admission");
  ar.Int("maxConcurrency", &a.max_concurrency, 1, 100000);
  ar.Int("reservedForTop", &a.reserved_for_top, 0, 100000);
  ar.Int("maxQueue", &a.max_queue, 1, 1000000);
  ar.Int("maxQueuePerClass", &a.max_queue_per_class, 1, 1000000);
  ar.Duration("initialServiceTime", &a.initial_service_time, true);
  ar.Number("ewmaAlpha", &a.ewma_alpha, 0, 1, true);
  ar.Duration("codelTarget", &a.codel_target, true);
  ar.Duration("codelInterval", &a.codel_interval, true);
  ar.Duration("minRetryAfter", &a.min_retry_after, false);
  if (ar.ok() && a.max_concurrency > 0 && a.reserved_for_top >= a.max_concurrency) {
    ar.Fail("reservedForTop", "must be less than maxConcurrency");
  }
  if (ar.ok() && a.max_queue_per_class > a.max_queue) {
    ar.Fail("maxQueuePerClass", "must be at most maxQueue");
  }

  FieldReader rl = r.Object("rateLimits");
  ReadRateLimit(rl.Object("default"), &sc->rate_limits.default_limit);
  if (const json* o = rl.Raw("overrides")) {
    if (!o->is_object() || o->size() > 1000) {
      rl.Fail("overrides", "expected a map of at most 1000 tenants");
    } else {
      for (const auto& [tenant, limits] : o->items()) {
        if (tenant.empty()) {
          rl.Fail("overrides", "a tenant name is empty");
          break;
        }
        ReadRateLimit(rl.Element(limits, rl.PathOf("overrides." + tenant)),
                      &sc->rate_limits.overrides[tenant]);
      }
    }
  }
  rl.Int64("maxTrackedKeys", &sc->rate_limits.max_tracked_keys, 1, 10000000);

  CircuitBreakerSpec& b = sc->circuit_breaker;
  FieldReader br = r.Object("circuitBreaker");
  br.Enum("windowType", &b.window_type, {"count", "time"});
  br.Int("windowSize", &b.window_size, 1, 1048576);
  br.Int("minimumCalls", &b.minimum_calls, 1, INT32_MAX);
  br.Number("failureRateThreshold", &b.failure_rate_threshold, 0, 100, true);
  br.Duration("slowCallDuration", &b.slow_call_duration, true);
  br.Number("slowCallRateThreshold", &b.slow_call_rate_threshold, 0, 100, true);
  br.Duration("openDuration", &b.open_duration, true);
  br.Int("halfOpenPermittedCalls", &b.half_open_permitted_calls, 1, 1000);

  r.Object("degrade").Bool("topClassOnlyWhenPrimaryDown", &sc->top_class_only_when_primary_down);

  CacheSpec& c = sc->cache;
  FieldReader cr = r.Object("cache");
  cr.Bool("enabled", &c.enabled);
  cr.Bytes("maxBytes", &c.max_bytes, true);
  cr.Duration("ttl", &c.ttl, true);
  cr.Bytes("maxEntryBytes", &c.max_entry_bytes, true);
  if (cr.ok() && c.max_entry_bytes.bytes > c.max_bytes.bytes) {
    cr.Fail("maxEntryBytes", "'" + c.max_entry_bytes.text + "' must be at most maxBytes ('" +
                                 c.max_bytes.text + "')");
  }

  RetriesSpec& rt = sc->retries;
  FieldReader rr = r.Object("retries");
  rr.Bool("enabled", &rt.enabled);
  rr.Int("maxRetries", &rt.max_retries, 0, 10);
  rr.Number("budgetPercent", &rt.budget_percent, 0, 100);
  rr.Int64("minRetriesPerSecond", &rt.min_retries_per_second, 0, INT32_MAX);
  rr.Duration("backoff", &rt.backoff, false);

  SidecarMetricsSpec& m = sc->metrics;
  FieldReader mr = r.Object("metrics");
  ReadBuckets(mr, "ttftBuckets", &m.ttft_buckets);
  ReadBuckets(mr, "e2eBuckets", &m.e2e_buckets);
  mr.Duration("statsWindow", &m.stats_window, true);
  mr.Duration("statsBucket", &m.stats_bucket, true);
  if (mr.ok()) {
    const auto window = m.stats_window.value, bucket = m.stats_bucket.value;
    if (window % bucket != std::chrono::nanoseconds(0)) {
      mr.Fail("statsWindow", "'" + m.stats_window.text +
                                 "' must be a whole multiple of statsBucket ('" +
                                 m.stats_bucket.text + "')");
    } else if (window / bucket > 3600) {
      mr.Fail("statsWindow", "at most 3600 statsBuckets");
    }
  }
}

void ReadResources(FieldReader r, ResourcesSpec* res) {
  r.Int("gpus", &res->gpus, 0, 16);
  r.String("gpuResourceName", &res->gpu_resource_name, 253);
  if (r.ok()) {
    // An extended resource: prefix/name, a DNS subdomain outside kubernetes.io and a name of
    // [A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?. Without the prefix it would name a standard
    // resource ("cpu", "memory") and overwrite the container's own request of it.
    const std::string& n = res->gpu_resource_name;
    const size_t slash = n.find('/');
    const std::string_view prefix =
        slash == std::string::npos ? std::string_view() : std::string_view(n).substr(0, slash);
    const std::string_view name =
        slash == std::string::npos ? std::string_view() : std::string_view(n).substr(slash + 1);
    const bool ok = IsDnsSubdomain(prefix) && prefix != "kubernetes.io" && !prefix.ends_with(".kubernetes.io") &&
                    !name.empty() && name.size() <= 63 && IsAlnum(name.front()) && IsAlnum(name.back()) &&
                    std::all_of(name.begin(), name.end(), [](char ch) {
                      return IsAlnum(ch) || ch == '-' || ch == '_' || ch == '.';
                    });
    if (!ok) {
      r.Fail("gpuResourceName", "'" + n + "' is not an extended resource name (vendor.com/name, as nvidia.com/gpu)");
    }
  }
  r.Quantity("cpu", &res->cpu);
  r.Quantity("memory", &res->memory);
}

void ReadAutoscaling(FieldReader r, AutoscalingSpec* a) {
  r.Bool("enabled", &a->enabled);
  r.Int("minReplicas", &a->min_replicas, 1, 1000);
  r.Int("maxReplicas", &a->max_replicas, 1, 1000);
  r.Number("targetQueueDepthPerReplica", &a->target_queue_depth_per_replica, 0, 100000, true);
  r.Number("targetRequestsPerSecondPerReplica", &a->target_requests_per_second_per_replica, 0,
           100000);
  r.Int("stableWindowSeconds", &a->stable_window_seconds, 6, 3600);
  r.Number("panicWindowPercent", &a->panic_window_percent, 0, 100, true);
  r.Number("panicThreshold", &a->panic_threshold, 1, 100, true);
  r.Int("scaleDownDelaySeconds", &a->scale_down_delay_seconds, 0, 3600);
  r.Number("maxScaleUpRate", &a->max_scale_up_rate, 1, 1000);
  r.Number("maxScaleDownRate", &a->max_scale_down_rate, 1, 1000);
  if (r.ok() && a->min_replicas > a->max_replicas) {
    r.Fail("minReplicas", "must be at most maxReplicas (" + std::to_string(a->max_replicas) + ")");
  }
  FieldReader ms = r.Object("metricsSource");
  ms.Enum("type", &a->metrics_source_type, {"pods", "prometheus"});
  if (ms.Has("prometheus")) {
    FieldReader p = ms.Object("prometheus");
    PrometheusSourceSpec prom;
    if (!p.Has("url")) p.Fail("url", "is required");
    p.String("url", &prom.url, 2048);
    if (p.ok() && (!(prom.url.starts_with("http://") || prom.url.starts_with("https://")) ||
                   HasSpaceOrControl(prom.url))) {
      p.Fail("url", "'" + prom.url + "' must be an http(s) URL");
    }
    FieldReader q = p.Object("queries");
    q.String("queueDepth", &prom.queue_depth_query, 4096);
    q.String("inFlight", &prom.in_flight_query, 4096);
    q.String("ttftBuckets", &prom.ttft_buckets_query, 4096);
    a->prometheus = std::move(prom);
  }
  if (ms.ok() && a->metrics_source_type == "prometheus" && !a->prometheus) {
    ms.Fail("prometheus", "is required when type is prometheus");
  }
}

void ReadStringMap(FieldReader& r, std::string_view key, std::map<std::string, std::string>* out,
                   size_t max_value_length) {
  const json* v = r.Raw(key);
  if (!v) return;
  if (!v->is_object()) return r.Fail(key, "expected a map of strings");
  for (const auto& [k, value] : v->items()) {
    if (!value.is_string() || value.get_ref<const std::string&>().size() > max_value_length) {
      return r.Fail(
          std::string(key) + "." + k,
          "expected a string of at most " + std::to_string(max_value_length) + " characters");
    }
    (*out)[k] = value.get<std::string>();
  }
}

void ReadSpec(FieldReader r, InferenceServiceSpec* spec) {
  if (!r.Has("model")) r.Fail("model", "is required");
  ReadModel(r.Object("model"), &spec->model);
  if (r.Has("fallbackModel")) {
    spec->fallback_model.emplace();
    ReadModel(r.Object("fallbackModel"), &*spec->fallback_model);
    if (r.ok() && spec->fallback_model->name == spec->model.name) {
      r.Fail("fallbackModel.name", "must differ from spec.model.name");
    }
  }
  ReadRuntime(r.Object("runtime"), &spec->runtime);
  ReadSidecar(r.Object("sidecar"), &spec->sidecar);
  // maxConcurrency left out follows the runtime's batch, so the sidecar lets through exactly what
  // the runtime decodes together (fewer would leave batch slots idle behind the sidecar's queue).
  AdmissionSpec& admission = spec->sidecar.admission;
  if (r.ok() && admission.max_concurrency == 0) {
    admission.max_concurrency = spec->runtime.max_running_requests;
    if (admission.reserved_for_top >= admission.max_concurrency) {
      r.Object("sidecar")
          .Object("admission")
          .Fail("reservedForTop", "must be less than spec.runtime.maxRunningRequests (" +
                                      std::to_string(admission.max_concurrency) +
                                      "), which maxConcurrency follows when it is left out");
    }
  }
  ReadResources(r.Object("resources"), &spec->resources);
  ReadStringMap(r, "nodeSelector", &spec->node_selector, 63);
  if (const json* t = r.Raw("tolerations")) {
    if (!t->is_array() ||
        !std::all_of(t->begin(), t->end(), [](const json& e) { return e.is_object(); })) {
      r.Fail("tolerations", "expected a list of objects (core/v1 Toleration)");
    } else {
      spec->tolerations = *t;
    }
  }
  if (const json* a = r.Raw("affinity")) {
    if (!a->is_object()) {
      r.Fail("affinity", "expected an object (core/v1 Affinity)");
    } else {
      spec->affinity = *a;
    }
  }
  r.String("priorityClassName", &spec->priority_class_name, 253);
  if (r.Has("slo")) {
    FieldReader slo = r.Object("slo");
    double ttft = 0;
    if (!slo.Has("ttftP99Seconds")) slo.Fail("ttftP99Seconds", "is required");
    slo.Number("ttftP99Seconds", &ttft, 0, 600, true);
    if (slo.ok()) spec->slo_ttft_p99_seconds = ttft;
  }
  ReadAutoscaling(r.Object("autoscaling"), &spec->autoscaling);
  if (r.Has("replicas")) {
    int replicas = 0;
    r.Int("replicas", &replicas, 0, 1000);
    spec->replicas = replicas;
  }
  if (!r.ok()) return;
  if (!spec->autoscaling.enabled && !spec->replicas) {
    return r.Fail("replicas", "is required when spec.autoscaling.enabled is false");
  }
  if (spec->autoscaling.enabled && spec->replicas) {
    return r.Fail("replicas",
                  "may be set only when spec.autoscaling.enabled is false (the built-in "
                  "autoscaler sizes the service)");
  }
  if (const auto& sp = spec->runtime.speculative;
      sp && sp->enabled && sp->method == "draft" && !sp->draft_model && !spec->fallback_model) {
    return r.Fail("runtime.speculative",
                  "method draft needs spec.runtime.speculative.draftModel or spec.fallbackModel");
  }
  if (Status s = MakeAutoscalerConfig(*spec).Validate(); !s.ok()) {
    r.Fail("autoscaling", s.message());
  }
}

void ReadMetadata(FieldReader r, ObjectMeta* m) {
  r.String("name", &m->name);
  if (r.ok() && !IsDns1035Label(m->name, 52)) {
    r.Fail("name", "'" + m->name +
                       "' must be a DNS-1035 label of at most 52 characters (it names the "
                       "Deployment, Service and PodDisruptionBudget)");
  }
  r.String("namespace", &m->namespace_name);
  r.String("uid", &m->uid);
  r.String("resourceVersion", &m->resource_version);
  r.Int64("generation", &m->generation, 0, INT64_MAX);
  ReadStringMap(r, "labels", &m->labels, 1 << 20);
  ReadStringMap(r, "annotations", &m->annotations, 1 << 30);
  m->deleting = r.Has("deletionTimestamp");
}

}  // namespace

std::vector<PriorityClassSpec> DefaultPriorityClasses() {
  using std::chrono::seconds;
  std::vector<PriorityClassSpec> classes(3);
  classes[0].name = "critical";
  classes[0].timeout = {"30s", seconds(30)};
  classes[1].name = "standard";
  classes[1].timeout = {"60s", seconds(60)};
  classes[2].name = "batch";
  classes[2].timeout = {"120s", seconds(120)};
  classes[2].degrade.max_tokens_cap = 256;
  return classes;
}

StatusOr<InferenceService> ParseInferenceService(const nlohmann::json& object) {
  if (!object.is_object()) return InvalidArgument("an InferenceService must be a JSON object");
  Status error;
  FieldReader top(&object, "", &error);
  InferenceService isvc;
  if (!top.Has("metadata")) top.Fail("metadata", "is required");
  ReadMetadata(top.Object("metadata"), &isvc.metadata);
  if (!top.Has("spec")) top.Fail("spec", "is required");
  ReadSpec(top.Object("spec"), &isvc.spec);
  if (!error.ok()) return error;
  if (const json* status = top.Raw("status")) isvc.status = ParseInferenceServiceStatus(*status);
  return isvc;
}

}  // namespace kinfer::api
