"""A waiting job's checkpoint goes when the API ends it: the owner's cancel of a queued job and
an operator's drop of its queue remove it (the worker removes it at the end it records:
tests/worker/test_checkpoint_ends.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.artifacts import CHECKPOINTS
from app.settings import Settings
from tests.api.conftest import Api
from tests.api.helpers import KEY

pytestmark = pytest.mark.anyio
ADMIN = KEY  # the demo account is an admin


@pytest.fixture(scope="session")
def artifacts_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("artifacts")


@pytest.fixture
def settings(base_settings: Settings, redis_url: str, artifacts_dir: Path) -> Settings:
    return base_settings.model_copy(update={"redis_url": redis_url, "artifacts_dir": artifacts_dir})


@pytest.fixture(scope="module")
def module_settings(module_settings: Settings, artifacts_dir: Path) -> Settings:
    return module_settings.model_copy(update={"artifacts_dir": artifacts_dir})


@pytest.fixture
def api(shared_api: Api, settings: Settings) -> Api:
    assert shared_api.runtime.settings == settings
    return shared_api


async def waiting_with_a_checkpoint(api: Api, artifacts_dir: Path) -> tuple[str, Path]:
    """A queued job with a checkpoint, as a preempted one waiting in line has."""
    response = await api.client.post(
        "/enqueue-task", json={"kind": "short", "duration_s": 5}, headers=KEY
    )
    assert response.status_code == 200, response.text
    task_id = str(response.json()["task_id"])
    folder = artifacts_dir / CHECKPOINTS / task_id
    (folder / "1-token").mkdir(parents=True)
    (folder / "1-token" / "step.json").write_text('{"next": 7}')
    return task_id, folder


async def test_cancelling_a_waiting_job_removes_its_checkpoint(
    api: Api, artifacts_dir: Path
) -> None:
    task_id, folder = await waiting_with_a_checkpoint(api, artifacts_dir)
    response = await api.client.delete(f"/tasks/{task_id}", headers=KEY)
    assert response.status_code == 200, response.text
    assert not folder.exists()


async def test_dropping_a_queue_removes_its_jobs_checkpoints(api: Api, artifacts_dir: Path) -> None:
    _, folder = await waiting_with_a_checkpoint(api, artifacts_dir)
    response = await api.client.post(
        "/admin/queues/short/drop", json={"confirm": "short"}, headers=ADMIN
    )
    assert response.status_code == 200, response.text
    assert response.json()["dropped"] == 1
    assert not folder.exists()
