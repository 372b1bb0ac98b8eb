"""scripts/bench_kinds.py runs each of its variants once on a tiny backlog, every lease checked
(its consumer may take it; a lone consumer's spread evenly over the partitions), and prints each
variant's µs and its ratios (no timing is checked)."""

from __future__ import annotations

import pytest

from scripts.benchkit.kinds_cost import POOLS, VARIANTS, main
from tests.vtrr.conftest import redis7_binary


@pytest.mark.timeout(60)
def test_every_variant_runs_once_and_prints_its_ratios(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    binary = redis7_binary()
    if binary is None:
        pytest.skip("no Redis 7 on PATH: the floor's functions need one")
    monkeypatch.setenv("FAIRGPU_REDIS_SERVER", binary)  # (main sets it; restored after)
    args = ["--rounds", "1", "--items", "24", "--partitions", "3", "--redis-server", binary]
    assert main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines[: len(VARIANTS)]] == list(VARIANTS)
    ratios = lines[len(VARIANTS) :]
    assert next(iter(POOLS)) == "library"
    assert ratios[0].startswith("library / floor = ")
    assert "2.3x bar" in ratios[0]
    assert [line.split(" / floor = ")[0] for line in ratios[1:]] == list(POOLS)[1:]
    assert all(" / library = " in line for line in ratios[1:])
