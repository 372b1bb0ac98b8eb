"""Jobs of several cards are billed and charged for every card (issue 42): a bill of N cards
says so and counts N times the job's measured and billed seconds, and costs N times as much at
its class's price; the fair queue is credited N times the weight; a budget holds N times a
one-card job's most, so it refuses a 2-card job that a 1-card job of the same duration fits."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

import pytest
import redis
import redis.asyncio as aioredis
from hypothesis import given
from hypothesis import strategies as st

from app import pricing
from app.api.budgets import budget, payment_required
from app.auth import Account
from app.fleet.place import WorkerPlace
from app.settings import Settings
from app.store.keys import job_key, usage_key
from app.store.recorder import Started
from app.store.submit import NewJob, OverBudgetError
from app.wiring.service import job_weight
from app.worker.calls import Ended
from app.worker.ends import RunEnds
from tests.api.helpers import USERS_FILE
from tests.store.support import write_job

SETTINGS = Settings()
BIG = WorkerPlace(host="node-a", gpu_class="big", memory_gb=80.0, price=2.0)
STARTED = Started(True, 1, owner="alice", duration_s=600.0, type="burn")
seconds_run = st.floats(min_value=0, max_value=3000, allow_nan=False)
cards = st.integers(1, 64)


def test_a_bill_of_two_cards_counts_both_in_seconds_and_money() -> None:
    one = pricing.price(SETTINGS, "long", 100.0)
    two = pricing.price(SETTINGS, "long", 100.0, gpus=2)
    assert (two.gpus, two.gpu_seconds, two.billed_seconds) == (2, 200.0, 200.0)
    assert two.cost == 2 * one.cost == Decimal(50)  # 2 x 100 s x 0.25/s
    assert two.description == "Long GPU job on 2 cards"
    assert one.gpus == 1 and one.description == "Long GPU job"


def test_two_cards_of_a_class_cost_their_seconds_times_the_class_price() -> None:
    charge = pricing.price(SETTINGS, "long", 100.0, gpu_class="big", class_price=2.0, gpus=2)
    assert (charge.gpu_class, charge.billed_seconds) == ("big", 200.0)  # seconds stay plain
    assert charge.cost == Decimal(100)  # 200 GPU-seconds x 0.25/s x 2.0
    assert charge.description == "Long GPU job on 2 big cards (price x2)"


def test_the_minimum_and_the_budget_apply_to_each_card() -> None:
    tiny = pricing.price(SETTINGS, "short", 0.02, gpus=4)
    assert (tiny.gpu_seconds, tiny.billed_seconds, tiny.cost) == (0.08, 4.0, Decimal(2))
    assert tiny.description == "Short GPU job on 4 cards (billed the 1 s minimum a card)"
    over = pricing.price(SETTINGS, "short", 7.25, budget_s=5.0, end="timeout", gpus=2)
    assert (over.gpu_seconds, over.billed_seconds, over.cost) == (14.5, 10.0, Decimal(5))
    assert over.description.endswith(
        "stopped at its time limit after 7.2 s (billed its budget of 5 s a card)"
    )


@given(seconds_run, cards)
def test_n_cards_are_n_times_one_card_exactly(seconds: float, gpus: int) -> None:
    one = pricing.price(SETTINGS, "short", seconds, gpu_class="mid", class_price=1.5)
    many = pricing.price(SETTINGS, "short", seconds, gpu_class="mid", class_price=1.5, gpus=gpus)
    assert many.billed_ms == gpus * one.billed_ms
    assert round(many.gpu_seconds * 1000) == gpus * round(one.gpu_seconds * 1000)
    rate = Decimal(repr(SETTINGS.price_per_s("short")))
    exact = rate * Decimal(many.billed_ms) / 1000 * Decimal("1.5")
    assert abs(many.cost - exact) <= Decimal("0.0000005")  # rounded once, not once a card


@pytest.mark.parametrize("gpus", [0, -2, True])
def test_no_card_is_no_price(gpus: int) -> None:
    with pytest.raises(ValueError, match="gpus"):
        pricing.price(SETTINGS, "short", 1.0, gpus=gpus)


def test_a_worker_bills_a_run_of_two_cards_and_says_so() -> None:
    ends = RunEnds(SETTINGS, BIG)
    charge = ends.price("long", STARTED, Ended("success", 100.0), gpus=2)
    assert (charge.gpus, charge.gpu_class, charge.billed_seconds) == (2, "big", 200.0)
    assert charge.cost == Decimal(100)
    outcome, end = ends.of("long", "job-1", STARTED, Ended("success", 100.0), gpus=2)
    assert outcome == "done" and end is not None and end.charge == charge
    _, failed = ends.of("long", "job-1", STARTED, Ended("exception", 3.0, error="x"), gpus=2)
    assert failed is not None and failed.charge is not None
    assert failed.charge.billed_seconds == 6.0


def test_a_preempted_or_checkpointed_run_of_two_cards_is_charged_both() -> None:
    """Yields and checkpoints price a run from its Started, which names its cards."""
    ends = RunEnds(SETTINGS, BIG)
    two = replace(STARTED, gpus=2)
    charge = ends.price("long", two, Ended("preempted", 10.0))
    assert (charge.gpus, charge.billed_seconds) == (2, 20.0)
    assert ends.price("long", STARTED, Ended("preempted", 10.0)).billed_seconds == 10.0


@given(seconds_run, cards)
def test_the_fair_queue_is_charged_every_card(seconds: float, gpus: int) -> None:
    # the item's weight is job_weight(duration_s) x gpus: used weight is counted alike
    assert RunEnds(SETTINGS).used_weight(seconds, gpus) == gpus * job_weight(seconds)
    assert RunEnds(SETTINGS, BIG).used_weight(seconds, gpus) == 2 * gpus * job_weight(seconds)


def test_a_job_of_n_cards_holds_n_times_its_most() -> None:
    account = Account(user_id="a", api_keys=("k",), budget_gpu_seconds=3600.0, budget_cost=1000.0)
    one = budget(account, SETTINGS, "short", 60.0, "burn", class_price=2.0)
    two = budget(account, SETTINGS, "short", 60.0, "burn", class_price=2.0, gpus=2)
    assert one is not None and two is not None
    assert (two.most_ms, two.most_micros) == (2 * one.most_ms, 2 * one.most_micros)
    assert (two.most_ms, two.most_micros) == (120_000, 120_000_000)  # 120 s x 0.5/s x 2.0
    assert (two.billed_ms, two.cost_micros) == (one.billed_ms, one.cost_micros)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("limits", "refused"),
    [({"budget_gpu_seconds": 15.0}, "gpu_seconds"), ({"budget_cost": 8.0}, "cost")],
)
async def test_a_budget_refuses_a_two_card_job_that_one_card_of_it_would_fit(
    redis_url: str, r: redis.Redis, limits: dict[str, float], refused: str
) -> None:
    # a 10 s short job may use 10 GPU-seconds (5.0 at 0.5/s) on one card, twice on two
    settings = Settings(redis_url=redis_url, users_file=USERS_FILE)
    account = Account(user_id="team", api_keys=("k",), **limits)
    client = aioredis.Redis.from_url(redis_url)
    try:
        two = budget(account, settings, "short", 10.0, "burn", gpus=2)
        assert two is not None
        with pytest.raises(OverBudgetError) as exc:
            await write_job(client, settings, "team", NewJob("two", "short", 10.0, budget=two))
        assert exc.value.budget == refused
        unit = " GPU-seconds" if refused == "gpu_seconds" else ""
        most = "20" if refused == "gpu_seconds" else "10"
        assert payment_required(exc.value, two).detail.endswith(f"may use up to {most}{unit}")
        assert not r.exists(job_key("two")) and r.hgetall(usage_key("team")) == {}

        one = budget(account, settings, "short", 10.0, "burn")
        job = NewJob("one", "short", 10.0, budget=one)
        assert await write_job(client, settings, "team", job) == ("one", True)
    finally:
        await client.aclose()
