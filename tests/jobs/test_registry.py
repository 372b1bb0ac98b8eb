"""The registry: what @job accepts, where job types are found, and what stops a process at
start (a name registered twice, a module that does not import)."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel

from app.jobs import JobContext, RegistryError, job, load_registry


class In(BaseModel):
    text: str = ""


class Out(BaseModel):
    text: str = ""


@pytest.fixture
def modules(tmp_path: Path) -> Iterator[Path]:
    """A folder on sys.path for the modules (and installed-package metadata) a test writes."""
    sys.path.insert(0, str(tmp_path))
    yield tmp_path
    sys.path.remove(str(tmp_path))
    for name in [m for m in sys.modules if m.startswith("regtest_")]:
        del sys.modules[name]


def write(folder: Path, name: str, body: str) -> None:
    (folder / f"{name}.py").write_text(textwrap.dedent(body))


TYPE = """
    from pydantic import BaseModel
    from app.jobs import JobContext, job

    class In(BaseModel):
        pass

    @job(name="{name}")
    def run(ctx: JobContext, inp: In) -> In:
        return inp
"""


def test_a_name_registered_in_two_modules_is_refused_naming_both(modules: Path) -> None:
    write(modules, "regtest_one", TYPE.format(name="twin"))
    write(modules, "regtest_two", TYPE.format(name="twin"))
    with pytest.raises(RegistryError, match="registered twice") as raised:
        load_registry(["regtest_one", "regtest_two"], entry_points=False)
    assert "regtest_one" in str(raised.value) and "regtest_two" in str(raised.value)


def test_a_type_imported_into_a_second_module_is_the_same_type(modules: Path) -> None:
    write(modules, "regtest_base", TYPE.format(name="shared"))
    write(modules, "regtest_reuse", "from regtest_base import run\n")
    registry = load_registry(["regtest_base", "regtest_reuse"], entry_points=False)
    assert "shared" in registry


def test_a_module_that_does_not_import_is_named_with_its_error(modules: Path) -> None:
    write(modules, "regtest_broken", "import no_such_package_anywhere\n")
    with pytest.raises(RegistryError, match=r"regtest_broken.*ModuleNotFoundError"):
        load_registry(["regtest_broken"], entry_points=False)
    with pytest.raises(RegistryError, match="regtest_missing"):
        load_registry(["regtest_missing"], entry_points=False)


def test_an_entry_point_of_an_installed_package_adds_its_types(modules: Path) -> None:
    write(modules, "regtest_plugin", TYPE.format(name="from-a-package"))
    info = modules / "regtest_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: regtest-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[fairgpu.jobs]\nmine = regtest_plugin\n")
    assert "from-a-package" in load_registry()
    assert "from-a-package" not in load_registry(entry_points=False)


@pytest.mark.parametrize("name", ["", "Upper", "-lead", "has space", "x" * 65])
def test_a_bad_name_is_refused(name: str) -> None:
    def f(ctx: JobContext, inp: In) -> Out:
        return Out()

    with pytest.raises(RegistryError, match="name"):
        job(name=name)(f)


def test_input_and_output_must_be_pydantic_models() -> None:
    def untyped(ctx: JobContext, inp: dict) -> dict:  # type: ignore[type-arg]
        return inp

    with pytest.raises(RegistryError, match="pydantic"):
        job(name="untyped")(untyped)


def test_queue_and_budget_are_checked() -> None:
    def f(ctx: JobContext, inp: In) -> Out:
        return Out()

    with pytest.raises(RegistryError, match="queue"):
        job(name="q", queue="medium")(f)  # type: ignore[arg-type]
    with pytest.raises(RegistryError, match="max_duration_s"):
        job(name="b", max_duration_s=0)(f)


def test_a_class_without_setup_gets_one_that_does_nothing() -> None:
    class Plain:
        def run(self, ctx: JobContext, inp: In) -> Out:
            return Out(text=inp.text.upper())

    plain = job(name="plain")(Plain)
    runnable = plain.make()
    ctx = JobContext("t", None, None, 0.0)
    runnable.setup(ctx)
    assert runnable.run(ctx, In(text="a")) == Out(text="A")
    assert (plain.input_model, plain.output_model) == (In, Out)


def test_preemptible_is_read_from_the_decorator_and_off_by_default() -> None:
    def f(ctx: JobContext, inp: In) -> Out:
        return Out()

    assert job(name="plain-run")(f).preemptible is False
    assert job(name="resumable", preemptible=True)(f).preemptible is True
    with pytest.raises(RegistryError, match="preemptible"):
        job(name="vague", preemptible="yes")(f)  # type: ignore[arg-type]
