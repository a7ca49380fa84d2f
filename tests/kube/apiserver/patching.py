"""PATCH bodies: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and a strategic-merge subset.

Strategic merge patch knows the list merge keys of the built-in kinds the operator writes
(containers by name, ports by containerPort or port, env by name, volumes by name, conditions by
type, ownerReferences by uid, ...), the `$patch: delete|replace` directives, and
`$deleteFromPrimitiveList/<field>`; `$setElementOrder/<field>` and `$retainKeys` are accepted and
ignored. Any list not in the table is replaced, as in a merge patch. Custom resources reject it
(415), as the real API server does.
"""
from __future__ import annotations

import copy


class PatchError(ValueError):
    """A malformed patch (400) or a failed JSON-patch operation (422 when `invalid`)."""

    def __init__(self, message: str, invalid: bool = False):
        super().__init__(message)
        self.invalid = invalid


def merge_patch(target, patch):
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _walk(doc, pointer: str):
    """Returns (parent, last token) for a JSON pointer."""
    if pointer == "":
        return None, None
    if not pointer.startswith("/"):
        raise PatchError(f"invalid JSON pointer {pointer!r}")
    tokens = [_unescape(t) for t in pointer[1:].split("/")]
    node = doc
    for t in tokens[:-1]:
        try:
            node = node[int(t)] if isinstance(node, list) else node[t]
        except (KeyError, IndexError, ValueError, TypeError):
            raise PatchError(f"doc is missing path: {pointer!r}", invalid=True) from None
    return node, tokens[-1]


def _get(doc, pointer):
    parent, key = _walk(doc, pointer)
    if parent is None:
        return doc
    try:
        return parent[int(key)] if isinstance(parent, list) else parent[key]
    except (KeyError, IndexError, ValueError, TypeError):
        raise PatchError(f"doc is missing path: {pointer!r}", invalid=True) from None


def _add(doc, pointer, value):
    parent, key = _walk(doc, pointer)
    if parent is None:
        return value
    if isinstance(parent, list):
        if key == "-":
            parent.append(value)
        else:
            try:
                i = int(key)
            except ValueError:
                raise PatchError(f"invalid index {key!r}") from None
            if i < 0 or i > len(parent):
                raise PatchError(f"index out of range: {pointer!r}", invalid=True)
            parent.insert(i, value)
    elif isinstance(parent, dict):
        parent[key] = value
    else:
        raise PatchError(f"cannot add at {pointer!r}", invalid=True)
    return doc


def _remove(doc, pointer):
    parent, key = _walk(doc, pointer)
    if parent is None:
        raise PatchError("cannot remove the whole document")
    try:
        if isinstance(parent, list):
            return parent.pop(int(key))
        return parent.pop(key)
    except (KeyError, IndexError, ValueError, TypeError, AttributeError):
        raise PatchError(f"Unable to remove nonexistent key: {pointer!r}: missing value",
                         invalid=True) from None


def json_patch(doc, ops):
    if not isinstance(ops, list):
        raise PatchError("a JSON patch is a list of operations")
    doc = copy.deepcopy(doc)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"invalid JSON patch operation {op!r}")
        kind, path = op["op"], op["path"]
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "replace":
            _get(doc, path)  # must exist
            parent, key = _walk(doc, path)
            if parent is None:
                doc = copy.deepcopy(op.get("value"))
            elif isinstance(parent, list):
                parent[int(key)] = copy.deepcopy(op.get("value"))
            else:
                parent[key] = copy.deepcopy(op.get("value"))
        elif kind == "move":
            value = _remove(doc, op["from"])
            doc = _add(doc, path, value)
        elif kind == "copy":
            doc = _add(doc, path, copy.deepcopy(_get(doc, op["from"])))
        elif kind == "test":
            if _get(doc, path) != op.get("value"):
                raise PatchError(f"testing value {path} failed", invalid=True)
        else:
            raise PatchError(f"unknown JSON patch operation {kind!r}")
    return doc


# field name -> merge key (None: a primitive list merged as a set, e.g. finalizers)
_MERGE_KEYS = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name",
    "volumes": "name", "env": "name", "volumeMounts": "mountPath", "volumeDevices": "devicePath",
    "imagePullSecrets": "name", "conditions": "type", "ownerReferences": "uid",
    "hostAliases": "ip", "topologySpreadConstraints": "topologyKey", "resourceClaims": "name",
    "finalizers": None,
}


def _merge_key(field: str, items: list) -> str | None | bool:
    if field == "ports":
        probe = next((i for i in items if isinstance(i, dict)), {})
        return "containerPort" if "containerPort" in probe else "port"
    return _MERGE_KEYS.get(field, False)  # False: replace the list


def strategic_merge(target, patch):
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key in ("$retainKeys", "$patch"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            if isinstance(out.get(field), list):
                out[field] = [x for x in out[field] if x not in value]
            continue
        if value is None:
            out.pop(key, None)
        elif isinstance(value, list):
            mk = _merge_key(key, value + (out.get(key) or []))
            cur = out.get(key)
            if mk is False or not isinstance(cur, list):
                out[key] = [strategic_merge(None, v) if isinstance(v, dict) else v
                            for v in value if not (isinstance(v, dict) and v.get("$patch"))]
            elif mk is None:
                out[key] = cur + [v for v in value if v not in cur]
            else:
                merged = list(cur)
                for item in value:
                    if not isinstance(item, dict):
                        continue
                    idx = next((i for i, c in enumerate(merged)
                                if isinstance(c, dict) and c.get(mk) == item.get(mk)), None)
                    if item.get("$patch") == "delete":
                        if idx is not None:
                            merged.pop(idx)
                    elif idx is None:
                        merged.append(strategic_merge(None, item))
                    else:
                        merged[idx] = strategic_merge(merged[idx], item)
                out[key] = merged
        else:
            r = strategic_merge(out.get(key), value)
            if r is None:
                out.pop(key, None)
            else:
                out[key] = r
    return out
