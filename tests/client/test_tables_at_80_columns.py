"""The client's tables on an 80-column terminal (and wider): every line fits, no cell is broken
in the middle of a word, an id or a number with its unit, and no column is left empty; and
amounts are exact until they are shown."""

from __future__ import annotations

import io
import re
import time

from rich.console import Console
from rich.table import Table

from app.admin_models import (
    AccountInfo,
    AccountQueued,
    AuditEntry,
    QueuesView,
    QueueView,
    WorkerView,
)
from app.client.admin_tables import accounts_table, audit_table, queues_table, workers_table
from app.client.fit import Column, fitted_table
from app.client.render import billing_table, task_table, tasks_table, types_table
from app.client.words import money
from app.models import JobResult, JobTypeView, Status, TaskStatus
from app.usage_models import BillingRecord

TASKS = [f"0b7d2a4e-6c1f-4b8e-9d2a-3f5e6a7b8c{i:02d}" for i in range(3)]
OWNER = "11111111-1111-1111-1111-111111111111"
SECOND = "22222222-2222-2222-2222-222222222222"


def bill(task_id: str, micros: int, seconds: float, description: str, at: float) -> BillingRecord:
    return BillingRecord(
        user_id=OWNER,
        task_id=task_id,
        cost=micros / 1e6,
        cost_micros=micros,
        description=description,
        kind="short",
        gpu_seconds=seconds,
        billed_seconds=max(1.0, seconds),
        billed_at=at,
    )


BILLS = [
    bill(TASKS[0], 1_000_000, 2, "Short GPU job", time.time()),
    bill(TASKS[1], 617_250, 1.2345, "Short GPU job, cancelled after 1.2 s", time.time() - 86400),
    bill(TASKS[2], 500_000, 0.2, "Short GPU job (billed the 1 s minimum)", time.time() - 4e7),
]
STATS = {"acked": 1090, "dequeued": 1100, "dropped": 2, "enqueued": 1200, "reclaimed": 3}
QUEUES = QueuesView(
    queues=[
        QueueView(
            name="short",
            queued=12,
            in_flight=2,
            workers=2,
            fairness_lag_s=12.5,
            top_accounts=[
                AccountQueued(user_id=OWNER, queued=8),
                AccountQueued(user_id="22222222-2222-2222-2222-222222222222", queued=4),
            ],
            stats=STATS,
        ),
        QueueView(
            name="long",
            queued=0,
            in_flight=0,
            workers=1,
            fairness_lag_s=0,
            top_accounts=[],
            stats={},
        ),
    ]
)


def shown(table: Table, width: int) -> list[str]:
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(table)
    return out.getvalue().splitlines()


def test_billing_fits_80_columns_with_every_cell_whole() -> None:
    lines = shown(billing_table(BILLS, 80), 80)
    assert max(len(line) for line in lines) <= 80
    header = lines[0].split()
    assert header == ["billed", "task", "kind", "GPU-s", "cost"]  # the description left out
    for task_id, cost in zip(TASKS, ["1.00", "0.6173", "0.50"], strict=True):
        [row] = [line for line in lines if task_id in line]
        assert row.split()[-1] == cost
    assert lines[-1].split() == ["total", "2.1173"]


def test_billing_shows_descriptions_when_they_fit() -> None:
    lines = shown(billing_table(BILLS, 160), 160)
    assert lines[0].split()[-1] == "description"
    assert any(line.rstrip().endswith("Short GPU job, cancelled after 1.2 s") for line in lines)


def test_queues_fit_80_columns_with_one_counter_a_line() -> None:
    lines = shown(queues_table(QUEUES, 80), 80)
    assert max(len(line) for line in lines) <= 80
    text = "\n".join(lines)
    for item in ["11111111…: 8", "22222222…: 4", *(f"{k} {v}" for k, v in STATS.items())]:
        assert sum(item in line for line in lines) == 1, (item, text)
    assert "counters" in lines[1]
    [short] = [line for line in lines if line.startswith("short")]
    assert short.split()[:5] == ["short", "12", "2", "2", "12.5"]


def test_queues_say_how_many_queued_jobs_a_limit_holds_back_in_80_columns() -> None:
    held = QUEUES.queues[0].model_copy(
        update={
            "held_by_limit": 3,
            "top_accounts": [
                AccountQueued(user_id=OWNER, queued=8),
                AccountQueued(user_id=SECOND, queued=4, held_by_limit=3),
            ],
        }
    )
    lines = shown(queues_table(QueuesView(queues=[held]), 80), 80)
    assert max(len(line) for line in lines) <= 80
    [short] = [line for line in lines if line.startswith("short")]
    assert short.split()[:3] == ["short", "12", "(3"]  # "12 (3 held)", whole
    assert any("22222222…: 4 (3 held)" in line for line in lines), lines


def test_accounts_show_their_limits_and_budgets_with_whole_ids_in_80_columns() -> None:
    accounts = [
        AccountInfo(
            user_id=OWNER, description="demo", share=1, admin=True, disabled=False,
            max_queued=None, max_running=None, max_held_gpu_seconds=None,
            budget_gpu_seconds=None, budget_cost=None, created_at=0, keys=2,
        ),
        AccountInfo(
            user_id=SECOND, description="a team with limits", share=2, admin=False,
            disabled=False, max_queued=None, max_running=2, max_held_gpu_seconds=600,
            budget_gpu_seconds=36000, budget_cost=1234.5, created_at=0, keys=1,
        ),
    ]  # fmt: skip
    lines = shown(accounts_table(accounts, 80), 80)
    assert max(len(line) for line in lines) <= 80
    text = "\n".join(lines)
    assert OWNER in text and SECOND in text  # ids whole
    for said in ("running ≤ 2", "held ≤ 600 GPU-s", "36000 GPU-s", "active admin"):
        assert said in text, (said, text)


def test_types_say_which_are_preemptible() -> None:
    types = [
        JobTypeView(
            name=name, queue="long", max_duration_s=3000, description="a type",
            input_schema={}, output_schema={}, available=True, preemptible=preemptible,
        )
        for name, preemptible in (("digits-train", True), ("burn", False))
    ]  # fmt: skip
    lines = shown(types_table(types, 80), 80)
    assert max(len(line) for line in lines) <= 80
    assert any("preemptible" in line for line in lines[:2])  # a header may take two lines
    rows = {line.split()[0]: line.split() for line in lines if line.startswith(("d", "b"))}
    assert rows["digits-train"][4] == "yes" and rows["burn"][4] == "no"  # after max s, gpus


def test_queues_keep_lists_on_one_line_when_there_is_room() -> None:
    lines = shown(queues_table(QUEUES, 200), 200)
    assert any("acked 1090, dequeued 1100, dropped 2" in line for line in lines)


def test_workers_say_their_state_and_a_broken_one_why() -> None:
    now = time.time()
    broken = "the device failed a fresh job child's probe: CUDA error: unknown error"
    view = QUEUES.model_copy(
        update={
            "workers": [
                WorkerView(name="gpu0@a", queues=["short", "long"], last_seen=now, alive=True),
                WorkerView(
                    name="gpu1@a", queues=["short"], last_seen=now, alive=True, busy_until=now
                ),
                WorkerView(name="gpu2@a", queues=["long"], last_seen=now, alive=False),
                WorkerView(
                    name="gpu3@a", queues=["short"], last_seen=now, alive=False, broken=broken
                ),
            ]
        }
    )
    lines = shown(workers_table(view, 80), 80)
    assert max(len(line) for line in lines) <= 80
    states = {line.split()[0]: line for line in lines if line.startswith("gpu")}
    assert "idle" in states["gpu0@a"] and "busy" in states["gpu1@a"]
    assert "silent" in states["gpu2@a"] and "broken:" in states["gpu3@a"]
    assert "unknown error" in "\n".join(lines)  # the reason is shown, wrapped if it must be


def test_amounts_are_exact_until_shown() -> None:
    assert money(250) == "0.0003"  # shown to 4 decimals, half up
    assert money(2_500) == "0.0025"
    assert money(617_250) == "0.6173"
    assert money(1_000_000) == "1.00"
    assert money(1_230_000) == "1.23"
    assert money(1_234_000) == "1.234"
    many = [bill(TASKS[0], 2_500, 0.005, "Short GPU job", time.time()) for _ in range(4)]
    assert shown(billing_table(many, 80), 80)[-1].split() == ["total", "0.01"]


def task(task_id: str, status: Status, **fields: object) -> TaskStatus:
    """A job submitted 5 s ago; an ended one ran 0.5 s."""
    now = time.time()
    if status.terminal:
        fields["result"] = JobResult(
            worker="cpu1@gpu-node-7",
            duration_s=2,
            enqueued_at=now - 5,
            started_at=now - 3,
            finished_at=now - 2.5,
        )
    return TaskStatus.model_validate(
        {"task_id": task_id, "status": status, "kind": "short", "attempts": 1, **fields}
        | {"enqueued_at": now - 5}
    )


def jobs() -> list[TaskStatus]:
    """An ended job, a queued one that starts in about 40 s, and a failed one."""
    return [
        task(TASKS[0], Status.SUCCESS),
        task(TASKS[1], Status.PENDING, position=3, estimated_start_at=time.time() + 40),
        task(TASKS[2], Status.FAILURE, error="ValueError: the input was not what the job expected"),
    ]


def test_tasks_keep_whole_ids_and_leave_no_empty_column_at_80_columns() -> None:
    lines = shown(tasks_table(jobs(), 80), 80)
    assert max(len(line) for line in lines) <= 80
    assert lines[0].split() == ["task", "status", "kind", "submitted", "tries"]
    for task_id in TASKS:
        assert sum(task_id in line for line in lines) == 1


def test_tasks_never_break_a_number_from_its_unit() -> None:
    for width in (100, 110, 120):
        lines = shown(tasks_table(jobs(), width), width)
        assert max(len(line) for line in lines) <= width
        assert "where / when" in lines[0]
        assert sum("ran 0.5 s" in line for line in lines) == 2, (width, lines)
        assert any("cpu1@gpu-node-7" in line for line in lines)
        assert any(re.search(r"~\d+ s", line) for line in lines)


AUDIT = [
    AuditEntry(
        id=12,
        at=time.time(),
        actor=OWNER,
        action="account.update",
        target="22222222-2222-2222-2222-222222222222",
        detail={
            "before": {"share": 1.0, "max_queued": None},
            "after": {"share": 3.0, "max_queued": 5},
        },
    ),
    AuditEntry(
        id=11,
        at=time.time(),
        actor="seed",
        action="account.create",
        target="a-team",
        detail={"description": "The vision team", "share": 1.0, "admin": False},
    ),
]


def test_the_audit_shows_each_change_before_and_after_in_80_columns() -> None:
    lines = shown(audit_table(AUDIT, 80), 80)
    assert max(len(line) for line in lines) <= 80
    text = "\n".join(lines)
    assert "1111-" not in text  # an id is whole or cut with "…", never broken over lines
    [update] = [line for line in lines if line.startswith("12 ")]
    assert update.split()[2:5] == ["11111111…", "account.update", "22222222…"]
    changes = lines[0].index("change")  # the column's text, line after line
    said = " ".join(line[changes:].strip() for line in lines[2:])
    assert said == (
        'share 1 → 3, max_queued none → 5 description "The vision team", share 1, admin no'
    )


def test_the_audit_keeps_ids_whole_where_they_fit() -> None:
    lines = shown(audit_table(AUDIT, 200), 200)
    assert any(OWNER in line and "22222222-2222-2222-2222-222222222222" in line for line in lines)


def test_a_wrapped_column_breaks_between_words_and_never_inside_one() -> None:
    text = "the quick brown fox jumps over the lazy dog, after 0.5 s, again and again"
    words = text.split(" ")
    columns = [Column("id", short=8), Column("text", wrap=True)]
    rows = [[TASKS[0], text]]
    for width in range(30, 120):
        lines = shown(fitted_table(columns, rows, width), width)
        assert max(len(line) for line in lines) <= width, (width, lines)
        tokens = {token for line in lines for token in line.split()}
        assert set(words) <= tokens, (width, lines)
        assert any("0.5 s," in line for line in lines), (width, lines)
        assert TASKS[0] in tokens or f"{TASKS[0][:8]}…" in tokens, (width, lines)


def test_a_queued_jobs_status_says_why_it_waits_in_words() -> None:
    for reason, words in (
        ("account_limit", "its account's limit"),
        ("gpu", "its GPUs: its turn has come"),
        ("turn", "its turn: other jobs go first"),
    ):
        state = task(TASKS[1], Status.PENDING, position=0, waiting_for=reason)
        lines = shown(task_table(state, None), 80)
        assert any("waiting for" in line and words in line for line in lines), (reason, lines)
    ended = shown(task_table(task(TASKS[0], Status.SUCCESS), None), 80)
    assert not any("waiting for" in line for line in ended)
