"""POST /code and GET /code/{code_id}, in-process on the suite's real Redis: a run_scripts
account uploads a project's .tar.gz as the raw body; the same bytes are stored once; its owner
reads it back, anyone else gets the 404 of an unknown id; what is refused keeps nothing."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.code.store import AREA, BLOB
from app.settings import Settings
from tests.api.conftest import Api, open_api
from tests.code.archives import Entry, build, project

pytestmark = pytest.mark.anyio
SCRIPTER = {"X-API-Key": "scripter_key"}
OTHER_SCRIPTER = {"X-API-Key": "other_scripter_key"}
PLAIN = {"X-API-Key": "plain_key"}
GZIP = {"Content-Type": "application/gzip"}
MOST = 2 << 20  # MAX_CODE_BYTES here: an upload over 1 MiB fits


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The module's accounts file and artifacts folder: one app serves all its tests."""
    root = tmp_path_factory.mktemp("code-upload")
    accounts = [
        {"user_id": "scripter", "api_keys": ["scripter_key"], "run_scripts": True},
        {"user_id": "other", "api_keys": ["other_scripter_key"], "run_scripts": True},
        {"user_id": "plain", "api_keys": ["plain_key"]},
    ]
    (root / "users.json").write_text(json.dumps({"accounts": accounts}))
    return root


@pytest.fixture
async def api(base_settings: Settings, redis_url: str, folder: Path) -> AsyncIterator[Api]:
    settings = base_settings.model_copy(
        update={
            "redis_url": redis_url,
            "users_file": folder / "users.json",
            "artifacts_dir": folder / "artifacts",
            "max_code_bytes": MOST,
            "max_code_bytes_per_account": 3 << 20,
        }
    )
    async with open_api(settings, wait_for_hub=False) as opened:
        yield opened


def tarball(tmp_path: Path, files: dict[str, bytes]) -> bytes:
    return project(tmp_path / "p.tar.gz", files).read_bytes()


def stored(folder: Path) -> list[Path]:
    return sorted((folder / "artifacts" / AREA).glob(f"*/{BLOB}"))


async def test_an_upload_over_a_mib_is_kept_once_and_read_back_by_its_owner_alone(
    api: Api, tmp_path: Path, folder: Path
) -> None:
    body = tarball(tmp_path, {"train.py": b"print('hi')\n", "weights.bin": os.urandom(1200_000)})
    assert len(body) > 1 << 20
    code_id = hashlib.sha256(body).hexdigest()

    first = await api.client.post("/code", content=body, headers={**SCRIPTER, **GZIP})
    assert first.status_code == 201, first.text
    assert first.json() == {"code_id": code_id, "bytes": len(body)}
    again = await api.client.post("/code", content=body, headers={**SCRIPTER, **GZIP})
    assert (again.status_code, again.json()) == (200, first.json())  # the account's already
    by_other = await api.client.post("/code", content=body, headers={**OTHER_SCRIPTER, **GZIP})
    assert by_other.status_code == 201  # new to that account, though the bytes are not
    assert (folder / "artifacts" / AREA / code_id / BLOB).read_bytes() == body  # once

    mine = await api.client.get(f"/code/{code_id}", headers=SCRIPTER)
    assert mine.status_code == 200
    assert mine.json().keys() == {"code_id", "bytes", "uploaded_at"}
    assert (mine.json()["code_id"], mine.json()["bytes"]) == (code_id, len(body))
    unknown = await api.client.get(f"/code/{'0' * 64}", headers=SCRIPTER)
    for other in (
        await api.client.get(f"/code/{code_id}", headers=PLAIN),  # the same bytes: not theirs
        unknown,
        await api.client.get("/code/not-an-id", headers=SCRIPTER),
    ):
        assert (other.status_code, other.json()) == (404, {"detail": "code not found"})


async def test_an_account_without_run_scripts_may_not_upload(api: Api, tmp_path: Path) -> None:
    body = tarball(tmp_path, {"train.py": b"print('no')\n"})
    refused = await api.client.post("/code", content=body, headers={**PLAIN, **GZIP})
    assert refused.status_code == 403
    assert "run_scripts" in refused.json()["detail"]
    code_id = hashlib.sha256(body).hexdigest()
    assert (await api.client.get(f"/code/{code_id}", headers=PLAIN)).status_code == 404
    assert (await api.client.post("/code", content=body, headers=GZIP)).status_code == 401


async def test_an_upload_over_max_code_bytes_keeps_nothing(
    api: Api, tmp_path: Path, folder: Path
) -> None:
    before = stored(folder)
    body = tarball(tmp_path, {"big.bin": os.urandom(MOST + 1)})
    refused = await api.client.post("/code", content=body, headers={**SCRIPTER, **GZIP})
    assert refused.status_code == 413
    assert "detail" in refused.json()

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: bounded as it streams
        for start in range(0, len(body), 256 * 1024):
            yield body[start : start + 256 * 1024]

    streamed = await api.client.post("/code", content=chunks(), headers={**SCRIPTER, **GZIP})
    assert streamed.status_code == 413
    assert stored(folder) == before
    code_id = hashlib.sha256(body).hexdigest()
    assert (await api.client.get(f"/code/{code_id}", headers=SCRIPTER)).status_code == 404


async def test_an_account_s_stored_code_is_bounded(api: Api, tmp_path: Path) -> None:
    for n in range(2):
        body = tarball(tmp_path, {f"{n}.bin": os.urandom(1200_000)})
        answer = await api.client.post("/code", content=body, headers={**SCRIPTER, **GZIP})
        assert answer.status_code == 201
    body = tarball(tmp_path, {"2.bin": os.urandom(1200_000)})
    over = await api.client.post("/code", content=body, headers={**SCRIPTER, **GZIP})
    assert over.status_code == 413
    assert "stored code" in over.json()["detail"]
    # Another account's room is its own.
    assert (
        await api.client.post("/code", content=body, headers={**OTHER_SCRIPTER, **GZIP})
    ).status_code == 201


@pytest.mark.parametrize(
    "entries",
    [
        [Entry("../escape.py", data=b"x")],
        [Entry("link", b"2", link="/etc/passwd")],
        [Entry("ok.py", data=b"1"), Entry("ok.py", data=b"2")],
    ],
    ids=["dotdot", "symlink", "duplicate"],
)
async def test_a_bad_archive_is_a_422_naming_its_member_and_keeps_nothing(
    api: Api, tmp_path: Path, folder: Path, entries: list[Entry]
) -> None:
    before = stored(folder)
    body = build(tmp_path / "bad.tar.gz", entries).read_bytes()
    refused = await api.client.post("/code", content=body, headers={**SCRIPTER, **GZIP})
    assert refused.status_code == 422
    assert repr(entries[-1].name) in refused.json()["detail"]
    assert stored(folder) == before
    code_id = hashlib.sha256(body).hexdigest()
    assert (await api.client.get(f"/code/{code_id}", headers=SCRIPTER)).status_code == 404


async def test_what_is_no_gzip_is_refused(api: Api, tmp_path: Path) -> None:
    body = tarball(tmp_path, {"a.py": b""})
    for headers in ({"Content-Type": "application/json"}, {}):
        wrong = await api.client.post("/code", content=body, headers={**SCRIPTER, **headers})
        assert wrong.status_code == 415
        assert "application/gzip" in wrong.json()["detail"]
    garbage = await api.client.post("/code", content=b"not gzip", headers={**SCRIPTER, **GZIP})
    assert garbage.status_code == 422
    assert "not a readable .tar.gz" in garbage.json()["detail"]
