// ParsePrometheusText: a parser for the Prometheus text exposition format 0.0.4, the format
// common/metrics writes and every kinfer-sidecar serves on /metrics. The metrics collector reads
// the sidecars' pages with it (pod_sampler.h).
//
// Accepted (as Prometheus' own text parser accepts it):
//  * lines end in "\n" (a "\r" before it is dropped); blank lines are skipped; blanks and tabs
//    separate tokens, leading and trailing ones are ignored;
//  * "# HELP name text" (text with "\\" and "\n" escapes) and "# TYPE name type" (type one of
//    counter, gauge, histogram, summary, untyped; at most one TYPE per name); any other line
//    starting with "#" is a comment;
//  * samples: `name{label="value",...} value [timestamp]`: name [a-zA-Z_:][a-zA-Z0-9_:]*, label
//    names [a-zA-Z_][a-zA-Z0-9_]*, each at most once per sample, a trailing comma allowed; label
//    values in double quotes with the escapes \\ \" \n; the value a float ("+Inf", "-Inf", "NaN"
//    and case variants too); the optional timestamp an integer of milliseconds.
// Anything else is an INVALID_ARGUMENT error whose message starts "line N: " (1-based). The parse
// is all or nothing: a page with one bad line yields no samples. Never crashes or reads out of
// bounds on any input (randomized test in tests/operator/autoscale/prometheus_text_test.cc).
//
// Thread safety: pure functions over values; thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace kinfer::autoscale {

struct PromSample {
  std::string name;
  // In the order of the page.
  std::vector<std::pair<std::string, std::string>> labels;
  double value = 0;
  std::optional<int64_t> timestamp_ms;

  // The value of label `name`, or nullptr when the sample has no such label.
  const std::string* Label(std::string_view name) const;
};

struct PromPage {
  std::vector<PromSample> samples;                        // in the order of the page
  std::map<std::string, std::string, std::less<>> types;  // metric family -> "counter", ...
  std::map<std::string, std::string, std::less<>> help;   // metric family -> unescaped HELP text

  // Samples named `name`, in page order (pointers into `samples`, valid while the page lives
  // unchanged).
  std::vector<const PromSample*> Find(std::string_view name) const;
};

// Parses a whole page. Errors: INVALID_ARGUMENT "line N: what".
StatusOr<PromPage> ParsePrometheusText(std::string_view text);

// Parses a sample value or an `le` label: a decimal or hex float with an optional sign, or
// Inf/NaN spelled as Go's strconv.ParseFloat takes them ("+Inf", "inf", "-Infinity", "NaN").
// nullopt when `text` is not entirely one number.
std::optional<double> ParsePromFloat(std::string_view text);

}  // namespace kinfer::autoscale
