"""JobChild: the worker's side of the warm child process its jobs run in (the child's side is
job_process.py).

The child is started with `spawn` (CUDA does not survive a fork), loads the job types and
probes its device once, and serves job after job, so a type's `setup()` runs once per child,
before the job's clock starts. The worker (the parent) keeps the clock: a job past its budget
plus a grace, one that ignores its cancel, or a preemptible job's run that does not yield its GPU
within PREEMPT_GRACE_S of the ask, is killed with its child, and so is nothing else:
a job that crashes the interpreter or hangs costs a fresh child, never the worker or its lease.
After each job the child reports its state, and a child that a job left with a broken device,
leaked GPU memory or too big a heap (hygiene.py's limits) is replaced before the next job. The
replacement is spawned at once, while the worker records the job's end; a replacement whose
device probe fails raises DeviceBrokenError at the next run: the device is broken for good.

The child writes its fds 1 and 2 to two files of its own, which the worker tails while a job
runs: their lines are the job's `stdout` and `stderr` log lines, and a crash's last words (a C
library's too, and faulthandler's traceback) are quoted in the job's error. ctx.log and
ctx.progress come over the pipe; all of it goes to the JobEvents given to run(), and what
ctx.note notes, as it is noted, to the job's end. Each job gets a fresh, empty output folder in
the child's temporary folder: its files are the artifacts.
"""

from __future__ import annotations

import atexit
import ctypes
import logging
import multiprocessing
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from app.models import ChildReplacement
from app.worker import reaper, watchdog
from app.worker.calls import (
    Call,
    ChildStartError,
    DeviceBrokenError,
    Ended,
    Reply,
    death,
    last_lines,
    never,
)
from app.worker.deadline import KILLED_END, KILLED_WHY, TIMEOUT_TOLERANCE_S, Asks, Deadline
from app.worker.end_reason import Why
from app.worker.hygiene import ChildLimits, Verdict, await_after, verdict
from app.worker.job_process import ChildSpec, child_main
from app.worker.live import NO_EVENTS, JobEvents, JobWatch, Stream, last_words, tails_from_here
from app.worker.probe import DeviceProbe, probe_for

log = logging.getLogger(__name__)

POLL_S = 0.1  # how often the parent looks at the pipe, the clock and should_stop()
START_TIMEOUT_S = 300.0  # importing the job modules (torch, a model's code) can take a while
MESSAGES_PER_POLL = 10_000  # a job that floods the pipe still lets the parent watch the clock


class JobChild:
    """The worker's handle on its warm child: start it, run jobs in it, replace it when a job
    takes it down, close it."""

    def __init__(
        self,
        job_modules: Sequence[str],
        gpu_id: int | None,
        *,
        timeout_grace_s: float,
        cancel_grace_s: float,
        kill_grace_s: float = 2.0,
        timeout_tolerance_s: float = TIMEOUT_TOLERANCE_S,
        preempt_grace_s: float = 30.0,
        setup_timeout_s: float = START_TIMEOUT_S,
        limits: ChildLimits | None = None,
        probe: DeviceProbe | None = None,
        gpu_ids: Sequence[int] | None = None,
    ) -> None:
        self._modules, self._gpu_id = list(job_modules), gpu_id
        #: A child of a job of several cards sees exactly these (None: the worker's own card).
        self._gpu_ids = None if gpu_ids is None else tuple(gpu_ids)
        self._timeout_grace, self._cancel_grace = timeout_grace_s, cancel_grace_s
        self._kill_grace, self._setup_timeout = kill_grace_s, setup_timeout_s
        self._preempt_grace, self._tolerance = preempt_grace_s, timeout_tolerance_s
        self._limits = limits or ChildLimits()
        self._probe = probe or probe_for(gpu_id)
        #: Told the reason of each replacement (the worker counts them in Redis).
        self.on_replace: Callable[[ChildReplacement], None] = lambda reason: None
        self._mp = multiprocessing.get_context("spawn")
        # A lock-free shared flag: a child killed while reading it cannot leave a lock held
        # that the worker would then wait on forever (an Event's would).
        self._cancel = self._mp.RawValue(ctypes.c_bool, False)
        self._preempt = self._mp.RawValue(ctypes.c_bool, False)  # ctx.preempted: yield the GPU
        self._stop_by = watchdog.shared_deadline(self._mp)  # the run's lease: see must_stop_by
        self._dir: Path | None = None
        self._process: Any = None  # a SpawnProcess; typeshed does not name it
        self._conn: Connection | None = None
        self._outputs: dict[Stream, Path] = {}  # the child's fds 1 and 2
        self._ready = False
        self._spawned = 0
        self._jobs_run = 0  # by the current child
        self._broken: str | None = None
        self._below: set[int] = set()  # the running job's processes, as last seen

    def broken(self) -> str | None:
        """Why the device is unusable, once a fresh child that replaced one for a device error
        failed its probe too (the job that broke it has its end); None while it works."""
        return self._broken

    def must_stop_by(self, at: float) -> None:
        """The running job must have stopped by `at` (time.monotonic()) unless told a later
        time: the child's watchdog stops the run and itself then (app/worker/watchdog.py)."""
        self._stop_by.value = at

    @property
    def pid(self) -> int | None:
        """The child's pid, None while there is no child."""
        return None if self._process is None else int(self._process.pid)

    def start(self) -> None:
        """Start the child and wait until it has loaded the job types and found its device
        usable; ChildStartError with the child's message if it could not (DeviceBrokenError
        when its device probe failed)."""
        if self._process is None:
            self._spawn()
        self._await_ready()

    def run(
        self,
        call: Call,
        should_stop: Callable[[], bool],
        events: JobEvents = NO_EVENTS,
        should_yield: Callable[[], bool] = never,
    ) -> Ended:
        """Run one job in the child, stopping it past its budget or when should_stop() says so
        (polled every POLL_S; it should only read a flag). A preemptible call's should_yield()
        is polled alike (another's never is): once true, the job sees ctx.preempted and has
        preempt_grace_s to end its run before it is stopped. What the job says goes to events,
        once per poll. The Ended names the job's output folder: the caller deletes it. Its
        seconds count from the end of the type's setup() to the child's reply."""
        late = not self._ready  # the job waits for a child's start: nobody's run time
        self.start()
        assert self._conn is not None
        assert self._dir is not None
        folder = Path(tempfile.mkdtemp(prefix="output-", dir=self._dir))
        scratch = (
            None if call.checkpoint_dir else tempfile.mkdtemp(prefix="checkpoint-", dir=self._dir)
        )
        call = replace(call, output_dir=str(folder), checkpoint_dir=scratch or call.checkpoint_dir)
        watch = JobWatch(call.task_id, events, tails_from_here(self._outputs), late=late)
        self._cancel.value = self._preempt.value = False
        asks = Asks(should_stop, should_yield if call.preemptible else never)
        try:
            self._conn.send(call)
            ended, replied = self._await_end(call, asks, watch)
            self._below = set()  # (a child that replied killed its job's processes itself)
            watch.finish()  # the last lines, written before the reply (or the kill)
            if replied:
                self._jobs_run += 1
                self._tidy()
        except BaseException:
            # the worker gave up on the job (should_stop raised, a signal): a child left running
            # it would answer the next call with this job's reply
            self._stop_child()
            shutil.rmtree(folder, ignore_errors=True)
            raise
        finally:
            watch.close()
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)
        # a reply carries the facts the job noted; a run killed first, those it sent till then
        return replace(ended, output_dir=folder, facts=ended.facts or watch.facts)

    def close(self) -> None:
        """Stop the child (SIGTERM, then SIGKILL) and delete its files; idempotent."""
        self._stop_child()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        atexit.unregister(self.close)

    def _spawn(self) -> None:
        """Start a child without waiting for it: a replacement starts while the worker records
        the end of the job that took its predecessor down."""
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="fairgpu-child-"))
            # before multiprocessing's own exit hook, which would wait for the child forever
            atexit.register(self.close)
        self._spawned += 1
        self._jobs_run = 0
        self._outputs = {
            stream: self._dir / f"child-{self._spawned}.{stream}" for stream in ("stdout", "stderr")
        }
        for path in self._outputs.values():
            path.touch(0o600)  # there before the child writes: the parent may tail it at once
        ours, theirs = self._mp.Pipe()
        paths = [str(path) for path in self._outputs.values()]
        leak = self._limits.leak_bytes
        spec = ChildSpec(
            self._modules, self._gpu_id, paths, self._probe, leak, self._stop_by, self._gpu_ids
        )
        args = (theirs, self._cancel, spec, self._preempt)
        process = self._mp.Process(target=child_main, args=args, name="fairgpu-job-child")
        process.start()
        theirs.close()  # the child holds its end: EOF on ours means the child is gone
        self._process, self._conn, self._ready = process, ours, False

    def _await_ready(self) -> None:
        if self._ready:
            return
        assert self._conn is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._conn.poll(POLL_S):
            if not self._process.is_alive():
                break
            if time.monotonic() > deadline:
                self._stop_child()
                raise ChildStartError(f"the job child did not start within {START_TIMEOUT_S:g} s")
        message = self._receive()
        if message == ("ready", None):
            self._ready = True
            return
        why = message[1] if message is not None else self._died_text(self._start_output())
        self._stop_child()
        if message is not None and message[0] == "broken":
            raise DeviceBrokenError(f"the device failed a fresh job child's probe: {why}")
        raise ChildStartError(f"the job child did not start: {why}")

    def _receive(self) -> Any:
        """The child's next message, or None when it is gone (or silent)."""
        assert self._conn is not None
        try:
            return self._conn.recv() if self._conn.poll(0) else None
        except (EOFError, OSError):
            return None

    def _await_end(self, call: Call, asks: Asks, watch: JobWatch) -> tuple[Ended, bool]:
        """The job's end, and whether the child replied (False: it died or was killed, and a
        fresh one is on its way). Until the child says the job began, the setup's time runs;
        then its budget. How asks, graces and the end combine: app/worker/deadline.py."""
        setup_deadline = time.monotonic() + self._setup_timeout
        stop = Deadline()
        while True:
            polled = self._poll(watch)
            if polled is not None:
                ended, replied = polled
                if replied and watch.began_at is not None:
                    ended = stop.overran(ended, call.budget_s, self._tolerance)
                return ended, replied
            below = reaper.descendants(self._process.pid)  # for a crash: its orphans
            if reaper.alive(self._process.pid):  # a child that died meanwhile shows none: keep
                self._below = below  # the last look, taken while it lived
            now = time.monotonic()
            self._ask(call, stop, asks, watch, now)
            setup_overrun = watch.began_at is None and now >= setup_deadline
            if stop.due(now) or setup_overrun:
                return self._kill(call, watch, stop, setup_overrun=setup_overrun), False

    def _ask(self, call: Call, stop: Deadline, asks: Asks, watch: JobWatch, now: float) -> None:
        """Ask the job to stop or to yield, each once, through the flags it reads; a run still
        going at the end of its budget (and the tolerance) is asked to stop as a cancel asks."""
        if not stop.final and asks.should_stop() and stop.ask("cancel", now, self._cancel_grace):
            self._cancel.value = True  # the job sees ctx.cancelled
        elif stop.reason is None and asks.should_yield():
            stop.ask("preempt", now, self._preempt_grace)
            self._preempt.value = True  # the job sees ctx.preempted
        began = watch.began_at
        over = began is not None and now >= began + call.budget_s + self._tolerance
        if over and stop.ask("timeout", now, self._timeout_grace):
            self._cancel.value = True  # its seconds are up: it sees ctx.cancelled

    def _poll(self, watch: JobWatch) -> tuple[Ended, bool] | None:
        """The child's reply, a crash, or None while the job runs on; what the job said in
        the meantime goes to the watch."""
        reply, alive = self._gather(watch)
        watch.flush()
        if reply is not None:
            return reply.ended(watch.seconds()), True
        if alive:
            return None
        return self._crashed(watch), False

    def _tidy(self) -> None:
        """Wait for the child's state after the job and replace it if the limits say so."""
        assert self._conn is not None
        after = await_after(self._conn, self._process.is_alive)
        if isinstance(after, Verdict):
            judged: Verdict | None = after
        else:
            judged = verdict(after, self._jobs_run, self._limits)
        if judged is None:
            return
        self._replace_child(judged.reason, judged.detail)
        if judged.reason == "cuda_error":
            # the device itself may be gone: know before the worker takes another job
            try:
                self._await_ready()
            except DeviceBrokenError as exc:
                self._broken = str(exc)
            except ChildStartError:
                pass  # the next run() tries again, and says why

    def _gather(self, watch: JobWatch) -> tuple[Reply | None, bool]:
        """The child's messages for POLL_S (or until its reply): (the reply, whether the child
        is still there)."""
        assert self._conn is not None
        until = time.monotonic() + POLL_S
        for _ in range(MESSAGES_PER_POLL):
            try:
                if not self._conn.poll(max(0.0, until - time.monotonic())):
                    break
                message = self._conn.recv()
            except (EOFError, OSError):
                return None, False  # the pipe closed: the child is gone
            if isinstance(message, Reply):
                return message, True
            watch.take(message)
        return None, bool(self._process.is_alive())

    def _crashed(self, watch: JobWatch) -> Ended:
        seconds = watch.seconds()
        self._process.join(self._kill_grace)  # EOF comes a moment before the exit code
        watch.finish()  # its last words are in its output files now
        error = self._died_text("\n".join(watch.recent))
        self._replace_child("crash", error.splitlines()[0])
        return Ended("crashed", seconds, error=error, why=Why.CHILD_DIED)

    def _kill(self, call: Call, watch: JobWatch, stop: Deadline, *, setup_overrun: bool) -> Ended:
        """Stop the child for the job's overrun (a cancel's end counts whatever ran out) and say
        how the job ended."""
        seconds = watch.seconds()
        if stop.reason is None or (setup_overrun and stop.reason != "cancel"):
            error = f"setup() did not finish within {self._setup_timeout:g} s: killed"
            self._replace_child("timeout", error)
            return Ended("setup", 0.0, error=error)
        error = stop.killed(call.budget_s)
        self._replace_child(stop.reason, error)
        return Ended(KILLED_END[stop.reason], seconds, error=error, why=KILLED_WHY[stop.reason])

    def _replace_child(self, reason: ChildReplacement, detail: str) -> None:
        """Stop the child and start its successor at once (its start is nobody's job time);
        if that cannot even be spawned, the job's end still goes back, and the next run()
        tries again (and raises). One log line and one count per replacement."""
        log.warning(
            "job child replaced (%s): %s",
            reason,
            detail,
            extra={"reason": reason, "jobs": self._jobs_run, "pid": self.pid},
        )
        self.on_replace(reason)
        self._stop_child()
        try:
            self._spawn()
        except Exception:
            log.exception("could not start a fresh job child")
            self._stop_child()

    def _died_text(self, output: str) -> str:
        """How the child died (exit code or signal), and the last lines of its output."""
        self._process.join(self._kill_grace)
        how = death(self._process.exitcode)
        return f"the job's process died ({how}); its last output:\n{last_lines(output)}".rstrip()

    def _start_output(self) -> str:
        """The last lines a child that died at its start wrote."""
        self._process.join(self._kill_grace)
        return last_words(self._outputs)

    def _stop_child(self) -> None:
        """SIGKILL the job's processes, SIGTERM the child, SIGKILL it after kill_grace_s, reap
        it, drop its pipe and files (a job's tail keeps its files open until it is done with
        them). A child that died by itself leaves its job's processes as last seen to kill."""
        process, self._process, self._ready = self._process, None, False
        below, self._below = self._below, set()  # a dead child's, as last seen
        if process is not None:
            if process.is_alive():  # the job's processes first, while the child holds them
                below = reaper.kill_below(process.pid)
                process.terminate()
                process.join(self._kill_grace)
            if process.is_alive():
                process.kill()
            process.join()
            process.close()
        reaper.kill_trees(below)  # and whatever they started meanwhile, orphaned now
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        for path in self._outputs.values():
            path.unlink(missing_ok=True)
        self._outputs = {}
