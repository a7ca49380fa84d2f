// RetryBudget: caps the retries the proxy sends upstream to a fraction of the original requests
// over a sliding window (Envoy's retry budget, gRPC's retry throttling), with a floor so that a
// low-traffic service can still retry a few times.
//
// Contract:
//  * OnRequest(now) counts one ORIGINAL request (a retry is not a request: it is counted only by
//    TryRetry). TryRetry(now) asks for one retry, of any attempt number; it returns true and
//    counts the retry when allowed, and false (counting nothing in the window) when denied.
//  * Window: `window` is cut into kNumBuckets buckets of width w = window / kNumBuckets, aligned
//    to multiples of w on the steady clock. The window at `now` is the bucket holding `now` plus
//    the kNumBuckets - 1 before it, so an event counts for between (window - w) and window after
//    it happened. R(now) = original requests in the window, T(now) = retries ALLOWED in the
//    window (denied ones sent no load).
//  * Rule. TryRetry(now) is allowed iff T(now) < Cap(now), where
//        Cap(now) = max( floor(budget_percent / 100 * R(now)),            // the budget
//                        ceil(min_retries_per_second * window_seconds) )  // the floor
//    The budget is rounded DOWN so it never lets more than budget_percent through; the floor is
//    rounded UP so a configured floor is never rounded away (window < 1 s). Each allowed retry
//    keeps T <= Cap at the moment it is taken (T may exceed Cap later, when requests that earned
//    retries age out before those retries do; no retry is allowed until it is back under). So
//    under sustained failure (every request fails and is retried, retries of retries included)
//    the retries sent converge to budget_percent % of the original requests, i.e. at most about
//    budget_percent % extra load upstream, once budget_percent % of R exceeds the floor. Below
//    that traffic (R < floor * 100 / budget_percent per window) the floor governs: up to `floor`
//    retries per window, whatever the traffic, and they may come in one burst. budget_percent = 0
//    with a floor of 0 disables retries entirely.
//  * Cost: OnRequest/TryRetry and the readers are O(1) amortised: each elapsed bucket costs O(1)
//    to evict, and a gap of a whole window clears everything at once. Memory is fixed:
//    kNumBuckets pairs of 64-bit counters.
//  * Counters (stats()) are lifetime totals: requests = OnRequest calls, retries_allowed +
//    retries_denied = TryRetry calls. At every moment RetriesInWindow(now) <= retries_allowed
//    and RequestsInWindow(now) <= requests.
//
// Thread safety: NOT thread-safe; no threads or clocks inside. The owner (one sidecar worker, or
// a mutex it holds) serialises every call, including the readers, which roll the window forward
// to `now`.
//
// Time: REQUIRES `now` never decreases across calls. An earlier `now` is treated as the latest
// one seen (its event goes into the newest bucket).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>

#include "common/status.h"

namespace kinfer {

struct RetryBudgetConfig {
  static constexpr int64_t kNumBuckets = 10;

  // Retries allowed, as a percentage of the original requests in the window. In [0, 100].
  double budget_percent = 10.0;
  // Retries always allowed per second of window, whatever the traffic. >= 0.
  int min_retries_per_second = 3;
  // > 0 and a whole multiple of kNumBuckets nanoseconds (any whole number of microseconds is),
  // so the buckets tile the window exactly.
  std::chrono::nanoseconds window = std::chrono::seconds(10);

  // OK, or INVALID_ARGUMENT naming the first offending field (a NaN budget_percent included).
  [[nodiscard]] Status Validate() const;
};

class RetryBudget {
 public:
  using Clock = std::chrono::steady_clock;
  using TimePoint = Clock::time_point;

  struct Stats {
    uint64_t requests = 0;         // OnRequest calls
    uint64_t retries_allowed = 0;  // TryRetry calls that returned true
    uint64_t retries_denied = 0;   // TryRetry calls that returned false
  };

  // REQUIRES: config.Validate().ok(); see Create(). Starts with an empty window.
  explicit RetryBudget(const RetryBudgetConfig& config = {});
  static StatusOr<RetryBudget> Create(const RetryBudgetConfig& config);

  // An original request started at `now`.
  void OnRequest(TimePoint now);

  // True, and the retry is counted, when T(now) < Cap(now) (see the contract); false otherwise.
  [[nodiscard]] bool TryRetry(TimePoint now);

  // R(now), T(now) and Cap(now) of the contract, for `/stats` and tests.
  [[nodiscard]] uint64_t RequestsInWindow(TimePoint now);
  [[nodiscard]] uint64_t RetriesInWindow(TimePoint now);
  [[nodiscard]] uint64_t Cap(TimePoint now);

  // ceil(min_retries_per_second * window_seconds): the part of Cap that does not depend on traffic.
  [[nodiscard]] uint64_t floor_retries() const { return floor_retries_; }
  [[nodiscard]] const RetryBudgetConfig& config() const { return config_; }
  [[nodiscard]] const Stats& stats() const { return stats_; }

 private:
  struct Bucket {
    uint64_t requests = 0;
    uint64_t retries = 0;
  };

  void Advance(TimePoint now);  // evicts the buckets that fell out of the window
  Bucket& Current();
  uint64_t CapOfWindow() const;

  RetryBudgetConfig config_;
  int64_t width_ticks_;  // bucket width, in steady_clock ticks
  uint64_t floor_retries_;
  std::array<Bucket, RetryBudgetConfig::kNumBuckets> buckets_{};  // ring: bucket number mod size
  uint64_t window_requests_ = 0;                                  // sum of buckets_[*].requests
  uint64_t window_retries_ = 0;                                   // sum of buckets_[*].retries
  bool started_ = false;
  int64_t current_bucket_ = 0;  // number of the newest bucket, when started_
  Stats stats_;
};

}  // namespace kinfer
