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
//  * the first Collect() that sees a pod only records its TTFT baseline (PodSampler).
//
// Thread safety: Collect() is called from one thread at a time (it owns the PodSampler's state);
// the HTTP requests run on cpprestsdk's thread pool and are all finished when Collect() returns.
#pragma once

#include <chrono>
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
  // Per scrape: connect, request and response, without progress (cpprestsdk's timeout).
  std::chrono::milliseconds timeout{1000};
  std::string path = "/metrics";
  PodSamplerOptions sampler;
};

// GETs http://<address><path> for every ready endpoint at once; one PodScrape per endpoint in
// order (status UNAVAILABLE with the reason for a failed scrape, DEADLINE_EXCEEDED for a timeout,
// FAILED_PRECONDITION for a pod that is not ready). Never throws.
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
