"""Charged by what the card is worth (issue 41): a bill's cost is the seconds billed times the
queue's price times the class's price weight, exactly; the seconds billed stay plain GPU-time;
the fair-share charge is weighted alike; a fleet without a catalog is charged as before."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from app import pricing
from app.fleet.place import WorkerPlace
from app.models import Kind
from app.settings import Settings
from app.store.recorder import Started
from app.wiring.service import job_weight
from app.worker.calls import Ended
from app.worker.ends import RunEnds

SETTINGS = Settings()
BIG = WorkerPlace(host="node-a", gpu_class="big", memory_gb=80.0, price=2.0)
STARTED = Started(True, 1, owner="alice", duration_s=600.0, type="burn")
seconds_run = st.floats(min_value=0, max_value=3000, allow_nan=False)
kinds: st.SearchStrategy[Kind] = st.sampled_from(["short", "long"])


def test_an_hour_on_a_price_2_card_costs_two_on_a_price_1_card() -> None:
    plain = pricing.price(SETTINGS, "long", 3600.0)
    big = pricing.price(SETTINGS, "long", 3600.0, gpu_class="big", class_price=2.0)
    assert big.cost == 2 * plain.cost == Decimal("1800")  # 3600 s x 0.25/s x 2.0
    assert big.billed_seconds == plain.billed_seconds == 3600.0  # GPU-time stays plain
    assert (big.gpu_class, plain.gpu_class) == ("big", None)
    assert big.description == "Long GPU job on big (price x2)"


def test_the_minimum_is_billed_in_plain_seconds_and_weighted_in_money() -> None:
    charge = pricing.price(SETTINGS, "short", 0.02, gpu_class="big", class_price=2.0)
    assert charge.billed_seconds == SETTINGS.min_billed_s
    assert charge.cost == Decimal("0.5") * 2  # the 1 s minimum at 0.5/s, on a price-2.0 card


@given(seconds_run, kinds)
def test_the_weighted_cost_is_exact_to_half_a_micro_unit(seconds: float, kind: Kind) -> None:
    charge = pricing.price(SETTINGS, kind, seconds, gpu_class="mid", class_price=1.5)
    rate = Decimal(repr(SETTINGS.price_per_s(kind)))
    exact = rate * Decimal(repr(charge.billed_seconds)) * Decimal("1.5")
    assert abs(charge.cost - exact) <= Decimal("0.0000005")


@given(seconds_run, kinds)
def test_price_1_charges_what_a_fleet_without_a_catalog_is_charged(
    seconds: float, kind: Kind
) -> None:
    weighted = pricing.price(SETTINGS, kind, seconds, class_price=1.0)
    assert weighted == pricing.price(SETTINGS, kind, seconds)


def test_a_worker_prices_its_runs_by_its_place() -> None:
    charge = RunEnds(SETTINGS, BIG).price("long", STARTED, Ended("success", 100.0))
    assert (charge.gpu_class, charge.billed_seconds, charge.cost) == ("big", 100.0, Decimal(50))


def test_a_worker_told_no_place_charges_as_before_and_names_no_class() -> None:
    ends = RunEnds(SETTINGS)
    assert (ends.place.gpu_class, ends.place.price) == (None, 1.0)
    assert ends.place.host  # this machine's name, or WORKER_HOST
    charge = ends.price("long", STARTED, Ended("success", 100.0))
    assert charge == pricing.price(SETTINGS, "long", 100.0, budget_s=600.0)


@given(seconds_run)
def test_the_fair_share_charge_is_the_seconds_times_the_class_price(seconds: float) -> None:
    assert RunEnds(SETTINGS).used_weight(seconds) == job_weight(seconds)
    assert RunEnds(SETTINGS, BIG).used_weight(seconds) == 2 * job_weight(seconds)
