"""scripts/bench_cards.py runs each of its variants once on a tiny backlog, every lease checked
(spread evenly over the partitions; in `reserved`, never the waiting item of two cards, whose
reservation stays), and prints each variant's µs and its ratios (no timing is checked)."""

from __future__ import annotations

import pytest

from scripts.benchkit.cards_cost import VARIANTS, main
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
    assert [line.split(" / floor = ")[0] for line in ratios] == list(VARIANTS[1:])
    assert "2.3x bar" in ratios[0] and "2.3x bar" in ratios[1] and "bar" not in ratios[2]
