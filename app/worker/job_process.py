"""The job child's side: what runs in the process that JobChild spawns. It loads the job types,
then serves calls one at a time until the worker goes away (run_call also serves InlineExecutor,
which runs jobs in the worker's own process)."""

from __future__ import annotations

import ctypes
import faulthandler
import importlib.util
import json
import multiprocessing
import os
import resource
import shutil
import signal
import sys
import threading
import time
import traceback
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from app.jobs import MAX_OUTPUT_BYTES, JobCancelledError, JobContext, load_registry
from app.jobs.registry import JobType, Registry, RegistryError, Runnable
from app.worker.calls import Call, EndKind, Reply, last_lines

PARENT_EXIT_S = 5.0  # how long a child whose pipe closed waits to see the worker gone


def child_main(
    conn: Connection,
    cancel: ctypes.c_bool,
    modules: list[str],
    gpu_id: int | None,
    output_paths: list[str],
) -> None:
    """The child process: load the job types, say so, then serve calls until the pipe closes."""
    _redirect_output(output_paths)
    # a fatal signal's traceback goes to stderr, for the error: the faulting thread's only, so
    # that the job's last output still fits in the lines quoted
    faulthandler.enable(all_threads=False)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the worker's to handle
    folder = Path(output_paths[0]).parent
    _exit_with_parent(folder)
    try:
        registry = load_registry(modules)
    except RegistryError as exc:
        conn.send(("error", str(exc)))
        return
    device, runnables = _device(gpu_id), dict[str, Runnable]()
    pipe = _Pipe(conn)
    pipe.send(("ready", None))
    while True:
        try:
            call = conn.recv()
        except EOFError:
            _await_orphaning(folder)
            return
        reply = run_call(registry, runnables, call, _context(call, device, cancel, pipe))
        for stream in (sys.stdout, sys.stderr):
            stream.flush()  # the job's last words are in the files before the parent hears
        pipe.send(reply)


class _Pipe:
    """The child's end of the pipe, shared by the serving loop and a job's threads (ctx.log
    from a data loader's thread): one message at a time."""

    def __init__(self, conn: Connection) -> None:
        self._conn, self._lock = conn, threading.Lock()

    def send(self, message: object) -> None:
        with self._lock:
            self._conn.send(message)


def _context(call: Call, device: Any, cancel: ctypes.c_bool, pipe: _Pipe) -> JobContext:
    """The job's context: its cancel flag, and ctx.log and ctx.progress as messages to the
    parent (tagged with the job, so that a lingering thread of an earlier one is ignored)."""

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
    )


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
    """Remove the child's folder (output files, job folders) that the dead worker can no longer
    delete, and exit."""
    shutil.rmtree(folder, ignore_errors=True)
    os._exit(1)


def _device(gpu_id: int | None) -> Any:
    """torch's device for the jobs: the one visible card, the CPU, or None without torch."""
    if importlib.util.find_spec("torch") is None:
        return None
    import torch

    # CUDA_VISIBLE_DEVICES has pinned the worker's card: it is index 0 here
    return torch.device("cpu" if gpu_id is None else "cuda:0")


def run_call(
    registry: Registry, runnables: dict[str, Runnable], call: Call, ctx: JobContext
) -> Reply:
    """Run the call's job in this process and say how it ended. `runnables` keeps each type's
    instance once its setup() has succeeded, so setup runs once per process (and again after
    it raised). The child runs every job with it; so does InlineExecutor, in the worker."""
    end: EndKind
    output: str | None
    error: str | None
    try:
        end, output, error = "success", _run(registry, runnables, call, ctx), None
    except JobCancelledError as exc:
        end, output, error = "cancelled", None, str(exc)
    except Exception as exc:
        end, output, error = "exception", None, _describe(exc)
    if ctx.cancelled:
        end, output = "cancelled", None  # any end after a cancel counts as the cancel
    return Reply(end, output, error, *_peaks(ctx.device))


def _run(registry: Registry, runnables: dict[str, Runnable], call: Call, ctx: JobContext) -> str:
    job_type = registry.get(call.type)
    if job_type is None:
        raise LookupError(f"unknown job type {call.type!r}")
    if job_type.unavailable is not None:
        raise RuntimeError(f"job type {call.type!r} {job_type.unavailable}")
    inp = job_type.parse_input(json.loads(call.input))
    runnable = runnables.get(job_type.name)
    if runnable is None:
        runnable = job_type.make()
        runnable.setup(ctx)  # if it raises, the next job of the type tries a fresh instance
        runnables[job_type.name] = runnable
    return _dumped(job_type, runnable.run(ctx, inp))


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


def _describe(exc: BaseException) -> str:
    """The exception's message, then the last lines of its traceback."""
    lines = "".join(traceback.format_exception(exc))
    return f"{type(exc).__name__}: {exc}\n{last_lines(lines)}"


def _peaks(device: Any) -> tuple[int | None, int]:
    """The job's peak GPU memory (then free the cache for the next job) and the child's peak
    RSS so far."""
    gpu_peak = None
    if device is not None and device.type == "cuda":
        import torch

        gpu_peak = int(torch.cuda.max_memory_allocated(device))
        torch.cuda.reset_peak_memory_stats(device)
        torch.cuda.empty_cache()
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return gpu_peak, rss_kib * (1 if sys.platform == "darwin" else 1024)
