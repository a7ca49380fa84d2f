// Prometheus text exposition format 0.0.4: the small pieces of syntax, shared by the Registry's
// exposition and by anything that writes or checks metric lines by hand.
//
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace kinfer::metrics {

// A sample value: shortest round-trip decimal ("5", "0.25", "1e-05"), "+Inf", "-Inf" or "NaN".
std::string FormatValue(double v);
// A label value inside double quotes: backslash, double quote and newline escaped.
std::string EscapeLabelValue(std::string_view v);
// HELP text: backslash and newline escaped (double quotes stay as they are).
std::string EscapeHelp(std::string_view v);

}  // namespace kinfer::metrics
