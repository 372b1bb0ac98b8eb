"""Loop: a daemon thread of a worker that takes one step after another until it is stopped
(the limits' Waker, the preemption policy), each step saying how long to wait before the next."""

from __future__ import annotations

import threading


class Loop:
    """Runs step() in a daemon thread of its own, from start() until stop()."""

    def __init__(self, name: str) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        """Start stepping, in the background."""
        self._thread.start()

    def stop(self) -> None:
        """Stop, and wait for the thread."""
        self._stop.set()
        if self.running:
            self._thread.join(timeout=5)

    @property
    def running(self) -> bool:
        """Whether the thread is alive."""
        return self._thread.is_alive()

    def step(self) -> float:
        """One step (it handles its own errors: the loop must go on); the seconds to wait."""
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.is_set():
            self._stop.wait(self.step())
