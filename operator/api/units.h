// Units of the InferenceService spec: durations and byte sizes in the kinfer-sidecar grammar, and
// Kubernetes resource quantities.
//
// The duration and byte-size grammars are the sidecar's (sidecar/config/sidecar_config.h), so a
// value the operator accepts is one the sidecar loads; tests/operator/api checks them against the
// sidecar's loader. Pure functions; thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace kinfer::api {

// "250ms", "30s", "2m", "1h", "500us", "100ns", or a plain number of seconds ("1.5", "0").
// INVALID_ARGUMENT for anything else, negative or non-finite values, or values past ~292 years.
StatusOr<std::chrono::nanoseconds> ParseDurationText(std::string_view text);

// "1048576", "64MiB", "512KiB", "1GiB", "1MB", "10KB", "100B", "1TB", "1TiB": an unsigned integer
// and an optional unit. INVALID_ARGUMENT for anything else or values past 2^64 - 1.
StatusOr<uint64_t> ParseByteSizeText(std::string_view text);

// A Kubernetes resource quantity ("4", "500m", "16Gi", "1.5", "1e3", "2k"), as a number of base
// units (cores, bytes). INVALID_ARGUMENT when `text` is not in the quantity grammar.
StatusOr<long double> ParseQuantity(std::string_view text);

// True when both parse as quantities of the same value ("0.5" and "500m", "1Gi" and
// "1073741824"), or when they are the same text.
bool QuantitiesEqual(std::string_view a, std::string_view b);

// Whole seconds covering `d` (ceil), at least 0.
int64_t CeilSeconds(std::chrono::nanoseconds d);

// "30s" style text of whole seconds (for defaults written by the operator).
std::string SecondsText(int64_t seconds);

}  // namespace kinfer::api
