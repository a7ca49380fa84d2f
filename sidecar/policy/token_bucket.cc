#include "sidecar/policy/token_bucket.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <string>

namespace kinfer {
namespace {

// Seconds of refill that `tokens` stand for, rounded to whole nanoseconds. All comparisons are
// done in integer nanoseconds so that they agree exactly with the state kept in full_at_.
TokenBucket::Duration RefillTime(double tokens, double rate) {
  return std::chrono::round<TokenBucket::Duration>(std::chrono::duration<double>(tokens / rate));
}

}  // namespace

TokenBucket::TokenBucket(double rate_per_second, double capacity)
    : rate_(rate_per_second), capacity_(capacity), full_at_(Clock::time_point::min()) {
  assert(Validate(rate_per_second, capacity).ok());
}

Status TokenBucket::Validate(double rate_per_second, double capacity) {
  if (!(rate_per_second > 0) || !std::isfinite(rate_per_second)) {
    return InvalidArgument("token bucket rate must be finite and > 0, got " +
                           std::to_string(rate_per_second));
  }
  if (!(capacity > 0) || !std::isfinite(capacity)) {
    return InvalidArgument("token bucket capacity must be finite and > 0, got " +
                           std::to_string(capacity));
  }
  return Status::Ok();
}

TokenBucket::Duration TokenBucket::Debt(Clock::time_point now) const {
  if (full_at_ <= now) return Duration::zero();
  return full_at_ - now;
}

double TokenBucket::Available(Clock::time_point now) const {
  return std::max(0.0, capacity_ - std::chrono::duration<double>(Debt(now)).count() * rate_);
}

TokenBucket::Duration TokenBucket::TimeUntil(double n, Clock::time_point now) const {
  if (n <= 0) return Duration::zero();
  if (n > capacity_) return kNever;
  // Taking n is allowed once debt + n / rate <= capacity / rate.
  const Duration wait = Debt(now) + RefillTime(n, rate_) - RefillTime(capacity_, rate_);
  return wait > Duration::zero() ? wait : Duration::zero();
}

bool TokenBucket::TryTake(double n, Clock::time_point now) {
  if (n <= 0) return true;
  if (TimeUntil(n, now) != Duration::zero()) return false;
  const Clock::time_point base = std::max(full_at_, now);
  full_at_ = base + RefillTime(n, rate_);
  return true;
}

}  // namespace kinfer
