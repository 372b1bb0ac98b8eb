"""A project's archive: each kind of member a project may not hold is refused by its name, and
nothing of it is written; modes come out normalised; the bounds on members and bytes hold."""

from __future__ import annotations

import gzip
import stat
import tarfile
from pathlib import Path

import pytest

from app.code.archive import BadArchiveError, Bounds, check, unpack
from tests.code.archives import BAD_MEMBERS, Entry, build, project

BOUNDS = Bounds(max_members=100, max_unpacked_bytes=1 << 20)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_project_unpacks_with_its_modes_normalised(tmp_path: Path) -> None:
    archive = build(
        tmp_path / "p.tar.gz",
        [
            Entry("./", tarfile.DIRTYPE, mode=0o700),
            Entry("./src", tarfile.DIRTYPE, mode=0o777),
            Entry("./src/train.py", data=b"print(1)\n", mode=0o600),
            Entry("run.sh", data=b"#!/bin/sh\n", mode=0o4710),  # setuid and owner-only: gone
            Entry("deep/er/file.txt", data=b"x", mode=0o666),  # its folders never named
        ],
    )
    target = tmp_path / "out"
    names = [member.name for member in unpack(archive, target, BOUNDS)]
    assert names == [".", "src", "src/train.py", "run.sh", "deep/er/file.txt"]
    assert (target / "src" / "train.py").read_bytes() == b"print(1)\n"
    assert mode(target / "src" / "train.py") == 0o644
    assert mode(target / "run.sh") == 0o755
    assert mode(target / "deep" / "er" / "file.txt") == 0o644
    assert {mode(p) for p in (target, target / "src", target / "deep", target / "deep/er")} == {
        0o755
    }


@pytest.mark.parametrize(("entry", "says"), BAD_MEMBERS)
def test_each_member_a_project_may_not_hold_is_refused_by_name(
    tmp_path: Path, entry: Entry, says: str
) -> None:
    archive = build(tmp_path / "bad.tar.gz", [Entry("ok.py", data=b"fine"), entry])
    target = tmp_path / "out"
    with pytest.raises(BadArchiveError) as refused:
        unpack(archive, target, BOUNDS)
    assert repr(entry.name) in str(refused.value)
    assert says in str(refused.value)
    assert not target.exists()  # checked whole before anything is written


def test_the_bounds_on_members_and_unpacked_bytes(tmp_path: Path) -> None:
    many = project(tmp_path / "many.tar.gz", {f"f{i}.py": b"" for i in range(4)})
    check(many, Bounds(max_members=4, max_unpacked_bytes=10))
    with pytest.raises(BadArchiveError, match="more than 3 members"):
        check(many, Bounds(max_members=3, max_unpacked_bytes=10))
    big = project(tmp_path / "big.tar.gz", {"a.bin": b"a" * 600, "b.bin": b"b" * 600})
    check(big, Bounds(max_members=4, max_unpacked_bytes=1200))
    with pytest.raises(BadArchiveError, match="more than 1199 bytes unpacked"):
        check(big, Bounds(max_members=4, max_unpacked_bytes=1199))


def test_a_gzip_bomb_stops_inflating_at_the_bounds(tmp_path: Path) -> None:
    # A long name's header is read whole into memory by tarfile: 4 MiB of it, a few KiB packed.
    bomb = tmp_path / "bomb.tar.gz"
    with tarfile.open(bomb, "w:gz", format=tarfile.GNU_FORMAT) as archive:
        archive.addfile(tarfile.TarInfo("a" * (4 << 20)))
    assert bomb.stat().st_size < 64 * 1024
    with pytest.raises(BadArchiveError, match="inflates to more than its bounds allow"):
        check(bomb, Bounds(max_members=1, max_unpacked_bytes=1))


@pytest.mark.parametrize(
    "content",
    # mtime=0: a test's id (its bytes) must be the same on every xdist worker that collects it
    [b"", b"not gzip at all", gzip.compress(b"not a tar" * 99, mtime=0)],
    ids=["empty", "not gzip", "gzip of no tar"],
)
def test_what_is_no_tar_gz_is_refused(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "x.tar.gz"
    path.write_bytes(content)
    with pytest.raises(BadArchiveError, match=r"not a readable \.tar\.gz"):
        check(path, BOUNDS)
