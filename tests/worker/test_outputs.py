"""A job's output folder becomes its artifacts without following a link at any level, even when
a process of the job's swaps a file or a folder for a link between the listing and the read: the
steps of store_outputs are called one by one here, and the swap made between them."""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.artifacts import LocalArtifacts
from app.worker.outputs import (
    Artifact,
    ArtifactsError,
    listing,
    open_file,
    opened_folder,
    store_listed,
    store_outputs,
)

SECRET = b"root:x:0:0:the worker's own secret"
CAP = 1_000_000


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    made = tmp_path / "out"
    (made / "plots").mkdir(parents=True)
    (made / "out.txt").write_bytes(b"result")
    (made / "plots" / "loss.csv").write_bytes(b"1,0.5")
    return made


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A file the job must not get stored, and a folder holding one under the job's names."""
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "loss.csv").write_bytes(SECRET)
    (tmp_path / "secret").write_bytes(SECRET)
    return tmp_path / "secret"


@pytest.fixture
def store(tmp_path: Path) -> LocalArtifacts:
    return LocalArtifacts(tmp_path / "artifacts")


@pytest.fixture
def root(folder: Path) -> Iterator[int]:
    with opened_folder(folder) as fd:
        assert fd is not None
        yield fd


def stored_bytes(store: LocalArtifacts) -> list[bytes]:
    return [path.read_bytes() for path in store.root.rglob("*") if path.is_file()]


def test_the_files_are_stored_with_the_size_and_hash_of_what_was_stored(
    folder: Path, store: LocalArtifacts
) -> None:
    job = str(uuid.uuid4())

    stored = store_outputs(store, job, folder, CAP)

    assert stored == [
        Artifact("out.txt", 6, hashlib.sha256(b"result").hexdigest()),
        Artifact("plots/loss.csv", 5, hashlib.sha256(b"1,0.5").hexdigest()),
    ]
    assert (store.root / job / "plots" / "loss.csv").read_bytes() == b"1,0.5"


def test_a_file_swapped_for_a_link_after_the_listing_is_not_read(
    folder: Path, root: int, secret: Path, store: LocalArtifacts
) -> None:
    job = str(uuid.uuid4())
    listed = listing(root)
    assert [name for name, _ in listed] == ["out.txt", "plots/loss.csv"]

    (folder / "out.txt").unlink()
    (folder / "out.txt").symlink_to(secret)
    stored = store_listed(store, job, root, listed, CAP)

    assert [artifact.name for artifact in stored] == ["plots/loss.csv"]
    assert not (store.root / job / "out.txt").exists()
    assert SECRET not in stored_bytes(store)


def test_a_folder_swapped_for_a_link_after_the_listing_is_not_followed(
    folder: Path, root: int, secret: Path, store: LocalArtifacts
) -> None:
    job = str(uuid.uuid4())
    listed = listing(root)

    (folder / "plots").rename(folder.parent / "moved")
    (folder / "plots").symlink_to(secret.parent / "elsewhere", target_is_directory=True)
    stored = store_listed(store, job, root, listed, CAP)

    assert [artifact.name for artifact in stored] == ["out.txt"]
    assert open_file(root, "plots/loss.csv") is None
    assert SECRET not in stored_bytes(store)


def test_links_in_the_folder_are_neither_followed_nor_listed(
    folder: Path, root: int, secret: Path
) -> None:
    (folder / "passwd").symlink_to(secret)
    (folder / "etc").symlink_to(secret.parent / "elsewhere", target_is_directory=True)

    assert [name for name, _ in listing(root)] == ["out.txt", "plots/loss.csv"]
    assert open_file(root, "passwd") is None
    assert open_file(root, "etc/loss.csv") is None


def test_a_fifo_put_in_a_files_place_is_skipped_without_waiting_for_a_writer(
    folder: Path, root: int
) -> None:
    (folder / "out.txt").unlink()
    os.mkfifo(folder / "out.txt")

    assert open_file(root, "out.txt") is None


def test_an_output_folder_replaced_by_a_link_keeps_nothing(
    tmp_path: Path, secret: Path, store: LocalArtifacts
) -> None:
    linked = tmp_path / "linked"
    linked.symlink_to(secret.parent / "elsewhere", target_is_directory=True)

    with pytest.raises(ArtifactsError, match="replaced by a link"):
        store_outputs(store, str(uuid.uuid4()), linked, CAP)
    assert stored_bytes(store) == []


def test_a_missing_output_folder_keeps_nothing(tmp_path: Path, store: LocalArtifacts) -> None:
    assert store_outputs(store, str(uuid.uuid4()), tmp_path / "none", CAP) == []


def test_a_file_that_grows_past_the_cap_after_the_listing_stores_none(
    folder: Path, root: int, store: LocalArtifacts
) -> None:
    job = str(uuid.uuid4())
    listed = listing(root)
    cap = sum(size for _, size in listed)  # just enough for what was listed

    with (folder / "plots" / "loss.csv").open("ab") as grown:
        grown.write(b",0.4")
    with pytest.raises(ArtifactsError, match="grew past"):
        store_listed(store, job, root, listed, cap)

    assert not (store.root / job).exists()
