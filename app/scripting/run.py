"""One script job's run: its code, its environment, its sandbox, its stops and its end.

`ScriptRunner` is made once per job child (the `script` type's setup()) from the settings, and
runs job after job: fetch the code (its SHA-256 checked) into a fresh folder and unpack it; get
the project's environment (built in the sandbox, or found in the host's cache); start the
command in the sandbox with the allowlisted environment; stream its output to the job's log and
progress; on a stop's ask, SIGTERM to its whole tree (the worker kills what is left after the
stop's grace); then read how it ended. docs/scripts.md, "How a script runs".
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import app
from app.code.archive import Bounds, unpack
from app.jobs.context import JobCancelledError, JobContext, JobFailedError, JobPreemptedError
from app.jobs.registry import MAX_OUTPUT_BYTES
from app.scripting import sandbox
from app.scripting.builds import (
    SandboxedEnvs,
    bare_python,
    bindable,
    build_readonly,
    build_wrap,
    sandbox_uv,
)
from app.scripting.env_cache import EnvCache
from app.scripting.env_rules import RefusedError
from app.scripting.envs import EnvBuildError, Environment, ScriptEnvs
from app.scripting.launch import Launched, script_environment, start_sandboxed, start_unconfined
from app.scripting.network import Blocklist, forwarded_resolv_conf, loopback_resolver
from app.scripting.places import (
    RunFolder,
    default_root,
    give_back,
    prepare_root,
    read_output,
    sweep_dead,
    sweep_older,
    traversable,
)
from app.scripting.sandbox import NOBODY, Sandbox
from app.scripting.streams import Streams
from app.settings import Settings

#: How often a running script's stop and yield flags are read.
POLL_S = 0.1
#: A build's workspace older than its time limit and this is one a killed child left.
BUILD_SWEEP_MARGIN_S = 600.0
#: How long the output of an ended script is waited for (a process it left may hold its pipes).
STREAM_END_WAIT_S = 5.0


#: Copies a code archive to a path, its SHA-256 checked (app.code.store.CodeStore.fetch).
Fetch = Callable[[str, Path], None]


class SandboxError(RuntimeError):
    """The sandbox ended without the script's exit code."""


class CodeGoneError(RuntimeError):
    """The job's code is not in the store (removed by hand: a job's code is never swept)."""


@dataclass(frozen=True)
class Asked:
    """What the run was asked: "stop" (a cancel or a timeout) or "yield" (a preemption)."""

    what: str


class ScriptRunner:
    """Runs script jobs on this worker (one at a time per child)."""

    def __init__(
        self,
        settings: Settings,
        fetch: Fetch,
        *,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.settings, self.fetch = settings, fetch
        self.sandboxed = settings.script_sandbox == "bwrap"
        if self.sandboxed:
            problem = sandbox.available(NOBODY)
            if problem is not None:
                raise RuntimeError(
                    f"this worker cannot run script jobs: its sandbox cannot start ({problem}); "
                    "install bubblewrap 0.5+ and allow unprivileged user namespaces, or set "
                    "SCRIPT_SANDBOX=none to run scripts unconfined (development only)"
                )
            # Builds always need the filtered network, scripts when SCRIPT_NETWORK is on.
            problem = sandbox.network_available(NOBODY)
            if problem is not None:
                raise RuntimeError(
                    "this worker cannot run script jobs: it cannot make their filtered network "
                    f"({problem}); install passt and iproute2 and give the worker /dev/net/tun "
                    '(docs/security.md, "Script jobs\' sandbox")'
                )
        self.blocklist = Blocklist(settings)
        self.dns_forward: tuple[str, Path] | None = None
        environ = dict(os.environ if environ is None else environ)
        self.work_root = settings.script_work_dir or default_root("fairgpu-scripts")
        prepare_root(self.work_root, shared=settings.script_work_dir is None)
        sweep_dead(self.work_root)
        cache_root = settings.script_env_cache_dir or default_root("fairgpu-envs")
        prepare_root(cache_root, shared=settings.script_env_cache_dir is None)
        cache = EnvCache(cache_root, settings.script_env_cache_bytes)
        if self.sandboxed and loopback_resolver():
            self.dns_forward = forwarded_resolv_conf(cache_root)
        for folder in ("envs", "tmp"):  # made by the cache with the worker's umask
            prepare_root(cache_root / folder)
        sweep_older(cache_root / "tmp", settings.env_build_timeout_s + BUILD_SWEEP_MARGIN_S)
        self.envs = self._envs(cache, environ)
        self.readonly = interpreter_places(self.envs)
        # The service's own package, where a bound folder (/usr) would show it to scripts.
        package = Path(app.__file__).resolve().parent
        self.hidden = (package,) if Path("/usr") in package.parents else ()

    def _envs(self, cache: EnvCache, environ: dict[str, str]) -> ScriptEnvs:
        base, timeout_s = self.settings.script_base_env, self.settings.env_build_timeout_s
        if not self.sandboxed:
            return ScriptEnvs(cache, base_env=base, timeout_s=timeout_s, environ=environ)
        uv = sandbox_uv(environ.get("UV", "uv"), cache.root / "tools")  # `uv run` sets UV
        python = None if base else bare_python(uv, self.settings.script_python, environ)
        readonly = build_readonly(environ)
        envs = SandboxedEnvs(
            cache,
            base_env=base,
            timeout_s=timeout_s,
            wrap=build_wrap(NOBODY, readonly, self.blocklist, self.dns_forward),
            environ=environ,
            uv=uv,
            python=python,
            user=NOBODY,
        )
        readonly += interpreter_places(envs)  # a venv base's interpreter, linked from elsewhere
        return envs

    def run(
        self, ctx: JobContext, code: str, command: Sequence[str], env: Mapping[str, str]
    ) -> Any:
        """Run the script; its output (the JSON it wrote, None when none). JobFailedError for a
        refused or failed environment or an exit code other than 0; JobCancelledError and
        JobPreemptedError for a script that ended after a stop's or a yield's ask."""
        folder = RunFolder.make(self.work_root, ctx.task_id)
        try:
            self._unpack(code, folder)
            with ExitStack() as stack:
                environment = self._environment(ctx, folder, stack)
                _check_asks(ctx)  # asked during the build: the script never starts
                launched = self._start(ctx, folder, environment, command, env)
                stack.callback(launched.close)
                returncode, asked = _watch(ctx, launched)
                exit_code = launched.exit_code(returncode)
            if exit_code is not None:
                ctx.note(exit_code=exit_code)
            if asked is not None:
                _raise_asked(ctx, asked, exit_code)
            if exit_code is None:
                raise SandboxError(
                    f"the sandbox ended (code {returncode}) without the script's exit code: "
                    "it failed to start the script, or the script ended the sandbox's own "
                    "processes (the log says more)"
                )
            if exit_code != 0:
                raise JobFailedError(f"script exited with code {exit_code}", "exit_code")
            return read_output(folder.output, MAX_OUTPUT_BYTES)
        finally:
            give_back(ctx.output_dir, ctx.checkpoint_dir)
            folder.remove()

    def _unpack(self, code: str, folder: RunFolder) -> None:
        try:
            self.fetch(code, folder.archive)
        except FileNotFoundError:
            raise CodeGoneError(f"the code {code} is no longer stored: upload it again") from None
        bounds = Bounds(self.settings.max_code_members, self.settings.max_code_unpacked_bytes)
        unpack(folder.archive, folder.work, bounds)
        folder.archive.unlink()
        folder.output.unlink(missing_ok=True)  # the project's own file of that name is not output

    def _environment(self, ctx: JobContext, folder: RunFolder, stack: ExitStack) -> Environment:
        """The project's environment, held for the run; its build's output in the log."""
        started = time.monotonic()
        try:
            environment = stack.enter_context(self.envs.environment(folder.work))
        except RefusedError as error:
            ctx.note(environment={"cached": False, "seconds": _since(started)})
            ctx.log(f"fairgpu: the project's environment is refused: {error}")
            raise JobFailedError(f"environment refused: {error}", "environment") from None
        except EnvBuildError as error:
            ctx.note(environment={"cached": False, "seconds": _since(started)})
            ctx.log(error.output.rstrip("\n") or "(the build printed nothing)")
            raise JobFailedError(str(error), "environment") from None
        if environment.output:
            ctx.log(environment.output.rstrip("\n"))
        seconds = round(environment.seconds, 3)
        ctx.note(environment={"cached": environment.cached, "seconds": seconds})
        how = "found in this host's cache" if environment.cached else f"built in {seconds:g} s"
        ctx.log(f"fairgpu: environment {how}")
        return environment

    def _start(
        self,
        ctx: JobContext,
        folder: RunFolder,
        environment: Environment,
        command: Sequence[str],
        env: Mapping[str, str],
    ) -> Launched:
        variables = script_environment(
            job_id=ctx.task_id,
            env_dir=environment.path,
            work_dir=folder.work,
            output=folder.output,
            artifacts_dir=ctx.output_dir,
            checkpoint_dir=ctx.checkpoint_dir,
            gpu_ids=cards_of(ctx),
            preemptible=ctx.preemptible,
            extra=env,
        )
        if not self.sandboxed:
            return start_unconfined(command, variables, folder.work)
        for given in (ctx.output_dir, ctx.checkpoint_dir):
            traversable(given)  # the worker's 0700 temporary folders: o+x, never o+r
        box = Sandbox(
            command=list(command),
            environment=variables,
            env_dir=environment.path,
            work_dir=folder.work,
            artifacts_dir=ctx.output_dir,
            checkpoint_dir=ctx.checkpoint_dir,
            readonly=self.readonly,
            hidden=self.hidden,
            gpus=cards_of(ctx),
            network=self.settings.script_network,
            blocked=self.blocklist.networks() if self.settings.script_network else (),
            dns_forward=self.dns_forward,
        )
        box.hand_over()
        return start_sandboxed(box, environment.python)


def interpreter_places(envs: ScriptEnvs) -> list[Path]:
    """The prefixes an environment's interpreter needs, read only: the base, the interpreter's
    own (a venv's python links to another), those /usr does not hold already."""
    interpreter = envs.interpreter
    python = interpreter.python
    found = [python.parent.parent, Path(os.path.realpath(python)).parent.parent]
    if interpreter.base_env is not None:
        found.append(interpreter.base_env)
    usr = Path("/usr")
    kept = [p for p in found if p != usr and usr not in p.parents and bindable(p)]
    return list(dict.fromkeys(kept))


def _watch(ctx: JobContext, launched: Launched) -> tuple[int, Asked | None]:
    """Stream the script's output until it ends, passing on the first stop or yield asked; its
    process's return code, and what it was asked."""
    process = launched.process
    assert process.stdout is not None
    assert process.stderr is not None
    streams = Streams(process.stdout, process.stderr, ctx.log, ctx.progress)
    asked: Asked | None = None
    signalled = False
    while True:
        try:
            returncode = process.wait(timeout=POLL_S)
            break
        except subprocess.TimeoutExpired:
            streams.flush()
        if asked is None:
            asked = _ask(ctx)
            if asked is not None:
                streams.flush()  # what the script said before, first
                ctx.log(f"fairgpu: asked to {asked.what}: SIGTERM to the script's processes")
        if asked is not None and not signalled:
            signalled = launched.terminate()
    streams.join(STREAM_END_WAIT_S)
    # An ask that came only after the script ended was never passed on: the script finished.
    return returncode, asked


def _ask(ctx: JobContext) -> Asked | None:
    # The budget's end is the worker's to call: it turns ctx.cancelled on and records a timeout.
    # A stop of our own at the deadline would look to it like a cancel nobody asked for.
    if ctx.cancelled:
        return Asked("stop")
    if ctx.preempted:
        return Asked("yield")
    return None


def _check_asks(ctx: JobContext) -> None:
    asked = _ask(ctx)
    if asked is not None:
        _raise_asked(ctx, asked, None, started=False)


def _raise_asked(
    ctx: JobContext, asked: Asked, exit_code: int | None, *, started: bool = True
) -> None:
    ended = f"with code {exit_code}" if exit_code is not None else "its exit code unknown"
    if not started:
        ended = "before it started"
    if asked.what == "yield" and not ctx.cancelled:
        raise JobPreemptedError(f"job {ctx.task_id}: the script yielded its GPU ({ended})")
    raise JobCancelledError(f"job {ctx.task_id}: the script was stopped ({ended})")


def _since(started: float) -> float:
    return round(time.monotonic() - started, 3)


def cards_of(ctx: JobContext) -> list[int]:
    """The host's numbers of the run's cards, in order: none on a CPU worker (its devices are
    simulated), all of them for a job of several cards."""
    return [d.gpu_id for d in ctx.devices if d.gpu_id is not None]
