"""The fake API server's HTTP side: routes, discovery, authorisation, and the REST verbs on pods, Jobs and
nodes as a real server answers them (validation, 404/409/422...). FOR LOGIC TESTS ONLY."""

from __future__ import annotations

import copy
import json
import re
import socket
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlparse

from .fake_cluster import FakeCluster, now_iso
from .fake_rbac import Call

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")

#: (group, resource) -> model class name that validates a body
_MODELS = {("", "pods"): "V1Pod", ("batch", "jobs"): "V1Job"}

#: what GET /api/v1 lists (beside pods/resize, where the server has it): enough for discovery
RESOURCE_LIST = [
    ("pods", "Pod", True, ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]),
    ("nodes", "Node", False, ["create", "delete", "get", "list", "patch", "update", "watch"]),
    ("events", "Event", True, ["create", "get", "list", "patch"]),  # fake_resources
    ("namespaces", "Namespace", False, ["get", "list", "watch"]),  # listed only: kopf waits for it in discovery
]
VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}


class Handler(BaseHTTPRequestHandler):
    fake: FakeCluster
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # quiet
        pass

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no 40 ms delayed-ACK stalls

    # routing: /version, /api/v1, /api/v1/nodes, /api/v1/pods,
    # /api/v1/namespaces/{ns}/{res}[/{name}[/{sub}]], /apis/batch/v1/namespaces/{ns}/jobs[/{name}]
    def _route(self):
        url = urlparse(self.path)
        q = {k: v[-1] for k, v in parse_qs(url.query).items()}
        parts = [p for p in url.path.split("/") if p]
        if parts == ["version"]:
            return ("version", None, None, None, None, None, q)
        if parts[:2] == ["api", "v1"]:
            group, rest = "", parts[2:]
        elif parts[:3] == ["apis", "batch", "v1"]:
            group, rest = "batch", parts[3:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:  # custom resources, CRDs (fake_resources)
            group, rest = parts[1], parts[3:]
        else:
            return None
        if not rest:
            return ("discovery", group, None, None, None, None, q)
        ns = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            ns, rest = rest[1], rest[2:]
        resource, name, sub = [*rest, None, None][:3]
        return ("resource", group, resource, ns, name, sub, q)

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        return json.loads(raw) if raw else None

    def _handle(self) -> None:
        fake, method = self.fake, self.command
        if method == "GET" and (found := fake.resources.discovery(urlparse(self.path).path)) is not None:
            return self._send(200, found)  # /api, /apis and the custom resources' groups (as kubectl reads them)
        route = self._route()
        body = self._body() if method in ("POST", "PUT", "PATCH") else None
        if route is None:
            return self._send(*_fail(404, "NotFound", f"the server could not find the requested resource {self.path}"))
        kind, group, resource, ns, name, sub, q = route
        if kind == "version":
            return self._send(
                200,
                {
                    "major": str(fake.major),
                    "minor": str(fake.minor),
                    "gitVersion": fake.version,
                    "gitCommit": "fake",
                    "gitTreeState": "clean",
                    "buildDate": "2025-01-01T00:00:00Z",
                    "goVersion": "go1.24",
                    "compiler": "gc",
                    "platform": "linux/amd64",
                },
            )
        if kind == "discovery":
            res = RESOURCE_LIST + (
                [("pods/resize", "Pod", True, ["get", "patch", "update"])] if fake.resize_subresource else []
            )
            if group == "batch":
                res = [("jobs", "Job", True, ["create", "delete", "get", "list", "patch", "update", "watch"])]
            resources = [{"name": r, "singularName": "", "namespaced": n, "kind": k, "verbs": v} for r, k, n, v in res]
            groupversion = f"{group + '/' if group else ''}v1"
            return self._send(200, {"kind": "APIResourceList", "groupVersion": groupversion, "resources": resources})
        full = f"{resource}/{sub}" if sub else resource
        if method == "GET" and q.get("watch") in ("true", "1") and fake.resources.handles(group, resource):
            return self._watch(group, resource, ns, q)  # a stream of a custom resource's changes (kopf)
        if method == "GET":
            verb = "watch" if q.get("watch") in ("true", "1") else ("get" if name else "list")
        else:
            verb = VERBS.get(method) or ("delete" if name else "deletecollection")
        call = Call(verb, group, full, ns, name)
        with fake.lock:
            fake.calls.append(call)
            if fake.rules is not None and not any(r.allows(verb, group, full, ns) for r in fake.rules):
                call.status = 403
                scope = f' in the namespace "{ns}"' if ns else " at the cluster scope"
                message = f'{full} is forbidden: User cannot {verb} resource "{full}" in API group "{group}"{scope}'
                return self._send(*_fail(403, "Forbidden", message))
            try:
                fake._advance()
                code, out = self._serve(verb, group, resource, ns, name, sub, q, body)
            except Exception as exc:  # a bug of the fake or of a test's job_runner: say so, keep serving
                code, out = _fail(500, "InternalError", f"FakeApiServer: {type(exc).__name__}: {exc}")
            call.status = code
            return self._send(code, out)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

    def _watch(self, group: str, resource: str, ns: str | None, q: dict) -> None:
        """A watch stream (chunked JSON lines) of custom objects, for `timeoutSeconds` (default 5 s)."""
        fake = self.fake
        with fake.lock:
            fake.calls.append(call := Call("watch", group, resource, ns, None, 200))
            if fake.rules is not None and not any(r.allows("watch", group, resource, ns) for r in fake.rules):
                call.status = 403
                message = f'{resource} is forbidden: User cannot watch resource "{resource}" in API group "{group}"'
                return self._send(*_fail(403, "Forbidden", message))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        until = time.monotonic() + float(q.get("timeoutSeconds") or 5)
        try:
            for event in self.fake.resources.watch(group, resource, ns, q.get("resourceVersion"), until):
                data = b"" if event is None else json.dumps(event).encode() + b"\n"
                if data:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except OSError:  # the client went away
            pass

    def _serve(self, verb, group, resource, ns, name, sub, q, body):
        fake = self.fake
        if fake.resources.handles(group, resource):  # CRDs, custom objects, Events
            ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
            accept = self.headers.get("Accept") or ""
            selected = lambda o: _selects(q.get("fieldSelector"), lambda path: _field(o, path))  # noqa: E731
            return fake.resources.serve(verb, group, resource, ns, name, sub, body, ctype, accept, selected)
        store = {("", "pods"): fake.state.pods, ("batch", "jobs"): fake.state.jobs}
        if (group, resource) == ("", "nodes"):
            if verb == "list":
                return 200, {
                    "kind": "NodeList",
                    "apiVersion": "v1",
                    "metadata": {},
                    "items": list(fake.state.nodes.values()),
                }
            return _fail(405, "MethodNotAllowed", "the fake serves only node lists")
        if (group, resource) not in store:
            return _fail(404, "NotFound", f"the fake does not serve {group}/{resource}")
        objects = store[(group, resource)]
        kind = {"pods": "Pod", "jobs": "Job"}[resource]
        if verb == "list":
            items = [
                o
                for (ons, _), o in sorted(objects.items())
                if (ns is None or ons == ns)
                and _selects(q.get("labelSelector"), (o["metadata"].get("labels") or {}).get)
                and _selects(q.get("fieldSelector"), lambda path, o=o: _field(o, path))
            ]
            return 200, {
                "kind": f"{kind}List",
                "apiVersion": "v1" if not group else f"{group}/v1",
                "metadata": {"resourceVersion": str(next(fake._rv))},
                "items": items,
            }
        if verb == "create":
            err = _validate(group, resource, body)
            if err:
                return _fail(422, "Invalid", err)
            oname = body["metadata"].get("name") or ""
            if not (_DNS_SUBDOMAIN.match(oname) and len(oname) <= (63 if resource == "pods" else 253)):
                return _fail(422, "Invalid", f'{kind} "{oname}" is invalid: metadata.name: must be a DNS-1123 name')
            if body["metadata"].get("namespace", ns) != ns:
                return _fail(
                    400, "BadRequest", "the namespace of the object does not match the namespace of the request"
                )
            if (ns, oname) in objects:
                return _fail(409, "AlreadyExists", f'{resource} "{oname}" already exists')
            obj = copy.deepcopy(body)
            obj["metadata"]["namespace"] = ns
            fake._stamp(obj)
            if resource == "pods":
                obj["status"] = {"phase": "Pending"}
                if fake._generations:
                    obj["metadata"]["generation"] = 1
            objects[(ns, oname)] = obj
            if resource == "jobs":
                fake._run_job(ns, obj)
            fake._advance()
            return 201, obj
        if (ns, name) not in objects:
            return _fail(404, "NotFound", f'{resource} "{name}" not found')
        obj = objects[(ns, name)]
        if verb == "get" and not sub:
            return 200, obj
        if verb == "delete" and not sub:
            if resource == "pods":
                grace = q.get("gracePeriodSeconds")
                delay = 0.0 if grace == "0" else fake.delete_delay_s
                obj["metadata"].setdefault("deletionTimestamp", now_iso())
                fake._pending_delete.setdefault((ns, name), time.monotonic() + delay)
                fake._advance()
                return 200, obj
            del objects[(ns, name)]
            if resource == "jobs":
                for key, p in list(fake.state.pods.items()):
                    if key[0] == ns and (p["metadata"].get("labels") or {}).get("job-name") == name:
                        fake._pending_delete.setdefault(key, time.monotonic())
                return 200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
            return 200, obj
        if verb == "patch" and resource == "pods" and sub == "resize":
            return self._resize(ns, name, obj, body)
        return _fail(405, "MethodNotAllowed", f"the fake does not serve {verb} on {resource}{'/' + sub if sub else ''}")

    def _resize(self, ns: str, name: str, obj: dict, body) -> tuple[int, dict]:
        """A patch of ``pods/resize``, checked as the API server checks it, then taken by the kubelet."""
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        if ctype == "application/json-patch+json" and not isinstance(body, list):
            return _fail(400, "BadRequest", "json: cannot unmarshal object into Go value of type jsonpatch.Patch")
        if ctype not in ("application/strategic-merge-patch+json", "application/merge-patch+json"):
            return _fail(415, "UnsupportedMediaType", f"the fake takes merge patches, got {ctype}")
        extra = set(body) - {"spec"} or set(body.get("spec", {})) - {"containers"}
        if extra:
            return _fail(422, "Invalid", f"resize may change only spec.containers[*].resources, got {sorted(extra)}")
        if obj["status"].get("phase") != "Running":
            return _fail(400, "BadRequest", "the fake resizes only running pods")
        trial = copy.deepcopy(obj["spec"])
        _merge(trial, body["spec"])
        for c in trial["containers"]:
            r = c.get("resources") or {}
            if (r.get("requests") or {}).get("cpu") != (r.get("limits") or {}).get("cpu"):
                return _fail(422, "Invalid", "Pod QOS Class may not change as a result of resizing")
        obj["spec"] = trial
        self.fake._resize(ns, name, obj)
        return 200, obj


def _validate(group: str, resource: str, body) -> str | None:
    """Check a body with the client's own model (unknown fields and missing required ones fail)."""
    from kubernetes import client

    if not isinstance(body, dict):
        return "expected a JSON object"
    model = getattr(client, _MODELS[(group, resource)])
    try:
        model.model_validate(body)
    except Exception as exc:  # pydantic.ValidationError
        return f"{model.__name__}: {exc}"
    return None


def _fail(code: int, reason: str, message: str) -> tuple[int, dict]:
    """An error answer: its HTTP code and the Status the API server sends with it."""
    return code, {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _selects(selector: str | None, value: Callable[[str], Any]) -> bool:
    """Every term of a label or field selector holds: ``k=v`` (or ``k==v``), ``k!=v``, or (labels) ``k``
    present; `value` reads a key (a label, or a field path such as ``status.phase``)."""
    for part in filter(None, (p.strip() for p in (selector or "").split(","))):
        key, op, want = re.fullmatch(r"([^!=]+)(!=|==|=)?(.*)", part).groups()  # type: ignore[union-attr]
        have = value(key.strip())
        if (op is None and have is None) or (op and (have == want.strip()) == (op == "!=")):
            return False
    return True


def _field(obj: dict, path: str) -> str:
    """A field selector's value: the object's field at `path` (``status.phase``) as text."""
    cur: Any = obj
    for p in path.split("."):
        cur = cur.get(p) if isinstance(cur, dict) else None
    return str(cur)


def _merge(dst: dict, patch: dict) -> None:
    """Strategic merge for the shapes bsp-planner sends: maps merge, `containers` merge by name."""
    for k, v in patch.items():
        if k == "containers" and isinstance(v, list):
            by_name = {c["name"]: c for c in dst.get("containers") or []}
            for c in v:
                if c.get("name") in by_name:
                    _merge(by_name[c["name"]], c)
                else:
                    dst.setdefault("containers", []).append(copy.deepcopy(c))
        elif isinstance(v, dict) and isinstance(dst.get(k), dict):
            _merge(dst[k], v)
        else:
            dst[k] = copy.deepcopy(v)
