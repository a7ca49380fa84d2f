// Test helper: applies a ReconcilePlan the way the API server would, so a test can plan, apply,
// and plan again. Created objects get what the API server adds (uid, resourceVersion, generation,
// defaulted fields, normalized quantities, omitempty'd zero values, a status); updates are RFC 7386
// merge patches that bump generation when spec changes. Header-only.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "operator/reconcile/planner.h"

namespace kinfer::testing {

using nlohmann::json;

// Kubernetes' canonical form of the quantities the tests use.
inline std::string NormalizeQuantity(const std::string& q) {
  if (q == "0.5") return "500m";
  if (q == "1024Mi") return "1Gi";
  return q;
}

inline void Normalize(json& v) {
  if (v.is_object()) {
    for (auto it = v.begin(); it != v.end();) {
      if (it.key() == "readOnly" && *it == false) {  // omitempty
        it = v.erase(it);
        continue;
      }
      if ((it.key() == "limits" || it.key() == "requests") && it->is_object()) {
        for (auto& [name, amount] : it->items()) {
          if (amount.is_string()) amount = NormalizeQuantity(amount.get<std::string>());
        }
      }
      Normalize(*it);
      ++it;
    }
  } else if (v.is_array()) {
    for (json& e : v) Normalize(e);
  }
}

inline void DefaultContainer(json& c) {
  c["imagePullPolicy"] = "IfNotPresent";
  c["terminationMessagePath"] = "/dev/termination-log";
  c["terminationMessagePolicy"] = "File";
  for (const char* probe : {"readinessProbe", "livenessProbe"}) {
    if (!c.contains(probe)) continue;
    c[probe]["successThreshold"] = 1;
    c[probe]["httpGet"]["scheme"] = "HTTP";
  }
}

// What the API server adds on create.
inline json ServerCreate(json object, int serial) {
  json& meta = object["metadata"];
  meta["uid"] = "uid-" + object["kind"].get<std::string>() + "-" + std::to_string(serial);
  meta["resourceVersion"] = std::to_string(serial);
  meta["generation"] = 1;
  meta["creationTimestamp"] = "2025-01-01T00:00:00Z";
  const std::string kind = object["kind"];
  if (kind == "Deployment") {
    json& spec = object["spec"];
    spec["revisionHistoryLimit"] = 10;
    json& pod = spec["template"]["spec"];
    pod["restartPolicy"] = "Always";
    pod["dnsPolicy"] = "ClusterFirst";
    pod["schedulerName"] = "default-scheduler";
    if (!pod.contains("securityContext")) pod["securityContext"] = json::object();
    for (const char* list : {"containers", "initContainers"}) {
      if (pod.contains(list)) {
        for (json& c : pod[list]) DefaultContainer(c);
      }
    }
    for (json& v : pod["volumes"]) {
      if (v.contains("configMap")) v["configMap"]["defaultMode"] = 420;
      if (v.contains("secret")) v["secret"]["defaultMode"] = 420;
    }
    const int replicas = spec["replicas"];
    object["status"] = {{"observedGeneration", 1},
                        {"replicas", replicas},
                        {"updatedReplicas", replicas},
                        {"readyReplicas", replicas},
                        {"availableReplicas", replicas}};
  } else if (kind == "Service") {
    object["spec"]["clusterIP"] = "10.96.0.10";
    object["spec"]["clusterIPs"] = {"10.96.0.10"};
    object["spec"]["sessionAffinity"] = "None";
    object["spec"]["ipFamilies"] = {"IPv4"};
    object["spec"]["internalTrafficPolicy"] = "Cluster";
  } else if (kind == "PodDisruptionBudget") {
    object["status"] = {{"currentHealthy", 1}, {"desiredHealthy", 0}, {"disruptionsAllowed", 1}};
  }
  Normalize(object);
  return object;
}

inline json ServerPatch(json object, const json& patch) {
  const json old_spec = object.value("spec", json());
  object.merge_patch(patch);
  Normalize(object);
  json& meta = object["metadata"];
  meta["resourceVersion"] = std::to_string(std::stoi(meta.value("resourceVersion", "1")) + 1);
  if (object.value("spec", json()) != old_spec) {
    meta["generation"] = meta.value("generation", 1) + 1;
    if (object["kind"] == "Deployment") {
      const int replicas = object["spec"].value("replicas", 1);
      object["status"] = {{"observedGeneration", meta["generation"]},
                          {"replicas", replicas},
                          {"updatedReplicas", replicas},
                          {"readyReplicas", replicas},
                          {"availableReplicas", replicas}};
    }
  }
  return object;
}

// The cluster: the four objects (Observed) and a count of writes.
struct FakeCluster {
  reconcile::Observed observed;
  int writes = 0;
  int serial = 0;

  std::optional<json>& Slot(const reconcile::ObjectPlan& p) {
    if (p.kind == "ConfigMap") return observed.config_map;
    if (p.kind == "Service") return observed.service;
    if (p.kind == "Deployment") return observed.deployment;
    return observed.pdb;
  }

  void Apply(const reconcile::ReconcilePlan& plan) {
    for (const reconcile::ObjectPlan* p : plan.Objects()) {
      std::optional<json>& slot = Slot(*p);
      switch (p->action) {
        case reconcile::Action::kNone:
          break;
        case reconcile::Action::kCreate:
          slot = ServerCreate(p->desired, ++serial);
          ++writes;
          break;
        case reconcile::Action::kUpdate:
          slot = ServerPatch(*slot, p->patch);
          ++writes;
          break;
        case reconcile::Action::kDelete:
          slot.reset();
          ++writes;
          break;
      }
    }
  }
};

}  // namespace kinfer::testing
