"""Environment builds in the sandbox, and the tools they run, where the sandbox's user reaches them.

A build runs as the sandbox's user with the filtered network on and, on top, an allowlist
(app/scripting/network.py, `BuildNetwork`: the package indexes, their file host, the proxy and
SCRIPT_BUILD_HOSTS, whatever SCRIPT_NETWORK says), the project read only as its current folder, and
its workspace its only writable place. The workspace is handed to that user for the build and
given back to the worker after it, every file readable by all: an environment is bound read-only
into every job that uses it, and none of them may change it.

uv and a bare interpreter must lie where the sandbox may bind them (never under /home, /root or
/run): a uv found elsewhere is copied once into the cache's own folder of tools; an interpreter
found there gives way to /usr/bin/python3 (docs/scripts.md, "How a script runs").
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from app.scripting.env_cache import BUILT
from app.scripting.env_rules import Project, allowed_indexes, operator_config_files
from app.scripting.envs import BuildPlaces, EnvBuildError, ScriptEnvs
from app.scripting.network import (
    Blocklist,
    BuildNetworkError,
    build_hosts,
    build_network,
    proxy_hosts,
)
from app.scripting.places import give_back, readable_by_all
from app.scripting.sandbox import FORBIDDEN, NOBODY, Sandbox, User

#: The bare interpreter used where uv's own find lies out of the sandbox's reach.
SYSTEM_PYTHON = Path("/usr/bin/python3")


@dataclass(frozen=True)
class BuildSandbox(Sandbox):
    """A build's sandbox: its current folder (`work_dir`, the project) read only, and its
    workspace (`artifacts_dir`, also given as `checkpoint_dir`) its only writable place."""

    def writable(self) -> tuple[Path, ...]:
        """The workspace alone."""
        return (self.artifacts_dir,)


@dataclass(frozen=True)
class BuildWrap:
    """Runs each build command in a BuildSandbox as `user`, on the filtered network that refuses
    `blocklist`, allowed only the hosts of the indexes in `environ` (the worker's variables,
    set by SandboxedEnvs to its own); `extra_readonly` is read at each command (the
    interpreter's places are known only once the envs are made)."""

    user: User
    extra_readonly: list[Path]
    blocklist: Blocklist
    dns_forward: tuple[str, Path] | None = None
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))

    def __call__(self, command: list[str], places: BuildPlaces) -> list[str]:
        """The command line of `command` in its sandbox; `EnvBuildError` when the allowlist
        cannot be made (a host that does not resolve, or one the filter refuses)."""
        blocked = self.blocklist.networks()
        indexes = allowed_indexes(self.environ, operator_config_files(self.environ))
        hosts = build_hosts(indexes, self.environ, self.blocklist.settings.script_build_hosts)
        # Through a proxy, the index's names are the proxy's to resolve: only its own must.
        proxied = hosts if proxy_hosts(self.environ) else []
        optional = [host for host in proxied if host not in proxy_hosts(self.environ)]
        try:
            allowlist = build_network(hosts, blocked, network_folder(places), optional)
        except BuildNetworkError as error:
            raise EnvBuildError(str(error), f"fairgpu: {error}\n") from None
        box = BuildSandbox(
            command=command,
            environment={},  # the build's own variables reach bubblewrap as its environment
            env_dir=places.interpreter,
            work_dir=places.project,
            artifacts_dir=places.workspace,
            checkpoint_dir=places.workspace,
            readonly=_distinct((places.project, places.uv, *self.extra_readonly)),
            network=True,
            blocked=blocked,
            dns_forward=self.dns_forward,
            build=allowlist,
            user=self.user,
        )
        return box.argv()


def build_wrap(
    user: User,
    extra_readonly: list[Path],
    blocklist: Blocklist,
    dns_forward: tuple[str, Path] | None = None,
) -> BuildWrap:
    """A `BuildWrap` (its environ the worker's own until SandboxedEnvs gives it its own)."""
    return BuildWrap(user, extra_readonly, blocklist, dns_forward)


def network_folder(places: BuildPlaces) -> Path:
    """Where a build's hosts file is written: beside its workspace, the worker's own (the
    build may not change it), removed with the build."""
    return places.workspace.with_name(places.workspace.name + ".net")


class SandboxedEnvs(ScriptEnvs):
    """ScriptEnvs whose builds run as `user` in the sandbox, the environments they leave the
    worker's own and readable by all."""

    def __init__(self, *args: Any, user: User = NOBODY, **options: Any) -> None:
        super().__init__(*args, **options)
        self.user = user
        if isinstance(self.wrap, BuildWrap):  # the allowlist is read from the envs' variables
            self.wrap = replace(self.wrap, environ=self.environ)

    def _build(self, project: Project, workspace: Path) -> str:
        if os.geteuid() == 0:
            os.chown(workspace, self.user.uid, self.user.gid)
        try:
            return super()._build(project, workspace)
        finally:
            give_back(workspace)
            shutil.rmtree(workspace.with_name(workspace.name + ".net"), ignore_errors=True)
            if (workspace / BUILT).is_dir():
                readable_by_all(workspace / BUILT)


def build_readonly(environ: dict[str, str]) -> list[Path]:
    """What a build must read beside the project and its tools: the operator's uv.toml, local
    package folders the operator's uv settings name, and TLS roots named by variables; those
    the sandbox may not bind are left out (the build then says what it misses)."""
    found = list(operator_config_files(environ))
    for variable in ("UV_FIND_LINKS", "UV_INDEX", "UV_DEFAULT_INDEX", "UV_INDEX_URL"):
        for entry in environ.get(variable, "").replace(",", " ").split():
            location = entry.split("=", 1)[-1] if "=" in entry.split("://")[0] else entry
            location = location.removeprefix("file://")
            if location.startswith("/"):
                found.append(Path(location))
    for variable in ("SSL_CERT_FILE", "SSL_CERT_DIR"):
        if environ.get(variable, "").startswith("/"):
            found.append(Path(environ[variable]))
    return list(_distinct(tuple(path for path in found if path.exists() and bindable(path))))


def bindable(path: Path) -> bool:
    """Whether the sandbox may bind `path`: absolute, not / itself, nothing under /home, /root
    or /run, links resolved."""
    real = Path(os.path.realpath(path))
    if real == Path("/"):
        return False
    return not any(real == top or top in real.parents for top in FORBIDDEN)


def reachable_by_others(path: Path) -> bool:
    """Whether any user may reach `path` (every folder above it traversable by others)."""
    real = Path(os.path.realpath(path))
    return all(os.stat(parent).st_mode & stat.S_IXOTH for parent in real.parents)


def sandbox_uv(uv: str, tools: Path) -> str:
    """A uv the sandbox's user can run: `uv` itself when it may be bound and reached, else a
    copy in `tools` (made once per uv binary: its name carries the binary's hash)."""
    found = shutil.which(uv)
    if found is None:
        raise RuntimeError(f"{uv} is not installed: script jobs build their environments with it")
    real = Path(os.path.realpath(found))
    with real.open("rb") as head:
        if head.read(2) == b"#!":  # a version manager's shim: copied, it would find no uv
            raise RuntimeError(f"{found} is a script, not uv: set UV to uv's own executable")
    if bindable(real) and reachable_by_others(real):
        return str(real)
    digest = _file_hash(real)[:16]
    copy = tools / f"uv-{digest}"
    if not copy.exists():
        tools.mkdir(parents=True, exist_ok=True)
        os.chmod(tools, 0o755)  # noqa: S103 (the sandbox's user runs what is in it)
        handle, temporary = tempfile.mkstemp(dir=tools, prefix=".uv-")
        os.close(handle)
        shutil.copyfile(real, temporary)
        os.chmod(temporary, 0o755)  # noqa: S103 (a tool every run's user runs)
        os.replace(temporary, copy)  # a child racing us renames the same bytes over it
    return str(copy)


def bare_python(uv: str, asked: Path | None, environ: dict[str, str]) -> Path:
    """The bare interpreter: SCRIPT_PYTHON when set; else uv's system interpreter, unless that
    lies where the sandbox never binds (a pyenv under /root) and /usr/bin/python3 exists."""
    if asked is not None:
        return asked
    done = subprocess.run(
        [uv, "python", "find", "--system"],
        capture_output=True,
        text=True,
        timeout=60,
        env={name: value for name, value in environ.items() if name in ("PATH", "HOME")},
    )
    found = Path(done.stdout.strip()) if done.returncode == 0 and done.stdout.strip() else None
    if found is not None and bindable(found) and reachable_by_others(found):
        return found
    if SYSTEM_PYTHON.exists():
        return SYSTEM_PYTHON
    if found is None:
        raise RuntimeError(f"uv finds no system interpreter: {done.stderr.strip()}")
    return found


def _file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        while chunk := source.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _distinct(paths: tuple[Path, ...]) -> tuple[Path, ...]:
    return tuple(dict.fromkeys(paths))
