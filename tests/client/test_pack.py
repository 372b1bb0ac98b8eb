"""Packing a project folder for `fairgpu run` (app/client/pack.py): what is left out, the size
bound, and an archive that is the same for the same files and that the standard library's
strictest extraction filter takes."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from app.client.pack import MAX_MEMBERS, MAX_UNPACKED_BYTES, Packed, PackError, pack
from app.code.archive import Bounds, unpack


def write(root: Path, name: str, text: str | bytes = "x") -> Path:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def names(packed: Packed) -> set[str]:
    with tarfile.open(packed.path, "r:gz") as tar:
        return {m.name for m in tar.getmembers() if m.isfile()}


@pytest.fixture
def out(tmp_path: Path) -> Path:
    """Where the archives go, apart from the project."""
    (tmp_path / "out").mkdir()
    return tmp_path / "out"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    return root


def test_what_gitignore_files_leave_out_is_left_out_nested_ones_and_negations_too(
    project: Path, out: Path
) -> None:
    write(project, ".gitignore", "*.log\nbuild/\n!keep.log\n# a comment\n")
    for name in ("train.py", "x.log", "keep.log", "build/out.bin", "y.tmp", "deep/build/z"):
        write(project, name)
    write(project, "sub/.gitignore", "data/\n!x.log\n*.tmp\n/only-here\n")
    for name in ("sub/x.log", "sub/y.tmp", "sub/data/big", "sub/code.py", "sub/only-here"):
        write(project, name)
    write(project, "sub/inner/only-here")  # anchored to sub/: not this one
    packed = pack(project, into=out)
    assert names(packed) == {
        ".gitignore",
        "train.py",
        "keep.log",  # `!` keeps it
        "y.tmp",  # sub's rule is sub's alone
        "sub/.gitignore",
        "sub/x.log",  # the deeper file's `!` wins over the root's *.log
        "sub/code.py",
        "sub/inner/only-here",
    }
    assert packed.files == 8
    # x.log, build/, deep/build/, sub/y.tmp, sub/data/, sub/only-here
    assert "6 paths left out by .gitignore" in packed.notes


def git_keeps(project: Path) -> set[str]:
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--others", "--exclude-standard"],
        cwd=project, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return set(listed.stdout.split("\0")) - {""}


GIT_CASES = {
    "folders, anchors, ** and negations": (
        {
            ".gitignore": "*.o\n/dist\nlogs/**\n!logs/keep/\n!logs/keep/**\n"
            "doc/**/*.tmp\n\\#hash\n",
            "src/.gitignore": "gen*\n!gen_keep.c\nsub/\n",
            "src/lib/.gitignore": "!*.o\n",
        },
        "a.o dist/x src/dist/y logs/a logs/keep/b logs/keep/c/d doc/x.tmp doc/a/b/y.tmp "
        "doc/z.md #hash src/gen1.c src/gen_keep.c src/sub/q src/lib/sub/r src/lib/m.o "
        "src/lib/gen2 src/main.c",
    ),
    "a folder kept by a deeper file does not keep the outer file's patterns off its files": (
        {".gitignore": "*.log\n", "sub/.gitignore": "!logs/\n"},
        "sub/logs/a.log sub/logs/b.txt sub/c.log d.txt",
    ),
    "a whitelist": (
        {".gitignore": "*\n!*/\n!*.py\n!.gitignore\n"},
        "a.py b.txt pkg/c.py pkg/d.bin pkg/deep/e.py",
    ),
    "a parent left out cannot be brought back": (
        {".gitignore": "build/\n!build/keep\n"},
        "build/keep build/other main.py",
    ),
    "lines that are no pattern": (
        {".gitignore": "\\\n[\n   \n/\n*.tmp   \n"},
        "a.tmp b.py",
    ),
    "folders whose names are glob characters": (
        {"we[ird]/.gitignore": "*.tmp\n/top\n", "a*b/.gitignore": "x\n"},
        "we[ird]/a.tmp we[ird]/top we[ird]/s/top we[ird]/k.py a*b/x a*b/y wd/a.tmp",
    ),
}


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
@pytest.mark.parametrize("case", list(GIT_CASES))
def test_what_is_packed_is_what_git_would_keep(project: Path, out: Path, case: str) -> None:
    rules, files = GIT_CASES[case]
    for name, text in rules.items():
        write(project, name, text)
    for name in files.split():
        write(project, name)
    assert names(pack(project, into=out)) == git_keeps(project)


def test_every_git_folder_or_file_is_left_out(project: Path, out: Path) -> None:
    write(project, ".git/config")
    write(project, ".git/objects/ab/cdef")
    write(project, "vendored/.git", "gitdir: ../.git/modules/vendored\n")
    write(project, "vendored/lib.py")
    packed = pack(project, into=out)
    assert names(packed) == {"vendored/lib.py"}


def test_env_files_are_named_and_left_out_unless_asked(project: Path, out: Path) -> None:
    write(project, ".gitignore", ".env\n")
    for name in (".env", ".env.local", "conf/.env.prod", ".envrc", "main.py"):
        write(project, name, "SECRET=1\n")
    packed = pack(project, into=out)
    assert names(packed) == {".gitignore", ".envrc", "main.py"}
    noted = " ".join(packed.notes)
    for name in (".env", ".env.local", "conf/.env.prod"):
        assert f"{name}: an env file, left out" in noted
    asked = pack(project, include_env=True, into=out)  # even the one .gitignore leaves out
    envs = {".env", ".env.local", "conf/.env.prod"}
    assert names(asked) == {".gitignore", ".envrc", "main.py", *envs}
    assert not any("env file" in note for note in asked.notes)


def test_a_project_too_big_is_refused_while_packing_with_its_biggest_files_named(
    project: Path, out: Path
) -> None:
    write(project, "weights/model.bin", os.urandom(300_000))  # random: gzip cannot shrink it
    write(project, "data.npy", os.urandom(150_000))
    write(project, "train.py", "print('hi')\n")
    with pytest.raises(PackError) as refused:
        pack(project, max_bytes=100_000, into=out)
    message = str(refused.value)
    assert "\n" not in message
    assert "more than 97.7 KiB" in message
    assert "3 files, 439.5 KiB before compression" in message
    assert "the biggest: weights/model.bin (293.0 KiB), data.npy (146.5 KiB), train.py" in message
    assert ".gitignore" in message
    assert list(out.iterdir()) == []  # no partial archive left behind
    write(project, ".gitignore", "weights/\n*.npy\n")
    packed = pack(project, max_bytes=100_000, into=out)  # as the message said to
    assert names(packed) == {".gitignore", "train.py"}


def test_a_project_past_the_servers_unpacked_bound_is_refused_before_packing(
    project: Path, out: Path
) -> None:
    write(project, "zeros.bin", bytes(200_000))  # packs small, unpacks big
    write(project, "train.py", "print('hi')\n")
    with pytest.raises(PackError) as refused:
        pack(project, max_unpacked_bytes=100_000, into=out)
    assert str(refused.value).startswith(
        "the project holds more than 97.7 KiB of files, the most the server takes "
        "(2 files, 195.3 KiB before compression); the biggest: zeros.bin (195.3 KiB), train.py"
    )
    assert list(out.iterdir()) == []


def test_a_project_past_the_servers_member_bound_names_its_fullest_folders(
    project: Path, out: Path
) -> None:
    for i in range(6):
        write(project, f"node_modules/m{i}.js")
    write(project, "cache/a")
    write(project, "train.py")
    with pytest.raises(PackError) as refused:
        pack(project, max_members=9, into=out)  # 8 files and 2 folders
    assert str(refused.value) == (
        "the project has 10 files and folders, more than the 9 the server takes; the fullest: "
        "node_modules (7), cache (2), train.py (1). Add what the job does not need to .gitignore"
    )
    assert list(out.iterdir()) == []
    assert pack(project, max_members=10, into=out).files == 8


def test_the_same_files_give_the_same_archive_whatever_their_times_owners_and_modes(
    project: Path, out: Path
) -> None:
    write(project, "b.py", "b = 2\n")
    write(project, "a/c.py", "c = 3\n")
    write(project, "run.sh", "#!/bin/sh\n").chmod(0o755)
    first = pack(project, into=out)
    again = pack(project, into=out)
    assert first.path != again.path
    assert (first.sha256, first.bytes) == (again.sha256, again.bytes)
    os.utime(project / "b.py", (1_000_000, 1_000_000))
    (project / "a" / "c.py").chmod(0o600)
    (project / "a").chmod(0o700)
    assert pack(project, into=out).sha256 == first.sha256
    write(project, "b.py", "b = 3\n")
    assert pack(project, into=out).sha256 != first.sha256
    assert first.sha256 == hashlib.sha256(first.path.read_bytes()).hexdigest()
    assert first.bytes == first.path.stat().st_size


def test_links_and_special_files_are_left_out_and_named(project: Path, out: Path) -> None:
    write(project, "real.py")
    write(project, "pkg/mod.py")
    (project / "to-file").symlink_to("real.py")
    (project / "to-dir").symlink_to("pkg")
    (project / "outside").symlink_to("/etc/hostname")
    (project / "dangling").symlink_to("nowhere")
    os.mkfifo(project / "pipe")
    packed = pack(project, into=out)
    assert names(packed) == {"real.py", "pkg/mod.py"}
    noted = " ".join(packed.notes)
    for name in ("to-file", "to-dir", "outside", "dangling"):
        assert f"{name}: a link, left out" in noted
    assert "pipe: not a regular file" in noted


def test_the_archive_unpacks_under_the_strictest_filter_as_the_project_was(
    project: Path, out: Path, tmp_path: Path
) -> None:
    write(project, "train.py", "print('train')\n")
    write(project, "data/é ñ.txt", "unicode\n")
    write(project, "a/" * 40 + "deep.txt", "long name\n")  # past ustar's 100 bytes
    write(project, "run.sh", "#!/bin/sh\n").chmod(0o750)
    (project / "empty").mkdir()
    packed = pack(project, into=out)
    with tarfile.open(packed.path, "r:gz") as tar:
        members = tar.getmembers()
        assert [m.name for m in members] == sorted(m.name for m in members)
        assert all((m.mtime, m.uid, m.gid, m.uname, m.gname) == (0, 0, 0, "", "") for m in members)
        assert all(m.isfile() or m.isdir() for m in members)
        modes = {m.name: m.mode for m in members}
        tar.extractall(tmp_path / "unpacked", filter="data")  # warnings are errors in the suite
    assert (modes["run.sh"], modes["train.py"], modes["empty"]) == (0o755, 0o644, 0o755)
    unpacked = tmp_path / "unpacked"
    for path in project.rglob("*"):
        twin = unpacked / path.relative_to(project)
        assert twin.is_dir() if path.is_dir() else twin.read_bytes() == path.read_bytes()
    assert packed.files == 4


def test_the_server_takes_the_archive_and_unpacks_it_as_the_project_was(
    project: Path, out: Path, tmp_path: Path
) -> None:
    write(project, "train.py", "print('train')\n")
    write(project, "data/é ñ.txt", "unicode\n")
    write(project, "a/" * 40 + "deep.txt", "long name\n")
    write(project, "run.sh", "#!/bin/sh\n").chmod(0o700)
    (project / "empty").mkdir()
    packed = pack(project, into=out)
    bounds = Bounds(max_members=MAX_MEMBERS, max_unpacked_bytes=MAX_UNPACKED_BYTES)
    members = unpack(packed.path, tmp_path / "unpacked", bounds)
    assert sum(not m.folder for m in members) == packed.files == 4
    assert [m.name for m in members if m.executable and not m.folder] == ["run.sh"]
    for path in project.rglob("*"):
        twin = tmp_path / "unpacked" / path.relative_to(project)
        assert twin.is_dir() if path.is_dir() else twin.read_bytes() == path.read_bytes()


def test_packing_what_is_not_a_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PackError, match="is not a folder"):
        pack(tmp_path / "missing")


def test_an_unreadable_file_is_refused_by_name(project: Path, out: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads any file")
    write(project, "secret.key").chmod(0)
    with pytest.raises(PackError, match=r"cannot read secret\.key: Permission denied"):
        pack(project, into=out)
    assert list(out.iterdir()) == []


def test_discard_removes_the_archive(project: Path, out: Path) -> None:
    write(project, "a.py")
    packed = pack(project, into=out)
    packed.discard()
    packed.discard()  # twice is harmless
    assert list(out.iterdir()) == []
