"""What the API server can do, and the choice between in-place resize and recreation.

In-place resize of a running pod's CPU is the ``pods/resize`` subresource, on by default from
Kubernetes 1.33 (beta; alpha 1.27-1.32 patched ``spec`` directly behind a feature gate, which this
backend does not use). Whether the server has it is read from API discovery (``GET /api/v1`` lists
``pods/resize``), not guessed from the version alone: a 1.33 server with the feature gate off does not
list it. The version is recorded and used in the message when in-place is asked for and impossible.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..core.errors import InputError

RECONFIGURE_MODES = ("auto", "in-place", "recreate")
RESIZE_MIN_VERSION = (1, 33)


@dataclass(frozen=True)
class ServerCapabilities:
    git_version: str  # 'v1.33.1+k3s1'
    version: tuple[int, int]  # (1, 33)
    resize_subresource: bool  # discovery lists pods/resize

    @property
    def in_place_resize(self) -> bool:
        return self.resize_subresource

    def as_dict(self) -> dict:
        return {
            "server_version": self.git_version,
            "in_place_resize": self.in_place_resize,
            "resize_subresource": self.resize_subresource,
        }


def parse_version(major: str | None, minor: str | None, git_version: str | None = None) -> tuple[int, int]:
    """(major, minor) from the server's /version: minor may read '33+' (GKE, EKS); fall back on gitVersion."""

    def num(text: str | None) -> int | None:
        m = re.match(r"\s*(\d+)", text or "")
        return int(m.group(1)) if m else None

    ma, mi = num(major), num(minor)
    if (ma is None or mi is None) and git_version:
        m = re.match(r"v?(\d+)\.(\d+)", git_version)
        if m:
            ma, mi = int(m.group(1)), int(m.group(2))
    return (ma or 0, mi or 0)


def detect(version_info: dict, core_resources: dict) -> ServerCapabilities:
    """From the bodies of ``GET /version`` and ``GET /api/v1`` (camelCase dicts)."""
    git = version_info.get("gitVersion") or ""
    version = parse_version(version_info.get("major"), version_info.get("minor"), git)
    names = {r.get("name") for r in core_resources.get("resources") or []}
    return ServerCapabilities(git, version, "pods/resize" in names)


def choose_reconfigure_mode(requested: str, caps: ServerCapabilities) -> tuple[str, str]:
    """('in-place' | 'recreate', why). 'auto' takes in-place resize where the server has it."""
    if requested not in RECONFIGURE_MODES:
        raise InputError(f"expected one of {', '.join(RECONFIGURE_MODES)}, got {requested!r}", field="--reconfigure")
    if requested == "recreate":
        return "recreate", "asked for with --reconfigure recreate"
    if caps.in_place_resize:
        why = "asked for" if requested == "in-place" else "the server has the pods/resize subresource"
        return "in-place", f"{why} (Kubernetes {caps.git_version})"
    if requested == "in-place":
        need = ".".join(map(str, RESIZE_MIN_VERSION))
        raise InputError(
            f"in-place resize needs the pods/resize subresource (Kubernetes {need} or later, feature gate "
            f"InPlacePodVerticalScaling on); the server is {caps.git_version or 'of unknown version'} and "
            "does not list it. Use --reconfigure recreate (or auto)",
            field="--reconfigure",
        )
    return "recreate", f"the server ({caps.git_version or 'unknown version'}) has no pods/resize subresource"
