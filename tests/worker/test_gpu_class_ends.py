"""Where a job ran and what its card is worth, through a worker's real step (the lease that
starts the job, the step that ends, bills and acks it): the end names the worker's host and
class on the job, and the bill names the class and costs the seconds times its price, the
seconds themselves plain; a worker without a catalog bills as before and names its host."""

from __future__ import annotations

import socket
from collections.abc import Callable
from decimal import Decimal

import redis

from app import pricing
from app.fleet.place import WorkerPlace
from app.store.keys import job_key
from app.vtrr.wire import as_text
from app.worker.runner import JobRunner
from tests.support import bills_of
from tests.worker.support import ALICE, Worker

BIG = WorkerPlace(host="node-a", gpu_class="big", memory_gb=80.0, price=2.0)


def placed(w: Worker, place: WorkerPlace) -> Worker:
    """The worker at this place, as its main tells it where it stands."""
    runner = w.service.runner
    assert isinstance(runner, JobRunner)
    runner.ends.place = place  # one RunEnds prices ends, preemptions and checkpoints alike
    return w


def job_fields(r: redis.Redis, name: str) -> dict[str, str]:
    return {as_text(k): as_text(v) for k, v in r.hgetall(job_key(name)).items()}


def test_a_run_on_a_price_2_card_is_billed_twice_its_plain_cost_and_names_its_class(
    worker: Callable[..., Worker], r: redis.Redis
) -> None:
    w = placed(worker(drain=True), BIG)
    w.submit(r, "short", "J1", job_type="noted", duration_s=10.0)
    w.trigger("short")
    job = job_fields(r, "J1")
    assert job["status"] == "SUCCESS"
    assert (job["host"], job["gpu_class"]) == ("node-a", "big")
    [bill] = bills_of(r, ALICE)
    assert bill.gpu_class == "big"
    plain = pricing.price(w.settings, "short", bill.gpu_seconds, job_type="noted", budget_s=10.0)
    assert bill.billed_ms == plain.billed_ms  # GPU-seconds stay plain: a GPU-second budget's
    assert bill.cost == 2 * plain.cost
    assert bill.record().gpu_class == "big"


def test_a_worker_without_a_catalog_bills_as_before_and_names_its_host(
    worker: Callable[..., Worker], r: redis.Redis
) -> None:
    w = worker(drain=True, worker_host="rack-7")
    w.submit(r, "short", "J1", job_type="noted", duration_s=10.0)
    w.trigger("short")
    job = job_fields(r, "J1")
    assert job["host"] == "rack-7"
    assert "gpu_class" not in job  # null in the result, as before classes
    [bill] = bills_of(r, ALICE)
    assert bill.gpu_class is None
    plain = pricing.price(w.settings, "short", bill.gpu_seconds, job_type="noted", budget_s=10.0)
    assert (bill.cost_micros, bill.description) == (plain.cost_micros, plain.description)


def test_an_unset_worker_host_is_the_machine_s_name(
    worker: Callable[..., Worker], r: redis.Redis
) -> None:
    w = worker(drain=True)
    w.submit(r, "short", "J1", job_type="noted", duration_s=10.0)
    w.trigger("short")
    assert job_fields(r, "J1")["host"] == (w.settings.worker_host or socket.gethostname())
    assert bills_of(r, ALICE)[0].cost == Decimal("0.5")  # the 1 s minimum at 0.5/s
