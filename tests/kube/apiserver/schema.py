"""OpenAPI v3 structural schema handling for custom resources: defaulting, pruning and validation.

This is the one place that knows the CRD schema rules: the CEL subset (cel_parse, cel_eval),
defaulting and type checks are also used by tests/python/test_manifests.py, which checks the CRD
and its samples without a server. Its validator walks the same way but reports Kubernetes-style
field causes (field, reason, message) the way the real API server words them, and unknown fields
are pruned (with a warning) rather than rejected, as the API server does by default.
"""
from __future__ import annotations

import copy
import functools
import json
import re

class CelError(Exception):
    pass


_CEL_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<float>\d+\.\d+)
  | (?P<int>\d+)
  | (?P<str>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
  | (?P<id>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>&&|\|\||==|!=|<=|>=|[<>!?:.,()\[\]+\-*/%])
""", re.X)

_MACROS = {"exists", "all", "exists_one", "map", "filter"}


def cel_parse(src: str):
    toks = []
    pos = 0
    while pos < len(src):
        m = _CEL_TOKEN.match(src, pos)
        if not m:
            raise CelError(f"cannot parse {src[pos:]!r}")
        if m.lastgroup != "ws":
            toks.append((m.lastgroup, m.group()))
        pos = m.end()
    toks.append(("eof", ""))
    i = 0

    def peek():
        return toks[i][1] if toks[i][0] in ("op", "id") else None

    def take(expected=None):
        nonlocal i
        kind, text = toks[i]
        if expected is not None and text != expected:
            raise CelError(f"expected {expected!r}, got {text!r} in {src!r}")
        i += 1
        return kind, text

    def expr():
        cond = or_()
        if peek() == "?":
            take("?")
            a = expr()
            take(":")
            b = expr()
            return ("?:", cond, a, b)
        return cond

    def or_():
        node = and_()
        while peek() == "||":
            take()
            node = ("||", node, and_())
        return node

    def and_():
        node = rel()
        while peek() == "&&":
            take()
            node = ("&&", node, rel())
        return node

    def rel():
        node = add()
        if peek() in ("==", "!=", "<", "<=", ">", ">=", "in"):
            op = take()[1]
            node = (op, node, add())
        return node

    def add():
        node = mul()
        while peek() in ("+", "-"):
            op = take()[1]
            node = (op, node, mul())
        return node

    def mul():
        node = unary()
        while peek() in ("*", "/", "%"):
            op = take()[1]
            node = (op, node, unary())
        return node

    def unary():
        if peek() == "!":
            take()
            return ("!", unary())
        if peek() == "-":
            take()
            return ("neg", unary())
        return member()

    def args():
        out = []
        take("(")
        if peek() != ")":
            out.append(expr())
            while peek() == ",":
                take()
                out.append(expr())
        take(")")
        return out

    def member():
        node = primary()
        while True:
            if peek() == ".":
                take()
                kind, name = take()
                if kind != "id":
                    raise CelError(f"expected a field name in {src!r}")
                if peek() == "(":
                    node = ("call", node, name, args())
                else:
                    node = ("select", node, name)
            elif peek() == "[":
                take()
                idx = expr()
                take("]")
                node = ("index", node, idx)
            else:
                return node

    def primary():
        kind, text = take()
        if kind == "int":
            return ("lit", int(text))
        if kind == "float":
            return ("lit", float(text))
        if kind == "str":
            body = text[1:-1]
            return ("lit", re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1),
                                                                             m.group(1)), body))
        if kind == "id":
            if text in ("true", "false"):
                return ("lit", text == "true")
            if text == "null":
                return ("lit", None)
            if peek() == "(":
                return ("func", text, args())
            return ("ident", text)
        if text == "(":
            node = expr()
            take(")")
            return node
        if text == "[":
            items = []
            if peek() != "]":
                items.append(expr())
                while peek() == ",":
                    take()
                    items.append(expr())
            take("]")
            return ("list", items)
        raise CelError(f"unexpected {text!r} in {src!r}")

    node = expr()
    if toks[i][0] != "eof":
        raise CelError(f"trailing {toks[i][1]!r} in {src!r}")
    return node


def cel_eval(node, env: dict):
    op = node[0]
    if op == "lit":
        return node[1]
    if op == "ident":
        if node[1] not in env:
            raise CelError(f"undeclared reference to {node[1]!r}")
        return env[node[1]]
    if op == "list":
        return [cel_eval(n, env) for n in node[1]]
    if op == "select":
        target = cel_eval(node[1], env)
        if not isinstance(target, dict):
            raise CelError(f"cannot select {node[2]!r} from {type(target).__name__}")
        if node[2] not in target:
            raise CelError(f"no such key: {node[2]}")
        return target[node[2]]
    if op == "index":
        target, idx = cel_eval(node[1], env), cel_eval(node[2], env)
        try:
            return target[idx]
        except (KeyError, IndexError, TypeError) as e:
            raise CelError(f"bad index {idx!r}") from e
    if op in ("&&", "||"):
        want = op == "||"  # the value that decides: true for ||, false for &&
        err = None
        for side in (node[1], node[2]):
            try:
                v = cel_eval(side, env)
            except CelError as e:
                err = e
                continue
            if not isinstance(v, bool):
                raise CelError(f"{op} of a non-bool")
            if v == want:
                return want
        if err:
            raise err
        return not want
    if op == "!":
        v = cel_eval(node[1], env)
        if not isinstance(v, bool):
            raise CelError("! of a non-bool")
        return not v
    if op == "neg":
        return -cel_eval(node[1], env)
    if op == "?:":
        return cel_eval(node[2] if cel_eval(node[1], env) else node[3], env)
    if op in ("==", "!=", "<", "<=", ">", ">=", "in", "+", "-", "*", "/", "%"):
        a, b = cel_eval(node[1], env), cel_eval(node[2], env)
        if op == "in":
            return a in b
        if op in ("<", "<=", ">", ">=", "-", "*", "/", "%") and (
                isinstance(a, bool) or isinstance(b, bool)):
            raise CelError(f"no such overload: {op} on bool")
        return {"==": lambda: a == b, "!=": lambda: a != b, "<": lambda: a < b,
                "<=": lambda: a <= b, ">": lambda: a > b, ">=": lambda: a >= b,
                "+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b,
                "/": lambda: a // b if isinstance(a, int) and isinstance(b, int) else a / b,
                "%": lambda: a % b}[op]()
    if op == "func":
        name, args = node[1], node[2]
        if name == "has":
            (sel,) = args
            if sel[0] != "select":
                raise CelError("has() needs a field selection")
            target = cel_eval(sel[1], env)
            return isinstance(target, dict) and sel[2] in target
        vals = [cel_eval(a, env) for a in args]
        if name == "size":
            return len(vals[0])
        if name == "int":
            return int(vals[0])
        if name == "double":
            return float(vals[0])
        if name == "string":
            return str(vals[0])
        raise CelError(f"unknown function {name}")
    if op == "call":
        target_node, name, args = node[1], node[2], node[3]
        if name in _MACROS:
            var = args[0]
            if var[0] != "ident":
                raise CelError(f"{name}() needs a variable")
            items = cel_eval(target_node, env)
            seq = list(items.keys()) if isinstance(items, dict) else list(items)
            results = [cel_eval(args[-1], {**env, var[1]: x}) for x in seq]
            if name == "exists":
                return any(results)
            if name == "all":
                return all(results)
            if name == "exists_one":
                return sum(1 for r in results if r) == 1
            if name == "map":
                return results
            return [x for x, r in zip(seq, results) if r]
        target = cel_eval(target_node, env)
        vals = [cel_eval(a, env) for a in args]
        if name == "size":
            return len(target)
        if name in ("startsWith", "endsWith", "contains", "matches", "find") and not isinstance(
                target, str):
            raise CelError(f"{name} on a non-string")
        if name == "startsWith":
            return target.startswith(vals[0])
        if name == "endsWith":
            return target.endswith(vals[0])
        if name == "contains":
            return vals[0] in target
        if name == "matches":
            return re.search(vals[0], target) is not None
        if name == "find":  # Kubernetes' regex library: the first match, or ""
            m = re.search(vals[0], target)
            return m.group() if m else ""
        raise CelError(f"unknown method {name}")
    raise CelError(f"bad node {op}")



@functools.lru_cache(maxsize=None)
def cel_compile(src: str):
    return cel_parse(src)


# ==== defaulting, pruning, validation ============================================================

_DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")


def apply_defaults(obj, schema):
    """Fills defaults top-down, like the API server: a defaulted object gets its own defaults."""
    if isinstance(obj, dict):
        props = schema.get("properties", {})
        for key, sub in props.items():
            if key not in obj and "default" in sub:
                obj[key] = copy.deepcopy(sub["default"])
        for key in list(obj):
            if key in props:
                obj[key] = apply_defaults(obj[key], props[key])
            elif isinstance(schema.get("additionalProperties"), dict):
                obj[key] = apply_defaults(obj[key], schema["additionalProperties"])
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        return [apply_defaults(x, schema["items"]) for x in obj]
    return obj


def prune(obj, schema, path="", root=True) -> list[str]:
    """Drops fields the structural schema does not declare (in place); returns their paths.

    metadata, apiVersion and kind at the root are the server's business, not the schema's.
    """
    dropped = []
    if isinstance(obj, dict):
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            return dropped
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key in list(obj):
            child = f"{path}.{key}" if path else key
            if root and key in ("metadata", "apiVersion", "kind"):
                continue
            if key in props:
                dropped += prune(obj[key], props[key], child, False)
            elif isinstance(extra, dict):
                dropped += prune(obj[key], extra, child, False)
            elif extra is True:
                continue
            else:
                del obj[key]
                dropped.append(child)
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(obj):
            dropped += prune(item, schema["items"], f"{path}[{i}]", False)
    return dropped


def _type_ok(value, schema) -> bool:
    if schema.get("x-kubernetes-int-or-string"):
        return (isinstance(value, int) and not isinstance(value, bool)) or isinstance(value, str)
    t = schema.get("type")
    if t is None:
        return True
    return {
        "object": lambda v: isinstance(v, dict),
        "array": lambda v: isinstance(v, list),
        "string": lambda v: isinstance(v, str),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        "boolean": lambda v: isinstance(v, bool),
    }[t](value)


def _show(value) -> str:
    """A value as the API server prints it in a cause message."""
    if isinstance(value, (dict, list)):
        return f'"{"object" if isinstance(value, dict) else "array"}"'
    if value is None:
        return '"null"'
    return json.dumps(value)


def _type_name(value) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


def validate(value, schema, path="") -> list[tuple[str, str, str]]:
    """Causes as (field, reason, message), the reasons being metav1.CauseType values."""
    where = path or "<root>"
    if value is None:
        if schema.get("nullable"):
            return []
        want = schema.get("type", "object")
        return [(where, "FieldValueTypeInvalid",
                 f'Invalid value: "null": {where} in body must be of type {want}: "null"')]
    if not _type_ok(value, schema):
        want = "integer or string" if schema.get("x-kubernetes-int-or-string") else schema["type"]
        return [(where, "FieldValueTypeInvalid",
                 f'Invalid value: "{_type_name(value)}": {where} in body must be of type '
                 f'{want}: "{_type_name(value)}"')]
    errs = []
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(json.dumps(v) for v in schema["enum"])
        errs.append((where, "FieldValueNotSupported",
                     f"Unsupported value: {_show(value)}: supported values: {allowed}"))
    if isinstance(value, str):
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errs.append((where, "FieldValueInvalid",
                         f"Invalid value: {_show(value)}: {where} in body should match "
                         f"'{schema['pattern']}'"))
        if len(value) > schema.get("maxLength", float("inf")):
            errs.append((where, "FieldValueTooLong",
                         f"Too long: may not be more than {schema['maxLength']} bytes"))
        if len(value) < schema.get("minLength", 0):
            errs.append((where, "FieldValueInvalid",
                         f"Invalid value: {_show(value)}: {where} in body should be at least "
                         f"{schema['minLength']} chars long"))
        if schema.get("format") == "date-time" and not _DATE_TIME.match(value):
            errs.append((where, "FieldValueInvalid",
                         f"Invalid value: {_show(value)}: {where} in body must be of type "
                         f"date-time: {_show(value)}"))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema:
            lo = schema["minimum"]
            if value < lo or (schema.get("exclusiveMinimum") and value == lo):
                rel = "greater than" if schema.get("exclusiveMinimum") else \
                    "greater than or equal to"
                errs.append((where, "FieldValueInvalid",
                             f"Invalid value: {_show(value)}: {where} in body should be {rel} "
                             f"{lo}"))
        if "maximum" in schema:
            hi = schema["maximum"]
            if value > hi or (schema.get("exclusiveMaximum") and value == hi):
                rel = "less than" if schema.get("exclusiveMaximum") else "less than or equal to"
                errs.append((where, "FieldValueInvalid",
                             f"Invalid value: {_show(value)}: {where} in body should be {rel} "
                             f"{hi}"))
    if isinstance(value, dict) and not schema.get("x-kubernetes-preserve-unknown-fields"):
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key in schema.get("required", []):
            if key not in value:
                errs.append((f"{path}.{key}" if path else key, "FieldValueRequired",
                             "Required value"))
        if len(value) > schema.get("maxProperties", float("inf")):
            errs.append((where, "FieldValueTooMany",
                         f"Too many: {len(value)}: must have at most {schema['maxProperties']} "
                         "items"))
        for key, sub in value.items():
            child = f"{path}.{key}" if path else key
            if key in props:
                if not path and key == "metadata":
                    continue  # ObjectMeta is validated by the server, not the schema
                errs += validate(sub, props[key], child)
            elif isinstance(extra, dict):
                errs += validate(sub, extra, child)
            # unknown fields were pruned before validation
    if isinstance(value, list):
        if len(value) > schema.get("maxItems", float("inf")):
            errs.append((where, "FieldValueTooMany",
                         f"Too many: {len(value)}: must have at most {schema['maxItems']} items"))
        if len(value) < schema.get("minItems", 0):
            errs.append((where, "FieldValueInvalid",
                         f"Invalid value: {len(value)}: {where} in body should have at least "
                         f"{schema['minItems']} items"))
        for i, item in enumerate(value):
            errs += validate(item, schema.get("items", {}), f"{path}[{i}]")
        list_type = schema.get("x-kubernetes-list-type")
        if list_type == "set":
            seen = set()
            for i, v in enumerate(value):
                k = json.dumps(v, sort_keys=True)
                if k in seen:
                    errs.append((f"{path}[{i}]", "FieldValueDuplicate", f"Duplicate value: {k}"))
                seen.add(k)
        if list_type == "map":
            keys = schema["x-kubernetes-list-map-keys"]
            seen = set()
            for i, item in enumerate(value):
                if not isinstance(item, dict):
                    continue
                k = tuple(item.get(key) for key in keys)
                if k in seen:
                    shown = json.dumps({key: item.get(key) for key in keys}, sort_keys=True)
                    errs.append((f"{path}[{i}]", "FieldValueDuplicate",
                                 f"Duplicate value: {shown}"))
                seen.add(k)
    if not errs:
        for rule in schema.get("x-kubernetes-validations", []):
            try:
                ok = cel_eval(cel_compile(rule["rule"]), {"self": value})
            except CelError as e:
                errs.append((where, "FieldValueInvalid",
                             f"Invalid value: {_show(value)}: rule {rule['rule']!r} failed to "
                             f"evaluate: {e}"))
                continue
            if ok is not True:
                errs.append((where, "FieldValueInvalid",
                             f"Invalid value: {_show(value)}: "
                             f"{rule.get('message', 'failed rule: ' + rule['rule'])}"))
    return errs


class CrdSchema:
    """The served version of one CRD: what the server needs to admit a custom resource."""

    def __init__(self, crd: dict):
        self.crd = crd
        (self.version,) = [v for v in crd["spec"]["versions"] if v.get("storage")]
        self.schema = self.version["schema"]["openAPIV3Schema"]
        sub = self.version.get("subresources", {})
        self.has_status = "status" in sub
        self.scale = sub.get("scale")

    def admit(self, obj: dict, status_only: bool = False):
        """Defaults, prunes and validates obj in place; returns (causes, pruned paths)."""
        apply_defaults(obj, self.schema)
        pruned = prune(obj, self.schema)
        if status_only:
            causes = validate(obj["status"], self.schema["properties"]["status"], "status") \
                if "status" in obj and "status" in self.schema.get("properties", {}) else []
        else:
            causes = validate(obj, self.schema)
        return causes, pruned


def load_crd(path: str) -> dict:
    text = open(path, encoding="utf-8").read()
    if path.endswith(".json"):
        return json.loads(text)
    try:
        import yaml  # noqa: PLC0415  (PyYAML: in the venv and in Debian's python3-yaml)
    except ImportError as e:  # pragma: no cover
        raise SystemExit(f"reading {path} needs PyYAML; or pass the CRD as JSON ({e})") from e
    docs = [d for d in yaml.safe_load_all(text) if d]
    (crd,) = [d for d in docs if d.get("kind") == "CustomResourceDefinition"]
    return crd
