// InferenceService status from what was observed and planned: conditions (metav1.Condition:
// Ready, Progressing, Degraded, ScalingActive), replica counts, selector, URL, the autoscaler's
// last observations, and when and why the desired count last changed.
//
// Conditions keep their lastTransitionTime while their status stays the same (reason and message
// may change), and carry the metadata.generation they were computed from, so a steady state
// computes a status equal to the stored one: no status write either. Reasons: docs/operator.md.
//
// Pure: `now` (RFC 3339) is passed in. Thread-safe.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "operator/api/inference_service.h"
#include "operator/autoscale/autoscaler.h"
#include "operator/reconcile/planner.h"

namespace kinfer::reconcile {

inline constexpr char kConditionReady[] = "Ready";
inline constexpr char kConditionProgressing[] = "Progressing";
inline constexpr char kConditionDegraded[] = "Degraded";
inline constexpr char kConditionScalingActive[] = "ScalingActive";

// Replaces (or appends) the condition of c.type. c.last_transition_time is set to the old one
// when the status is unchanged (or to `now` when the old one had none), else to `now`.
void SetCondition(std::vector<api::Condition>* conditions, api::Condition c, std::string_view now);

// The status of a valid InferenceService. `plan` is Plan(isvc, observed, ...); `decision` is the
// autoscaler's decision of this tick (nullopt: none this reconcile, so the previous observations
// and the ScalingActive condition carry over).
nlohmann::json ComputeStatus(const api::InferenceService& isvc, const Observed& observed,
                             const ReconcilePlan& plan,
                             const std::optional<autoscale::Decision>& decision,
                             std::string_view now);

// The status of an InferenceService whose spec the operator cannot serve (`error` from
// ParseInferenceService): Ready False and Degraded True with reason InvalidSpec and the error as
// message; Progressing and ScalingActive False (InvalidSpec); the other fields as they were.
nlohmann::json ComputeInvalidSpecStatus(const nlohmann::json& object, const Status& error,
                                        std::string_view now);

// `status` (ComputeStatus's for `object`) when a write to the API server failed this reconcile:
// Degraded True with reason ApiError and `message`, the rest as computed. The condition keeps the
// stored one's lastTransitionTime while it stays True, so a lasting failure computes the same
// status at every retry: one status write, not one a retry.
nlohmann::json WithWriteFailure(const nlohmann::json& object, const nlohmann::json& status,
                                std::string_view message, std::string_view now);

// "2006-01-02T15:04:05Z" (UTC, whole seconds: metav1.Time's precision).
std::string FormatRfc3339(std::chrono::system_clock::time_point t);

}  // namespace kinfer::reconcile
