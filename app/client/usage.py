"""Usage reports: `fairgpu usage` (what was billed to the caller's account, or to every account
for an admin's key) and `fairgpu admin usage` (every account's, admins only), summed per
account, job type, queue, day or class of card (gpu_class), over a calendar month (`--month
2026-11`) or any window (`--from`/`--to`), as a table, CSV (`--csv`, the month-end report) or
JSON.
"""

from __future__ import annotations

import csv
import sys
from datetime import UTC, datetime
from typing import Annotated

import typer

from app.client.errors import FAILED, fail, session
from app.client.fit import Column, fitted_table
from app.client.options import JsonOption, KeyOption, UrlOption
from app.client.render import out
from app.client.transport import DEFAULT_URL
from app.client.words import money
from app.usage_models import UsageReport

Month = Annotated[str | None, typer.Option(help="a calendar month, YYYY-MM (UTC)")]
Since = Annotated[str | None, typer.Option("--from", help="from this time (ISO 8601 or Unix s)")]
Until = Annotated[str | None, typer.Option("--to", help="until this time, excluded")]
GROUPINGS = ("account", "type", "queue", "day", "gpu_class")
#: How a row without a key (bills without a gpu_class: no GPU_CLASSES) is shown.
NO_CLASS = "(none)"
By = Annotated[str, typer.Option("--by", help="account, type, queue, day or gpu_class")]
Csv = Annotated[bool, typer.Option("--csv", help="CSV on stdout: key,gpu_seconds,jobs,cost")]


def month_window(month: str) -> tuple[str, str]:
    """A calendar month (YYYY-MM, UTC) as [its first instant, the next month's)."""
    try:
        first = datetime.strptime(month, "%Y-%m").replace(tzinfo=UTC)
    except ValueError:
        fail(f"--month {month!r}: a month is YYYY-MM", 2)
    after = first.replace(year=first.year + (first.month == 12), month=first.month % 12 + 1)
    return first.isoformat(), after.isoformat()


def _report(
    month: str | None, start: str | None, end: str | None, group_by: str, url: str, key: str | None
) -> UsageReport:
    if month is not None:
        if start or end:
            fail("give --month or --from/--to, not both", 2)
        start, end = month_window(month)
    if group_by not in GROUPINGS:
        fail(f"--by {group_by!r}: account, type, queue, day or gpu_class", 2)
    with session(url, key) as client:
        return client.usage(start=start, end=end, group_by=group_by)


def _print_usage(report: UsageReport, as_csv: bool, as_json: bool) -> None:
    if as_json:
        typer.echo(report.model_dump_json(by_alias=True))
        return
    if as_csv:
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow([report.group_by, "gpu_seconds", "jobs", "cost"])
        for row in [*report.rows, report.total]:
            key = "" if row.key is None else row.key  # CSV's own empty field
            writer.writerow([key, f"{row.gpu_seconds:g}", row.jobs, money(row.cost_micros)])
        return
    columns = [
        Column(report.group_by, footer="total"),
        Column("GPU-s", justify="right", footer=f"{report.total.gpu_seconds:g}"),
        Column("jobs", justify="right", footer=str(report.total.jobs)),
        Column("cost", justify="right", footer=money(report.total.cost_micros)),
    ]
    rows = [
        [r.key or NO_CLASS, f"{r.gpu_seconds:g}", str(r.jobs), money(r.cost_micros)]
        for r in report.rows
    ]
    console = out()
    console.print(fitted_table(columns, rows, console.width))


def usage(
    month: Month = None,
    start: Since = None,
    end: Until = None,
    group_by: By = "account",
    as_csv: Csv = False,
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """What was billed, summed per account, job type, queue, day or class of card: yours (an
    admin's key: every account's)."""
    _print_usage(_report(month, start, end, group_by, url, key), as_csv, as_json)


def admin_usage(
    month: Month = None,
    start: Since = None,
    end: Until = None,
    group_by: By = "account",
    as_csv: Csv = False,
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Every account's use (the month-end report: --month 2026-11 --csv)."""
    with session(url, key) as client:
        if not client.account().admin:
            fail("usage of every account is for admins: fairgpu usage shows your own", FAILED)
    _print_usage(_report(month, start, end, group_by, url, key), as_csv, as_json)
