"""A job's runs in words, as its bill counts them (TaskStatus.runs and ran_s): "ran 20 s over 2
runs", "running 4.2 s", "ran 5 s so far" while it waits after a preemption, and its preemptions
in the tense of its status. Pure functions of the status and the time."""

from __future__ import annotations

from app.client.words import span
from app.models import Status, TaskStatus


def ran_s(state: TaskStatus, now: float) -> float | None:
    """The seconds the job's runs ran, as its bill counts them: those the status gives (its
    earlier runs, and its last once ended), and the time since a run under way started."""
    result = state.result
    started = None if result is None else result.started_at
    if state.status is Status.STARTED and started is not None:
        # max: this machine's clock may be a little behind the server's
        return state.ran_s + max(0.0, now - started)
    if state.runs:
        return state.ran_s
    if result is None or started is None:
        return None
    return max(0.0, (result.finished_at or now) - started)  # a run its bill does not count


def over(state: TaskStatus) -> str:
    """The words " over 2 runs" where the job has had more than one (as its bill says), else
    none."""
    return f" over {state.runs} runs" if state.runs > 1 else ""


def ran_words(state: TaskStatus, now: float) -> str:
    """Its runs' time in words: "ran 20 s over 2 runs", "running 4.2 s", "ran 5 s so far"
    (waiting after a preemption); empty before its first run."""
    ran = ran_s(state, now)
    if ran is None:
        return ""
    if state.status is Status.STARTED:
        return f"running {span(ran)}{over(state)}"
    so_far = " so far" if state.status is Status.PENDING else ""
    return f"ran {span(ran)}{over(state)}{so_far}"


def preempted_words(state: TaskStatus) -> str:
    """How often its runs yielded the GPU, and what came of it, in the tense of its status."""
    runs = "run" if state.preemptions == 1 else "runs"
    said = f"{state.preemptions} {runs} yielded the GPU"
    if state.status is Status.PENDING:
        return f"{said}; it resumes from its checkpoint"
    if state.status is Status.STARTED:
        return f"{said}; it resumed from its checkpoint"
    return said
