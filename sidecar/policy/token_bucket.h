// TokenBucket: a classic token bucket (rate r per second, capacity b) with the clock passed in.
//
// Contract: the bucket starts full. Tokens refill at `rate_per_second` up to `capacity`, computed
// lazily from the `now` given to each call; nothing happens between calls. TryTake(n) either
// takes all n tokens or none. The state is kept as the single time point at which the bucket
// will be full again (a GCRA-style "theoretical arrival time"), so refill is a pure function of
// `now`: many small steps give exactly the same answer as one big step (no floating drift), and
// only a successful take changes the state. A `now` earlier than a previous one is treated as
// "less time has passed", never as a crash.
//
// Thread safety: not thread-safe. The owner (one proxy worker, or a caller holding a lock)
// serialises all calls.
#pragma once

#include <chrono>

#include "common/status.h"

namespace kinfer {

class TokenBucket {
 public:
  using Clock = std::chrono::steady_clock;
  using Duration = std::chrono::nanoseconds;

  // Returned by TimeUntil() when the request can never be satisfied (n > capacity).
  static constexpr Duration kNever = Duration::max();

  // REQUIRES: Validate(rate_per_second, capacity).ok().
  TokenBucket(double rate_per_second, double capacity);

  // OK when rate_per_second > 0 and capacity > 0 (both finite); InvalidArgument otherwise.
  static Status Validate(double rate_per_second, double capacity);

  // Takes n tokens and returns true when at least n are available at `now`; otherwise takes
  // nothing and returns false. n <= 0 always succeeds and takes nothing.
  bool TryTake(double n, Clock::time_point now);

  // Time from `now` until TryTake(n) would succeed, to the nanosecond (n / rate is rounded to
  // whole nanoseconds, the same rounding TryTake uses): zero when it would succeed now; kNever
  // when n > capacity (it never can; the caller should reject the request outright rather than
  // send a Retry-After).
  Duration TimeUntil(double n, Clock::time_point now) const;

  // Tokens available at `now`, in [0, capacity].
  double Available(Clock::time_point now) const;

  double rate_per_second() const { return rate_; }
  double capacity() const { return capacity_; }

 private:
  // Refill time still owed at `now` (zero when full).
  Duration Debt(Clock::time_point now) const;

  double rate_;
  double capacity_;
  // The bucket is full at and after this time. Starts in the distant past (full).
  Clock::time_point full_at_;
};

}  // namespace kinfer
