"""`fairgpu usage --by gpu_class`: a row per class of card, the bills without one (no catalog)
shown as "(none)" in the table and as an empty field in the CSV; any other --by is refused."""

from __future__ import annotations

import pytest
import typer

from app.client.usage import NO_CLASS, _print_usage, _report
from app.usage_models import UsageReport, UsageRow

REPORT = UsageReport(
    group_by="gpu_class",
    from_=None,
    to=None,
    rows=[
        UsageRow(key="big", gpu_seconds=8.0, jobs=2, cost=8.0, cost_micros=8_000_000),
        UsageRow(key=None, gpu_seconds=4.0, jobs=1, cost=2.0, cost_micros=2_000_000),
    ],
    total=UsageRow(key="total", gpu_seconds=12.0, jobs=3, cost=10.0, cost_micros=10_000_000),
)


def test_the_table_names_each_class_and_the_bills_without_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _print_usage(REPORT, as_csv=False, as_json=False)
    lines = capsys.readouterr().out.splitlines()
    assert any("big" in line and "8" in line for line in lines)
    assert any(NO_CLASS in line and "4" in line for line in lines)


def test_the_csv_leaves_a_class_it_lacks_empty(capsys: pytest.CaptureFixture[str]) -> None:
    _print_usage(REPORT, as_csv=True, as_json=False)
    rows = capsys.readouterr().out.splitlines()
    assert rows[0] == "gpu_class,gpu_seconds,jobs,cost"
    assert rows[1].startswith("big,8,2,")
    assert rows[2].startswith(",4,1,")


def test_the_json_keeps_the_null_key(capsys: pytest.CaptureFixture[str]) -> None:
    _print_usage(REPORT, as_csv=False, as_json=True)
    assert '"key":null' in capsys.readouterr().out


def test_a_grouping_it_does_not_know_is_refused_before_any_request(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(typer.Exit) as stopped:
        _report(None, None, None, "colour", "http://127.0.0.1:1", "key")
    assert stopped.value.exit_code == 2
    assert "gpu_class" in capsys.readouterr().err
