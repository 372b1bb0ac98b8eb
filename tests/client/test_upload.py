"""The client's upload of a packed project (Client.upload_code): the request's shape, read by a
real HTTP server on loopback, and the one-line errors of POST /code's refusals. The service's own
route is tested against this client where it is built."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from app.client.http import Client, Uploaded
from app.client.pack import pack
from app.client.transport import RequestError


@dataclass
class Seen:
    """What the server received, and what it answers next."""

    requests: list[tuple[str, str, dict[str, str], bytes]] = field(default_factory=list)
    status: int = 200
    body: bytes = b'{"code_id": "c-1", "bytes": 0}'


@pytest.fixture(scope="module")
def loopback() -> Iterator[tuple[str, Seen]]:
    """One server for the module (its shutdown waits out a poll of serve_forever)."""
    seen = Seen()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            seen.requests.append((self.command, self.path, dict(self.headers.items()), body))
            self.answer()

        def do_GET(self) -> None:
            seen.requests.append((self.command, self.path, dict(self.headers.items()), b""))
            self.answer()

        def answer(self) -> None:
            self.send_response(seen.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(seen.body)))
            self.end_headers()
            self.wfile.write(seen.body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # keep the test's output clean

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", seen
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


@pytest.fixture
def server(loopback: tuple[str, Seen]) -> tuple[str, Seen]:
    url, seen = loopback
    seen.requests.clear()
    seen.status, seen.body = Seen.status, Seen.body
    return url, seen


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "train.py").write_text("print('train')\n" * 1000)
    return pack(tmp_path / "project", into=tmp_path).path


def test_the_archive_is_posted_as_the_raw_body_with_its_type_and_length(
    server: tuple[str, Seen], archive: Path
) -> None:
    url, seen = server
    size = archive.stat().st_size
    seen.body = json.dumps({"code_id": "sha-abc", "bytes": size}).encode()
    with Client(url, "key-1") as client:
        assert client.upload_code(archive) == Uploaded("sha-abc", size)
    [(method, path, headers, body)] = seen.requests
    assert (method, path) == ("POST", "/code")
    assert headers["Content-Type"] == "application/gzip"
    assert headers["Content-Length"] == str(size)
    assert "Transfer-Encoding" not in headers
    assert headers["X-API-Key"] == "key-1"
    assert body == archive.read_bytes()


@pytest.mark.parametrize(
    ("status", "detail"),
    [
        (403, "account alice may not run scripts (run_scripts is false)"),
        (413, "the code is larger than MAX_CODE_BYTES (100 MB)"),
        (422, "member '../evil' leaves the archive"),
    ],
)
def test_a_refusal_is_one_line_with_its_status_and_the_servers_words(
    server: tuple[str, Seen], archive: Path, status: int, detail: str
) -> None:
    url, seen = server
    seen.status, seen.body = status, json.dumps({"detail": detail}).encode()
    with Client(url, "key-1") as client, pytest.raises(RequestError) as refused:
        client.upload_code(archive)
    assert refused.value.status == status
    assert str(refused.value) == f"{status} {detail} at {url}/code"


def test_a_success_that_is_not_the_routes_answer_is_unexpected(
    server: tuple[str, Seen], archive: Path
) -> None:
    url, seen = server
    seen.body = b"<html>hello</html>"
    with Client(url) as client, pytest.raises(RequestError, match="unexpected answer from"):
        client.upload_code(archive)


def test_an_archive_that_cannot_be_read_is_a_request_error(
    server: tuple[str, Seen], tmp_path: Path
) -> None:
    url, seen = server
    with Client(url) as client, pytest.raises(RequestError, match=r"cannot read .*gone\.tar\.gz"):
        client.upload_code(tmp_path / "gone.tar.gz")
    assert seen.requests == []


def test_a_server_that_is_not_there_is_named(archive: Path) -> None:
    with Client("http://127.0.0.1:9") as client, pytest.raises(RequestError) as failed:
        client.upload_code(archive)
    assert str(failed.value).startswith("cannot reach http://127.0.0.1:9")


def test_whether_the_server_has_the_code_already_asks_by_its_sha256(
    server: tuple[str, Seen], archive: Path
) -> None:
    url, seen = server
    digest = "ab" * 32
    seen.body = json.dumps({"code_id": digest, "bytes": 12, "uploaded_at": 1.5}).encode()
    with Client(url, "key-1") as client:
        info = client.code_info(digest)
        assert info is not None
        assert (info.code_id, info.bytes, info.uploaded_at) == (digest, 12, 1.5)
        seen.status, seen.body = 404, b'{"detail": "code not found"}'
        assert client.code_info(digest) is None  # not stored, or not this account's
        seen.status, seen.body = 401, b'{"detail": "invalid API key"}'
        with pytest.raises(RequestError, match=r"^401 invalid API key"):
            client.code_info(digest)
    assert [(m, p) for m, p, _, _ in seen.requests] == [("GET", f"/code/{digest}")] * 3
