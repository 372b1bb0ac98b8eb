"""The dev banner's line on script jobs: how to run one where this machine can, why it cannot
where it cannot, and a warning when they run unconfined."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.dev.console import scripts_line
from app.scripting import sandbox
from tests.support import fast_settings


def test_where_the_sandbox_runs_it_says_how_to_run_a_script() -> None:
    problem = sandbox.available(sandbox.NOBODY) or sandbox.network_available(sandbox.NOBODY)
    if problem is not None:
        pytest.skip(f"this machine cannot make a script's sandbox: {problem}")
    assert "fairgpu run -- python train.py" in scripts_line(fast_settings())


def test_without_bubblewrap_it_says_scripts_are_refused_and_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no bwrap, prlimit or setpriv
    line = scripts_line(fast_settings())
    assert line.startswith("Scripts: refused on this machine")
    assert "is not installed" in line


def test_unconfined_scripts_are_said_to_be_for_your_own_code_only() -> None:
    line = scripts_line(fast_settings(script_sandbox="none"))
    assert "unconfined" in line and "your own code" in line
