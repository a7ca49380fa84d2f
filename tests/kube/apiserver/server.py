"""kinfer-test-apiserver: a Kubernetes API server for tests, on 127.0.0.1 over HTTP/1.1.

Routing (the real URL layout), list and watch streaming, the /_test control endpoints, and main().
See README.md in this folder for what it models and what it does not.
"""
from __future__ import annotations

import argparse
import json
import os
import select
import signal
import socket
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

from . import kinds as kindmod
from . import selection
from .faults import Faults, Stats
from .schema import load_crd
from .store import ApiError, Expired, Store, bad_request, dumps

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__)))))
DEFAULT_CRD = os.path.join(ROOT, "crds", "serving.kinfer.dev_inferenceservices.yaml")
VERSION = {"major": "1", "minor": "31", "gitVersion": "v1.31.0-kinfer-test",
           "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
           "buildDate": "2024-08-13T00:00:00Z", "goVersion": "go1.22.5", "compiler": "gc",
           "platform": "linux/amd64"}
WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")
PATCH_TYPES = {"application/merge-patch+json": "merge", "application/json-patch+json": "json",
               "application/strategic-merge-patch+json": "strategic"}


class Watcher:
    def __init__(self, kind, ns, label_reqs, field_reqs, agent):
        self.kind, self.ns = kind, ns
        self.label_reqs, self.field_reqs = label_reqs, field_reqs
        self.agent = agent
        self.pos = 0
        self.sent = 0
        self.drop: str | None = None  # set by /_test/faults dropWatches: close | reset | end

    def matches(self, obj) -> bool:
        if self.label_reqs and not selection.labels_match(self.label_reqs,
                                                          obj["metadata"].get("labels")):
            return False
        return not self.field_reqs or selection.fields_match(self.field_reqs, obj)

    def view(self, ev):
        """(type, object bytes) this watcher sees for a stored event, or None."""
        if ev.plural != self.kind.plural or (self.ns and ev.ns != self.ns):
            return None
        if not self.label_reqs and not self.field_reqs:
            return ev.type, ev.data
        now = self.matches(ev.obj)
        if ev.type == "ADDED":
            return (ev.type, ev.data) if now else None
        before = ev.prev is not None and self.matches(ev.prev)
        if ev.type == "DELETED":
            return (ev.type, ev.data) if before or now else None
        if now and before:
            return "MODIFIED", ev.data
        if now:
            return "ADDED", ev.data
        if before:
            return "DELETED", ev.data
        return None


class HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the listen backlog (socketserver's default is 5)


class ApiServer:
    def __init__(self, args):
        self.args = args
        self.crd = load_crd(args.crd) if args.crd else None
        self.kinds = kindmod.build_kinds(self.crd)
        self.store = Store(self.kinds, history=args.history, initial_rv=args.initial_rv)
        self.store.config.update({"gcDelay": args.gc_delay,
                                  "deploymentController": args.deployment_controller,
                                  "controllerDelay": args.controller_delay})
        self.config = {"bookmarkInterval": args.bookmark_interval,
                       "watchTimeout": args.watch_timeout, "tooLargeWait": args.too_large_wait}
        self.initial_config = dict(self.config, **self.store.config, history=args.history)
        self.faults = Faults()
        self.stats = Stats()
        self.watchers: set[Watcher] = set()
        self.groups = {}
        for k in self.kinds.values():
            self.groups.setdefault(k.group, {}).setdefault(k.version, []).append(k)
        if args.state_file and os.path.exists(args.state_file):
            with open(args.state_file, encoding="utf-8") as f:
                self.store.restore(json.load(f))
        self.store.bootstrap(self.crd)
        self.httpd = HttpServer(("127.0.0.1", args.port), Handler)
        self.httpd.api = self
        self.port = self.httpd.server_address[1]

    # ---- config and state -----------------------------------------------------------------------

    def set_config(self, cfg: dict):
        known = {"bookmarkInterval", "watchTimeout", "tooLargeWait", "history", "gcDelay",
                 "deploymentController", "controllerDelay"}
        unknown = set(cfg) - known
        if unknown:
            raise bad_request(f"unknown config keys {sorted(unknown)}; known: {sorted(known)}")
        for k in ("bookmarkInterval", "watchTimeout", "tooLargeWait"):
            if k in cfg:
                self.config[k] = float(cfg[k])
        with self.store.lock:
            for k in ("gcDelay", "controllerDelay"):
                if k in cfg:
                    self.store.config[k] = float(cfg[k])
            if "deploymentController" in cfg:
                self.store.config["deploymentController"] = bool(cfg["deploymentController"])
        if "history" in cfg:
            self.store.set_history(int(cfg["history"]))

    def view_config(self) -> dict:
        return dict(self.config, **self.store.config, history=self.store.history)

    def drop_watches(self, mode: str, resources=None) -> int:
        with self.store.lock:
            n = 0
            for w in list(self.watchers):
                if resources and w.kind.plural not in resources:
                    continue
                w.drop = mode
                n += 1
            self.store.cond.notify_all()
        return n

    def reset(self):
        self.drop_watches("close")
        deadline = time.monotonic() + 2
        while self.watchers and time.monotonic() < deadline:
            time.sleep(0.01)
        self.faults.clear()
        self.store.reset(self.crd)
        self.stats.clear()
        self.store.counters.clear()
        self.set_config({k: v for k, v in self.initial_config.items()})

    def save(self, path=None) -> str:
        path = path or self.args.state_file
        if not path:
            raise bad_request("no state file: start with --state-file or pass {\"path\": ...}")
        snap = self.store.snapshot()
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(snap, f)
        os.replace(tmp, path)
        return path

    # ---- discovery ------------------------------------------------------------------------------

    def resource_list(self, group, version) -> dict:
        resources = []
        for k in self.groups.get(group, {}).get(version, []):
            verbs = ["get", "list", "watch"] if k.read_only else \
                ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
            resources.append({"name": k.plural, "singularName": k.singular,
                              "namespaced": k.namespaced, "kind": k.kind, "verbs": verbs,
                              **({"shortNames": k.short_names} if k.short_names else {})})
            if k.status:
                resources.append({"name": f"{k.plural}/status", "singularName": "",
                                  "namespaced": k.namespaced, "kind": k.kind,
                                  "verbs": ["get", "patch", "update"]})
            if k.scale:
                resources.append({"name": f"{k.plural}/scale", "singularName": "",
                                  "namespaced": k.namespaced, "group": "autoscaling",
                                  "version": "v1", "kind": "Scale",
                                  "verbs": ["get", "patch", "update"]})
        return {"kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": f"{group}/{version}" if group else version,
                "resources": resources}

    def api_group(self, group) -> dict:
        versions = [{"groupVersion": f"{group}/{v}", "version": v} for v in self.groups[group]]
        return {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": versions,
                "preferredVersion": versions[0]}

    # ---- routing --------------------------------------------------------------------------------

    def route(self, path: str):
        """-> (kind, namespace, name, subresource) or None."""
        parts = [p for p in path.split("/") if p]
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return None
        watch_path = False
        if rest[:1] == ["watch"]:
            watch_path, rest = True, rest[1:]
        served = {k.plural: k for k in self.groups.get(group, {}).get(version, [])}
        ns = None
        if len(rest) >= 3 and rest[0] == "namespaces" and not (
                len(rest) == 3 and rest[2] in ("status", "finalize")):
            ns, rest = rest[1], rest[2:]
        if not rest or rest[0] not in served or len(rest) > 3:
            return None
        kind = served[rest[0]]
        if ns is not None and not kind.namespaced:
            return None
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if sub is not None and sub not in kind.subresources():
            return None
        return kind, ns, name, sub, watch_path


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "kinfer-test-apiserver"
    sys_version = ""

    def log_message(self, fmt, *args):  # noqa: D102
        if self.server.api.args.verbose:
            sys.stderr.write("%s - %s\n" % (self.address_string(), fmt % args))

    def do_GET(self):  # noqa: N802
        self.dispatch("GET")

    def do_POST(self):  # noqa: N802
        self.dispatch("POST")

    def do_PUT(self):  # noqa: N802
        self.dispatch("PUT")

    def do_PATCH(self):  # noqa: N802
        self.dispatch("PATCH")

    def do_DELETE(self):  # noqa: N802
        self.dispatch("DELETE")

    # ---- plumbing -------------------------------------------------------------------------------

    def read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(out)
                out.append(self.rfile.read(size))
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def setup(self):
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def send_bytes(self, code: int, data: bytes, headers=None, ctype="application/json"):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self._headers_buffer.append(b"\r\n" + data)  # headers and body in one send
        self.flush_headers()
        self.status_code = code
        if self.verb:
            self.server.api.stats.response(self.verb, code)

    def send_obj(self, code, obj, headers=None):
        self.send_bytes(code, dumps(obj), headers)

    def send_error_status(self, e: ApiError):
        self.send_bytes(e.code, dumps(e.status()), e.headers)

    def json_body(self, raw: bytes, required=True):
        if not raw:
            if required:
                raise bad_request("the request needs a JSON body")
            return None
        try:
            return json.loads(raw)
        except ValueError as e:
            raise bad_request(f"the body is not valid JSON: {e}") from None

    # ---- dispatch -------------------------------------------------------------------------------

    def dispatch(self, method):
        api: ApiServer = self.server.api
        self.status_code = 0
        self.verb = None
        url = urlsplit(self.path)
        q = dict(parse_qsl(url.query, keep_blank_values=True))
        path = url.path.rstrip("/") or "/"
        try:
            raw = self.read_body()
        except (ValueError, OSError):
            self.close_connection = True
            return
        try:
            if path.startswith("/_test/"):
                return self.handle_test(api, method, path, q, raw)
            if path in ("/healthz", "/readyz", "/livez"):
                return self.send_bytes(200, b"ok", ctype="text/plain; charset=utf-8")
            if path == "/version":
                return self.send_obj(200, VERSION)
            if method == "GET" and self.handle_discovery(api, path):
                return
            routed = api.route(path)
            if routed is None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            kind, ns, name, sub, watch_path = routed
            watch = watch_path or q.get("watch") in ("1", "true")
            verb = {"GET": "watch" if watch else ("get" if name else "list"),
                    "POST": "create", "PUT": "update", "PATCH": "patch",
                    "DELETE": "delete" if name else "deletecollection"}[method]
            resource = f"{kind.plural}/{sub}" if sub else kind.plural
            agent = self.headers.get("User-Agent", "")
            api.stats.request(verb, resource, agent)
            self.verb = verb
            latency, err = api.faults.pick(verb, resource)
            if latency:
                time.sleep(latency)
            if err is not None:
                api.stats.fault(err.code)
                raise err
            if sub is not None and verb not in ("get", "update", "patch"):
                raise ApiError(405, "MethodNotAllowed", f"{verb} is not supported on "
                               f"{resource}; a subresource takes get, update and patch")
            self.handle_resource(api, verb, kind, ns, name, sub, q, raw)
        except ApiError as e:
            self.send_error_status(e)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as e:  # noqa: BLE001
            import traceback
            traceback.print_exc()
            try:
                self.send_error_status(ApiError(500, "InternalError",
                                                f"Internal error occurred: {e!r}"))
            except OSError:
                self.close_connection = True

    def handle_discovery(self, api, path) -> bool:
        if path == "/api":
            self.send_obj(200, {"kind": "APIVersions", "versions": ["v1"],
                                "serverAddressByClientCIDRs": [{
                                    "clientCIDR": "0.0.0.0/0",
                                    "serverAddress": f"127.0.0.1:{api.port}"}]})
            return True
        if path == "/apis":
            groups = [api.api_group(g) for g in api.groups if g]
            for g in groups:
                del g["kind"], g["apiVersion"]
            self.send_obj(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
            return True
        if path == "/api/v1":
            self.send_obj(200, api.resource_list("", "v1"))
            return True
        parts = [p for p in path.split("/") if p]
        if parts[:1] == ["apis"] and len(parts) == 2 and parts[1] in api.groups:
            self.send_obj(200, api.api_group(parts[1]))
            return True
        if parts[:1] == ["apis"] and len(parts) == 3 and parts[2] in api.groups.get(parts[1], {}):
            self.send_obj(200, api.resource_list(parts[1], parts[2]))
            return True
        return False

    # ---- the resource verbs ---------------------------------------------------------------------

    def handle_resource(self, api, verb, kind, ns, name, sub, q, raw):
        store = api.store
        dry_run = q.get("dryRun") == "All"
        strict = q.get("fieldValidation") == "Strict"
        if verb == "watch":
            return self.serve_watch(api, kind, ns, q, name)
        if verb == "get":
            with store.lock:
                e = store.get(kind, ns, name)
                if sub == "scale":
                    return self.send_obj(200, store.scale_of(kind, e.obj))
            return self.send_bytes(200, e.data)
        if verb == "list":
            return self.serve_list(api, kind, ns, q)
        if verb in ("create", "update", "patch") and name is None and verb != "create":
            raise ApiError(405, "MethodNotAllowed", f"{verb} needs a name")
        if verb == "create":
            if name is not None:
                raise ApiError(405, "MethodNotAllowed",
                               "the server does not allow this method on the requested resource")
            if kind.namespaced and ns is None:
                raise ApiError(404, "NotFound", "the server could not find the requested "
                               "resource (create needs a namespace in the path)")
            body = self.json_body(raw)
            entry, warnings = store.create(kind, ns, body, dry_run, strict=strict)
            return self.send_write(201, entry, warnings, q)
        if verb == "update":
            body = self.json_body(raw)
            entry, warnings = store.update(kind, ns, name, body, sub, dry_run, strict)
            return self.send_write(200, entry, warnings, q)
        if verb == "patch":
            ctype = self.headers.get("Content-Type", "").split(";")[0].strip()
            if ctype == "application/apply-patch+yaml":
                raise ApiError(415, "UnsupportedMediaType",
                               "server-side apply (application/apply-patch+yaml) is not "
                               "modelled by the kinfer test API server; use a merge, JSON or "
                               "strategic merge patch, or an update")
            ptype = PATCH_TYPES.get(ctype)
            if ptype is None or (ptype == "strategic" and kind.crd is not None):
                raise ApiError(415, "UnsupportedMediaType",
                               f'the body of the request was in an unknown format - accepted '
                               f'media types include: application/json-patch+json, '
                               f'application/merge-patch+json'
                               + ("" if kind.crd is not None else
                                  ", application/strategic-merge-patch+json"))
            body = self.json_body(raw)
            entry, warnings = store.patch(kind, ns, name, ptype, body, sub, dry_run, strict)
            return self.send_write(200, entry, warnings, q)
        opts = self.json_body(raw, required=False) or {}
        if not isinstance(opts, dict):
            raise bad_request("DeleteOptions must be a JSON object")
        propagation = q.get("propagationPolicy") or opts.get("propagationPolicy")
        orphan = q.get("orphanDependents") or opts.get("orphanDependents")
        if propagation is None and orphan in (True, "true"):
            propagation = "Orphan"
        dry_run = dry_run or opts.get("dryRun") == ["All"]
        if verb == "delete":
            code, data = store.delete(kind, ns, name, propagation,
                                      opts.get("preconditions"), dry_run)
            return self.send_bytes(code, data)
        label_reqs, field_reqs = self.selectors(kind, q)
        items = store.delete_collection(kind, ns, label_reqs, field_reqs, propagation, dry_run)
        with store.lock:
            rv = store.rv
        return self.send_bytes(200, self.list_bytes(kind, rv, items))

    def send_write(self, code, entry, warnings, q):
        headers = {}
        if warnings:
            if q.get("fieldValidation") != "Ignore":
                headers["Warning"] = ", ".join(f'299 - "unknown field \\"{w}\\""'
                                               for w in warnings)
        self.send_bytes(code, entry.data, headers)

    def selectors(self, kind, q):
        try:
            return (selection.parse_label_selector(q.get("labelSelector")),
                    selection.parse_field_selector(q.get("fieldSelector"), kind.field_selectors))
        except selection.SelectorError as e:
            raise bad_request(f"unable to parse requirement: {e}") from None

    @staticmethod
    def list_bytes(kind, rv, items, cont=None, remaining=None) -> bytes:
        meta = {"resourceVersion": str(rv)}
        if cont:
            meta["continue"] = cont
            if remaining is not None:
                meta["remainingItemCount"] = remaining
        head = dumps({"apiVersion": kind.api_version, "kind": kind.list_kind, "metadata": meta})
        return head[:-1] + b',"items":[' + b",".join(items) + b"]}"

    def wait_for_rv(self, api, want: int) -> bool:
        """Waits (up to tooLargeWait) until the store reaches want; lock held by the caller."""
        deadline = time.monotonic() + api.config["tooLargeWait"]
        while api.store.rv < want:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            api.store.cond.wait(left)
        return True

    def too_large(self, api, want) -> ApiError:
        return ApiError(504, "Timeout", f"Too large resource version: {want}, current: "
                        f"{api.store.rv}",
                        {"causes": [{"reason": "ResourceVersionTooLarge",
                                     "message": "Too large resource version"}],
                         "retryAfterSeconds": 1})

    def serve_list(self, api, kind, ns, q):
        import base64
        label_reqs, field_reqs = self.selectors(kind, q)
        store = api.store
        limit = int(q.get("limit") or 0)
        start, list_rv = None, None
        if q.get("continue"):
            try:
                tok = json.loads(base64.b64decode(q["continue"]))
                start, list_rv = tuple(tok["start"]), int(tok["rv"])
            except (ValueError, KeyError, TypeError):
                raise bad_request("invalid continue token") from None
        with store.lock:
            rv_param = q.get("resourceVersion")
            if rv_param and rv_param != "0" and list_rv is None:
                try:
                    want = int(rv_param)
                except ValueError:
                    raise bad_request(f"invalid resource version {rv_param!r}") from None
                if not self.wait_for_rv(api, want):
                    raise self.too_large(api, want)
            if list_rv is not None and list_rv < store.compacted:
                raise ApiError(410, "Expired", "The provided continue parameter is too old to "
                               "display a consistent list result. You can start a new list "
                               "without the continue parameter.")
            matched = store.select(kind, ns, label_reqs, field_reqs, start)
            rv = list_rv if list_rv is not None else store.rv
        cont = remaining = None
        if limit and len(matched) > limit:
            remaining = len(matched) - limit
            matched = matched[:limit]
            cont = base64.b64encode(json.dumps({"rv": rv, "start": list(matched[-1][0])})
                                    .encode()).decode()
        self.send_bytes(200, self.list_bytes(kind, rv, [e.data for _, e in matched], cont,
                                             remaining))

    # ---- watch ----------------------------------------------------------------------------------

    def write_chunk(self, data: bytes):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    @staticmethod
    def event(etype, data: bytes) -> bytes:
        return b'{"type":"%s","object":%s}\n' % (etype.encode(), data)

    def client_gone(self) -> bool:
        try:
            r, _, _ = select.select([self.connection], [], [], 0)
            if r:
                return self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True
        return False

    def serve_watch(self, api, kind, ns, q, name=None):
        store, stats = api.store, api.stats
        label_reqs, field_reqs = self.selectors(kind, q)
        if name:  # the legacy watch of one object: /watch/.../{name} or .../{name}?watch=1
            field_reqs = field_reqs + [("metadata.name", "=", name)]
        rv_param = q.get("resourceVersion", "")
        try:
            start_rv = int(rv_param) if rv_param not in ("", "0") else None
        except ValueError:
            raise bad_request(f"invalid resource version {rv_param!r}") from None
        bookmarks = q.get("allowWatchBookmarks") in ("true", "1")
        send_initial = q.get("sendInitialEvents") == "true"
        timeout = float(q["timeoutSeconds"]) if q.get("timeoutSeconds") else \
            (api.config["watchTimeout"] or None)
        w = Watcher(kind, ns, label_reqs, field_reqs, self.headers.get("User-Agent", ""))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self.status_code = 200
        stats.response("watch", 200)
        stats.watch("opened")
        with store.lock:
            api.watchers.add(w)
        end = "clientClosed"
        try:
            end = self.watch_loop(api, w, start_rv, send_initial, bookmarks, timeout)
        except OSError:
            pass
        finally:
            stats.watch(end)
            with store.lock:
                api.watchers.discard(w)
        if end in ("timedOut", "expired", "tooLarge"):
            try:
                self.wfile.write(b"0\r\n\r\n")
            except OSError:
                self.close_connection = True
        elif end == "dropped":
            self.abort(w.drop)
        else:
            self.close_connection = True

    def abort(self, mode):
        """Ends a watch stream as a broken connection would."""
        self.close_connection = True
        sock = self.connection
        try:
            if mode == "end":
                self.wfile.write(b"0\r\n\r\n")
                sock.shutdown(socket.SHUT_RDWR)
            elif mode == "reset":
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                os.close(sock.detach())
            else:
                sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def watch_loop(self, api, w, start_rv, send_initial, bookmarks, timeout) -> str:
        """Streams events until the watch ends; returns why it ended (a stats key)."""
        store, stats = api.store, api.stats
        deadline = time.monotonic() + timeout if timeout else None
        initial: list[bytes] = []
        with store.lock:
            if start_rv is not None and start_rv > store.rv and \
                    not self.wait_for_rv(api, start_rv):
                err = self.too_large(api, start_rv)
                self.write_chunk(self.event("ERROR", dumps(err.status())))
                return "tooLarge"
            if start_rv is None or send_initial:
                # rv unset or "0" (or sendInitialEvents): the current state as ADDED events first
                w.pos = store.rv
                for _, e in store.select(w.kind, w.ns, w.label_reqs, w.field_reqs):
                    initial.append(self.event("ADDED", e.data))
            else:
                w.pos = start_rv
        for data in initial:
            self.write_chunk(data)
        stats.watch("eventsSent", len(initial))
        w.sent = len(initial)
        if send_initial and bookmarks:
            self.write_chunk(self.event("BOOKMARK", dumps(self.bookmark(w, initial_end=True))))
            stats.watch("bookmarksSent")
        drop_after = api.faults.watch_drop_after
        if drop_after and w.sent >= drop_after:
            w.drop = w.drop or api.faults.drop_mode
            return "dropped"
        interval = api.config["bookmarkInterval"]
        next_bookmark = time.monotonic() + interval if bookmarks and interval > 0 else None
        inf = float("inf")
        while True:
            events, expired = [], None
            with store.lock:
                while True:
                    if w.drop:
                        return "dropped"
                    try:
                        events = store.events_since(w.pos)
                    except Expired as e:
                        expired = ApiError(410, "Expired", str(e))
                        break
                    if events:
                        w.pos = events[-1].rv
                        break
                    now = time.monotonic()
                    wake = min(now + 0.5, next_bookmark or inf, deadline or inf)
                    if wake <= now:
                        break
                    store.cond.wait(wake - now)
                    if time.monotonic() >= wake:
                        break
            if expired is not None:
                self.write_chunk(self.event("ERROR", dumps(expired.status())))
                return "expired"
            drop_after = api.faults.watch_drop_after
            n = 0
            for ev in events:
                v = w.view(ev)
                if v is None:
                    continue
                self.write_chunk(self.event(*v))
                n += 1
                w.sent += 1
                if drop_after and w.sent >= drop_after:
                    stats.watch("eventsSent", n)
                    w.drop = w.drop or api.faults.drop_mode
                    return "dropped"
            if n:
                stats.watch("eventsSent", n)
            now = time.monotonic()
            if next_bookmark is not None and now >= next_bookmark:
                self.write_chunk(self.event("BOOKMARK", dumps(self.bookmark(w))))
                stats.watch("bookmarksSent")
                next_bookmark = now + interval
            if deadline is not None and now >= deadline:
                return "timedOut"
            if not events and self.client_gone():
                return "clientClosed"

    @staticmethod
    def bookmark(w, initial_end=False) -> dict:
        md = {"resourceVersion": str(w.pos)}
        if initial_end:
            md["annotations"] = {"k8s.io/initial-events-end": "true"}
        return {"kind": w.kind.kind, "apiVersion": w.kind.api_version, "metadata": md}

    # ---- /_test ---------------------------------------------------------------------------------

    def handle_test(self, api, method, path, q, raw):
        body = self.json_body(raw, required=False)
        if body is not None and not isinstance(body, dict):
            raise bad_request("a /_test body is a JSON object")
        body = body or {}
        if path == "/_test/faults":
            if method == "GET":
                return self.send_obj(200, api.faults.view())
            if method == "DELETE":
                api.faults.clear()
                return self.send_obj(200, api.faults.view())
            try:
                api.faults.update(body)
            except (ValueError, TypeError) as e:
                raise bad_request(str(e)) from None
            dropped = 0
            if body.get("dropWatches"):
                res = body["dropWatches"] if isinstance(body["dropWatches"], list) else None
                dropped = api.drop_watches(api.faults.drop_mode, res)
            return self.send_obj(200, dict(api.faults.view(), droppedWatches=dropped))
        if path == "/_test/compact" and method == "POST":
            upto = api.store.compact(body.get("resourceVersion"))
            return self.send_obj(200, {"compacted": str(upto)})
        if path == "/_test/reset" and method == "POST":
            api.reset()
            return self.send_obj(200, {"resourceVersion": str(api.store.rv)})
        if path == "/_test/stats":
            with api.store.lock:
                active = len(api.watchers)
                counts = api.store.counts()
                rv = api.store.rv
                compacted = api.store.compacted
            view = api.stats.view(api.store.counters, active)
            view.update({"resourceVersion": str(rv), "compactedResourceVersion": str(compacted),
                         "objects": counts, "controllersIdle": api.store.worker.idle()})
            return self.send_obj(200, view)
        if path == "/_test/stats/reset" and method == "POST":
            api.stats.clear()
            api.store.counters.clear()
            return self.send_obj(200, {})
        if path == "/_test/config":
            if method == "POST":
                try:
                    api.set_config(body)
                except (ValueError, TypeError) as e:
                    raise bad_request(str(e)) from None
            return self.send_obj(200, api.view_config())
        if path == "/_test/watches" and method == "GET":
            with api.store.lock:
                ws = [{"resource": w.kind.plural, "namespace": w.ns or "",
                       "resourceVersion": str(w.pos), "eventsSent": w.sent,
                       "userAgent": w.agent} for w in api.watchers]
            return self.send_obj(200, {"watches": ws})
        if path == "/_test/objects" and method == "POST":
            return self.bulk_create(api, body.get("items") or [])
        if path == "/_test/save" and method == "POST":
            return self.send_obj(200, {"path": api.save(body.get("path"))})
        raise ApiError(404, "NotFound", f"no test endpoint {method} {path}")

    def bulk_create(self, api, items):
        created, errors = 0, []
        for i, obj in enumerate(items):
            kind = api.store.by_gvk.get((obj.get("apiVersion"), obj.get("kind"))) \
                if isinstance(obj, dict) else None
            if kind is None:
                errors.append({"index": i, "message": "unknown apiVersion/kind"})
                continue
            try:
                ns = (obj.get("metadata") or {}).get("namespace") if kind.namespaced else None
                api.store.create(kind, (ns or "default") if kind.namespaced else None, obj,
                                 internal=True)
                created += 1
            except ApiError as e:
                errors.append({"index": i, "code": e.code, "message": e.message})
        with api.store.lock:
            rv = api.store.rv
        self.send_obj(200, {"created": created, "errors": errors, "resourceVersion": str(rv)})


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="kinfer-test-apiserver", description=__doc__)
    p.add_argument("--port", type=int, default=0,
                   help="port on 127.0.0.1; 0 picks a free one (printed as LISTENING <port>)")
    p.add_argument("--crd", default=DEFAULT_CRD,
                   help="the CustomResourceDefinition to serve (YAML or JSON); '' for none")
    p.add_argument("--history", type=int, default=10000,
                   help="watch events kept; a watch from an older resourceVersion gets 410")
    p.add_argument("--bookmark-interval", type=float, default=1.0,
                   help="seconds between BOOKMARK events on watches that allow them")
    p.add_argument("--watch-timeout", type=float, default=0,
                   help="end watches without timeoutSeconds after this many seconds (0: never)")
    p.add_argument("--too-large-wait", type=float, default=3.0,
                   help="how long a request for a future resourceVersion waits before 504")
    p.add_argument("--gc-delay", type=float, default=0.0,
                   help="seconds before the garbage collector acts on an owner's deletion")
    p.add_argument("--deployment-controller", action="store_true",
                   help="write Deployment status (all replicas ready) like a deployment "
                        "controller with instantly ready pods")
    p.add_argument("--controller-delay", type=float, default=0.0,
                   help="seconds before the deployment controller writes status")
    p.add_argument("--initial-rv", type=int, default=0,
                   help="the resourceVersion to start from (with empty state)")
    p.add_argument("--state-file", default="",
                   help="load state from this file at start (if it exists) and save it on "
                        "SIGTERM/SIGINT and POST /_test/save")
    p.add_argument("--verbose", action="store_true", help="log every request to stderr")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    api = ApiServer(args)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    thread = threading.Thread(target=api.httpd.serve_forever, kwargs={"poll_interval": 0.1},
                              daemon=True)
    thread.start()
    print(f"LISTENING {api.port}", flush=True)
    while not stop.wait(0.5):
        pass
    if args.state_file:
        api.save()
    api.httpd.shutdown()
    api.httpd.server_close()
    sys.stdout.flush()
    os._exit(0)  # open watch streams end with the process, as on a real restart
