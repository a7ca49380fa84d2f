#include "operator/controller/controller.h"

#include <spdlog/spdlog.h>

#include <functional>

#include "operator/api/inference_service.h"
#include "operator/reconcile/object_diff.h"
#include "operator/reconcile/pod_summary.h"
#include "operator/reconcile/reconcile_step.h"
#include "operator/reconcile/status.h"

namespace kinfer::controller {

using nlohmann::json;
namespace rs = kube::resources;

std::string KeyOf(const std::string& ns, const std::string& name) { return ns + "/" + name; }

bool SplitKey(const std::string& key, std::string* ns, std::string* name) {
  size_t slash = key.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == key.size()) return false;
  *ns = key.substr(0, slash);
  *name = key.substr(slash + 1);
  return true;
}

namespace {

using reconcile::At;

std::string StrAt(const json& j, std::initializer_list<std::string_view> path) {
  const json& v = At(j, path);
  return v.is_string() ? v.get<std::string>() : std::string();
}

// The InferenceService an owned object or pod belongs to, by its label; "" when unlabelled.
std::string OwnerKey(const json& object) {
  const std::string isvc = StrAt(object, {"metadata", "labels", api::kInferenceServiceLabel});
  const std::string ns = StrAt(object, {"metadata", "namespace"});
  if (isvc.empty() || ns.empty()) return {};
  return KeyOf(ns, isvc);
}

const kube::ResourceType* TypeOfKind(const std::string& kind) {
  if (kind == "ConfigMap") return &rs::kConfigMaps;
  if (kind == "Service") return &rs::kServices;
  if (kind == "Deployment") return &rs::kDeployments;
  if (kind == "PodDisruptionBudget") return &rs::kPodDisruptionBudgets;
  return nullptr;
}

}  // namespace

void TrimObject(json* object) {
  if (object->is_object() && object->contains("metadata") && (*object)["metadata"].is_object()) {
    (*object)["metadata"].erase("managedFields");
  }
}

void TrimPod(json* pod) {
  if (!pod->is_object()) return;
  json out = json::object();
  if (const json* md = &At(*pod, {"metadata"}); md->is_object()) {
    json m = json::object();
    for (const char* k :
         {"name", "namespace", "uid", "resourceVersion", "labels", "deletionTimestamp"}) {
      if (md->contains(k)) m[k] = (*md)[k];
    }
    out["metadata"] = std::move(m);
  }
  if (const json* st = &At(*pod, {"status"}); st->is_object()) {
    json s = json::object();
    for (const char* k :
         {"phase", "podIP", "conditions", "containerStatuses", "initContainerStatuses"}) {
      if (st->contains(k)) s[k] = (*st)[k];
    }
    out["status"] = std::move(s);
  }
  *pod = std::move(out);
}

struct Controller::Watched {
  std::string resource;
  std::unique_ptr<kube::Informer> informer;
  int64_t seen_relists = 0;        // protected by Controller::mu_
  int64_t seen_stream_errors = 0;  // protected by Controller::mu_
};

Controller::Controller(const kube::Client* client, ControllerOptions options,
                       OperatorMetrics* metrics, EventRecorder* events)
    : client_(client),
      options_(std::move(options)),
      metrics_(metrics),
      events_(events),
      queue_(options_.backoff) {}

Controller::~Controller() { Stop(); }

void Controller::AddInformer(const kube::ResourceType& type, const std::string& ns,
                             const std::string& label_selector, bool owned_kind) {
  kube::WatchOptions wo = options_.watch;
  wo.ns = ns;
  wo.label_selector = label_selector;
  wo.transform = type.plural == "pods" ? TrimPod : TrimObject;
  kube::Informer::Handler handler;
  if (type.plural == rs::kInferenceServices.plural) {
    handler = [this](const kube::WatchEvent& e) { OnIsvcEvent(e); };
  } else if (type.plural == "pods") {
    handler = [this](const kube::WatchEvent& e) { OnPodEvent(e); };
  } else if (owned_kind) {
    handler = [this, plural = type.plural](const kube::WatchEvent& e) { OnOwnedEvent(plural, e); };
  }
  auto w = std::make_unique<Watched>();
  w->resource = type.plural;
  w->informer = std::make_unique<kube::Informer>(client_, type, wo, std::move(handler));
  by_resource_[type.plural].push_back(w->informer.get());
  informers_.push_back(std::move(w));
}

void Controller::StartInformers() {
  if (!informers_.empty()) return;
  std::vector<std::string> namespaces = options_.namespaces;
  if (namespaces.empty()) namespaces.push_back("");       // all namespaces
  const std::string owned = api::kInferenceServiceLabel;  // existence selector
  for (const std::string& ns : namespaces) {
    AddInformer(rs::kInferenceServices, ns, "", false);
    AddInformer(rs::kConfigMaps, ns, owned, true);
    AddInformer(rs::kServices, ns, owned, true);
    AddInformer(rs::kDeployments, ns, owned, true);
    AddInformer(rs::kPodDisruptionBudgets, ns, owned, true);
    AddInformer(rs::kPods, ns, owned, true);
  }
  for (auto& w : informers_) w->informer->Start();
}

bool Controller::WaitForSync(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (auto& w : informers_) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() < 0 || !w->informer->WaitForSync(left)) return false;
  }
  return true;
}

bool Controller::Synced() const {
  if (informers_.empty()) return false;
  for (const auto& w : informers_) {
    if (!w->informer->WaitForSync(std::chrono::milliseconds(0))) return false;
  }
  return true;
}

void Controller::StartWorkers() {
  if (started_.exchange(true)) return;
  for (int i = 0; i < std::max(1, options_.workers); ++i) {
    workers_.emplace_back([this] { Worker(); });
  }
  resync_ = std::thread([this] { ResyncLoop(); });
  // Everything already cached gets a first reconcile (the informers' ADDED events may have come
  // before a standby became leader; the queue deduplicates).
  for (const json& isvc : InferenceServices()) {
    Enqueue(KeyOf(StrAt(isvc, {"metadata", "namespace"}), StrAt(isvc, {"metadata", "name"})));
  }
}

void Controller::Stop() {
  if (stopped_.exchange(true)) return;
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  queue_.ShutDown();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
  if (resync_.joinable()) resync_.join();
  for (auto& w : informers_) w->informer->Stop();
}

void Controller::Enqueue(const std::string& key) {
  queue_.Add(key);
  metrics_->queue_adds.Get().Inc();
}

void Controller::OnIsvcEvent(const kube::WatchEvent& e) {
  const std::string key =
      KeyOf(StrAt(e.object, {"metadata", "namespace"}), StrAt(e.object, {"metadata", "name"}));
  if (e.type == kube::EventType::kDeleted) {
    std::lock_guard<std::mutex> l(mu_);
    decisions_.erase(key);
  }
  Enqueue(key);
}

void Controller::OnOwnedEvent(const std::string& resource, const kube::WatchEvent& e) {
  std::string key = OwnerKey(e.object);
  // (Listed objects carry no kind: the informer's resource names the type.)
  const std::string object = resource + "/" +
                             KeyOf(StrAt(e.object, {"metadata", "namespace"}),
                                   StrAt(e.object, {"metadata", "name"}));
  std::string previous;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = isvc_of_object_.find(object);
    if (it != isvc_of_object_.end()) previous = it->second;
    if (e.type == kube::EventType::kDeleted || key.empty()) {
      isvc_of_object_.erase(object);
    } else {
      isvc_of_object_[object] = key;
    }
  }
  if (!previous.empty() && previous != key) Enqueue(previous);
  if (!key.empty()) Enqueue(key);
}

void Controller::OnPodEvent(const kube::WatchEvent& e) {
  std::string key = OwnerKey(e.object);
  const std::string pod = StrAt(e.object, {"metadata", "name"});
  const std::string pod_key = KeyOf(StrAt(e.object, {"metadata", "namespace"}), pod);
  std::string previous;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto unfile = [&](const std::string& isvc) {
      auto it = pods_by_isvc_.find(isvc);
      if (it == pods_by_isvc_.end()) return;
      it->second.erase(pod);
      if (it->second.empty()) pods_by_isvc_.erase(it);
    };
    if (auto it = isvc_of_pod_.find(pod_key); it != isvc_of_pod_.end()) previous = it->second;
    // Filed under its previous service (its label changed, or it is gone): out of that set.
    if (!previous.empty() && (previous != key || e.type == kube::EventType::kDeleted)) {
      unfile(previous);
      isvc_of_pod_.erase(pod_key);
    }
    if (!key.empty() && e.type == kube::EventType::kDeleted) unfile(key);
    if (!key.empty() && e.type != kube::EventType::kDeleted) {
      pods_by_isvc_[key].insert(pod);
      isvc_of_pod_[pod_key] = key;
    }
  }
  if (!previous.empty() && previous != key) Enqueue(previous);
  if (!key.empty()) Enqueue(key);
}

std::optional<json> Controller::Cached(const kube::ResourceType& type, const std::string& ns,
                                       const std::string& name) const {
  auto it = by_resource_.find(type.plural);
  if (it == by_resource_.end()) return std::nullopt;
  for (const kube::Informer* inf : it->second) {
    if (std::optional<json> o = inf->store().Get(ns, name)) return o;
  }
  return std::nullopt;
}

std::vector<json> Controller::InferenceServices() const {
  std::vector<json> out;
  auto it = by_resource_.find(rs::kInferenceServices.plural);
  if (it == by_resource_.end()) return out;
  for (const kube::Informer* inf : it->second) {
    std::vector<json> part = inf->store().List();
    out.insert(out.end(), std::make_move_iterator(part.begin()),
               std::make_move_iterator(part.end()));
  }
  return out;
}

std::optional<json> Controller::Deployment(const std::string& ns, const std::string& name) const {
  return Cached(rs::kDeployments, ns, name);
}

std::vector<json> Controller::Pods(const std::string& ns, const std::string& name) const {
  std::set<std::string> names;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = pods_by_isvc_.find(KeyOf(ns, name));
    if (it != pods_by_isvc_.end()) names = it->second;
  }
  std::vector<json> pods;
  for (const std::string& pod : names) {
    std::optional<json> p = Cached(rs::kPods, ns, pod);
    // The cache is the truth: a pod relabelled since it was filed is not this service's.
    if (p && StrAt(*p, {"metadata", "labels", api::kInferenceServiceLabel}) == name) {
      pods.push_back(std::move(*p));
    }
  }
  return pods;
}

void Controller::SetDecision(const std::string& key, std::optional<autoscale::Decision> decision,
                             bool enqueue) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (decision) {
      decisions_[key] = std::move(*decision);
    } else {
      decisions_.erase(key);
    }
  }
  if (enqueue) Enqueue(key);
}

void Controller::Emit(const json& isvc, const std::string& type, const std::string& reason,
                      const std::string& message) {
  metrics_->events.WithLabels({type, reason}).Inc();
  if (events_ != nullptr) events_->Record(isvc, type, reason, message);
}

Status Controller::ApplyObject(const reconcile::ObjectPlan& p, const json& isvc,
                               bool* already_exists, int* writes) {
  const kube::ResourceType* rt = TypeOfKind(p.kind);
  if (rt == nullptr) return Internal("no resource for kind " + p.kind);
  std::string verb;
  Status st;
  switch (p.action) {
    case reconcile::Action::kNone:
      return Status::Ok();
    case reconcile::Action::kCreate:
      verb = "create";
      st = client_->Create(*rt, p.namespace_name, p.desired).status();
      if (kube::IsAlreadyExists(st)) {
        *already_exists = true;
        return Status::Ok();
      }
      break;
    case reconcile::Action::kUpdate:
      verb = "patch";
      st = client_->MergePatch(*rt, p.namespace_name, p.name, p.patch).status();
      break;
    case reconcile::Action::kDelete: {
      verb = "delete";
      kube::DeleteOptions options;
      if (!p.uid.empty()) options.precondition_uid = p.uid;
      st = client_->Delete(*rt, p.namespace_name, p.name, options);
      // NotFound: gone already. Conflict: the uid precondition failed, so the object of this
      // name is another one than the cache saw; the watch brings it and a reconcile follows.
      if (kube::IsNotFound(st) || (!p.uid.empty() && kube::IsConflict(st))) return Status::Ok();
      break;
    }
  }
  if (!st.ok()) {
    metrics_->api_write_errors.WithLabels({verb, rt->plural, kube::ErrorOf(st).reason}).Inc();
    return st;
  }
  metrics_->api_writes.WithLabels({verb, rt->plural}).Inc();
  ++*writes;
  const std::string what = p.kind + " " + p.name;
  if (p.action == reconcile::Action::kCreate) {
    Emit(isvc, kEventNormal, "Created", "created " + what);
  } else if (p.action == reconcile::Action::kUpdate) {
    Emit(isvc, kEventNormal, "Updated", "updated " + what + ": " + p.reason);
  } else {
    Emit(isvc, kEventNormal, "Deleted", "deleted " + what + ": " + p.reason);
  }
  return Status::Ok();
}

namespace {

// What exists for one InferenceService, from the caches or (live) from the API server.
struct ObservedReader {
  const kube::Client* client;
  bool live;
  std::function<std::optional<json>(const kube::ResourceType&, const std::string&,
                                    const std::string&)>
      cached;

  Status Read(const kube::ResourceType& rt, const std::string& ns, const std::string& name,
              std::optional<json>* out) const {
    if (!live) {
      *out = cached(rt, ns, name);
      return Status::Ok();
    }
    StatusOr<json> o = client->Get(rt, ns, name);
    if (o.ok()) {
      *out = std::move(*o);
      TrimObject(&**out);
      return Status::Ok();
    }
    if (kube::IsNotFound(o.status())) {
      *out = std::nullopt;
      return Status::Ok();
    }
    return o.status();
  }
};

std::optional<int> IntAt(const json& j, std::initializer_list<std::string_view> path) {
  const json& v = At(j, path);
  if (!v.is_number_integer()) return std::nullopt;
  return v.get<int>();
}

}  // namespace

ReconcileOutcome Controller::Reconcile(const std::string& key) {
  const auto t0 = std::chrono::steady_clock::now();
  ReconcileOutcome out;
  std::string ns, name;
  auto finish = [&](const char* result) {
    metrics_->reconciles.WithLabels({result}).Inc();
    metrics_->reconcile_seconds.Get().Observe(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return out;
  };
  if (!SplitKey(key, &ns, &name)) {
    out.found = false;
    return finish("success");
  }
  std::optional<json> object = Cached(rs::kInferenceServices, ns, name);
  if (!object) {
    out.found = false;  // deleted: garbage collection removes what it owned
    return finish("success");
  }

  std::optional<autoscale::Decision> decision;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = decisions_.find(key);
    if (it != decisions_.end()) decision = it->second;
  }

  ObservedReader reader{client_, false,
                        [this](const kube::ResourceType& rt, const std::string& n,
                               const std::string& o) { return Cached(rt, n, o); }};
  reconcile::ReconcileResult r;
  const std::string now = reconcile::FormatRfc3339(std::chrono::system_clock::now());
  // The first write the API server refused. The objects after it wait for the retry, but the
  // status still goes out, with the failure as its Degraded condition.
  Status write_error;
  std::string write_failure;
  for (int attempt = 0; attempt < 2; ++attempt) {
    reconcile::Observed obs;
    Status st = reader.Read(rs::kConfigMaps, ns, name + "-sidecar", &obs.config_map);
    if (st.ok()) st = reader.Read(rs::kServices, ns, name, &obs.service);
    if (st.ok()) st = reader.Read(rs::kDeployments, ns, name, &obs.deployment);
    if (st.ok()) st = reader.Read(rs::kPodDisruptionBudgets, ns, name, &obs.pdb);
    if (!st.ok()) {
      out.status = st;
      out.retry_after = kube::ErrorOf(st).retry_after;
      metrics_->reconcile_errors.Get().Inc();
      return finish("error");
    }
    // Pods count only once some exist; before that the Deployment's status counts speak.
    std::vector<json> pods = Pods(ns, name);
    if (!pods.empty()) obs.pods = reconcile::SummarizePods(pods);
    if (decision) obs.autoscaler_desired_replicas = decision->desired;

    r = reconcile::ReconcileStep(*object, obs, options_.planner, decision, now);
    if (!r.spec_error.ok()) break;

    bool already_exists = false;
    for (const reconcile::ObjectPlan* p : r.plan.Objects()) {
      Status ast = ApplyObject(*p, *object, &already_exists, &out.writes);
      if (!ast.ok()) {
        write_error = ast;
        write_failure = std::string(reconcile::ActionName(p->action)) + " " + p->kind + " " +
                        p->name + ": " + ast.message();
        spdlog::warn("reconcile {}: {} {} {}: {}", key, reconcile::ActionName(p->action), p->kind,
                     p->name, ast.ToString());
        Emit(*object, kEventWarning, "ApiError", write_failure);
        break;
      }
      if (already_exists) break;
    }
    if (!write_error.ok() || !already_exists) break;
    if (attempt == 1) {
      out.status = Unavailable("objects appeared while reconciling; retrying");
      metrics_->reconcile_errors.Get().Inc();
      return finish("error");
    }
    reader.live = true;  // the cache is behind (or an unlabelled object waits for adoption)
  }

  if (!r.spec_error.ok()) {
    out.invalid_spec = true;
    if (r.status_changed) {
      Emit(*object, kEventWarning, "InvalidSpec", r.spec_error.message());
    }
  } else {
    for (const std::string& c : r.plan.conflicts) {
      Emit(*object, kEventWarning, "ReconcileError", c);
    }
    out.blocked = !r.plan.conflicts.empty();
  }
  if (!write_error.ok()) {
    r.status = reconcile::WithWriteFailure(*object, r.status, write_failure, now);
    r.status_changed = At(*object, {"status"}) != r.status;
  }
  auto failed_write = [&] {
    out.status = write_error;
    out.retry_after = kube::ErrorOf(write_error).retry_after;
    metrics_->reconcile_errors.Get().Inc();
    return finish("error");
  };

  if (r.status_changed) {
    const std::optional<int> old_desired = IntAt(*object, {"status", "desiredReplicas"});
    json updated = *object;
    updated["status"] = r.status;
    Status st = client_->UpdateStatus(rs::kInferenceServices, ns, updated).status();
    if (st.ok()) {
      ++out.writes;
      metrics_->api_writes.WithLabels({"update_status", rs::kInferenceServices.plural}).Inc();
      const std::optional<int> new_desired = IntAt(r.status, {"desiredReplicas"});
      if (old_desired && new_desired && *old_desired != *new_desired) {
        const std::string reason = StrAt(r.status, {"lastScaleReason"});
        Emit(*object, kEventNormal, "Scaled",
             "desired replicas " + std::to_string(*old_desired) + " -> " +
                 std::to_string(*new_desired) + (reason.empty() ? "" : " (" + reason + ")"));
      }
    } else if (kube::IsConflict(st)) {
      metrics_->api_write_errors
          .WithLabels({"update_status", rs::kInferenceServices.plural, "Conflict"})
          .Inc();
      if (!write_error.ok()) return failed_write();  // retried with backoff, the status with it
      out.conflict = true;  // the watch brings the newer object
      return finish("requeue");
    } else if (kube::IsNotFound(st)) {
      return finish("success");
    } else if (!write_error.ok()) {
      return failed_write();  // the object's write failure is the one to retry on
    } else {
      out.status = st;
      out.retry_after = kube::ErrorOf(st).retry_after;
      metrics_->api_write_errors
          .WithLabels({"update_status", rs::kInferenceServices.plural, kube::ErrorOf(st).reason})
          .Inc();
      // RBAC without inferenceservices/status, a webhook: say so (the Worker logs it too).
      Emit(*object, kEventWarning, "ApiError", "update status: " + st.message());
      metrics_->reconcile_errors.Get().Inc();
      return finish("error");
    }
  }
  if (!write_error.ok()) return failed_write();
  return finish(out.invalid_spec ? "invalid_spec" : "success");
}

void Controller::Worker() {
  while (std::optional<std::string> key = queue_.Get()) {
    ReconcileOutcome o = Reconcile(*key);
    if (!o.status.ok()) {
      const auto delay =
          queue_.AddRateLimited(*key, o.retry_after.value_or(std::chrono::seconds(0)));
      metrics_->queue_retries.Get().Inc();
      // A failure that lasts (RBAC, a webhook) is logged at once, then every 30 s per key.
      if (failures_.ShouldLog(*key, o.status.ToString())) {
        spdlog::warn("reconcile {} failed, retrying in {} ms: {}", *key,
                     std::chrono::duration_cast<std::chrono::milliseconds>(delay).count(),
                     o.status.ToString());
      }
    } else if (o.conflict) {
      queue_.AddRateLimited(*key);
      metrics_->queue_retries.Get().Inc();
    } else {
      failures_.Clear(*key);
      queue_.Forget(*key);
      if (o.blocked) queue_.AddAfter(*key, options_.conflict_recheck);
    }
    queue_.Done(*key);
  }
}

void Controller::ResyncLoop() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stopping_) {
    if (cv_.wait_for(l, options_.resync_period, [this] { return stopping_; })) break;
    l.unlock();
    for (const json& isvc : InferenceServices()) {
      Enqueue(KeyOf(StrAt(isvc, {"metadata", "namespace"}), StrAt(isvc, {"metadata", "name"})));
    }
    l.lock();
  }
}

void Controller::UpdateMetrics() {
  metrics_->queue_depth.Get().Set(static_cast<double>(queue_.Len()));
  size_t isvcs = 0;
  auto it = by_resource_.find(rs::kInferenceServices.plural);
  if (it != by_resource_.end()) {
    for (const kube::Informer* inf : it->second) isvcs += inf->store().Size();
  }
  metrics_->inference_services.Get().Set(static_cast<double>(isvcs));
  std::lock_guard<std::mutex> l(mu_);
  std::map<std::string, bool> synced;
  for (auto& w : informers_) {
    kube::WatchStats s = w->informer->stats();
    if (s.relists > w->seen_relists) {
      metrics_->watch_restarts.WithLabels({w->resource, "relist"})
          .Inc(static_cast<double>(s.relists - w->seen_relists));
      w->seen_relists = s.relists;
    }
    if (s.stream_errors > w->seen_stream_errors) {
      metrics_->watch_restarts.WithLabels({w->resource, "stream_error"})
          .Inc(static_cast<double>(s.stream_errors - w->seen_stream_errors));
      w->seen_stream_errors = s.stream_errors;
    }
    auto [pos, inserted] = synced.emplace(w->resource, true);
    pos->second = pos->second && s.lists > 0;
  }
  for (const auto& [resource, ok] : synced) {
    metrics_->watch_synced.WithLabels({resource}).Set(ok ? 1 : 0);
  }
}

kube::WatchStats Controller::InformerStats() const {
  kube::WatchStats total;
  for (const auto& w : informers_) {
    kube::WatchStats s = w->informer->stats();
    total.lists += s.lists;
    total.relists += s.relists;
    total.watches += s.watches;
    total.stream_errors += s.stream_errors;
    total.events += s.events;
    total.bookmarks += s.bookmarks;
  }
  return total;
}

}  // namespace kinfer::controller
