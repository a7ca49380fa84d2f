// Process-wide logging setup (spdlog): one stderr logger shared by all threads.
//
// Thread safety: InitLogging is called once from main() before other threads start; afterwards
// spdlog's default logger is thread-safe (spdlog::info(...) from any thread).
#pragma once

#include <string_view>

#include "common/status.h"

namespace kinfer {

// Parses "trace", "debug", "info", "warn" (or "warning"), "error", "critical", "off".
// INVALID_ARGUMENT for anything else. On success *out holds spdlog's numeric level.
Status ParseLogLevel(std::string_view name, int* out);

// Makes the default spdlog logger a colour-free stderr logger named `program` with the pattern
// "2025-01-01T12:00:00.123 I program: message" at `level`. INVALID_ARGUMENT for an unknown level.
Status InitLogging(std::string_view program, std::string_view level);

}  // namespace kinfer
