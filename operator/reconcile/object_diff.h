// Comparing what the operator wants with what the API server holds, and the merge patches that
// close the gap, touching only the fields the operator owns.
//
// Why "derivative": the API server fills in defaults (a container's imagePullPolicy, a port's
// protocol, a Service's clusterIP, a probe's timeoutSeconds) and normalizes quantities ("0.5" cpu
// reads back as "500m"). Comparing desired == observed would see a difference on every reconcile
// and write forever. DeepDerivative asks instead "does observed already say everything desired
// says?" (Knative's equality.Semantic.DeepDerivative), with resource quantities compared by value.
//
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace kinfer::reconcile {

// True when every field set in `desired` has the same value in `observed`: objects recursively
// (keys only in `observed` are ignored; a key missing from `observed` matches only a zero value in
// `desired`: null, {}, [], "", 0 or false, which the API server's JSON leaves out), arrays element
// by element with equal lengths, scalars equal (numbers by value: 1 == 1.0). Strings under a
// "limits" or "requests" key are compared as Kubernetes quantities ("0.5" == "500m").
bool DeepDerivative(const nlohmann::json& desired, const nlohmann::json& observed);

// The RFC 7386 merge patch that turns `observed` into exactly `desired`: changed and new keys
// set, keys only in `observed` set to null (removed), objects recursively, arrays and scalars
// replaced whole. An empty object when they are equal. REQUIRES: `desired` holds no nulls.
nlohmann::json ReplacePatch(const nlohmann::json& observed, const nlohmann::json& desired);

// `object` at the path of keys, or a static null when a key is missing.
const nlohmann::json& At(const nlohmann::json& object,
                         std::initializer_list<std::string_view> path);

// Sets `value` at the path of keys in `patch`, creating intermediate objects.
void SetAt(nlohmann::json& patch, std::initializer_list<std::string_view> path,
           nlohmann::json value);

// 64-bit FNV-1a of `text`, as 16 lowercase hex digits. Stable across builds and machines (the
// pod-template hash must not change when the operator restarts or is upgraded without a change).
std::string Fnv1a64Hex(std::string_view text);

}  // namespace kinfer::reconcile
