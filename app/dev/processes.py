"""The one way fairgpu's own tooling starts, stops and waits on processes: the dev stack, the
benchmarks and the tests all use it.

    spawn(argv, env, log)           a child with its output appended to a log file
    stop(process, grace_s)          SIGTERM, then SIGKILL after grace_s; always reaped
    wait_until(check, deadline)     poll a condition until it holds, or raise TimeoutError
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

#: How often wait_until looks again: short enough not to slow a test, long enough not to spin.
POLL_S = 0.05


def spawn(
    argv: Sequence[str],
    env: Mapping[str, str],
    log: Path,
    cwd: Path | None = None,
    *,
    new_session: bool = False,
) -> subprocess.Popen[bytes]:
    """Start argv with exactly this environment, its stdout and stderr appended to log; with
    new_session, as the leader of a process group of its own, which os.killpg can end whole."""
    with log.open("ab") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            list(argv),
            env=dict(env),
            cwd=cwd,
            stdout=out,
            stderr=out,
            start_new_session=new_session,
        )


def stop(process: subprocess.Popen[bytes] | None, grace_s: float = 10.0) -> int | None:
    """SIGTERM the process, SIGKILL it if it is still there after grace_s, and reap it; returns
    its exit code (None for no process)."""
    if process is None:
        return None
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
    return process.wait()


def wait_until(
    check: Callable[[], T],
    timeout: float,
    what: str = "",
    every: float = POLL_S,
) -> T:
    """Call check() until it returns something truthy, and return that; TimeoutError naming
    `what` once timeout seconds have passed."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what or check} not ready within {timeout:g} s")
        time.sleep(every)  # polling a condition with a deadline
