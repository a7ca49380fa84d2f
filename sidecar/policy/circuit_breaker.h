// CircuitBreaker: a pure CLOSED / OPEN / HALF_OPEN state machine guarding one upstream.
//
// Contract: the breaker is bookkeeping only. It owns no threads, reads no clock and performs no
// I/O; every time-dependent method takes `now` (a std::chrono::steady_clock::time_point) from the
// caller, so tests and simulators drive it with fabricated time. The caller brackets each upstream
// call: TryAcquire(now) before it, then exactly one of OnSuccess / OnFailure / OnIgnored after it
// (only when TryAcquire returned true).
//
// Thread safety: NOT thread-safe. The owner (one sidecar worker, or a mutex it holds) serialises
// every call, including the accessors, several of which advance time-driven state.
//
// Time: REQUIRES `now` never decreases across calls. An earlier `now` is treated as the latest one
// seen (time does not run backwards inside the breaker).
//
// Rules (as resilience4j):
//   CLOSED    -> OPEN      when calls in the window >= minimum_calls and (failure rate >=
//                          failure_rate_threshold or slow-call rate >= slow_call_rate_threshold).
//                          The window is cleared on leaving CLOSED.
//   OPEN      -> HALF_OPEN on the first TryAcquire / state / RetryAfter / snapshot call at or after
//                          open_duration has passed. Calls are rejected while OPEN.
//   HALF_OPEN -> OPEN      once half_open_permitted_calls probes have reported and either rate over
//                          those probes is >= its threshold (a fresh open_duration starts), or
//             -> CLOSED    otherwise, with an empty window. A failed probe is not evaluated early:
//                          the decision waits for all permitted probes.
// A call is slow when its duration >= slow_call_duration. A slow success counts as slow only; a
// slow failure counts as both failed and slow.
#pragma once

#include <chrono>
#include <cstdint>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kinfer {

enum class CircuitBreakerWindowType {
  kCountBased,  // the last window_size calls
  kTimeBased,   // the calls of the last window_size seconds, in 1-second buckets
};

// Defaults are resilience4j's (window 100 calls, minimum 100 calls, 50% failures, slow = 60 s at
// 100%, 60 s open, 10 probes). Envoy/Hystrix-like setups use a time window of 10 s instead.
struct CircuitBreakerConfig {
  using Duration = std::chrono::steady_clock::duration;

  CircuitBreakerWindowType window_type = CircuitBreakerWindowType::kCountBased;
  // Calls (count-based) or seconds (time-based). 1 .. kMaxWindowSize.
  int window_size = 100;
  // Calls needed in the window before rates are evaluated. >= 1. For a count-based window a value
  // above window_size behaves as window_size (as resilience4j).
  int minimum_calls = 100;
  // Percent in (0, 100].
  double failure_rate_threshold = 50.0;
  // A call lasting at least this long is slow. > 0.
  Duration slow_call_duration = std::chrono::seconds(60);
  // Percent in (0, 100].
  double slow_call_rate_threshold = 100.0;
  // Time spent OPEN before probes are allowed. > 0.
  Duration open_duration = std::chrono::seconds(60);
  // Probes allowed (and needed for a decision) in HALF_OPEN. >= 1.
  int half_open_permitted_calls = 10;

  static constexpr int kMaxWindowSize = 1 << 20;

  // OK, or INVALID_ARGUMENT whose message names the first offending field.
  [[nodiscard]] Status Validate() const;
};

class CircuitBreaker {
 public:
  using Clock = std::chrono::steady_clock;
  using TimePoint = Clock::time_point;
  using Duration = Clock::duration;

  enum class State { kClosed, kOpen, kHalfOpen };

  // Why the last transition happened (for logs and metrics labels).
  enum class Reason { kNone, kFailureRate, kSlowCallRate, kOpenDurationElapsed, kProbesHealthy };

  struct Transition {
    State from = State::kClosed;
    State to = State::kClosed;
    Reason reason = Reason::kNone;
    TimePoint at{};
  };

  // Counts behind the current state: the sliding window when CLOSED, the probes so far when
  // HALF_OPEN, and the counts that tripped the breaker when OPEN. Rates are percentages, 0 when
  // calls == 0.
  struct Snapshot {
    State state = State::kClosed;
    int64_t calls = 0;
    int64_t failed_calls = 0;
    int64_t slow_calls = 0;
    double failure_rate = 0.0;
    double slow_call_rate = 0.0;
  };

  // While HALF_OPEN with every permit taken, RetryAfter cannot know when probes finish; it answers
  // this hint instead.
  static constexpr Duration kBusyRetryAfter = std::chrono::seconds(1);

  // REQUIRES: config.Validate().ok(). Starts CLOSED with an empty window.
  explicit CircuitBreaker(const CircuitBreakerConfig& config);

  CircuitBreaker(const CircuitBreaker&) = delete;
  CircuitBreaker& operator=(const CircuitBreaker&) = delete;

  // True when the call may go upstream (the caller then owes one OnSuccess/OnFailure/OnIgnored).
  // CLOSED: always. OPEN: false until open_duration has passed, then moves to HALF_OPEN. HALF_OPEN:
  // true while fewer than half_open_permitted_calls permits are taken. False counts as
  // not_permitted.
  [[nodiscard]] bool TryAcquire(TimePoint now);

  // Report the outcome of an acquired call that took `duration`. Outcomes arriving while OPEN
  // (calls acquired before the breaker opened) are dropped, as are HALF_OPEN outcomes beyond the
  // permits granted.
  void OnSuccess(Duration duration, TimePoint now);
  void OnFailure(Duration duration, TimePoint now);

  // The acquired call ended without a verdict on the upstream (e.g. the client cancelled). Nothing
  // is counted; in HALF_OPEN its permit is returned.
  void OnIgnored();

  // Current state, after applying an elapsed open_duration.
  [[nodiscard]] State state(TimePoint now);
  [[nodiscard]] Snapshot snapshot(TimePoint now);

  // Time until TryAcquire will next return true: zero when CLOSED or when a HALF_OPEN permit is
  // free, the rest of open_duration when OPEN, kBusyRetryAfter when HALF_OPEN is full.
  [[nodiscard]] Duration RetryAfter(TimePoint now);

  // Stats for export: transitions so far, the latest one, and calls rejected by TryAcquire.
  [[nodiscard]] uint64_t transitions() const { return transitions_; }
  [[nodiscard]] const Transition& last_transition() const { return last_transition_; }
  [[nodiscard]] uint64_t not_permitted() const { return not_permitted_; }

 private:
  struct Counts {
    int64_t calls = 0;
    int64_t failed = 0;
    int64_t slow = 0;
    void operator+=(const Counts& o) { calls += o.calls, failed += o.failed, slow += o.slow; }
    void operator-=(const Counts& o) { calls -= o.calls, failed -= o.failed, slow -= o.slow; }
  };

  // Sliding window of outcomes with O(1) aggregate updates (amortised for the time-based one:
  // each bucket is evicted at most once per second of advance, and a gap >= the window clears it).
  class Window {
   public:
    Window(CircuitBreakerWindowType type, int size);
    void Record(bool failed, bool slow, TimePoint now);
    Counts Totals(TimePoint now);
    void Clear();

   private:
    void Advance(TimePoint now);  // time-based: evicts buckets that fell out of the window
    Counts& BucketOf(int64_t second);
    void Evict(Counts& bucket);

    CircuitBreakerWindowType type_;
    int size_;
    std::vector<Counts> buckets_;  // count-based: one call per slot; time-based: one second each
    int next_ = 0;                 // count-based: slot the next call overwrites
    int filled_ = 0;               // count-based: slots holding a call
    bool started_ = false;         // time-based: current_second_ is meaningful
    int64_t current_second_ = 0;   // time-based: the second of the newest bucket
    Counts totals_;
  };

  TimePoint Now(TimePoint now);  // clamps to the latest time seen
  void MaybeEndOpen(TimePoint now);
  void Record(bool failed, Duration duration, TimePoint now);
  // The reason to open for these counts, or kNone.
  Reason Verdict(const Counts& c, int64_t minimum) const;
  void TransitionTo(State to, Reason reason, TimePoint now);

  const CircuitBreakerConfig config_;
  State state_ = State::kClosed;
  Window window_;
  TimePoint latest_{};
  TimePoint opened_at_{};
  Counts tripped_;         // the counts that last opened the breaker
  Counts probes_;          // HALF_OPEN outcomes so far
  int probe_permits_ = 0;  // HALF_OPEN permits granted and not returned by OnIgnored
  uint64_t transitions_ = 0;
  uint64_t not_permitted_ = 0;
  Transition last_transition_;
};

// "CLOSED", "OPEN", "HALF_OPEN".
std::string_view CircuitBreakerStateName(CircuitBreaker::State state);
// "NONE", "FAILURE_RATE", "SLOW_CALL_RATE", "OPEN_DURATION_ELAPSED", "PROBES_HEALTHY".
std::string_view CircuitBreakerReasonName(CircuitBreaker::Reason reason);

}  // namespace kinfer
