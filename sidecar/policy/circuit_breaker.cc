#include "sidecar/policy/circuit_breaker.h"

#include <algorithm>
#include <cassert>
#include <string>

namespace kinfer {

namespace {

bool IsPercent(double v) { return v > 0.0 && v <= 100.0; }

int64_t SecondOf(CircuitBreaker::TimePoint t) {
  return std::chrono::floor<std::chrono::seconds>(t.time_since_epoch()).count();
}

}  // namespace

Status CircuitBreakerConfig::Validate() const {
  if (window_type != CircuitBreakerWindowType::kCountBased &&
      window_type != CircuitBreakerWindowType::kTimeBased) {
    return InvalidArgument("window_type: unknown value");
  }
  if (window_size < 1 || window_size > kMaxWindowSize) {
    return InvalidArgument("window_size: must be in [1, " + std::to_string(kMaxWindowSize) +
                           "], got " + std::to_string(window_size));
  }
  if (minimum_calls < 1) {
    return InvalidArgument("minimum_calls: must be >= 1, got " + std::to_string(minimum_calls));
  }
  if (!IsPercent(failure_rate_threshold)) {
    return InvalidArgument("failure_rate_threshold: must be a percent in (0, 100]");
  }
  if (slow_call_duration <= Duration::zero()) {
    return InvalidArgument("slow_call_duration: must be > 0");
  }
  if (!IsPercent(slow_call_rate_threshold)) {
    return InvalidArgument("slow_call_rate_threshold: must be a percent in (0, 100]");
  }
  if (open_duration <= Duration::zero()) {
    return InvalidArgument("open_duration: must be > 0");
  }
  if (half_open_permitted_calls < 1) {
    return InvalidArgument("half_open_permitted_calls: must be >= 1, got " +
                           std::to_string(half_open_permitted_calls));
  }
  return Status::Ok();
}

// ---- Window ----------------------------------------------------------------------------------

CircuitBreaker::Window::Window(CircuitBreakerWindowType type, int size)
    : type_(type), size_(size), buckets_(static_cast<size_t>(size)) {}

void CircuitBreaker::Window::Clear() {
  std::fill(buckets_.begin(), buckets_.end(), Counts{});
  next_ = 0;
  filled_ = 0;
  started_ = false;
  current_second_ = 0;
  totals_ = Counts{};
}

CircuitBreaker::Counts& CircuitBreaker::Window::BucketOf(int64_t second) {
  int64_t idx = second % size_;
  if (idx < 0) idx += size_;
  return buckets_[static_cast<size_t>(idx)];
}

void CircuitBreaker::Window::Evict(Counts& bucket) {
  totals_ -= bucket;
  bucket = Counts{};
}

void CircuitBreaker::Window::Advance(TimePoint now) {
  const int64_t second = SecondOf(now);
  if (!started_ || second - current_second_ >= size_) {  // first use, or idle for a whole window
    if (started_) std::fill(buckets_.begin(), buckets_.end(), Counts{});
    totals_ = Counts{};
    started_ = true;
    current_second_ = second;
    return;
  }
  while (current_second_ < second) Evict(BucketOf(++current_second_));
}

void CircuitBreaker::Window::Record(bool failed, bool slow, TimePoint now) {
  Counts* bucket;
  if (type_ == CircuitBreakerWindowType::kCountBased) {
    bucket = &buckets_[static_cast<size_t>(next_)];
    if (filled_ == size_) {
      Evict(*bucket);  // the oldest call sits in the slot being reused
    } else {
      ++filled_;
    }
    next_ = (next_ + 1) % size_;
  } else {
    Advance(now);
    bucket = &BucketOf(current_second_);
  }
  const Counts one{1, failed ? 1 : 0, slow ? 1 : 0};
  *bucket += one;
  totals_ += one;
}

CircuitBreaker::Counts CircuitBreaker::Window::Totals(TimePoint now) {
  if (type_ == CircuitBreakerWindowType::kTimeBased) Advance(now);
  return totals_;
}

// ---- CircuitBreaker --------------------------------------------------------------------------

CircuitBreaker::CircuitBreaker(const CircuitBreakerConfig& config)
    : config_(config), window_(config.window_type, config.window_size) {
  assert(config.Validate().ok());
}

CircuitBreaker::TimePoint CircuitBreaker::Now(TimePoint now) {
  latest_ = std::max(latest_, now);
  return latest_;
}

void CircuitBreaker::MaybeEndOpen(TimePoint now) {
  if (state_ == State::kOpen && now - opened_at_ >= config_.open_duration) {
    TransitionTo(State::kHalfOpen, Reason::kOpenDurationElapsed, now);
  }
}

bool CircuitBreaker::TryAcquire(TimePoint now) {
  now = Now(now);
  MaybeEndOpen(now);
  switch (state_) {
    case State::kClosed:
      return true;
    case State::kHalfOpen:
      if (probe_permits_ < config_.half_open_permitted_calls) {
        ++probe_permits_;
        return true;
      }
      break;
    case State::kOpen:
      break;
  }
  ++not_permitted_;
  return false;
}

void CircuitBreaker::OnSuccess(Duration duration, TimePoint now) {
  Record(/*failed=*/false, duration, now);
}

void CircuitBreaker::OnFailure(Duration duration, TimePoint now) {
  Record(/*failed=*/true, duration, now);
}

void CircuitBreaker::OnIgnored() {
  if (state_ == State::kHalfOpen && probe_permits_ > probes_.calls) --probe_permits_;
}

CircuitBreaker::Reason CircuitBreaker::Verdict(const Counts& c, int64_t minimum) const {
  if (c.calls == 0 || c.calls < minimum) return Reason::kNone;
  const double calls = static_cast<double>(c.calls);
  if (100.0 * static_cast<double>(c.failed) >= config_.failure_rate_threshold * calls) {
    return Reason::kFailureRate;
  }
  if (100.0 * static_cast<double>(c.slow) >= config_.slow_call_rate_threshold * calls) {
    return Reason::kSlowCallRate;
  }
  return Reason::kNone;
}

void CircuitBreaker::Record(bool failed, Duration duration, TimePoint now) {
  now = Now(now);
  const bool slow = duration >= config_.slow_call_duration;
  switch (state_) {
    case State::kOpen:  // acquired before the breaker opened: the verdict is already in
      return;
    case State::kClosed: {
      window_.Record(failed, slow, now);
      const Counts totals = window_.Totals(now);
      int64_t minimum = config_.minimum_calls;
      if (config_.window_type == CircuitBreakerWindowType::kCountBased) {
        minimum = std::min<int64_t>(minimum, config_.window_size);
      }
      const Reason reason = Verdict(totals, minimum);
      if (reason != Reason::kNone) {
        tripped_ = totals;
        TransitionTo(State::kOpen, reason, now);
      }
      return;
    }
    case State::kHalfOpen: {
      if (probes_.calls >= probe_permits_) return;  // no permit outstanding: not a probe
      probes_.calls += 1;
      probes_.failed += failed ? 1 : 0;
      probes_.slow += slow ? 1 : 0;
      if (probes_.calls < config_.half_open_permitted_calls) return;
      const Reason reason = Verdict(probes_, config_.half_open_permitted_calls);
      if (reason != Reason::kNone) {
        tripped_ = probes_;
        TransitionTo(State::kOpen, reason, now);
      } else {
        TransitionTo(State::kClosed, Reason::kProbesHealthy, now);
      }
      return;
    }
  }
}

void CircuitBreaker::TransitionTo(State to, Reason reason, TimePoint now) {
  last_transition_ = Transition{state_, to, reason, now};
  ++transitions_;
  state_ = to;
  window_.Clear();
  probes_ = Counts{};
  probe_permits_ = 0;
  if (to == State::kOpen) opened_at_ = now;
}

CircuitBreaker::State CircuitBreaker::state(TimePoint now) {
  MaybeEndOpen(Now(now));
  return state_;
}

CircuitBreaker::Snapshot CircuitBreaker::snapshot(TimePoint now) {
  now = Now(now);
  MaybeEndOpen(now);
  Counts c;
  switch (state_) {
    case State::kClosed:
      c = window_.Totals(now);
      break;
    case State::kHalfOpen:
      c = probes_;
      break;
    case State::kOpen:
      c = tripped_;
      break;
  }
  Snapshot s;
  s.state = state_;
  s.calls = c.calls;
  s.failed_calls = c.failed;
  s.slow_calls = c.slow;
  if (c.calls > 0) {
    s.failure_rate = 100.0 * static_cast<double>(c.failed) / static_cast<double>(c.calls);
    s.slow_call_rate = 100.0 * static_cast<double>(c.slow) / static_cast<double>(c.calls);
  }
  return s;
}

CircuitBreaker::Duration CircuitBreaker::RetryAfter(TimePoint now) {
  now = Now(now);
  MaybeEndOpen(now);
  switch (state_) {
    case State::kClosed:
      return Duration::zero();
    case State::kHalfOpen:
      return probe_permits_ < config_.half_open_permitted_calls ? Duration::zero()
                                                                : kBusyRetryAfter;
    case State::kOpen:
      return opened_at_ + config_.open_duration - now;  // > 0, else MaybeEndOpen moved on
  }
  return Duration::zero();
}

std::string_view CircuitBreakerStateName(CircuitBreaker::State state) {
  switch (state) {
    case CircuitBreaker::State::kClosed:
      return "CLOSED";
    case CircuitBreaker::State::kOpen:
      return "OPEN";
    case CircuitBreaker::State::kHalfOpen:
      return "HALF_OPEN";
  }
  return "UNKNOWN";
}

std::string_view CircuitBreakerReasonName(CircuitBreaker::Reason reason) {
  switch (reason) {
    case CircuitBreaker::Reason::kNone:
      return "NONE";
    case CircuitBreaker::Reason::kFailureRate:
      return "FAILURE_RATE";
    case CircuitBreaker::Reason::kSlowCallRate:
      return "SLOW_CALL_RATE";
    case CircuitBreaker::Reason::kOpenDurationElapsed:
      return "OPEN_DURATION_ELAPSED";
    case CircuitBreaker::Reason::kProbesHealthy:
      return "PROBES_HEALTHY";
  }
  return "UNKNOWN";
}

}  // namespace kinfer
