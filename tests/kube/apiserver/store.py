"""The object store: one global resourceVersion, the event history, and the write semantics.

Everything that changes stored state goes through Store._commit under Store.lock: it bumps the
global resourceVersion, serializes the object once (reads and watch events reuse those bytes),
keeps the uid and owner indexes, appends the event to the history (compacting to the last
`history` events) and wakes the watchers. A background Worker plays the controllers that the real
control plane runs beside the API server: the garbage collector (owner references, foreground and
orphan deletion), the namespace controller, and optionally a deployment controller that writes
Deployment status.
"""
from __future__ import annotations

import collections
import heapq
import itertools
import json
import random
import threading
import time
import uuid

from . import kinds as kindmod
from . import patching, selection

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
_GEN_CHARS = "bcdfghjklmnpqrstvwxz2456789"


def dumps(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def now_rfc3339() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def copy_obj(obj):
    return json.loads(dumps(obj))


class ApiError(Exception):
    """An error the API answers with a metav1.Status."""

    def __init__(self, code: int, reason: str, message: str, details: dict | None = None,
                 headers: dict | None = None):
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message
        self.details, self.headers = details, headers or {}

    def status(self) -> dict:
        st = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
              "message": self.message, "reason": self.reason, "code": self.code}
        if not self.reason:
            del st["reason"]
        if self.details:
            st["details"] = self.details
        return st


def not_found(kind, name) -> ApiError:
    return ApiError(404, "NotFound", f'{kind.group_resource} "{name}" not found',
                    {"name": name, "group": kind.group, "kind": kind.plural})


def conflict(kind, name, why=None) -> ApiError:
    why = why or ("the object has been modified; please apply your changes to the latest "
                  "version and try again")
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {kind.group_resource} '
                    f'"{name}": {why}', {"name": name, "group": kind.group, "kind": kind.plural})


def invalid(kind, name, causes) -> ApiError:
    parts = [f"{field}: {msg}" for field, _, msg in causes]
    joined = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    return ApiError(422, "Invalid", f'{kind.group_kind} "{name}" is invalid: {joined}',
                    {"name": name, "group": kind.group, "kind": kind.kind,
                     "causes": [{"reason": r, "message": m, "field": f} for f, r, m in causes]})


def bad_request(message) -> ApiError:
    return ApiError(400, "BadRequest", message)


class Entry:
    __slots__ = ("obj", "data")

    def __init__(self, obj, data):
        self.obj, self.data = obj, data


class Event:
    __slots__ = ("rv", "type", "plural", "ns", "obj", "data", "prev")

    def __init__(self, rv, etype, plural, ns, obj, data, prev):
        self.rv, self.type, self.plural, self.ns = rv, etype, plural, ns
        self.obj, self.data, self.prev = obj, data, prev


class Expired(Exception):
    def __init__(self, requested, oldest):
        super().__init__(f"too old resource version: {requested} ({oldest})")
        self.requested, self.oldest = requested, oldest


def _md(obj) -> dict:
    return obj.setdefault("metadata", {})


def _get_path(obj, dotted):
    node = obj
    for part in dotted.strip(".").split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _set_path(obj, dotted, value):
    parts = dotted.strip(".").split(".")
    node = obj
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value


class Store:
    def __init__(self, kinds: dict, history: int = 10000, initial_rv: int = 0):
        self.kinds = kinds
        self.by_gvk = {(k.api_version, k.kind): k for k in kinds.values()}
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.history = history
        self.config = {"gcDelay": 0.0, "deploymentController": False, "controllerDelay": 0.0}
        self.counters = collections.Counter()
        self.worker = Worker(self)
        self._clear(initial_rv)

    # ---- state ----------------------------------------------------------------------------------

    def _clear(self, rv: int):
        self.rv = rv
        self.compacted = rv
        self.objects = {p: {} for p in self.kinds}
        self.by_uid: dict[str, tuple] = {}
        self.dependents: dict[str, set] = {}
        self.log: collections.deque = collections.deque()
        self.revisions: dict[str, tuple] = {}  # deployment uid -> (template json, revision)

    def bootstrap(self, crd: dict | None):
        """The objects every cluster has: the default namespaces and the CRD."""
        with self.lock:
            for ns in DEFAULT_NAMESPACES:
                if ("", ns) not in self.objects["namespaces"]:
                    self.create(self.kinds["namespaces"], None,
                                {"metadata": {"name": ns}}, internal=True)
            if crd is not None and "customresourcedefinitions" in self.kinds:
                kind = self.kinds["customresourcedefinitions"]
                if ("", crd["metadata"]["name"]) not in self.objects[kind.plural]:
                    obj = copy_obj(crd)
                    obj["status"] = {
                        "acceptedNames": obj["spec"]["names"], "storedVersions":
                        [v["name"] for v in obj["spec"]["versions"] if v.get("storage")],
                        "conditions": [{"type": t, "status": "True", "reason": r, "message": m,
                                        "lastTransitionTime": now_rfc3339()} for t, r, m in (
                            ("NamesAccepted", "NoConflicts", "no conflicts found"),
                            ("Established", "InitialNamesAccepted",
                             "the initial names have been accepted"))]}
                    self.create(kind, None, obj, internal=True)

    def reset(self, crd):
        with self.lock:
            self.worker.clear()
            self._clear(self.rv)  # resourceVersions stay monotonic; old watches get 410
            self.bootstrap(crd)
            self.cond.notify_all()

    def snapshot(self) -> dict:
        with self.lock:
            objs = [e.obj for p in self.objects.values() for e in p.values()]
            return {"resourceVersion": str(self.rv), "objects": objs}

    def restore(self, state: dict):
        with self.lock:
            self._clear(int(state["resourceVersion"]))
            for obj in state["objects"]:
                kind = self.by_gvk.get((obj.get("apiVersion"), obj.get("kind")))
                if kind is None:
                    continue
                md = obj["metadata"]
                key = (md.get("namespace", "") if kind.namespaced else "", md["name"])
                self._index(kind, key, obj, None)
                self.objects[kind.plural][key] = Entry(obj, dumps(obj))
            for plural, objs in self.objects.items():  # resume pending deletions
                for key, e in objs.items():
                    if e.obj["metadata"].get("deletionTimestamp"):
                        self._after_commit(self.kinds[plural], MODIFIED, e.obj, None, key)

    def set_history(self, n: int):
        with self.lock:
            self.history = max(0, int(n))
            self._trim()

    def compact(self, upto: int | None = None) -> int:
        with self.lock:
            upto = self.rv if upto is None else min(int(upto), self.rv)
            while self.log and self.log[0].rv <= upto:
                self.log.popleft()
            self.compacted = max(self.compacted, upto)
            self.cond.notify_all()
            return self.compacted

    def _trim(self):
        while len(self.log) > self.history:
            self.compacted = self.log.popleft().rv
        if self.history == 0:
            self.compacted = self.rv

    def counts(self) -> dict:
        with self.lock:
            return {p: len(o) for p, o in self.objects.items()}

    # ---- reads ----------------------------------------------------------------------------------

    def key(self, kind, ns, name):
        return ((ns or "") if kind.namespaced else "", name)

    def get(self, kind, ns, name) -> Entry:
        e = self.objects[kind.plural].get(self.key(kind, ns, name))
        if e is None:
            raise not_found(kind, name)
        return e

    def select(self, kind, ns, label_reqs, field_reqs, start=None):
        """Matching entries sorted by (namespace, name); call with the lock held."""
        objs = self.objects[kind.plural]
        keys = sorted(objs)
        out = []
        for key in keys:
            if ns and key[0] != ns:
                continue
            if start is not None and key <= start:
                continue
            e = objs[key]
            md = e.obj["metadata"]
            if label_reqs and not selection.labels_match(label_reqs, md.get("labels")):
                continue
            if field_reqs and not selection.fields_match(field_reqs, e.obj):
                continue
            out.append((key, e))
        return out

    def events_since(self, pos: int) -> list[Event]:
        """Events with rv > pos; raises Expired when some were compacted. Lock held."""
        if pos < self.compacted:
            raise Expired(pos, self.compacted + 1)
        out = []
        for ev in reversed(self.log):
            if ev.rv <= pos:
                break
            out.append(ev)
        out.reverse()
        return out

    # ---- the commit -----------------------------------------------------------------------------

    def _index(self, kind, key, obj, prev):
        ref = (kind.plural, key[0], key[1])
        if prev is not None:
            for r in prev["metadata"].get("ownerReferences") or []:
                deps = self.dependents.get(r.get("uid"))
                if deps is not None:
                    deps.discard(ref)
                    if not deps:
                        del self.dependents[r.get("uid")]
        if obj is not None:
            self.by_uid[obj["metadata"]["uid"]] = ref
            for r in obj["metadata"].get("ownerReferences") or []:
                self.dependents.setdefault(r.get("uid"), set()).add(ref)

    def _commit(self, kind, etype, obj, prev, internal=False):
        self.rv += 1
        if next(iter(obj)) != "apiVersion":  # the field order the real server writes
            obj = {"apiVersion": obj.pop("apiVersion"), "kind": obj.pop("kind"),
                   "metadata": obj.pop("metadata"), **obj}
        md = obj["metadata"]
        md["resourceVersion"] = str(self.rv)
        data = dumps(obj)
        key = (md.get("namespace", "") if kind.namespaced else "", md["name"])
        table = self.objects[kind.plural]
        if etype == DELETED:
            table.pop(key, None)
            self.by_uid.pop(md["uid"], None)
            self._index(kind, key, None, prev)
        else:
            table[key] = Entry(obj, data)
            self._index(kind, key, obj, prev)
        self.log.append(Event(self.rv, etype, kind.plural, key[0], obj, data, prev))
        self._trim()
        self.counters["internalWrites" if internal else "effectiveWrites"] += 1
        self.cond.notify_all()
        self._after_commit(kind, etype, obj, prev, key)
        return Entry(obj, data)

    def _after_commit(self, kind, etype, obj, prev, key):
        md = obj["metadata"]
        cfg = self.config
        if etype == DELETED:
            if md["uid"] in self.dependents:
                self.worker.submit(("gc-owner", md["uid"]), cfg["gcDelay"])
            for r in md.get("ownerReferences") or []:
                owner = self._by_uid(r.get("uid"))
                if owner is not None and "foregroundDeletion" in (
                        owner.obj["metadata"].get("finalizers") or []):
                    self.worker.submit(("foreground", r.get("uid")), cfg["gcDelay"])
            if kind.namespaced:
                ns = self.objects["namespaces"].get(("", key[0]))
                if ns is not None and ns.obj["metadata"].get("deletionTimestamp"):
                    self.worker.submit(("namespace", key[0]), 0)
            self.revisions.pop(md["uid"], None)
            return
        refs = md.get("ownerReferences")
        if refs and (prev is None or prev["metadata"].get("ownerReferences") != refs):
            self.worker.submit(("gc-check", kind.plural, key), cfg["gcDelay"])
        if md.get("deletionTimestamp") and (prev is None or
                                            not prev["metadata"].get("deletionTimestamp")):
            fins = md.get("finalizers") or []
            if "foregroundDeletion" in fins:
                self.worker.submit(("foreground", md["uid"]), cfg["gcDelay"])
            if "orphan" in fins:
                self.worker.submit(("orphan", md["uid"]), cfg["gcDelay"])
            if kind.plural == "namespaces":
                self.worker.submit(("namespace", md["name"]), 0)
        if kind.plural == "deployments" and cfg["deploymentController"] and (
                prev is None or prev["metadata"].get("generation") != md.get("generation")):
            self.worker.submit(("deployment", key), cfg["controllerDelay"])

    def _by_uid(self, uid):
        ref = self.by_uid.get(uid)
        if ref is None:
            return None
        return self.objects[ref[0]].get((ref[1], ref[2]))

    # ---- create ---------------------------------------------------------------------------------

    def _check_type(self, kind, obj):
        if not isinstance(obj, dict):
            raise bad_request("the body of the request is not a JSON object")
        av, k = obj.get("apiVersion"), obj.get("kind")
        if (av and av != kind.api_version) or (k and k != kind.kind):
            raise bad_request(f"the API version in the data ({av}) does not match the expected "
                              f"API version ({kind.api_version})" if av != kind.api_version else
                              f"the kind in the data ({k}) does not match the expected kind "
                              f"({kind.kind})")
        obj["apiVersion"], obj["kind"] = kind.api_version, kind.kind
        if not isinstance(obj.get("metadata", {}), dict):
            raise bad_request("metadata must be an object")

    def _admit(self, kind, obj, old, status_only=False, strict=False):
        """Defaults and validates obj (in place); returns the pruned field paths.

        strict (fieldValidation=Strict): an unknown field is an error, not a warning."""
        md = obj["metadata"]
        causes = []
        pruned = []
        if kind.crd is not None:
            causes, pruned = kind.crd.admit(obj, status_only)
            if pruned and strict:
                raise bad_request("strict decoding error: " + ", ".join(
                    f'unknown field "{p}"' for p in pruned))
        else:
            kindmod.default_object(kind, obj, old)
            if not status_only:
                causes = kindmod.validate_object(kind, obj, old)
        causes = kindmod.validate_metadata(kind, md) + causes
        if causes:
            raise invalid(kind, md.get("name", ""), causes)
        return pruned

    def create(self, kind, ns, body, dry_run=False, internal=False, strict=False):
        """Returns (Entry, warnings). ns: the namespace of the URL."""
        if kind.read_only and not internal:
            raise ApiError(405, "MethodNotAllowed",
                           f"create is not supported on {kind.group_resource} by the kinfer "
                           "test API server")
        obj = body
        self._check_type(kind, obj)
        md = _md(obj)
        with self.lock:
            if kind.namespaced:
                if md.get("namespace") and md["namespace"] != ns:
                    raise bad_request("the namespace of the provided object does not match the "
                                      "namespace sent on the request")
                md["namespace"] = ns
                nse = self.objects["namespaces"].get(("", ns))
                if nse is None:
                    raise not_found(self.kinds["namespaces"], ns)
                if nse.obj["metadata"].get("deletionTimestamp"):
                    raise ApiError(403, "Forbidden",
                                   f'{kind.plural} "{md.get("name") or md.get("generateName")}"'
                                   f" is forbidden: unable to create new content in namespace "
                                   f"{ns} because it is being terminated",
                                   {"name": md.get("name", ""), "group": kind.group,
                                    "kind": kind.plural,
                                    "causes": [{"reason": "NamespaceTerminating",
                                                "message": f"namespace {ns} is being "
                                                           "terminated",
                                                "field": "metadata.namespace"}]})
            else:
                md.pop("namespace", None)
            if md.get("resourceVersion"):
                # what the real server answers (a 500 without a reason)
                raise ApiError(500, "", "resourceVersion should not be set on objects to be "
                               "created")
            if not md.get("name"):
                if md.get("generateName"):
                    for _ in range(100):
                        name = md["generateName"] + "".join(random.choice(_GEN_CHARS)
                                                            for _ in range(5))
                        if self.key(kind, ns, name) not in self.objects[kind.plural]:
                            break
                    md["name"] = name
                else:
                    raise invalid(kind, "", [("metadata.name", "FieldValueRequired",
                                              "Required value: name or generateName is "
                                              "required")])
            name = md["name"]
            causes = kindmod.validate_name(kind, name)
            if causes:
                raise invalid(kind, name, causes)
            for f in ("deletionTimestamp", "deletionGracePeriodSeconds", "managedFields",
                      "selfLink", "uid", "creationTimestamp", "generation"):
                md.pop(f, None)
            md["uid"] = str(uuid.uuid4())
            md["creationTimestamp"] = now_rfc3339()
            if kind.generation:
                md["generation"] = 1
            status = obj.pop("status", None) if kind.status else None
            if kind.read_only:
                obj["status"] = status or {}
            warnings = self._admit(kind, obj, None, strict=strict) if kind.plural != \
                "customresourcedefinitions" else []
            if self.key(kind, ns, name) in self.objects[kind.plural]:
                raise ApiError(409, "AlreadyExists",
                               f'{kind.group_resource} "{name}" already exists',
                               {"name": name, "group": kind.group, "kind": kind.plural})
            if dry_run:
                return Entry(obj, dumps(obj)), warnings
            return self._commit(kind, ADDED, obj, None, internal), warnings

    # ---- update ---------------------------------------------------------------------------------

    def _check_identity(self, kind, old, new):
        md, omd = _md(new), old["metadata"]
        if md.get("name") and md["name"] != omd["name"]:
            raise bad_request(f"the name of the object ({md['name']}) does not match the name "
                              f"on the URL ({omd['name']})")
        if kind.namespaced and md.get("namespace") and md["namespace"] != omd.get("namespace"):
            raise bad_request("the namespace of the provided object does not match the "
                              "namespace sent on the request")
        if md.get("uid") and md["uid"] != omd["uid"]:
            raise conflict(kind, omd["name"], f"Precondition failed: UID in precondition: "
                                              f"{md['uid']}, UID in object meta: {omd['uid']}")

    def _prepare_update(self, kind, old, new, sub, strict=False):
        """The object an update of old with new stores (not yet validated against rv)."""
        omd = old["metadata"]
        if sub == "status" and kind.crd is not None:
            result = copy_obj(old)
            if "status" in new:
                result["status"] = new["status"]
            else:
                result.pop("status", None)
            new = result
        elif sub == "status":
            new["spec"] = copy_obj(old.get("spec")) if "spec" in old else None
            if new["spec"] is None:
                new.pop("spec")
            labels = omd.get("labels")
            if labels is None:
                _md(new).pop("labels", None)
            else:
                _md(new)["labels"] = dict(labels)
        elif kind.status:
            if "status" in old:
                new["status"] = copy_obj(old["status"])
            else:
                new.pop("status", None)
        new["apiVersion"], new["kind"] = kind.api_version, kind.kind
        md = _md(new)
        for f in ("name", "uid", "creationTimestamp", "deletionTimestamp",
                  "deletionGracePeriodSeconds", "resourceVersion"):
            if f in omd:
                md[f] = omd[f]
            else:
                md.pop(f, None)
        if kind.namespaced:
            md["namespace"] = omd["namespace"]
        for f in ("managedFields", "selfLink"):
            md.pop(f, None)
        if "generation" in omd:
            md["generation"] = omd["generation"]
        if omd.get("deletionTimestamp"):
            added = [f for f in md.get("finalizers") or [] if f not in (omd.get("finalizers")
                                                                         or [])]
            if added:
                raise invalid(kind, omd["name"], [
                    ("metadata.finalizers", "FieldValueForbidden",
                     "Forbidden: no new finalizers can be added if the object is being deleted, "
                     f"found new finalizers {json.dumps(added)}")])
        warnings = self._admit(kind, new, old, status_only=(sub == "status"), strict=strict) \
            if kind.plural != "customresourcedefinitions" else []
        if kind.generation and kindmod.spec_of(kind, new) != kindmod.spec_of(kind, old):
            md["generation"] = omd.get("generation", 0) + 1
        return new, warnings

    def _finish_update(self, kind, old, new, dry_run=False, internal=False) -> Entry:
        if new == old:  # a no-op update writes nothing and keeps the resourceVersion
            self.counters["noopWrites"] += 1
            return self.objects[kind.plural][self.key(kind, old["metadata"].get("namespace"),
                                                      old["metadata"]["name"])]
        if dry_run:
            return Entry(new, dumps(new))
        md = new["metadata"]
        if md.get("deletionTimestamp") and not md.get("finalizers"):
            if kind.plural == "namespaces" and (new.get("spec") or {}).get("finalizers"):
                return self._commit(kind, MODIFIED, new, old, internal)
            return self._commit(kind, DELETED, new, old, internal)
        return self._commit(kind, MODIFIED, new, old, internal)

    def update(self, kind, ns, name, body, sub=None, dry_run=False, strict=False):
        if kind.read_only:
            raise ApiError(405, "MethodNotAllowed", f"update is not supported on "
                           f"{kind.group_resource} by the kinfer test API server")
        if sub == "scale":
            if not isinstance(body, dict) or body.get("kind", "Scale") != "Scale" or \
                    not isinstance(body.get("metadata", {}), dict):
                raise bad_request("the body of a scale update must be an autoscaling/v1 Scale")
        else:
            self._check_type(kind, body)
        with self.lock:
            old = self.get(kind, ns, name).obj
            self._check_identity(kind, old, body)
            rv = _md(body).get("resourceVersion")
            if rv:
                if rv != old["metadata"]["resourceVersion"]:
                    raise conflict(kind, name)
            elif not kind.unconditional_update:
                raise invalid(kind, name, [("metadata.resourceVersion", "FieldValueInvalid",
                                            "Invalid value: 0: must be specified for an update")])
            if sub == "scale":
                return self._scale_write(kind, old, body, dry_run), []
            new, warnings = self._prepare_update(kind, old, body, sub, strict)
            return self._finish_update(kind, old, new, dry_run), warnings

    def patch(self, kind, ns, name, ptype, pbody, sub=None, dry_run=False, strict=False):
        if kind.read_only:
            raise ApiError(405, "MethodNotAllowed", f"patch is not supported on "
                           f"{kind.group_resource} by the kinfer test API server")
        with self.lock:
            old = self.get(kind, ns, name).obj
            current = self.scale_of(kind, old) if sub == "scale" else copy_obj(old)
            try:
                if ptype == "merge":
                    if not isinstance(pbody, dict):
                        raise patching.PatchError("a merge patch must be a JSON object")
                    patched = patching.merge_patch(current, pbody)
                elif ptype == "json":
                    patched = patching.json_patch(current, pbody)
                else:
                    if not isinstance(pbody, dict):
                        raise patching.PatchError("a strategic merge patch must be a JSON object")
                    patched = patching.strategic_merge(current, pbody)
            except patching.PatchError as e:
                if e.invalid:
                    raise ApiError(422, "Invalid", f"the server rejected our request due to an "
                                   f"error in our request: {e}") from None
                raise bad_request(str(e)) from None
            if not isinstance(patched, dict):
                raise bad_request("the patch did not produce an object")
            rv = _md(patched).get("resourceVersion")
            if rv and rv != old["metadata"]["resourceVersion"]:
                raise conflict(kind, name)
            self._check_identity(kind, old, patched)
            if sub == "scale":
                return self._scale_write(kind, old, patched, dry_run), []
            patched.setdefault("apiVersion", kind.api_version)
            patched.setdefault("kind", kind.kind)
            self._check_type(kind, patched)
            new, warnings = self._prepare_update(kind, old, patched, sub, strict)
            return self._finish_update(kind, old, new, dry_run), warnings

    # ---- scale ----------------------------------------------------------------------------------

    def scale_of(self, kind, obj) -> dict:
        md = obj["metadata"]
        paths = kind.scale
        spec_r = _get_path(obj, paths["specReplicasPath"])
        stat_r = _get_path(obj, paths["statusReplicasPath"])
        if paths.get("labelSelectorPath"):
            sel = _get_path(obj, paths["labelSelectorPath"])
        else:
            sel = selection.format_label_selector((obj.get("spec") or {}).get("selector"))
        status = {"replicas": stat_r if isinstance(stat_r, int) else 0}
        if sel:
            status["selector"] = sel
        return {"kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {k: md[k] for k in ("name", "namespace", "uid", "resourceVersion",
                                                 "creationTimestamp") if k in md},
                "spec": {"replicas": spec_r if isinstance(spec_r, int) else 0},
                "status": status}

    def _scale_write(self, kind, old, scale, dry_run) -> Entry:
        replicas = (scale.get("spec") or {}).get("replicas")
        name = old["metadata"]["name"]
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise ApiError(422, "Invalid", f'Scale.autoscaling "{name}" is invalid: '
                           f"spec.replicas: Invalid value: {json.dumps(replicas)}: must be "
                           "greater than or equal to 0",
                           {"name": name, "group": "autoscaling", "kind": "Scale",
                            "causes": [{"reason": "FieldValueInvalid", "field": "spec.replicas",
                                        "message": "must be greater than or equal to 0"}]})
        rv = _md(scale).get("resourceVersion")
        if rv and rv != old["metadata"]["resourceVersion"]:
            raise conflict(kind, name)
        new = copy_obj(old)
        _set_path(new, kind.scale["specReplicasPath"], replicas)
        new, _ = self._prepare_update(kind, old, new, None)
        entry = self._finish_update(kind, old, new, dry_run)
        return Entry(None, dumps(self.scale_of(kind, entry.obj)))

    # ---- delete ---------------------------------------------------------------------------------

    def delete(self, kind, ns, name, propagation=None, preconditions=None, dry_run=False):
        """Returns (http code, body bytes)."""
        if kind.read_only:
            raise ApiError(405, "MethodNotAllowed", f"delete is not supported on "
                           f"{kind.group_resource} by the kinfer test API server")
        propagation = propagation or "Background"
        if propagation not in ("Background", "Foreground", "Orphan"):
            raise invalid(kind, name, [("propagationPolicy", "FieldValueNotSupported",
                                        f'Unsupported value: "{propagation}": supported values: '
                                        '"Foreground", "Background", "Orphan"')])
        with self.lock:
            old = self.get(kind, ns, name).obj
            omd = old["metadata"]
            pre = preconditions or {}
            if pre.get("uid") and pre["uid"] != omd["uid"]:
                raise conflict(kind, name, f"Precondition failed: UID in precondition: "
                                           f"{pre['uid']}, UID in object meta: {omd['uid']}")
            if pre.get("resourceVersion") and pre["resourceVersion"] != omd["resourceVersion"]:
                raise conflict(kind, name, f"Precondition failed: ResourceVersion in "
                                           f"precondition: {pre['resourceVersion']}, "
                                           f"ResourceVersion in object meta: "
                                           f"{omd['resourceVersion']}")
            entry, gone = self._delete(kind, old, propagation, dry_run)
            if gone and not kind.return_deleted:
                return 200, dumps({"kind": "Status", "apiVersion": "v1", "metadata": {},
                                   "status": "Success",
                                   "details": {"name": name, "group": kind.group,
                                               "kind": kind.plural, "uid": omd["uid"]}})
            return 200, entry.data

    def _delete(self, kind, old, propagation="Background", dry_run=False, internal=False):
        """Deletes now, or marks for deletion when finalizers remain. Returns (Entry, gone)."""
        omd = old["metadata"]
        key = self.key(kind, omd.get("namespace"), omd["name"])
        if omd.get("deletionTimestamp"):
            return self.objects[kind.plural][key], False
        fins = list(omd.get("finalizers") or [])
        if propagation == "Foreground" and "foregroundDeletion" not in fins:
            fins.append("foregroundDeletion")
        elif propagation == "Orphan" and "orphan" not in fins:
            fins.append("orphan")
        terminating = kind.plural == "namespaces" or bool(fins)
        new = copy_obj(old)
        if terminating:
            md = new["metadata"]
            md["deletionTimestamp"] = now_rfc3339()
            md["deletionGracePeriodSeconds"] = 0
            if fins:
                md["finalizers"] = fins
            if "generation" in md:
                md["generation"] += 1
            if kind.plural == "namespaces":
                new.setdefault("status", {})["phase"] = "Terminating"
            if dry_run:
                return Entry(new, dumps(new)), False
            return self._commit(kind, MODIFIED, new, old, internal), False
        if dry_run:
            return self.objects[kind.plural][key], True
        return self._commit(kind, DELETED, new, old, internal), True

    def delete_collection(self, kind, ns, label_reqs, field_reqs, propagation=None,
                          dry_run=False):
        with self.lock:
            items = []
            for _, e in self.select(kind, ns, label_reqs, field_reqs):
                entry, _ = self._delete(kind, e.obj, propagation or "Background", dry_run)
                items.append(entry.data)
            return items

    # ---- the controllers (run by the Worker, lock held) -----------------------------------------

    def _internal_update(self, kind, old, new):
        self._finish_update(kind, old, new, internal=True)

    def process(self, item):
        op = item[0]
        if op == "gc-owner":
            uid = item[1]
            for ref in sorted(self.dependents.get(uid, ())):
                self._gc_dependent(ref)
        elif op == "gc-check":
            self._gc_dependent((item[1], *item[2]))
        elif op == "foreground":
            owner = self._by_uid(item[1])
            if owner is None or "foregroundDeletion" not in (
                    owner.obj["metadata"].get("finalizers") or []):
                return
            deps = sorted(self.dependents.get(item[1], ()))
            for plural, ns, name in deps:
                e = self.objects[plural].get((ns, name))
                if e is not None:
                    self._delete(self.kinds[plural], e.obj, "Foreground", internal=True)
            if not self.dependents.get(item[1]):
                self._drop_finalizer(owner.obj, "foregroundDeletion")
        elif op == "orphan":
            owner = self._by_uid(item[1])
            if owner is None or "orphan" not in (owner.obj["metadata"].get("finalizers") or []):
                return
            for plural, ns, name in sorted(self.dependents.get(item[1], ())):
                e = self.objects[plural].get((ns, name))
                if e is not None:
                    new = copy_obj(e.obj)
                    refs = [r for r in new["metadata"]["ownerReferences"]
                            if r.get("uid") != item[1]]
                    if refs:
                        new["metadata"]["ownerReferences"] = refs
                    else:
                        del new["metadata"]["ownerReferences"]
                    self._internal_update(self.kinds[plural], e.obj, new)
            self._drop_finalizer(owner.obj, "orphan")
        elif op == "namespace":
            nse = self.objects["namespaces"].get(("", item[1]))
            if nse is None or not nse.obj["metadata"].get("deletionTimestamp"):
                return
            namespaced = [k for k in self.kinds.values() if k.namespaced]
            for kind in namespaced:
                for (ns, _), e in list(self.objects[kind.plural].items()):
                    if ns == item[1]:
                        self._delete(kind, e.obj, "Background", internal=True)
            if any(ns == item[1] for k in namespaced for (ns, _) in self.objects[k.plural]):
                return  # objects with finalizers remain; their deletion brings us back
            old = nse.obj
            new = copy_obj(old)
            new.get("spec", {}).pop("finalizers", None)
            if not new["metadata"].get("finalizers"):
                self._commit(self.kinds["namespaces"], DELETED, new, old, internal=True)
            else:
                self._internal_update(self.kinds["namespaces"], old, new)
        elif op == "deployment":
            self._sync_deployment(item[1])

    def _drop_finalizer(self, obj, fin):
        kind = self.by_gvk[(obj["apiVersion"], obj["kind"])]
        new = copy_obj(obj)
        fins = [f for f in new["metadata"].get("finalizers") or [] if f != fin]
        if fins:
            new["metadata"]["finalizers"] = fins
        else:
            new["metadata"].pop("finalizers", None)
        self._internal_update(kind, obj, new)

    def _owner_alive(self, dep_md, ref) -> bool:
        owner = self._by_uid(ref.get("uid"))
        if owner is None:
            return False
        ons = owner.obj["metadata"].get("namespace")
        return ons is None or ons == dep_md.get("namespace")

    def _gc_dependent(self, ref):
        plural, ns, name = ref
        e = self.objects[plural].get((ns, name))
        if e is None:
            return
        md = e.obj["metadata"]
        refs = md.get("ownerReferences") or []
        alive = [r for r in refs if self._owner_alive(md, r)]
        if not refs or len(alive) == len(refs):
            return
        kind = self.kinds[plural]
        if not alive:
            self._delete(kind, e.obj, "Background", internal=True)
        else:
            new = copy_obj(e.obj)
            new["metadata"]["ownerReferences"] = alive
            self._internal_update(kind, e.obj, new)

    def _sync_deployment(self, key):
        kind = self.kinds["deployments"]
        e = self.objects["deployments"].get(key)
        if e is None or e.obj["metadata"].get("deletionTimestamp"):
            return
        old = e.obj
        new = copy_obj(old)
        md, spec = new["metadata"], new.get("spec") or {}
        n = spec.get("replicas", 1)
        tmpl = json.dumps(spec.get("template"), sort_keys=True)
        seen_tmpl, rev = self.revisions.get(md["uid"], (None, 0))
        if tmpl != seen_tmpl:
            rev += 1
            self.revisions[md["uid"]] = (tmpl, rev)
        md.setdefault("annotations", {})["deployment.kubernetes.io/revision"] = str(rev)
        old_conds = {c["type"]: c for c in (old.get("status") or {}).get("conditions") or []}
        now = now_rfc3339()

        def cond(t, reason, message):
            prev = old_conds.get(t)
            since = prev["lastTransitionTime"] if prev and prev["status"] == "True" else now
            return {"type": t, "status": "True", "lastUpdateTime": now,
                    "lastTransitionTime": since, "reason": reason, "message": message}
        status = {"observedGeneration": md.get("generation", 1), "replicas": n,
                  "updatedReplicas": n, "readyReplicas": n, "availableReplicas": n,
                  "conditions": [
                      cond("Available", "MinimumReplicasAvailable",
                           "Deployment has minimum availability."),
                      cond("Progressing", "NewReplicaSetAvailable",
                           f'ReplicaSet "{md["name"]}-{rev:x}" has successfully progressed.')]}
        for f in ("replicas", "updatedReplicas", "readyReplicas", "availableReplicas"):
            if not status[f]:
                del status[f]
        new["status"] = status
        self._internal_update(kind, old, new)


class Worker:
    """Runs Store.process(item) for due items on one thread, in due-time order."""

    def __init__(self, store: Store):
        self.store = store
        self.cond = threading.Condition()
        self.heap: list = []
        self.seq = itertools.count()
        self.pending: set = set()
        self.busy = False
        self.thread = threading.Thread(target=self._run, name="controllers", daemon=True)
        self.thread.start()

    def submit(self, item, delay: float = 0.0):
        with self.cond:
            if item in self.pending:
                return
            self.pending.add(item)
            heapq.heappush(self.heap, (time.monotonic() + delay, next(self.seq), item))
            self.cond.notify()

    def clear(self):
        with self.cond:
            self.heap.clear()
            self.pending.clear()

    def idle(self) -> bool:
        with self.cond:
            return not self.heap and not self.busy

    def _run(self):
        while True:
            with self.cond:
                while not self.heap or self.heap[0][0] > time.monotonic():
                    self.cond.wait(None if not self.heap else
                                   max(0.0, self.heap[0][0] - time.monotonic()))
                _, _, item = heapq.heappop(self.heap)
                self.pending.discard(item)
                self.busy = True
            try:
                with self.store.lock:
                    self.store.process(item)
            except Exception as e:  # noqa: BLE001  (a controller bug must not stop the worker)
                import sys
                print(f"kinfer-test-apiserver: controller {item!r}: {e!r}", file=sys.stderr)
            finally:
                with self.cond:
                    self.busy = False
