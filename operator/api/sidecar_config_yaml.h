// RenderSidecarConfigYaml: the kinfer-sidecar config file (sidecar/kinfer-sidecar.example.yaml)
// for an InferenceService's pods, from spec.sidecar, spec.fallbackModel and spec.slo.
//
// The pod layout (what the reconciler builds around this file):
//   sidecar  listens on :kSidecarPort (IPv4 and IPv6), the only port the pod exposes;
//   runtime  listens on 127.0.0.1:kRuntimePort (the sidecar's upstream);
//   fallback runtime, when spec.fallbackModel is set, on 127.0.0.1:kFallbackRuntimePort (the
//            sidecar's degrade.fallback_upstream).
//
// Mapping: each camelCase key of spec.sidecar becomes the sidecar's snake_case key;
// timeouts.{connect,upstream,drain} -> {connect,upstream,drain}_timeout; classes[].degrade.triggers
// -> classes[].degrade.on; rateLimits -> rate_limits (default, overrides, max_tracked_keys);
// circuitBreaker -> circuit_breaker; degrade.fallback_model = spec.fallbackModel.name and
// degrade.slo_ttft_p99 = spec.slo.ttftP99Seconds. Every value is written out (the spec holds
// effective values), except the histogram buckets, written only when given. api_keys are not
// written: they come from the Secret spec.sidecar.apiKeysSecretName and are appended in the pod
// (the reconciler's sidecar-config init container), so keys never sit in a ConfigMap.
//
// Pure; thread-safe. The output loads with kinfer::LoadSidecarConfigYaml for every spec that
// ParseInferenceService accepts (tests/operator/api checks it).
#pragma once

#include <string>

#include "operator/api/inference_service.h"

namespace kinfer::api {

inline constexpr int kSidecarPort = 8080;
inline constexpr int kRuntimePort = 8081;
inline constexpr int kFallbackRuntimePort = 8082;

// The YAML text (a header comment naming `origin`, e.g. "llm/gemma3-chat", then the keys).
std::string RenderSidecarConfigYaml(const InferenceServiceSpec& spec,
                                    const std::string& origin = "");

}  // namespace kinfer::api
