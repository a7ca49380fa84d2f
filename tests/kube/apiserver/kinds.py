"""The kinds the test API server serves: names, scopes, subresources, defaults and validation.

Built-in kinds get the defaults the real API server writes (so that an operator that compares
what it wants with what it reads meets the same extra fields it would meet in a cluster) and the
few validation rules an operator most often trips over. InferenceService is validated against
the CRD's openAPIV3Schema (schema.py).
"""
from __future__ import annotations

import ipaddress
import itertools
import re

from . import selection
from .schema import CrdSchema

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

Cause = tuple  # (field, reason, message)


class Kind:
    def __init__(self, plural, singular, kind, group, version, namespaced, *, status=False,
                 scale=None, generation=None, short_names=(), unconditional_update=True,
                 return_deleted=False, read_only=False, name_rule="subdomain",
                 extra_fields=(), crd: CrdSchema | None = None):
        self.plural, self.singular, self.kind = plural, singular, kind
        self.group, self.version, self.namespaced = group, version, namespaced
        self.status = status          # has a status subresource
        self.scale = scale            # {specReplicasPath, statusReplicasPath, labelSelectorPath}
        self.generation = generation  # None | "spec" | "spec+annotations" | "custom"
        self.short_names = list(short_names)
        self.unconditional_update = unconditional_update  # PUT without resourceVersion allowed
        self.return_deleted = return_deleted  # DELETE answers the object, not a Status
        self.read_only = read_only
        self.name_rule = name_rule
        self.field_selectors = {"metadata.name", "metadata.namespace", *extra_fields}
        self.crd = crd

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_resource(self) -> str:
        """'deployments.apps', 'services': how NotFound and Conflict messages name the kind."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def group_kind(self) -> str:
        """'Deployment.apps', 'Service': how Invalid messages name the kind."""
        return f"{self.kind}.{self.group}" if self.group else self.kind

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    def subresources(self) -> list[str]:
        return (["status"] if self.status else []) + (["scale"] if self.scale else [])


def build_kinds(crd: dict | None) -> dict[str, Kind]:
    kinds = [
        Kind("namespaces", "namespace", "Namespace", "", "v1", False, status=True,
             short_names=["ns"], return_deleted=True, name_rule="label"),
        Kind("services", "service", "Service", "", "v1", True, status=True, short_names=["svc"],
             return_deleted=True, name_rule="dns1035"),
        Kind("pods", "pod", "Pod", "", "v1", True, status=True, short_names=["po"],
             return_deleted=True,
             extra_fields=("spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
                           "spec.serviceAccountName", "status.phase", "status.podIP",
                           "status.nominatedNodeName")),
        Kind("events", "event", "Event", "", "v1", True, short_names=["ev"],
             extra_fields=("involvedObject.kind", "involvedObject.namespace",
                           "involvedObject.name", "involvedObject.uid",
                           "involvedObject.apiVersion", "involvedObject.resourceVersion",
                           "involvedObject.fieldPath", "reason", "reportingComponent", "source",
                           "type")),
        Kind("deployments", "deployment", "Deployment", "apps", "v1", True, status=True,
             scale={"specReplicasPath": ".spec.replicas",
                    "statusReplicasPath": ".status.replicas",
                    "labelSelectorPath": None},
             generation="spec+annotations", short_names=["deploy"]),
        Kind("poddisruptionbudgets", "poddisruptionbudget", "PodDisruptionBudget", "policy", "v1",
             True, status=True, generation="spec", short_names=["pdb"]),
        Kind("leases", "lease", "Lease", "coordination.k8s.io", "v1", True),
        # The operator keeps each InferenceService's sidecar config in a ConfigMap.
        Kind("configmaps", "configmap", "ConfigMap", "", "v1", True, short_names=["cm"],
             return_deleted=True),
        Kind("customresourcedefinitions", "customresourcedefinition", "CustomResourceDefinition",
             "apiextensions.k8s.io", "v1", False, status=True, short_names=["crd", "crds"],
             read_only=True, generation="spec"),
    ]
    if crd is not None:
        cs = CrdSchema(crd)
        names = crd["spec"]["names"]
        kinds.append(Kind(names["plural"], names.get("singular", names["kind"].lower()),
                          names["kind"], crd["spec"]["group"], cs.version["name"],
                          crd["spec"].get("scope", "Namespaced") == "Namespaced",
                          status=cs.has_status, scale=cs.scale, generation="custom",
                          short_names=names.get("shortNames", []), unconditional_update=False,
                          crd=cs))
    return {k.plural: k for k in kinds}


# ==== defaults ====================================================================================

_cluster_ips = itertools.count(10)
_SERVICE_NET = ipaddress.ip_network("10.96.0.0/12")


def _next_cluster_ip() -> str:
    return str(_SERVICE_NET[next(_cluster_ips)])


def _default_probe(p):
    if not isinstance(p, dict):
        return
    p.setdefault("timeoutSeconds", 1)
    p.setdefault("periodSeconds", 10)
    p.setdefault("successThreshold", 1)
    p.setdefault("failureThreshold", 3)
    if isinstance(p.get("httpGet"), dict):
        p["httpGet"].setdefault("scheme", "HTTP")


def _image_pull_policy(image: str) -> str:
    if "@" in image:
        return "IfNotPresent"
    last = image.rsplit("/", 1)[-1]
    tag = last.split(":", 1)[1] if ":" in last else ""
    return "Always" if tag in ("", "latest") else "IfNotPresent"


def _default_container(c):
    if not isinstance(c, dict):
        return
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    c.setdefault("imagePullPolicy", _image_pull_policy(str(c.get("image", ""))))
    c.setdefault("resources", {})
    for p in c.get("ports") or []:
        if isinstance(p, dict):
            p.setdefault("protocol", "TCP")
    for name in ("livenessProbe", "readinessProbe", "startupProbe"):
        _default_probe(c.get(name))
    for env in c.get("env") or []:
        ref = (env.get("valueFrom") or {}).get("fieldRef") if isinstance(env, dict) else None
        if isinstance(ref, dict):
            ref.setdefault("apiVersion", "v1")


def default_pod_spec(spec):
    if not isinstance(spec, dict):
        return
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("enableServiceLinks", True)
    for group in ("initContainers", "containers"):
        for c in spec.get(group) or []:
            _default_container(c)
    for v in spec.get("volumes") or []:
        if not isinstance(v, dict):
            continue
        for src in ("configMap", "secret"):
            if isinstance(v.get(src), dict):
                v[src].setdefault("defaultMode", 420)
        if isinstance(v.get("hostPath"), dict):
            v["hostPath"].setdefault("type", "")


def default_object(kind: Kind, obj: dict, old: dict | None):
    """Defaults a built-in object in place (create and update). Custom resources: schema.py."""
    if kind.plural == "namespaces":
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = \
            obj["metadata"]["name"]
        if old is None:
            obj["status"] = {"phase": "Active"}
    elif kind.plural == "services":
        spec = obj.setdefault("spec", {})
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        if spec["type"] != "ExternalName":
            if old is not None:
                ospec = old.get("spec", {})
                for f in ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"):
                    if not spec.get(f) and ospec.get(f):
                        spec[f] = ospec[f]
            if not spec.get("clusterIP"):
                spec["clusterIP"] = _next_cluster_ip()
            spec.setdefault("clusterIPs", [spec["clusterIP"]])
            spec.setdefault("ipFamilies", ["IPv4"])
            spec.setdefault("ipFamilyPolicy", "SingleStack")
            spec.setdefault("internalTrafficPolicy", "Cluster")
        for p in spec.get("ports") or []:
            if isinstance(p, dict):
                p.setdefault("protocol", "TCP")
                if "port" in p:
                    p.setdefault("targetPort", p["port"])
        if old is None:
            obj["status"] = {"loadBalancer": {}}
    elif kind.plural == "deployments":
        spec = obj.setdefault("spec", {})
        spec.setdefault("replicas", 1)
        strategy = spec.setdefault("strategy", {})
        strategy.setdefault("type", "RollingUpdate")
        if strategy["type"] == "RollingUpdate":
            ru = strategy.setdefault("rollingUpdate", {})
            ru.setdefault("maxUnavailable", "25%")
            ru.setdefault("maxSurge", "25%")
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("progressDeadlineSeconds", 600)
        tmpl = spec.get("template")
        if isinstance(tmpl, dict):
            tmpl.setdefault("metadata", {}).setdefault("creationTimestamp", None)
            default_pod_spec(tmpl.get("spec"))
        if old is None:
            obj["status"] = {}
    elif kind.plural == "pods":
        default_pod_spec(obj.setdefault("spec", {}))
        if old is None:
            obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
    elif kind.plural == "poddisruptionbudgets":
        obj.setdefault("spec", {})
        if old is None:
            obj["status"] = {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0,
                             "expectedPods": 0}
    elif kind.plural == "leases":
        obj.setdefault("spec", {})


# ==== validation ==================================================================================


def validate_name(kind: Kind, name: str) -> list[Cause]:
    if kind.crd is not None or kind.name_rule == "subdomain":
        ok, what, limit = DNS1123_SUBDOMAIN.match(name), "RFC 1123 subdomain", 253
        example = "'example.com'"
        rx = DNS1123_SUBDOMAIN.pattern
    elif kind.name_rule == "label":
        ok, what, limit = DNS1123_LABEL.match(name), "RFC 1123 label", 63
        example = "'my-name',  or '123-abc'"
        rx = DNS1123_LABEL.pattern
    else:
        ok, what, limit = DNS1035_LABEL.match(name), "RFC 1035 label", 63
        example = "'my-name',  or 'abc-123'"
        rx = DNS1035_LABEL.pattern
    if ok and len(name) <= limit:
        return []
    return [("metadata.name", "FieldValueInvalid",
             f'Invalid value: "{name}": a lowercase {what} must consist of lower case '
             f"alphanumeric characters, '-' or '.', and must start and end with an alphanumeric "
             f"character (e.g. {example}, regex used for validation is '{rx}')"
             + (f" and be at most {limit} characters" if len(name) > limit else ""))]


def _qualified_key_ok(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix)):
        return False
    return bool(name) and len(name) <= 63 and bool(QUALIFIED_NAME.match(name))


def validate_metadata(kind: Kind, md: dict) -> list[Cause]:
    causes = []
    for k, v in (md.get("labels") or {}).items():
        if not _qualified_key_ok(k):
            causes.append((f"metadata.labels", "FieldValueInvalid",
                           f'Invalid value: "{k}": name part must consist of alphanumeric '
                           "characters, '-', '_' or '.', and must start and end with an "
                           "alphanumeric character"))
        if not isinstance(v, str) or len(v) > 63 or not LABEL_VALUE.match(v):
            causes.append((f"metadata.labels", "FieldValueInvalid",
                           f"Invalid value: {v!r}: a valid label must be an empty string or "
                           "consist of alphanumeric characters, '-', '_' or '.', and must start "
                           "and end with an alphanumeric character"))
    for k in (md.get("annotations") or {}):
        if not _qualified_key_ok(k):
            causes.append(("metadata.annotations", "FieldValueInvalid",
                           f'Invalid value: "{k}": name part must consist of alphanumeric '
                           "characters, '-', '_' or '.'"))
    controllers = 0
    for i, ref in enumerate(md.get("ownerReferences") or []):
        where = f"metadata.ownerReferences[{i}]"
        if not isinstance(ref, dict):
            causes.append((where, "FieldValueInvalid", "Invalid value: must be an object"))
            continue
        for f in ("apiVersion", "kind", "name", "uid"):
            if not ref.get(f):
                causes.append((f"{where}.{f}", "FieldValueInvalid",
                               f'Invalid value: "": {f} must not be empty'))
        if ref.get("controller"):
            controllers += 1
    if controllers > 1:
        causes.append(("metadata.ownerReferences", "FieldValueInvalid",
                       "Invalid value: []v1.OwnerReference: Only one reference can have "
                       "Controller set to true"))
    return causes


def _containers(spec: dict, where: str) -> list[Cause]:
    causes = []
    containers = spec.get("containers")
    if not containers:
        return [(f"{where}.containers", "FieldValueRequired", "Required value")]
    seen = set()
    for i, c in enumerate(containers):
        w = f"{where}.containers[{i}]"
        if not isinstance(c, dict):
            causes.append((w, "FieldValueInvalid", "Invalid value: must be an object"))
            continue
        if not c.get("name"):
            causes.append((f"{w}.name", "FieldValueRequired", "Required value"))
        elif not DNS1123_LABEL.match(c["name"]):
            causes.append((f"{w}.name", "FieldValueInvalid",
                           f'Invalid value: "{c["name"]}": a lowercase RFC 1123 label'))
        elif c["name"] in seen:
            causes.append((f"{w}.name", "FieldValueDuplicate",
                           f'Duplicate value: "{c["name"]}"'))
        seen.add(c.get("name"))
        if not c.get("image"):
            causes.append((f"{w}.image", "FieldValueRequired", "Required value"))
        for j, p in enumerate(c.get("ports") or []):
            port = p.get("containerPort") if isinstance(p, dict) else None
            if not isinstance(port, int) or not 1 <= port <= 65535:
                causes.append((f"{w}.ports[{j}].containerPort", "FieldValueInvalid",
                               f"Invalid value: {port}: must be between 1 and 65535, inclusive"))
    return causes


def _selector_causes(sel, where) -> tuple[list[Cause], list]:
    try:
        return [], selection.label_selector_from_object(sel)
    except selection.SelectorError as e:
        return [(where, "FieldValueInvalid", f"Invalid value: {e}")], []


def validate_object(kind: Kind, obj: dict, old: dict | None) -> list[Cause]:
    """Built-in validation of the fields operators usually get wrong."""
    spec = obj.get("spec") or {}
    causes: list[Cause] = []
    if kind.plural == "deployments":
        sel = spec.get("selector")
        if not sel or not (sel.get("matchLabels") or sel.get("matchExpressions")):
            causes.append(("spec.selector", "FieldValueRequired", "Required value"))
        else:
            c, reqs = _selector_causes(sel, "spec.selector")
            causes += c
            labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
            if not c and not selection.labels_match(reqs, labels):
                causes.append(("spec.template.metadata.labels", "FieldValueInvalid",
                               f"Invalid value: {labels!r}: `selector` does not match template "
                               "`labels`"))
        if old is not None and (old.get("spec") or {}).get("selector") != sel:
            causes.append(("spec.selector", "FieldValueInvalid",
                           f"Invalid value: {sel!r}: field is immutable"))
        r = spec.get("replicas")
        if not isinstance(r, int) or isinstance(r, bool) or r < 0:
            causes.append(("spec.replicas", "FieldValueInvalid",
                           f"Invalid value: {r!r}: must be greater than or equal to 0"))
        causes += _containers((spec.get("template") or {}).get("spec") or {},
                              "spec.template.spec")
    elif kind.plural == "pods":
        causes += _containers(spec, "spec")
    elif kind.plural == "services":
        ports = spec.get("ports") or []
        if not ports and spec.get("type") != "ExternalName" and spec.get("clusterIP") != "None":
            causes.append(("spec.ports", "FieldValueRequired", "Required value"))
        names = set()
        for i, p in enumerate(ports):
            port = p.get("port") if isinstance(p, dict) else None
            if not isinstance(port, int) or not 1 <= port <= 65535:
                causes.append((f"spec.ports[{i}].port", "FieldValueInvalid",
                               f"Invalid value: {port}: must be between 1 and 65535, inclusive"))
            if len(ports) > 1 and isinstance(p, dict) and not p.get("name"):
                causes.append((f"spec.ports[{i}].name", "FieldValueRequired", "Required value"))
            if isinstance(p, dict) and p.get("name") in names:
                causes.append((f"spec.ports[{i}].name", "FieldValueDuplicate",
                               f'Duplicate value: "{p.get("name")}"'))
            names.add(p.get("name") if isinstance(p, dict) else None)
        if old is not None:
            oip = (old.get("spec") or {}).get("clusterIP")
            if oip and spec.get("clusterIP") != oip:
                causes.append(("spec.clusterIP", "FieldValueInvalid",
                               f'Invalid value: "{spec.get("clusterIP")}": field is immutable'))
    elif kind.plural == "poddisruptionbudgets":
        if "minAvailable" in spec and "maxUnavailable" in spec:
            causes.append(("spec", "FieldValueInvalid",
                           "Invalid value: policy.PodDisruptionBudgetSpec: minAvailable and "
                           "maxUnavailable cannot be both set"))
        causes += _selector_causes(spec.get("selector"), "spec.selector")[0]
    return causes


def spec_of(kind: Kind, obj: dict):
    """What a change of bumps metadata.generation."""
    if kind.generation == "custom":
        return {k: v for k, v in obj.items() if k not in ("metadata", "status")}
    if kind.generation == "spec+annotations":
        return obj.get("spec"), (obj.get("metadata") or {}).get("annotations") or {}
    return obj.get("spec")
