// Policy: a scaling policy under simulation. The simulator calls Tick() once a simulated second
// with what the pods report; the policy answers the replica count it wants (or nothing, to leave
// the count as it is). Policies see only what a real controller could: per-pod queue depth, in
// flight and TTFT histogram deltas, and which pods are ready or starting. The oracle and static
// policies are handed a precomputed schedule instead (planning.h).
//
// Thread safety: not thread-safe; one policy per simulation run, called from its thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kinfer::sim {

// One pod that the Deployment counts (ready or starting; pods being drained are not listed).
struct PodSnapshot {
  int id = 0;
  bool ready = false;
  double created_s = 0;
  int queue_depth = 0;  // requests waiting in its sidecar
  int in_flight = 0;    // requests admitted to its engine
  // TTFTs observed since the previous tick: one count per edge of ClusterSnapshot::ttft_edges
  // plus one for +Inf (not cumulative). All zeros when none.
  std::vector<uint64_t> ttft_counts;
};

struct ClusterSnapshot {
  double now_s = 0;
  int requested = 0;  // the Deployment's replicas: ready + starting pods
  int ready = 0;
  int starting = 0;
  int draining = 0;               // pods scaled away that still finish their requests
  std::vector<PodSnapshot> pods;  // oldest first
  const std::vector<double>* ttft_edges = nullptr;
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string name() const = 0;
  // Pods ready at time 0.
  virtual int InitialReplicas() const = 0;
  // Called at t = 0, 1, 2, ... s. The desired count (clamped to the simulation's min and max by
  // the caller), or nullopt for no decision this tick.
  virtual std::optional<int> Tick(const ClusterSnapshot& cluster) = 0;
  // Policy-specific counters for the report (decisions by reason, panics), by name.
  virtual std::map<std::string, double> Counters() const { return {}; }
};

}  // namespace kinfer::sim
