"""`fairgpu admin accounts|keys|audit|usage` and `fairgpu usage`, `billing --from/--all` and
`account`'s month against the real API (uvicorn in a thread, on the suite's Redis and SQL
database), jobs moved along by the API tests' worker stand-in."""

from __future__ import annotations

import csv
import io
import re
from typing import Any

from app.ledger.outbox import LedgerWriter
from tests.api.helpers import OWNER, SECOND, Worker
from tests.client import test_client_cli as served
from tests.client.test_client_cli import DEMO, OTHER, as_json, fairgpu, ok, one_error_line

server = served.server
url = served.url
settings = served.settings
worker = served.worker


def run_jobs(url: str, worker: Worker, key: str, durations: list[str]) -> list[str]:
    ids = []
    for duration in durations:
        ids.append(as_json(fairgpu(url, "submit", "short", duration, "--json", key=key))["task_id"])
        worker.run(ids[-1])
    return ids


def test_an_account_opened_from_the_command_line_gets_a_key_that_works_until_revoked(
    url: str,
) -> None:
    made = as_json(
        fairgpu(url, "admin", "accounts", "create", "lab", "--description", "A lab", "--json")
    )
    assert (made["user_id"], made["keys"]) == ("lab", 0)

    issued = fairgpu(url, "admin", "keys", "issue", "lab", "--label", "ci")
    assert issued.exit_code == 0, issued.output
    key = issued.stdout.strip()  # the key alone on stdout, for a script; the warning on stderr
    assert key.startswith("fg_")
    assert "shown this once" in issued.stderr
    assert as_json(fairgpu(url, "account", "--json", key=key))["user_id"] == "lab"

    listed = ok(fairgpu(url, "admin", "keys", "list", "lab"))
    assert "live" in listed and "ci" in listed and key not in listed
    key_id = as_json(fairgpu(url, "admin", "keys", "list", "lab", "--json"))[0]["id"]
    assert f"Revoked key {key_id} of lab." in ok(fairgpu(url, "admin", "keys", "revoke", key_id))
    refused = one_error_line(fairgpu(url, "account", key=key))
    assert refused.startswith("fairgpu: 401 ")


def test_shares_quotas_and_budgets_change_and_clear_and_disable_stops_the_keys(url: str) -> None:
    changed = as_json(
        fairgpu(
            url, "admin", "accounts", "update", SECOND, "--share", "2.5", "--max-queued", "7",
            "--budget-gpu-seconds", "3600", "--budget-cost", "12.5", "--json",
        )
    )  # fmt: skip
    assert (changed["share"], changed["max_queued"]) == (2.5, 7)
    assert (changed["budget_gpu_seconds"], changed["budget_cost"]) == (3600, 12.5)
    shown = ok(fairgpu(url, "admin", "accounts", "show", SECOND))
    assert "3600 GPU-s / 12.50 a month" in shown

    mine = ok(fairgpu(url, "account", key=OTHER))
    assert "3600 a month, 3600 left" in mine and "12.50 a month, 12.50 left" in mine

    cleared = as_json(
        fairgpu(url, "admin", "accounts", "update", SECOND, "--budget-cost", "none", "--json")
    )
    assert (cleared["budget_cost"], cleared["budget_gpu_seconds"]) == (None, 3600)
    bad = one_error_line(
        fairgpu(url, "admin", "accounts", "update", SECOND, "--max-queued", "x"), 2
    )
    assert "--max-queued: a number, or none" in bad

    ok(fairgpu(url, "admin", "accounts", "disable", SECOND))
    assert one_error_line(fairgpu(url, "account", key=OTHER)).startswith("fairgpu: 401 ")
    ok(fairgpu(url, "admin", "accounts", "enable", SECOND))
    assert as_json(fairgpu(url, "account", "--json", key=OTHER))["user_id"] == SECOND

    table = ok(fairgpu(url, "admin", "accounts", "list"))
    assert SECOND in table and "active" in table


def test_the_audit_log_shows_who_changed_what(url: str) -> None:
    ok(fairgpu(url, "admin", "accounts", "create", "audited"))
    ok(fairgpu(url, "admin", "accounts", "update", "audited", "--share", "3"))
    entries = as_json(fairgpu(url, "admin", "audit", "--limit", "2", "--json"))
    assert [(e["action"], e["actor"], e["target"]) for e in entries] == [
        ("account.update", OWNER, "audited"),
        ("account.create", OWNER, "audited"),
    ]
    assert "share 1 → 3" in ok(fairgpu(url, "admin", "audit", "--limit", "1"))  # before → after


def test_the_month_end_report_is_csv_with_a_total(url: str, worker: Worker, r: Any) -> None:
    run_jobs(url, worker, DEMO, ["1.5", "2"])
    run_jobs(url, worker, OTHER, ["3"])
    LedgerWriter(r, served_db(url), "test").write_once()  # some written to SQL, ...
    run_jobs(url, worker, OTHER, ["1"])  # ... one still on its way: counted all the same
    month = as_json(fairgpu(url, "account", "--json"))["month"]["month"]

    report = ok(fairgpu(url, "admin", "usage", "--month", month, "--csv"))
    rows = list(csv.reader(io.StringIO(report)))
    assert rows[0] == ["account", "gpu_seconds", "jobs", "cost"]
    assert rows[1:] == [
        [OWNER, "3.5", "2", "1.75"],  # 1.5 s and 2 s at 0.5 a second
        [SECOND, "4", "2", "2.00"],
        ["total", "7.5", "4", "3.75"],
    ]
    other_month = ok(fairgpu(url, "admin", "usage", "--month", "2001-01", "--csv"))
    assert other_month.splitlines() == ["account,gpu_seconds,jobs,cost", "total,0,0,0.00"]
    by_type = as_json(fairgpu(url, "usage", "--by", "type", "--json", key=OTHER))
    assert [(r["key"], r["jobs"]) for r in by_type["rows"]] == [("burn", 2)]  # its own only
    refused = one_error_line(fairgpu(url, "admin", "usage", key=OTHER))
    assert "fairgpu usage shows your own" in refused
    assert "give --month or --from/--to" in one_error_line(
        fairgpu(url, "usage", "--month", month, "--from", "2026-01-01"), 2
    )


def served_db(url: str) -> Any:
    """The API's SQL database: the one the suite's settings name (see tests/support.py)."""
    from app.ledger.database import Database
    from tests.support import test_database

    return Database(f"sqlite:///{test_database()}")


def test_billing_pages_and_windows_from_the_command_line(url: str, worker: Worker) -> None:
    ids = run_jobs(url, worker, DEMO, ["1", "1", "1"])
    newest_first = ids[::-1]
    assert [b["task_id"] for b in as_json(fairgpu(url, "billing", "--all", "--json"))] == (
        newest_first
    )
    page = as_json(fairgpu(url, "billing", "--limit", "1", "--before", ids[2], "--json"))
    assert [b["task_id"] for b in page] == [ids[1]]
    assert as_json(fairgpu(url, "billing", "--from", "2999-01-01", "--json")) == []


def test_other_accounts_cannot_use_the_admin_commands(url: str) -> None:
    for args in (("accounts", "list"), ("keys", "issue", OWNER), ("audit",)):
        refused = one_error_line(fairgpu(url, "admin", *args, key=OTHER))
        assert "is not an admin" in refused, refused


def test_the_operators_tables_fit_80_columns(url: str, worker: Worker) -> None:
    ok(
        fairgpu(
            url, "admin", "accounts", "create", "a-rather-long-account-name", "--description",
            "A description long enough to need the room of a whole line of its own",
            "--budget-gpu-seconds", "36000", "--budget-cost", "1234.5",
        )
    )  # fmt: skip
    issued = fairgpu(url, "admin", "keys", "issue", OWNER, "--label", "the label of a long key")
    assert issued.exit_code == 0
    run_jobs(url, worker, DEMO, ["1"])
    narrow = {"COLUMNS": "80"}
    for args in (
        ("admin", "accounts", "list"),
        ("admin", "keys", "list", OWNER),
        ("admin", "audit"),
        ("admin", "usage"),
        ("usage", "--by", "day"),
    ):
        table = ok(fairgpu(url, *args, env=narrow))
        assert table.strip(), args
        assert max(len(line) for line in table.splitlines()) <= 80, (args, table)
    listed = ok(fairgpu(url, "admin", "accounts", "list", env=narrow))
    assert OWNER in listed and "a-rather-long-account-name" in listed  # ids are never cut


def test_limits_are_set_shown_cleared_and_seen_by_the_account(url: str) -> None:
    made = as_json(
        fairgpu(
            url, "admin", "accounts", "create", "limited", "--max-running", "2",
            "--max-held-gpu-seconds", "600", "--json",
        )
    )  # fmt: skip
    assert (made["max_running"], made["max_held_gpu_seconds"]) == (2, 600)
    shown = ok(fairgpu(url, "admin", "accounts", "show", "limited"))
    assert re.search(r"max running\s+2\b", shown) and re.search(r"max held GPU-s\s+600\b", shown)
    listed = ok(fairgpu(url, "admin", "accounts", "list", env={"COLUMNS": "80"}))
    [row] = [line for line in listed.splitlines() if line.startswith("limited")]
    assert "running ≤ 2" in row and "held ≤ 600 GPU-s" in listed  # the list shows limits too

    changed = as_json(
        fairgpu(
            url, "admin", "accounts", "update", SECOND, "--max-running", "3",
            "--max-held-gpu-seconds", "90.5", "--json",
        )
    )  # fmt: skip
    assert (changed["max_running"], changed["max_held_gpu_seconds"]) == (3, 90.5)
    mine = ok(fairgpu(url, "account", key=OTHER))
    assert "3 at once" in mine and "90.5 GPU-s" in mine

    cleared = as_json(
        fairgpu(url, "admin", "accounts", "update", SECOND, "--max-running", "none", "--json")
    )
    assert (cleared["max_running"], cleared["max_held_gpu_seconds"]) == (None, 90.5)
    assert "at once" not in ok(fairgpu(url, "account", key=OTHER))
    assert re.search(r"max running\s+none", ok(fairgpu(url, "admin", "accounts", "show", SECOND)))
    for option, value in (("--max-running", "1.5"), ("--max-held-gpu-seconds", "x")):
        bad = one_error_line(fairgpu(url, "admin", "accounts", "update", SECOND, option, value), 2)
        assert f"{option}: a number, or none" in bad
    refused = one_error_line(
        fairgpu(url, "admin", "accounts", "update", SECOND, "--max-running", "0")
    )
    assert refused.startswith("fairgpu: 422 ")
