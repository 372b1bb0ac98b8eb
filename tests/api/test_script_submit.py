"""POST /enqueue-task for a script job, in-process on the suite's real Redis: only a run_scripts
account may submit one, its input.code must name code the account owns, its env names are the
type's to refuse, and only it takes the body's `preemptible`. Each refusal answers as the route's
other refusals do, through the submit's fast path and through the route alike, and changes
nothing. An accepted one records its job on its code's hold and renews the code's use."""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from app.api.factory import create_app
from app.api.routes.jobs import NO_SCRIPTS
from app.api.submissions import SCRIPT
from app.jobs import load_registry
from app.settings import Settings
from app.store.keys import CODE_USED, code_jobs_key, job_key
from tests.api.conftest import Api, running
from tests.api.helpers import RATE_COUNTERS, contents
from tests.code.archives import project

pytestmark = pytest.mark.anyio
SCRIPTER = {"X-API-Key": "scripter_key"}
OTHER = {"X-API-Key": "other_key"}
PLAIN = {"X-API-Key": "plain_key"}
GZIP = {"Content-Type": "application/gzip"}
UNKNOWN_CODE = "0" * 64
COMMAND = ["python", "train.py"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The module's accounts file and artifacts folder."""
    root = tmp_path_factory.mktemp("script-submit")
    accounts = [
        {"user_id": "scripter", "api_keys": ["scripter_key"], "run_scripts": True},
        {"user_id": "other", "api_keys": ["other_key"], "run_scripts": True},
        {"user_id": "plain", "api_keys": ["plain_key"]},
    ]
    (root / "users.json").write_text(json.dumps({"accounts": accounts}))
    return root


@pytest.fixture(params=["fast path", "route"])
async def api(
    request: pytest.FixtureRequest, base_settings: Settings, redis_url: str, folder: Path
) -> AsyncIterator[Api]:
    """The app on these accounts, with the submit's fast path and without it."""
    settings = base_settings.model_copy(
        update={
            "redis_url": redis_url,
            "users_file": folder / "users.json",
            "artifacts_dir": folder / "artifacts",
        }
    )
    app = create_app(settings, submit_fast_path=request.param == "fast path")
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with running(app), httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        yield Api(app, c, c)


async def upload(api: Api, tmp_path: Path, headers: dict[str, str], text: bytes) -> str:
    body = project(tmp_path / "p.tar.gz", {"train.py": text}).read_bytes()
    response = await api.client.post("/code", content=body, headers={**headers, **GZIP})
    assert response.status_code in (200, 201), response.text
    assert response.json()["code_id"] == hashlib.sha256(body).hexdigest()
    return hashlib.sha256(body).hexdigest()


def script(code: str, **fields: Any) -> dict[str, Any]:
    return {"type": SCRIPT, "input": {"code": code, "command": COMMAND}, **fields}


async def post(api: Api, body: Any, headers: dict[str, str]) -> httpx.Response:
    return await api.client.post("/enqueue-task", json=body, headers=headers)


@contextlib.contextmanager
def unchanged(r: redis.Redis) -> Iterator[None]:
    """Fails unless the block leaves Redis as it was (the key's rate counters aside): no job,
    no queue entry, no claim on any code."""
    before = {k: v for k, v in contents(r).items() if not k.startswith(RATE_COUNTERS)}
    yield
    after = {k: v for k, v in contents(r).items() if not k.startswith(RATE_COUNTERS)}
    assert after == before, "the refused request changed Redis"


def refused_field(response: httpx.Response) -> list[Any]:
    """The loc of a 422's one error, in the route's shape."""
    assert response.status_code == 422, response.text
    errors = response.json()["detail"]
    assert len(errors) == 1, errors
    assert set(errors[0]) == {"type", "loc", "msg"}
    loc: list[Any] = errors[0]["loc"]
    return loc


def test_the_script_type_is_registered() -> None:
    """The cases below run against the built-in type, not a stand-in."""
    assert SCRIPT in load_registry(entry_points=False)


# -- refused --------------------------------------------------------------------------------------
async def test_an_account_without_run_scripts_is_refused_with_a_403(
    api: Api, r: redis.Redis
) -> None:
    with unchanged(r):
        response = await post(api, script(UNKNOWN_CODE), PLAIN)
    assert (response.status_code, response.json()) == (403, {"detail": NO_SCRIPTS})
    assert "run_scripts" in NO_SCRIPTS


async def test_unknown_code_is_a_422_naming_input_code(api: Api, r: redis.Redis) -> None:
    with unchanged(r):
        response = await post(api, script(UNKNOWN_CODE), SCRIPTER)
    assert refused_field(response) == ["body", "input", "code"]


async def test_another_account_s_code_is_as_unknown(
    api: Api, r: redis.Redis, tmp_path: Path
) -> None:
    theirs = await upload(api, tmp_path, OTHER, b"print('theirs')\n")
    with unchanged(r):
        response = await post(api, script(theirs), SCRIPTER)
    unknown = await post(api, script(UNKNOWN_CODE), SCRIPTER)
    assert refused_field(response) == ["body", "input", "code"]
    assert response.json() == unknown.json()  # no existence oracle


async def test_a_code_id_that_is_no_sha256_is_the_type_s_422(api: Api, r: redis.Redis) -> None:
    with unchanged(r):
        response = await post(api, script("not-an-id"), SCRIPTER)
    assert refused_field(response) == ["body", "input", "code"]


@pytest.mark.parametrize("name", ["FAIRGPU_X", "CUDA_X", "LD_PRELOAD", "PYTHONPATH", "PATH"])
async def test_refused_env_names_are_a_422(
    api: Api, r: redis.Redis, tmp_path: Path, name: str
) -> None:
    code = await upload(api, tmp_path, SCRIPTER, b"print('mine')\n")
    body = script(code)
    body["input"]["env"] = {name: "1"}
    with unchanged(r):
        response = await post(api, body, SCRIPTER)
    assert refused_field(response)[:3] == ["body", "input", "env"]


@pytest.mark.parametrize("flag", [True, False])
@pytest.mark.parametrize(
    "body",
    [
        {"type": "burn", "input": {}, "duration_s": 1},
        {"kind": "short", "duration_s": 1},
    ],
    ids=["typed", "original"],
)
async def test_preemptible_on_any_other_job_is_a_422_naming_it(
    api: Api, r: redis.Redis, body: dict[str, Any], flag: bool
) -> None:
    with unchanged(r):
        response = await post(api, {**body, "preemptible": flag}, SCRIPTER)
    assert refused_field(response) == ["body", "preemptible"]


# -- accepted -------------------------------------------------------------------------------------
async def test_preemptible_is_the_script_job_s_own(
    api: Api, r: redis.Redis, tmp_path: Path
) -> None:
    code = await upload(api, tmp_path, SCRIPTER, b"print('mine')\n")
    ids = {}
    for flag in (True, False, None):
        body = script(code) if flag is None else script(code, preemptible=flag)
        response = await post(api, body, SCRIPTER)
        assert response.status_code == 200, response.text
        ids[flag] = response.json()["task_id"]
    assert r.hget(job_key(ids[True]), "preemptible") == b"1"
    assert r.hget(job_key(ids[False]), "preemptible") is None
    assert r.hget(job_key(ids[None]), "preemptible") is None  # the type's: not preemptible


async def test_a_submit_records_its_job_on_its_code_and_renews_its_use(
    api: Api, r: redis.Redis, tmp_path: Path
) -> None:
    code = await upload(api, tmp_path, SCRIPTER, b"print('mine')\n")
    r.zadd(CODE_USED, {f"{code}:scripter": 1.0})  # last used long ago
    response = await post(api, script(code, kind="long"), SCRIPTER)
    assert response.status_code == 200, response.text
    task_id = response.json()["task_id"]
    assert r.zrange(code_jobs_key(code, "scripter"), 0, -1) == [task_id.encode()]
    assert (r.zscore(CODE_USED, f"{code}:scripter") or 0) > 1.0
    job = r.hgetall(job_key(task_id))
    assert (job[b"type"], job[b"kind"]) == (SCRIPT.encode(), b"long")
    # its time limit is its queue's: the type's own is larger
    assert float(job[b"duration_s"]) == api.runtime.settings.max_duration_s("long")


async def test_the_idempotency_key_tells_preemptible_apart(
    api: Api, r: redis.Redis, tmp_path: Path
) -> None:
    code = await upload(api, tmp_path, SCRIPTER, b"print('mine')\n")
    key = {**SCRIPTER, "Idempotency-Key": "run-1"}
    first = await post(api, script(code), key)
    again = await post(api, script(code, preemptible=False), key)  # the same request
    assert first.status_code == again.status_code == 200
    assert first.json() == again.json()
    other = await post(api, script(code, preemptible=True), key)
    assert other.status_code == 422
    assert "Idempotency-Key" in other.json()["detail"]
