#include "operator/reconcile/planner.h"

#include <algorithm>
#include <functional>

#include "operator/reconcile/desired_objects.h"
#include "operator/reconcile/object_diff.h"

namespace kinfer::reconcile {

namespace {

using nlohmann::json;

// Pod-spec keys the operator owns in the Deployment's template. Others (dnsPolicy,
// schedulerName, securityContext, anything a webhook adds) are left as they are.
constexpr std::string_view kOwnedPodSpecKeys[] = {"terminationGracePeriodSeconds",
                                                  "enableServiceLinks",
                                                  "automountServiceAccountToken",
                                                  "securityContext",
                                                  "initContainers",
                                                  "containers",
                                                  "volumes",
                                                  "nodeSelector",
                                                  "tolerations",
                                                  "affinity",
                                                  "priorityClassName"};

bool IsOurs(const json& ref, const api::ObjectMeta& owner) {
  if (!owner.uid.empty()) return ref.value("uid", "") == owner.uid;
  return ref.value("kind", "") == api::kKind && ref.value("name", "") == owner.name;
}

// The controller owner reference of `object`, or null.
const json* ControllerRef(const json& object) {
  const json& refs = At(object, {"metadata", "ownerReferences"});
  if (!refs.is_array()) return nullptr;
  for (const json& ref : refs) {
    if (ref.is_object() && ref.value("controller", false)) return &ref;
  }
  return nullptr;
}

std::string Describe(const ObjectPlan& p) {
  return p.kind + " " + (p.namespace_name.empty() ? "" : p.namespace_name + "/") + p.name;
}

void AddReason(std::string* reasons, const std::string& reason) {
  reasons->append(reasons->empty() ? "" : "; ").append(reason);
}

// Sets in `patch` the keys of `desired` (a string map we own keys of) that `observed` lacks or
// holds with another value. Keys others added stay.
bool PatchOwnedKeys(json& patch, std::initializer_list<std::string_view> path, const json& observed,
                    const json& desired) {
  bool changed = false;
  for (const auto& [key, value] : desired.items()) {
    const json& o = observed.is_object() && observed.contains(key) ? observed[key] : json();
    if (o != value) {
      json& target = patch;
      json* cur = &target;
      for (std::string_view k : path) cur = &(*cur)[std::string(k)];
      (*cur)[key] = value;
      changed = true;
    }
  }
  return changed;
}

// Sets `path` in `patch` when observed's value there does not already say what desired's does.
// `exact`: compare with == (selectors: an extra key would change what they select).
bool PatchIfDiffers(json& patch, std::initializer_list<std::string_view> path, const json& observed,
                    const json& desired, bool exact = false) {
  const json& d = At(desired, path);
  const json& o = At(observed, path);
  if (exact ? d == o : DeepDerivative(d, o)) return false;
  SetAt(patch, path, o.is_object() && d.is_object() ? ReplacePatch(o, d) : d);
  return true;
}

using OwnedFields = std::function<void(json& patch, const json& observed, std::string* reasons)>;

// The common part: existence, deletion in progress, another controller, labels, owner reference;
// then the kind's own fields.
void PlanObject(ObjectPlan& p, const std::optional<json>& observed, const api::ObjectMeta& owner,
                std::vector<std::string>& conflicts, const OwnedFields& owned) {
  if (!observed) {
    p.action = Action::kCreate;
    p.reason = "not found";
    return;
  }
  const json& obs = *observed;
  if (!At(obs, {"metadata", "deletionTimestamp"}).is_null()) {
    p.reason = "being deleted; created again once it is gone";
    return;
  }
  if (const json* ref = ControllerRef(obs); ref && !IsOurs(*ref, owner)) {
    p.reason = "controlled by " + ref->value("kind", "?") + " " + ref->value("name", "?") +
               " (uid " + ref->value("uid", "?") + "); not touched";
    conflicts.push_back(Describe(p) + " is " + p.reason);
    p.conflict = true;
    return;
  }
  json patch = json::object();
  std::string reasons;
  if (PatchOwnedKeys(patch, {"metadata", "labels"}, At(obs, {"metadata", "labels"}),
                     At(p.desired, {"metadata", "labels"}))) {
    AddReason(&reasons, "labels");
  }
  const json& refs = At(obs, {"metadata", "ownerReferences"});
  const bool has_ours =
      refs.is_array() && std::any_of(refs.begin(), refs.end(), [&](const json& r) {
        return r.is_object() && IsOurs(r, owner) && r.value("controller", false);
      });
  if (!has_ours) {
    json list = json::array();
    if (refs.is_array()) {
      for (const json& r : refs) {
        if (!(r.is_object() && IsOurs(r, owner))) list.push_back(r);
      }
    }
    list.push_back(OwnerReference(owner));
    SetAt(patch, {"metadata", "ownerReferences"}, std::move(list));
    AddReason(&reasons, "owner reference");
  }
  if (owned) owned(patch, obs, &reasons);
  if (patch.empty()) {
    p.reason = "in sync";
    return;
  }
  p.action = Action::kUpdate;
  p.patch = std::move(patch);
  p.reason = reasons;
}

ObjectPlan Start(const json& desired) {
  ObjectPlan p;
  p.api_version = desired.value("apiVersion", "");
  p.kind = desired.value("kind", "");
  p.name = At(desired, {"metadata", "name"}).get<std::string>();
  const json& ns = At(desired, {"metadata", "namespace"});
  if (ns.is_string()) p.namespace_name = ns.get<std::string>();
  p.desired = desired;
  return p;
}

int ObservedReplicas(const json& deployment) {
  const json& r = At(deployment, {"spec", "replicas"});
  return r.is_number_integer() ? r.get<int>() : 1;  // the API server's default
}

void DeploymentFields(const api::InferenceService& isvc, const ReconcilePlan& plan, json& patch,
                      const json& obs, std::string* reasons) {
  const json& desired = plan.deployment.desired;
  // Replicas: while the autoscaler is on the operator owns them. While it is off, spec.replicas
  // is written when it differs from what the operator last wrote (the annotation), so someone
  // else (an HPA on the Deployment, kubectl scale deployment) may size it in between.
  const int want = plan.desired_replicas, have = ObservedReplicas(obs);
  const json& last = At(obs, {"metadata", "annotations", kReplicasAnnotation});
  const std::string want_text = std::to_string(want);
  const bool write = isvc.spec.autoscaling.enabled ? have != want : last != want_text;
  if (write) {
    if (have != want) {
      SetAt(patch, {"spec", "replicas"}, want);
      AddReason(reasons, "replicas " + std::to_string(have) + " -> " + want_text);
    }
    if (last != want_text)
      SetAt(patch, {"metadata", "annotations", kReplicasAnnotation}, want_text);
  }
  if (PatchIfDiffers(patch, {"spec", "strategy"}, obs, desired)) AddReason(reasons, "strategy");
  if (PatchIfDiffers(patch, {"spec", "progressDeadlineSeconds"}, obs, desired)) {
    AddReason(reasons, "progressDeadlineSeconds");
  }

  const json& want_template = At(desired, {"spec", "template"});
  const json& have_template = At(obs, {"spec", "template"});
  const json& have_hash = At(have_template, {"metadata", "annotations", kTemplateHashAnnotation});
  const bool hash_differs = have_hash != plan.template_hash;
  if (!hash_differs && DeepDerivative(want_template, have_template)) return;
  PatchOwnedKeys(patch, {"spec", "template", "metadata", "labels"},
                 At(have_template, {"metadata", "labels"}),
                 At(want_template, {"metadata", "labels"}));
  PatchOwnedKeys(patch, {"spec", "template", "metadata", "annotations"},
                 At(have_template, {"metadata", "annotations"}),
                 At(want_template, {"metadata", "annotations"}));
  const json& want_spec = At(want_template, {"spec"});
  const json& have_spec = At(have_template, {"spec"});
  for (std::string_view key : kOwnedPodSpecKeys) {
    const json& d = At(want_spec, {key});
    const json& o = At(have_spec, {key});
    if (d.is_null()) {
      if (!o.is_null()) SetAt(patch, {"spec", "template", "spec", key}, nullptr);
    } else if (!DeepDerivative(d, o)) {
      SetAt(patch, {"spec", "template", "spec", key},
            o.is_object() && d.is_object() ? ReplacePatch(o, d) : d);
    }
  }
  AddReason(reasons, hash_differs
                         ? "template hash " +
                               (have_hash.is_string() ? have_hash.get<std::string>() : "none") +
                               " -> " + plan.template_hash
                         : "template drift");
}

}  // namespace

Status CheckSpecPolicy(const api::InferenceService& isvc, const PlannerOptions& options) {
  const api::InferenceServiceSpec& spec = isvc.spec;
  std::vector<std::pair<const char*, const api::ModelSpec*>> models = {{"spec.model", &spec.model}};
  if (spec.fallback_model) models.emplace_back("spec.fallbackModel", &*spec.fallback_model);
  if (spec.runtime.speculative && spec.runtime.speculative->draft_model) {
    models.emplace_back("spec.runtime.speculative.draftModel",
                        &*spec.runtime.speculative->draft_model);
  }
  for (const auto& [field, m] : models) {
    if (m->source != api::ModelSource::kHostPath) continue;
    bool allowed = false;
    for (const std::string& prefix : options.allowed_host_paths) {
      std::string dir = prefix;
      while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
      allowed = allowed || dir == "/" || m->path.starts_with(dir + "/");
    }
    if (!allowed) {
      std::string list;
      for (const std::string& p : options.allowed_host_paths) {
        list += (list.empty() ? "" : ", ") + p;
      }
      return InvalidArgument(std::string(field) + ".uri: '" + m->uri +
                             "' mounts a directory of the node; the operator serves file:// "
                             "models only below the directories its --allow-host-path-models "
                             "flag names (" +
                             (list.empty() ? "none" : list) +
                             "); use pvc:// or http(s)://, or ask its administrator");
    }
  }
  return Status::Ok();
}

std::string_view ActionName(Action action) {
  switch (action) {
    case Action::kNone:
      return "none";
    case Action::kCreate:
      return "create";
    case Action::kUpdate:
      return "update";
    case Action::kDelete:
      return "delete";
  }
  return "?";
}

std::vector<const ObjectPlan*> ReconcilePlan::Objects() const {
  return {&config_map, &service, &deployment, &pdb};
}

int ReconcilePlan::Writes() const {
  int n = 0;
  for (const ObjectPlan* p : Objects()) n += p->action != Action::kNone;
  return n;
}

int DesiredReplicas(const api::InferenceService& isvc, const Observed& observed) {
  const api::InferenceServiceSpec& spec = isvc.spec;
  if (!spec.autoscaling.enabled) return spec.replicas.value_or(0);
  int want = spec.autoscaling.min_replicas;
  if (observed.autoscaler_desired_replicas) {
    want = *observed.autoscaler_desired_replicas;
  } else if (isvc.status.desired_replicas) {
    want = *isvc.status.desired_replicas;
  } else if (observed.deployment) {
    want = ObservedReplicas(*observed.deployment);
  }
  return std::clamp(want, spec.autoscaling.min_replicas, spec.autoscaling.max_replicas);
}

ReconcilePlan Plan(const api::InferenceService& isvc, const Observed& observed,
                   const PlannerOptions& options) {
  ReconcilePlan plan;
  plan.desired_replicas = DesiredReplicas(isvc, observed);
  const json config_map = BuildConfigMap(isvc);
  json pod_template = BuildPodTemplate(isvc, options);
  plan.template_hash = TemplateHash(pod_template, config_map);
  plan.config_map = Start(config_map);
  plan.service = Start(BuildService(isvc));
  plan.deployment = Start(
      BuildDeployment(isvc, plan.desired_replicas, plan.template_hash, std::move(pod_template)));
  plan.pdb = Start(BuildPodDisruptionBudget(isvc));

  if (isvc.metadata.deleting) {
    for (ObjectPlan* p : {&plan.config_map, &plan.service, &plan.deployment, &plan.pdb}) {
      p->reason = "the InferenceService is being deleted";
    }
    return plan;
  }
  const api::ObjectMeta& owner = isvc.metadata;
  PlanObject(plan.config_map, observed.config_map, owner, plan.conflicts,
             [&](json& patch, const json& obs, std::string* reasons) {
               const json& want = At(plan.config_map.desired, {"data", kSidecarConfigKey});
               if (At(obs, {"data", kSidecarConfigKey}) != want) {
                 SetAt(patch, {"data", kSidecarConfigKey}, want);
                 AddReason(reasons, "sidecar config");
               }
             });
  PlanObject(plan.service, observed.service, owner, plan.conflicts,
             [&](json& patch, const json& obs, std::string* reasons) {
               const json& want = plan.service.desired;
               if (PatchIfDiffers(patch, {"spec", "type"}, obs, want)) AddReason(reasons, "type");
               if (PatchIfDiffers(patch, {"spec", "selector"}, obs, want, true))
                 AddReason(reasons, "selector");
               if (PatchIfDiffers(patch, {"spec", "ports"}, obs, want)) AddReason(reasons, "ports");
             });

  // The Deployment's selector is immutable: a different one cannot be patched.
  const json* deployment_ref = observed.deployment ? ControllerRef(*observed.deployment) : nullptr;
  if (observed.deployment && !(deployment_ref && !IsOurs(*deployment_ref, owner)) &&
      At(*observed.deployment, {"metadata", "deletionTimestamp"}).is_null() &&
      At(*observed.deployment, {"spec", "selector"}) !=
          At(plan.deployment.desired, {"spec", "selector"})) {
    plan.deployment.reason =
        "its selector differs and is immutable; delete the Deployment to let the operator recreate "
        "it";
    plan.conflicts.push_back(Describe(plan.deployment) + ": " + plan.deployment.reason);
    plan.deployment.conflict = true;
  } else {
    PlanObject(plan.deployment, observed.deployment, owner, plan.conflicts,
               [&](json& patch, const json& obs, std::string* reasons) {
                 DeploymentFields(isvc, plan, patch, obs, reasons);
               });
  }

  if (WantsPodDisruptionBudget(isvc.spec)) {
    PlanObject(plan.pdb, observed.pdb, owner, plan.conflicts,
               [&](json& patch, const json& obs, std::string* reasons) {
                 const json& want = plan.pdb.desired;
                 if (PatchIfDiffers(patch, {"spec", "maxUnavailable"}, obs, want)) {
                   AddReason(reasons, "maxUnavailable");
                 }
                 if (!At(obs, {"spec", "minAvailable"}).is_null()) {
                   SetAt(patch, {"spec", "minAvailable"}, nullptr);
                   AddReason(reasons, "minAvailable");
                 }
                 if (PatchIfDiffers(patch, {"spec", "selector"}, obs, want, true))
                   AddReason(reasons, "selector");
               });
  } else {
    plan.pdb.desired = nullptr;
    const json* ref = observed.pdb ? ControllerRef(*observed.pdb) : nullptr;
    if (ref && IsOurs(*ref, owner) &&
        At(*observed.pdb, {"metadata", "deletionTimestamp"}).is_null()) {
      plan.pdb.action = Action::kDelete;
      plan.pdb.uid = At(*observed.pdb, {"metadata", "uid"}).is_string()
                         ? At(*observed.pdb, {"metadata", "uid"}).get<std::string>()
                         : std::string();
      plan.pdb.reason = "at most one pod: a budget is not needed";
    } else {
      plan.pdb.reason = "not needed (at most one pod)";
    }
  }
  return plan;
}

}  // namespace kinfer::reconcile
