"""A run's devices (issue 42): a job of several cards runs in one child of its own that sees
exactly its cards, in order and in PCI order; every job's context lists its devices, and its
result names them. Real spawned children, running the job type below."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator

import pytest
from pydantic import BaseModel

from app.jobs import JobContext, job
from app.jobs.context import Device
from app.models import Status
from app.store.record import JobRecord
from app.worker.calls import Call
from app.worker.child import JobChild
from app.worker.devices import Devices, devices_json
from app.worker.probe import NoDeviceProbe

MODULES = ["tests.worker.test_devices"]
GRACE_S = 0.5


class Nothing(BaseModel):
    """No input."""


class Seen(BaseModel):
    """What a run saw of its cards: CUDA's two variables, and its context's devices."""

    visible: str | None
    order: str | None
    devices: list[tuple[str, int | None]]


@job(name="devices_seen", queue="short", max_duration_s=30)
def devices_seen(ctx: JobContext, inp: Nothing) -> Seen:
    """Say what this process sees of its cards, and leave a file."""
    (ctx.output_dir / "seen.txt").write_text("seen")
    env = os.environ
    pairs = [(d.worker, d.gpu_id) for d in ctx.devices]
    return Seen(
        visible=env.get("CUDA_VISIBLE_DEVICES"), order=env.get("CUDA_DEVICE_ORDER"), devices=pairs
    )


TWO = (Device("gpu3@node-a", 3), Device("gpu5@node-a", 5))


def child(gpu_id: int | None, gpu_ids: tuple[int, ...] | None = None) -> JobChild:
    """A child running this module's job type, with no device probe (no card here)."""
    return JobChild(
        MODULES,
        gpu_id,
        timeout_grace_s=GRACE_S,
        cancel_grace_s=GRACE_S,
        kill_grace_s=GRACE_S,
        probe=NoDeviceProbe(),
        gpu_ids=gpu_ids,
    )


def call(devices: tuple[Device, ...] = ()) -> Call:
    gpu_id = devices[0].gpu_id if devices else None
    return Call("t1", "devices_seen", "{}", 10.0, gpu_id, devices=devices)


def never() -> bool:
    return False


def seen(output: str | None) -> Seen:
    assert output is not None
    return Seen.model_validate_json(output)


@pytest.fixture
def children() -> Iterator[Callable[..., JobChild]]:
    made: list[JobChild] = []

    def make(gpu_id: int | None, gpu_ids: tuple[int, ...] | None = None) -> JobChild:
        made.append(child(gpu_id, gpu_ids))
        return made[-1]

    yield make
    for one in made:
        one.close()


@pytest.mark.integration
def test_a_child_of_two_cards_sees_exactly_them_in_pci_order(
    children: Callable[..., JobChild],
) -> None:
    ended = children(3, (3, 5)).run(call(TWO), never)
    assert ended.end == "success", ended.error
    got = seen(ended.output)
    assert (got.visible, got.order) == ("3,5", "PCI_BUS_ID")
    assert got.devices == [("gpu3@node-a", 3), ("gpu5@node-a", 5)]


@pytest.mark.integration
def test_the_warm_child_of_one_card_keeps_the_workers_environment(
    children: Callable[..., JobChild],
) -> None:
    ended = children(None).run(call((Device("cpu@node-a", None),)), never)
    got = seen(ended.output)
    assert got.visible == os.environ.get("CUDA_VISIBLE_DEVICES")
    assert got.order == os.environ.get("CUDA_DEVICE_ORDER")
    assert got.devices == [("cpu@node-a", None)]


@pytest.mark.integration
def test_a_run_of_several_cards_runs_in_a_child_of_its_own_closed_after_it(
    children: Callable[..., JobChild],
) -> None:
    warm = children(3)
    warm.start()
    devices = Devices(warm, "gpu3@node-a", 3)
    apart: list[JobChild] = []

    def one_off(gpu_ids: tuple[int, ...] | None) -> JobChild:
        apart.append(children(3, gpu_ids))
        return apart[-1]

    devices.one_off = one_off
    assert devices.retire()  # as a leader's does before its run: its card's memory is free
    assert warm.pid is None
    ended = devices.run(call(TWO), never)
    assert seen(ended.output).visible == "3,5"
    assert apart[0].pid is None  # closed as the run ended, before its end is recorded
    assert ended.output_dir is not None  # its files outlive the child's folder, for the runner
    assert (ended.output_dir / "seen.txt").read_text() == "seen"
    ended = devices.run(call((TWO[0],)), never)  # one card: the warm child, started again
    assert seen(ended.output).devices == [("gpu3@node-a", 3)]
    assert warm.pid is not None and len(apart) == 1


@pytest.mark.integration
def test_a_lend_does_not_retire_the_child_of_a_run_in_hand(
    children: Callable[..., JobChild],
) -> None:
    warm = children(None)
    devices = Devices(warm, "cpu@node-a", None)
    with devices.lock:  # a run holds it
        assert not devices.retire()
    assert devices.retire()


def test_a_context_built_by_hand_has_one_device_its_own() -> None:
    ctx = JobContext("t1", 2, None, time.time() + 10)
    assert ctx.devices == (Device("", 2),)
    ctx = JobContext("t1", 3, None, time.time() + 10, devices=TWO)
    assert len(ctx.devices) == 2


def record(**fields: str) -> JobRecord:
    base = {
        "task_id": "J1",
        "owner": "o",
        "kind": "short",
        "status": Status.SUCCESS.value,
        "duration_s": "10",
        "enqueued_at": "1",
        "started_at": "2",
        "worker": "gpu3@node-a",
        "gpu_id": "3",
    }
    return JobRecord.parse(base | fields)


def test_the_result_names_every_card_of_a_run_of_several_the_first_being_its_worker() -> None:
    result = record(gpus="2", devices=devices_json(TWO)).status_view().result
    assert result is not None
    assert [d.model_dump() for d in result.devices or []] == [
        {"worker": "gpu3@node-a", "gpu_id": 3},
        {"worker": "gpu5@node-a", "gpu_id": 5},
    ]
    assert (result.worker, result.gpu_id) == ("gpu3@node-a", 3)


def test_the_result_of_a_job_of_one_card_names_its_workers_card() -> None:
    result = record().status_view().result
    assert result is not None
    assert [d.model_dump() for d in result.devices or []] == [
        {"worker": "gpu3@node-a", "gpu_id": 3}
    ]


def test_a_run_of_several_cards_under_way_names_none_yet() -> None:
    result = record(gpus="2", status=Status.STARTED.value).status_view().result
    assert result is not None and result.devices is None


def test_devices_json_is_what_the_record_reads() -> None:
    assert json.loads(devices_json(TWO)) == [
        {"worker": "gpu3@node-a", "gpu_id": 3},
        {"worker": "gpu5@node-a", "gpu_id": 5},
    ]
