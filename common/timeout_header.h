// x-kinfer-timeout, one syntax for kinfer-sidecar and kinfer-runtime: the sidecar forwards the
// header to the runtime, so a value one accepted and the other refused answered 200 from the
// sidecar's cache and 400 from the runtime.
//
//   "500ms", "2s", "1m", or a plain number of seconds ("1.5"); greater than 0 and at most a day.
//   Sub-millisecond values round up to 1 ms; spaces and tabs around the value are ignored.
//
// Pure; thread-safe.
#pragma once

#include <chrono>
#include <optional>
#include <string_view>

namespace kinfer {

// The timeout, or nullopt when `text` is not one (empty included).
std::optional<std::chrono::milliseconds> ParseTimeoutHeader(std::string_view text);

}  // namespace kinfer
