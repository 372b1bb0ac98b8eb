"""Archives built for the tests, member by member, as a hostile client could write them."""

from __future__ import annotations

import io
import tarfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Entry:
    """One member to write: its name, its type (tarfile's), its data, its mode, its link."""

    name: str
    kind: bytes = tarfile.REGTYPE
    data: bytes = b""
    mode: int = 0o644
    link: str = ""


def build(path: Path, entries: list[Entry]) -> Path:
    """A .tar.gz at `path` holding these members, in order."""
    with tarfile.open(path, "w:gz") as archive:
        for entry in entries:
            info = tarfile.TarInfo(entry.name)
            info.type = entry.kind
            info.mode = entry.mode
            info.linkname = entry.link
            if entry.kind == tarfile.REGTYPE:
                info.size = len(entry.data)
                archive.addfile(info, io.BytesIO(entry.data))
            else:
                archive.addfile(info)
    return path


def project(path: Path, files: dict[str, bytes]) -> Path:
    """A plain project: each file, 0644."""
    return build(path, [Entry(name, data=data) for name, data in files.items()])


#: Members a project may not hold, each beside a file `ok.py`, and the words its refusal says.
BAD_MEMBERS = [
    (Entry("/etc/passwd", data=b"x"), "not a relative name"),
    (Entry("src/../../escape.py", data=b"x"), "'..'"),
    (Entry("link.py", tarfile.SYMTYPE, link="/etc/passwd"), "a link"),
    (Entry("hard.py", tarfile.LNKTYPE, link="ok.py"), "a link"),
    (Entry("tty", tarfile.CHRTYPE), "a device"),
    (Entry("disk", tarfile.BLKTYPE), "a device"),
    (Entry("pipe", tarfile.FIFOTYPE), "fifo"),
    (Entry("ok.py", data=b"again"), "a duplicate name"),
    (Entry("./ok.py", data=b"again"), "a duplicate name"),  # the same name, spelt otherwise
    (Entry("ok.py/inner.py", data=b"x"), "'ok.py', a file"),
    (Entry("back\\slash.py", data=b"x"), "not a relative name"),
]
