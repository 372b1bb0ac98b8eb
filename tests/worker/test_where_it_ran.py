"""A job's status says where it ran (issue 41): its result names the class of card and the host
of the worker its run ended on, beside the worker and its GPU; null class without a catalog."""

from __future__ import annotations

from collections.abc import Callable

import redis

from app.fleet.place import WorkerPlace
from app.store import JobRecorder
from tests.worker.support import Worker
from tests.worker.test_gpu_class_ends import BIG, placed


def result_of(r: redis.Redis, w: Worker, name: str) -> dict[str, object]:
    record = JobRecorder(r, w.settings).get(name)
    assert record is not None
    result = record.status_view().result
    assert result is not None
    return result.model_dump()


def test_the_result_names_the_class_and_host_beside_the_worker(
    worker: Callable[..., Worker], r: redis.Redis
) -> None:
    w = placed(worker(drain=True), BIG)
    w.submit(r, "short", "J1", job_type="noted", duration_s=10.0)
    w.trigger("short")
    result = result_of(r, w, "J1")
    assert (result["gpu_class"], result["host"]) == ("big", "node-a")
    assert result["worker"]


def test_without_a_catalog_the_class_is_null_and_the_host_is_named(
    worker: Callable[..., Worker], r: redis.Redis
) -> None:
    w = placed(worker(drain=True), WorkerPlace("rack-7", None, None, 1.0))
    w.submit(r, "short", "J1", job_type="noted", duration_s=10.0)
    w.trigger("short")
    result = result_of(r, w, "J1")
    assert (result["gpu_class"], result["host"]) == (None, "rack-7")
