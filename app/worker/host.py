"""`python -m app.worker.host [-- COMMAND...]`: one worker per GPU that this container sees.

A job of several cards runs in one process that sees them all, so a host's workers share one
container or pod that sees every card: this starts `python worker.py` (or COMMAND) once for each
card of FAIRGPU_GPUS (0,2,3; default: those `nvidia-smi -L` lists), starts again one that exits
non-zero, and passes SIGTERM and SIGINT on to all (docs/operations.md, "Jobs of several GPUs").
As a pod's PID 1 it also reaps the orphans handed to it.
"""

from __future__ import annotations

import functools
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence

from app.dev.supervisor import Backoff, exit_reason
from app.fleet.catalog import NAME

#: Not for the workers: the launcher's own variables, and a one-card container's HOST_GPU_ID.
DROPPED = ("FAIRGPU_GPUS", "FAIRGPU_CARD_CLASSES", "HOST_GPU_ID")
STOPS = (signal.SIGTERM, signal.SIGINT)
_LISTED = re.compile(r"^GPU (\d+):", re.M)
#: Workers start with default signals, in a group of their own: ^C reaches the launcher alone.
_spawn = functools.partial(
    os.posix_spawnp, setsigmask=(), setsigdef=(*STOPS, signal.SIGPIPE, signal.SIGXFSZ), setpgroup=0
)


class HostError(ValueError):
    """The environment does not say which cards to serve, or how to name their workers."""


def nvidia_smi_listing() -> str:
    """`nvidia-smi -L`: the cards this container sees, one `GPU N: ...` line each."""
    try:
        argv = ["nvidia-smi", "-L"]
        return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise HostError(f"{exc}; set FAIRGPU_GPUS=0,1,...") from None


def served_cards(env: Mapping[str, str], listing: Callable[[], str]) -> list[int]:
    """FAIRGPU_GPUS's cards, or every card the listing names (MIG devices are not cards)."""
    raw = env.get("FAIRGPU_GPUS", "").strip()
    parts = [part.strip() for part in raw.split(",")] if raw else _LISTED.findall(listing())
    cards = sorted(int(part) for part in parts if part.isdigit())
    if not raw and not cards:
        raise HostError("nvidia-smi -L lists no GPU; set FAIRGPU_GPUS=0,1,...")
    if len(cards) != len(parts) or len(set(cards)) != len(cards):
        raise HostError(f"FAIRGPU_GPUS={raw!r}: name each card's index once, as 0,2,3")
    return cards


def card_classes(env: Mapping[str, str], cards: Sequence[int]) -> dict[int, str]:
    """FAIRGPU_CARD_CLASSES (`0=big,1=small`): each named card's class."""
    raw = env.get("FAIRGPU_CARD_CLASSES", "")
    items = [item.strip().partition("=") for item in raw.split(",") if item.strip()]
    classes = {int(card): name for card, _, name in items if card.isdigit() and NAME.match(name)}
    if len(classes) != len(items) or not set(classes) <= set(cards):
        raise HostError(f"FAIRGPU_CARD_CLASSES={raw!r}: say CARD=CLASS once per served card")
    return classes


def worker_envs(env: Mapping[str, str], listing: Callable[[], str]) -> dict[int, dict[str, str]]:
    """Each served card's worker environment: the container's, with its card and name."""
    name = env.get("WORKER_NAME") or "gpu{card}@%h"
    if "{card}" not in name:
        raise HostError(f"WORKER_NAME={name!r} would name every card's worker alike: add {{card}}")
    classes = card_classes(env, cards := served_cards(env, listing))
    base = {key: value for key, value in env.items() if key not in DROPPED}
    envs = {}
    for card in cards:
        own = {"CUDA_VISIBLE_DEVICES": str(card), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
        own["WORKER_NAME"] = name.replace("{card}", str(card))
        envs[card] = base | own | ({"WORKER_GPU_CLASS": classes[card]} if card in classes else {})
    return envs


class Host:
    """The workers of one container's cards, kept running until a stop signal."""

    def __init__(self, command: Sequence[str], envs: Mapping[int, Mapping[str, str]]) -> None:
        self.command, self.envs = list(command), envs
        # a worker that keeps failing is tried at most every 30 s, one that ran a minute at once
        self.backoffs = {card: Backoff(first_s=1.0, steady_s=60.0) for card in envs}
        self.pids: dict[int, tuple[int, float]] = {}  # pid -> (card, started at)
        self.restarts: dict[int, float] = {}  # card -> when it starts again
        self.stopping, self.failed = False, False

    def start(self, card: int) -> None:
        pid = _spawn(self.command[0], self.command, self.envs[card])
        self.pids[pid] = (card, time.monotonic())

    def reap(self) -> None:
        """Collect every child that ended: a worker (started again or not), or an orphan."""
        while self.pids:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                return
            card, started = self.pids.pop(pid, (-1, 0.0))
            if card < 0:
                continue  # an orphan, handed to the launcher as PID 1
            code = os.waitstatus_to_exitcode(status)
            said = f"the worker of card {card} stopped ({exit_reason(code)})"
            self.failed |= self.stopping and code != 0
            if not self.stopping and code != 0:
                delay = self.backoffs[card].after_death(time.monotonic() - started)
                self.restarts[card] = time.monotonic() + delay
                said = f"{said}; starting it again in {delay:g} s"
            print(f"fairgpu host: {said}", file=sys.stderr)

    def run(self) -> int:
        """Run the workers until all have stopped: 1 if one failed to stop when told, else 0."""
        waited = {*STOPS, signal.SIGCHLD}
        signal.pthread_sigmask(signal.SIG_BLOCK, waited)
        for card in self.envs:
            self.start(card)
        while self.pids or self.restarts:
            now = time.monotonic()
            for card in [c for c, at in self.restarts.items() if at <= now]:
                del self.restarts[card]
                self.start(card)
            timeout = min(self.restarts.values(), default=now + 3600) - now
            got = signal.sigtimedwait(waited, max(timeout, 0.0))
            if got is not None and got.si_signo in STOPS:
                self.stopping = True
                self.restarts.clear()
                for pid in self.pids:
                    os.kill(pid, got.si_signo)
            self.reap()
        return 1 if self.failed else 0


def main(argv: Sequence[str]) -> int:
    """Run the container's workers until told to stop: `[--] [COMMAND...]`."""
    command = list(argv[1:] if argv[:1] == ["--"] else argv) or [sys.executable, "worker.py"]
    try:
        return Host(command, worker_envs(os.environ, nvidia_smi_listing)).run()
    except (HostError, OSError) as exc:  # OSError: the worker's command cannot be started
        print(f"fairgpu host refuses to start: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
