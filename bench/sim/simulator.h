// Simulate(): one discrete-event run of a trace against a cluster of simulated replicas scaled by
// one policy.
//
// The cluster (a Kubernetes Deployment with a load balancer in front):
//   * Pods are created by scale-ups and become ready exactly cold_start_s later; until then they
//     cost (the GPUs are allocated) but take no traffic.
//   * Each arriving request goes to a ready pod chosen by the balancer (balancer.h): by default
//     the one with the fewest outstanding requests (sidecar queue + engine), ties broken at random
//     from the seed, a least-request load balancer as an Envoy/Istio or Gateway API front gives a
//     Kubernetes Service; optionally by prompt tokens still to prefill, and with Envoy's slow
//     start for newly ready pods. The balancer is rebuilt when a pod becomes ready or starts
//     draining. With no ready pod a request waits at the front (like Knative's activator) and
//     goes out when one becomes ready.
//   * A scale-down removes starting pods first (youngest first), then the ready pods with the
//     fewest outstanding requests; a removed ready pod takes no new requests and finishes what it
//     holds (its queue too) before it goes away, which is when its cost stops.
//   * The policy ticks once a simulated second (tick_s); its answer is clamped to [min, max].
// Cost: replica_seconds adds up each pod's life from creation to going away, cut to the span
// from the warm-up's end to the horizon (the last arrival), the same for every policy. Requests
// still running then finish but cost nothing more.
//
// Deterministic: the same inputs and seed give the same result bit for bit. Events at the same
// instant run in a fixed order: engine iterations, pods becoming ready, arrivals, ticks.
//
// Thread safety: Simulate() shares nothing between calls; runs may go on different threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/sim/balancer.h"
#include "bench/sim/policy.h"
#include "bench/sim/replica.h"
#include "bench/sim/service_model.h"
#include "bench/sim/trace.h"

namespace kinfer::sim {

// The sidecar's default TTFT histogram edges (sidecar/config: metrics.ttft_buckets).
std::vector<double> DefaultTtftEdges();
// The edges with `slo_s` added when it is > 0 and not one already, as the sidecar does.
std::vector<double> TtftEdgesWithSlo(double slo_s);

struct SimConfig {
  double slo_ttft_s = 2.0;
  double cold_start_s = 60.0;
  ReplicaLimits limits;
  int min_replicas = 1;
  int max_replicas = 64;
  uint64_t seed = 1;
  // The load balancer (balancer.h): least request over all ready pods by default; k random
  // choices, least prompt tokens, Envoy's slow start as set.
  BalancerConfig balancer;
  double timeline_period_s = 0;  // > 0: record a timeline row every this many seconds
  // Horizon for the cost (and the last policy tick); < 0: the trace's last arrival.
  double horizon_s = -1;
  // Simulated time before this is a warm-up (trace.h WithWarmup): no cost, scale event, peak or
  // timeline row is counted in it, and timeline times are given from its end.
  double warmup_s = 0;
  // The policy's first tick: before it the pods keep their initial count and fill up with the
  // warm-up's requests, so that no policy decides on an empty cluster.
  double first_tick_s = 0;
  // Seconds between policy ticks. Fixed-count runs (planning, calibration) use a huge value: one
  // tick, so that a sparse trace does not cost a tick per simulated second.
  double tick_s = 1.0;
};

struct PodRecord {
  int id = 0;
  double created_s = 0;
  double ready_s = 0;     // when it became (or would have become) ready
  double removed_s = -1;  // when a scale-down removed it; < 0 if never
  double gone_s = -1;     // when it stopped costing; < 0 if alive at the end
};

struct TimelineRow {
  double t_s = 0;          // end of the period
  double arrival_rps = 0;  // arrivals in the period / its length
  int ready = 0;
  int requested = 0;  // ready + starting
  int pods = 0;       // all pods that cost: ready, starting, draining
  int queue_depth = 0;
  int in_flight = 0;
  double p99_ttft_s = -1;  // over first tokens in the period; < 0 when none
  int first_tokens = 0;
};

struct SimRun {
  std::string policy;
  std::vector<RequestOutcome> outcomes;  // indexed like the trace
  std::vector<PodRecord> pods;
  std::vector<TimelineRow> timeline;
  double horizon_s = 0;
  double measured_s = 0;  // horizon less the warm-up: the span the cost covers
  double replica_seconds = 0;
  int scale_events = 0;  // times the requested count changed (after the warm-up)
  int scale_ups = 0;
  int scale_downs = 0;
  int peak_pods = 0;
  uint64_t shed = 0;
};

SimRun Simulate(const Trace& trace, const ServiceModel& model, const SimConfig& config,
                Policy& policy);

}  // namespace kinfer::sim
