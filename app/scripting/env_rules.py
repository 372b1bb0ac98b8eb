"""What a script's environment is built from: the project's kind, what it may not say, its key.

A project folder is one of three kinds:

- ``lock``: ``uv.lock`` beside ``pyproject.toml``; installed exactly as locked with
  ``uv sync --frozen --no-install-project`` on the base's interpreter, none of the base's
  packages visible (a lock is exact).
- ``requirements``: ``requirements.txt``; a fresh environment on the base's interpreter that
  also sees the base's packages, then ``uv pip install -r``.
- ``base``: neither; the base environment itself (no build), or with no base an empty
  environment on a bare interpreter, so that no interpreter's own site-packages leak in.

Packages come only from the operator's index (uv's settings on the worker): a project's own
index, source or build settings are refused (`RefusedError`) before anything runs, and so is a lock
that names a package from elsewhere. The key hashes everything a build reads.
"""

from __future__ import annotations

import hashlib
import json
import platform
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Kind = Literal["lock", "requirements", "base"]

#: Bumped when the way an environment is built changes, so that old builds are not reused.
BUILD_FORMAT = 1
#: uv's default index, allowed in a lock when the operator configures no default of their own.
DEFAULT_INDEX = "https://pypi.org/simple"

#: `[tool.uv]` keys that choose where packages come from or how they are built: refused.
REFUSED_UV_KEYS = frozenset(
    {
        "index",
        "index-url",
        "extra-index-url",
        "find-links",
        "no-index",
        "index-strategy",
        "keyring-provider",
        "allow-insecure-host",
        "sources",
        "pip",
        "config-settings",
        "config-settings-package",
        "no-build-isolation",
        "no-build-isolation-package",
        "extra-build-dependencies",
        "extra-build-variables",
        "dependency-metadata",
        "cache-dir",
        "python-install-mirror",
        "pypy-install-mirror",
        "python-downloads-json-url",
    }
)
#: A lock's package sources that are not the operator's index (the project's own root aside).
REFUSED_LOCK_SOURCES = ("git", "url", "path", "directory", "editable")
#: The only option a requirements line may carry (after its requirement): a pinned hash.
ALLOWED_REQUIREMENT_OPTION = "--hash"
#: The operator's uv settings that say which indexes packages come from.
OPERATOR_INDEX_VARIABLES = (
    "UV_DEFAULT_INDEX",
    "UV_INDEX_URL",
    "UV_INDEX",
    "UV_EXTRA_INDEX_URL",
    "UV_FIND_LINKS",
)
#: A direct reference (`name @ url`), a URL, or a local path or archive in place of a name.
_NOT_A_NAME = re.compile(r"(\s@\s|^@|://|^[./~]|^file:|\.(whl|zip|tar\.gz|tgz)$|/)")


class RefusedError(ValueError):
    """A project's files say something its environment may not be built from."""


@dataclass(frozen=True)
class Project:
    """A project folder as its environment sees it: its kind and the texts a build reads."""

    folder: Path
    kind: Kind
    texts: tuple[tuple[str, str], ...]  # (file name, content), what the key hashes


def read_project(folder: Path, indexes: frozenset[str]) -> Project:
    """The project's kind and texts, or `RefusedError` naming what it may not say."""
    if (folder / "uv.toml").exists():
        raise RefusedError("uv.toml: a project's own uv settings are refused (the operator's rule)")
    lock, pyproject, requirements = (
        folder / "uv.lock",
        folder / "pyproject.toml",
        folder / "requirements.txt",
    )
    if lock.is_file():
        if not pyproject.is_file():
            raise RefusedError("uv.lock needs its pyproject.toml beside it")
        texts = (("pyproject.toml", pyproject.read_text()), ("uv.lock", lock.read_text()))
        check_pyproject(texts[0][1])
        check_lock(texts[1][1], indexes)
        return Project(folder, "lock", texts)
    if requirements.is_file():
        text = requirements.read_text()
        check_requirements(text)
        return Project(folder, "requirements", (("requirements.txt", text),))
    return Project(folder, "base", ())


def check_pyproject(text: str) -> None:
    """Refuse `[tool.uv]` settings that pick an index, a source or a build's options."""
    try:
        tool_uv = tomllib.loads(text).get("tool", {}).get("uv", {})
    except tomllib.TOMLDecodeError as error:
        raise RefusedError(f"pyproject.toml: {error}") from error
    found = sorted(REFUSED_UV_KEYS & set(tool_uv))
    if found:
        keys = ", ".join(f"tool.uv.{key}" for key in found)
        raise RefusedError(f"pyproject.toml: {keys} refused: packages come from the operator")


def check_lock(text: str, allowed: frozenset[str]) -> None:
    """Refuse a lock whose packages come from anywhere but the operator's indexes."""
    try:
        packages = tomllib.loads(text).get("package", [])
    except tomllib.TOMLDecodeError as error:
        raise RefusedError(f"uv.lock: {error}") from error
    for package in packages:
        name, source = package.get("name", "?"), package.get("source", {})
        for kind in REFUSED_LOCK_SOURCES:
            where = source.get(kind)
            if where is not None and not (kind in ("editable", "directory") and where == "."):
                raise RefusedError(f"uv.lock: {name} comes from a {kind} source ({where}): refused")
        registry = source.get("registry")
        if registry is not None and registry.rstrip("/") not in allowed:
            raise RefusedError(f"uv.lock: {name} comes from {registry}, not the operator's index")


def check_requirements(text: str) -> None:
    """Refuse option lines (indexes, links, editables, other files) and non-name requirements."""
    for number, line in enumerate(logical_lines(text), start=1):
        requirement, *options = line.split(" --")
        if requirement.startswith("-"):
            raise RefusedError(f"requirements.txt line {number}: {line!r}: options are refused")
        if _NOT_A_NAME.search(requirement.strip()):
            raise RefusedError(
                f"requirements.txt line {number}: {requirement.strip()!r}: only names "
                "from the operator's index (no URLs, paths or direct references)"
            )
        for option in options:
            if not ("--" + option).startswith(ALLOWED_REQUIREMENT_OPTION):
                raise RefusedError(f"requirements.txt line {number}: --{option}: refused")


def logical_lines(text: str) -> list[str]:
    """A requirements file's lines with continuations joined and comments left out."""
    joined = re.sub(r"\\\n", " ", text)
    lines = (re.sub(r"(^|\s)#.*", "", line).strip() for line in joined.splitlines())
    return [" ".join(line.split()) for line in lines if line]


def allowed_indexes(
    environ: Mapping[str, str], config_files: Sequence[Path] = ()
) -> frozenset[str]:
    """The index URLs and link folders the operator's uv settings name (uv's default if none).

    Read from uv's variables and the operator's uv.toml files (`operator_config_files`).
    """
    found, has_default = set(), bool({"UV_DEFAULT_INDEX", "UV_INDEX_URL"} & environ.keys())
    for variable in OPERATOR_INDEX_VARIABLES:
        # Indexes are separated by spaces; UV_FIND_LINKS's locations by commas.
        for entry in environ.get(variable, "").replace(",", " ").split():
            found.add(entry.split("=", 1)[-1] if "=" in entry.split("://")[0] else entry)
    for path in config_files:
        config = tomllib.loads(path.read_text())
        for table in (config, config.get("pip", {})):
            found.update(_listed(table.get("index-url")) + _listed(table.get("extra-index-url")))
            found.update(_listed(table.get("find-links")))
            found.update(index["url"] for index in table.get("index", []) if "url" in index)
            has_default |= "index-url" in table
            has_default |= any(index.get("default") for index in table.get("index", []))
    if not has_default:
        found.add(DEFAULT_INDEX)
    return frozenset(url.rstrip("/") for url in found)


def operator_config_files(environ: Mapping[str, str]) -> list[Path]:
    """The operator's uv.toml files on the worker: UV_CONFIG_FILE, or the system's."""
    if "UV_CONFIG_FILE" in environ:
        return [Path(environ["UV_CONFIG_FILE"])]
    return [p for p in (Path("/etc/xdg/uv/uv.toml"), Path("/etc/uv/uv.toml")) if p.is_file()]


def _listed(value: object) -> list[str]:
    """A uv setting that is one URL or a list of them, as a list."""
    if isinstance(value, str):
        return [value]
    return [str(item) for item in value] if isinstance(value, list) else []


@dataclass(frozen=True)
class Interpreter:
    """The interpreter an environment is built on: where it is and what it says of itself."""

    python: Path
    version: str  # sys.version of the interpreter, read by running it
    base_env: Path | None  # SCRIPT_BASE_ENV, None for a bare interpreter
    base_fingerprint: str  # the base's installed distributions, "" without a base


def base_fingerprint(base_env: Path) -> str:
    """A hash of the base's installed distributions (names, versions): a changed base rebuilds."""
    names = sorted(p.name for p in base_env.glob("lib*/python*/site-packages/*.dist-info"))
    return hashlib.sha256("\n".join(names).encode()).hexdigest()


def cache_key(
    project: Project, interpreter: Interpreter, uv_version: str, indexes: frozenset[str]
) -> str:
    """SHA-256 over everything a build reads: texts, interpreter, base, platform, uv, indexes."""
    parts = {
        "format": BUILD_FORMAT,
        "kind": project.kind,
        "texts": project.texts,
        "python": str(interpreter.python),
        "version": interpreter.version,
        "base": str(interpreter.base_env or ""),
        "base_fingerprint": interpreter.base_fingerprint,
        "platform": [platform.platform(), platform.machine()],
        "uv": uv_version,
        "indexes": sorted(indexes),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def site_packages(prefix: Path) -> list[Path]:
    """An environment's site-packages folders (lib and lib64, whichever exist)."""
    return sorted(p for p in prefix.glob("lib*/python*/site-packages") if p.is_dir())


def is_venv(prefix: Path) -> bool:
    """Whether a prefix is a venv (whose packages --system-site-packages would not show)."""
    return (prefix / "pyvenv.cfg").is_file()


def operator_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """The worker's variables a build may see: TLS, proxies and the operator's uv settings."""
    passed = {"SSL_CERT_FILE", "SSL_CERT_DIR", "NO_PROXY", "no_proxy"}
    for proxy in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        passed |= {proxy, proxy.lower()}
    return {
        name: value
        for name, value in environ.items()
        if name in passed or (name.startswith("UV_") and name not in BUILD_OWNED_UV)
    }


#: uv variables the build sets itself (where it installs, which interpreter): the operator's
#: values of these would point the build elsewhere.
BUILD_OWNED_UV = frozenset(
    {
        "UV_PROJECT_ENVIRONMENT",
        "UV_PYTHON",
        "UV_SYSTEM_PYTHON",
        "UV_PROJECT",
        "UV_WORKING_DIR",
        "UV_CACHE_DIR",
        "UV_NO_CACHE",
    }
)
