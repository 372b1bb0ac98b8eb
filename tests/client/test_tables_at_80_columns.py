"""The `billing` and `queues` tables on an 80-column terminal: every line fits and no cell is
broken in the middle of a word; and amounts are exact until they are shown."""

from __future__ import annotations

import io
import time

from rich.console import Console
from rich.table import Table

from app.client.render import billing_table, queues_table, workers_table
from app.client.words import money
from app.models import AccountQueued, BillingRecord, QueuesView, QueueView, WorkerView

TASKS = [f"0b7d2a4e-6c1f-4b8e-9d2a-3f5e6a7b8c{i:02d}" for i in range(3)]
OWNER = "11111111-1111-1111-1111-111111111111"


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
