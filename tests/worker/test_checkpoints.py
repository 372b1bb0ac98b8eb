"""A job's checkpoint across its runs, in both stores: the local folder used in place, and S3
(moto's server mode, a real HTTP endpoint) through a temporary folder. Each test plays the
runner: open() at a run's start, files written as a job would, keep() at its end."""

from __future__ import annotations

import os
import secrets
import shutil
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from app.artifacts import CHECKPOINTS, ArtifactStore, LocalArtifacts, S3Artifacts
from app.settings import Settings
from app.worker.checkpoints import (
    CheckpointError,
    Checkpoints,
    CheckpointTooBigError,
    open_checkpoints,
)
from tests.s3_server import new_bucket
from tests.support import FIXTURES

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


def files(folder: Path) -> dict[str, bytes]:
    """Every regular file under the folder, by its name relative to it."""
    return {
        path.relative_to(folder).as_posix(): path.read_bytes()
        for path in folder.rglob("*")
        if path.is_file() and not path.is_symlink()
    }


def token() -> str:
    """A fresh lease token, as the fair queue makes them."""
    return secrets.token_hex(16)


def write(folder: Path, files: dict[str, bytes]) -> None:
    """Write files as a job would (an empty value deletes the file)."""
    for name, content in files.items():
        path = folder / name
        if content:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
        else:
            path.unlink()


def run(checkpoints: Checkpoints, job_id: str, written: dict[str, bytes]) -> dict[str, bytes]:
    """One run: what it found in its checkpoint, having written `written` there before it
    ended (an empty value deletes the file)."""
    folder = checkpoints.open(job_id, token())
    found = files(folder)
    write(folder, written)
    checkpoints.keep(job_id, folder)
    return found


@pytest.fixture
def s3(s3_client: S3Client) -> S3Artifacts:
    return S3Artifacts(new_bucket(s3_client), "runs/a", client=s3_client)


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ArtifactStore:
    if request.param == "local":
        return LocalArtifacts(tmp_path / "artifacts")
    s3_store: S3Artifacts = request.getfixturevalue("s3")
    return s3_store


@pytest.fixture
def checkpoints(store: ArtifactStore) -> Checkpoints:
    return Checkpoints(store)


# -- both stores alike ----------------------------------------------------------------------------
def test_a_first_run_finds_an_empty_folder(checkpoints: Checkpoints) -> None:
    folder = checkpoints.open(str(uuid.uuid4()), token())

    assert folder.is_dir()
    assert list(folder.iterdir()) == []


def test_the_next_run_finds_exactly_what_the_last_one_left(checkpoints: Checkpoints) -> None:
    job = str(uuid.uuid4())
    left = {"model.pt": os.urandom(3000), "optim/state.bin": b"adam", "optim/deep/er.txt": b"x"}

    assert run(checkpoints, job, left) == {}

    assert run(checkpoints, job, {}) == left


def test_a_run_that_deleted_and_changed_files_is_seen_so(checkpoints: Checkpoints) -> None:
    job = str(uuid.uuid4())
    run(checkpoints, job, {"a.txt": b"a", "d/b.txt": b"b", "d/c.txt": b"c"})

    run(checkpoints, job, {"a.txt": b"", "d/b.txt": b"b2", "e.txt": b"e"})

    assert run(checkpoints, job, {}) == {"d/b.txt": b"b2", "d/c.txt": b"c", "e.txt": b"e"}


def test_forget_removes_the_whole_checkpoint_and_may_be_repeated(
    checkpoints: Checkpoints,
) -> None:
    job = str(uuid.uuid4())
    run(checkpoints, job, {"a.txt": b"a", "d/b.txt": b"b"})

    checkpoints.forget(job)
    checkpoints.forget(job)

    assert run(checkpoints, job, {}) == {}


def test_two_jobs_checkpoints_never_mix(checkpoints: Checkpoints) -> None:
    one, two = str(uuid.uuid4()), str(uuid.uuid4())
    run(checkpoints, one, {"a.txt": b"one", "only-one.txt": b"1"})
    run(checkpoints, two, {"a.txt": b"two"})

    checkpoints.forget(two)

    assert run(checkpoints, one, {}) == {"a.txt": b"one", "only-one.txt": b"1"}
    assert run(checkpoints, two, {}) == {}


def test_a_link_out_of_the_folder_is_refused_and_the_rest_kept(
    checkpoints: Checkpoints, tmp_path: Path
) -> None:
    job = str(uuid.uuid4())
    secret = tmp_path / "secret"
    secret.write_bytes(b"secret")
    folder = checkpoints.open(job, token())
    (folder / "d").mkdir()
    (folder / "d" / "kept.txt").write_bytes(b"kept")
    (folder / "out").symlink_to(secret)
    (folder / "d" / "up").symlink_to(Path("..") / ".." / "..")
    os.mkfifo(folder / "fifo")

    with pytest.raises(CheckpointError) as refused:
        checkpoints.keep(job, folder)

    assert all(f"'{name}'" in str(refused.value) for name in ("out", "d/up", "fifo"))

    assert run(checkpoints, job, {}) == {"d/kept.txt": b"kept"}
    assert secret.read_bytes() == b"secret"  # the link went, not what it led to


def test_a_name_an_artifact_could_not_have_is_refused(checkpoints: Checkpoints) -> None:
    job = str(uuid.uuid4())
    folder = checkpoints.open(job, token())
    (folder / "a\nb").write_bytes(b"x")
    (folder / "fine.txt").write_bytes(b"y")

    with pytest.raises(CheckpointError, match="refused"):
        checkpoints.keep(job, folder)

    assert run(checkpoints, job, {}) == {"fine.txt": b"y"}


def test_checkpoints_are_none_of_the_job_s_artifacts(
    store: ArtifactStore, checkpoints: Checkpoints
) -> None:
    """Neither listed, nor swept or deleted with them: they go with the job's record alone."""
    job = str(uuid.uuid4())
    run(checkpoints, job, {"model.pt": b"m"})

    assert store.names(job) == []
    with pytest.raises(FileNotFoundError):
        store.open(job, "model.pt")
    store.delete(job)
    assert store.sweep(-60) == 0

    assert run(checkpoints, job, {}) == {"model.pt": b"m"}


def test_the_sweep_removes_old_checkpoints_of_jobs_that_are_gone(
    store: ArtifactStore, checkpoints: Checkpoints
) -> None:
    gone, waiting = str(uuid.uuid4()), str(uuid.uuid4())
    for job_id in (gone, waiting):
        run(checkpoints, job_id, {"a.txt": b"a"})
    area = store.within(CHECKPOINTS)

    assert area.sweep(3600, alive=lambda job_id: False) == 0  # not old yet
    assert area.sweep(-60, alive=lambda job_id: job_id == waiting) == 1

    assert run(checkpoints, gone, {}) == {}
    assert run(checkpoints, waiting, {}) == {"a.txt": b"a"}


def test_a_run_that_leaves_more_than_max_checkpoint_bytes_fails_and_keeps_nothing(
    store: ArtifactStore,
) -> None:
    checkpoints = Checkpoints(store, max_bytes=100)
    job = str(uuid.uuid4())
    run(checkpoints, job, {"a.txt": b"a" * 60})
    folder = checkpoints.open(job, token())
    write(folder, {"b.txt": b"b" * 50})  # 110 bytes in all

    with pytest.raises(CheckpointTooBigError, match="MAX_CHECKPOINT_BYTES"):
        checkpoints.keep(job, folder)

    assert not folder.exists()
    assert run(checkpoints, job, {}) == {"a.txt": b"a" * 60}  # the last copy kept, not the big one


# -- each store's own ----------------------------------------------------------------------------
def test_each_local_run_writes_its_own_copy_named_by_its_lease_token(tmp_path: Path) -> None:
    checkpoints = open_checkpoints(Settings(users_file=FIXTURES, artifacts_dir=tmp_path))
    job = str(uuid.uuid4())

    folder = checkpoints.open(job, "token-1")
    (folder / "a.txt").write_bytes(b"a")

    assert folder == (tmp_path / CHECKPOINTS / job / "1-token-1").absolute()
    again = checkpoints.open(job, "token-2")  # a run killed before keep() left its files there
    assert again == (tmp_path / CHECKPOINTS / job / "2-token-2").absolute()
    assert files(again) == {"a.txt": b"a"}


def test_a_stale_run_s_writes_never_reach_its_rerun_s_checkpoint(tmp_path: Path) -> None:
    """A run lost with its worker (frozen: never kept) goes on writing its own copy; its rerun
    started from what it had written, and reads only its own copy, and the next run starts from
    the rerun's."""
    checkpoints = Checkpoints(LocalArtifacts(tmp_path / "artifacts"))
    job = str(uuid.uuid4())
    stale = checkpoints.open(job, token())
    write(stale, {"step.txt": b"10", "model.pt": b"m10"})

    rerun = checkpoints.open(job, token())
    write(stale, {"step.txt": b"11", "late.txt": b"stale"})  # the stale run, woken
    assert files(rerun) == {"step.txt": b"10", "model.pt": b"m10"}
    write(rerun, {"step.txt": b"20", "model.pt": b"m20"})
    checkpoints.keep(job, rerun)

    assert not stale.exists()  # older than the kept copy: gone
    assert run(checkpoints, job, {}) == {"step.txt": b"20", "model.pt": b"m20"}


def test_no_progress_a_lost_run_checkpointed_is_thrown_away(tmp_path: Path) -> None:
    checkpoints = Checkpoints(LocalArtifacts(tmp_path / "artifacts"))
    job = str(uuid.uuid4())
    run(checkpoints, job, {"step.txt": b"5"})  # a preempted run, kept
    lost = checkpoints.open(job, token())
    write(lost, {"step.txt": b"9"})  # then lost: never kept

    assert run(checkpoints, job, {}) == {"step.txt": b"9"}


def test_a_local_copy_replaced_by_a_link_is_refused_and_passed_over(tmp_path: Path) -> None:
    checkpoints = Checkpoints(LocalArtifacts(tmp_path / "artifacts"))
    job = str(uuid.uuid4())
    run(checkpoints, job, {"a.txt": b"kept"})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_bytes(b"k")
    folder = checkpoints.open(job, token())
    shutil.rmtree(folder)
    folder.symlink_to(elsewhere)

    with pytest.raises(CheckpointError, match="replaced"):
        checkpoints.keep(job, folder)

    assert not folder.is_symlink() and not folder.exists()
    assert files(elsewhere) == {"keep.txt": b"k"}
    assert run(checkpoints, job, {}) == {"a.txt": b"kept"}


def test_s3_keeps_objects_under_the_checkpoints_prefix_and_no_folder(s3: S3Artifacts) -> None:
    checkpoints = Checkpoints(s3)
    job = str(uuid.uuid4())

    folder = checkpoints.open(job, token())
    (folder / "d").mkdir()
    (folder / "d" / "b.txt").write_bytes(b"b")
    checkpoints.keep(job, folder)

    assert not folder.exists()
    listed = s3.client.list_objects_v2(Bucket=s3.bucket)["Contents"]
    assert [o["Key"] for o in listed] == [f"runs/a/{CHECKPOINTS}/{job}/d/b.txt"]
    assert checkpoints.open(job, token()) != folder  # each run has a fresh folder


def test_s3_keeps_nothing_of_a_run_that_removed_its_folder(s3: S3Artifacts) -> None:
    checkpoints = Checkpoints(s3)
    job = str(uuid.uuid4())
    run(checkpoints, job, {"a.txt": b"a"})

    folder = checkpoints.open(job, token())
    (folder / "a.txt").unlink()
    folder.rmdir()
    checkpoints.keep(job, folder)

    assert run(checkpoints, job, {}) == {}


def test_s3_keeps_nothing_of_a_run_that_may_have_lost_its_lease(s3: S3Artifacts) -> None:
    """A stale run that wakes after its rerun began must not overwrite the rerun's checkpoint."""
    checkpoints = Checkpoints(s3)
    job = str(uuid.uuid4())
    run(checkpoints, job, {"a.txt": b"rerun's"})
    folder = checkpoints.open(job, token())
    write(folder, {"a.txt": b"stale", "b.txt": b"stale"})

    checkpoints.keep(job, folder, held=False)

    assert not folder.exists()
    assert run(checkpoints, job, {}) == {"a.txt": b"rerun's"}


def test_an_s3_object_whose_name_leaves_the_folder_is_refused(s3: S3Artifacts) -> None:
    checkpoints = Checkpoints(s3)
    job = str(uuid.uuid4())
    key = f"runs/a/{CHECKPOINTS}/{job}/d/../../escaped.txt"
    s3.client.put_object(Bucket=s3.bucket, Key=key, Body=b"x")

    with pytest.raises(CheckpointError, match="escaped"):
        checkpoints.open(job, token())


def test_the_settings_name_s3_checkpoints(moto_url: str, s3_env: None, s3_client: S3Client) -> None:
    bucket = new_bucket(s3_client)
    settings = Settings(
        users_file=FIXTURES, artifacts_url=f"s3://{bucket}/p", artifacts_endpoint_url=moto_url
    )
    checkpoints = open_checkpoints(settings)
    job = str(uuid.uuid4())

    run(checkpoints, job, {"a.txt": b"a"})

    assert isinstance(checkpoints.area, S3Artifacts)
    assert checkpoints.area.prefix == f"p/{CHECKPOINTS}/"
    assert run(checkpoints, job, {}) == {"a.txt": b"a"}
