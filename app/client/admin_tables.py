"""The operators' tables: queues, workers and the fleet (`fairgpu queues`), accounts with their
limits and budgets, keys, and the audit log (`fairgpu admin ...`). Pure functions of the data
and the time, laid out by fit.py in the terminal's width."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

from rich.table import Table

from app.account import Limits
from app.admin_models import (
    AccountInfo,
    AccountQueued,
    AuditEntry,
    FleetCount,
    FleetView,
    KeyInfo,
    QueuesView,
    WorkerView,
)
from app.client.fit import Cell, Column, fitted_table
from app.client.words import moment, money
from app.usage_models import AccountView

NONE = "none"
#: The limits (app/account.py Limits) that the tables name in words of their own; any other is
#: shown by its name (other_limits).
WORDED = frozenset({"max_queued", "max_running", "max_held_gpu_seconds"})
#: The characters of an account id a table keeps when the whole one does not fit (--json has
#: it whole).
ID_SHOWN = 8


def limit_text(value: float | None) -> str:
    """A limit for people: its number, or "none"."""
    return NONE if value is None else f"{value:g}"


def other_limits(shown: AccountInfo | AccountView) -> list[tuple[str, float | None]]:
    """An account's limits beyond WORDED, each with its name in words ("max queued gpu
    seconds"): a new limit is shown with no code of its own."""
    return [
        (name.replace("_", " "), getattr(shown, name))
        for name in Limits.model_fields
        if name not in WORDED
    ]


def budget_text(info: AccountInfo) -> str:
    """An account's monthly budgets for people: "3600 GPU-s / 12.50 a month", or "none"."""
    parts = []
    if info.budget_gpu_seconds is not None:
        parts.append(f"{info.budget_gpu_seconds:g} GPU-s")
    if info.budget_cost is not None:
        parts.append(money(round(info.budget_cost * 1_000_000)))
    return " / ".join(parts) + " a month" if parts else NONE


def accounts_table(found: list[AccountInfo], width: int) -> Table:
    """Accounts, one a row, in width columns, their ids whole (the other commands take them):
    share, state (an admin's says so) and what holds their jobs back, their limits and monthly
    budgets ("running ≤ 2", "held ≤ 600 GPU-s", "3600 GPU-s a month"; none: "-")."""
    columns = [
        Column("account"),
        Column("share", justify="right"),
        Column("state"),
        Column("limits and budget", wrap=True),
        Column("keys", justify="right", optional=True),
        Column("description", optional=True, wrap=True),
    ]
    rows: list[list[Cell]] = [
        [a.user_id, f"{a.share:g}", _state(a), _limits(a), str(a.keys), a.description]
        for a in found
    ]
    return fitted_table(columns, rows, width)


def _state(info: AccountInfo) -> str:
    state = "disabled" if info.disabled else "active"
    return f"{state} admin" if info.admin else state


def _limits(info: AccountInfo) -> list[str]:
    limits = []
    if info.max_running is not None:
        limits.append(f"running ≤ {info.max_running}")
    if info.max_held_gpu_seconds is not None:
        limits.append(f"held ≤ {info.max_held_gpu_seconds:g} GPU-s")
    limits += [f"{name} ≤ {value:g}" for name, value in other_limits(info) if value is not None]
    if info.budget_gpu_seconds is not None or info.budget_cost is not None:
        limits.append(budget_text(info))
    return limits


def keys_table(found: list[KeyInfo], width: int) -> Table:
    """An account's keys, one a row: id, live or revoked, made, label."""
    columns = [
        Column("id"),
        Column("state"),
        Column("made"),
        Column("label", optional=True, wrap=True),
    ]
    rows = [
        [
            k.id,
            "live" if k.revoked_at is None else f"revoked {day(k.revoked_at)}",
            day(k.created_at),
            k.label,
        ]
        for k in found
    ]
    return fitted_table(columns, rows, width)


def audit_table(found: list[AuditEntry], width: int) -> Table:
    """Audit entries, one a row, in width columns: the account ids cut to their first
    characters when the whole ones leave the change no room."""
    columns = [
        Column("id", justify="right"),
        Column("when"),
        Column("who", short=ID_SHOWN),
        Column("what"),
        Column("account", short=ID_SHOWN),
        Column("change", wrap=True),
    ]
    now = time.time()
    rows: list[list[Cell]] = [
        [str(e.id), moment(e.at, now), e.actor, e.action, e.target, change(e.detail)] for e in found
    ]
    return fitted_table(columns, rows, width)


def change(detail: dict[str, Any]) -> str:
    """An audit entry's detail for people: "share 1 → 3, max_queued none → 5" for an update
    (the log keeps each field's value before and after), "share 1, admin no" otherwise."""
    before, after = detail.get("before"), detail.get("after")
    if isinstance(before, dict) and isinstance(after, dict):
        return ", ".join(
            f"{name} {_value(before.get(name))} → {_value(value)}" for name, value in after.items()
        )
    return ", ".join(f"{name} {_value(value)}" for name, value in detail.items()) or "-"


def _value(value: object) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        return f"{value:g}"
    if isinstance(value, str) and value and not any(mark in value for mark in ' ,"'):
        return value
    return json.dumps(value, ensure_ascii=False)  # quoted: where a description ends is clear


def day(at: float) -> str:
    """A Unix time as its UTC date."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d")


def workers_table(view: QueuesView, width: int) -> Table:
    """Each worker heard from, one a row: its queues, its class where the catalog names one,
    and its state (a broken one says why)."""
    classes = any(worker.gpu_class is not None for worker in view.workers)
    columns = [
        Column("worker"),
        Column("queues"),
        *([Column("class")] if classes else []),
        Column("state", wrap=True),
    ]
    rows: list[list[Cell]] = [
        [
            worker.name,
            ", ".join(worker.queues),
            *([worker.gpu_class or NONE] if classes else []),
            _worker_state(worker),
        ]
        for worker in view.workers
    ]
    return fitted_table(columns, rows, width)


def _worker_state(worker: WorkerView) -> str:
    if worker.broken is not None:
        return f"broken: {worker.broken}"
    if not worker.alive:
        return "silent"
    return "busy" if worker.busy_until is not None else "idle"


def queues_table(view: QueuesView, width: int) -> Table:
    """Each queue, one a row, in width columns (lists one item a line when they do not fit).
    Queued jobs that their account's limits hold back now, which no idle worker takes until
    the limits let them, are counted beside the queued ones: "12 (3 held)"."""
    columns = [
        Column("queue"),
        *(Column(name, justify="right") for name in ("queued", "running", "workers")),
        Column("fairness lag", justify="right"),
        Column("top accounts (queued)"),
        Column("counters", optional=True),
    ]
    rows: list[list[Cell]] = [
        [
            queue.name,
            _held(queue.queued, queue.held_by_limit),
            str(queue.in_flight),
            str(queue.workers),
            f"{queue.fairness_lag_s:g} s",
            [_queued(a) for a in queue.top_accounts],
            [f"{name} {count}" for name, count in sorted(queue.stats.items())],
        ]
        for queue in view.queues
    ]
    return fitted_table(columns, rows, width)


def _queued(account: AccountQueued) -> str:
    return f"{account.user_id[:ID_SHOWN]}…: {_held(account.queued, account.held_by_limit)}"


def _held(queued: int, held: int) -> str:
    """Jobs queued, and those of them a limit holds back where there are any."""
    return f"{queued} ({held} held)" if held else str(queued)


#: The counts of a row of the fleet, after its names.
COUNTS = ("workers", "alive", "busy")


def fleet_tables(fleet: FleetView, width: int) -> list[Table]:
    """The fleet (the workers heard within FLEET_TTL_S, a silent one counted but not alive):
    one row per class, its memory and price, where the catalog names classes (every class,
    those without a worker too); then one row per host and class."""
    counts = [Column(name, justify="right") for name in COUNTS]
    tables = []
    if any(c.gpu_class is not None for c in fleet.classes):
        columns = [
            Column("class"),
            Column("memory", justify="right"),
            Column("price", justify="right"),
            Column("hosts", justify="right"),
            *counts,
        ]
        rows: list[list[Cell]] = [
            [
                c.gpu_class or NONE,
                _memory(c.memory_gb),
                "?" if c.price is None else f"{c.price:g}",
                str(c.hosts),
                *_counts(c),
            ]
            for c in fleet.classes
        ]
        tables.append(fitted_table(columns, rows, width))
    if fleet.hosts:
        columns = [Column("host"), Column("class"), *counts]
        rows = [[h.host or "?", h.gpu_class or NONE, *_counts(h)] for h in fleet.hosts]
        tables.append(fitted_table(columns, rows, width))
    return tables


def _memory(memory_gb: float | None) -> str:
    return "-" if memory_gb is None else f"{memory_gb:g} GB"


def _counts(counted: FleetCount) -> list[Cell]:
    return [str(counted.workers), str(counted.alive), str(counted.busy)]
