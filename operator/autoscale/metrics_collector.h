// MetricsCollector: scrapes the ready pods' kinfer-sidecar /metrics pages concurrently, each with
// a timeout, and turns them into the Autoscaler's PodSamples through a PodSampler (pod_sampler.h:
// deltas, resets, failed scrapes). The thin HTTP adapter of the metrics collection; everything it
// decides is in the pure PodSampler.
//
// Contract of Collect():
//  * every listed pod gets one PodSample, in the order given; a pod that is not ready is not
//    scraped (has_metrics=false, ready=false); a scrape that fails to connect, answers non-200 or
//    exceeds the timeout gives has_metrics=false;
//  * all scrapes run at once, so one Collect() takes about the slowest scrape (at most about
//    `timeout`), not their sum. Call it every 1-2 s (the operator's tick; docs/autoscaling.md).
//    "At once" is bounded by the process's file limit: at most the soft RLIMIT_NOFILE less the
//    descriptors already open and a reserve (1/16 of the limit, at least 32) are in flight, and
//    the rest start as those finish (a pod that waited can then finish after `timeout`; each
//    scrape's timeout counts from its own start). A socket refused with EMFILE waits for the next
//    free slot instead of failing while other scrapes are in flight. Measured with 100-2000 pods
//    in docs/benchmarks.md (scrape fan-out).
//  * the first Collect() that sees a pod only records its TTFT baseline (PodSampler).
//
// Thread safety: Collect() is called from one thread at a time (it owns the PodSampler's state).
// ScrapeAll runs every scrape on the calling thread (an io_context of its own, no other thread,
// one connection per scrape, closed after the answer); HttpGetAll runs its requests on
// cpprestsdk's thread pool. Both are finished when they return, and both may run at the same
// time on different threads.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "operator/autoscale/autoscaler.h"
#include "operator/autoscale/pod_sampler.h"

namespace kinfer::autoscale {

struct PodEndpoint {
  std::string pod;      // the pod's name, copied to its PodSample
  std::string address;  // "host:port" of its sidecar ("[v6]:port" for IPv6)
  bool ready = true;    // only ready pods are scraped
};

struct CollectorOptions {
  // Per scrape: from its start (name lookup or connect) to the answer's last byte.
  std::chrono::milliseconds timeout{1000};
  std::string path = "/metrics";
  PodSamplerOptions sampler;
  // At most this many scrapes in flight (0: only the file limit bounds them; see above).
  size_t max_in_flight = 0;
};

// GETs http://<address><path> for every ready endpoint at once; one PodScrape per endpoint in
// order (status UNAVAILABLE with the reason for a failed scrape or a non-200 answer,
// DEADLINE_EXCEEDED for a timeout, FAILED_PRECONDITION for a pod that is not ready,
// INVALID_ARGUMENT for an address that is not host:port or [v6]:port). Never throws.
std::vector<PodScrape> ScrapeAll(const std::vector<PodEndpoint>& endpoints,
                                 const CollectorOptions& options);

// GETs every URL at once, each with `timeout`; one (status, body) per URL, in order. A non-200
// answer is UNAVAILABLE "HTTP <code>: <start of body>" (the body is returned too), a timeout
// DEADLINE_EXCEEDED, a malformed URL INVALID_ARGUMENT. Never throws. Shared by the sidecar scrapes
// and the Prometheus queries.
std::vector<std::pair<Status, std::string>> HttpGetAll(const std::vector<std::string>& urls,
                                                       std::chrono::milliseconds timeout);

class MetricsCollector {
 public:
  explicit MetricsCollector(CollectorOptions options = {})
      : options_(std::move(options)), sampler_(options_.sampler) {}

  // Scrapes `pods` and returns their samples (see the contract above). Pods not listed are
  // forgotten.
  std::vector<PodSample> Collect(const std::vector<PodEndpoint>& pods);

 private:
  CollectorOptions options_;
  PodSampler sampler_;
};

}  // namespace kinfer::autoscale
