// SidecarCore: the sidecar's decisions for one request, in order, over the pure policy classes:
//
//   arrival:  draining? -> rate limit (429) -> response cache (hit) -> degrade (fallback model,
//             max_tokens cap, or 503) -> admission queue (start, queue, or 503)
//   start:    circuit breaker (503 while open) for requests going to the primary upstream
//   finish:   breaker outcome, admission slot freed (queued requests start), TTFT window
//
// Contract:
//  * No I/O, no threads, no clock: `now` is passed in, so tests drive it with a fake clock. The
//    proxy (one event-loop thread) serialises every call.
//  * Request ids are the proxy's; each id that got kStart or kQueued must end with exactly one of:
//    OnFinished (after OnStart), Cancel (while queued), or an Expire/Dispatch.expired report.
//  * Every 429/503 verdict carries retry_after (>= 1 s once rounded up), except a request larger
//    than its key's token burst, which can never pass (429 with no Retry-After).
//  * Metrics: admitted/rejected/cache counters are counted here, at the decision, and degraded
//    at OnStart (a degraded request refused later is a rejection only); the proxy counts
//    responses, latencies and upstream errors.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/status.h"
#include "sidecar/config/sidecar_config.h"
#include "sidecar/policy/admission_queue.h"
#include "sidecar/policy/circuit_breaker.h"
#include "sidecar/policy/degrade_policy.h"
#include "sidecar/policy/latency_window.h"
#include "sidecar/policy/rate_limiter.h"
#include "sidecar/policy/response_cache.h"
#include "sidecar/policy/retry_budget.h"
#include "sidecar/proxy/request_info.h"
#include "sidecar/signals/sidecar_metrics.h"

namespace kinfer {

class SidecarCore {
 public:
  using Clock = std::chrono::steady_clock;
  using TimePoint = Clock::time_point;
  using Duration = std::chrono::nanoseconds;
  using RequestId = uint64_t;

  enum class Action { kReject, kCacheHit, kStart, kQueued };

  // Where and how a request goes upstream.
  struct Route {
    bool fallback_upstream = false;  // to the fallback upstream (not guarded by the breaker)
    std::string model;               // the fallback model's name when degraded to it, else ""
    int64_t max_tokens = 0;          // the cap when capped, else 0 (body unchanged)
    std::string degraded;            // x-kinfer-degraded value, "" when not degraded
    int64_t requested_max_tokens = 0;  // the request's own limit (RequestInfo::max_tokens)
    bool rewrite() const { return !model.empty() || max_tokens > 0; }
  };

  struct Verdict {
    Action action = Action::kReject;
    // kReject:
    int http_status = 0;
    std::string reason;   // metrics label
    std::string message;  // for the JSON error body
    std::optional<Duration> retry_after;
    // kCacheHit:
    CachedResponse cached;
    // kStart / kQueued:
    Route route;
    std::optional<CacheKey> cache_key;  // set when the response may be stored
    // kQueued: a less important queued request this one pushed out of the full queue; the
    // proxy answers it 503 ("displaced").
    std::optional<RequestId> displaced;
  };

  // The outcome of a request that reached OnStart.
  enum class Result {
    kSuccess,   // the upstream answered (2xx-4xx) and the response finished
    kFailure,   // connection failure, timeout, 5xx, or a stream broken by the upstream
    kIgnored,   // ended by the client, or rejected at start: says nothing about the upstream
  };

  // How an upstream that answered with `http_status` counts: 5xx is a failure, except a 504 to a
  // request that carried the client's own deadline (x-kinfer-timeout, which the runtime enforces
  // end to end): the client's time ran out, which says nothing of the upstream's health, and
  // counting it let one client open the breaker for everyone with short deadlines. The sidecar's
  // own upstream_timeout is still a failure. Likewise a 429, or a 503 that carries Retry-After
  // (`shed`), is the upstream shedding load as designed, not failing: counting it let an overload
  // burst open the breaker (and so take the pod out of its Service) on a healthy runtime.
  static Result ResultForUpstreamStatus(int http_status, bool client_deadline, bool shed = false);

  // REQUIRES: config.Validate().ok().
  SidecarCore(const SidecarConfig& config, SidecarMetrics* metrics);

  // Decides a new request (see the order above).
  Verdict OnArrival(RequestId id, std::string_view path, const RequestInfo& info, TimePoint now);

  // The request is about to go upstream (right after kStart, or when a Dispatch started it).
  // Returns nullopt when it may go, or the Retry-After of a 503 when the breaker refuses it; the
  // caller then answers 503 and calls OnFinished(kIgnored). A request for the primary that the
  // breaker refuses (queued before it opened, or HALF_OPEN with every probe out) goes to the
  // fallback upstream instead when one serves its class, as an arrival would: `route` is then
  // rewritten (degraded "breaker_open") and the answer must not be stored for the request.
  std::optional<Duration> OnStart(RequestId id, Route& route, int priority, TimePoint now);

  // A started request ended. `upstream_time` is the time spent on the upstream (0 when unknown):
  // it teaches the queue how long a slot stays busy. The breaker judges a call slow on
  // `time_to_first_token` when given (a stream: a long, healthy generation is not a slow call),
  // else on `upstream_time`.
  // Returns the queued requests to start now and those that expired meanwhile (answer 503).
  AdmissionQueue::Dispatch OnFinished(RequestId id, const Route& route, Result result,
                                      Duration upstream_time, TimePoint now,
                                      std::optional<Duration> time_to_first_token = std::nullopt);

  // A queued request's client went away. False when it is not queued.
  bool Cancel(RequestId id) { return admission_.Cancel(id); }
  // Queued requests whose deadline passed: the proxy answers them 503.
  std::vector<RequestId> Expire(TimePoint now);

  // An attempt failed before any byte reached the client: may it be retried?
  bool TryRetry(TimePoint now);

  // A successful answer's time to first token, for /stats and the degrade rule's P99: only the
  // primary model's answers count. The fallback's (fast) answers would pull the P99 under the
  // SLO while the primary still breaches it, and degrade would switch itself off and on.
  void RecordTtft(double seconds, const Route& route, TimePoint now) {
    if (route.model.empty()) ttft_window_.Record(seconds, now);
  }
  void StoreInCache(const CacheKey& key, CachedResponse response, TimePoint now);

  // Draining: new arrivals get 503; queued and in-flight requests finish.
  void StartDraining() { draining_ = true; }
  bool draining() const { return draining_; }
  // Requests queued or in flight (on the fallback upstream too).
  size_t outstanding() const {
    return admission_.queued() + admission_.in_flight() + on_fallback_upstream_.size();
  }

  // Ready to take traffic: not draining, and the breaker not OPEN unless a fallback upstream
  // serves meanwhile (the pod still answers, degraded; taking it out of its Service would only
  // turn those answers into connection errors).
  bool Ready(TimePoint now);
  // Gauges refreshed for a scrape.
  void UpdateGauges(TimePoint now);
  // The compact JSON the operator reads: queue depth, in flight, windowed TTFT quantiles.
  std::string StatsJson(TimePoint now);

  // Applies a reloaded config (SIGHUP). Classes must keep their count; listen and upstream
  // addresses and the metrics buckets need a restart (they are reported, not applied). Policy
  // state is kept where its section did not change; queued requests are kept.
  StatusOr<AdmissionQueue::Dispatch> Reconfigure(const SidecarConfig& next, TimePoint now);

  const SidecarConfig& config() const { return config_; }

 private:
  Verdict Reject(int priority, int http_status, std::string reason, std::string message,
                 std::optional<Duration> retry_after);
  std::optional<double> P99Ttft(TimePoint now);
  // Writes degrade decision `d` into `route` (whose requested_max_tokens is set).
  void Degrade(const DegradeDecision& d, Route* route) const;
  // A request for the primary the breaker refused: true, with `route` rewritten, when the
  // fallback upstream serves its class (degrade's breaker_open decision).
  bool RerouteToFallback(int priority, Route* route, TimePoint now);
  // Whether the fallback model can take a request now: configured, and on its own upstream, that
  // upstream's breaker lets calls through (on the primary's upstream: the primary is up).
  bool FallbackAvailable(bool primary_down, TimePoint now);
  // A permit of the fallback upstream's breaker for `id`: nullopt when taken, else the refusal's
  // Retry-After (counted as a breaker_open rejection).
  std::optional<Duration> AcquireFallback(RequestId id, int priority, TimePoint now);

  SidecarConfig config_;
  SidecarMetrics* metrics_;
  RateLimiter rate_limiter_;
  std::unique_ptr<ResponseCache> cache_;
  DegradePolicy degrade_;
  AdmissionQueue admission_;
  std::unique_ptr<CircuitBreaker> breaker_;
  // Ids holding a breaker permit (OnStart's TryAcquire said yes): only they report an outcome to
  // the breaker, so a refused start's OnFinished(kIgnored) cannot hand back a HALF_OPEN probe
  // permit it never took.
  // Calls holding a breaker permit, each with breaker_->transitions() when it was granted.
  std::unordered_map<RequestId, uint64_t> breaker_permits_;
  // The fallback upstream's own breaker (the primary's settings), and its calls' permits as
  // above; null without a fallback upstream. A fallback that is down is no fallback: degrade
  // then rejects as it would without one, and /ready says so.
  std::unique_ptr<CircuitBreaker> fallback_breaker_;
  std::unordered_map<RequestId, uint64_t> fallback_permits_;
  // Degraded requests sent to the fallback upstream: it has its own capacity and its own 503s, so
  // they neither wait in nor count against the primary's admission queue.
  std::unordered_set<RequestId> on_fallback_upstream_;
  RetryBudget retry_budget_;
  LatencyWindow ttft_window_;
  bool draining_ = false;
};

// Whole seconds for a Retry-After header: rounded up, at least 1.
int64_t RetryAfterSeconds(std::chrono::nanoseconds d);

}  // namespace kinfer
