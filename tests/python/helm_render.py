"""A small renderer for the subset of Helm's Go templates that helm/kinfer uses.

No helm binary is installed on the machines that run the tests (tests/python/test_manifests.py
uses a real one as well when $KINFER_HELM or `helm` on PATH names one), so the chart is rendered
here and the output checked: valid YAML, the expected kinds, least-privilege RBAC, probes and ports
that line up. Supported, and nothing more (an unknown function or construct is an error, so a
template that leaves the subset fails loudly instead of rendering wrong):

  * text and actions, with the `{{-` / `-}}` whitespace trimming, and `{{/* comments */}}`
  * `define "name"` ... `end`, `include "name" DATA`
  * `if` / `else if` / `else` / `end`, `range PIPELINE` (also `range $v := ...`, `range $i, $v := ...`)
  * pipelines `a | f b` (the piped value is the last argument) and `( ... )` sub-expressions
  * operands `.`, `$`, `.A.b.c`, `$.A.b`, `$var`, "strings", numbers, true / false / nil
  * functions: include, default, quote, squote, toYaml, nindent, indent, trunc, trimSuffix,
    printf (%s %d %v), join, not, and, or, eq, ne, gt, lt, int, empty, required, fail, lower
  * `.Values` (values.yaml deep-merged with overrides), `.Release.Name/Namespace/Service/IsInstall/
    IsUpgrade/Revision`, `.Chart.Name/Version/AppVersion/...` (from Chart.yaml, capitalized)

Missing map keys are errors (like `helm lint --strict`), so a typo in `.Values.x` does not render
as an empty string. Use as a library (render_chart) or from the command line, like
`helm template` (docs/install-kubernetes.md):

  python tests/python/helm_render.py helm/kinfer --name kinfer --namespace kinfer-system \
      [--set key.path=value ...] [--include-crds] > kinfer-operator.yaml
"""
from __future__ import annotations

import argparse
import copy
import json
import pathlib
import re
import sys
from typing import Any

import yaml


class TemplateError(Exception):
    pass


class FailError(TemplateError):
    """A template called `fail` (or `required` got an empty value)."""


# ---- lexing -------------------------------------------------------------------------------------

_ACTION = re.compile(r"\{\{(-?)(\s*)(.*?)(\s*)(-?)\}\}", re.S)


def _lex(src: str, name: str) -> list[tuple[str, str]]:
    """Splits a template into ("text", s) and ("action", s) items, applying the trim markers."""
    items: list[tuple[str, str]] = []
    pos = 0
    trim_next = False
    for m in _ACTION.finditer(src):
        left_trim, lspace, body, rspace, right_trim = m.groups()
        if left_trim and not lspace:
            raise TemplateError(f"{name}: '{{{{-' must be followed by a space")
        if right_trim and not rspace:
            raise TemplateError(f"{name}: '-}}}}' must be preceded by a space")
        text = src[pos:m.start()]
        if trim_next:
            text = text.lstrip(" \t\r\n")
        if left_trim:
            text = text.rstrip(" \t\r\n")
        if text:
            items.append(("text", text))
        body = body.strip()
        if not (body.startswith("/*") and body.endswith("*/")):
            items.append(("action", body))
        trim_next = bool(right_trim)
        pos = m.end()
    text = src[pos:]
    if trim_next:
        text = text.lstrip(" \t\r\n")
    if text:
        items.append(("text", text))
    return items


_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<string>"(?:[^"\\]|\\.)*"|`[^`]*`)
  | (?P<number>-?\d+(?:\.\d+)?)
  | (?P<declare>:=)
  | (?P<var>\$[A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)
  | (?P<field>(?:\.[A-Za-z_][A-Za-z0-9_]*)+|\.)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<punct>[|(),])
""", re.X)


def _tokens(text: str, where: str) -> list[tuple[str, str]]:
    out = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise TemplateError(f"{where}: cannot parse {text[pos:]!r}")
        kind = m.lastgroup
        if kind != "space":
            out.append((kind, m.group()))
        pos = m.end()
    return out


# ---- parsing ------------------------------------------------------------------------------------
# Nodes: ("text", s) | ("out", pipeline) | ("if", [(pipeline, body)], else_body)
#        | ("range", vars, pipeline, body, else_body)
# Pipelines: list of commands; a command is a list of operands; an operand is
#   ("field", base, [names]) base in {".", "$", "$name"} | ("lit", value) | ("ident", name)
#   | ("pipe", pipeline)


def _parse_pipeline(tokens: list[tuple[str, str]], where: str):
    pos = 0

    def operand():
        nonlocal pos
        kind, text = tokens[pos]
        pos += 1
        if kind == "string":
            if text.startswith("`"):
                return ("lit", text[1:-1])
            return ("lit", json.loads(text))
        if kind == "number":
            return ("lit", float(text) if "." in text else int(text))
        if kind == "field":
            names = [] if text == "." else text[1:].split(".")
            return ("field", ".", names)
        if kind == "var":
            m = re.match(r"(\$[A-Za-z0-9_]*)((?:\.[A-Za-z_][A-Za-z0-9_]*)*)$", text)
            names = m.group(2)[1:].split(".") if m.group(2) else []
            return ("field", m.group(1), names)
        if kind == "ident":
            if text in ("true", "false"):
                return ("lit", text == "true")
            if text == "nil":
                return ("lit", None)
            return ("ident", text)
        if text == "(":
            depth, start = 1, pos
            while depth:
                if pos >= len(tokens):
                    raise TemplateError(f"{where}: unclosed '('")
                if tokens[pos][1] == "(":
                    depth += 1
                elif tokens[pos][1] == ")":
                    depth -= 1
                pos += 1
            return ("pipe", _parse_pipeline(tokens[start:pos - 1], where))
        raise TemplateError(f"{where}: unexpected {text!r}")

    pipeline, command = [], []
    while pos < len(tokens):
        if tokens[pos] == ("punct", "|"):
            if not command:
                raise TemplateError(f"{where}: empty command before '|'")
            pipeline.append(command)
            command = []
            pos += 1
            continue
        command.append(operand())
    if not command:
        raise TemplateError(f"{where}: empty pipeline")
    pipeline.append(command)
    return pipeline


def _parse(items: list[tuple[str, str]], name: str, defines: dict):
    """Parses a template into a node list; `define` blocks go into `defines`."""
    pos = 0

    def block(stop: tuple[str, ...]):
        nonlocal pos
        nodes = []
        while pos < len(items):
            kind, text = items[pos]
            if kind == "text":
                nodes.append(("text", text))
                pos += 1
                continue
            word = text.split(None, 1)[0] if text else ""
            rest = text[len(word):].strip()
            if word in stop:
                return nodes, word, rest
            pos += 1
            where = f"{name}: {{{{ {text} }}}}"
            if word == "define":
                tmpl_name = json.loads(rest)
                body, end, _ = block(("end",))
                if end != "end":
                    raise TemplateError(f"{where}: define without end")
                pos += 1
                defines[tmpl_name] = body
            elif word == "if":
                branches = [(_parse_pipeline(_tokens(rest, where), where), None)]
                else_body = []
                while True:
                    body, end, end_rest = block(("else", "end"))
                    branches[-1] = (branches[-1][0], body)
                    pos += 1
                    if end == "end":
                        break
                    if end_rest.startswith("if "):
                        cond = end_rest[3:].strip()
                        branches.append((_parse_pipeline(_tokens(cond, where), where), None))
                        continue
                    if end_rest:
                        raise TemplateError(f"{where}: unsupported else {end_rest!r}")
                    else_body, end, _ = block(("end",))
                    pos += 1
                    break
                nodes.append(("if", branches, else_body))
            elif word == "range":
                variables = []
                m = re.match(r"^(\$\w+)(?:\s*,\s*(\$\w+))?\s*:=\s*(.*)$", rest, re.S)
                if m:
                    variables = [v for v in (m.group(1), m.group(2)) if v]
                    rest = m.group(3)
                pipe = _parse_pipeline(_tokens(rest, where), where)
                body, end, _ = block(("else", "end"))
                pos += 1
                else_body = []
                if end == "else":
                    else_body, _, _ = block(("end",))
                    pos += 1
                nodes.append(("range", variables, pipe, body, else_body))
            elif word in ("end", "else"):
                raise TemplateError(f"{where}: unexpected {word}")
            elif word in ("with", "template", "block", "break", "continue", "tpl"):
                raise TemplateError(f"{where}: '{word}' is outside the supported subset")
            else:
                nodes.append(("out", _parse_pipeline(_tokens(text, where), where)))
        if stop:
            raise TemplateError(f"{name}: missing {{{{ end }}}}")
        return nodes, None, ""

    nodes, _, _ = block(())
    return nodes


# ---- evaluation ---------------------------------------------------------------------------------


def _truthy(v: Any) -> bool:
    if v is None or v is False:
        return False
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return v != 0
    if isinstance(v, (str, list, dict, tuple)):
        return len(v) > 0
    return True


def _format(v: Any) -> str:
    """Go's %v of a YAML value, as Helm prints it."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() else repr(v)
    if isinstance(v, (dict, list)):
        raise TemplateError(f"printing a {type(v).__name__} directly; use toYaml")
    return str(v)


def _to_yaml(v: Any) -> str:
    if v is None:
        return "null"
    return yaml.safe_dump(v, default_flow_style=False, sort_keys=True).rstrip("\n").removesuffix(
        "\n...")


def _indent(n: int, s: str) -> str:
    pad = " " * int(n)
    return "\n".join(pad + line for line in str(s).split("\n"))


def _printf(fmt: str, *args) -> str:
    it = iter(args)

    def sub(m):
        if m.group() == "%%":
            return "%"
        try:
            v = next(it)
        except StopIteration:
            raise TemplateError(f"printf {fmt!r}: too few arguments")
        if m.group() == "%d":
            return str(int(v))
        if m.group() == "%q":
            return json.dumps(_format(v))
        return _format(v)

    return re.sub(r"%[sdvq%]", sub, fmt)


class Renderer:
    def __init__(self, defines: dict):
        self.defines = defines
        self.depth = 0

    def functions(self):
        return {
            "include": self._include,
            "default": lambda d, v=None: v if _truthy(v) else d,
            "quote": lambda *vs: " ".join(json.dumps(_format(v)) for v in vs),
            "squote": lambda *vs: " ".join("'" + _format(v) + "'" for v in vs),
            "toYaml": _to_yaml,
            "nindent": lambda n, s: "\n" + _indent(n, s),
            "indent": _indent,
            "trunc": lambda n, s: s[:int(n)] if int(n) >= 0 else s[int(n):],
            "trimSuffix": lambda suf, s: s[:-len(suf)] if suf and s.endswith(suf) else s,
            "printf": _printf,
            "join": lambda sep, vs: sep.join(_format(v) for v in (vs or [])),
            "not": lambda v: not _truthy(v),
            "and": lambda *vs: next((v for v in vs if not _truthy(v)), vs[-1]),
            "or": lambda *vs: next((v for v in vs if _truthy(v)), vs[-1]),
            "eq": lambda a, *bs: any(a == b for b in bs),
            "ne": lambda a, b: a != b,
            "gt": lambda a, b: a > b,
            "lt": lambda a, b: a < b,
            "int": lambda v: int(v or 0),
            "empty": lambda v: not _truthy(v),
            "required": self._required,
            "fail": self._fail,
            "lower": lambda s: str(s).lower(),
        }

    @staticmethod
    def _required(msg, v=None):
        if not _truthy(v) and v is not False:
            raise FailError(msg)
        return v

    @staticmethod
    def _fail(msg):
        raise FailError(msg)

    def _include(self, name, data):
        if name not in self.defines:
            raise TemplateError(f"include of undefined template {name!r}")
        self.depth += 1
        if self.depth > 50:
            raise TemplateError("include nested too deep")
        try:
            return self.run(self.defines[name], data, {"$": data})
        finally:
            self.depth -= 1

    def lookup(self, value, names, where):
        for n in names:
            if isinstance(value, dict):
                if n not in value:
                    raise TemplateError(f"{where}: map has no entry for key {n!r}")
                value = value[n]
            else:
                raise TemplateError(f"{where}: cannot read .{n} of {type(value).__name__}")
        return value

    def operand(self, op, dot, scope, where):
        kind = op[0]
        if kind == "lit":
            return op[1]
        if kind == "field":
            base, names = op[1], op[2]
            if base == ".":
                value = dot
            elif base in scope:
                value = scope[base]
            else:
                raise TemplateError(f"{where}: undefined variable {base}")
            return self.lookup(value, names, where)
        if kind == "pipe":
            return self.pipeline(op[1], dot, scope, where)
        if kind == "ident":
            return self.call(op[1], [], dot, scope, where)
        raise TemplateError(f"{where}: bad operand {op!r}")

    def call(self, name, args, dot, scope, where):
        fns = self.functions()
        if name not in fns:
            raise TemplateError(f"{where}: function {name!r} is outside the supported subset")
        try:
            return fns[name](*args)
        except TemplateError:
            raise
        except TypeError as e:
            raise TemplateError(f"{where}: {name}: {e}") from e

    def pipeline(self, pipe, dot, scope, where):
        value, have_value = None, False
        for command in pipe:
            head = command[0]
            if head[0] == "ident":
                args = [self.operand(op, dot, scope, where) for op in command[1:]]
                if have_value:
                    args.append(value)
                value = self.call(head[1], args, dot, scope, where)
            else:
                if len(command) != 1:
                    raise TemplateError(f"{where}: can't give arguments to a non-function")
                if have_value:
                    raise TemplateError(f"{where}: can't pipe into a non-function")
                value = self.operand(head, dot, scope, where)
            have_value = True
        return value

    def run(self, nodes, dot, scope) -> str:
        out = []
        for node in nodes:
            kind = node[0]
            if kind == "text":
                out.append(node[1])
            elif kind == "out":
                out.append(_format(self.pipeline(node[1], dot, scope, "output")))
            elif kind == "if":
                for cond, body in node[1]:
                    if _truthy(self.pipeline(cond, dot, scope, "if")):
                        out.append(self.run(body, dot, scope))
                        break
                else:
                    out.append(self.run(node[2], dot, scope))
            elif kind == "range":
                variables, pipe, body, else_body = node[1:]
                seq = self.pipeline(pipe, dot, scope, "range")
                pairs = list(seq.items()) if isinstance(seq, dict) else list(enumerate(seq or []))
                if isinstance(seq, dict):
                    pairs.sort()
                if not pairs:
                    out.append(self.run(else_body, dot, scope))
                for key, item in pairs:
                    inner = dict(scope)
                    if len(variables) == 1:
                        inner[variables[0]] = item
                    elif len(variables) == 2:
                        inner[variables[0]], inner[variables[1]] = key, item
                    out.append(self.run(body, item, inner))
        return "".join(out)


# ---- charts -------------------------------------------------------------------------------------


def deep_merge(base: dict, override: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in override.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _chart_object(chart: dict) -> dict:
    return {k[:1].upper() + k[1:]: v for k, v in chart.items()}


class SchemaError(TemplateError):
    """The values do not satisfy the chart's values.schema.json (Helm refuses them too)."""


def check_values_schema(chart_dir, values: dict) -> None:
    """Validates the merged values against values.schema.json, as Helm does before rendering."""
    schema_path = pathlib.Path(chart_dir) / "values.schema.json"
    if not schema_path.exists():
        return
    import jsonschema
    schema = json.loads(schema_path.read_text())
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(values), key=lambda e: e.path)
    if errors:
        raise SchemaError("; ".join(
            f"{'.'.join(str(p) for p in e.path) or '(root)'}: {e.message}" for e in errors))


def render_chart(chart_dir, values: dict | None = None, name: str = "kinfer",
                 namespace: str = "kinfer-system") -> dict[str, str]:
    """Renders every template of the chart; returns {"templates/x.yaml": text} (NOTES.txt too).
    Files starting with "_" only contribute defines, as in Helm. The merged values are first
    checked against values.schema.json (SchemaError), as Helm does."""
    chart_dir = pathlib.Path(chart_dir)
    chart = yaml.safe_load((chart_dir / "Chart.yaml").read_text())
    base_values = yaml.safe_load((chart_dir / "values.yaml").read_text()) or {}
    merged = deep_merge(base_values, values or {})
    check_values_schema(chart_dir, merged)
    context = {
        "Values": merged,
        "Release": {"Name": name, "Namespace": namespace, "Service": "Helm", "IsInstall": True,
                    "IsUpgrade": False, "Revision": 1},
        "Chart": _chart_object(chart),
    }
    defines: dict = {}
    parsed = {}
    for path in sorted((chart_dir / "templates").iterdir()):
        if path.suffix not in (".yaml", ".yml", ".tpl", ".txt"):
            continue
        rel = f"templates/{path.name}"
        parsed[rel] = _parse(_lex(path.read_text(), rel), rel, defines)
    renderer = Renderer(defines)
    out = {}
    for rel, nodes in parsed.items():
        if pathlib.PurePath(rel).name.startswith("_"):
            continue
        out[rel] = renderer.run(nodes, context, {"$": context})
    return out


def split_documents(text: str) -> list[str]:
    """Splits rendered text on '---' lines, dropping documents with nothing but comments."""
    docs = re.split(r"(?m)^---[ \t]*(?:#.*)?$", text)
    keep = []
    for d in docs:
        meaningful = [ln for ln in d.splitlines() if ln.strip() and not ln.strip().startswith("#")]
        if meaningful:
            keep.append(d.strip("\n") + "\n")
    return keep


def manifests(rendered: dict[str, str]) -> list[tuple[str, dict]]:
    """(template path, parsed object) for every Kubernetes object in a render."""
    out = []
    for rel, text in rendered.items():
        if rel.endswith("NOTES.txt"):
            continue
        for doc in split_documents(text):
            out.append((rel, yaml.safe_load(doc)))
    return out


def _parse_set(items: list[str]) -> dict:
    values: dict = {}
    for item in items:
        key, _, raw = item.partition("=")
        node = values
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        if raw.startswith("{") and raw.endswith("}"):
            node[parts[-1]] = [v for v in raw[1:-1].split(",") if v]
        else:
            node[parts[-1]] = yaml.safe_load(raw) if raw else ""
    return values


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Render helm/kinfer like `helm template` (subset).")
    ap.add_argument("chart")
    ap.add_argument("--name", default="kinfer")
    ap.add_argument("--namespace", "-n", default="kinfer-system")
    ap.add_argument("--set", action="append", default=[], help="key.path=value ({a,b} = a list)")
    ap.add_argument("-f", "--values", action="append", default=[], help="a values file")
    ap.add_argument("--include-crds", action="store_true")
    args = ap.parse_args(argv)
    values: dict = {}
    for f in args.values:
        values = deep_merge(values, yaml.safe_load(pathlib.Path(f).read_text()) or {})
    values = deep_merge(values, _parse_set(args.set))
    try:
        rendered = render_chart(args.chart, values, args.name, args.namespace)
    except TemplateError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    chart = pathlib.Path(args.chart)
    out = []
    if args.include_crds and (chart / "crds").is_dir():
        for crd in sorted((chart / "crds").glob("*.yaml")):
            out.append(f"---\n# Source: {chart.name}/crds/{crd.name}\n{crd.read_text()}")
    for rel, text in rendered.items():
        if rel.endswith("NOTES.txt"):
            continue
        for doc in split_documents(text):
            out.append(f"---\n# Source: {chart.name}/{rel}\n{doc}")
    sys.stdout.write("".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
