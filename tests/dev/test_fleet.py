"""`fairgpu dev --worker CLASS[@HOST]`: the flags, read and refused before anything starts; each
flag's worker gets the environment that makes it that class on that host (asked of the worker's
own code, app/fleet/worker_class.py); the banner lists the fleet; and, with real processes, two
classes on two simulated hosts take jobs under their own names, each seen by the API as its class
on its host."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from app.auth import Accounts
from app.dev import ready
from app.dev.console import banner, make_console
from app.dev.fleet import MAX_WORKERS, FleetSpecError, FleetWorker, describe, parse_worker, plan
from app.dev.stack import Stack
from app.fleet.catalog import Catalog
from app.fleet.worker_class import worker_class, worker_host
from app.settings import Settings
from tests.support import DEMO_KEY, FIXTURES, fast_settings, wait_for

ROOT = Path(__file__).resolve().parents[2]
CATALOG = (
    '{"big": {"memory_gb": 80, "price": 2.0}, "small": {"memory_gb": 24, "price": 1.0},'
    ' "tiny.v2": {"memory_gb": 16, "price": 0.5}}'
)
MIXED = Catalog.from_json(CATALOG)


# --- the flags -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("big", ("big", "here")),
        ("big@node-2", ("big", "node-2")),
        ("tiny.v2@gpu_box.lab", ("tiny.v2", "gpu_box.lab")),
    ],
)
def test_a_flag_is_a_class_and_a_host_that_defaults_to_this_machine(
    text: str, expected: tuple[str, str]
) -> None:
    assert parse_worker(text, "here") == expected


@pytest.mark.parametrize("text", ["", "@node", "big@", "big@a@b", "big@-x", "big@a b", "big@é"])
def test_a_malformed_flag_is_refused_with_the_form_it_needs(text: str) -> None:
    with pytest.raises(FleetSpecError, match=r"give CLASS or CLASS@HOST"):
        parse_worker(text, "here")


def test_a_class_the_catalog_lacks_is_refused_naming_the_flag_and_the_catalog() -> None:
    with pytest.raises(FleetSpecError) as refused:
        plan(["big", "huge@node-2"], None, MIXED, "here")
    assert str(refused.value) == (
        "--worker 'huge@node-2': 'huge' is no class of GPU_CLASSES: "
        "big (80 GB), small (24 GB), tiny.v2 (16 GB)"
    )


def test_a_class_is_named_exactly_as_the_catalog_writes_it() -> None:
    with pytest.raises(FleetSpecError, match="'BIG' is no class"):
        plan(["BIG"], None, MIXED, "here")


def test_without_a_catalog_a_flag_is_refused_and_told_to_set_gpu_classes() -> None:
    with pytest.raises(FleetSpecError) as refused:
        plan(["big"], None, Catalog.single(), "here")
    said = str(refused.value)
    assert said.startswith("--worker 'big' names a class, but GPU_CLASSES (the catalog) is unset")
    assert "fairgpu dev --worker big --worker small@host2" in said
    # the example it gives is a catalog that works
    example = said.split("GPU_CLASSES='", 1)[1].split("'", 1)[0]
    assert [c.name for c in Catalog.from_json(example).classes] == ["big", "small"]


def test_flags_and_workers_together_are_refused() -> None:
    with pytest.raises(FleetSpecError, match="not both"):
        plan(["big"], 2, MIXED, "here")


def test_at_most_as_many_flags_as_workers_allows() -> None:
    plan(["small"] * MAX_WORKERS, None, MIXED, "here")
    with pytest.raises(FleetSpecError, match=f"at most {MAX_WORKERS}"):
        plan(["small"] * (MAX_WORKERS + 1), None, MIXED, "here")


def test_without_flags_the_workers_are_plain_as_before_the_catalog() -> None:
    assert plan([], None, MIXED, "here") == [FleetWorker("cpu1", "here")]
    three = plan([], 3, Catalog.single(), "here")
    assert [(w.name, w.gpu_class, w.env) for w in three] == [
        ("cpu1", None, {}),
        ("cpu2", None, {}),
        ("cpu3", None, {}),
    ]
    # no WORKER_GPU_CLASS: a CPU worker then takes the catalog's first class by itself
    assert worker_class(MIXED, None, None, None) == MIXED.first


def test_each_flag_is_one_worker_of_its_class_on_its_host_named_apart() -> None:
    fleet = plan(["big@a", "small@b", "small@b", "big"], None, MIXED, "here")
    assert [(w.name, w.gpu_class, w.host) for w in fleet] == [
        ("big-1", "big", "a"),
        ("small-1", "small", "b"),
        ("small-2", "small", "b"),
        ("big-2", "big", "here"),
    ]
    assert fleet[1].env == {
        "WORKER_NAME": "small-1@b",
        "WORKER_GPU_CLASS": "small",
        "WORKER_HOST": "b",
    }


def test_worker_names_stay_distinct_when_class_names_end_in_digits() -> None:
    catalog = Catalog.from_json(
        '{"a": {"memory_gb": 8, "price": 1}, "a1": {"memory_gb": 9, "price": 1}}'
    )
    fleet = plan(["a"] * 11 + ["a1"], None, catalog, "here")
    names = [w.name for w in fleet]
    assert len(set(names)) == len(names)


# --- the stack: each worker's environment ----------------------------------------------------


class EnvStack(Stack):
    """A stack whose workers print their environment instead of running Celery."""

    def _spawn(self, name: str, module: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
        if module == "app.worker.main":
            module = "tests.dev.print_env"
        return super()._spawn(name, module, env)


def environments(log: Path, count: int) -> list[dict[str, str]]:
    def printed() -> list[dict[str, str]] | None:
        lines = log.read_text().splitlines() if log.exists() else []
        return [json.loads(line) for line in lines] if len(lines) >= count else None

    return wait_for(printed, what=f"{count} environments in {log.name}")


def test_each_flag_gives_its_worker_its_class_and_host_and_a_restart_keeps_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = fast_settings(gpu_classes=CATALOG)
    fleet = plan(["big@node-1", "small@node-2"], None, MIXED, "here")
    stack = EnvStack(settings, fleet=fleet, workdir=tmp_path)
    stack.env = {"PYTHONPATH": str(ROOT)}
    for worker in stack.fleet:
        stack.start_worker(worker.name, env=worker.env)
    started = list(stack.workers.values())
    [restart] = [slot.restart for slot in stack._slots() if slot.name == "worker small-1"]
    restart()  # as the supervisor does when it dies
    for process in [*started, *stack.workers.values()]:
        process.wait(timeout=30)

    [big] = environments(tmp_path / "big-1.log", 1)
    first, again = environments(tmp_path / "small-1.log", 2)
    assert first == again
    for env, name, host in ((big, "big", "node-1"), (first, "small", "node-2")):
        assert env["WORKER_NAME"] == f"{name}-1@{host}"
        assert env["WORKER_QUEUES"] == "short,long"
        assert env["CUDA_VISIBLE_DEVICES"] == ""  # a CPU worker
        # what the worker itself makes of that environment
        for key in ("WORKER_GPU_CLASS", "WORKER_HOST", "GPU_CLASSES"):
            monkeypatch.delenv(key, raising=False)
        monkeypatch.setenv("WORKER_GPU_CLASS", env["WORKER_GPU_CLASS"])
        monkeypatch.setenv("WORKER_HOST", env["WORKER_HOST"])
        read = Settings(users_file=FIXTURES)
        assert worker_class(MIXED, None, None, read.worker_gpu_class).name == name
        assert worker_host(read) == host


def test_a_stack_of_plain_workers_is_what_it_always_was(tmp_path: Path) -> None:
    stack = Stack(fast_settings(), workers=2, workdir=tmp_path)
    assert [(w.name, w.env) for w in stack.fleet] == [("cpu1", {}), ("cpu2", {})]
    assert stack.worker_count == 2


# --- the banner ------------------------------------------------------------------------------


def printed_banner(tmp_path: Path, stack: Stack) -> list[str]:
    stack.redis_url = "redis://127.0.0.1:6379/0"
    out = io.StringIO()
    banner(make_console(file=out, width=200), stack, Accounts.load(FIXTURES), str(FIXTURES))
    return out.getvalue().splitlines()


def test_the_banner_lists_the_fleet_class_at_host_per_worker(tmp_path: Path) -> None:
    fleet = plan(["big@node-1", "small@node-2"], None, MIXED, "here")
    stack = Stack(fast_settings(gpu_classes=CATALOG), fleet=fleet, workdir=tmp_path)
    [line] = [line for line in printed_banner(tmp_path, stack) if line.startswith("Fleet:")]
    assert line.startswith("Fleet: big-1 big@node-1, small-1 small@node-2 (GPU_CLASSES: big (80")
    assert "2 CPU worker(s)" in "\n".join(printed_banner(tmp_path, stack))


def test_plain_workers_of_a_catalog_are_shown_as_its_first_class(tmp_path: Path) -> None:
    assert describe(plan([], 2, MIXED, "here"), MIXED).startswith(
        "Fleet: cpu1 big@here, cpu2 big@here ("
    )


def test_without_a_catalog_the_banner_has_no_fleet_line(tmp_path: Path) -> None:
    stack = Stack(fast_settings(), workdir=tmp_path)
    assert not [line for line in printed_banner(tmp_path, stack) if line.startswith("Fleet")]


# --- the command -----------------------------------------------------------------------------


def test_the_command_refuses_an_unknown_class_in_one_line_before_starting_anything(
    tmp_path: Path,
) -> None:
    env = {"PATH": "/usr/bin:/bin", "GPU_CLASSES": CATALOG, "USERS_FILE": str(FIXTURES)}
    env["TMPDIR"] = str(tmp_path)
    argv = [sys.executable, "-m", "app.client.cli", "dev", "--worker", "big", "--worker", "huge"]
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stdout.splitlines() == [
        "fairgpu dev: --worker 'huge': 'huge' is no class of GPU_CLASSES: "
        "big (80 GB), small (24 GB), tiny.v2 (16 GB)"
    ]
    assert list(tmp_path.iterdir()) == []  # no log folder: nothing started


# --- real processes --------------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_two_classes_on_two_hosts_take_jobs_under_their_own_names(tmp_path: Path) -> None:
    settings = fast_settings(gpu_classes=CATALOG)
    fleet = plan(["big@host-a", "small@host-b"], None, MIXED, "here")
    with Stack(settings, use_given_redis=False, fleet=fleet, workdir=tmp_path) as stack:
        stack.wait_for_workers()
        assert {"big-1@host-a", "small-1@host-b"} <= ready.ready_workers(stack.settings)
        seen = httpx.get(f"{stack.url}/admin/queues", headers={"X-API-Key": DEMO_KEY}).json()
        places = {w["name"]: (w["gpu_class"], w["host"]) for w in seen["workers"]}
        assert places == {"big-1@host-a": ("big", "host-a"), "small-1@host-b": ("small", "host-b")}
