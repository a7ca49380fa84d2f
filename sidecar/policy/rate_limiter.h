// RateLimiter: per-key (API key or tenant) rate limits in requests/s and tokens/s.
//
// Contract: each key gets two token buckets, one counting requests and one counting LLM tokens
// (the caller passes prompt estimate + max_tokens). Check() admits a request only when both
// buckets can pay, and then takes from both; when either refuses it takes from neither, so a
// request refused on tokens does not spend the key's request budget. Limits come from the
// default limit or from a per-key override. A rate of 0 means "unlimited" for that dimension;
// a key unlimited in both is never tracked.
//
// Memory is bounded: at most `max_tracked_keys` keys hold buckets. When a new key arrives at the
// bound, the least recently checked key is evicted. An evicted key comes back with full buckets,
// which is what it would have after being idle long enough to refill; with a bound well above
// the number of active keys only idle keys are evicted. stats().evicted_in_debt counts
// evictions of keys whose buckets were not yet full (a sign the bound is too small).
//
// Thread safety: not thread-safe. The owner (one proxy worker, or a caller holding a lock)
// serialises all calls.
#pragma once

#include <chrono>
#include <cstdint>
#include <list>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/status.h"
#include "sidecar/policy/token_bucket.h"

namespace kinfer {

// Limits for one key. rate 0 = unlimited. burst 0 = one second's worth (at least 1).
struct RateLimit {
  double requests_per_second = 0;
  double request_burst = 0;
  double tokens_per_second = 0;
  double token_burst = 0;
};

struct RateLimiterConfig {
  RateLimit default_limit;
  std::unordered_map<std::string, RateLimit> overrides;  // exact key match
  size_t max_tracked_keys = 10000;

  // InvalidArgument on a negative or non-finite rate or burst, or max_tracked_keys == 0.
  Status Validate() const;
};

class RateLimiter {
 public:
  using Clock = std::chrono::steady_clock;
  using Duration = std::chrono::nanoseconds;

  enum class Limit { kNone, kRequests, kTokens };

  struct Decision {
    bool allowed = true;
    // The limit that refused: kRequests when the request bucket refused (whatever the token
    // bucket says), kTokens when only the token bucket refused; kNone when allowed.
    Limit limited_by = Limit::kNone;
    // When both buckets could pay (the Retry-After; the proxy rounds up to whole seconds).
    // TokenBucket::kNever when `tokens` exceeds the key's token burst: this request can never
    // pass at this limit and the proxy should reject it without a Retry-After.
    Duration retry_after = Duration::zero();
  };

  struct Stats {
    uint64_t allowed = 0;
    uint64_t limited_requests = 0;
    uint64_t limited_tokens = 0;
    uint64_t evicted = 0;
    uint64_t evicted_in_debt = 0;
  };

  // REQUIRES: config.Validate().ok(); see Create().
  explicit RateLimiter(RateLimiterConfig config);
  // Validates the config; the error is the one from Validate().
  static StatusOr<RateLimiter> Create(RateLimiterConfig config);

  // Decides one request of `tokens` LLM tokens for `key` at `now`; takes from both buckets when
  // allowed, from neither when not. Marks the key most recently used.
  Decision Check(std::string_view key, double tokens, Clock::time_point now);

  size_t tracked_keys() const { return index_.size(); }
  const Stats& stats() const { return stats_; }

 private:
  struct Entry {
    std::string key;
    bool limit_requests;
    bool limit_tokens;
    TokenBucket requests;
    TokenBucket tokens;
  };
  using Lru = std::list<Entry>;  // front = most recently used

  const RateLimit& LimitFor(std::string_view key) const;
  // Finds or creates the entry for key, evicting the LRU entry at the bound; moves it to front.
  Entry& Touch(std::string_view key, const RateLimit& limit, Clock::time_point now);

  RateLimiterConfig config_;
  Lru lru_;
  std::unordered_map<std::string_view, Lru::iterator> index_;  // views into Entry::key
  Stats stats_;
};

}  // namespace kinfer
