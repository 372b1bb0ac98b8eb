"""`fairgpu artifacts ID [--download DIR]`: the files a job left, and fetching them.

A name comes from the server, so it is never trusted with the file system: only a relative name
of plain parts becomes a path, DIR/<name>, and only if its folder, once made, still lies inside
DIR (a link already in DIR could lead out). Each file is written to a temporary file beside it,
checked against the listed size and SHA-256, and only then renamed into place: a broken or
altered download never leaves a file under the artifact's name.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path, PurePath
from typing import Annotated

import typer

from app.client.errors import FAILED, session
from app.client.http import Client
from app.client.options import JsonOption, KeyOption, TaskId, UrlOption
from app.client.render import artifacts_table, out
from app.client.transport import DEFAULT_URL, RequestError, one_line
from app.client.words import clean, size
from app.models import Artifact, Status, TaskStatus

#: The artifacts a download saved, each with the path it was saved to.
Saved = list[tuple[Artifact, Path]]


def artifacts(
    task_id: TaskId,
    download: Annotated[
        Path | None,
        typer.Option(
            metavar="DIR", file_okay=False, help="fetch every artifact into DIR (made if missing)"
        ),
    ] = None,
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """List the files a job left (name, size, SHA-256), or fetch them with --download DIR.

    Each file is checked against its SHA-256; a name that would leave DIR is refused."""
    with session(url, key) as client:
        state = client.status(task_id)
        found = (state.result.artifacts if state.result else None) or []
        if download is None:
            _list(state, found, as_json)
            return
        saved, problems = fetch_all(client, task_id, found, download)
    if as_json:
        typer.echo(json.dumps([{**a.model_dump(), "path": str(path)} for a, path in saved]))
    else:
        say_saved(state, saved, download, failed=bool(problems))
    for problem in problems:
        typer.echo(f"fairgpu: {one_line(problem)}", err=True)
    if problems:
        raise typer.Exit(FAILED)


def _list(state: TaskStatus, found: list[Artifact], as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps([a.model_dump() for a in found]))
    elif found:
        console = out()
        console.print(artifacts_table(found, console.width))
    else:
        out().print(no_artifacts(state))


def no_artifacts(state: TaskStatus) -> str:
    """Why a job lists no artifacts."""
    if state.status is Status.SUCCESS:
        return "No artifacts: the job left no files."
    if state.status.terminal:
        return f"No artifacts: the job ended {state.status.value}; only a success keeps its files."
    return f"No artifacts yet: the job is {state.status.value}; they are listed once it succeeds."


def say_saved(state: TaskStatus, saved: Saved, folder: Path, *, failed: bool) -> None:
    console = out()
    if not saved and not failed:
        console.print(no_artifacts(state))
    for artifact, path in saved:
        console.print(f"saved {path} ({size(artifact.size)})", soft_wrap=True)
    if saved:
        files = "1 file" if len(saved) == 1 else f"{len(saved)} files"
        console.print(f"Downloaded {files} to {folder}, each checked against its SHA-256.")


def fetch_all(
    client: Client, task_id: str, found: list[Artifact], folder: Path
) -> tuple[Saved, list[str]]:
    """Fetch each artifact into folder: what was saved (the listing, and where), and what went
    wrong (one line each; the other files are fetched all the same)."""
    saved: Saved = []
    problems: list[str] = []
    for artifact in found:
        try:
            path = fetch(client, task_id, artifact, folder)
        except (RequestError, OSError, ValueError) as exc:
            problems.append(f"{clean(artifact.name)!r}: {exc}")
            continue
        saved.append((artifact, path))
    return saved, problems


def fetch(client: Client, task_id: str, artifact: Artifact, folder: Path) -> Path:
    """Download one artifact to its place under folder, checked; the path it was saved to."""
    target = local_path(folder, artifact.name)
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.parent.resolve().is_relative_to(folder.resolve()):
        raise ValueError(f"its folder leads out of {folder} (through a link)")
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=".fairgpu-", suffix=".part")
    try:
        with os.fdopen(handle, "wb") as sink:
            got = client.download(task_id, artifact.name, sink)
        if got.size != artifact.size or got.sha256 != artifact.sha256.lower():
            raise ValueError(
                f"the download does not match its listing: {got.size} bytes with SHA-256 "
                f"{got.sha256}, not {artifact.size} bytes with {artifact.sha256}; not saved"
            )
        os.replace(temporary, target)  # replaces a link itself, never what it points to
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target


def local_path(folder: Path, name: str) -> Path:
    """Where the artifact `name` goes under folder; ValueError for a name that is not a
    relative path of plain parts (absolute, `..`, `.`, empty parts, a backslash, a control
    character, a drive)."""
    parts = name.split("/")
    if not name or "\\" in name or any(part in ("", ".", "..") for part in parts):
        raise ValueError("not a plain relative name; refused, nothing written")
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in name):
        raise ValueError("control characters in its name; refused, nothing written")
    relative = PurePath(*parts)
    if relative.is_absolute() or relative.anchor:
        raise ValueError("an absolute name; refused, nothing written")
    return folder / relative
