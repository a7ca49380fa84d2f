// PodSampler: turns each pod's scraped sidecar /metrics page into the PodSample the Autoscaler
// reads, keeping the previous cumulative TTFT histogram per pod so that a sample carries the
// observations since the previous successful scrape (deltas, not gauges).
//
// Per pod and scrape:
//  * queue_depth = the sum of kinfer_sidecar_queue_depth over its `class` series (0 when none);
//    in_flight = kinfer_sidecar_in_flight. A page without kinfer_sidecar_in_flight is not a
//    sidecar's page: has_metrics=false.
//  * TTFT: the kinfer_sidecar_time_to_first_token_seconds_bucket series summed over classes per
//    `le` (cumulative), made non-cumulative (one count per finite edge, then +Inf), minus the
//    previous scrape's counts of that pod. Every class must have the same edges including +Inf and
//    non-decreasing cumulative counts; otherwise the page's histogram is malformed: the sample
//    keeps its gauges with an empty histogram and the stored baseline stays as it was.
//  * The first successful scrape of a pod only records the baseline (its histogram is empty):
//    counts accumulated before the collector knew the pod (an operator restart) would otherwise
//    land in one tick as a burst.
//  * A counter reset (any bucket count lower than in the previous scrape, or the edges changed:
//    the sidecar restarted) takes the new counts as the delta, as Prometheus' rate() does.
//  * A failed scrape (status not OK, a page that does not parse or is not a sidecar's) gives
//    has_metrics=false and drops the baseline: the autoscaler has filled the pod's share of that
//    tick in from the other pods, or frozen the tick, so the observations it missed must not
//    arrive later on top (a pod back after 30 s of failed scrapes delivered them in one tick: a
//    rate of 35 req/s read where 20 were served, and a scale-up from 4 to 12). The next page is a
//    new baseline, as a first scrape is.
//  * Sample() forgets the pods not listed (deleted pods); a pod that comes back starts anew.
//
// Thread safety: not thread-safe; one PodSampler per InferenceService, called from one thread
// (the collector's). No clock, no I/O.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "operator/autoscale/autoscaler.h"
#include "operator/autoscale/prometheus_text.h"

namespace kinfer::autoscale {

// The metric names read from a page (the sidecar's, docs/metrics.md).
struct PodSamplerOptions {
  std::string queue_depth_metric = "kinfer_sidecar_queue_depth";
  std::string in_flight_metric = "kinfer_sidecar_in_flight";
  std::string ttft_metric = "kinfer_sidecar_time_to_first_token_seconds";  // "_bucket" appended
};

// One pod's scrape: the page body when status is OK, else why there is none.
struct PodScrape {
  std::string pod;
  bool ready = false;
  Status status;     // OK: `body` holds the page
  std::string body;  // Prometheus text
};

// The cumulative TTFT histogram of a page, summed over classes (exposed for tests and tools).
struct CumulativeHistogram {
  std::vector<double> upper_bounds;  // finite edges, increasing
  std::vector<uint64_t> counts;      // non-cumulative, one per edge plus +Inf
};

// The page's `<metric>_bucket` series summed over every other label, made non-cumulative.
// NOT_FOUND when the page has no such series; INVALID_ARGUMENT when it is malformed (an `le` that
// is not a number, no +Inf bucket, series with different edges, counts decreasing with `le`,
// negative or non-finite counts).
StatusOr<CumulativeHistogram> ExtractHistogram(const PromPage& page, std::string_view metric);

class PodSampler {
 public:
  explicit PodSampler(PodSamplerOptions options = {}) : options_(std::move(options)) {}

  // One PodSample per scrape, in order; forgets the pods not in `scrapes`.
  std::vector<PodSample> Sample(const std::vector<PodScrape>& scrapes);

  // One pod: `page` nullptr for a failed scrape. Does not forget other pods.
  PodSample SamplePage(const std::string& pod, bool ready, const PromPage* page);

  // Drops a pod's baseline.
  void Forget(const std::string& pod) { previous_.erase(pod); }
  size_t tracked_pods() const { return previous_.size(); }

 private:
  PodSamplerOptions options_;
  std::map<std::string, CumulativeHistogram, std::less<>> previous_;  // pod -> last good scrape
};

}  // namespace kinfer::autoscale
