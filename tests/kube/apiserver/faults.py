"""Fault injection and request counters (the /_test/faults and /_test/stats endpoints)."""
from __future__ import annotations

import collections
import random
import threading

from .store import ApiError

# code -> (reason, message) of the Status an injected error carries
_FAULTS = {
    400: ("BadRequest", "injected fault: bad request"),
    403: ("Forbidden", "injected fault: forbidden"),
    404: ("NotFound", "injected fault: not found"),
    409: ("Conflict", "Operation cannot be fulfilled: injected conflict; please apply your "
                      "changes to the latest version and try again"),
    410: ("Gone", "injected fault: gone"),
    429: ("TooManyRequests", "the server has received too many requests and has asked us to try "
                             "again later (injected fault)"),
    500: ("InternalError", "Internal error occurred: injected fault"),
    503: ("ServiceUnavailable", "the server is currently unable to handle the request (injected "
                                "fault)"),
    504: ("Timeout", "the server was unable to return a response in the time allotted, but may "
                     "still be processing the request (injected fault)"),
}

FAULT_KEYS = {"errorRate", "errorCode", "nextErrors", "nextErrorCode", "retryAfterSeconds",
              "latencyMs", "verbs", "resources", "watchDropAfterEvents", "dropMode", "seed",
              "dropWatches", "clear"}
DROP_MODES = ("close", "reset", "end")


def fault_error(code: int, retry_after: int | None) -> ApiError:
    reason, message = _FAULTS.get(code, ("Unknown", f"injected fault: HTTP {code}"))
    details, headers = None, {}
    if retry_after is not None and code in (429, 503, 504):
        details = {"retryAfterSeconds": retry_after}
        headers["Retry-After"] = str(retry_after)
    return ApiError(code, reason, message, details, headers)


class Faults:
    def __init__(self):
        self.lock = threading.Lock()
        self.clear()

    def clear(self):
        self.error_rate = 0.0
        self.error_code = 500
        self.next_errors = 0
        self.next_error_code = 500
        self.retry_after = 1
        self.latency_ms = 0.0
        self.verbs: set | None = None
        self.resources: set | None = None
        self.watch_drop_after = 0
        self.drop_mode = "close"
        self.rng = random.Random(0)

    def update(self, cfg: dict):
        """Applies a /_test/faults body; raises ValueError on a bad one."""
        unknown = set(cfg) - FAULT_KEYS
        if unknown:
            raise ValueError(f"unknown fault keys {sorted(unknown)}; known: {sorted(FAULT_KEYS)}")
        with self.lock:
            if cfg.get("clear"):
                self.clear()
            if "errorRate" in cfg:
                rate = float(cfg["errorRate"])
                if not 0 <= rate <= 1:
                    raise ValueError("errorRate must be in [0, 1]")
                self.error_rate = rate
            if "errorCode" in cfg:
                self.error_code = int(cfg["errorCode"])
            if "nextErrors" in cfg:
                self.next_errors = int(cfg["nextErrors"])
            if "nextErrorCode" in cfg:
                self.next_error_code = int(cfg["nextErrorCode"])
            if "retryAfterSeconds" in cfg:
                self.retry_after = None if cfg["retryAfterSeconds"] is None else \
                    int(cfg["retryAfterSeconds"])
            if "latencyMs" in cfg:
                self.latency_ms = float(cfg["latencyMs"])
            if "verbs" in cfg:
                self.verbs = set(cfg["verbs"]) if cfg["verbs"] else None
            if "resources" in cfg:
                self.resources = set(cfg["resources"]) if cfg["resources"] else None
            if "watchDropAfterEvents" in cfg:
                self.watch_drop_after = int(cfg["watchDropAfterEvents"] or 0)
            if "dropMode" in cfg:
                if cfg["dropMode"] not in DROP_MODES:
                    raise ValueError(f"dropMode must be one of {DROP_MODES}")
                self.drop_mode = cfg["dropMode"]
            if "seed" in cfg:
                self.rng = random.Random(cfg["seed"])

    def view(self) -> dict:
        with self.lock:
            return {"errorRate": self.error_rate, "errorCode": self.error_code,
                    "nextErrors": self.next_errors, "nextErrorCode": self.next_error_code,
                    "retryAfterSeconds": self.retry_after, "latencyMs": self.latency_ms,
                    "verbs": sorted(self.verbs) if self.verbs else None,
                    "resources": sorted(self.resources) if self.resources else None,
                    "watchDropAfterEvents": self.watch_drop_after, "dropMode": self.drop_mode}

    def pick(self, verb: str, resource: str):
        """(latency seconds, ApiError or None) for one API request."""
        with self.lock:
            if self.verbs and verb not in self.verbs:
                return 0.0, None
            if self.resources and resource not in self.resources and \
                    resource.split("/")[0] not in self.resources:
                return 0.0, None
            err = None
            if self.next_errors > 0:
                self.next_errors -= 1
                err = fault_error(self.next_error_code, self.retry_after)
            elif self.error_rate and self.rng.random() < self.error_rate:
                err = fault_error(self.error_code, self.retry_after)
            return self.latency_ms / 1000.0, err


class Stats:
    WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")

    def __init__(self):
        self.lock = threading.Lock()
        self.clear()

    def clear(self):
        with self.lock:
            self.total = 0
            self.by_verb = collections.Counter()
            self.by_resource = collections.defaultdict(collections.Counter)
            self.by_code = collections.Counter()
            self.writes = collections.Counter()
            self.writes_by_resource = collections.defaultdict(collections.Counter)
            self.writes_by_agent = collections.Counter()
            self.writes_failed = 0
            self.watches = collections.Counter()
            self.faults = collections.Counter()

    def request(self, verb, resource, agent):
        with self.lock:
            self.total += 1
            self.by_verb[verb] += 1
            self.by_resource[resource][verb] += 1
            if verb in self.WRITE_VERBS:
                self.writes[verb] += 1
                self.writes_by_resource[resource][verb] += 1
                self.writes_by_agent[agent or ""] += 1

    def response(self, verb, code):
        with self.lock:
            self.by_code[str(code)] += 1
            if verb in self.WRITE_VERBS and code >= 400:
                self.writes_failed += 1

    def fault(self, code):
        with self.lock:
            self.faults[str(code)] += 1

    def watch(self, what, n=1):
        with self.lock:
            self.watches[what] += n

    def view(self, store_counters: dict, active_watches: int) -> dict:
        with self.lock:
            w = {k: self.watches.get(k, 0) for k in (
                "opened", "dropped", "timedOut", "clientClosed", "expired", "tooLarge",
                "eventsSent", "bookmarksSent")}
            w["active"] = active_watches
            return {
                "requests": {"total": self.total, "byVerb": dict(self.by_verb),
                             "byResource": {r: dict(c) for r, c in self.by_resource.items()},
                             "byCode": dict(self.by_code)},
                "writes": {"total": sum(self.writes.values()), "byVerb": dict(self.writes),
                           "byResource": {r: dict(c) for r, c in
                                          self.writes_by_resource.items()},
                           "byUserAgent": dict(self.writes_by_agent),
                           "failed": self.writes_failed,
                           "effective": store_counters.get("effectiveWrites", 0),
                           "noop": store_counters.get("noopWrites", 0),
                           "internal": store_counters.get("internalWrites", 0)},
                "watches": w,
                "faults": {"injected": sum(self.faults.values()), "byCode": dict(self.faults)},
            }
