#include "sidecar/policy/degrade_policy.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

namespace kinfer {

namespace {

// True when the class's cap would lower what the client asked for.
bool CapLowers(const DegradeClassConfig& c, int64_t requested) {
  return c.max_tokens_cap > 0 && (requested <= 0 || requested > c.max_tokens_cap);
}

}  // namespace

std::string_view DegradeReasonName(DegradeReason reason) {
  switch (reason) {
    case DegradeReason::kBreakerOpen:
      return "breaker_open";
    case DegradeReason::kDeadline:
      return "deadline";
    case DegradeReason::kSlo:
      return "slo";
    case DegradeReason::kNone:
    case DegradeReason::kCount:
      break;
  }
  return "";
}

std::string_view DegradeKindName(DegradeKind kind) {
  switch (kind) {
    case DegradeKind::kNone:
      return "none";
    case DegradeKind::kFallbackModel:
      return "fallback_model";
    case DegradeKind::kCapTokens:
      return "cap_tokens";
    case DegradeKind::kFallbackAndCap:
      return "fallback_and_cap";
    case DegradeKind::kReject:
      return "reject";
  }
  return "";
}

std::string_view DegradeDecision::header_value() const {
  return kind == DegradeKind::kNone ? std::string_view() : DegradeReasonName(reason);
}

Status DegradeConfig::Validate() const {
  if (classes.empty()) return InvalidArgument("classes: must name at least one class");
  for (size_t i = 0; i < classes.size(); ++i) {
    if (classes[i].max_tokens_cap < 0) {
      return InvalidArgument("classes[" + std::to_string(i) + "].max_tokens_cap: must be >= 0");
    }
  }
  if (!std::isfinite(slo_ttft_p99) || slo_ttft_p99 < 0.0) {
    return InvalidArgument("slo_ttft_p99: must be finite and >= 0");
  }
  return Status::Ok();
}

DegradePolicy::DegradePolicy(DegradeConfig config) : config_(std::move(config)) {}

StatusOr<DegradePolicy> DegradePolicy::Create(DegradeConfig config) {
  KINFER_RETURN_IF_ERROR(config.Validate());
  return DegradePolicy(std::move(config));
}

DegradeDecision DegradePolicy::Decide(const DegradeInputs& in) {
  const int last = static_cast<int>(config_.classes.size()) - 1;
  const int priority = std::clamp(in.priority, 0, last);
  const DegradeClassConfig& c = config_.classes[static_cast<size_t>(priority)];
  const bool primary_down_only = priority == 0 && config_.top_class_only_when_primary_down;
  const bool fallback = c.allow_fallback_model && in.fallback_available;
  const bool cap = CapLowers(c, in.requested_max_tokens);

  DegradeDecision d;
  d.max_tokens = in.requested_max_tokens;
  ++stats_.decisions;

  // 1. The primary is down: fallback or nothing.
  if (in.breaker_open && c.degrade_on.breaker_open) {
    d.reason = DegradeReason::kBreakerOpen;
    if (!fallback) {
      d.kind = DegradeKind::kReject;
      ++stats_.rejected[static_cast<size_t>(d.reason)];
      return d;
    }
    d.kind = cap ? DegradeKind::kFallbackAndCap : DegradeKind::kFallbackModel;
    if (cap) d.max_tokens = c.max_tokens_cap;
    ++stats_.degraded[static_cast<size_t>(d.reason)];
    return d;
  }

  // 2 and 3. The primary is up but slow: degrade only when some action is possible.
  const bool deadline = !primary_down_only && c.degrade_on.deadline_at_risk &&
                        in.estimated_wait > in.time_to_deadline;
  const bool slo = !primary_down_only && c.degrade_on.slo_breach && in.p99_ttft.has_value() &&
                   config_.slo_ttft_p99 > 0.0 && *in.p99_ttft > config_.slo_ttft_p99;
  if ((deadline || slo) && (fallback || cap)) {
    d.reason = deadline ? DegradeReason::kDeadline : DegradeReason::kSlo;
    if (fallback && cap) {
      d.kind = DegradeKind::kFallbackAndCap;
    } else {
      d.kind = fallback ? DegradeKind::kFallbackModel : DegradeKind::kCapTokens;
    }
    if (cap) d.max_tokens = c.max_tokens_cap;
    ++stats_.degraded[static_cast<size_t>(d.reason)];
    return d;
  }

  ++stats_.not_degraded;
  return d;
}

}  // namespace kinfer
