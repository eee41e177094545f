"""The fake API server's authorisation: RBAC rules (e.g. parsed from jobs/k8s/rbac.yaml) and the record
of every request, for tests of which verbs the code uses and which the Role grants."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Rule:
    """One RBAC PolicyRule: apiGroups x resources x verbs (``*`` matches anything)."""

    groups: tuple[str, ...]
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    namespace: str | None  # None: cluster-wide (a ClusterRole through a ClusterRoleBinding)

    def allows(self, verb: str, group: str, resource: str, namespace: str | None) -> bool:
        if self.namespace is not None and namespace != self.namespace:
            return False
        return (
            ("*" in self.groups or group in self.groups)
            and ("*" in self.resources or resource in self.resources)
            and ("*" in self.verbs or verb in self.verbs)
        )


@dataclass
class Call:
    verb: str
    group: str
    resource: str  # 'pods', 'pods/resize'...
    namespace: str | None
    name: str | None
    status: int = 0


def rules_from_manifests(docs: list[dict], namespace: str, service_account: str) -> list[Rule]:
    """The RBAC rules the manifests grant to one service account: Roles (namespaced) and ClusterRoles
    bound to it by RoleBindings (namespaced) or ClusterRoleBindings (cluster-wide)."""
    roles = {(d["kind"], d["metadata"]["name"]): d for d in docs if d.get("kind") in ("Role", "ClusterRole")}
    out: list[Rule] = []
    for b in docs:
        if b.get("kind") not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        subject = {"kind": "ServiceAccount", "name": service_account, "namespace": namespace}
        subjects = [{"namespace": b["metadata"].get("namespace"), **s} for s in b.get("subjects") or []]
        bound = any(all(s.get(k) == v for k, v in subject.items()) for s in subjects)
        role = roles.get((b["roleRef"]["kind"], b["roleRef"]["name"]))
        if not bound or role is None:
            continue
        scope = None if b["kind"] == "ClusterRoleBinding" else b["metadata"].get("namespace", namespace)
        for r in role.get("rules") or []:
            groups, resources, verbs = r.get("apiGroups") or [""], r.get("resources") or [], r.get("verbs") or []
            out.append(Rule(tuple(groups), tuple(resources), tuple(verbs), scope))
    return out
