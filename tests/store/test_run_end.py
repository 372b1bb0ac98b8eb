"""A run's end through the store's Lua (finish.lua; the step's `done` hook calls the same
finish_run): the job's hash gets each field the end writes, byte for byte, and the ledger's
outbox every field a charge carries, by its name, with the store's stamp, so that a new field of
a bill needs no Lua; and a job that the release before started ends and is billed as its own."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import pytest
import redis
import redis.asyncio as aioredis

from app import pricing
from app.api.budgets import month_of
from app.bill import STAMPED, Bill, Charge
from app.ledger.outbox import unwritten
from app.models import Status
from app.settings import Settings
from app.store import JobRecorder, RunEnd
from app.store.keys import LEDGER, job_key, usage_key
from app.store.record import decode
from app.store.submit import NewJob
from tests import bills_in_flight as previous
from tests.store.support import write_job

pytestmark = pytest.mark.anyio
OWNER = "11111111-1111-1111-1111-111111111111"
JOB = "0b7d2f6e-0000-4000-8000-000000000021"


@dataclass(frozen=True, kw_only=True)
class Wider(Charge):
    """A charge with a field that no release has: what a new field of a bill is to the Lua."""

    runs: int = 3


@pytest.fixture
async def running(settings: Settings, r: redis.Redis) -> JobRecorder:
    """A recorder, and the job JOB (vad, short) written, queued and started with token-1."""
    client = aioredis.Redis.from_url(settings.redis_url)
    await write_job(client, settings, OWNER, NewJob(JOB, "short", 30.0, job_type="vad"))
    await client.aclose()
    recorder = JobRecorder(r, settings)
    assert recorder.start(JOB, "token-1", "cpu@test", None).run
    return recorder


async def test_the_outbox_keeps_every_field_a_charge_carries_and_the_stamp(
    running: JobRecorder, r: redis.Redis
) -> None:
    charge = Wider(
        cost_micros=1_500_000, description="vad job — 3 s ✓", gpu_seconds=3.0, billed_ms=3000
    )

    assert running.finish(JOB, "token-1", Status.SUCCESS, charge=charge, owner=OWNER)

    [(_, entry)] = r.xrange(LEDGER)
    written = json.loads(entry[b"bill"])
    assert set(written) == set(asdict(charge)) | set(STAMPED)
    assert {name: written[name] for name in asdict(charge)} == asdict(charge)
    stamp = (written["task_id"], written["user_id"], written["kind"], written["type"])
    assert stamp == (JOB, OWNER, "short", "vad")
    finished_at = float(r.hget(job_key(JOB), "finished_at"))  # type: ignore[arg-type]
    assert written["billed_at"] == pytest.approx(finished_at, abs=1e-3)  # cjson's 14 digits
    bill = Bill.read(entry[b"bill"])  # a reader that does not know `runs` leaves it
    assert (bill.task_id, bill.cost_micros, bill.description) == (
        JOB,
        1_500_000,
        charge.description,
    )


async def test_the_job_keeps_each_field_of_the_end_as_the_worker_wrote_it(
    running: JobRecorder, r: redis.Redis
) -> None:
    end = RunEnd(
        job_id=JOB,
        owner=OWNER,
        status=Status.FAILURE,
        charge=None,
        seconds=2.5,
        error_kind="oom",
        error="torch.OutOfMemoryError: é ✗",
        output='{"text": "✓"}',
        tflops=0.1 + 0.2,
        peak_gpu_memory_bytes=2**50 + 1,
        peak_rss_bytes=7,
        artifacts='[{"name": "a.txt", "size": 1, "sha256": "00"}]',
    )

    assert running.record_end("token-1", end)

    job = decode(r.hgetall(job_key(JOB)))
    written = json.loads(end.to_lua())["job"]
    assert set(written) == {
        "error", "error_kind", "output", "tflops", "peak_gpu_memory_bytes", "peak_rss_bytes",
        "artifacts",
    }  # fmt: skip
    assert {name: job[name] for name in written} == written
    assert job["tflops"] == "0.30000000000000004"  # every digit of the float
    assert job["status"] == "FAILURE"
    assert r.xlen(LEDGER) == 0  # no charge, no bill


async def test_a_job_the_previous_release_started_ends_billed_on_top_of_its_use(
    settings: Settings, r: redis.Redis
) -> None:
    r.hset(job_key(previous.RUNNING), mapping=previous.STARTED)
    month = month_of(float(r.time()[0]))
    r.hset(
        usage_key(OWNER), mapping={f"{month}:billed_ms": 5000, f"{month}:cost_micros": 1_250_000}
    )
    charge = pricing.price(settings, "long", 2.0, job_type="vad")
    recorder = JobRecorder(r, settings)

    assert recorder.finish(previous.RUNNING, "tok", Status.SUCCESS, charge=charge, owner=OWNER)

    [bill] = unwritten(r)
    assert (bill.task_id, bill.user_id, bill.kind, bill.type) == (
        previous.RUNNING,
        OWNER,
        "long",
        "vad",
    )
    assert (bill.cost_micros, bill.billed_ms) == (charge.cost_micros, 2000)
    billed_in = month_of(bill.billed_at)
    before = (5000, 1_250_000) if billed_in == month else (0, 0)  # a month may have turned
    use = decode(r.hgetall(usage_key(OWNER)))
    assert use[f"{billed_in}:billed_ms"] == str(before[0] + 2000)
    assert use[f"{billed_in}:cost_micros"] == str(before[1] + charge.cost_micros)
