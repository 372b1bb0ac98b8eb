"""The artifact stores: a local folder, and S3-compatible storage tested against moto's server
mode (a real HTTP endpoint, started here as a process on a loopback port). Both put, open,
delete and sweep alike; check_name keeps every name inside its job's folder."""

from __future__ import annotations

import io
import os
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import pytest

from app.artifacts import (
    CHECKPOINTS,
    ArtifactStore,
    BadNameError,
    LocalArtifacts,
    S3Artifacts,
    check_name,
    open_artifacts,
    parse_s3_url,
)
from app.auth import Accounts
from app.models import RECLAIM_QUEUE
from app.settings import Settings
from app.store.keys import job_key
from app.wiring.service import SWEEP_TASK, build
from app.worker.checkpoints import Checkpoints
from tests.s3_server import new_bucket
from tests.support import FIXTURES

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


def read_all(store: ArtifactStore, job_id: str, name: str) -> bytes:
    opened = store.open(job_id, name)
    try:
        chunks = []
        while chunk := opened.read(7):  # small reads: the loop a download makes
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        opened.close()


def source(content: bytes) -> BinaryIO:
    """What a put reads: a file object, as the worker hands one (app/worker/outputs.py)."""
    return io.BytesIO(content)


# -- names ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["model.bin", "plots/loss.png", "a b/ünï.txt", "x" * 255])
def test_a_name_inside_the_job_s_folder_is_kept_as_it_is(name: str) -> None:
    assert check_name(name) == name


@pytest.mark.parametrize(
    "name",
    [
        "",
        "/etc/passwd",
        "../x",
        "a/../../x",
        "..",
        "a..b",
        "a\\b",
        "..\\x",
        "a\x00b",
        "a\nb",
        "a//b",
        "a/",
        "./a",
        "x" * 256,
        "a/" * 600,
    ],
)
def test_a_name_that_could_leave_the_folder_is_refused(name: str) -> None:
    with pytest.raises(BadNameError):
        check_name(name)


@pytest.mark.parametrize(
    ("url", "parsed"),
    [("s3://b", ("b", "")), ("s3://b/", ("b", "")), ("s3://b/p/q/", ("b", "p/q"))],
)
def test_an_s3_url_names_a_bucket_and_a_prefix(url: str, parsed: tuple[str, str]) -> None:
    assert parse_s3_url(url) == parsed


@pytest.mark.parametrize("url", ["http://b/p", "s3:///p", "s3://b/p?x=1", "b/p"])
def test_anything_but_an_s3_url_is_refused(url: str) -> None:
    with pytest.raises(ValueError, match="s3://"):
        parse_s3_url(url)


def test_the_settings_choose_the_store(tmp_path: Path) -> None:
    local = open_artifacts(Settings(users_file=FIXTURES, artifacts_dir=tmp_path))
    assert isinstance(local, LocalArtifacts)
    assert local.root == tmp_path
    default = open_artifacts(Settings(users_file=FIXTURES))
    assert isinstance(default, LocalArtifacts)
    assert default.root == Path("artifacts")


def test_the_settings_name_an_s3_store_that_works(
    moto_url: str, s3_env: None, s3_client: S3Client
) -> None:
    bucket = new_bucket(s3_client)
    settings = Settings(
        users_file=FIXTURES, artifacts_url=f"s3://{bucket}/runs/a", artifacts_endpoint_url=moto_url
    )
    store = open_artifacts(settings)
    assert isinstance(store, S3Artifacts)
    assert (store.bucket, store.prefix) == (bucket, "runs/a/")
    job = str(uuid.uuid4())
    store.put(job, "out.txt", source(b"through the settings"))
    assert read_all(store, job, "out.txt") == b"through the settings"


# -- both stores alike ----------------------------------------------------------------------------
@pytest.fixture
def s3(s3_client: S3Client) -> S3Artifacts:
    """A store on a new bucket, with a prefix, on the run's one client (the settings' way to
    the same store is test_the_settings_choose_the_store's)."""
    return S3Artifacts(new_bucket(s3_client), "/runs/a/", client=s3_client)


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ArtifactStore:
    if request.param == "local":
        return LocalArtifacts(tmp_path / "artifacts")
    s3_store: S3Artifacts = request.getfixturevalue("s3")
    return s3_store


def test_a_put_file_reads_back_whole(store: ArtifactStore) -> None:
    job = str(uuid.uuid4())
    content = os.urandom(100_000)

    store.put(job, "weights/model.bin", source(content))

    assert read_all(store, job, "weights/model.bin") == content


def test_a_second_put_replaces_the_first(store: ArtifactStore) -> None:
    job = str(uuid.uuid4())
    store.put(job, "out.txt", source(b"first"))

    store.put(job, "out.txt", source(b"second"))

    assert read_all(store, job, "out.txt") == b"second"


def test_a_missing_artifact_is_file_not_found(store: ArtifactStore) -> None:
    job = str(uuid.uuid4())
    store.put(job, "a/b.txt", source(b"b"))

    for job_id, name in [(job, "c.txt"), (job, "a"), (str(uuid.uuid4()), "a/b.txt")]:
        with pytest.raises(FileNotFoundError):
            store.open(job_id, name)


@pytest.mark.parametrize("name", ["../x", "/x", "a\\b", "a//b"])
def test_an_escaping_name_is_refused_by_every_method(store: ArtifactStore, name: str) -> None:
    job = str(uuid.uuid4())
    with pytest.raises(BadNameError):
        store.put(job, name, source(b"x"))
    with pytest.raises(BadNameError):
        store.open(job, name)
    with pytest.raises(BadNameError):
        store.delete("../" + job)


def test_delete_removes_one_job_s_artifacts_only(store: ArtifactStore) -> None:
    job, other = str(uuid.uuid4()), str(uuid.uuid4())
    longer = job + "0"  # a job whose id starts with the other's: not in its folder
    for job_id in (job, other):
        store.put(job_id, "a.txt", source(b"a"))
        store.put(job_id, "d/b.txt", source(b"b"))
    store.put(longer, "a.txt", source(b"longer"))

    store.delete(job)
    store.delete(str(uuid.uuid4()))  # nothing there: nothing happens

    for name in ("a.txt", "d/b.txt"):
        with pytest.raises(FileNotFoundError):
            store.open(job, name)
        assert read_all(store, other, name) in (b"a", b"b")
    assert read_all(store, longer, "a.txt") == b"longer"


def test_sweep_removes_what_is_older_than_asked(store: ArtifactStore) -> None:
    jobs = [str(uuid.uuid4()) for _ in range(3)]
    for job_id in jobs:
        store.put(job_id, "a.txt", source(b"a"))
        store.put(job_id, "d/b.txt", source(b"b"))

    assert store.sweep(3600) == 0
    assert read_all(store, jobs[0], "a.txt") == b"a"
    # Everything is older than a minute from now.
    assert store.sweep(-60) == 3
    for job_id in jobs:
        with pytest.raises(FileNotFoundError):
            store.open(job_id, "d/b.txt")
    assert store.sweep(-60) == 0


def test_names_lists_one_job_s_files_in_order(store: ArtifactStore) -> None:
    job, other = str(uuid.uuid4()), str(uuid.uuid4())
    for name in ("z.txt", "d/e/b.txt", "a.txt"):
        store.put(job, name, source(b"x"))
    store.put(other, "o.txt", source(b"o"))

    assert store.names(job) == ["a.txt", "d/e/b.txt", "z.txt"]
    assert store.names(str(uuid.uuid4())) == []


def test_remove_removes_the_named_files_only(store: ArtifactStore) -> None:
    job = str(uuid.uuid4())
    for name in ("a.txt", "d/b.txt", "d/c.txt"):
        store.put(job, name, source(b"x"))

    store.remove(job, ["a.txt", "d/b.txt", "never.txt"])

    assert store.names(job) == ["d/c.txt"]
    with pytest.raises(BadNameError):
        store.remove(job, ["../x"])


def test_a_sweep_spares_the_jobs_still_alive(store: ArtifactStore) -> None:
    jobs = [str(uuid.uuid4()) for _ in range(3)]
    for job_id in jobs:
        store.put(job_id, "a.txt", source(b"a"))
    asked: list[str] = []

    def alive(job_id: str) -> bool:
        asked.append(job_id)
        return job_id == jobs[0]

    assert store.sweep(3600, alive) == 0
    assert asked == []  # asked only of the old
    assert store.sweep(-60, alive) == 2
    assert store.names(jobs[0]) == ["a.txt"]
    assert store.names(jobs[1]) == []


def test_within_is_a_store_apart_that_sweeps_and_lists_leave_alone(store: ArtifactStore) -> None:
    job = str(uuid.uuid4())
    area = store.within(CHECKPOINTS)
    area.put(job, "model.pt", source(b"m"))

    assert store.names(job) == []
    assert store.sweep(-60) == 0
    assert read_all(area, job, "model.pt") == b"m"
    assert area.sweep(-60) == 1
    with pytest.raises(BadNameError):
        store.within("a/b")


# -- each store's own ----------------------------------------------------------------------------
def test_the_local_sweep_goes_by_a_job_s_last_put(tmp_path: Path) -> None:
    store = LocalArtifacts(tmp_path / "artifacts")
    old, new = str(uuid.uuid4()), str(uuid.uuid4())
    store.put(old, "deep/er/a.txt", source(b"a"))
    store.put(new, "a.txt", source(b"a"))
    day_ago = time.time() - 86_400
    os.utime(store.root / old, (day_ago, day_ago))
    os.utime(store.root / new, (day_ago, day_ago))
    store.put(new, "deep/er/b.txt", source(b"b"))  # a nested put counts too

    assert store.sweep(3600) == 1

    assert not (store.root / old).exists()
    assert read_all(store, new, "a.txt") == b"a"


def test_the_local_store_serves_no_file_a_link_leads_out_to(tmp_path: Path) -> None:
    store = LocalArtifacts(tmp_path / "artifacts")
    job = str(uuid.uuid4())
    secret = tmp_path / "secret"
    secret.write_bytes(b"secret")
    store.put(job, "a.txt", source(b"a"))
    (store.root / job / "link").symlink_to(secret)

    with pytest.raises(FileNotFoundError):
        store.open(job, "link")


def test_a_sweep_removes_only_jobs_folders(store: ArtifactStore) -> None:
    """Should the folder (or bucket prefix) hold anything else, a sweep leaves it alone."""
    store.put("not-a-job", "keep.txt", source(b"k"))
    store.put(str(uuid.uuid4()).upper(), "keep.txt", source(b"k"))

    assert store.sweep(-60) == 0

    assert read_all(store, "not-a-job", "keep.txt") == b"k"


def test_a_put_file_is_readable_by_others(tmp_path: Path) -> None:
    """An API running as another user than the worker may serve it (a shared volume)."""
    store = LocalArtifacts(tmp_path / "artifacts")
    job = str(uuid.uuid4())
    store.put(job, "a.txt", source(b"a"))

    assert (store.root / job / "a.txt").stat().st_mode & 0o777 == 0o644


def test_the_local_sweep_of_no_folder_removes_nothing(tmp_path: Path) -> None:
    assert LocalArtifacts(tmp_path / "none").sweep(0) == 0


def test_s3_objects_are_prefix_job_name(s3: S3Artifacts) -> None:
    job = str(uuid.uuid4())

    s3.put(job, "plots/loss.png", source(b"png"))

    listed = s3.client.list_objects_v2(Bucket=s3.bucket)
    assert [o["Key"] for o in listed["Contents"]] == [f"runs/a/{job}/plots/loss.png"]


def test_s3_deletes_and_sweeps_past_one_page_of_keys(s3: S3Artifacts) -> None:
    s3.page = 2  # keys per listing and per delete: several calls of each below
    job, other = str(uuid.uuid4()), str(uuid.uuid4())
    for job_id in (job, other):
        for i in range(5):
            s3.put(job_id, f"part/{i}", source(b"x"))

    s3.delete(job)

    listed = s3.client.list_objects_v2(Bucket=s3.bucket)["Contents"]
    assert sorted(o["Key"] for o in listed) == [f"runs/a/{other}/part/{i}" for i in range(5)]
    assert s3.sweep(-60) == 1
    assert s3.client.list_objects_v2(Bucket=s3.bucket)["KeyCount"] == 0


# -- the service's periodic sweep ----------------------------------------------------------------
def test_the_periodic_sweep_removes_artifacts_kept_past_their_job_s_record(
    tmp_path: Path, redis_url: str
) -> None:
    settings = Settings(
        users_file=FIXTURES, redis_url=redis_url, artifacts_dir=tmp_path / "a", job_ttl_s=60
    )
    service = build(settings, Accounts.load(FIXTURES))
    store = LocalArtifacts(tmp_path / "a")
    expired, running = str(uuid.uuid4()), str(uuid.uuid4())
    for job_id in (expired, running):
        store.put(job_id, "out.txt", source(b"x"))
    # Put before the longest run plus JOB_TTL_S: its record has expired. The other's may not
    # have: its job may have run long after it put the file.
    kept_s = settings.job_ttl_s + settings.max_long_s + settings.timeout_grace_s
    for job_id, age_s in [(expired, kept_s + 60), (running, kept_s - 60)]:
        then = time.time() - age_s
        os.utime(store.root / job_id, (then, then))
    try:
        assert service.sweep_artifacts() == 1

        assert not (store.root / expired).exists()
        assert read_all(store, running, "out.txt") == b"x"
        os.utime(store.root / running, (0, 0))
        assert service.sweep_artifacts() == 0  # swept a moment ago: not again so soon
        assert service.sweep_artifacts(now=True) == 1
    finally:
        service.close()


def test_the_periodic_sweep_removes_checkpoints_of_jobs_whose_records_are_gone(
    tmp_path: Path, redis_url: str
) -> None:
    settings = Settings(
        users_file=FIXTURES, redis_url=redis_url, artifacts_dir=tmp_path / "a", job_ttl_s=60
    )
    service = build(settings, Accounts.load(FIXTURES))
    checkpoints = Checkpoints(LocalArtifacts(tmp_path / "a"))
    expired, waiting, recent = (str(uuid.uuid4()) for _ in range(3))
    for job_id in (expired, waiting, recent):
        checkpoints.keep(job_id, checkpoints.open(job_id, "token-1"))
    # The waiting job, preempted long ago, still has its record: its next run resumes from it.
    service.recorder.redis.hset(job_key(waiting), "status", "PENDING")
    kept_s = settings.job_ttl_s + settings.max_long_s + settings.timeout_grace_s
    for job_id, age_s in [(expired, kept_s + 60), (waiting, kept_s + 60), (recent, kept_s - 60)]:
        then = time.time() - age_s
        os.utime(tmp_path / "a" / CHECKPOINTS / job_id, (then, then))
    try:
        service.sweep_artifacts()

        assert sorted(path.name for path in (tmp_path / "a" / CHECKPOINTS).iterdir()) == sorted(
            [waiting, recent]
        )
    finally:
        service.close()


def test_beat_runs_the_artifact_sweep_on_a_schedule_of_its_own(redis_url: str) -> None:
    settings = Settings(users_file=FIXTURES, redis_url=redis_url, job_ttl_s=60)
    service = build(settings, Accounts.load(FIXTURES))
    try:
        entry = service.celery.conf.beat_schedule[SWEEP_TASK]
        assert entry == {"task": SWEEP_TASK, "schedule": 60, "options": {"queue": RECLAIM_QUEUE}}
        assert SWEEP_TASK in service.celery.tasks
    finally:
        service.close()


def test_a_failing_store_does_not_stop_the_periodic_sweep(
    redis_url: str, moto_url: str, s3_env: None, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(
        users_file=FIXTURES,
        redis_url=redis_url,
        artifacts_url="s3://no-such-bucket/p",
        artifacts_endpoint_url=moto_url,
    )
    service = build(settings, Accounts.load(FIXTURES))
    try:
        assert service.sweep_artifacts() == 0  # no raise: the failure is logged
        assert service.sweep_artifacts(now=True) == 0
        assert "NoSuchBucket" in caplog.text
    finally:
        service.close()
