// The autoscaler in the operator (issue 6): every `interval` it scrapes the sidecar /metrics of
// the pods of every InferenceService with spec.autoscaling.enabled (all pods of all services at
// once, each scrape with a timeout), turns the pages into PodSamples (PodSampler: deltas of the
// TTFT histogram), ticks that service's Autoscaler (operator/autoscale/autoscaler.h) with the
// Deployment's current replica count, and hands the Decision to the Controller, which plans the
// Deployment's replicas from it and writes status (desiredReplicas, observed queue depth and P99,
// lastScaleTime/Reason, ScalingActive) and a Scaled Event.
//
// Writes: a decision queues a reconcile only when the desired count changes, or at most every
// `status_refresh` while the observed queue depth or P99 moved, so live traffic does not turn into
// a status write per service per tick.
//
// Autoscaler state (windows, panic, stabilization) lives here per service and is rebuilt after an
// operator restart (the planner keeps the Deployment's count until the first decision, see
// reconcile/planner.h). A changed spec.autoscaling reconfigures the Autoscaler in place.
//
// metricsSource `prometheus`: instead of scraping, the loop asks the named Prometheus server
// (GET /api/v1/query) for queue depth and in-flight per pod every tick, and for the TTFT bucket
// increases over the panic window once per panic window (back-to-back windows: each observation
// counted once); docs/crd.md has the queries. A failed query marks the service's pods as missing
// metrics (the freeze rule). Both sources run concurrently within one tick.
//
// Thread safety: Tick() runs on the loop's thread (or a test's); Start/Stop from one thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "operator/autoscale/autoscaler.h"
#include "operator/autoscale/pod_sampler.h"
#include "operator/controller/controller.h"
#include "operator/controller/operator_metrics.h"

namespace kinfer::controller {

struct AutoscaleLoopOptions {
  std::chrono::milliseconds interval{2000};
  std::chrono::milliseconds scrape_timeout{1000};
  int sidecar_port = 8080;
  std::chrono::seconds status_refresh{30};
  // --metrics-source prometheus --prometheus-url URL: every service whose spec says `pods` (the
  // CRD default) is read from this Prometheus instead (clusters where the operator may not reach
  // the pods); services that name their own Prometheus keep it. "" = scrape the pods.
  std::string prometheus_url;
  // Overrides the pod address (tests: sidecars on 127.0.0.1 with their own ports). Given a pod
  // object, returns "host:port" or "" to use podIP:sidecar_port.
  std::function<std::string(const nlohmann::json&)> address_of;
};

class AutoscaleLoop {
 public:
  AutoscaleLoop(Controller* controller, AutoscaleLoopOptions options, OperatorMetrics* metrics);
  ~AutoscaleLoop();  // Stop()

  void Start();
  void Stop();
  // One tick over every autoscaled InferenceService at `now`.
  void Tick(autoscale::TimePoint now);
  size_t tracked() const;

 private:
  struct Entry;
  void Run();

  Controller* controller_;
  const AutoscaleLoopOptions options_;
  OperatorMetrics* metrics_;
  std::map<std::string, std::unique_ptr<Entry>> entries_;  // tick thread only

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // protected by mu_
  std::thread thread_;
};

}  // namespace kinfer::controller
