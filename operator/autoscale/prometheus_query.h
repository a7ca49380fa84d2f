// The Prometheus-server metrics source: when an InferenceService names a Prometheus server, the
// operator asks it (GET <server>/api/v1/query?query=...) instead of scraping the pods. Pure
// functions: the PromQL for a service's pods, the query URL, the parser of the JSON answer, and
// the PodSamples built from the answers. The HTTP GET itself is the caller's (a thin adapter).
//
// The queries (the selector narrows them to one service's pods, e.g. namespace="ml",
// kinfer_service="chat"; empty selects every sidecar):
//   queue depth per pod:
//     sum by (pod) (kinfer_sidecar_queue_depth{SEL})
//   in flight per pod:
//     sum by (pod) (kinfer_sidecar_in_flight{SEL})
//   TTFT buckets per pod (TTFT_BUCKET = kinfer_sidecar_time_to_first_token_seconds_bucket):
//     sum by (pod, le) (increase(TTFT_BUCKET{SEL}[W]))
//   P99 TTFT of the fleet (status, logs):
//     histogram_quantile(0.99, sum by (le) (rate(TTFT_BUCKET{SEL}[W])))
// increase() handles counter resets the way PodSampler does; its result is fractional
// (extrapolated to the window's edges) and is rounded to whole counts per bucket.
//
// Thread safety: pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "operator/autoscale/autoscaler.h"

namespace kinfer::autoscale {

// `name="value"` matchers joined by ",", values escaped as PromQL strings (\\ \" \n).
std::string PromSelector(const std::vector<std::pair<std::string, std::string>>& matchers);

// The queries above. `window` is a PromQL duration ("1m", "30s"); `selector` from PromSelector.
std::string QueueDepthByPodQuery(std::string_view selector);
std::string InFlightByPodQuery(std::string_view selector);
std::string TtftBucketIncreaseByPodQuery(std::string_view selector, std::string_view window);
std::string TtftQuantileQuery(double quantile, std::string_view selector, std::string_view window);

// "<server>/api/v1/query?query=<expr, percent-encoded>"; `server` like "http://prom:9090" (a
// trailing '/' is dropped).
std::string PrometheusQueryUrl(std::string_view server, std::string_view expr);

// One element of an instant vector (or the scalar, with no labels).
struct PromQueryValue {
  std::map<std::string, std::string> labels;  // the "metric" object
  double value = 0;                           // "NaN", "+Inf", "-Inf" parsed too
  double timestamp_s = 0;
};

// Parses an /api/v1/query answer: {"status":"success","data":{"resultType":"vector"|"scalar",
// "result":...}}. Errors: UNAVAILABLE for {"status":"error"} (with errorType and error),
// INVALID_ARGUMENT for anything malformed or another resultType (matrix, string).
StatusOr<std::vector<PromQueryValue>> ParsePrometheusQueryResponse(std::string_view json);

// The PodSamples of `pods` (listed pods and their readiness) from the three per-pod answers. A
// ready pod with no in-flight value gets has_metrics=false (Prometheus has no recent scrape of
// it); a pod with no queue-depth value has 0; bucket values (labels pod and le, cumulative) are
// made non-cumulative and rounded; a pod whose buckets are malformed (no +Inf, a bad le) gets an
// empty histogram.
std::vector<PodSample> PodSamplesFromPrometheus(
    const std::vector<std::pair<std::string, bool>>& pods,
    const std::vector<PromQueryValue>& queue_depth, const std::vector<PromQueryValue>& in_flight,
    const std::vector<PromQueryValue>& ttft_buckets);

// When to ask for TTFT increases and over what range (whole seconds: a PromQL duration), so that
// the ranges asked, one after another, cover the time that passed: each starts where the last
// one's coverage ended (`covered_to`, none at first) and is asked once at least a panic window
// (and a second) has passed. Asking a panic window's range at the first tick at least a window
// after the last query left a gap whenever the ticks did not divide the window (3 s ranges every
// 4 s: a quarter of the observations never counted). The first query, and one after a gap longer
// than the stable window, covers one panic window (rounded up to a second) up to `now`.
struct TtftQueryPlan {
  bool ask = false;
  int64_t range_s = 0;   // when asking
  TimePoint covered_to;  // the coverage after this query (unchanged when not asking)
};
TtftQueryPlan PlanTtftQuery(std::optional<TimePoint> covered_to, TimePoint now,
                            Duration panic_window, Duration stable_window);

}  // namespace kinfer::autoscale
