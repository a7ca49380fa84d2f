#include "sidecar/policy/token_bucket.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <string>

namespace kinfer {
namespace {

// Tolerance for comparing seconds; 1 ns of slack absorbs rounding of n / rate to whole ns.
constexpr double kEpsilonSeconds = 1e-9;

TokenBucket::Duration CeilToDuration(double seconds) {
  return TokenBucket::Duration(static_cast<int64_t>(std::ceil(seconds * 1e9)));
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

double TokenBucket::DebtSeconds(Clock::time_point now) const {
  if (full_at_ <= now) return 0.0;
  return std::chrono::duration<double>(full_at_ - now).count();
}

double TokenBucket::Available(Clock::time_point now) const {
  return std::max(0.0, capacity_ - DebtSeconds(now) * rate_);
}

TokenBucket::Duration TokenBucket::TimeUntil(double n, Clock::time_point now) const {
  if (n <= 0) return Duration::zero();
  if (n > capacity_) return kNever;
  // Taking n is allowed once debt + n / rate <= capacity / rate.
  const double wait = DebtSeconds(now) + n / rate_ - capacity_ / rate_;
  if (wait <= kEpsilonSeconds) return Duration::zero();
  return CeilToDuration(wait);
}

bool TokenBucket::TryTake(double n, Clock::time_point now) {
  if (n <= 0) return true;
  if (TimeUntil(n, now) != Duration::zero()) return false;
  const Clock::time_point base = std::max(full_at_, now);
  full_at_ = base + std::chrono::round<Duration>(std::chrono::duration<double>(n / rate_));
  return true;
}

}  // namespace kinfer
