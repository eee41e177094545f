"""ZooKeeper credentials and ACLs of a live run: ``user:password`` for a digest ACL, from a file (mode
600) or the environment, never from a command line; the run's own nodes admit only those credentials."""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import InputError

ENV_AUTH = "BSP_PLANNER_ZK_AUTH"  # user:password
ENV_AUTH_FILE = "BSP_PLANNER_ZK_AUTH_FILE"  # a file holding user:password


@dataclass(frozen=True)
class Credentials:
    user: str
    password: str

    def __repr__(self) -> str:  # never print the password
        return f"Credentials(user={self.user!r}, password=***)"

    @property
    def auth_data(self) -> list[tuple[str, str]]:
        return [("digest", f"{self.user}:{self.password}")]

    def acl(self) -> list:
        from kazoo.security import make_digest_acl

        return [make_digest_acl(self.user, self.password, all=True)]

    def parent_acl(self) -> list:
        """For shared parents (/bsp-planner, /bsp-planner/runs): anyone may read them, add a run and
        remove an *empty* run node (ZooKeeper deletes only childless nodes), so runs with different
        credentials can share them; a run's own subtree stays private (its nodes carry :meth:`acl`)."""
        from kazoo.security import ACL, Id, Permissions

        return [*self.acl(), ACL(Permissions.READ | Permissions.CREATE | Permissions.DELETE, Id("world", "anyone"))]


def parse_credentials(text: str, where: str) -> Credentials:
    line = text.strip().splitlines()[0].strip() if text.strip() else ""
    user, sep, password = line.partition(":")
    if not sep or not user or not password or any(c.isspace() for c in user):
        raise InputError(f"expected one line `user:password` in {where}", field="zk-auth")
    return Credentials(user, password)


def read_credentials_file(path: str | Path) -> Credentials:
    path = Path(path)
    try:
        st = path.stat()
    except OSError as exc:
        raise InputError(
            f"cannot read the ZooKeeper credentials file: {exc.strerror}", path=path, field="zk-auth"
        ) from exc
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise InputError(
            f"the credentials file is readable by other users (mode {stat.filemode(st.st_mode)}); `chmod 600 {path}`",
            path=path,
            field="zk-auth",
        )
    return parse_credentials(path.read_text(), str(path))


def load_credentials(file: str | Path | None = None, env: Mapping[str, str] | None = None) -> Credentials | None:
    """From --zk-auth-file, else $BSP_PLANNER_ZK_AUTH_FILE, else $BSP_PLANNER_ZK_AUTH; None if none."""
    environ = os.environ if env is None else env
    if file is not None:
        return read_credentials_file(file)
    if environ.get(ENV_AUTH_FILE):
        return read_credentials_file(environ[ENV_AUTH_FILE])
    if environ.get(ENV_AUTH):
        return parse_credentials(environ[ENV_AUTH], f"${ENV_AUTH}")
    return None


def generate_credentials() -> Credentials:
    return Credentials("bsp-planner", secrets.token_urlsafe(24))


def write_credentials_file(path: Path, creds: Credentials) -> Path:
    """Write user:password to a new file only its owner may read."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(f"{creds.user}:{creds.password}\n")
    os.chmod(path, 0o600)
    return path


def run_credentials(source: str, generated_file: Path, may_create: bool) -> Credentials:
    """A run's credentials from its source: ``generated`` (kept in `generated_file`, made on a new run),
    ``file:<path>``, or ``env`` ($BSP_PLANNER_ZK_AUTH)."""
    if source == "generated":
        if generated_file.is_file():
            return read_credentials_file(generated_file)
        if not may_create:
            raise InputError(
                f"the run's credentials file {generated_file} is missing", path=generated_file, field="zk-auth"
            )
        return read_credentials_file(write_credentials_file(generated_file, generate_credentials()))
    if source.startswith("file:"):
        return read_credentials_file(source[5:])
    if source == "env":
        creds = load_credentials(None)
        if creds is None:
            raise InputError(
                f"this run takes its ZooKeeper credentials from ${ENV_AUTH}, which is not set", field="zk-auth"
            )
        return creds
    raise InputError(f"unknown credentials source {source!r}", field="zk-auth")


def worker_auth_env(source: str, generated_file: Path, creds: Credentials) -> dict[str, str]:
    """How a worker gets the run's credentials: the environment variable naming the file, or holding
    them (never its command line)."""
    if source == "generated":
        return {ENV_AUTH_FILE: str(generated_file.resolve())}
    if source.startswith("file:"):
        return {ENV_AUTH_FILE: str(Path(source[5:]).resolve())}
    return {ENV_AUTH: f"{creds.user}:{creds.password}"}
