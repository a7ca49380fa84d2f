#include "sidecar/proxy/sidecar_core.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

namespace kinfer {
namespace {

using std::chrono::duration_cast;
using std::chrono::nanoseconds;

std::string_view AdmissionReasonName(AdmissionQueue::Reason reason) {
  switch (reason) {
    case AdmissionQueue::Reason::kQueueFull: return "queue_full";
    case AdmissionQueue::Reason::kClassFull: return "class_full";
    case AdmissionQueue::Reason::kDeadlineUnreachable: return "deadline_unreachable";
    case AdmissionQueue::Reason::kStandingQueue: return "standing_queue";
    case AdmissionQueue::Reason::kDuplicateId: return "duplicate_id";
    case AdmissionQueue::Reason::kDisplaced: return "displaced";
    default: return "overloaded";
  }
}

RetryBudgetConfig RetryBudgetConfigFrom(const RetryConfig& retries) {
  RetryBudgetConfig config;
  config.budget_percent = retries.budget_percent;
  config.min_retries_per_second = retries.min_retries_per_second;
  return config;
}

// The minimum number of samples before the window's P99 is trusted by the degrade rule.
constexpr uint64_t kMinSamplesForP99 = 20;

// The limiter's config with each override named as RequestInfo names a tenant's bucket
// (TenantRateKey): overrides are per tenant, and no key a client sends can match one.
RateLimiterConfig TenantLimits(const RateLimiterConfig& config) {
  RateLimiterConfig out = config;
  out.overrides.clear();
  for (const auto& [tenant, limit] : config.overrides) out.overrides[TenantRateKey(tenant)] = limit;
  return out;
}

}  // namespace

int64_t RetryAfterSeconds(std::chrono::nanoseconds d) {
  int64_t s = (d.count() + 999'999'999) / 1'000'000'000;
  return std::max<int64_t>(s, 1);
}

SidecarCore::SidecarCore(const SidecarConfig& config, SidecarMetrics* metrics)
    : config_(config),
      metrics_(metrics),
      rate_limiter_(TenantLimits(config.rate_limits)),
      cache_(config.cache_enabled ? std::make_unique<ResponseCache>(config.cache) : nullptr),
      degrade_(config.MakeDegradeConfig()),
      admission_(config.MakeAdmissionConfig()),
      breaker_(std::make_unique<CircuitBreaker>(config.breaker)),
      fallback_breaker_(config.has_fallback_upstream
                            ? std::make_unique<CircuitBreaker>(config.breaker)
                            : nullptr),
      retry_budget_(RetryBudgetConfigFrom(config.retries)),
      ttft_window_(config.stats_window) {}

SidecarCore::Verdict SidecarCore::Reject(int priority, int http_status, std::string reason,
                                         std::string message,
                                         std::optional<Duration> retry_after) {
  metrics_->CountRejected(priority, reason);
  Verdict v;
  v.action = Action::kReject;
  v.http_status = http_status;
  v.reason = std::move(reason);
  v.message = std::move(message);
  v.retry_after = retry_after;
  return v;
}

std::optional<double> SidecarCore::P99Ttft(TimePoint now) {
  if (ttft_window_.Count(now) < kMinSamplesForP99) return std::nullopt;
  return ttft_window_.Quantile(0.99, now);
}

SidecarCore::Verdict SidecarCore::OnArrival(RequestId id, std::string_view path,
                                            const RequestInfo& info, TimePoint now) {
  const int p = info.priority;
  if (draining_) {
    return Reject(p, 503, "draining", "the sidecar is shutting down; retry on another replica",
                  std::chrono::seconds(1));
  }

  RateLimiter::Decision limit = rate_limiter_.Check(info.rate_key, info.token_estimate, now);
  if (!limit.allowed) {
    if (limit.retry_after == TokenBucket::kNever) {
      return Reject(p, 429, "token_limit_exceeded",
                    "the request's token estimate exceeds the token burst of " + info.rate_label +
                        "; lower max_tokens or the prompt",
                    std::nullopt);
    }
    bool tokens = limit.limited_by == RateLimiter::Limit::kTokens;
    return Reject(p, 429, tokens ? "rate_limited_tokens" : "rate_limited_requests",
                  std::string("rate limit exceeded (") + (tokens ? "tokens" : "requests") +
                      " per second) for " + info.rate_label,
                  limit.retry_after);
  }

  std::optional<CacheKey> key;
  if (cache_) {
    CacheableRequest c;
    c.temperature = info.temperature;
    c.seed = info.seed;
    c.cache_control = info.cache_control;
    c.stream = info.stream;
    if (IsCacheable(c)) {
      key = MakeCacheKey(info.model, NormalizedRequestText(path, info));
      std::optional<CachedResponse> hit = cache_->Lookup(*key, now);
      metrics_->CountCache(hit.has_value());
      if (hit) {
        Verdict v;
        v.action = Action::kCacheHit;
        v.cached = std::move(*hit);
        return v;
      }
    }
  }

  const TimePoint deadline = now + info.timeout;
  DegradeInputs in;
  in.priority = p;
  // Down for a new request: OPEN, or HALF_OPEN with every probe permit taken (it would be
  // refused at OnStart all the same).
  in.breaker_open = breaker_->RetryAfter(now) > Duration::zero();
  in.fallback_available = FallbackAvailable(in.breaker_open, now);
  in.estimated_wait = admission_.EstimatedWait(p);
  in.time_to_deadline = info.timeout;
  in.p99_ttft = P99Ttft(now);
  in.requested_max_tokens = info.max_tokens;
  DegradeDecision d = degrade_.Decide(in);

  Verdict v;
  v.route.requested_max_tokens = info.max_tokens;
  if (d.kind == DegradeKind::kReject) {
    return Reject(p, 503, "breaker_open",
                  "the upstream is unavailable (circuit breaker open) and no fallback serves "
                  "this class",
                  breaker_->RetryAfter(now));
  }
  if (d.kind != DegradeKind::kNone) {
    Degrade(d, &v.route);
  } else {
    v.cache_key = std::move(key);  // only an undegraded answer may be stored for this key
  }

  if (v.route.fallback_upstream) {
    // Served elsewhere: the primary's queue (which the deadline trigger found too long) is no
    // place to wait, and the fallback's own overload answers for itself.
    on_fallback_upstream_.insert(id);
    v.action = Action::kStart;
    return v;
  }
  AdmissionQueue::AdmitResult a = admission_.Admit(id, p, deadline, now);
  switch (a.outcome) {
    case AdmissionQueue::Outcome::kStartNow:
    case AdmissionQueue::Outcome::kQueued:
      v.action = a.outcome == AdmissionQueue::Outcome::kStartNow ? Action::kStart : Action::kQueued;
      v.displaced = a.displaced;
      return v;
    case AdmissionQueue::Outcome::kRejected:
      break;
  }
  std::string reason(AdmissionReasonName(a.reason));
  std::string message = a.reason == AdmissionQueue::Reason::kDeadlineUnreachable
                            ? "overloaded: the request cannot start before its deadline"
                            : "overloaded: " + reason;
  return Reject(p, 503, std::move(reason), std::move(message), a.retry_after);
}

void SidecarCore::Degrade(const DegradeDecision& d, Route* route) const {
  route->degraded = std::string(d.header_value());
  if (d.uses_fallback()) {
    route->model = config_.fallback_model;
    route->fallback_upstream = config_.has_fallback_upstream;
  }
  if (d.kind == DegradeKind::kCapTokens || d.kind == DegradeKind::kFallbackAndCap) {
    const int64_t own = route->requested_max_tokens;
    if (d.max_tokens > 0 && (own == 0 || d.max_tokens < own)) route->max_tokens = d.max_tokens;
  }
}

bool SidecarCore::FallbackAvailable(bool primary_down, TimePoint now) {
  if (config_.fallback_model.empty()) return false;
  if (!fallback_breaker_) return !primary_down;
  return fallback_breaker_->RetryAfter(now) == Duration::zero();
}

bool SidecarCore::RerouteToFallback(int priority, Route* route, TimePoint now) {
  if (!fallback_breaker_ || !FallbackAvailable(true, now)) return false;
  DegradeInputs in;
  in.priority = priority;
  in.breaker_open = true;
  in.fallback_available = true;
  in.estimated_wait = Duration::zero();
  in.time_to_deadline = std::chrono::hours(24);
  in.p99_ttft = P99Ttft(now);
  in.requested_max_tokens = route->requested_max_tokens;
  const DegradeDecision d = degrade_.Decide(in);
  if (!d.uses_fallback()) return false;
  Route rerouted;
  rerouted.requested_max_tokens = route->requested_max_tokens;
  Degrade(d, &rerouted);
  *route = std::move(rerouted);
  return true;
}

std::optional<SidecarCore::Duration> SidecarCore::AcquireFallback(RequestId id, int priority,
                                                                  TimePoint now) {
  if (!fallback_breaker_->TryAcquire(now)) {
    metrics_->CountRejected(priority, "breaker_open");
    return std::max(fallback_breaker_->RetryAfter(now), Duration(std::chrono::seconds(1)));
  }
  fallback_permits_[id] = fallback_breaker_->transitions();
  return std::nullopt;
}

std::optional<SidecarCore::Duration> SidecarCore::OnStart(RequestId id, Route& route,
                                                          int priority, TimePoint now) {
  if (route.fallback_upstream) {
    // Degraded at arrival (or below): the fallback upstream's own breaker decides.
    if (auto refused = AcquireFallback(id, priority, now)) return refused;
  } else {
    if (!breaker_->TryAcquire(now)) {
      // It keeps its admission slot until it finishes (OnFinished frees it): it was admitted to
      // the primary's queue, and is not in on_fallback_upstream_.
      if (!RerouteToFallback(priority, &route, now)) {
        metrics_->CountRejected(priority, "breaker_open");
        return breaker_->RetryAfter(now);
      }
      // (FallbackAvailable said a call may pass; a probe permit may still be taken.)
      if (auto refused = AcquireFallback(id, priority, now)) return refused;
    } else {
      breaker_permits_[id] = breaker_->transitions();
    }
  }
  // Counted as it goes upstream: a degraded request the queue expires or displaces, or the
  // breaker refuses, was never served degraded; it is a rejection only.
  if (!route.degraded.empty()) metrics_->CountDegraded(priority, route.degraded);
  metrics_->CountAdmitted(priority);
  retry_budget_.OnRequest(now);
  return std::nullopt;
}

SidecarCore::Result SidecarCore::ResultForUpstreamStatus(int http_status, bool client_deadline,
                                                         bool shed) {
  if (http_status == 504 && client_deadline) return Result::kIgnored;
  if (http_status == 429 || (http_status == 503 && shed)) return Result::kIgnored;
  return http_status >= 500 ? Result::kFailure : Result::kSuccess;
}

AdmissionQueue::Dispatch SidecarCore::OnFinished(RequestId id, const Route& route, Result result,
                                                 Duration upstream_time, TimePoint now,
                                                 std::optional<Duration> time_to_first_token) {
  // An outcome counts only in the breaker state its permit came from: a call started while
  // CLOSED that ends during HALF_OPEN is no probe (it must not close the breaker for the probes,
  // nor hand back a probe permit it never held).
  // Each upstream's breaker hears only its own calls.
  CircuitBreaker* breaker = route.fallback_upstream ? fallback_breaker_.get() : breaker_.get();
  auto& permits = route.fallback_upstream ? fallback_permits_ : breaker_permits_;
  auto permit = breaker != nullptr ? permits.find(id) : permits.end();
  const bool current = permit != permits.end() && permit->second == breaker->transitions();
  if (permit != permits.end()) permits.erase(permit);
  if (current) {
    const Duration call_time = time_to_first_token.value_or(upstream_time);
    switch (result) {
      case Result::kSuccess: breaker->OnSuccess(call_time, now); break;
      case Result::kFailure: breaker->OnFailure(call_time, now); break;
      case Result::kIgnored: breaker->OnIgnored(); break;
    }
  }
  if (on_fallback_upstream_.erase(id) != 0) return {};
  // Only successful, undegraded calls teach the queue how long the primary takes to serve.
  Duration sample = (result == Result::kSuccess && !route.rewrite()) ? upstream_time
                                                                      : Duration::zero();
  return admission_.OnComplete(id, sample, now);
}

std::vector<SidecarCore::RequestId> SidecarCore::Expire(TimePoint now) {
  return admission_.Expire(now);
}

bool SidecarCore::TryRetry(TimePoint now) {
  if (!config_.retries.enabled) return false;  // no retry was asked of the budget: none counted
  bool allowed = retry_budget_.TryRetry(now);
  metrics_->CountRetry(allowed);
  return allowed;
}

void SidecarCore::StoreInCache(const CacheKey& key, CachedResponse response, TimePoint now) {
  if (cache_) cache_->Insert(key, std::move(response), now);
}

bool SidecarCore::Ready(TimePoint now) {
  if (draining_) return false;
  return breaker_->state(now) != CircuitBreaker::State::kOpen ||
         (fallback_breaker_ && !config_.fallback_model.empty() &&
          fallback_breaker_->state(now) != CircuitBreaker::State::kOpen);
}

void SidecarCore::UpdateGauges(TimePoint now) {
  const int classes = admission_.config().num_priorities;
  for (int p = 0; p < classes; ++p) metrics_->SetQueueDepth(p, admission_.depth(p));
  // The fallback upstream's requests too: demand the primary should carry. Degraded away, they
  // are in neither the primary's queue nor its slots, and the autoscaler reading only those
  // would never add the pods that end the degradation.
  metrics_->SetInFlight(static_cast<double>(admission_.in_flight() + on_fallback_upstream_.size()));
  metrics_->SetBreakerState(CircuitBreakerStateName(breaker_->state(now)));
  metrics_->SetBreakerTransitions(static_cast<double>(breaker_->transitions()));
  metrics_->SetFallbackBreakerState(
      fallback_breaker_ ? CircuitBreakerStateName(fallback_breaker_->state(now)) : "");
  metrics_->SetCache(cache_ ? cache_->bytes() : 0, cache_ ? cache_->entries() : 0);
  metrics_->SetDraining(draining_);
  metrics_->SetStandingQueue(admission_.standing());
}

std::string SidecarCore::StatsJson(TimePoint now) {
  using nlohmann::json;
  json by_class = json::object();
  const int classes = admission_.config().num_priorities;
  for (int p = 0; p < classes; ++p) by_class[config_.classes[p].name] = admission_.depth(p);
  LatencyWindow::Summary s = ttft_window_.Summarize(now);
  auto q = [](const std::optional<double>& v) { return v ? json(*v) : json(nullptr); };
  json out = {
      {"queue_depth", admission_.queued()},
      {"queue_depth_by_class", by_class},
      {"in_flight", admission_.in_flight()},
      {"max_concurrency", admission_.config().max_concurrency},
      {"ttft_seconds",
       {{"p50", q(s.p50)}, {"p95", q(s.p95)}, {"p99", q(s.p99)}, {"count", s.count}}},
      {"window_seconds",
       std::chrono::duration<double>(config_.stats_window.window).count()},
      {"breaker", CircuitBreakerStateName(breaker_->state(now))},
      {"fallback_breaker", fallback_breaker_
                               ? json(CircuitBreakerStateName(fallback_breaker_->state(now)))
                               : json(nullptr)},
      {"standing_queue", admission_.standing()},
      {"draining", draining_},
  };
  return out.dump();
}

StatusOr<AdmissionQueue::Dispatch> SidecarCore::Reconfigure(const SidecarConfig& next,
                                                            TimePoint now) {
  KINFER_RETURN_IF_ERROR(next.Validate());
  if (next.classes.size() != config_.classes.size()) {
    return FailedPrecondition("the number of priority classes cannot change on reload "
                              "(restart the sidecar)");
  }
  // The class names are the metrics' `class` labels, registered at start: a rename would leave
  // /metrics on the old names while /stats and the policies used the new ones.
  for (size_t i = 0; i < next.classes.size(); ++i) {
    if (next.classes[i].name != config_.classes[i].name) {
      return FailedPrecondition("priority class " + std::to_string(i) + " is renamed from '" +
                                config_.classes[i].name + "' to '" + next.classes[i].name +
                                "': class names cannot change on reload (restart the sidecar)");
    }
  }
  KINFER_ASSIGN_OR_RETURN(AdmissionQueue::Dispatch dispatch,
                          admission_.Reconfigure(next.MakeAdmissionConfig(), now));
  rate_limiter_ = RateLimiter(TenantLimits(next.rate_limits));
  degrade_ = DegradePolicy(next.MakeDegradeConfig());
  if (!next.cache_enabled) {
    cache_.reset();
  } else if (!cache_ || next.cache.max_bytes != config_.cache.max_bytes ||
             next.cache.ttl != config_.cache.ttl ||
             next.cache.max_entry_bytes != config_.cache.max_entry_bytes) {
    cache_ = std::make_unique<ResponseCache>(next.cache);
  }
  const CircuitBreakerConfig& a = next.breaker;
  const CircuitBreakerConfig& b = config_.breaker;
  if (a.window_type != b.window_type || a.window_size != b.window_size ||
      a.minimum_calls != b.minimum_calls || a.failure_rate_threshold != b.failure_rate_threshold ||
      a.slow_call_duration != b.slow_call_duration ||
      a.slow_call_rate_threshold != b.slow_call_rate_threshold ||
      a.open_duration != b.open_duration ||
      a.half_open_permitted_calls != b.half_open_permitted_calls) {
    breaker_ = std::make_unique<CircuitBreaker>(next.breaker);
    breaker_permits_.clear();  // permits of the old breaker say nothing to the new one
    if (fallback_breaker_) {
      fallback_breaker_ = std::make_unique<CircuitBreaker>(next.breaker);
      fallback_permits_.clear();
    }
  }
  retry_budget_ = RetryBudget(RetryBudgetConfigFrom(next.retries));
  // Kept from the running config: addresses and metric buckets (fixed at start).
  SidecarConfig merged = next;
  merged.listen = config_.listen;
  merged.upstream = config_.upstream;
  merged.fallback_upstream = config_.fallback_upstream;
  merged.has_fallback_upstream = config_.has_fallback_upstream;
  merged.fallback_upstream_text = config_.fallback_upstream_text;
  merged.ttft_buckets = config_.ttft_buckets;
  merged.e2e_buckets = config_.e2e_buckets;
  merged.stats_window = config_.stats_window;
  config_ = std::move(merged);
  return dispatch;
}

}  // namespace kinfer
