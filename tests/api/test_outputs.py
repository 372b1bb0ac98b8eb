"""GET /tasks/{id}/logs and /tasks/{id}/artifacts/{name}: a job's log lines and files, to its
owner only; progress and artifacts in GET /task-status; the output metrics. The worker's side
is written into Redis (and the artifact store) as the contract says the worker writes it."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import redis

from app.artifacts import S3Artifacts, open_artifacts
from app.settings import Settings
from app.store.keys import METRICS, job_key, logs_key
from tests.api.conftest import Api, open_api
from tests.api.helpers import KEY, NOT_FOUND, SECOND_KEY, Untouched, Worker
from tests.api.test_metrics import scrape, value
from tests.s3_server import new_bucket

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

pytestmark = pytest.mark.anyio
NO_ARTIFACT = {"detail": "artifact not found"}


@pytest.fixture(scope="session")
def artifacts_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder for the run (each test's jobs are new ids), so the app is lent, not rebuilt."""
    return tmp_path_factory.mktemp("artifacts")


@pytest.fixture
def settings(base_settings: Settings, redis_url: str, artifacts_dir: Path) -> Settings:
    return base_settings.model_copy(update={"redis_url": redis_url, "artifacts_dir": artifacts_dir})


@pytest.fixture(scope="module")
def module_settings(module_settings: Settings, artifacts_dir: Path) -> Settings:
    return module_settings.model_copy(update={"artifacts_dir": artifacts_dir})


@pytest.fixture
def api(shared_api: Api, settings: Settings) -> Api:
    """One runtime for the module's tests (tests/api/conftest.py): a job's logs and progress are
    read from Redis, emptied for each test, and its artifacts from a folder of its own id."""
    assert shared_api.runtime.settings == settings
    return shared_api


async def submit(api: Api, key: dict[str, str] = KEY) -> str:
    response = await api.client.post(
        "/enqueue-task", json={"kind": "short", "duration_s": 5}, headers=key
    )
    assert response.status_code == 200, response.text
    task_id: str = response.json()["task_id"]
    return task_id


async def status(api: Api, task_id: str) -> dict[str, Any]:
    response = await api.client.get(f"/task-status/{task_id}", headers=KEY)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def write_logs(r: redis.Redis, task_id: str, *lines: tuple[float, str, str]) -> None:
    for at, stream, text in lines:
        r.xadd(logs_key(task_id), {"at": repr(at), "stream": stream, "text": text})


def put(settings: Settings, tmp_path: Path, task_id: str, name: str, content: bytes) -> None:
    source = tmp_path / f"source-{uuid.uuid4()}"
    source.write_bytes(content)
    with source.open("rb") as file:
        open_artifacts(settings).put(task_id, name, file)


# -- logs -----------------------------------------------------------------------------------------
LINES = [(1.5, "stdout", "step 1"), (2.25, "stderr", "warning: ünïcode"), (3.0, "log", "")]


async def test_the_owner_reads_every_log_line_oldest_first(api: Api, r: redis.Redis) -> None:
    task_id = await submit(api)
    write_logs(r, task_id, *LINES)

    response = await api.client.get(f"/tasks/{task_id}/logs", headers=KEY)

    assert response.status_code == 200, response.text
    assert response.json() == {
        "lines": [{"at": at, "stream": stream, "text": text} for at, stream, text in LINES]
    }


async def test_tail_keeps_the_newest_lines(api: Api, r: redis.Redis) -> None:
    task_id = await submit(api)
    write_logs(r, task_id, *LINES)

    for tail, expected in [(1, LINES[2:]), (2, LINES[1:]), (3, LINES), (10_000, LINES)]:
        response = await api.client.get(
            f"/tasks/{task_id}/logs", params={"tail": tail}, headers=KEY
        )
        assert response.status_code == 200, response.text
        assert [line["text"] for line in response.json()["lines"]] == [t for *_, t in expected]


async def test_a_job_without_logs_has_no_lines(api: Api) -> None:
    task_id = await submit(api)

    response = await api.client.get(f"/tasks/{task_id}/logs", headers=KEY)

    assert response.json() == {"lines": []}


async def test_a_line_from_an_unknown_stream_reads_as_the_job_s_own_log(
    api: Api, r: redis.Redis
) -> None:
    task_id = await submit(api)
    write_logs(r, task_id, (1.0, "fd3", "odd"))

    response = await api.client.get(f"/tasks/{task_id}/logs", headers=KEY)

    assert response.json()["lines"] == [{"at": 1.0, "stream": "log", "text": "odd"}]


@pytest.mark.parametrize("tail", ["0", "-1", "10001", "1.5", "all", ""])
async def test_a_tail_outside_its_range_is_a_422_that_reads_nothing(
    api: Api, r: redis.Redis, tail: str
) -> None:
    task_id = await submit(api)
    assert api.runtime.settings.max_log_lines == 10_000

    with Untouched(r):
        response = await api.client.get(
            f"/tasks/{task_id}/logs", params={"tail": tail}, headers=KEY
        )

    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["query", "tail"]


async def test_another_account_s_logs_are_the_404_of_an_unknown_task(
    api: Api, r: redis.Redis
) -> None:
    task_id = await submit(api)
    write_logs(r, task_id, *LINES)

    theirs = await api.client.get(f"/tasks/{task_id}/logs", headers=SECOND_KEY)
    unknown = await api.client.get(f"/tasks/{uuid.uuid4()}/logs", headers=KEY)
    malformed = await api.client.get("/tasks/not-a-uuid/logs", headers=KEY)

    for response in (theirs, unknown, malformed):
        assert response.status_code == 404
        assert response.json() == NOT_FOUND


# -- artifacts ------------------------------------------------------------------------------------
async def test_the_owner_downloads_an_artifact_as_an_attachment(
    api: Api, settings: Settings, tmp_path: Path
) -> None:
    task_id = await submit(api)
    content = bytes(range(256)) * 4096  # 1 MiB: several chunks
    put(settings, tmp_path, task_id, "plots/loss.png", content)

    response = await api.client.get(f"/tasks/{task_id}/artifacts/plots/loss.png", headers=KEY)

    assert response.status_code == 200
    assert response.content == content
    assert response.headers["content-type"] == "image/png"
    assert response.headers["content-disposition"] == 'attachment; filename="loss.png"'
    assert response.headers["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize(
    ("name", "content_type", "disposition"),
    [
        ("model.bin", "application/octet-stream", 'attachment; filename="model.bin"'),
        ("data.csv.gz", "application/octet-stream", 'attachment; filename="data.csv.gz"'),
        ("notes.txt", "text/plain", 'attachment; filename="notes.txt"'),
        ("ünï.txt", "text/plain", "attachment; filename*=UTF-8''%C3%BCn%C3%AF.txt"),
        ('say "hi"', "application/octet-stream", "attachment; filename*=UTF-8''say%20%22hi%22"),
    ],
)
async def test_the_type_and_file_name_come_from_the_name(
    api: Api, settings: Settings, tmp_path: Path, name: str, content_type: str, disposition: str
) -> None:
    task_id = await submit(api)
    put(settings, tmp_path, task_id, name, b"x")

    response = await api.client.get(f"/tasks/{task_id}/artifacts/{name}", headers=KEY)

    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == content_type
    assert response.headers["content-disposition"] == disposition


async def test_another_account_s_artifact_is_the_404_of_an_unknown_task(
    api: Api, settings: Settings, tmp_path: Path
) -> None:
    task_id = await submit(api)
    put(settings, tmp_path, task_id, "out.txt", b"private")

    theirs = await api.client.get(f"/tasks/{task_id}/artifacts/out.txt", headers=SECOND_KEY)
    unknown = await api.client.get(f"/tasks/{uuid.uuid4()}/artifacts/out.txt", headers=KEY)

    for response in (theirs, unknown):
        assert response.status_code == 404
        assert response.json() == NOT_FOUND


async def test_an_artifact_that_is_not_there_is_a_404(
    api: Api, settings: Settings, tmp_path: Path
) -> None:
    task_id = await submit(api)
    put(settings, tmp_path, task_id, "dir/out.txt", b"x")

    for name in ("other.txt", "dir", "dir/", "dir/out.txt/more", ""):
        response = await api.client.get(f"/tasks/{task_id}/artifacts/{name}", headers=KEY)
        assert response.status_code == 404, name
        assert response.json() in (NO_ARTIFACT, {"detail": "Not Found"}), name


@pytest.mark.parametrize(
    "name",
    [
        "../secret.txt",
        "%2e%2e/secret.txt",
        "%2E%2E%2Fsecret.txt",
        "..%5Csecret.txt",
        "%5Csecret.txt",
        "/SECRET_ABSOLUTE",
        "%2FSECRET_ABSOLUTE",
        "../OTHER/out.txt",
        "%2e%2e/OTHER/out.txt",
        "%2e/%2e%2e/secret.txt",
        "out.txt%00",
    ],
)
async def test_a_name_that_leaves_the_job_s_folder_reads_nothing(
    api: Api, settings: Settings, artifacts_dir: Path, tmp_path: Path, name: str
) -> None:
    task_id, other = await submit(api), await submit(api, SECOND_KEY)
    put(settings, tmp_path, task_id, "out.txt", b"mine")
    put(settings, tmp_path, other, "out.txt", b"SECRET of another job")
    (artifacts_dir / "secret.txt").write_bytes(b"SECRET next to the jobs")
    absolute = tmp_path / "absolute.txt"
    absolute.write_bytes(b"SECRET anywhere")
    name = name.replace("SECRET_ABSOLUTE", str(absolute).lstrip("/")).replace("OTHER", other)

    response = await api.client.get(f"/tasks/{task_id}/artifacts/{name}", headers=KEY)

    assert response.status_code in (404, 422), response.text
    assert b"SECRET" not in response.content


async def test_an_artifact_streams_from_s3(
    api: Api, moto_url: str, s3_env: None, s3_client: S3Client, tmp_path: Path
) -> None:
    """The same download from S3-compatible storage (moto's server), read in chunks."""
    bucket = new_bucket(s3_client)
    s3_settings = api.runtime.settings.model_copy(
        update={"artifacts_url": f"s3://{bucket}/jobs", "artifacts_endpoint_url": moto_url}
    )
    content = bytes(range(256)) * 4096
    async with open_api(s3_settings) as s3_api:
        assert isinstance(s3_api.runtime.artifacts, S3Artifacts)
        task_id = await submit(s3_api)
        put(s3_settings, tmp_path, task_id, "weights/model.safetensors", content)

        found = await s3_api.client.get(
            f"/tasks/{task_id}/artifacts/weights/model.safetensors", headers=KEY
        )
        missing = await s3_api.client.get(f"/tasks/{task_id}/artifacts/nothing", headers=KEY)

    assert found.status_code == 200
    assert found.content == content
    assert found.headers["content-type"] == "application/octet-stream"
    assert (missing.status_code, missing.json()) == (404, NO_ARTIFACT)


# -- the status -----------------------------------------------------------------------------------
async def test_the_status_carries_the_latest_progress(
    api: Api, worker: Worker, r: redis.Redis
) -> None:
    task_id = await submit(api)
    assert (await status(api, task_id))["progress"] is None
    token = worker.lease()
    worker.start(task_id, token)

    r.hset(job_key(task_id), "progress", json.dumps({"fraction": 0.25, "message": "epoch 1"}))
    assert (await status(api, task_id))["progress"] == {"fraction": 0.25, "message": "epoch 1"}
    r.hset(job_key(task_id), "progress", json.dumps({"fraction": None, "message": "saving"}))
    assert (await status(api, task_id))["progress"] == {"fraction": None, "message": "saving"}


@pytest.mark.parametrize("stored", ["not json", '{"fraction": 7}', "[]"])
async def test_a_malformed_progress_reads_as_none(
    api: Api, worker: Worker, r: redis.Redis, stored: str
) -> None:
    task_id = await submit(api)
    r.hset(job_key(task_id), "progress", stored)

    assert (await status(api, task_id))["progress"] is None


ARTIFACTS = [
    {"name": "model.bin", "size": 1024, "sha256": "ab" * 32},
    {"name": "plots/loss.png", "size": 0, "sha256": "cd" * 32},
]


async def test_a_success_lists_its_artifacts(api: Api, worker: Worker, r: redis.Redis) -> None:
    task_id = await submit(api)
    token = worker.lease()
    worker.start(task_id, token)
    assert (await status(api, task_id))["result"]["artifacts"] is None
    assert worker.succeed(task_id, token)
    assert (await status(api, task_id))["result"]["artifacts"] is None  # it left none

    r.hset(job_key(task_id), "artifacts", json.dumps(ARTIFACTS))  # as finish.lua writes it

    assert (await status(api, task_id))["result"]["artifacts"] == ARTIFACTS


async def test_the_owner_lists_a_job_s_artifacts_as_its_status_does(
    api: Api, worker: Worker, r: redis.Redis
) -> None:
    task_id = await submit(api)
    listed = await api.client.get(f"/tasks/{task_id}/artifacts", headers=KEY)
    assert (listed.status_code, listed.json()) == (200, [])  # queued: none yet
    token = worker.lease()
    worker.start(task_id, token)
    r.hset(job_key(task_id), "artifacts", json.dumps(ARTIFACTS))  # as finish.lua writes it
    assert worker.succeed(task_id, token)

    listed = await api.client.get(f"/tasks/{task_id}/artifacts", headers=KEY)

    assert (listed.status_code, listed.json()) == (200, ARTIFACTS)
    assert listed.json() == (await status(api, task_id))["result"]["artifacts"]


async def test_another_account_s_artifact_list_is_the_404_of_an_unknown_task(
    api: Api, r: redis.Redis
) -> None:
    task_id = await submit(api)
    r.hset(job_key(task_id), "artifacts", json.dumps(ARTIFACTS))
    theirs = await api.client.get(f"/tasks/{task_id}/artifacts", headers=SECOND_KEY)
    unknown = await api.client.get(f"/tasks/{uuid.uuid4()}/artifacts", headers=KEY)
    assert (theirs.status_code, theirs.json()) == (404, NOT_FOUND)
    assert (unknown.status_code, unknown.json()) == (404, NOT_FOUND)


async def test_only_a_success_lists_artifacts(api: Api, worker: Worker, r: redis.Redis) -> None:
    task_id = await submit(api)
    token = worker.lease()
    worker.start(task_id, token)
    r.hset(job_key(task_id), "artifacts", json.dumps(ARTIFACTS))
    worker.fail(task_id, token, "ValueError: boom")

    assert (await status(api, task_id))["result"]["artifacts"] is None
    listed = await api.client.get(f"/tasks/{task_id}/artifacts", headers=KEY)
    assert (listed.status_code, listed.json()) == (200, [])


# -- metrics --------------------------------------------------------------------------------------
async def test_the_output_counters_are_exposed(api: Api, r: redis.Redis) -> None:
    before = await scrape(api)
    assert value(before, "fairgpu_log_lines_dropped_total") == 0
    assert value(before, "fairgpu_artifact_bytes_total") == 0

    r.hincrbyfloat(METRICS, "log_lines_dropped", 17)
    r.hincrbyfloat(METRICS, "artifact_bytes", 5 * 2**20)

    after = await scrape(api)
    assert value(after, "fairgpu_log_lines_dropped_total") == 17
    assert value(after, "fairgpu_artifact_bytes_total") == 5 * 2**20


async def test_the_schema_s_largest_tail_is_max_log_lines(settings: Settings) -> None:
    async with open_api(settings.model_copy(update={"max_log_lines": 5})) as small:
        schema = (await small.client.get("/openapi.json")).json()
        [tail] = schema["paths"]["/tasks/{task_id}/logs"]["get"]["parameters"][1:]
        assert (tail["name"], tail["schema"]["minimum"], tail["schema"]["maximum"]) == (
            "tail",
            1,
            5,
        )
        task_id = await submit(small)
        url = f"/tasks/{task_id}/logs"
        assert (await small.client.get(url, params={"tail": 5}, headers=KEY)).status_code == 200
        assert (await small.client.get(url, params={"tail": 6}, headers=KEY)).status_code == 422


async def test_a_name_with_a_newline_reaches_the_route_a_missing_key_is_a_401(api: Api) -> None:
    """`%0A` decodes to a newline, which Starlette's `path` never matched: the answer was a
    routing 404 before the key was looked at (schemathesis found it)."""
    task_id = await submit(api)
    without_key = await api.client.get(f"/tasks/{task_id}/artifacts/%0A0")
    assert without_key.status_code == 401, without_key.text
    with_key = await api.client.get(f"/tasks/{task_id}/artifacts/%0A0", headers=KEY)
    assert (with_key.status_code, with_key.json()) == (404, {"detail": "artifact not found"})
