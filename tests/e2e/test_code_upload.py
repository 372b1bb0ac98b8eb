"""The code upload through a real API process: an admin gives an account run_scripts over HTTP,
that account uploads a project over 1 MiB (past the API's small body limit) and reads it back,
another account cannot see it, and an upload over MAX_CODE_BYTES is a 413."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import httpx
import pytest

from app.dev.stack import Stack
from tests.code.archives import BAD_MEMBERS, Entry, build, project
from tests.e2e.conftest import DEMO_KEY, OTHER_KEY

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
OTHER = "22222222-2222-2222-2222-222222222222"
MOST = 3 << 20


def test_an_upload_over_a_mib_through_the_real_api(make_stack: object, tmp_path: Path) -> None:
    stack: Stack = make_stack(max_code_bytes=MOST)  # type: ignore[operator]
    other = {"X-API-Key": OTHER_KEY, "Content-Type": "application/gzip"}
    body = project(tmp_path / "p.tar.gz", {"w.bin": os.urandom(1536 * 1024)}).read_bytes()
    with httpx.Client(base_url=stack.url, timeout=30) as client:
        refused = client.post("/code", content=body, headers=other)
        assert refused.status_code == 403, refused.text
        given = client.patch(
            f"/admin/accounts/{OTHER}", headers={"X-API-Key": DEMO_KEY}, json={"run_scripts": True}
        )
        assert (given.status_code, given.json()["run_scripts"]) == (200, True)

        uploaded = client.post("/code", content=body, headers=other)
        code_id = hashlib.sha256(body).hexdigest()
        assert uploaded.status_code == 201, uploaded.text
        assert uploaded.json() == {"code_id": code_id, "bytes": len(body)}
        mine = client.get(f"/code/{code_id}", headers={"X-API-Key": OTHER_KEY})
        assert (mine.status_code, mine.json()["bytes"]) == (200, len(body))
        theirs = client.get(f"/code/{code_id}", headers={"X-API-Key": DEMO_KEY})
        assert theirs.status_code == 404

        big = project(tmp_path / "big.tar.gz", {"w.bin": os.urandom(MOST)}).read_bytes()
        over = client.post("/code", content=big, headers=other)
        assert over.status_code == 413
        assert "detail" in over.json()


def test_each_bad_member_kind_is_a_422_through_the_real_api(
    make_stack: object, tmp_path: Path
) -> None:
    """The real API process refuses each kind of member by name, and keeps none of them."""
    stack: Stack = make_stack()  # type: ignore[operator]
    demo = {"X-API-Key": DEMO_KEY, "Content-Type": "application/gzip"}
    with httpx.Client(base_url=stack.url, timeout=30) as client:
        for number, (entry, says) in enumerate(BAD_MEMBERS):
            entries = [Entry("ok.py", data=b"print(1)"), entry]
            body = build(tmp_path / f"bad{number}.tar.gz", entries).read_bytes()
            refused = client.post("/code", content=body, headers=demo)
            assert refused.status_code == 422, (entry.name, refused.text)
            detail = refused.json()["detail"]
            assert repr(entry.name) in detail and says in detail, detail
            code_id = hashlib.sha256(body).hexdigest()
            assert client.get(f"/code/{code_id}", headers=demo).status_code == 404
