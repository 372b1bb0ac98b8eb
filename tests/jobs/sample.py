"""Job types for the tests (JOB_MODULES=tests.jobs.sample): one per way a job can end. Each is
small and light to import, as the API and every worker's child import this module."""

from __future__ import annotations

import ctypes
import json
import os
import sys
import time
from typing import Literal

from pydantic import BaseModel

from app.jobs import JobContext, job

STEP_S = 0.05  # how often the looping jobs look at the clock (and polite at its cancel)
#: when this module was imported: a child imports it before it says it is ready for jobs
IMPORTED_AT = time.time()
#: setup() calls of `counted` in this process: a fresh child starts again at 0
setups = 0
shaky_setups = 0  # and of `shaky`, whose first setup fails


class EchoIn(BaseModel):
    text: str


class EchoOut(BaseModel):
    upper: str


@job(name="echo", queue="short", max_duration_s=30, description="Upper-cases its text.")
def echo(ctx: JobContext, inp: EchoIn) -> EchoOut:
    return EchoOut(upper=inp.text.upper())


class Nothing(BaseModel):
    pass


class Counts(BaseModel):
    setups: int
    pid: int


@job(name="counted", queue="short", max_duration_s=30, description="Counts its setups.")
class Counted:
    def setup(self, ctx: JobContext) -> None:
        global setups
        setups += 1

    def run(self, ctx: JobContext, inp: Nothing) -> Counts:
        return Counts(setups=setups, pid=os.getpid())


@job(name="shaky", queue="short", max_duration_s=30, description="Its first setup fails.")
class Shaky:
    def setup(self, ctx: JobContext) -> None:
        global shaky_setups
        shaky_setups += 1
        if shaky_setups == 1:
            raise RuntimeError("shaky: the first setup fails")

    def run(self, ctx: JobContext, inp: Nothing) -> Counts:
        return Counts(setups=shaky_setups, pid=os.getpid())


class Seconds(BaseModel):
    seconds: float


class Slept(BaseModel):
    slept: float


@job(name="sleepy", queue="short", max_duration_s=30, description="Sleeps; ignores cancel.")
def sleepy(ctx: JobContext, inp: Seconds) -> Slept:
    end = time.monotonic() + inp.seconds
    while time.monotonic() < end:
        time.sleep(STEP_S)  # the job's work is to take its time
    return Slept(slept=inp.seconds)


class Ran(BaseModel):
    ran: float


@job(name="polite", queue="short", max_duration_s=30, description="Runs until cancelled.")
def polite(ctx: JobContext, inp: Seconds) -> Ran:
    end = time.monotonic() + inp.seconds
    while time.monotonic() < end:
        ctx.check_cancelled()
        time.sleep(STEP_S)  # the job's work is to take its time
    return Ran(ran=inp.seconds)


class How(BaseModel):
    how: Literal["exit", "segv"]


@job(name="crash", queue="short", max_duration_s=30, description="Takes its process down.")
def crash(ctx: JobContext, inp: How) -> Nothing:
    print("crash: about to go", flush=True)
    if inp.how == "exit":
        os._exit(3)
    ctypes.string_at(0)  # reads address 0: SIGSEGV
    return Nothing()


@job(name="fail", queue="short", max_duration_s=30, description="Raises ValueError.")
def fail(ctx: JobContext, inp: Nothing) -> Nothing:
    print("fail: about to raise", flush=True)
    raise ValueError("the job failed on purpose")


class Text(BaseModel):
    text: str


@job(name="huge", queue="short", max_duration_s=30, description="Returns 100 KiB of output.")
def huge(ctx: JobContext, inp: Nothing) -> Text:
    return Text(text="x" * 100 * 1024)


@job(
    name="needs-extra",
    queue="short",
    max_duration_s=30,
    description="Needs a package that is not installed.",
    requires=("fairgpu_no_such_package",),
)
def needs_extra(ctx: JobContext, inp: Nothing) -> Nothing:
    return Nothing()


class Chat(BaseModel):
    lines: int = 3
    files: int = 2


class Said(BaseModel):
    lines: int
    files: int


@job(name="chatty", queue="short", max_duration_s=30, description="Logs, prints, leaves files.")
def chatty(ctx: JobContext, inp: Chat) -> Said:
    """Each line three ways (ctx.log, stdout, stderr) with a progress report; then files, every
    other one in a subfolder."""
    for n in range(inp.lines):
        ctx.log(f"log {n}")
        print(f"out {n}")
        print(f"err {n}", file=sys.stderr)
        ctx.progress((n + 1) / inp.lines, f"line {n + 1} of {inp.lines}")
    for n in range(inp.files):
        folder = ctx.output_dir / "sub" if n % 2 else ctx.output_dir
        folder.mkdir(exist_ok=True)
        (folder / f"file-{n}.txt").write_text(f"file {n}\n")
    return Said(lines=inp.lines, files=inp.files)


class Size(BaseModel):
    bytes: int = 4096


@job(name="hoarder", queue="short", max_duration_s=30, description="Leaves a file of a size.")
def hoarder(ctx: JobContext, inp: Size) -> Nothing:
    (ctx.output_dir / "big.bin").write_bytes(bytes(inp.bytes))
    return Nothing()


class Steps(BaseModel):
    steps: int = 1000


class Stepped(BaseModel):
    done: int
    resumed_at: int
    preemptions: int


#: checkpointed's file in its checkpoint_dir: the next step to take
STEP_FILE = "step.json"


@job(
    name="checkpointed",
    queue="short",
    max_duration_s=60,
    description="Counts steps, checkpointed; yields when asked.",
    preemptible=True,
)
def checkpointed(ctx: JobContext, inp: Steps) -> Stepped:
    """One step per STEP_S from where the last run's checkpoint left off; each step's count is
    written to a temporary file and renamed over the checkpoint, so a stop at any instant
    leaves a whole one."""
    saved = ctx.checkpoint_dir / STEP_FILE
    start = json.loads(saved.read_text())["next"] if saved.exists() else 0
    for step in range(start, inp.steps):
        ctx.check_preempted()  # the checkpoint is up to date: yielding now loses nothing
        time.sleep(STEP_S)  # the step's work
        partial = saved.with_suffix(".tmp")
        partial.write_text(json.dumps({"next": step + 1}))
        partial.replace(saved)
    return Stepped(done=inp.steps, resumed_at=start, preemptions=ctx.preemptions)


@job(
    name="stubborn",
    queue="short",
    max_duration_s=60,
    description="Preemptible, but ignores the ask to yield.",
    preemptible=True,
)
def stubborn(ctx: JobContext, inp: Seconds) -> Slept:
    (ctx.checkpoint_dir / "started").touch()  # what it leaves is there for the next run
    end = time.monotonic() + inp.seconds
    while time.monotonic() < end:
        time.sleep(STEP_S)  # the job's work is to take its time
    return Slept(slept=inp.seconds)


@job(
    name="finisher",
    queue="short",
    max_duration_s=60,
    description="Preemptible; runs until asked to yield, then returns its output.",
    preemptible=True,
)
def finisher(ctx: JobContext, inp: Seconds) -> Ran:
    end = time.monotonic() + inp.seconds
    while time.monotonic() < end and not ctx.preempted:
        time.sleep(STEP_S)  # the job's work is to take its time
    return Ran(ran=inp.seconds)


class Detach(BaseModel):
    path: str  # the file the detached process keeps appending to
    then: Literal["return", "exit", "hang"] = "return"


class Detached(BaseModel):
    pid: int


@job(name="detacher", queue="short", max_duration_s=30, description="Leaves a daemon behind.")
def detacher(ctx: JobContext, inp: Detach) -> Detached:
    """Starts a process in a session of its own by a double fork (a daemon: its parent exits, so
    it is nobody's child), which appends a line to inp.path every STEP_S forever; then returns
    its pid, exits the child (after printing it) or hangs, ignoring any ask."""
    pid = _daemon(inp.path)
    print(f"detached {pid}", flush=True)
    while not os.path.exists(inp.path) or not os.path.getsize(inp.path):
        time.sleep(STEP_S)  # until the daemon has written: it runs, whatever the load
    if inp.then == "exit":
        time.sleep(1.0)  # the worker has seen the daemon below its child by now
        os._exit(3)
    while inp.then == "hang":
        time.sleep(STEP_S)  # the job's work is to take its time
    return Detached(pid=pid)


def _daemon(path: str) -> int:
    """A double-forked process in a new session that appends to path; its pid."""
    read, write = os.pipe()
    middle = os.fork()
    if middle == 0:
        try:
            os.close(read)
            os.setsid()
            daemon = os.fork()
            if daemon == 0:
                os.close(write)  # the job reads the pid until every writer is gone
                _append_forever(path)
            os.write(write, str(daemon).encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(middle, 0)
    with os.fdopen(read) as said:
        return int(said.read())


def _append_forever(path: str) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        while True:
            os.write(fd, b"still here\n")
            time.sleep(STEP_S)  # its work: to write, again and again
    finally:
        os._exit(0)


class Imported(BaseModel):
    imported_at: float
    pid: int


@job(name="imported", queue="short", max_duration_s=30, description="Says when its child started.")
def imported(ctx: JobContext, inp: Nothing) -> Imported:
    return Imported(imported_at=IMPORTED_AT, pid=os.getpid())
