"""Label and field selectors: the query-string forms and metav1.LabelSelector objects."""
from __future__ import annotations

import re


class SelectorError(ValueError):
    pass


_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                  r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def _split_top(s: str) -> list[str]:
    """Splits on commas outside parentheses."""
    parts, depth, cur = [], 0, []
    for ch in s:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise SelectorError(f"unbalanced ')' in {s!r}")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise SelectorError(f"unbalanced '(' in {s!r}")
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def _check_key(key: str) -> str:
    if not _KEY.match(key) or len(key.split("/")[-1]) > 63:
        raise SelectorError(f"invalid label key {key!r}")
    return key


def _check_value(v: str) -> str:
    if len(v) > 63 or not _VALUE.match(v):
        raise SelectorError(f"invalid label value {v!r}")
    return v


def parse_label_selector(s: str | None) -> list[tuple[str, str, tuple]]:
    """'a=b,c!=d,e in (x,y),f notin (z),g,!h' -> [(key, op, values)].

    ops: '=' '!=' 'in' 'notin' 'exists' '!' ('=' and '==' are the same).
    """
    if not s:
        return []
    reqs = []
    for part in _split_top(s):
        m = re.fullmatch(r"(\S+)\s+(in|notin)\s*\((.*)\)", part)
        if m:
            values = tuple(_check_value(v.strip()) for v in m.group(3).split(",") if v.strip())
            if not values:
                raise SelectorError(f"{part!r}: for 'in', 'notin' operators, values set can't "
                                    "be empty")
            reqs.append((_check_key(m.group(1)), m.group(2), values))
            continue
        m = re.fullmatch(r"([^=!\s]+)\s*(==|=|!=)\s*(\S*)", part)
        if m:
            op = "!=" if m.group(2) == "!=" else "="
            reqs.append((_check_key(m.group(1)), op, (_check_value(m.group(3)),)))
            continue
        m = re.fullmatch(r"!\s*(\S+)", part)
        if m:
            reqs.append((_check_key(m.group(1)), "!", ()))
            continue
        if re.fullmatch(r"\S+", part):
            reqs.append((_check_key(part), "exists", ()))
            continue
        raise SelectorError(f"unable to parse requirement: {part!r}")
    return reqs


def labels_match(reqs, labels: dict | None) -> bool:
    labels = labels or {}
    for key, op, values in reqs:
        has = key in labels
        v = labels.get(key)
        if op == "=" and not (has and v == values[0]):
            return False
        if op == "!=" and has and v == values[0]:
            return False
        if op == "in" and not (has and v in values):
            return False
        if op == "notin" and has and v in values:
            return False
        if op == "exists" and not has:
            return False
        if op == "!" and has:
            return False
    return True


def label_selector_from_object(sel: dict | None) -> list[tuple[str, str, tuple]]:
    """metav1.LabelSelector -> requirements. An empty selector matches everything."""
    if sel is None:
        return []
    reqs = [(k, "=", (v,)) for k, v in sorted((sel.get("matchLabels") or {}).items())]
    for e in sel.get("matchExpressions") or []:
        op = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}.get(
            e.get("operator"))
        if op is None:
            raise SelectorError(f"{e.get('operator')!r} is not a valid label selector operator")
        values = tuple(e.get("values") or ())
        if op in ("in", "notin") and not values:
            raise SelectorError("values: must be specified when `operator` is 'In' or 'NotIn'")
        if op in ("exists", "!") and values:
            raise SelectorError("values: may not be specified when `operator` is 'Exists' or "
                                "'DoesNotExist'")
        reqs.append((e.get("key", ""), op, values))
    return reqs


def format_label_selector(sel: dict | None) -> str:
    """metav1.FormatLabelSelector: the string form, requirements sorted by key."""
    if sel is None:
        return "<none>"
    reqs = label_selector_from_object(sel)
    out = []
    for key, op, values in sorted(reqs, key=lambda r: r[0]):
        if op == "=":
            out.append(f"{key}={values[0]}")
        elif op in ("in", "notin"):
            out.append(f"{key} {op} ({','.join(sorted(values))})")
        elif op == "exists":
            out.append(key)
        else:
            out.append(f"!{key}")
    return ",".join(out)


def parse_field_selector(s: str | None, allowed: set[str]) -> list[tuple[str, str, str]]:
    """'metadata.name=x,metadata.namespace!=y' -> [(field, op, value)]; unknown fields raise."""
    if not s:
        return []
    out = []
    for part in _split_top(s):
        m = re.fullmatch(r"([^=!]+)(==|=|!=)(.*)", part)
        if not m:
            raise SelectorError(f"invalid selector: {part!r}; can't understand {part!r}")
        field, op, value = m.group(1).strip(), m.group(2), m.group(3).strip()
        if field not in allowed:
            raise SelectorError(f'field label not supported: {field}')
        out.append((field, "!=" if op == "!=" else "=", value))
    return out


def field_value(obj: dict, field: str) -> str:
    node = obj
    for part in field.split("."):
        if not isinstance(node, dict):
            return ""
        node = node.get(part)
    if node is None:
        return ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)


def fields_match(reqs, obj: dict) -> bool:
    for field, op, value in reqs:
        v = field_value(obj, field)
        if (op == "=") != (v == value):
            return False
    return True
