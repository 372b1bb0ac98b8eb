"""Temporary folders of these tests' own: a JobContext built by hand makes an output folder
(ctx.output_dir) that nothing deletes; under the test's tmp_path, pytest does."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def temporary_folders_in_tmp_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
