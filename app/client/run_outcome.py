"""How `fairgpu run` ends: the exit code a job's end maps to, the result it prints, and what it
does on Ctrl-C. Pure functions of the job's status, the bill and the answer given, but for
`ask_to_cancel`, which reads the answer from the terminal."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from rich.table import Table
from rich.text import Text

from app.client.render import (
    STYLE,
    artifact_list,
    fields_table,
    shown_output,
)
from app.client.runs import over, ran_s
from app.client.transport import one_line
from app.client.words import environment_words, exit_code_words, money, span
from app.models import Status, TaskStatus
from app.usage_models import BillingRecord

TIMED_OUT = 124  # as coreutils' `timeout` exits when its command ran out of time
CANCELLED = 130  # as a shell reports a command ended by Ctrl-C (128 + SIGINT)
SERVICE_FAILED = 1  # the job ended for a reason of the service's, not the script's exit code
SIGNALLED = 128  # a script ended by signal N exits 128 + N, as a shell reports it
PROMPT = "cancel the job? [y/N] "


def exit_code(state: TaskStatus) -> int:
    """The exit code of `fairgpu run` for a job that has ended: the script's own (128 + N when
    signal N ended it), 124 when it ran past its time, 130 when it was cancelled, 1 when it
    ended for another reason (its environment would not build, its worker crashed or was lost,
    the type's setup failed, ...)."""
    if state.status is Status.SUCCESS:
        return 0
    kind = state.error_kind
    if kind == "timeout":
        return TIMED_OUT
    if kind == "cancelled" or (state.status is Status.REVOKED and kind is None):
        return CANCELLED
    code = state.result.exit_code if state.result is not None else None
    if kind != "exit_code" or code is None or code == 0:
        return SERVICE_FAILED
    if code < 0:
        return SIGNALLED + (-code & 0x7F)
    return code & 0xFF


def cost_words(bill: BillingRecord | None, state: TaskStatus) -> str:
    """The job's charge in words, or why there is none."""
    if bill is not None:
        return f"{money(bill.cost_micros)} ({bill.gpu_seconds:g} GPU-s, {bill.description})"
    if state.error_kind == "setup":
        return "not billed (it never began)"
    if state.status is Status.REVOKED and ran_s(state, time.time()) is None:
        return "not billed (it never ran)"
    return "not found among your newest charges (fairgpu billing)"


def result_table(state: TaskStatus, bill: BillingRecord | None) -> Table:
    """What `fairgpu run` prints once the job has ended: its status, the script's exit code, its
    environment, how long it ran, its cost, its output and its artifacts."""
    result = state.result
    table = fields_table()
    table.add_row("task", state.task_id)
    table.add_row("status", Text(state.status.value, style=f"bold {STYLE[state.status]}"))
    if result is not None and result.exit_code is not None:
        table.add_row("exit code", exit_code_words(result.exit_code))
    if state.error_kind and state.error_kind != "exit_code":
        table.add_row("ended by", state.error_kind)
    if state.error and state.error_kind != "exit_code":
        table.add_row("error", one_line(state.error))
    if result is not None and result.environment is not None:
        table.add_row("environment", environment_words(result.environment))
    ran = ran_s(state, time.time())
    if ran is not None:
        table.add_row("ran", f"{span(ran)}{over(state)}")
    table.add_row("cost", cost_words(bill, state))
    if result is not None and result.output is not None:
        table.add_row("output", shown_output(result.output))
    if result is not None and result.artifacts:
        table.add_row("artifacts", artifact_list(result.artifacts))
    return table


def wants_cancel(answer: str) -> bool:
    """Whether an answer to PROMPT is a yes; anything else (an empty line too) is a no."""
    return answer.strip().lower() in ("y", "yes")


def ask_to_cancel(
    interactive: bool, ask: TextIO | None = None, answer: TextIO | None = None
) -> bool:
    """After Ctrl-C: whether to cancel the job. On a terminal it asks, on `ask` (stderr), and
    reads the answer from `answer` (stdin); without one (a script, CI) it never cancels, and
    neither does an end of input or a second Ctrl-C at the question."""
    if not interactive:
        return False
    ask = sys.stderr if ask is None else ask
    answer = sys.stdin if answer is None else answer
    ask.write("\n" + PROMPT)
    ask.flush()
    try:
        line = answer.readline()
    except (KeyboardInterrupt, EOFError):
        ask.write("\n")
        return False
    return wants_cancel(line)
