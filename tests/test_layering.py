"""The tree's dependencies point one way: the API process loads no module of app/worker/ (the
wiring both share is app/wiring/), and the fair queue imports nothing of the rest of app/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.integration  # each test starts a Python process

API = """
import sys, tempfile
from app.api.runtime import Runtime
from app.settings import Settings
folder = tempfile.mkdtemp()
settings = Settings(users_file="fixtures/users.json", database_url=f"sqlite:///{folder}/db")
runtime = Runtime.open(settings)  # the API process's whole wiring, job types included
print(",".join(sorted(m for m in sys.modules if m.startswith("app.worker"))))
"""

VTRR = """
import sys
import app.vtrr
others = [m for m in sys.modules if m.startswith("app.") and not m.startswith("app.vtrr")]
print(",".join(sorted(others)))
"""


def loaded(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_api_process_loads_no_module_of_the_worker() -> None:
    assert loaded(API) == ""


def test_the_fair_queue_imports_nothing_of_the_app() -> None:
    assert loaded(VTRR) == ""
