#include "sidecar/policy/rate_limiter.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <utility>

namespace kinfer {
namespace {

bool ValidNonNegative(double v) { return std::isfinite(v) && v >= 0; }

double BurstOrDefault(double burst, double rate) { return burst > 0 ? burst : std::max(1.0, rate); }

}  // namespace

Status RateLimiterConfig::Validate() const {
  auto check = [](const RateLimit& l, const std::string& who) -> Status {
    if (!ValidNonNegative(l.requests_per_second) || !ValidNonNegative(l.request_burst) ||
        !ValidNonNegative(l.tokens_per_second) || !ValidNonNegative(l.token_burst)) {
      return InvalidArgument(who + ": rates and bursts must be finite and >= 0");
    }
    return Status::Ok();
  };
  KINFER_RETURN_IF_ERROR(check(default_limit, "default_limit"));
  for (const auto& [key, limit] : overrides) {
    KINFER_RETURN_IF_ERROR(check(limit, "override for key '" + key + "'"));
  }
  if (max_tracked_keys == 0) return InvalidArgument("max_tracked_keys must be > 0");
  return Status::Ok();
}

RateLimiter::RateLimiter(RateLimiterConfig config) : config_(std::move(config)) {
  assert(config_.Validate().ok());
  index_.reserve(std::min<size_t>(config_.max_tracked_keys, 1 << 16));
}

StatusOr<RateLimiter> RateLimiter::Create(RateLimiterConfig config) {
  KINFER_RETURN_IF_ERROR(config.Validate());
  return RateLimiter(std::move(config));
}

const RateLimit& RateLimiter::LimitFor(std::string_view key) const {
  auto it = config_.overrides.find(std::string(key));
  return it == config_.overrides.end() ? config_.default_limit : it->second;
}

RateLimiter::Entry& RateLimiter::Touch(std::string_view key, const RateLimit& limit,
                                       Clock::time_point now) {
  if (auto it = index_.find(key); it != index_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
    return lru_.front();
  }
  if (index_.size() >= config_.max_tracked_keys) {
    Entry& victim = lru_.back();
    const bool in_debt =
        (victim.limit_requests && victim.requests.Available(now) < victim.requests.capacity()) ||
        (victim.limit_tokens && victim.tokens.Available(now) < victim.tokens.capacity());
    ++stats_.evicted;
    if (in_debt) ++stats_.evicted_in_debt;
    index_.erase(victim.key);
    lru_.pop_back();
  }
  // A dimension that is unlimited still gets a (never consulted) bucket with valid parameters.
  const bool lim_req = limit.requests_per_second > 0;
  const bool lim_tok = limit.tokens_per_second > 0;
  lru_.push_front(Entry{
      std::string(key), lim_req, lim_tok,
      TokenBucket(lim_req ? limit.requests_per_second : 1,
                  lim_req ? BurstOrDefault(limit.request_burst, limit.requests_per_second) : 1),
      TokenBucket(lim_tok ? limit.tokens_per_second : 1,
                  lim_tok ? BurstOrDefault(limit.token_burst, limit.tokens_per_second) : 1)});
  index_.emplace(lru_.front().key, lru_.begin());
  return lru_.front();
}

RateLimiter::Decision RateLimiter::Check(std::string_view key, double tokens,
                                         Clock::time_point now) {
  const RateLimit& limit = LimitFor(key);
  Decision d;
  if (limit.requests_per_second <= 0 && limit.tokens_per_second <= 0) {
    ++stats_.allowed;
    return d;
  }
  Entry& e = Touch(key, limit, now);
  const Duration req_wait = e.limit_requests ? e.requests.TimeUntil(1, now) : Duration::zero();
  const Duration tok_wait = e.limit_tokens ? e.tokens.TimeUntil(tokens, now) : Duration::zero();
  if (req_wait == Duration::zero() && tok_wait == Duration::zero()) {
    if (e.limit_requests) (void)e.requests.TryTake(1, now);
    if (e.limit_tokens) (void)e.tokens.TryTake(tokens, now);
    ++stats_.allowed;
    return d;
  }
  d.allowed = false;
  d.limited_by = req_wait != Duration::zero() ? Limit::kRequests : Limit::kTokens;
  d.retry_after = std::max(req_wait, tok_wait);
  if (d.limited_by == Limit::kRequests) {
    ++stats_.limited_requests;
  } else {
    ++stats_.limited_tokens;
  }
  return d;
}

}  // namespace kinfer
