"""RunFacts: the facts a job notes of its run (ctx.note: a script's exit code, its environment),
kept as one JSON object that goes with the run's end, however it ends, to the job's record.
This module is imported by the job child too: keep it light."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

#: The most a run's facts may take as JSON: they are a few numbers, not a log or an output.
MAX_FACTS_BYTES = 4096


def _nobody(text: str) -> None:
    """Where the facts go as they are noted when nobody follows the run as it goes."""


class RunFacts:
    """The facts of one run, the last value of each name winning. `told` hears the whole set,
    as JSON text, each time it changes: the child sends it to the worker at once, so that the
    facts of a run that is then killed are not lost with it."""

    def __init__(self, told: Callable[[str], None] = _nobody) -> None:
        self._told = told
        self._facts: dict[str, Any] = {}
        self._text: str | None = None
        self._lock = threading.Lock()  # a job's threads may note at once

    def note(self, facts: dict[str, Any]) -> None:
        """Add facts; TypeError for a value that is not JSON, ValueError where the facts would
        grow past MAX_FACTS_BYTES (nothing is noted then)."""
        with self._lock:
            merged = {**self._facts, **facts}
            try:
                text = json.dumps(merged, allow_nan=False, separators=(",", ":"))
            except (TypeError, ValueError) as exc:
                raise TypeError(f"ctx.note takes JSON values: {exc}") from None
            size = len(text.encode())
            if size > MAX_FACTS_BYTES:
                raise ValueError(
                    f"a run's noted facts are {size} bytes of JSON, over the limit of "
                    f"{MAX_FACTS_BYTES}: note a few numbers, and log the rest"
                )
            self._facts, self._text = merged, text
            self._told(text)  # under the lock: the worker hears the sets in the order made

    def text(self) -> str | None:
        """The facts as one JSON object, or None where none were noted."""
        return self._text
