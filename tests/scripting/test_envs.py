"""A script project's environment, built by the real uv, offline: its kinds, refusals and cache.

Packages come from a folder of wheels the tests build themselves, named by the operator's
`UV_FIND_LINKS` (an operator's setting, allowed; a project's own are refused).
"""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest

from app.scripting.env_cache import BUILT, EnvCache
from app.scripting.env_rules import (
    RefusedError,
    allowed_indexes,
    check_lock,
    check_requirements,
    read_project,
)
from app.scripting.envs import BuildPlaces, EnvBuildError, ScriptEnvs

PYPROJECT = """[project]
name = "demo"
version = "0.1.0"
requires-python = ">=3.8"
dependencies = [{dependencies}]
"""


def wheel(folder: Path, name: str, version: str) -> Path:
    """A minimal pure-Python wheel of `name` whose module says its version."""
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f"VERSION = {version!r}\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    records = []
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in files.items():
            archive.writestr(member, text)
            digest = hashlib.sha256(text.encode()).digest()
            encoded = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
            records.append(f"{member},sha256={encoded},{len(text)}")
        archive.writestr(f"{info}/RECORD", "\n".join([*records, f"{info}/RECORD,,"]) + "\n")
    return path


@pytest.fixture
def wheels(tmp_path: Path) -> Path:
    folder = tmp_path / "wheels"
    folder.mkdir()
    wheel(folder, "tinypkg", "1.0")
    return folder


@pytest.fixture
def environ(wheels: Path) -> dict[str, str]:
    """The worker's variables: offline, the operator's index a folder of wheels."""
    return {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/"),
        "UV_OFFLINE": "1",
        "UV_NO_INDEX": "1",
        "UV_FIND_LINKS": str(wheels),
        "SECRET_OF_THE_WORKER": "not for builds",
    }


@pytest.fixture
def envs(tmp_path: Path, environ: dict[str, str]) -> ScriptEnvs:
    return ScriptEnvs(EnvCache(tmp_path / "cache", 10**9), timeout_s=60, environ=environ)


def project(folder: Path, **files: str) -> Path:
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name.replace("_", ".")).write_text(text)
    return folder


def locked_project(folder: Path, environ: dict[str, str], dependencies: str) -> Path:
    """A project with a pyproject.toml and the uv.lock that uv makes of it."""
    project(folder, pyproject_toml=PYPROJECT.format(dependencies=dependencies))
    subprocess.run(["uv", "lock", "--offline"], cwd=folder, env=environ, check=True)
    return folder


def imports(python: Path, module: str) -> str:
    done = subprocess.run(
        [str(python), "-c", f"import {module}; print({module}.VERSION)"],
        capture_output=True,
        text=True,
    )
    return done.stdout.strip() or done.stderr


def test_a_lock_is_installed_as_locked_and_reused(
    envs: ScriptEnvs, tmp_path: Path, environ: dict[str, str]
) -> None:
    folder = locked_project(tmp_path / "p", environ, '"tinypkg"')
    with envs.environment(folder) as first:
        assert not first.cached
        assert imports(first.python, "tinypkg") == "1.0"
        assert "tinypkg" in first.output
    with envs.environment(folder) as second:
        assert second.cached and second.path == first.path and second.output == ""
    root = tmp_path / "cache"
    assert sorted(os.listdir(root)) == ["envs", "keys", "tmp"]  # the downloads went with the build
    assert os.listdir(root / "tmp") == []


def test_requirements_are_installed_with_uv_pip(envs: ScriptEnvs, tmp_path: Path) -> None:
    folder = project(tmp_path / "p", requirements_txt="tinypkg==1.0  # the test's own\n")
    with envs.environment(folder) as env:
        assert imports(env.python, "tinypkg") == "1.0"


def test_requirements_build_on_a_base_and_see_its_packages(
    tmp_path: Path, environ: dict[str, str], wheels: Path
) -> None:
    wheel(wheels, "basepkg", "2.0")
    base = tmp_path / "base"
    subprocess.run(["uv", "venv", "-q", str(base)], env=environ, check=True)
    install = ["uv", "pip", "install", "-q", "--python", str(base / "bin" / "python"), "basepkg"]
    subprocess.run(install, env=environ, check=True)
    envs = ScriptEnvs(EnvCache(tmp_path / "c", 10**9), base_env=base, environ=environ)
    with envs.environment(project(tmp_path / "req", requirements_txt="tinypkg\n")) as env:
        assert imports(env.python, "tinypkg") == "1.0"
        assert imports(env.python, "basepkg") == "2.0"
    with envs.environment(project(tmp_path / "bare")) as env:
        assert env.path == base.resolve() and env.cached
    locked = locked_project(tmp_path / "lock", environ, '"tinypkg"')
    with envs.environment(locked) as env:
        assert "No module named" in imports(env.python, "basepkg")  # a lock is exact


def test_neither_without_a_base_is_a_bare_interpreter_not_the_services(
    envs: ScriptEnvs, tmp_path: Path
) -> None:
    with envs.environment(project(tmp_path / "p", train_py="print(1)\n")) as env:
        assert "No module named" in imports(env.python, "pytest")
        home = (env.path / "pyvenv.cfg").read_text().split("home = ")[1].split("\n")[0]
        assert Path(home) != Path(sys.prefix) / "bin"  # the service's environment is not its base


def test_a_failing_build_raises_with_its_output(envs: ScriptEnvs, tmp_path: Path) -> None:
    folder = project(tmp_path / "p", requirements_txt="no-such-package-anywhere==9\n")
    with pytest.raises(EnvBuildError) as raised, envs.environment(folder):
        pass
    assert "no-such-package-anywhere" in raised.value.output
    for name in ("envs", "tmp"):  # nothing half built is kept
        assert list((tmp_path / "cache" / name).iterdir()) == []


def test_a_build_past_its_time_is_killed(tmp_path: Path, environ: dict[str, str]) -> None:
    def slow(command: list[str], places: BuildPlaces) -> list[str]:
        return ["sh", "-c", 'sleep 30 & wait; exec "$@"', "sh", *command]

    cache = EnvCache(tmp_path / "cache", 10**9)
    envs = ScriptEnvs(cache, timeout_s=0.5, wrap=slow, environ=environ)
    with pytest.raises(EnvBuildError, match="ran past"), envs.environment(project(tmp_path / "p")):
        pass


def test_the_build_sees_only_the_operators_variables(
    tmp_path: Path, environ: dict[str, str]
) -> None:
    seen = tmp_path / "seen"

    def spy(command: list[str], places: BuildPlaces) -> list[str]:
        assert places.workspace.parent == tmp_path / "c" / "tmp"
        return ["sh", "-c", f'env > {seen}; exec "$@"', "sh", *command]

    envs = ScriptEnvs(EnvCache(tmp_path / "c", 10**9), wrap=spy, environ=environ)
    with envs.environment(project(tmp_path / "p")):
        pass
    names = {line.split("=", 1)[0] for line in seen.read_text().splitlines()}
    assert "SECRET_OF_THE_WORKER" not in names and "HOME" not in names
    assert {"UV_FIND_LINKS", "UV_OFFLINE"} <= names


@pytest.mark.parametrize(
    "line",
    [
        "--index-url https://elsewhere.example/simple",
        "-i https://elsewhere.example/simple",
        "--extra-index-url https://elsewhere.example/simple",
        "--find-links ./wheels",
        "-e .",
        "-r other.txt",
        "./local_package",
        "/abs/pkg-1.0-py3-none-any.whl",
        "pkg @ https://elsewhere.example/pkg.whl",
        "git+https://elsewhere.example/pkg.git",
        "tinypkg --index-url=https://elsewhere.example/simple",
    ],
)
def test_requirements_naming_their_own_sources_are_refused(line: str) -> None:
    with pytest.raises(RefusedError):
        check_requirements(f"tinypkg==1.0\n{line}\n")


def test_plain_requirements_with_hashes_and_markers_pass() -> None:
    check_requirements(
        "# pins\ntinypkg==1.0 \\\n    --hash=sha256:abc\nother>=2; python_version >= '3.8'\n"
    )


@pytest.mark.parametrize(
    "setting",
    [
        '[tool.uv]\nindex-url = "https://elsewhere.example/simple"\n',
        '[[tool.uv.index]]\nname = "x"\nurl = "https://elsewhere.example/simple"\n',
        '[tool.uv.sources]\ntinypkg = { git = "https://elsewhere.example/x.git" }\n',
        '[tool.uv]\nfind-links = ["./wheels"]\n',
    ],
)
def test_a_pyprojects_own_index_or_sources_are_refused(tmp_path: Path, setting: str) -> None:
    text = PYPROJECT.format(dependencies="") + setting
    folder = project(tmp_path / "p", pyproject_toml=text, uv_lock="version = 1\n")
    with pytest.raises(RefusedError, match=r"tool\.uv"):
        read_project(folder, frozenset())


def test_a_projects_uv_toml_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RefusedError, match=r"uv\.toml"):
        read_project(project(tmp_path / "p", uv_toml="index-url = 'x'\n"), frozenset())


@pytest.mark.parametrize(
    "source",
    [
        '{ registry = "https://elsewhere.example/simple" }',
        '{ git = "https://elsewhere.example/x.git" }',
        '{ url = "https://elsewhere.example/x.whl" }',
        '{ path = "../x.whl" }',
        '{ editable = "libs/x" }',
    ],
)
def test_a_lock_from_elsewhere_is_refused(source: str) -> None:
    lock = f'version = 1\n[[package]]\nname = "x"\nversion = "1"\nsource = {source}\n'
    with pytest.raises(RefusedError, match="x comes from"):
        check_lock(lock, frozenset({"https://pypi.org/simple"}))


def test_the_operators_indexes_are_what_a_lock_may_name() -> None:
    environ = {"UV_INDEX": "team=https://a.example/simple/ https://b.example/simple"}
    environ["UV_FIND_LINKS"] = "/srv/wheels,/srv/more"
    assert allowed_indexes(environ) == {
        "https://a.example/simple",
        "https://b.example/simple",
        "/srv/wheels",
        "/srv/more",
        "https://pypi.org/simple",  # uv's default, while the operator sets no default
    }
    assert allowed_indexes({"UV_DEFAULT_INDEX": "https://mirror.example/simple"}) == {
        "https://mirror.example/simple"
    }


def test_the_operators_uv_toml_names_indexes_too(tmp_path: Path) -> None:
    config = tmp_path / "uv.toml"
    config.write_text(
        'find-links = ["/srv/wheels"]\n[[index]]\nurl = "https://mirror.example/simple/"\n'
        "default = true\n"
    )
    assert allowed_indexes({}, [config]) == {"/srv/wheels", "https://mirror.example/simple"}


def test_what_a_build_reads_is_its_key(envs: ScriptEnvs, tmp_path: Path) -> None:
    one = project(tmp_path / "one", requirements_txt="tinypkg\n")
    same = project(tmp_path / "same", requirements_txt="tinypkg\n")
    other = project(tmp_path / "other", requirements_txt="tinypkg==1.0\n")
    with envs.environment(one) as a, envs.environment(same) as b, envs.environment(other) as c:
        assert a.path == b.path != c.path and b.cached and not c.cached


def test_lru_eviction_keeps_an_environment_in_use(tmp_path: Path) -> None:
    cache = EnvCache(tmp_path / "cache", budget_bytes=2500)

    def build(workspace: Path) -> str:
        (workspace / BUILT).mkdir()
        (workspace / BUILT / "data").write_bytes(b"x" * 1000)
        return "built"

    with cache.use("old-in-use", build):
        with cache.use("older", build):
            pass
        os.utime(cache.root / "keys" / "older.use", (0, 0))
        os.utime(cache.root / "keys" / "old-in-use.use", (1, 1))
        with cache.use("newest", build):
            pass  # three of 1000 bytes: over the budget, the least recent not in use goes
        with cache.use("newer", build):
            pass  # still over: "old-in-use" is least recent but held, "newest" goes
        kept = {key for key, _, _ in cache.entries()}
    assert kept == {"old-in-use", "newer"}


def test_concurrent_builds_of_one_key_build_once(tmp_path: Path) -> None:
    cache = EnvCache(tmp_path / "cache", 10**9)
    builds, started, release = [], threading.Event(), threading.Event()
    results: list[bool] = []

    def build(workspace: Path) -> str:
        builds.append(workspace)
        started.set()
        release.wait(timeout=30)
        (workspace / BUILT).mkdir()
        return "built"

    def use() -> None:
        with cache.use("key", build) as entry:
            results.append(entry.cached)

    threads = [threading.Thread(target=use) for _ in range(2)]
    threads[0].start()
    assert started.wait(timeout=30)
    threads[1].start()
    release.set()
    for thread in threads:
        thread.join(timeout=30)
    assert len(builds) == 1 and sorted(results) == [False, True]


@pytest.mark.skipif(sys.prefix == sys.base_prefix, reason="the tests run in no virtual environment")
def test_the_services_own_environment_is_never_the_base(
    tmp_path: Path, environ: dict[str, str]
) -> None:
    with pytest.raises(ValueError, match="service's own"):
        ScriptEnvs(EnvCache(tmp_path / "c", 10**9), base_env=Path(sys.prefix), environ=environ)
