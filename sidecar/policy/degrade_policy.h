// DegradePolicy: decides whether a request is served degraded (routed to the fallback, smaller
// model and/or with max_tokens capped) or rejected, from the breaker state, the queue wait against
// the request's deadline, and the recent P99 time to first token against the SLO.
//
// Contract:
//  * Priority classes 0..N-1 as in AdmissionQueue; 0 is the MOST important. A priority outside
//    [0, N) is clamped to the nearest configured class.
//  * Triggers, in PRECEDENCE order (the first one that fires and is enabled for the class wins;
//    its name is the reason, sent as `x-kinfer-degraded: <reason>`):
//      1. "breaker_open": inputs.breaker_open (the primary is down).
//      2. "deadline":     inputs.estimated_wait > inputs.time_to_deadline (the queue wait would
//                         pass the deadline).
//      3. "slo":          inputs.p99_ttft is known, slo_ttft_p99 > 0 and p99_ttft > slo_ttft_p99.
//    The most severe condition names the response, so an operator reading the header sees the
//    root cause (a down primary also blows deadlines and the SLO).
//  * top_class_only_when_primary_down: class 0 ignores "deadline" and "slo" (it is degraded only
//    when the breaker is open), whatever its own flags say.
//  * Actions:
//      - breaker_open: fallback model when the class allows it and one is available, plus the cap
//        when it lowers max_tokens (kFallbackAndCap); otherwise kReject (capping tokens does not
//        help a primary that is down).
//      - deadline / slo: fallback when allowed and available, and/or the cap when it lowers
//        max_tokens. When neither is possible the decision is kNone (served normally; the
//        admission queue still enforces the deadline).
//      - A class whose breaker_open trigger is off is judged on "deadline" and "slo" only; when
//        the breaker is open its request then meets the breaker's own rejection upstream.
//    A cap "lowers" max_tokens when max_tokens_cap > 0 and either requested_max_tokens is 0 (the
//    client set none) or requested_max_tokens > max_tokens_cap.
//  * Counters (stats()) satisfy: decisions == not_degraded + sum(degraded) + sum(rejected).
//
// Thread safety: NOT thread-safe; no threads or clocks inside. The owner (the proxy worker that
// routes requests) serialises every call. Decide() is pure apart from the counters.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kinfer {

// Which conditions degrade a class.
struct DegradeTriggers {
  bool breaker_open = true;
  bool deadline_at_risk = true;
  bool slo_breach = true;
};

struct DegradeClassConfig {
  bool allow_fallback_model = true;
  int64_t max_tokens_cap = 0;  // 0 = no cap; >= 0
  DegradeTriggers degrade_on;
};

struct DegradeConfig {
  // One entry per priority class, index 0 = most important. Non-empty.
  std::vector<DegradeClassConfig> classes = std::vector<DegradeClassConfig>(3);
  // Class 0 is degraded only when the breaker is open.
  bool top_class_only_when_primary_down = true;
  // P99 TTFT objective in seconds; 0 disables the "slo" trigger. Finite, >= 0.
  double slo_ttft_p99 = 0.0;

  // OK, or INVALID_ARGUMENT whose message names the first offending field.
  [[nodiscard]] Status Validate() const;
};

struct DegradeInputs {
  using Duration = std::chrono::steady_clock::duration;

  int priority = 0;
  bool breaker_open = false;
  bool fallback_available = false;  // a fallback model is configured and healthy
  Duration estimated_wait = Duration::zero();
  Duration time_to_deadline = Duration::max();  // max() = no deadline
  std::optional<double> p99_ttft;               // seconds; nullopt when the window is empty
  int64_t requested_max_tokens = 0;             // 0 = the client set none
};

enum class DegradeKind { kNone, kFallbackModel, kCapTokens, kFallbackAndCap, kReject };

enum class DegradeReason { kNone = 0, kBreakerOpen, kDeadline, kSlo, kCount };
inline constexpr size_t kNumDegradeReasons = static_cast<size_t>(DegradeReason::kCount);

struct DegradeDecision {
  DegradeKind kind = DegradeKind::kNone;
  DegradeReason reason = DegradeReason::kNone;  // kNone iff kind == kNone
  // max_tokens to send upstream: the cap when capping, else requested_max_tokens.
  int64_t max_tokens = 0;

  // The `x-kinfer-degraded` value ("breaker_open", "deadline", "slo"); empty when kind is kNone.
  [[nodiscard]] std::string_view header_value() const;
  [[nodiscard]] bool uses_fallback() const {
    return kind == DegradeKind::kFallbackModel || kind == DegradeKind::kFallbackAndCap;
  }
};

class DegradePolicy {
 public:
  struct Stats {
    uint64_t decisions = 0;
    uint64_t not_degraded = 0;
    std::array<uint64_t, kNumDegradeReasons> degraded{};  // served degraded, by reason
    std::array<uint64_t, kNumDegradeReasons> rejected{};  // kReject, by reason
  };

  // REQUIRES: config.Validate().ok(); see Create().
  explicit DegradePolicy(DegradeConfig config);
  static StatusOr<DegradePolicy> Create(DegradeConfig config);

  // Decides one request (see the contract above) and counts the decision.
  DegradeDecision Decide(const DegradeInputs& in);

  [[nodiscard]] const Stats& stats() const { return stats_; }
  [[nodiscard]] const DegradeConfig& config() const { return config_; }

 private:
  DegradeConfig config_;
  Stats stats_;
};

// "breaker_open", "deadline", "slo"; "" for kNone.
std::string_view DegradeReasonName(DegradeReason reason);
// "none", "fallback_model", "cap_tokens", "fallback_and_cap", "reject".
std::string_view DegradeKindName(DegradeKind kind);

}  // namespace kinfer
