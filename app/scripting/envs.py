"""A script project's environment: read its rules, build it with uv, keep it in the host's cache.

`ScriptEnvs.environment(folder)` is the one way in. The rules of what a project may say, and
which kind builds on the base environment, are in `app.scripting.env_rules`; the cache's locks
and eviction in `app.scripting.env_cache`. Every build command goes through `wrap` (the sandbox,
when there is one) and sees only the operator's TLS, proxy and uv settings of the worker's
variables. Errors: `RefusedError` (the project, before anything runs) and
`EnvBuildError` (a build that failed or ran past its time, with its output).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from app.scripting.env_cache import BUILT, EnvCache
from app.scripting.env_rules import (
    Interpreter,
    Project,
    allowed_indexes,
    base_fingerprint,
    cache_key,
    is_venv,
    operator_config_files,
    operator_environ,
    read_project,
    site_packages,
)


@dataclass(frozen=True)
class BuildPlaces:
    """What a build command touches: what a sandbox around it must let it read and write."""

    project: Path  # read only; the command's working folder
    workspace: Path  # the only place it writes: the environment and its download cache
    interpreter: Path  # its prefix, read only (a venv base: also its pyvenv.cfg home)
    uv: Path  # uv's executable, read only


#: Turns a build command into the command that runs it (in the sandbox, when there is one).
Wrap = Callable[[list[str], BuildPlaces], list[str]]


def unwrapped(command: list[str], places: BuildPlaces) -> list[str]:
    """The build's commands as they are."""
    return command


class EnvBuildError(Exception):
    """An environment's build failed or ran past its time; `output` is what it printed."""

    def __init__(self, message: str, output: str) -> None:
        super().__init__(message)
        self.output = output


@dataclass(frozen=True)
class Environment:
    """A script's environment, ready: its prefix and interpreter, and what it cost."""

    path: Path
    python: Path
    cached: bool
    seconds: float
    output: str  # the build's output (for the job's log); "" when nothing was built


class ScriptEnvs:
    """Builds and caches the environments of script projects on this host."""

    def __init__(
        self,
        cache: EnvCache,
        *,
        base_env: Path | None = None,
        timeout_s: float = 900.0,
        wrap: Wrap = unwrapped,
        environ: Mapping[str, str] | None = None,
        uv: str | None = None,
        python: Path | None = None,
    ) -> None:
        self.cache, self.timeout_s, self.wrap = cache, timeout_s, wrap
        self.environ = dict(os.environ if environ is None else environ)
        self.uv = uv or shutil.which("uv", path=self.environ.get("PATH")) or "uv"
        self.uv_version = self._run_quick([self.uv, "--version"])
        self.interpreter = self._interpreter(base_env, python)
        self.indexes = allowed_indexes(self.environ, operator_config_files(self.environ))

    @contextmanager
    def environment(self, folder: Path) -> Iterator[Environment]:
        """The environment of the project in `folder`, held in the cache while the block runs.

        `RefusedError` for what a project may not say, `EnvBuildError` for a build that fails.
        """
        project = read_project(folder, self.indexes)
        base = self.interpreter.base_env
        if project.kind == "base" and base is not None:
            yield Environment(base, self.interpreter.python, True, 0.0, "")
            return
        key = cache_key(project, self.interpreter, self.uv_version, self.indexes)
        with self.cache.use(key, lambda workspace: self._build(project, workspace)) as entry:
            python = entry.path / "bin" / "python"
            yield Environment(entry.path, python, entry.cached, entry.seconds, entry.output)

    def _build(self, project: Project, workspace: Path) -> str:
        """Run the project's build commands in `workspace`; their output, or `EnvBuildError`."""
        deadline = time.monotonic() + self.timeout_s
        target = workspace / BUILT
        # A download cache of the build's own, gone with its workspace: a build (an sdist's
        # backend runs code) can never leave a poisoned package for another account's build,
        # and the byte budget counts all there is. The environment cache is the cache.
        private = {"UV_CACHE_DIR": str(workspace / "uv-cache")}
        python = str(self.interpreter.python)
        venv = [self.uv, "venv", "--relocatable", "--python", python, str(target)]
        base = self.interpreter.base_env
        if project.kind == "requirements" and base is not None and not is_venv(base):
            venv.append("--system-site-packages")
        places = BuildPlaces(
            project.folder, workspace, self.interpreter.python.parent.parent, Path(self.uv)
        )
        outputs = [self._run(venv, places, private, deadline)]
        if project.kind == "requirements":
            if base is not None and is_venv(base):
                # A venv's packages are not "system" ones to a venv made over it: a path file.
                sites = "\n".join(str(p) for p in site_packages(base))
                (site_packages(target)[0] / "_fairgpu_base.pth").write_text(sites + "\n")
            install = [self.uv, "pip", "install", "--python", str(target / "bin" / "python")]
            install += ["-r", str(project.folder / "requirements.txt")]
            outputs.append(self._run(install, places, private, deadline))
        elif project.kind == "lock":
            sync = [self.uv, "sync", "--frozen", "--no-install-project", "--python", python]
            environment = private | {"UV_PROJECT_ENVIRONMENT": str(target)}
            outputs.append(self._run(sync, places, environment, deadline))
        return "".join(outputs)

    def _run(
        self, command: list[str], places: BuildPlaces, extra: dict[str, str], deadline: float
    ) -> str:
        """One build command in its own process group, killed whole at the deadline."""
        env = operator_environ(self.environ) | {"PATH": "/usr/bin:/bin"} | extra
        with subprocess.Popen(
            self.wrap(command, places),
            cwd=places.project,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        ) as process:
            try:
                output, _ = process.communicate(timeout=max(deadline - time.monotonic(), 0.0))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                raise EnvBuildError(
                    f"environment build ran past {self.timeout_s:g} s", _rest(process)
                ) from None
        if process.returncode != 0:
            raise EnvBuildError(f"environment build failed: {command[1:3]}", output)
        return output

    def _run_quick(self, command: list[str]) -> str:
        """A short query of uv or an interpreter, outside any sandbox; its stdout, stripped."""
        env = operator_environ(self.environ) | {
            name: self.environ[name] for name in ("PATH", "HOME") if name in self.environ
        }
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)
        if done.returncode != 0:
            raise EnvBuildError(f"{command[0]} failed", done.stdout + done.stderr)
        return done.stdout.strip()

    def _interpreter(self, base_env: Path | None, bare: Path | None) -> Interpreter:
        """The base's interpreter, or a bare one (`bare`, else uv's system interpreter): never
        the service's own environment."""
        if base_env is not None:
            base_env = base_env.resolve()
            if base_env == Path(sys.prefix).resolve() and sys.prefix != sys.base_prefix:
                raise ValueError("SCRIPT_BASE_ENV is the service's own environment: refused")
            python = next(
                (
                    p
                    for p in (base_env / "bin" / "python3", base_env / "bin" / "python")
                    if p.exists()
                ),
                base_env / "bin" / "python3",
            )
            if not python.exists():
                raise ValueError(f"SCRIPT_BASE_ENV has no bin/python3: {base_env}")
            fingerprint = base_fingerprint(base_env)
        elif bare is not None:
            python, fingerprint = bare, ""
        else:
            # --system: uv skips virtual environments (the service's among them).
            found = self._run_quick([self.uv, "python", "find", "--system"])
            python, fingerprint = Path(found), ""
        version = self._run_quick([str(python), "-I", "-c", "import sys; print(sys.version)"])
        return Interpreter(python, version, base_env, fingerprint)


#: How long the output of a killed build is waited for: a process that left the build's group
#: could hold its pipe open for ever.
KILLED_OUTPUT_WAIT_S = 5.0


def _rest(process: subprocess.Popen[str]) -> str:
    """What a killed build printed, if its pipe closes soon."""
    try:
        output, _ = process.communicate(timeout=KILLED_OUTPUT_WAIT_S)
    except subprocess.TimeoutExpired:
        return "(the build's output was lost: a process it started held it open)"
    return output
