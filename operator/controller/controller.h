// The InferenceService controller: informers (list+watch caches) for InferenceServices and the
// objects made for them, a rate-limited work queue, and workers that reconcile one
// InferenceService at a time, level-based:
//
//   read   the InferenceService and its ConfigMap, Service, Deployment, PDB and pods from the
//          informer caches (no API reads in a steady state);
//   plan   reconcile::ReconcileStep (pure: desired objects, one action each, status);
//   apply  create / merge-patch (owned fields that differ) / delete, in the plan's order; an
//          AlreadyExists (the cache had not seen an object yet, or an unlabelled one is to be
//          adopted) reads the live objects and plans once more;
//   status written through the status subresource with the cached resourceVersion when it
//          changed (a 409 requeues at once: the watch brings the newer object).
//
// Watch events of owned objects map to their InferenceService through the label
// serving.kinfer.dev/inferenceservice. Failures requeue with per-key exponential backoff (5 ms to
// 1000 s), honouring Retry-After; a spec the operator cannot serve is written to status once and
// not retried until the spec changes. Every InferenceService is also requeued every
// resync_period (a steady state makes no writes, so this only repairs what watches missed).
//
// Lifecycle: StartInformers() (any time; a standby replica keeps warm caches), StartWorkers()
// once leading, Stop() (the reconcile in hand finishes; informers stop). Reconcile() is public so
// tests can drive one key.
//
// Thread safety: all public methods may be called from any thread. Reconciles of one key never
// overlap (the work queue); different keys run on `workers` threads at once.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "operator/autoscale/autoscaler.h"
#include "operator/controller/event_recorder.h"
#include "operator/controller/operator_metrics.h"
#include "operator/kube/client.h"
#include "operator/kube/watch.h"
#include "operator/kube/failure_log.h"
#include "operator/kube/work_queue.h"
#include "operator/reconcile/planner.h"

namespace kinfer::controller {

struct ControllerOptions {
  std::vector<std::string> namespaces;  // watched namespaces; empty = all
  reconcile::PlannerOptions planner;
  int workers = 2;
  std::chrono::seconds resync_period{600};
  kube::BackoffPolicy backoff;
  // Informer settings (backoff, server-side watch timeout); ns and selectors are set per informer.
  kube::WatchOptions watch;
  // How soon a service blocked by an object not its own (ReconcileError) is looked at again. The
  // caches watch only labelled objects, so that object's deletion (what the condition asks for)
  // sends no event.
  std::chrono::milliseconds conflict_recheck{10000};
};

// What one reconcile did (for the worker, metrics and tests).
struct ReconcileOutcome {
  Status status;              // OK, or the failure that requeues the key with backoff
  bool found = true;          // the InferenceService was in the cache
  bool invalid_spec = false;  // spec_error: status written, no requeue
  bool conflict = false;      // a 409 on status: requeue at once
  bool blocked = false;       // another's object blocks one of ours: look again after conflict_recheck
  int writes = 0;             // creates, patches, deletes and status writes that succeeded
  std::optional<std::chrono::seconds> retry_after;
};

class Controller {
 public:
  Controller(const kube::Client* client, ControllerOptions options, OperatorMetrics* metrics,
             EventRecorder* events);
  ~Controller();  // Stop()
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  void StartInformers();
  // True once every informer holds its first list; false on timeout.
  bool WaitForSync(std::chrono::milliseconds timeout);
  bool Synced() const;
  // Starts the worker threads and the resync ticker. REQUIRES: informers started.
  void StartWorkers();
  // Idempotent.
  void Stop();

  // One reconcile of "namespace/name" (what a worker does with a key).
  ReconcileOutcome Reconcile(const std::string& key);

  // --- for the autoscaler loop (autoscale_loop.h) ---
  // The InferenceServices in the cache.
  std::vector<nlohmann::json> InferenceServices() const;
  // The cached Deployment of an InferenceService.
  std::optional<nlohmann::json> Deployment(const std::string& ns, const std::string& name) const;
  // The cached pods of an InferenceService (by the label), sorted by name.
  std::vector<nlohmann::json> Pods(const std::string& ns, const std::string& name) const;
  // Records the autoscaler's latest decision for "ns/name" and queues the key; nullopt clears it.
  void SetDecision(const std::string& key, std::optional<autoscale::Decision> decision,
                   bool enqueue);
  void Enqueue(const std::string& key);

  // Refreshes the gauges and the watch-restart counters from the informers (call before a scrape).
  void UpdateMetrics();
  size_t QueueLen() const { return queue_.Len(); }
  // Sum of the informers' stats (tests, benchmarks).
  kube::WatchStats InformerStats() const;

 private:
  struct Watched;  // one informer and its restart bookkeeping
  void AddInformer(const kube::ResourceType& type, const std::string& ns,
                   const std::string& label_selector, bool owned_kind);
  void OnIsvcEvent(const kube::WatchEvent& e);
  void OnOwnedEvent(const std::string& resource, const kube::WatchEvent& e);
  void OnPodEvent(const kube::WatchEvent& e);
  void Worker();
  void ResyncLoop();
  std::optional<nlohmann::json> Cached(const kube::ResourceType& type, const std::string& ns,
                                       const std::string& name) const;
  // Applies one object plan; counts the write. Sets *already_exists on a create's 409.
  Status ApplyObject(const reconcile::ObjectPlan& p, const nlohmann::json& isvc,
                     bool* already_exists, int* writes);
  void Emit(const nlohmann::json& isvc, const std::string& type, const std::string& reason,
            const std::string& message);

  const kube::Client* client_;
  const ControllerOptions options_;
  OperatorMetrics* metrics_;
  EventRecorder* events_;
  kube::WorkQueue queue_;
  kube::FailureLog failures_;  // Worker's rate-limited reconcile failure warnings, per key

  std::vector<std::unique_ptr<Watched>> informers_;  // fixed after StartInformers
  // Per resource plural, the informers of that kind (one per watched namespace).
  std::map<std::string, std::vector<kube::Informer*>> by_resource_;

  mutable std::mutex mu_;
  // Protected by mu_.
  std::map<std::string, std::set<std::string>> pods_by_isvc_;  // "ns/isvc" -> pod names
  // "ns/pod" -> "ns/isvc" it is filed under in pods_by_isvc_: a pod whose label moves it to
  // another service (a MODIFIED event carries only the new object) leaves the old one's set.
  std::map<std::string, std::string> isvc_of_pod_;
  // "resource/ns/name" -> "ns/isvc" of an owned object, so that a relabelled object's previous
  // service is reconciled too (client-go's OnUpdate(old, new) enqueues both owners).
  std::map<std::string, std::string> isvc_of_object_;
  std::map<std::string, autoscale::Decision> decisions_;       // "ns/isvc" -> latest
  bool stopping_ = false;
  std::condition_variable cv_;

  std::vector<std::thread> workers_;
  std::thread resync_;
  std::atomic<bool> started_{false};
  std::atomic<bool> stopped_{false};
};

// "ns/name" and back.
std::string KeyOf(const std::string& ns, const std::string& name);
bool SplitKey(const std::string& key, std::string* ns, std::string* name);

// The informer transforms: pods keep only what the status and the autoscaler read (metadata
// names, labels, deletionTimestamp; status phase, podIP, conditions, container states); every
// object loses metadata.managedFields.
void TrimPod(nlohmann::json* pod);
void TrimObject(nlohmann::json* object);

}  // namespace kinfer::controller
