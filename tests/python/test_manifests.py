"""Checks the declarative parts of kinfer-operator without a cluster or a helm binary (issue 5).

  * crds/: the InferenceService CRD is a structural apiextensions.k8s.io/v1 schema (the rules the
    API server enforces when the CRD is created), its names, subresources and printer columns;
    helm/kinfer/crds/ holds an identical copy.
  * crds/samples/: each sample validates against the CRD's openAPIV3Schema, with defaults applied
    first as the API server does, by the small OpenAPI validator below (type, required, enum,
    ranges, lengths, pattern, list types, int-or-string) and a CEL-subset evaluator for the
    x-kubernetes-validations rules; invalid variants are rejected with the field's path.
  * defaults that mirror other code stay equal to it: the sidecar policies against
    sidecar/kinfer-sidecar.example.yaml, the autoscaling fields against operator/autoscale.
  * helm/kinfer: rendered by helm_render.py (a Go-template subset) under several values; the
    output is valid YAML with the expected kinds; RBAC is the pinned least-privilege list (no "*");
    probes, ports, selectors, service account and bindings line up. When a helm binary is found
    ($KINFER_HELM or `helm` on PATH), `helm lint --strict` runs and `helm template` must produce
    the same objects as helm_render.py.
  * docs/crd.md names every field of the schema, with the schema's default.
Run: .venv/bin/python -m pytest -q tests/python/test_manifests.py
"""
from __future__ import annotations

import copy
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
import yaml

import helm_render

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "kube"))
from apiserver.schema import (_DATE_TIME, CelError, _type_ok, apply_defaults,  # noqa: E402
                              cel_eval, cel_parse)

ROOT = pathlib.Path(__file__).resolve().parents[2]
CRD_PATH = ROOT / "crds" / "serving.kinfer.dev_inferenceservices.yaml"
HELM_CRD_PATH = ROOT / "helm" / "kinfer" / "crds" / CRD_PATH.name
SAMPLES = sorted((ROOT / "crds" / "samples").glob("*.yaml"))
CHART = ROOT / "helm" / "kinfer"
DOC = ROOT / "docs" / "crd.md"


def load_crd() -> dict:
    return yaml.safe_load(CRD_PATH.read_text())


def version(crd: dict) -> dict:
    (v,) = crd["spec"]["versions"]
    return v


def root_schema() -> dict:
    return version(load_crd())["schema"]["openAPIV3Schema"]


# ==== a structural OpenAPI v3 validator (the subset the API server applies to CRs) ===============
# The CEL subset, defaulting and type checks are shared with the test API server
# (tests/kube/apiserver/schema.py); this validator differs from the server's on purpose: it rejects
# unknown fields (kubectl's strict field validation) and words errors as "path: message".


def validate(value, schema, path="") -> list[str]:
    """Errors as 'path: message'. Unknown fields are errors (kubectl's strict field validation)."""
    where = path or "<root>"
    if value is None:
        return [] if schema.get("nullable") else [f"{where}: must not be null"]
    if not _type_ok(value, schema):
        want = "integer or string" if schema.get("x-kubernetes-int-or-string") else schema["type"]
        return [f"{where}: must be of type {want}, got {type(value).__name__}"]
    errs = []
    if "enum" in schema and value not in schema["enum"]:
        errs.append(f"{where}: unsupported value {value!r}, must be one of {schema['enum']}")
    if isinstance(value, str):
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errs.append(f"{where}: {value!r} does not match {schema['pattern']}")
        if len(value) > schema.get("maxLength", float("inf")):
            errs.append(f"{where}: longer than {schema['maxLength']}")
        if len(value) < schema.get("minLength", 0):
            errs.append(f"{where}: shorter than {schema['minLength']}")
        if schema.get("format") == "date-time" and not _DATE_TIME.match(value):
            errs.append(f"{where}: not an RFC 3339 date-time")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema:
            lo = schema["minimum"]
            if value < lo or (schema.get("exclusiveMinimum") and value == lo):
                rel = ">" if schema.get("exclusiveMinimum") else ">="
                errs.append(f"{where}: should be {rel} {lo}, got {value}")
        if "maximum" in schema:
            hi = schema["maximum"]
            if value > hi or (schema.get("exclusiveMaximum") and value == hi):
                rel = "<" if schema.get("exclusiveMaximum") else "<="
                errs.append(f"{where}: should be {rel} {hi}, got {value}")
    if isinstance(value, dict) and not schema.get("x-kubernetes-preserve-unknown-fields"):
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key in schema.get("required", []):
            if key not in value:
                errs.append(f"{path + '.' if path else ''}{key}: Required value")
        if len(value) > schema.get("maxProperties", float("inf")):
            errs.append(f"{where}: more than {schema['maxProperties']} properties")
        for key, sub in value.items():
            child = f"{path}.{key}" if path else key
            if key in props:
                errs += validate(sub, props[key], child)
            elif isinstance(extra, dict):
                errs += validate(sub, extra, child)
            elif path == "metadata" or (not path and key in ("apiVersion", "kind")):
                continue
            else:
                errs.append(f"{child}: unknown field")
    if isinstance(value, list):
        if len(value) > schema.get("maxItems", float("inf")):
            errs.append(f"{where}: more than {schema['maxItems']} items")
        if len(value) < schema.get("minItems", 0):
            errs.append(f"{where}: fewer than {schema['minItems']} items")
        for i, item in enumerate(value):
            errs += validate(item, schema.get("items", {}), f"{path}[{i}]")
        list_type = schema.get("x-kubernetes-list-type")
        if list_type == "set" and len({repr(v) for v in value}) != len(value):
            errs.append(f"{where}: duplicate entries in a set")
        if list_type == "map":
            keys = schema["x-kubernetes-list-map-keys"]
            seen = [tuple(item.get(k) for k in keys) for item in value if isinstance(item, dict)]
            if len(set(seen)) != len(seen):
                errs.append(f"{where}: duplicate entries for key {keys}")
    if not errs:
        for rule in schema.get("x-kubernetes-validations", []):
            try:
                ok = cel_eval(cel_parse(rule["rule"]), {"self": value})
            except CelError as e:
                errs.append(f"{where}: rule {rule['rule']!r} failed to evaluate: {e}")
                continue
            if ok is not True:
                errs.append(f"{where}: Invalid value: {rule.get('message', rule['rule'])}")
    return errs


def admit(obj: dict) -> list[str]:
    """What the API server would say to a create: defaults, then schema and CEL validation."""
    schema = root_schema()
    obj = apply_defaults(copy.deepcopy(obj), schema)
    return validate(obj, schema)


# ==== the CRD =====================================================================================


def walk(schema: dict, path: str = ""):
    """Yields (path, node) for every schema node (properties, items, additionalProperties)."""
    yield path, schema
    for key, sub in schema.get("properties", {}).items():
        yield from walk(sub, f"{path}.{key}" if path else key)
    if isinstance(schema.get("items"), dict):
        yield from walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from walk(schema["additionalProperties"], f"{path}.<name>")


def test_every_yaml_parses():
    files = [*ROOT.joinpath("crds").rglob("*.yaml"), *CHART.joinpath("crds").glob("*.yaml"),
             CHART / "Chart.yaml", CHART / "values.yaml"]
    assert len(files) >= 6
    for f in files:
        docs = [d for d in yaml.safe_load_all(f.read_text()) if d is not None]
        assert docs, f"{f} is empty"
        for d in docs:
            assert isinstance(d, dict), f"{f}: a document is not a mapping"


def test_crd_names_versions_and_subresources():
    crd = load_crd()
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["kind"] == "CustomResourceDefinition"
    assert crd["metadata"]["name"] == "inferenceservices.serving.kinfer.dev"
    spec = crd["spec"]
    assert spec["group"] == "serving.kinfer.dev"
    assert spec["scope"] == "Namespaced"
    assert spec["names"] == {
        "kind": "InferenceService", "listKind": "InferenceServiceList",
        "plural": "inferenceservices", "singular": "inferenceservice",
        "shortNames": ["kisvc"], "categories": ["kinfer"]}
    assert not spec.get("preserveUnknownFields", False)
    v = version(crd)
    assert (v["name"], v["served"], v["storage"]) == ("v1alpha1", True, True)
    assert v["subresources"]["status"] == {}
    assert v["subresources"]["scale"] == {
        "specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector"}


def _schema_at(schema: dict, dotted: str) -> dict | None:
    node = schema
    for part in dotted.strip(".").split("."):
        node = node.get("properties", {}).get(part)
        if node is None:
            return None
    return node


def test_scale_paths_and_printer_columns_point_at_schema_fields():
    v = version(load_crd())
    schema = v["schema"]["openAPIV3Schema"]
    scale = v["subresources"]["scale"]
    assert _schema_at(schema, scale["specReplicasPath"])["type"] == "integer"
    assert _schema_at(schema, scale["statusReplicasPath"])["type"] == "integer"
    assert _schema_at(schema, scale["labelSelectorPath"])["type"] == "string"
    cols = v["additionalPrinterColumns"]
    default_cols = [c["name"] for c in cols if c.get("priority", 0) == 0]
    assert default_cols == ["Ready", "Replicas", "Desired", "Queue", "P99 TTFT", "Age"]
    for c in cols:
        assert c["type"] in ("string", "integer", "number", "boolean", "date")
        path = c["jsonPath"]
        if path.startswith(".metadata."):
            continue
        field = re.sub(r"\[\?\(.*?\)\]", "", path)  # conditions[?(@.type=="Ready")].status
        node = schema
        for part in field.strip(".").split("."):
            node = node.get("properties", {}).get(part) or node.get("items", {}).get(
                "properties", {}).get(part)
            assert node is not None, f"printer column {c['name']}: {path} is not in the schema"
        if node.get("type") in ("integer", "number", "string"):
            assert c["type"] == node["type"] or (c["type"], node["type"]) == ("number", "integer")


_FORBIDDEN = {"$ref", "definitions", "dependencies", "additionalItems", "patternProperties", "id",
              "$schema", "uniqueItems"}
_JUNCTORS = ("allOf", "anyOf", "oneOf", "not")


def test_crd_schema_is_structural():
    schema = root_schema()
    assert schema["type"] == "object"
    assert set(schema["properties"]) == {"apiVersion", "kind", "metadata", "spec", "status"}
    assert schema["properties"]["metadata"] == {"type": "object"}, \
        "metadata may only be {type: object} (name/generateName restrictions aside)"
    nodes = list(walk(schema))
    assert len(nodes) > 150
    for path, node in nodes:
        where = path or "<root>"
        assert not (_FORBIDDEN & set(node)), f"{where}: forbidden {_FORBIDDEN & set(node)}"
        if node.get("x-kubernetes-int-or-string"):
            assert "type" not in node, f"{where}: int-or-string has no type"
            assert node.get("anyOf") == [{"type": "integer"}, {"type": "string"}], where
        elif not node.get("x-kubernetes-preserve-unknown-fields"):
            assert node.get("type"), f"{where}: every node needs a type to be structural"
        if node.get("x-kubernetes-preserve-unknown-fields"):
            assert node.get("type") == "object", where
        assert not ("properties" in node and "additionalProperties" in node), \
            f"{where}: properties and additionalProperties are exclusive"
        assert node.get("additionalProperties", True) is not False, where
        for j in _JUNCTORS:
            if j in node and not node.get("x-kubernetes-int-or-string"):
                raise AssertionError(f"{where}: junctors are not used outside int-or-string")
        if "default" in node:
            assert "metadata" not in path.split("."), f"{where}: no defaults under metadata"
            assert validate(node["default"], node, where) == [], \
                f"{where}: the default must validate against its own schema"
        if node.get("type") == "array":
            assert isinstance(node.get("items"), dict), f"{where}: arrays need items"
        lt = node.get("x-kubernetes-list-type")
        if lt == "map":
            item = node["items"]
            assert item["type"] == "object"
            for key in node["x-kubernetes-list-map-keys"]:
                assert key in item.get("required", []) or "default" in item["properties"][key], \
                    f"{where}: list-map key {key} must be required or defaulted"
                assert item["properties"][key]["type"] in ("string", "integer", "boolean")
        elif lt == "set":
            assert node["items"]["type"] in ("string", "integer", "number", "boolean")
        for rule in node.get("x-kubernetes-validations", []):
            assert set(rule) <= {"rule", "message", "messageExpression", "reason", "fieldPath"}
            cel_parse(rule["rule"])  # parses
            assert rule.get("message"), f"{where}: give each rule a message"
        if node.get("type") == "string" and path.startswith("spec"):
            # CEL cost estimation and etcd size: every string in the spec is bounded or shaped.
            assert {"maxLength", "pattern", "enum"} & set(node), \
                f"{where}: strings in the spec need a maxLength, pattern or enum"


def test_crd_fits_in_an_annotation_and_copies_are_identical():
    data = CRD_PATH.read_bytes()
    # kubectl apply (client side) stores the object in an annotation of at most 256 KiB.
    assert len(data) < 200 * 1024
    assert HELM_CRD_PATH.read_bytes() == data, \
        "helm/kinfer/crds/ must be an identical copy of crds/: cp crds/*.yaml helm/kinfer/crds/"
    assert sorted(p.name for p in HELM_CRD_PATH.parent.iterdir()) == [CRD_PATH.name]


# ==== samples and invalid variants ===============================================================


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_sample_is_admitted(path):
    (obj,) = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert obj["apiVersion"] == "serving.kinfer.dev/v1alpha1"
    assert obj["kind"] == "InferenceService"
    assert admit(obj) == []


def test_samples_cover_minimal_full_and_manual():
    names = {p.name for p in SAMPLES}
    assert {"minimal.yaml", "full.yaml", "manual-replicas.yaml"} <= names
    full = yaml.safe_load((ROOT / "crds/samples/full.yaml").read_text())["spec"]
    for key in ("fallbackModel", "slo", "autoscaling", "sidecar", "resources", "tolerations"):
        assert key in full
    for key in ("classes", "admission", "rateLimits", "circuitBreaker", "degrade", "cache",
                "retries", "timeouts"):
        assert key in full["sidecar"], key
    manual = yaml.safe_load((ROOT / "crds/samples/manual-replicas.yaml").read_text())["spec"]
    assert manual["autoscaling"]["enabled"] is False and manual["replicas"] >= 1


def test_samples_reading_prometheus_have_a_panic_window_of_two_scrapes():
    # docs/autoscaling.md: with a Prometheus source the TTFT histogram is an increase() over the
    # panic window, which returns nothing over less than two of Prometheus's scrape intervals
    # (often 15-30 s), so the P99 objective the sample advertises would never act.
    for path in SAMPLES:
        (obj,) = [d for d in yaml.safe_load_all(path.read_text()) if d]
        spec = apply_defaults(copy.deepcopy(obj), root_schema())["spec"]
        a = spec["autoscaling"]
        if not a["enabled"] or a["metricsSource"]["type"] != "prometheus":
            continue
        panic_window_s = a["stableWindowSeconds"] * a["panicWindowPercent"] / 100
        assert panic_window_s >= 2 * 30, f"{path.name}: a {panic_window_s} s panic window"


def test_defaults_fill_a_minimal_spec():
    obj = yaml.safe_load((ROOT / "crds/samples/minimal.yaml").read_text())
    spec = apply_defaults(copy.deepcopy(obj), root_schema())["spec"]
    assert spec["model"]["format"] == "gguf"
    assert spec["resources"] == {"gpus": 1, "gpuResourceName": "nvidia.com/gpu"}
    assert spec["runtime"] == {"maxBatchTokens": 2048, "maxRunningRequests": 64,
                               "kvCacheFraction": 0.9, "contextSize": 0}
    a = spec["autoscaling"]
    assert (a["enabled"], a["minReplicas"], a["maxReplicas"]) == (True, 1, 10)
    assert a["metricsSource"] == {"type": "pods"}
    assert "replicas" not in spec and "sidecar" not in spec and "slo" not in spec


def _minimal():
    return yaml.safe_load((ROOT / "crds/samples/minimal.yaml").read_text())


def _full():
    return yaml.safe_load((ROOT / "crds/samples/full.yaml").read_text())


def _set(obj, dotted, value):
    node = obj
    parts = dotted.split(".")
    for p in parts[:-1]:
        node = node[int(p)] if isinstance(node, list) else node.setdefault(p, {})
    if value is _DELETE:
        del node[parts[-1]]
    else:
        node[parts[-1]] = value
    return obj


_DELETE = object()

# (id, base, [(path, value)], substring expected in one error)
INVALID = [
    ("missing spec", _minimal, [("spec", _DELETE)], "spec: Required value"),
    ("missing model", _minimal, [("spec.model", _DELETE)], "spec.model: Required value"),
    ("missing model uri", _minimal, [("spec.model.uri", _DELETE)], "spec.model.uri: Required"),
    ("bad format", _minimal, [("spec.model.format", "safetensors")], "spec.model.format: unsupported"),
    ("bad sha256", _minimal, [("spec.model.sha256", "ABC")], "spec.model.sha256"),
    ("bad uri scheme", _minimal, [("spec.model.uri", "s3://bucket/m.gguf")], "spec.model.uri"),
    ("http without sha256", _minimal, [("spec.model.uri", "https://h/m.gguf")], "pinned with sha256"),
    ("kvCacheFraction 0", _minimal, [("spec.runtime.kvCacheFraction", 0)], "should be > 0"),
    ("kvCacheFraction 1.5", _minimal, [("spec.runtime.kvCacheFraction", 1.5)], "should be <= 1"),
    ("negative gpus", _minimal, [("spec.resources.gpus", -1)], "spec.resources.gpus"),
    ("replicas as string", _full, [("spec.autoscaling.enabled", False), ("spec.replicas", "3")],
     "spec.replicas: must be of type integer"),
    ("unknown field", _minimal, [("spec.modle", {})], "spec.modle: unknown field"),
    ("min > max", _minimal, [("spec.autoscaling", {"minReplicas": 5, "maxReplicas": 2})],
     "minReplicas must be at most maxReplicas"),
    ("panicThreshold 1", _minimal, [("spec.autoscaling", {"panicThreshold": 1})], "should be > 1"),
    ("bad metrics source", _minimal, [("spec.autoscaling", {"metricsSource": {"type": "datadog"}})],
     "unsupported value 'datadog'"),
    ("prometheus without url", _minimal,
     [("spec.autoscaling", {"metricsSource": {"type": "prometheus"}})],
     "metricsSource.prometheus is required"),
    ("fallback same name", _full, [("spec.fallbackModel.name", "gemma-3-270m-it")],
     "fallbackModel.name must differ"),
    ("replicas while autoscaling", _minimal, [("spec.replicas", 3)],
     "spec.replicas may be set"),
    ("manual without replicas", _minimal, [("spec.autoscaling", {"enabled": False})],
     "spec.replicas is required"),
    ("replicas too many", _minimal, [("spec.autoscaling", {"enabled": False}),
                                     ("spec.replicas", 5000)], "should be <= 1000"),
    ("speculative draft without a model", _minimal,
     [("spec.runtime", {"speculative": {"enabled": True}})], "needs spec.runtime.speculative"),
    ("bad duration", _minimal, [("spec.sidecar", {"timeouts": {"upstream": "10 minutes"}})],
     "spec.sidecar.timeouts.upstream"),
    ("clientWrite past the runtime's --write-timeout", _minimal,
     [("spec.sidecar", {"timeouts": {"clientWrite": "25h"}})],
     "clientWrite must be at most 24h"),
    ("maxBodyBytes past the runtime's --max-body-bytes", _minimal,
     [("spec.sidecar", {"maxBodyBytes": "5GiB"})], "maxBodyBytes must be at most 4GiB"),
    ("bad byte size", _minimal, [("spec.sidecar", {"cache": {"maxBytes": "64 megs"}})],
     "spec.sidecar.cache.maxBytes"),
    ("duplicate class", _full, [("spec.sidecar.classes.2.name", "standard")],
     "duplicate entries for key ['name']"),
    ("default class not listed", _full, [("spec.sidecar.defaultClass", "bulk")],
     "defaultClass must name one of"),
    ("default class without classes", _minimal, [("spec.sidecar", {"defaultClass": "bulk"})],
     "defaultClass must be one of them"),
    ("required API keys without a Secret", _minimal, [("spec.sidecar", {"requireApiKey": True})],
     "requireApiKey needs spec.sidecar.apiKeysSecretName"),
    ("bad trigger", _full, [("spec.sidecar.classes.0.degrade.triggers", ["always"])],
     "unsupported value 'always'"),
    ("reserved >= concurrency", _minimal,
     [("spec.sidecar", {"admission": {"maxConcurrency": 2, "reservedForTop": 2}})],
     "reservedForTop must be less than maxConcurrency"),
    ("reserved >= runtime batch, maxConcurrency left out", _minimal,
     [("spec.runtime", {"maxRunningRequests": 2}),
      ("spec.sidecar", {"admission": {"reservedForTop": 2}})],
     "reservedForTop must be less than spec.runtime.maxRunningRequests"),
    ("default reserved slot >= a batch of one", _minimal,
     [("spec.runtime", {"maxRunningRequests": 1})],
     "reservedForTop must be less than spec.runtime.maxRunningRequests"),
    ("running >= batch tokens", _minimal,
     [("spec.runtime", {"maxBatchTokens": 64, "maxRunningRequests": 64})],
     "spec.runtime.maxRunningRequests must be less than spec.runtime.maxBatchTokens"),
    ("running >= the default batch tokens", _minimal,
     [("spec.runtime", {"maxRunningRequests": 4096})],
     "spec.runtime.maxRunningRequests must be less than spec.runtime.maxBatchTokens"),
    ("per-class queue > queue", _minimal,
     [("spec.sidecar", {"admission": {"maxQueue": 10}})], "maxQueuePerClass must be at most"),
    ("failure rate 0", _minimal, [("spec.sidecar", {"circuitBreaker": {"failureRateThreshold": 0}})],
     "should be > 0"),
    ("breaker window type", _minimal, [("spec.sidecar", {"circuitBreaker": {"windowType": "sliding"}})],
     "unsupported value 'sliding'"),
    ("slo zero", _minimal, [("spec.slo", {"ttftP99Seconds": 0})], "should be > 0"),
    ("slo without value", _minimal, [("spec.slo", {})], "spec.slo.ttftP99Seconds: Required"),
    ("bad gpu resource name", _minimal, [("spec.resources.gpuResourceName", "nvidia gpu")],
     "spec.resources.gpuResourceName"),
    ("gpu resource not domain-qualified", _minimal, [("spec.resources.gpuResourceName", "cpu")],
     "spec.resources.gpuResourceName"),
    ("bad cpu quantity", _minimal, [("spec.resources.cpu", "four")], "spec.resources.cpu"),
    ("name not DNS-1035", _minimal, [("metadata.name", "1-model")], "DNS-1035 label"),
    ("name too long", _minimal, [("metadata.name", "a" * 53)], "at most 52 characters"),
    ("nodeSelector value not a string", _minimal, [("spec.nodeSelector", {"gpu": 1})],
     "spec.nodeSelector.gpu: must be of type string"),
]


@pytest.mark.parametrize("case", INVALID, ids=[c[0] for c in INVALID])
def test_invalid_variant_is_rejected(case):
    _, base, edits, expected = case
    obj = base()
    assert admit(obj) == [], "the base must be valid"
    for path, value in edits:
        _set(obj, path, value)
    errs = admit(obj)
    assert any(expected in e for e in errs), f"expected {expected!r} in {errs}"


def test_scale_round_trip_on_manual_sample():
    # kubectl scale writes .spec.replicas through /scale: any value in range is admitted, and the
    # CEL rules keep it legal only while autoscaling is off.
    obj = yaml.safe_load((ROOT / "crds/samples/manual-replicas.yaml").read_text())
    for n in (0, 1, 7, 1000):
        obj["spec"]["replicas"] = n
        assert admit(obj) == []
    obj["spec"]["autoscaling"]["enabled"] = True
    assert any("spec.replicas may be set" in e for e in admit(obj))


def test_reserved_slots_are_checked_against_the_concurrency_the_sidecar_gets():
    # maxConcurrency left out follows spec.runtime.maxRunningRequests, and reservedForTop is
    # checked against whichever of the two the sidecar gets.
    def with_(runtime=None, admission=None):
        obj = _minimal()
        if runtime is not None:
            obj["spec"]["runtime"] = runtime
        if admission is not None:
            obj["spec"]["sidecar"] = {"admission": admission}
        return admit(obj)
    assert with_({"maxRunningRequests": 1}, {"reservedForTop": 0}) == []
    assert with_({"maxRunningRequests": 1}, {"maxConcurrency": 4}) == []
    assert with_({"maxRunningRequests": 2}) == []
    assert with_({"maxRunningRequests": 2}, {"maxQueue": 512}) == []
    assert with_(None, {"reservedForTop": 63}) == []
    assert any("spec.runtime.maxRunningRequests" in e for e in with_(None, {"reservedForTop": 64}))
    assert with_({"maxRunningRequests": 2}, {"maxConcurrency": 8, "reservedForTop": 7}) == []


def test_client_write_is_bounded_by_the_runtimes_write_timeout():
    # kinfer-runtime's --write-timeout takes at most 86400 s; the CEL rule reads every unit.
    def errors(value):
        return admit(_set(_minimal(), "spec.sidecar", {"timeouts": {"clientWrite": value}}))
    for ok in ("24h", "1440m", "86400s", "86400", "86400.0", "86400000ms", "86400000000us",
               "86400000000000ns", "30s", "1.5h"):
        assert errors(ok) == [], ok
    for bad in ("24.5h", "1441m", "86401s", "86400.5", "86400001ms", "86400000001us",
                "86400000000001ns", "100000h"):
        assert any("clientWrite must be at most 24h" in e for e in errors(bad)), bad


def test_max_body_bytes_is_bounded_by_the_runtimes_body_limit():
    # kinfer-runtime's --max-body-bytes takes at most 2^32; the CEL rule reads every unit and
    # the integer form.
    def errors(value):
        return admit(_set(_minimal(), "spec.sidecar", {"maxBodyBytes": value}))
    for ok in ("4GiB", "4096MiB", "4194304KiB", "4294967296", "4294967296B", 4294967296,
               "4GB", "4294MB", "4294967KB", "1MiB", 1, "0TiB"):
        assert errors(ok) == [], ok
    for bad in ("5GiB", "4097MiB", "4194305KiB", "4294967297", 4294967297, "1TiB", "5GB",
                "4295MB", "4294968KB", "1TB", "99999999999999999999"):
        assert any("maxBodyBytes must be at most 4GiB" in e for e in errors(bad)), bad


def test_running_requests_stay_below_the_step_token_budget():
    # kinfer-runtime lowers --max-running to --max-batch-tokens - 1; the sidecar's concurrency
    # follows maxRunningRequests, so the schema keeps the two consistent (defaults included).
    def with_(runtime):
        return admit(_set(_minimal(), "spec.runtime", runtime))
    assert with_({}) == []  # 64 < 2048
    assert with_({"maxBatchTokens": 64, "maxRunningRequests": 63}) == []
    assert with_({"maxRunningRequests": 2047}) == []
    assert with_({"maxBatchTokens": 4096, "maxRunningRequests": 4095}) == []
    for bad in ({"maxBatchTokens": 64, "maxRunningRequests": 64},
                {"maxBatchTokens": 64},  # the default 64 running
                {"maxRunningRequests": 2048}, {"maxBatchTokens": 100, "maxRunningRequests": 200}):
        assert any("less than spec.runtime.maxBatchTokens" in e for e in with_(bad)), bad


def test_cel_subset_semantics():
    ev = lambda src, **env: cel_eval(cel_parse(src), env)  # noqa: E731
    assert ev("!has(self.a) || self.a.b != self.c", self={"c": 1}) is True
    assert ev("self.x <= self.y", self={"x": 1, "y": 2}) is True
    assert ev("self.l.exists(c, c.n == 'a')", self={"l": [{"n": "b"}, {"n": "a"}]}) is True
    assert ev("'b' in ['a', 'b'] && size('abc') == 3", self={}) is True
    assert ev("self.s.startsWith('http') ? 1 : 2", self={"s": "https://x"}) == 1
    with pytest.raises(CelError):
        ev("self.missing > 1", self={})
    # An error on one side of || is absorbed when the other side decides (CEL's commutativity).
    assert ev("self.missing > 1 || true", self={}) is True
    # Kubernetes' regex library: find gives the first match or "".
    assert ev("self.find('^[0-9]+')", self="64MiB") == "64"
    assert ev("self.find('[0-9]+')", self="MiB") == ""


# ==== defaults that mirror the sidecar and the autoscaler ========================================


def _duration_ns(text) -> float:
    m = re.fullmatch(r"([0-9.]+)(ns|us|ms|s|m|h)?", str(text))
    scale = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9, None: 1e9, "m": 60e9, "h": 3600e9}
    return float(m.group(1)) * scale[m.group(2)]


def _bytes(text) -> int:
    m = re.fullmatch(r"([0-9]+)(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)?", str(text))
    scale = {None: 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
             "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
    return int(m.group(1)) * scale[m.group(2)]


# sidecar YAML key path -> CRD path under spec.sidecar, or None with the reason it is not there.
SIDECAR_KEYS = {
    "listen": None,  # the pod's port layout is the operator's
    "upstream": None,  # always the runtime on localhost
    "max_body_bytes": "maxBodyBytes",
    "connect_timeout": "timeouts.connect",
    "upstream_timeout": "timeouts.upstream",
    "drain_timeout": "timeouts.drain",
    "client_write_timeout": "timeouts.clientWrite",
    "client_idle_timeout": "timeouts.clientIdle",
    "max_connections": "maxConnections",
    "default_class": "defaultClass",
    "classes": "classes",
    "api_keys": None,  # secrets: apiKeysSecretName names a Secret instead
    "require_api_key": "requireApiKey",
    "admission.max_concurrency": "admission.maxConcurrency",
    "admission.reserved_for_top": "admission.reservedForTop",
    "admission.max_queue": "admission.maxQueue",
    "admission.max_queue_per_class": "admission.maxQueuePerClass",
    "admission.initial_service_time": "admission.initialServiceTime",
    "admission.ewma_alpha": "admission.ewmaAlpha",
    "admission.codel_target": "admission.codelTarget",
    "admission.codel_interval": "admission.codelInterval",
    "admission.min_retry_after": "admission.minRetryAfter",
    "rate_limits.default.requests_per_second": "rateLimits.default.requestsPerSecond",
    "rate_limits.default.request_burst": "rateLimits.default.requestBurst",
    "rate_limits.default.tokens_per_second": "rateLimits.default.tokensPerSecond",
    "rate_limits.default.token_burst": "rateLimits.default.tokenBurst",
    "rate_limits.overrides": "rateLimits.overrides",
    "rate_limits.max_tracked_keys": "rateLimits.maxTrackedKeys",
    "circuit_breaker.window_type": "circuitBreaker.windowType",
    "circuit_breaker.window_size": "circuitBreaker.windowSize",
    "circuit_breaker.minimum_calls": "circuitBreaker.minimumCalls",
    "circuit_breaker.failure_rate_threshold": "circuitBreaker.failureRateThreshold",
    "circuit_breaker.slow_call_duration": "circuitBreaker.slowCallDuration",
    "circuit_breaker.slow_call_rate_threshold": "circuitBreaker.slowCallRateThreshold",
    "circuit_breaker.open_duration": "circuitBreaker.openDuration",
    "circuit_breaker.half_open_permitted_calls": "circuitBreaker.halfOpenPermittedCalls",
    "degrade.fallback_model": None,  # from spec.fallbackModel.name
    "degrade.fallback_upstream": None,  # the same pod's runtime serves both models
    "degrade.slo_ttft_p99": None,  # from spec.slo.ttftP99Seconds
    "degrade.top_class_only_when_primary_down": "degrade.topClassOnlyWhenPrimaryDown",
    "cache.enabled": "cache.enabled",
    "cache.max_bytes": "cache.maxBytes",
    "cache.ttl": "cache.ttl",
    "cache.max_entry_bytes": "cache.maxEntryBytes",
    "retries.enabled": "retries.enabled",
    "retries.max_retries": "retries.maxRetries",
    "retries.budget_percent": "retries.budgetPercent",
    "retries.min_retries_per_second": "retries.minRetriesPerSecond",
    "retries.backoff": "retries.backoff",
    "metrics.ttft_buckets": "metrics.ttftBuckets",
    "metrics.e2e_buckets": "metrics.e2eBuckets",
    "metrics.stats_window": "metrics.statsWindow",
    "metrics.stats_bucket": "metrics.statsBucket",
}


def _leaves(d: dict, prefix=""):
    for k, v in d.items():
        path = f"{prefix}.{k}" if prefix else k
        if isinstance(v, dict) and v and path not in SIDECAR_KEYS:
            yield from _leaves(v, path)
        else:
            yield path, v


def test_sidecar_fields_mirror_the_sidecar_config_and_its_defaults():
    example = yaml.load((ROOT / "sidecar/kinfer-sidecar.example.yaml").read_text(),
                        Loader=yaml.BaseLoader)  # strings only: no YAML 1.1 'on' -> True
    sidecar = _schema_at(root_schema(), "spec.sidecar")
    leaves = dict(_leaves(example))
    assert set(leaves) == set(SIDECAR_KEYS), \
        f"the sidecar config changed: {set(leaves) ^ set(SIDECAR_KEYS)}; map it in the CRD"
    for key, crd_path in SIDECAR_KEYS.items():
        if crd_path is None:
            continue
        node = _schema_at(sidecar, crd_path)
        assert node is not None, f"{key}: spec.sidecar.{crd_path} is not in the CRD"
        want = leaves[key]
        if key in ("classes", "rate_limits.overrides") or key.startswith("metrics.") and \
                key.endswith("buckets"):
            assert "default" not in node, f"{crd_path}: left out = the sidecar's default"
            continue
        if key == "admission.max_concurrency":
            # Left out, it follows spec.runtime.maxRunningRequests (the operator resolves it),
            # not the sidecar's own default: the sidecar lets through what the runtime batches.
            assert "default" not in node and "maxRunningRequests" in node["description"]
            continue
        assert "default" in node, f"spec.sidecar.{crd_path} needs the sidecar's default {want}"
        got = node["default"]
        if re.fullmatch(r"[0-9.]+(ns|us|ms|s|m|h)", str(want)):
            assert _duration_ns(got) == _duration_ns(want), f"{crd_path}: {got} != {want}"
        elif re.fullmatch(r"[0-9]+(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)", str(want)):
            assert _bytes(got) == _bytes(want), f"{crd_path}: {got} != {want}"
        elif want in ("true", "false"):
            assert got is (want == "true"), f"{crd_path}: {got} != {want}"
        else:
            assert str(got) == want or float(got) == float(want), f"{crd_path}: {got} != {want}"
    # A class given in the spec starts from the sidecar's per-class defaults (sidecar_config.h:
    # timeout 60s, fallback_model true, max_tokens_cap 0, on: every trigger).
    item = sidecar["properties"]["classes"]["items"]["properties"]
    assert _duration_ns(item["timeout"]["default"]) == 60e9
    degrade = item["degrade"]["properties"]
    assert degrade["fallbackModel"]["default"] is True
    assert degrade["maxTokensCap"]["default"] == 0
    assert degrade["triggers"]["default"] == example["classes"][0]["degrade"]["on"]
    assert degrade["triggers"]["items"]["enum"] == ["breaker_open", "deadline", "slo"]


def test_autoscaling_defaults_match_the_autoscaler():
    header = (ROOT / "operator/autoscale/autoscaler.h").read_text()
    struct = header[header.index("struct AutoscalerConfig"):]
    struct = struct[:struct.index("};")]

    def default(name):
        m = re.search(rf"\b{name} = ([^;]+);", struct)
        assert m, f"AutoscalerConfig.{name} not found"
        text = m.group(1)
        s = re.fullmatch(r"std::chrono::seconds\((\d+)\)", text)
        return float(s.group(1)) if s else float(text)

    auto = _schema_at(root_schema(), "spec.autoscaling")["properties"]
    pairs = {"minReplicas": "min_replicas", "maxReplicas": "max_replicas",
             "targetQueueDepthPerReplica": "target_load_per_replica",
             "stableWindowSeconds": "stable_window", "panicWindowPercent": "panic_window_percent",
             "panicThreshold": "panic_threshold", "scaleDownDelaySeconds": "scale_down_delay",
             "maxScaleUpRate": "max_scale_up_rate", "maxScaleDownRate": "max_scale_down_rate"}
    for field, member in pairs.items():
        assert float(auto[field]["default"]) == default(member), field


# ==== the Helm chart =============================================================================

# The operator's rules, pinned: (apiGroup, resource) -> verbs. Changing RBAC means changing this.
OPERATOR_RULES = {
    ("serving.kinfer.dev", "inferenceservices"): {"get", "list", "watch"},
    ("serving.kinfer.dev", "inferenceservices/status"): {"get", "update", "patch"},
    ("serving.kinfer.dev", "inferenceservices/finalizers"): {"update"},
    ("apps", "deployments"): {"get", "list", "watch", "create", "update", "patch"},
    ("", "services"): {"get", "list", "watch", "create", "update", "patch"},
    ("", "configmaps"): {"get", "list", "watch", "create", "update", "patch"},
    ("policy", "poddisruptionbudgets"): {"get", "list", "watch", "create", "update", "patch",
                                         "delete"},
    ("", "pods"): {"list", "watch"},
    ("", "events"): {"create", "patch"},
}
LEASE_RULES = {("coordination.k8s.io", "leases"): {"get", "create", "update"}}

VALUE_SETS = {
    "defaults": {},
    "namespaces": {"watchNamespaces": ["team-a", "team-b"], "logLevel": "debug",
                   "allowHostPathModels": ["/models", "/data/llm"]},
    "ha-prometheus": {"replicaCount": 2,
                      "metricsSource": {"type": "prometheus",
                                        "prometheusUrl": "http://prometheus.monitoring:9090"},
                      "image": {"tag": "dev"}, "imagePullSecrets": [{"name": "regcred"}],
                      "nodeSelector": {"kubernetes.io/os": "linux"},
                      "tolerations": [{"key": "ops", "operator": "Exists"}],
                      "podLabels": {"team": "ml"}, "priorityClassName": "system-cluster-critical",
                      "metrics": {"port": 9090, "service": {"annotations": {"a": "b"}}},
                      "health": {"port": 9091}},
    "minimal-objects": {"leaderElection": {"enabled": False},
                        "rbac": {"create": False}, "serviceAccount": {"create": False,
                                                                      "name": "existing"},
                        "metrics": {"service": {"enabled": False}}},
}


def render(values: dict, name="kinfer", namespace="kinfer-system"):
    return helm_render.render_chart(CHART, values, name, namespace)


def objects(values: dict, **kw) -> list[dict]:
    return [obj for _, obj in helm_render.manifests(render(values, **kw))]


def _rules(role: dict) -> dict:
    out: dict = {}
    for rule in role["rules"]:
        for field in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule[field], f"{role['metadata']['name']}: '*' in {field}"
        assert not rule.get("nonResourceURLs") and not rule.get("resourceNames")
        for group in rule["apiGroups"]:
            for res in rule["resources"]:
                key = (group, res)
                assert key not in out, f"{key} granted twice"
                out[key] = set(rule["verbs"])
    return out


def test_chart_metadata():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2" and chart["name"] == "kinfer"
    assert re.fullmatch(r"\d+\.\d+\.\d+", chart["version"])
    assert chart["type"] == "application" and chart["appVersion"]


@pytest.mark.parametrize("case", list(VALUE_SETS), ids=list(VALUE_SETS))
def test_chart_renders_valid_objects(case):
    values = VALUE_SETS[case]
    objs = objects(values)
    kinds = sorted(o["kind"] for o in objs)
    if case == "minimal-objects":
        assert kinds == ["Deployment"]
    for o in objs:
        assert o["apiVersion"] and o["kind"] and o["metadata"]["name"]
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", o["metadata"]["name"])
        assert len(o["metadata"]["name"]) <= 63
        if o["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
            assert o["metadata"]["namespace"], f"{o['kind']} needs a namespace"
        labels = o["metadata"].get("labels", {})
        assert labels.get("app.kubernetes.io/managed-by") == "Helm"
    by_kind: dict = {}
    for o in objs:
        by_kind.setdefault(o["kind"], []).append(o)
    (dep,) = by_kind["Deployment"]
    assert dep["metadata"]["namespace"] == "kinfer-system"
    pod = dep["spec"]["template"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    (c,) = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert set(ports) == {"metrics", "health"} and len(set(ports.values())) == 2
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    args = c["args"]
    assert f"--metrics-bind-address=:{ports['metrics']}" in args
    assert f"--health-probe-bind-address=:{ports['health']}" in args
    le = values.get("leaderElection", {}).get("enabled", True)
    assert f"--leader-elect={'true' if le else 'false'}" in args
    assert "--leader-election-namespace=kinfer-system" in args
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert c["resources"]["limits"]["memory"]
    sa_name = pod["spec"]["serviceAccountName"]
    if values.get("serviceAccount", {}).get("create", True):
        (sa,) = by_kind["ServiceAccount"]
        assert sa["metadata"]["name"] == sa_name
    else:
        assert "ServiceAccount" not in by_kind and sa_name == "existing"
    # Service -> pods and port.
    for svc in by_kind.get("Service", []):
        assert svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
        for p in svc["spec"]["ports"]:
            assert p["targetPort"] in ports and p["port"] == ports[p["targetPort"]]
    if values.get("metrics", {}).get("service", {}).get("enabled", True):
        assert len(by_kind["Service"]) == 1
    # RBAC: the operator's exact rules, bound to its service account, nothing wider.
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
             for o in objs if o["kind"] in ("Role", "ClusterRole")}
    for o in objs:
        if o["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            ref = o["roleRef"]
            ns = o["metadata"].get("namespace") if ref["kind"] == "Role" else None
            assert (ref["kind"], ns, ref["name"]) in roles, f"binding to a missing {ref}"
            assert o["subjects"] == [{"kind": "ServiceAccount", "name": sa_name,
                                      "namespace": "kinfer-system"}]
    for key, role in roles.items():
        rules = _rules(role)
        name = role["metadata"]["name"]
        if name.endswith(("-edit", "-view")):
            assert role["kind"] == "ClusterRole"
            assert all(g == "serving.kinfer.dev" for g, _ in rules), "user roles: kinfer only"
            assert not any(r.endswith("/status") and v - {"get", "list", "watch"}
                           for (_, r), v in rules.items()), "users never write status"
        elif name.endswith("-leader-election"):
            assert role["kind"] == "Role" and role["metadata"]["namespace"] == "kinfer-system"
            assert rules == LEASE_RULES
        else:
            assert rules == OPERATOR_RULES, f"{key}: not the pinned least-privilege rules"
    watch = values.get("watchNamespaces", [])
    operator_roles = [k for k in roles if not k[2].endswith(("-edit", "-view",
                                                             "-leader-election"))]
    if not values.get("rbac", {}).get("create", True):
        assert not operator_roles
    elif watch:
        assert sorted(k[1] for k in operator_roles) == sorted(watch)
        assert all(k[0] == "Role" for k in operator_roles)
        assert f"--watch-namespaces={','.join(watch)}" in args
        assert "ClusterRoleBinding" not in by_kind
    else:
        assert [k[0] for k in operator_roles] == ["ClusterRole"]
    has_lease_role = any(k[2].endswith("-leader-election") for k in roles)
    assert has_lease_role == (le and values.get("rbac", {}).get("create", True))


def test_chart_values_reach_the_deployment():
    (dep,) = [o for o in objects(VALUE_SETS["ha-prometheus"]) if o["kind"] == "Deployment"]
    spec = dep["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    assert dep["spec"]["replicas"] == 2
    assert c["image"] == "kinfer/kinfer-operator:dev"
    assert "--metrics-source=prometheus" in c["args"]
    assert "--prometheus-url=http://prometheus.monitoring:9090" in c["args"]
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]
    assert spec["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert spec["tolerations"] == [{"key": "ops", "operator": "Exists"}]
    assert spec["priorityClassName"] == "system-cluster-critical"
    assert dep["spec"]["template"]["metadata"]["labels"]["team"] == "ml"
    (dep,) = [o for o in objects({}) if o["kind"] == "Deployment"]
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert c["image"] == f"kinfer/kinfer-operator:{chart['appVersion']}"
    assert "--default-runtime-image=kinfer/kinfer-runtime:0.1.0" in c["args"]


BAD_VALUES = [
    ({"replicaCount": 2, "leaderElection": {"enabled": False}}, "needs leaderElection.enabled"),
    ({"metricsSource": {"type": "prometheus"}}, "needs metricsSource.prometheusUrl"),
    ({"metrics": {"port": 9000}, "health": {"port": 9000}}, "must differ"),
    ({"podLabels": {"app.kubernetes.io/instance": "x"}}, "selects its pods by it"),
]
BAD_VALUE_IDS = ["ha-without-leader-election", "prometheus-without-url", "one-port-twice",
                 "pod-label-on-the-selector"]
# Refused by values.schema.json before any template runs (Helm's message names the field).
SCHEMA_BAD_VALUES = [
    ({"metricsSource": {"type": "Prometheus"}}, "metricsSource.type"),
    ({"replicas": 2}, "replicas"),  # a misspelt key: replicaCount
    ({"logLevel": "verbose"}, "logLevel"),
    ({"watchNamespaces": "default"}, "watchNamespaces"),
    ({"metrics": {"port": 70000}}, "metrics.port"),
    ({"image": {"pullPolicy": "sometimes"}}, "image.pullPolicy"),
]
SCHEMA_BAD_IDS = ["capitalised-source", "misspelt-key", "log-level", "namespaces-not-a-list",
                  "port-out-of-range", "pull-policy"]


@pytest.mark.parametrize("values,message", BAD_VALUES, ids=BAD_VALUE_IDS)
def test_chart_refuses_bad_values(values, message):
    with pytest.raises(helm_render.FailError, match=message):
        render(values)


@pytest.mark.parametrize("values,field", SCHEMA_BAD_VALUES, ids=SCHEMA_BAD_IDS)
def test_values_schema_refuses_wrong_types_and_unknown_keys(values, field):
    with pytest.raises(helm_render.SchemaError, match=field.split(".")[-1]):
        render(values)


def test_values_schema_accepts_the_defaults_and_every_value_set():
    for values in [{}, *VALUE_SETS.values()]:
        render(values)


def test_host_path_models_are_refused_unless_the_chart_allows_directories():
    (dep,) = [o for o in objects({}) if o["kind"] == "Deployment"]
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not any(a.startswith("--allow-host-path-models") for a in args)
    (dep,) = [o for o in objects({"allowHostPathModels": ["/models", "/data/llm"]})
              if o["kind"] == "Deployment"]
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--allow-host-path-models=/models,/data/llm" in args


def test_chart_release_name_and_notes():
    rendered = render({}, name="prod", namespace="ml-serving")
    objs = [o for _, o in helm_render.manifests(rendered)]
    (dep,) = [o for o in objs if o["kind"] == "Deployment"]
    assert dep["metadata"]["name"] == "prod-operator"
    assert dep["metadata"]["namespace"] == "ml-serving"
    notes = rendered["templates/NOTES.txt"]
    assert "kubectl get kisvc" in notes and "ml-serving" in notes
    assert "deployment/prod-operator" in notes and "kubectl scale kisvc" in notes


# Helm allows release names of up to 53 characters; <release>-operator then takes 62.
LONG_RELEASE = "a-long-release-name-for-the-kinfer-operator-chart-xyz"


def _check_long_names(objs):
    names = [(o["kind"], o["metadata"]["name"]) for o in objs]
    for kind, name in names:
        # Every name fits a DNS label (a Service's name must be one, RFC 1035), and suffixed
        # names keep their suffix rather than colliding with the plain one.
        assert len(name) <= 63, f"{kind} {name}: {len(name)} characters"
        assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name), f"{kind} {name}"
    assert len(set(names)) == len(names), names
    by_kind = {}
    for kind, name in names:
        by_kind.setdefault(kind, []).append(name)
    (svc,) = by_kind["Service"]
    assert svc.endswith("-metrics")
    assert sorted(n.rsplit("-", 1)[-1] for n in by_kind["ClusterRole"] if n.endswith(
        ("-edit", "-view"))) == ["edit", "view"]
    assert any(n.endswith("-leader-election") for n in by_kind["Role"])


def test_a_long_release_name_gives_names_of_at_most_63_characters():
    assert len(LONG_RELEASE) == 53
    objs = objects({}, name=LONG_RELEASE)
    assert {"Service", "ClusterRole", "Role", "Deployment"} <= {o["kind"] for o in objs}
    _check_long_names(objs)


def test_values_file_keys_are_all_used():
    # Every leaf of values.yaml is read by some template (a dead value is a documentation lie).
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    text = "".join(p.read_text() for p in (CHART / "templates").iterdir())

    def leaves(d, prefix=""):
        for k, v in d.items():
            path = f"{prefix}.{k}" if prefix else k
            if isinstance(v, dict) and v and k not in ("resources", "podSecurityContext",
                                                       "securityContext"):
                yield from leaves(v, path)
            else:
                yield path

    for path in leaves(values):
        assert f".Values.{path}" in text, f"values.yaml: {path} is not used by any template"


def test_renderer_rejects_unknown_constructs(tmp_path):
    chart = tmp_path / "c"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: c\nversion: 0.1.0\n")
    (chart / "values.yaml").write_text("a: 1\n")
    (chart / "templates" / "x.yaml").write_text("v: {{ .Values.b }}\n")
    with pytest.raises(helm_render.TemplateError, match="no entry for key 'b'"):
        helm_render.render_chart(chart)
    (chart / "templates" / "x.yaml").write_text("v: {{ .Values.a | sha256sum }}\n")
    with pytest.raises(helm_render.TemplateError, match="outside the supported subset"):
        helm_render.render_chart(chart)
    (chart / "templates" / "x.yaml").write_text(
        "{{- range $i, $v := .Values.l }}\n- {{ $i }}={{ $v }} {{ $.Values.a }}\n{{- end }}\n")
    (chart / "values.yaml").write_text("a: 1\nl: [x, y]\n")
    assert helm_render.render_chart(chart)["templates/x.yaml"] == "\n- 0=x 1\n- 1=y 1\n"


# ==== a real helm binary, when there is one ======================================================


def _helm() -> str | None:
    return os.environ.get("KINFER_HELM") or shutil.which("helm")


needs_helm = pytest.mark.skipif(_helm() is None,
                                reason="no helm binary ($KINFER_HELM or helm on PATH)")


@needs_helm
def test_helm_lint_strict():
    out = subprocess.run([_helm(), "lint", "--strict", str(CHART)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


@needs_helm
@pytest.mark.parametrize("case", list(VALUE_SETS), ids=list(VALUE_SETS))
def test_helm_template_matches_the_subset_renderer(case, tmp_path):
    values = VALUE_SETS[case]
    values_file = tmp_path / "values.json"
    values_file.write_text(json.dumps(values))
    out = subprocess.run([_helm(), "template", "kinfer", str(CHART), "-n", "kinfer-system",
                          "-f", str(values_file)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    real = [d for d in yaml.safe_load_all(out.stdout) if d]
    ours = objects(values)
    key = lambda o: (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])  # noqa
    assert sorted(map(key, real)) == sorted(map(key, ours))
    ours_by_key = {key(o): o for o in ours}
    for o in real:
        assert o == ours_by_key[key(o)], f"{key(o)} differs between helm and helm_render.py"


@needs_helm
def test_helm_template_with_a_long_release_name(tmp_path):
    out = subprocess.run([_helm(), "template", LONG_RELEASE, str(CHART), "-n", "kinfer-system"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    real = [d for d in yaml.safe_load_all(out.stdout) if d]
    _check_long_names(real)
    key = lambda o: (o["kind"], o["metadata"]["name"])  # noqa: E731
    assert sorted(map(key, real)) == sorted(map(key, objects({}, name=LONG_RELEASE)))


@needs_helm
@pytest.mark.parametrize("values,message", BAD_VALUES + SCHEMA_BAD_VALUES,
                         ids=BAD_VALUE_IDS + SCHEMA_BAD_IDS)
def test_helm_template_refuses_bad_values(values, message, tmp_path):
    values_file = tmp_path / "values.json"
    values_file.write_text(json.dumps(values))
    out = subprocess.run([_helm(), "template", "kinfer", str(CHART), "-f", str(values_file)],
                         capture_output=True, text=True, timeout=120)
    # Helm names a schema error's field as a path (/metricsSource/type): match its last part.
    assert out.returncode != 0 and message.split(".")[-1] in out.stderr, out.stderr


# ==== docs/crd.md =================================================================================


def _doc_default(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_doc_default(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{}" if not value else repr(value)
    return str(value)


def test_crd_reference_names_every_field_with_its_default():
    doc = DOC.read_text()
    rows = {}
    for line in doc.splitlines():
        m = re.match(r"^\|\s*`((?:spec|status)[^`]*)`\s*\|([^|]*)\|([^|]*)\|", line)
        if m:
            rows[m.group(1)] = (m.group(2).strip(), m.group(3).strip().strip("`"))
    schema = root_schema()
    missing = []
    for top in ("spec", "status"):
        for path, node in walk(schema["properties"][top], top):
            if path.endswith(("[]", ".<name>")):
                continue
            if path not in rows:
                missing.append(path)
                continue
            if "default" in node:
                assert rows[path][1] == _doc_default(node["default"]), \
                    f"docs/crd.md: {path} default {rows[path][1]!r}, schema {node['default']!r}"
    assert not missing, f"docs/crd.md lacks rows for: {missing}"
    extra = [p for p in rows if not any(p == q for q, _ in walk(schema["properties"]["spec"], "spec"))
             and not any(p == q for q, _ in walk(schema["properties"]["status"], "status"))]
    assert not extra, f"docs/crd.md names fields the schema does not have: {extra}"
