"""An S3-compatible server for the tests: moto's server mode, a process of its own on a loopback
port (a real HTTP endpoint: boto3 is not patched). The fixtures are tests/conftest.py's, defined
there once: each module that imported them had session fixtures of its own, and started a moto
server of its own."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from app.dev.redis_server import free_port
from tests.support import wait_for

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

MOTO_START_S = 30.0


@pytest.fixture(scope="session")
def moto_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """moto's S3 server's URL; the tests that need it are skipped if it cannot start."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = (tmp_path_factory.mktemp("moto") / "moto.log").open("wb")
    command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        try:
            wait_for(lambda: _answers(url) or process.poll() is not None, MOTO_START_S, "moto")
        except TimeoutError:
            pytest.skip("moto's server did not start")
        if process.poll() is not None:
            pytest.skip(f"moto's server exited ({process.returncode}); see {log.name}")
        yield url
    finally:
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(10)
        if process.poll() is None:
            process.kill()
            process.wait()
        log.close()


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/moto-api/", timeout=1):
            return True
    except (urllib.error.URLError, OSError):
        return False


@pytest.fixture
def s3_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Credentials as the usual AWS environment variables give them (moto takes any)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def s3_client(moto_url: str) -> S3Client:
    """One client on moto for the whole run: making a boto3 client takes ~0.2 s of CPU, which a
    client per test paid again and again. Its credentials are given, not read from s3_env."""
    import boto3  # imported here: every test process loads this module, few need boto3

    return boto3.session.Session().client(
        "s3",
        endpoint_url=moto_url,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    )


def new_bucket(client: S3Client) -> str:
    """A new, empty bucket's name (the server lives for the whole run)."""
    bucket = f"fairgpu-test-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    return bucket
