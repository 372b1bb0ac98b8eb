"""scripts/bench_script.py: its tables from known runs, and one tiny run on a real stack."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from scripts.bench_script import (
    ACCOUNTS,
    PACKAGE,
    Results,
    Run,
    main,
    parse_args,
    report,
    script_key,
    sleep_command,
)


def runs(*totals: float) -> list[Run]:
    cached = {"cached": True, "seconds": 0.0}
    return [Run(total_s=t, start_s=0.01, run_s=t - 0.01, environment=cached) for t in totals]


def test_the_difference_is_taken_round_by_round() -> None:
    results = Results(duration_s=2, rounds=3, skipped="--env-rounds 0")
    results.runs["typed"] = runs(2.0, 3.0, 2.0)
    results.runs["script"] = runs(2.5, 3.1, 2.2)  # differences 0.5, 0.1, 0.2
    text = report(results, "uv run python scripts/bench_script.py")
    (row,) = [line for line in text.splitlines() if "script minus typed" in line]
    # median 0.2 and p90 0.44 of the differences: not the difference of the medians (0.5)
    assert "**0.200**" in row and "**0.440**" in row
    assert "Environment build: skipped (--env-rounds 0)." in text
    assert "`cached: true` in 3 of 3" in text


def test_the_environment_table_shows_the_build_and_the_cached_use() -> None:
    results = Results(duration_s=1, rounds=1)
    results.runs = {"typed": runs(1.0), "script": runs(1.2)}
    results.first = [Run(3.0, 0.0, 2.9, {"cached": False, "seconds": 2.5})]
    results.cached = [Run(1.1, 0.0, 1.0, {"cached": True, "seconds": 0.0})]
    lines = report(results, "cmd").splitlines()
    assert f"`{PACKAGE}`" in next(line for line in lines if "requirements.txt" in line)
    assert "| first job: the build | false | 2.500 | 3.000 |" in lines
    assert "| second job | true | 0.000 | 1.100 |" in lines


def test_a_run_without_server_times_reports_them_as_unknown() -> None:
    results = Results(duration_s=1, rounds=1, skipped="no index")
    results.runs = {v: [Run(1.0, math.nan, math.nan)] for v in ("typed", "script")}
    assert "| nan | nan |" in report(results, "cmd")


def test_quick_is_a_smoke_run_and_bad_numbers_are_refused() -> None:
    quick = parse_args(["--quick"])
    assert (quick.rounds, quick.duration, quick.env_rounds) == (2, 0.2, 1)
    with pytest.raises(SystemExit):
        parse_args(["--rounds", "0"])


def test_the_script_job_sleeps_as_long_as_the_typed_one_burns() -> None:
    assert sleep_command(1.5) == ["python", "-c", "import time; time.sleep(1.5)"]


def test_the_benchmark_submits_as_an_account_that_may_run_scripts() -> None:
    assert script_key(ACCOUNTS)


@pytest.mark.integration  # a whole stack: Redis, the API, a worker, sandboxed scripts
@pytest.mark.timeout(240)
def test_a_tiny_run_measures_both_jobs_on_a_real_stack(tmp_path: Path) -> None:
    output = tmp_path / "bench.md"
    assert main(["--quick", "--env-rounds", "0", "--output", str(output)]) == 0
    text = output.read_text()
    assert "typed `burn`, duration_s 0.2" in text
    assert "`cached: true` in 2 of 2" in text  # the warm-up built it
    assert "script minus typed" in text
    assert "Environment build: skipped (--env-rounds 0)." in text
