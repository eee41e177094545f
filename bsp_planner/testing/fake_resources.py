"""The fake API server's custom resources, Events and Job controller. FOR LOGIC TESTS ONLY.

- CustomResourceDefinitions (``POST /apis/apiextensions.k8s.io/v1/customresourcedefinitions``, as
  ``kubectl apply -f`` of a CRD sends it): their objects are then served under
  ``/apis/<group>/<version>/namespaces/<ns>/<plural>``: create, get, list, merge patch, delete (which also
  deletes the objects it owns, as the garbage collector does). A body is checked against the CRD's
  ``openAPIV3Schema`` for what a real server checks most often (types, ``required``, ``enum``, ``minimum``,
  unknown fields of a structural schema), and the transition rule ``self == oldSelf`` is kept: 422 as a real
  server answers. With a ``status`` subresource, as on a real server, a write to the object ignores its
  ``status`` and a write to ``/status`` changes nothing else; a change of ``spec`` bumps
  ``metadata.generation``.
- core/v1 Events: create (checked with the client's ``CoreV1Event`` model), get, list, merge patch.
- the Job controller's part the operator depends on: a Job (``backoffLimit: 0``) whose pod failed
  (evicted, killed) or was deleted before it ended is marked Failed, as a real Job controller does.
"""

from __future__ import annotations

import copy
import itertools
import time
import uuid
from datetime import UTC, datetime
from typing import Any

CRD_GROUP = "apiextensions.k8s.io"
EVENTS = ("", "events")
MERGE_PATCH_TYPES = ("application/merge-patch+json", "application/strategic-merge-patch+json")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _fail(code: int, reason: str, message: str) -> tuple[int, dict]:
    return code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "reason": reason}


def merge_patch(dst: dict, patch: dict) -> dict:
    """RFC 7386: maps merge, null deletes, anything else replaces."""
    out = copy.deepcopy(dst)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge_patch(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def schema_errors(value: Any, schema: dict, path: str) -> list[str]:
    """What a structural schema refuses in `value`, each as ``path: why`` (the checks a real server makes
    most often; CEL rules other than ``self == oldSelf`` are not evaluated)."""
    kind = schema.get("type")
    types: dict[str, type | tuple[type, ...]] = {
        "object": dict,
        "array": list,
        "string": str,
        "integer": int,
        "number": (int, float),
        "boolean": bool,
    }
    if kind and (not isinstance(value, types[kind]) or (kind in ("integer", "number") and isinstance(value, bool))):
        return [f"{path}: Invalid value: {value!r}: {path} in body must be of type {kind}"]
    errors = []
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(f'"{e}"' for e in schema["enum"])
        errors.append(f"{path}: Unsupported value: {value!r}: supported values: {allowed}")
    if "minimum" in schema and isinstance(value, int | float) and value < schema["minimum"]:
        errors.append(
            f"{path}: Invalid value: {value}: {path} in body should be greater than or equal to {schema['minimum']}"
        )
    if kind == "object" and isinstance(value, dict):
        props = schema.get("properties") or {}
        for req in schema.get("required") or []:
            if req not in value:
                errors.append(f"{path}.{req}: Required value")
        for k, v in value.items():
            if k in props:
                errors += schema_errors(v, props[k], f"{path}.{k}")
            elif props and not schema.get("x-kubernetes-preserve-unknown-fields"):
                errors.append(f'{path}: unknown field "{k}"')  # pruned by a real server; strict field validation
    if kind == "array" and isinstance(value, list) and "items" in schema:
        for i, v in enumerate(value):
            errors += schema_errors(v, schema["items"], f"{path}[{i}]")
    return errors


def _age(timestamp: str | None) -> str:
    if not timestamp:
        return "<unknown>"
    since = datetime.now(UTC) - datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    return f"{max(0, int(since.total_seconds()))}s"


def _events_table(events: list[dict]) -> dict:
    """`kubectl get events` as the API server prints it: LAST SEEN (with ``(xN over AGE)`` for a repeated
    Event), TYPE, REASON, OBJECT, MESSAGE."""
    names = ("Last Seen", "Type", "Reason", "Object", "Message")
    defs = [{"name": n, "type": "string", "format": "", "description": "", "priority": 0} for n in names]
    rows = []
    for e in events:
        seen = _age(e.get("lastTimestamp"))
        if int(e.get("count") or 1) > 1:
            seen += f" (x{e['count']} over {_age(e.get('firstTimestamp'))})"
        obj = e["involvedObject"]
        cells = [seen, e.get("type"), e.get("reason"), f"{obj['kind'].lower()}/{obj['name']}", e.get("message")]
        meta = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": e["metadata"]}
        rows.append({"cells": cells, "object": meta})
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {}, "columnDefinitions": defs, "rows": rows}


class FakeResources:
    """CRDs, their objects, Events, and Job failures on a FakeCluster (its `lock` held by every caller)."""

    def __init__(self, fake: Any) -> None:
        self.fake = fake
        self.crds: dict[tuple[str, str], dict] = {}  # (group, plural) -> the CRD
        self.objects: dict[tuple[str, str, str, str], dict] = {}  # (group, plural, ns, name) -> object
        self.events: dict[tuple[str, str], dict] = {}
        self._event_names = itertools.count(1)

    # -- test controls -----------------------------------------------------------------------------
    def add_crd(self, crd: dict) -> None:
        spec = crd["spec"]
        self.crds[(spec["group"], spec["names"]["plural"])] = copy.deepcopy(crd)

    def custom(self, group: str, plural: str, namespace: str, name: str) -> dict | None:
        return copy.deepcopy(self.objects.get((group, plural, namespace, name)))

    def events_of(self, namespace: str, kind: str | None = None, name: str | None = None) -> list[dict]:
        """Events in `namespace` (about the object of `kind` and `name`, where given), oldest first."""
        return [
            copy.deepcopy(e)
            for (ns, _), e in sorted(self.events.items(), key=lambda kv: kv[1]["metadata"]["resourceVersion"])
            if ns == namespace
            and kind in (None, e["involvedObject"].get("kind"))
            and name in (None, e["involvedObject"].get("name"))
        ]

    # -- watching ----------------------------------------------------------------------------------
    def watch(self, group: str, plural: str, ns: str | None, since: str | None, until: float):
        """A watch of a CRD's objects newer than resourceVersion `since`, as the API server streams it
        (ADDED, MODIFIED, DELETED), until the monotonic time `until`: yields each event, and None every
        20 ms while nothing happens (the caller's moment to notice a closed connection)."""
        seen: dict[tuple, str] = {}
        start = int(since) if since and since.isdigit() else 0
        while time.monotonic() < until:
            events: list[dict | None] = []
            with self.fake.lock:
                current = {
                    key: obj for key, obj in self.objects.items() if key[:2] == (group, plural) and ns in (None, key[2])
                }
                for key, obj in current.items():
                    rv = obj["metadata"]["resourceVersion"]
                    if int(rv) > start and seen.get(key) != rv:
                        events.append({"type": "MODIFIED" if key in seen else "ADDED", "object": copy.deepcopy(obj)})
                    seen[key] = rv
                for key in [k for k in seen if k not in current]:
                    del seen[key]
                    events.append({"type": "DELETED", "object": {"metadata": {"name": key[3], "namespace": key[2]}}})
            yield from events or [None]
            time.sleep(0.02)

    # -- discovery (what kubectl reads before it applies a file) -----------------------------------
    def discovery(self, path: str) -> dict | None:
        """The legacy discovery documents of ``/api``, ``/apis`` and each CRD's ``/apis/<group>/<version>``
        (None for any other path)."""
        parts = [p for p in path.split("/") if p]
        if parts == ["api"]:
            return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
        groups = {"batch": ["v1"], CRD_GROUP: ["v1"]}
        for crd in self.crds.values():
            groups.setdefault(crd["spec"]["group"], []).extend(v["name"] for v in crd["spec"]["versions"])
        if parts == ["apis"]:
            listed = [
                {
                    "name": g,
                    "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in vs],
                    "preferredVersion": {"groupVersion": f"{g}/{vs[0]}", "version": vs[0]},
                }
                for g, vs in sorted(groups.items())
            ]
            return {"kind": "APIGroupList", "apiVersion": "v1", "groups": listed}
        if len(parts) == 3 and parts[0] == "apis" and parts[1] not in ("batch",):
            resources = [
                {
                    "name": names["plural"],
                    "singularName": names.get("singular", ""),
                    "namespaced": crd["spec"]["scope"] == "Namespaced",
                    "kind": names["kind"],
                    "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
                    **({"shortNames": names["shortNames"]} if names.get("shortNames") else {}),
                }
                for (g, _), crd in sorted(self.crds.items())
                if g == parts[1] and (names := crd["spec"]["names"])
            ]
            if parts[1] == CRD_GROUP:
                resources = [
                    {
                        "name": "customresourcedefinitions",
                        "singularName": "customresourcedefinition",
                        "namespaced": False,
                        "kind": "CustomResourceDefinition",
                        "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
                    }
                ]
            gv = f"{parts[1]}/{parts[2]}"
            return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}
        return None

    # -- REST ----------------------------------------------------------------------------------------
    def handles(self, group: str, resource: str | None) -> bool:
        return (
            (group, resource) == EVENTS
            or (group == CRD_GROUP and resource == "customresourcedefinitions")
            or any((group, resource) == key for key in self.crds)
        )

    def serve(
        self, verb, group, resource, ns, name, sub, body, content_type: str, accept: str = "", selected=lambda o: True
    ) -> tuple[int, dict]:
        """One request; `selected(obj)`: the request's field selector holds for `obj` (lists of Events)."""
        if verb == "patch" and content_type not in MERGE_PATCH_TYPES:
            return _fail(415, "UnsupportedMediaType", f"the fake takes merge patches here, got {content_type}")
        if group == CRD_GROUP:
            return self._serve_crds(verb, name, body)
        if (group, resource) == EVENTS:
            code, out = self._serve_events(verb, ns, name, body, selected)
            if code == 200 and verb == "list" and "as=Table" in accept:
                return 200, _events_table(out["items"])
            return code, out
        code, out = self._serve_custom(verb, group, resource, ns, name, sub, body)
        if code == 200 and verb in ("get", "list") and "as=Table" in accept:  # what `kubectl get` asks for
            return 200, self._table(self.crds[(group, resource)], out.get("items", [out]))
        return code, out

    def _serve_crds(self, verb, name, body) -> tuple[int, dict]:
        by_name = {crd["metadata"]["name"]: crd for crd in self.crds.values()}
        if verb == "create":
            if body["metadata"]["name"] in by_name:
                return _fail(
                    409, "AlreadyExists", f'customresourcedefinitions "{body["metadata"]["name"]}" already exists'
                )
            self.add_crd(body)
            return 201, body
        if verb == "get":
            return (
                (200, by_name[name])
                if name in by_name
                else _fail(404, "NotFound", f'customresourcedefinitions "{name}" not found')
            )
        return _fail(405, "MethodNotAllowed", f"the fake does not {verb} CRDs")

    @staticmethod
    def _table(crd: dict, items: list[dict]) -> dict:
        """The server-side table `kubectl get` prints: Name, the CRD's additionalPrinterColumns (simple
        ``.a.b`` JSON paths), dates as ages."""
        version = next(v for v in crd["spec"]["versions"] if v.get("storage"))
        columns = [c for c in version.get("additionalPrinterColumns") or []]
        defs = [{"name": "Name", "type": "string", "format": "name", "description": "", "priority": 0}] + [
            {"name": c["name"], "type": c["type"], "format": "", "description": "", "priority": c.get("priority", 0)}
            for c in columns
        ]

        def cell(obj: dict, column: dict) -> Any:
            value: Any = obj
            for key in column["jsonPath"].strip(".").split("."):
                value = value.get(key) if isinstance(value, dict) else None
            return _age(value) if value is not None and column["type"] == "date" else value

        rows = [
            {
                "cells": [o["metadata"]["name"], *(cell(o, c) for c in columns)],
                "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]},
            }
            for o in items
        ]
        return {
            "kind": "Table",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": {},
            "columnDefinitions": defs,
            "rows": rows,
        }

    def _stamp(self, obj: dict) -> None:
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", _now())
        meta["resourceVersion"] = str(next(self.fake._rv))

    def _list(self, kind: str, api_version: str, items: list[dict]) -> tuple[int, dict]:
        rv = str(next(self.fake._rv))
        return 200, {
            "kind": f"{kind}List",
            "apiVersion": api_version,
            "metadata": {"resourceVersion": rv},
            "items": items,
        }

    def _serve_events(self, verb, ns, name, body, selected) -> tuple[int, dict]:
        from kubernetes import client

        if verb == "list":  # `kubectl describe` selects an object's Events by involvedObject.name, .uid...
            items = [e for (ens, _), e in sorted(self.events.items()) if ns in (None, ens) and selected(e)]
            return self._list("Event", "v1", items)
        if verb == "create":
            body = dict(body, metadata=dict(body.get("metadata") or {}))
            if not body["metadata"].get("name") and body["metadata"].get("generateName"):
                body["metadata"]["name"] = f"{body['metadata']['generateName']}{next(self._event_names):05x}"
            try:
                client.CoreV1Event.model_validate(body)
            except Exception as exc:  # pydantic.ValidationError
                return _fail(422, "Invalid", f"CoreV1Event: {exc}")
            if (ns, body["metadata"]["name"]) in self.events:
                return _fail(409, "AlreadyExists", f'events "{body["metadata"]["name"]}" already exists')
            event = copy.deepcopy(body)
            event["metadata"]["namespace"] = ns
            self._stamp(event)
            self.events[(ns, event["metadata"]["name"])] = event
            return 201, event
        if (ns, name) not in self.events:
            return _fail(404, "NotFound", f'events "{name}" not found')
        if verb == "get":
            return 200, self.events[(ns, name)]
        if verb == "patch":
            event = merge_patch(self.events[(ns, name)], body)
            self._stamp(event)
            self.events[(ns, name)] = event
            return 200, event
        return _fail(405, "MethodNotAllowed", f"the fake does not {verb} events")

    def _serve_custom(self, verb, group, plural, ns, name, sub, body) -> tuple[int, dict]:
        crd = self.crds[(group, plural)]
        kind = crd["spec"]["names"]["kind"]
        version = next(v for v in crd["spec"]["versions"] if v.get("storage"))
        schema = version["schema"]["openAPIV3Schema"]
        has_status = "status" in (version.get("subresources") or {})
        if verb == "list":
            items = [
                o
                for (g, p, ons, _), o in sorted(self.objects.items())
                if (g, p) == (group, plural) and ns in (None, ons)
            ]
            return self._list(kind, f"{group}/{version['name']}", items)
        key = (group, plural, ns, name)
        if verb == "create":
            obj = copy.deepcopy(body)
            name = obj.get("metadata", {}).get("name")
            if (group, plural, ns, name) in self.objects:
                return _fail(409, "AlreadyExists", f'{plural}.{group} "{name}" already exists')
            if has_status:
                obj.pop("status", None)
            errors = schema_errors(
                {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}, schema, ""
            )
            if errors:
                return _fail(
                    422, "Invalid", f'{kind}.{group} "{name}" is invalid: ' + ", ".join(e.lstrip(".") for e in errors)
                )
            obj["metadata"]["namespace"] = ns
            obj["metadata"]["generation"] = 1
            self._stamp(obj)
            self.objects[(group, plural, ns, name)] = obj
            return 201, obj
        if key not in self.objects:
            return _fail(404, "NotFound", f'{plural}.{group} "{name}" not found')
        obj = self.objects[key]
        if verb == "get":
            return 200, obj
        if verb == "delete":
            del self.objects[key]
            self._collect_garbage(obj["metadata"]["uid"], ns)
            return 200, obj
        if verb != "patch":
            return _fail(405, "MethodNotAllowed", f"the fake does not {verb} {plural}")
        new = merge_patch(obj, body)
        if has_status and sub == "status":
            new = dict(obj, status=new.get("status", {}))  # /status changes the status only
        elif has_status:
            new["status"] = copy.deepcopy(obj.get("status", {}))  # the object's writes leave the status alone
        # what changed is checked (unchanged fields are ratcheted, as since 1.30): /status, its status only
        if sub == "status":
            errors = schema_errors(new.get("status", {}), schema["properties"].get("status", {}), ".status")
        else:
            errors = schema_errors(
                {k: v for k, v in new.items() if k not in ("apiVersion", "kind", "metadata")}, schema, ""
            )
        spec_rules = (schema.get("properties", {}).get("spec") or {}).get("x-kubernetes-validations") or []
        if new.get("spec") != obj.get("spec"):
            errors += [f"spec: Invalid value: {r['message']}" for r in spec_rules if r.get("rule") == "self == oldSelf"]
            new["metadata"]["generation"] = int(obj["metadata"].get("generation", 1)) + 1
        if errors:
            return _fail(
                422, "Invalid", f'{kind}.{group} "{name}" is invalid: ' + ", ".join(e.lstrip(".") for e in errors)
            )
        self._stamp(new)
        self.objects[key] = new
        return 200, new

    def _collect_garbage(self, uid: str, ns: str) -> None:
        """Delete the Jobs an object owned, and their pods (foreground cascading, at once)."""
        for key, job in list(self.fake.state.jobs.items()):
            owners = job["metadata"].get("ownerReferences") or []
            if key[0] == ns and any(o.get("uid") == uid for o in owners):
                del self.fake.state.jobs[key]
                self._delete_job_pods(ns, job["metadata"]["name"])

    def _delete_job_pods(self, ns: str, job: str) -> None:
        for key, pod in list(self.fake.state.pods.items()):
            if key[0] == ns and (pod["metadata"].get("labels") or {}).get("job-name") == job:
                self.fake._pending_delete.setdefault(key, time.monotonic())
                self.fake._job_done_at.pop(key, None)

    # -- the Job controller --------------------------------------------------------------------------
    def advance_jobs(self) -> None:
        """A running Job whose pod failed by itself (evicted, killed) or is gone: Failed, as the Job
        controller marks a Job of ``backoffLimit: 0`` whose only pod failed."""
        fake = self.fake
        for (ns, jname), job in fake.state.jobs.items():
            if (job.get("status") or {}).get("active") != 1:
                continue
            pods = [
                (key, p)
                for key, p in fake.state.pods.items()
                if key[0] == ns and (p["metadata"].get("labels") or {}).get("job-name") == jname
            ]
            gone = not pods or all(key in fake._pending_delete for key, _ in pods)
            failed = [key for key, p in pods if (p.get("status") or {}).get("phase") == "Failed"]
            if not gone and not failed:
                continue
            for key, _ in pods:
                fake._job_done_at.pop(key, None)  # what the test's job_runner said no longer happens
            reason = "BackoffLimitExceeded"
            message = "Job has reached the specified backoff limit"
            job["status"] = {
                "failed": 1,
                "active": 0,
                "conditions": [{"type": "Failed", "status": "True", "reason": reason, "message": message}],
            }
            fake._stamp(job)
