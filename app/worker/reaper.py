"""The processes a job starts, and their end with its run, however they detached.

The warm child is a subreaper (Linux's PR_SET_CHILD_SUBREAPER): a process orphaned below it (a
double fork, a daemon in a session of its own) is reparented to the child, not to init, so every
process a job started stays in the child's tree, read from /proc (each thread's `children`). The
child kills that tree after each job (job_process.py), and the worker kills it before it stops
or replaces the child (child.py). Elsewhere than on Linux nothing here does anything. The child
imports this module: keep it light.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
from collections.abc import Iterable
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
KILL_ROUNDS = 5  # a process that forks as it is killed is looked for again, this many times
REAP_WAIT_S = 2.0  # the most the child waits for its killed children's exits, to reap them
REAP_POLL_S = 0.005


class Sweeper:
    """The child's side: the processes below it that its job types' setup() started are the
    child's and stay; every other was started by a job, and is killed at the job's end."""

    def __init__(self) -> None:
        self.kept: set[int] = descendants(os.getpid())

    def began(self) -> None:
        """The job begins: what is below the child now (setup()'s processes) is the child's."""
        self.kept = descendants(os.getpid())

    def sweep(self) -> None:
        """Kill every process below the child that is not kept, and reap those that were its
        children (and any that died below it meanwhile), so that none stays a zombie."""
        me = os.getpid()
        killed = kill_below(me, self.kept)
        reap((killed | zombies(me)) - self.kept)


def become_subreaper() -> bool:
    """Make this process the reaper of the orphans below it; whether it is (Linux only)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def children(pid: int) -> set[int]:
    """The pids of pid's children (those of each of its threads); none once it is gone."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError, ValueError):
            found.update(int(n) for n in (task / "children").read_text().split())
    return found


def descendants(pid: int, keep: Iterable[int] = ()) -> set[int]:
    """Every live process below pid (zombies left out), not walking into those in keep."""
    kept, found, todo = set(keep), set[int](), [pid]
    while todo:
        for child in children(todo.pop()) - kept - found:
            if alive(child):
                found.add(child)
            todo.append(child)  # a zombie's children were reparented already: nothing below
    return found


def zombies(pid: int) -> set[int]:
    """pid's children that have exited and wait to be reaped."""
    return {child for child in children(pid) if not alive(child)}


def kill_below(pid: int, keep: Iterable[int] = ()) -> set[int]:
    """SIGKILL every live process below pid except those in keep (and theirs), again while a
    process forked as it was killed; the pids killed."""
    killed: set[int] = set()
    for _ in range(KILL_ROUNDS):
        found = descendants(pid, keep) - killed
        if not found:
            break
        kill(found)
        killed |= found
    return killed


def kill_trees(pids: Iterable[int]) -> None:
    """SIGKILL these processes, and every live process below each, wherever they now are (the
    worker's way with what a dead child left)."""
    for pid in set(pids):
        if alive(pid):
            kill(descendants(pid) | {pid})


def kill(pids: Iterable[int]) -> None:
    """SIGKILL each of pids that is still there."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def reap(pids: Iterable[int]) -> None:
    """Wait for those of pids that are this process's children to exit, within REAP_WAIT_S,
    so that none stays a zombie of the child."""
    left = set(pids)
    deadline = time.monotonic() + REAP_WAIT_S
    while left and time.monotonic() < deadline:
        for pid in list(left):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid  # not ours (a grandchild's), or reaped already
            if done:
                left.discard(pid)
        if left:
            time.sleep(REAP_POLL_S)  # a SIGKILLed process exits within moments


def alive(pid: int) -> bool:
    """Whether the process is there and not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] != ["Z"]
