"""Code a job needs is never swept: a script job submitted through the API (in-process, on the
suite's real Redis) keeps its code past CODE_TTL_S while it waits, and once it has ended the
code goes at the next sweep. The sweep runs with the artifacts' periodic one, and takes out a
claim whose job was never written once its grace is over."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import redis

from app.api.factory import create_app
from app.artifacts import LocalArtifacts
from app.auth import Accounts
from app.code.store import AREA, BLOB
from app.code.sweep import GRACE_S, CodeSweep
from app.settings import Settings
from app.store.keys import CODE_USED, code_jobs_key, code_key, job_key
from app.wiring.service import Service, build
from tests.api.conftest import running
from tests.code.archives import project

pytestmark = pytest.mark.anyio
KEY = {"X-API-Key": "scripter_key"}
TTL_S = 60.0


@pytest.fixture
def settings(tmp_path: Path, redis_url: str) -> Settings:
    accounts = [{"user_id": "scripter", "api_keys": ["scripter_key"], "run_scripts": True}]
    (tmp_path / "users.json").write_text(json.dumps({"accounts": accounts}))
    return Settings(
        users_file=tmp_path / "users.json",
        redis_url=redis_url,
        artifacts_dir=tmp_path / "artifacts",
        code_ttl_s=TTL_S,
    )


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with running(app), httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        yield c


@pytest.fixture
def service(settings: Settings) -> Iterator[Service]:
    opened = build(settings, Accounts.load(settings.users_file))
    yield opened
    opened.close()


async def uploaded(client: httpx.AsyncClient, tmp_path: Path, text: bytes) -> str:
    body = project(tmp_path / "p.tar.gz", {"train.py": text}).read_bytes()
    headers = {**KEY, "Content-Type": "application/gzip"}
    response = await client.post("/code", content=body, headers=headers)
    assert response.status_code == 201, response.text
    return hashlib.sha256(body).hexdigest()


async def submitted(client: httpx.AsyncClient, code: str) -> str:
    body = {"type": "script", "input": {"code": code, "command": ["python", "train.py"]}}
    response = await client.post("/enqueue-task", json=body, headers=KEY)
    assert response.status_code == 200, response.text
    task_id: str = response.json()["task_id"]
    return task_id


def long_unused(r: redis.Redis, code: str) -> None:
    """The code's last use, long before CODE_TTL_S."""
    r.zadd(CODE_USED, {f"{code}:scripter": 1.0})


def kept(r: redis.Redis, settings: Settings, code: str) -> bool:
    """Whether the account still holds the code (and its archive is there; else not)."""
    assert settings.artifacts_dir is not None
    on_disk = (settings.artifacts_dir / AREA / code / BLOB).is_file()
    owned = bool(r.hexists(code_key("scripter"), code))
    assert on_disk == owned
    return owned


async def test_a_pending_job_keeps_its_code_past_its_ttl_and_it_goes_after_the_job_ends(
    client: httpx.AsyncClient, service: Service, settings: Settings, r: redis.Redis, tmp_path: Path
) -> None:
    code = await uploaded(client, tmp_path, b"print('needed')\n")
    task_id = await submitted(client, code)
    long_unused(r, code)  # its TTL is over, but the job still waits in line

    assert service.sweep_code() == 0
    assert kept(r, settings, code)
    assert r.hget(job_key(task_id), "status") == b"PENDING"

    cancelled = await client.delete(f"/tasks/{task_id}", headers=KEY)
    assert cancelled.json()["status"] == "REVOKED"
    assert service.sweep_code() == 1
    assert not kept(r, settings, code)
    assert not r.exists(code_jobs_key(code, "scripter"))


async def test_the_artifacts_periodic_sweep_runs_the_code_s(
    client: httpx.AsyncClient, service: Service, settings: Settings, r: redis.Redis, tmp_path: Path
) -> None:
    needed = await uploaded(client, tmp_path, b"print('needed')\n")
    unneeded = await uploaded(client, tmp_path, b"print('unneeded')\n")
    await submitted(client, needed)
    long_unused(r, needed)
    long_unused(r, unneeded)

    service.sweep_artifacts(now=True)  # what Beat's task and the dev stack's timer call

    assert kept(r, settings, needed)
    assert not kept(r, settings, unneeded)


async def test_a_claim_whose_job_was_never_written_goes_after_its_grace(
    client: httpx.AsyncClient, settings: Settings, r: redis.Redis, tmp_path: Path
) -> None:
    code = await uploaded(client, tmp_path, b"print('claimed')\n")
    assert settings.artifacts_dir is not None
    sweep = CodeSweep(LocalArtifacts(settings.artifacts_dir).within(AREA), r)
    now = time.time()
    r.zadd(code_jobs_key(code, "scripter"), {"never-written": now})  # a refused submit's
    long_unused(r, code)

    assert sweep.expire(TTL_S, now=now) == 0  # it may be a submit still on its way
    assert kept(r, settings, code)
    assert sweep.expire(TTL_S, now=now + GRACE_S + 1) == 1
    assert not kept(r, settings, code)


async def test_ended_jobs_are_taken_out_of_code_in_constant_use(
    client: httpx.AsyncClient, service: Service, settings: Settings, r: redis.Redis, tmp_path: Path
) -> None:
    code = await uploaded(client, tmp_path, b"print('busy')\n")
    ended, waiting = await submitted(client, code), await submitted(client, code)
    await client.delete(f"/tasks/{ended}", headers=KEY)

    assert service.sweep_code() == 0  # just used: nothing to drop
    assert r.zrange(code_jobs_key(code, "scripter"), 0, -1) == [waiting.encode()]
    assert kept(r, settings, code)
