"""The job child's side: what runs in the process that JobChild spawns. It loads the job types,
probes its device, then serves calls one at a time until the worker goes away. For each call it
runs the type's setup() (once per process) before it says the job has begun, so that the
worker's clock, and the bill, start after it; once the reply is sent it tidies up (the
allocator's cache) and reports its state (After), from which the worker decides whether this
child serves the next job (app/worker/hygiene.py). Jobs also serves InlineExecutor, which runs
jobs in the worker's own process."""

from __future__ import annotations

import ctypes
import faulthandler
import gc
import importlib.util
import json
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from app.jobs import (
    MAX_OUTPUT_BYTES,
    JobCancelledError,
    JobContext,
    JobFailedError,
    JobPreemptedError,
    load_registry,
)
from app.jobs.registry import JobType, Registry, RegistryError, Runnable
from app.worker import gpu, memory, reaper, tracebacks
from app.worker.calls import ERROR_CHARS, After, Call, EndKind, Reply
from app.worker.facts import RunFacts
from app.worker.probe import DeviceProbe, NoDeviceProbe
from app.worker.watchdog import Watchdog

PARENT_EXIT_S = 5.0  # how long a child whose pipe closed waits to see the worker gone


@dataclass(frozen=True)
class ChildSpec:
    """What the worker tells its child at its start: the job modules, the device, the files
    for fds 1 and 2, the device probe, and the GPU bytes a job may leave beyond the baseline
    before a full garbage collection is worth its milliseconds (None: never)."""

    modules: list[str]
    gpu_id: int | None
    output_paths: list[str]
    probe: DeviceProbe
    leak_limit: int | None = None
    #: the shared double of app/worker/watchdog.py: by when a running job must have stopped
    lease_deadline: Any = None
    #: the cards of a job of several, in order, for CUDA_VISIBLE_DEVICES (None: the worker's
    #: own card, which its environment names already)
    gpu_ids: tuple[int, ...] | None = None


def child_main(
    conn: Connection, cancel: ctypes.c_bool, spec: ChildSpec, preempt: ctypes.c_bool
) -> None:
    """The child process: load the job types, probe the device (a fresh child may initialise
    it), say so, then serve calls until the pipe closes. `cancel` and `preempt` are the flags
    the worker sets to ask the running job to stop or to yield its GPU."""
    gpu.see_cards(spec.gpu_ids)  # first: a job module may import torch and touch CUDA at import
    _redirect_output(spec.output_paths)
    # a fatal signal's traceback goes to stderr, for the error: the faulting thread's only, so
    # that the job's last output still fits in the lines quoted
    faulthandler.enable(all_threads=False)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the worker's to handle
    folder = Path(spec.output_paths[0]).parent
    reaper.become_subreaper()  # what a job starts stays below the child, however it detaches
    _exit_with_parent(folder)
    try:
        registry = load_registry(spec.modules)
    except RegistryError as exc:
        conn.send(("error", str(exc)))
        return
    problem = spec.probe.check(init=True)
    if problem is not None:
        conn.send(("broken", problem))
        return
    jobs, device = Jobs(registry, spec.probe), _device(spec.gpu_id)
    jobs.baseline = spec.probe.release()
    pipe, processes = _Pipe(conn), reaper.Sweeper()
    lease = Watchdog(spec.lease_deadline).start()  # a run whose lease lapses stops
    pipe.send(("ready", None))
    while True:
        try:
            call = conn.recv()
        except EOFError:
            _await_orphaning(folder)
            return
        processes.sweep()  # what an earlier job's lingering thread started
        began = _began(pipe, call.task_id, processes, jobs)
        lease.running = True
        facts = RunFacts(partial(_tell_facts, pipe, call.task_id))
        reply = jobs.run(call, _context(call, device, (cancel, preempt), pipe), began, facts)
        lease.running = False
        processes.sweep()  # the run's processes end with it
        for stream in (sys.stdout, sys.stderr):
            stream.flush()  # the job's last words are in the files before the parent hears
        pipe.send(reply)
        pipe.send(jobs.after(spec.leak_limit))


def _began(pipe: _Pipe, task_id: str, processes: reaper.Sweeper, jobs: Jobs) -> Callable[[], None]:
    def began() -> None:
        processes.began()  # the processes setup() started are the child's, not the job's
        pipe.send(("began", task_id, jobs.set_up))

    return began


def _tell_facts(pipe: _Pipe, task_id: str, text: str) -> None:
    """The run's facts as noted so far, to the worker at once: a run killed later keeps them."""
    pipe.send(("note", task_id, text))


class _Pipe:
    """The child's end of the pipe, shared by the serving loop and a job's threads (ctx.log
    from a data loader's thread): one message at a time."""

    def __init__(self, conn: Connection) -> None:
        self._conn, self._lock = conn, threading.Lock()

    def send(self, message: object) -> None:
        with self._lock:
            self._conn.send(message)


def _context(
    call: Call, device: Any, flags: tuple[ctypes.c_bool, ctypes.c_bool], pipe: _Pipe
) -> JobContext:
    """The job's context: its cancel and yield flags, its checkpoint folder, and ctx.log and
    ctx.progress as messages to the parent (tagged with the job, so that a lingering thread of
    an earlier one is ignored)."""
    cancel, preempt = flags

    def say(text: str) -> None:
        pipe.send(("log", call.task_id, time.time(), text))

    def progress(fraction: float, message: str) -> None:
        pipe.send(("progress", call.task_id, fraction, message))

    return JobContext(
        call.task_id,
        call.gpu_id,
        device,
        time.time() + call.budget_s,
        lambda: bool(cancel.value),
        output_dir=Path(call.output_dir),
        _log=say,
        _progress=progress,
        checkpoint_dir=checkpoint_dir(call),
        preemptions=call.preemptions,
        preemptible=call.preemptible,
        _yield=lambda: bool(preempt.value),
        devices=call.devices,
    )


def checkpoint_dir(call: Call) -> Path:
    """The job's checkpoint folder as the worker named it, or a fresh scratch folder where it
    named none (the folder, not the run, is the job's: nothing here deletes it)."""
    if call.checkpoint_dir:
        return Path(call.checkpoint_dir)
    return Path(tempfile.mkdtemp(prefix="fairgpu-checkpoint-"))


def _redirect_output(paths: list[str]) -> None:
    """fds 1 and 2 to their files, in append mode (the parent may empty them between jobs)."""
    for target, path in zip((1, 2), paths, strict=True):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(fd, target)
        os.close(fd)
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(line_buffering=True)  # a job's prints reach the files as it goes


def _exit_with_parent(folder: Path) -> None:
    """End the child when the worker dies without closing it (SIGKILL, OOM): a running job
    would otherwise hold the GPU with no one left to stop it."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        parent.join()  # returns when the parent's end of its sentinel pipe closes
        _orphaned(folder)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _await_orphaning(folder: Path) -> None:
    """The pipe closed while the child waited for a call: the worker is dying (it closes the
    pipe only after killing the child). Give it a moment, then clean up for it."""
    parent = multiprocessing.parent_process()
    if parent is not None:
        parent.join(PARENT_EXIT_S)
        if not parent.is_alive():
            _orphaned(folder)


def _orphaned(folder: Path) -> None:
    """End the job's processes, remove the child's folder (output files, job folders) that the
    dead worker can no longer delete, and exit."""
    reaper.kill_below(os.getpid())
    shutil.rmtree(folder, ignore_errors=True)
    os._exit(1)


def _device(gpu_id: int | None) -> Any:
    """torch's device for the jobs: the one visible card, the CPU, or None without torch."""
    if importlib.util.find_spec("torch") is None:
        return None
    import torch

    # CUDA_VISIBLE_DEVICES has pinned the worker's card: it is index 0 here
    return torch.device("cpu" if gpu_id is None else "cuda:0")


class Jobs:
    """The job types of a process, their set-up instances and its device probe: runs one call
    at a time (the child's, or InlineExecutor's in the worker)."""

    def __init__(self, registry: Registry, probe: DeviceProbe | None = None) -> None:
        self.registry = registry
        self.probe: DeviceProbe = probe or NoDeviceProbe()
        #: each type's instance once its setup() has succeeded: setup runs once per process
        #: (and again after it raised)
        self.runnables: dict[str, Runnable] = {}
        #: GPU bytes held after the last setup(): what a job may not leave behind
        self.baseline: int | None = None
        #: whether the call in hand ran its type's setup() (its job began that much later)
        self.set_up = False

    def run(
        self,
        call: Call,
        ctx: JobContext,
        began: Callable[[], None] = lambda: None,
        facts: RunFacts | None = None,
    ) -> Reply:
        """Run the call's job and say how it ended. began() is called once the type is set up,
        when the job's own time starts; a job that never got there ends `setup` (its type's
        setup() failed) or `exception` (its type or input is wrong) without calling it. What
        the job notes (ctx.note) goes to `facts`, and with the reply however the run ends; a
        JobFailedError ends it with its kind, its message the error."""
        self.set_up = False
        facts = facts or RunFacts()
        ctx = replace(ctx, _note=facts.note)
        try:
            job_type, runnable, inp = self._prepare(call, ctx)
        except Exception as exc:
            kind: EndKind = "setup" if isinstance(exc, _SetupError) else "exception"
            if ctx.cancelled or isinstance(exc, JobCancelledError):
                kind = "cancelled"  # a setup() that saw the cancel and let it through
            elif _yielded(exc, ctx):
                kind = "preempted"  # or the ask to yield
            cause = exc.__cause__ if isinstance(exc, _SetupError) else exc
            said = str(exc) if isinstance(exc, _SetupError) else tracebacks.describe(exc, None)
            traced = tracebacks.trace(cause or exc)
            return Reply(kind, None, said, trace=traced, facts=facts.text())
        began()
        self.probe.reset_peak()
        clock = time.monotonic()
        ctx = replace(ctx, deadline=time.time() + call.budget_s)  # the budget starts now
        end: EndKind = "success"
        output: str | None = None
        error: str | None = None
        trace: str | None = None
        try:
            output = _dumped(job_type, runnable.run(ctx, inp))
        except JobCancelledError as exc:
            end, error = "cancelled", str(exc)
        except JobFailedError as exc:  # a failure the type names: no traceback of ours to show
            end, error = FAILED.get(exc.kind, "exception"), str(exc)[:ERROR_CHARS]
        except Exception as exc:
            if _yielded(exc, ctx):
                end, error = "preempted", str(exc)
            else:
                end = "oom" if self._out_of_memory(exc) else "exception"
                error, trace = tracebacks.describe(exc, job_type), tracebacks.trace(exc)
        seconds = time.monotonic() - clock  # the job's own time, whatever its parent went through
        if ctx.cancelled:
            end, output = "cancelled", None  # any end after a cancel counts as the cancel
        peaks = (self._peak(), memory.peak_rss())
        return Reply(end, output, error, *peaks, trace, seconds, facts.text())

    def after(self, leak_limit: int | None = None) -> After:
        """The process's state once a job has ended: the device checked (never initialised
        here), the allocator's cache freed, what is still held. When more than leak_limit
        bytes beyond the baseline look held, a full collection runs first, so that tensors
        kept only by reference cycles are not taken for a leak."""
        try:
            problem = self.probe.check(init=False)
            held = None if problem else self.probe.release()
            if held is not None and leak_limit is not None and held - self._base() > leak_limit:
                gc.collect()
                held = self.probe.release()
        except Exception as exc:  # a device that cannot even say what it holds is unusable
            problem, held = _first_line(exc), None
        return After(problem, held, self.baseline, memory.current_rss())

    def _prepare(self, call: Call, ctx: JobContext) -> tuple[JobType, Runnable, BaseModel]:
        job_type = self.registry.get(call.type)
        if job_type is None:
            raise LookupError(f"unknown job type {call.type!r}")
        if job_type.unavailable is not None:
            raise RuntimeError(f"job type {call.type!r} {job_type.unavailable}")
        inp = job_type.parse_input(json.loads(call.input))
        runnable = self.runnables.get(job_type.name)
        if runnable is None:
            runnable = job_type.make()
            try:
                runnable.setup(ctx)  # if it raises, the next job of the type tries afresh
            except (JobCancelledError, JobPreemptedError):
                raise
            except Exception as exc:
                why = f"setup() of {job_type.name!r} failed: {tracebacks.describe(exc, job_type)}"
                raise _SetupError(why) from exc
            self.runnables[job_type.name] = runnable
            self.set_up = True
            self.baseline = self._held()
        return job_type, runnable, inp

    def _base(self) -> int:
        return self.baseline or 0

    def _held(self) -> int | None:
        try:
            return self.probe.release()
        except Exception:
            return None  # the check after the job will say what is wrong

    def _peak(self) -> int | None:
        try:
            return self.probe.peak()
        except Exception:
            return None

    def _out_of_memory(self, exc: BaseException) -> bool:
        try:
            return self.probe.out_of_memory(exc)
        except Exception:
            return False


#: The ends of a run that its type failed with JobFailedError, by the error's kind.
FAILED: dict[str, EndKind] = {"environment": "environment", "exit_code": "exit_code"}


def _yielded(exc: Exception, ctx: JobContext) -> bool:
    """Whether the job ended its run as asked to: JobPreemptedError after the ask. Raised with
    no ask (the job's own code raised it) it is an exception like any other."""
    return isinstance(exc, JobPreemptedError) and ctx.preempted


class _SetupError(Exception):
    """A type's setup() raised: the message is what its job's error says."""


def _dumped(job_type: JobType, result: object) -> str:
    """The output as the type's model, in JSON, within MAX_OUTPUT_BYTES."""
    if isinstance(result, BaseModel) and not isinstance(result, job_type.output_model):
        result = result.model_dump()
    text = job_type.output_model.model_validate(result).model_dump_json()
    size = len(text.encode())
    if size > MAX_OUTPUT_BYTES:
        raise ValueError(
            f"the job's output is {size} bytes of JSON, over the limit of {MAX_OUTPUT_BYTES} "
            "bytes (MAX_OUTPUT_BYTES): keep large results elsewhere and return a reference"
        )
    return text


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")
