"""Pricing, exactly: a bill is the price per second times the seconds billed (at least
MIN_BILLED_S, in whole milliseconds), in integer micro-units, never rounded to the cent."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app import pricing
from app.bill import Bill
from app.settings import Settings

SETTINGS = Settings()
NO_FLOOR = Settings(min_billed_s=0)
durations = st.floats(min_value=5e-324, max_value=3000, allow_nan=False)


@given(durations, st.sampled_from(["short", "long"]))
def test_a_bill_is_the_price_times_the_seconds_billed_and_never_zero(
    seconds: float, kind: str
) -> None:
    for settings in (SETTINGS, NO_FLOOR):
        charge = pricing.price(settings, kind, seconds)  # type: ignore[arg-type]
        rate = Decimal(repr(settings.price_per_s(kind)))  # type: ignore[arg-type]
        billed = Decimal(repr(charge.billed_seconds))
        assert charge.cost == rate * billed  # exact, no rounding at all
        assert charge.cost > 0
        assert billed >= Decimal(repr(seconds))  # a started millisecond counts in full
        assert billed >= Decimal(repr(settings.min_billed_s))


def test_a_tiny_job_is_billed_the_minimum() -> None:
    charge = pricing.price(SETTINGS, "long", 0.0199)
    assert (charge.cost, charge.gpu_seconds, charge.billed_seconds) == (Decimal("0.25"), 0.02, 1)
    assert charge.description == "Long GPU job (billed the 1 s minimum)"


@pytest.mark.parametrize(
    ("seconds", "billed"), [(0.07, 0.07), (1.001, 1.001), (0.0199, 0.02), (5e-324, 0.001)]
)
def test_seconds_are_billed_in_whole_milliseconds_from_their_decimal_form(
    seconds: float, billed: float
) -> None:
    assert pricing.price(NO_FLOOR, "short", seconds).billed_seconds == billed


def test_a_price_that_is_not_a_whole_thousandth_a_second_rounds_each_bill_to_the_micro_unit() -> (
    None
):
    settings = Settings(price_short_per_s=0.000694, min_billed_s=0)  # 2.50 an hour
    charge = pricing.price(settings, "short", 0.001)  # 0.694 micro-units
    assert (charge.cost, charge.cost_micros) == (Decimal("0.000001"), 1)


@pytest.mark.parametrize("price", ["0.0000001", "1e-9", "inf", "nan", "-1"])
def test_a_price_finer_than_a_micro_unit_or_not_finite_is_refused(
    price: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PRICE_LONG_PER_S", price)
    with pytest.raises(ValueError, match="price_long_per_s"):
        Settings()


def test_a_stored_record_from_before_exact_billing_reads_as_it_was() -> None:
    text = (
        '{"user_id": "u", "task_id": "t", "kind": "short", "cost": 1.25,'
        ' "description": "Short GPU job", "gpu_seconds": 2.5, "billed_at": 1.0}'
    )
    record = Bill.read(text).record()
    assert (record.cost, record.cost_micros, record.billed_seconds) == (1.25, 1_250_000, 2.5)


@pytest.mark.parametrize(
    ("end", "says"),
    [
        ("cancelled", "cancelled after 2.5 s"),
        ("timeout", "stopped at its time limit after 2.5 s"),
        ("exception", "failed after 2.5 s"),
        ("crashed", "crashed after 2.5 s"),
        ("oom", "out of GPU memory after 2.5 s"),
        ("internal", "failed on an error of the service after 2.5 s"),
        (None, "Short GPU job"),
    ],
)
def test_a_bill_says_how_its_run_ended(end: str | None, says: str) -> None:
    charge = pricing.price(SETTINGS, "short", 2.5, end=end)
    assert charge.description.endswith(says)
    assert charge.billed_seconds == 2.5


def test_a_bill_is_capped_at_the_budget_and_floored_at_the_minimum() -> None:
    capped = pricing.price(SETTINGS, "short", 7.25, end="timeout", budget_s=5)
    assert (capped.gpu_seconds, capped.billed_seconds) == (7.25, 5.0)
    assert capped.description == (
        "Short GPU job, stopped at its time limit after 7.2 s (billed its budget of 5 s)"
    )
    assert capped.cost == pricing.price(SETTINGS, "short", 5).cost
    tiny = pricing.price(SETTINGS, "short", 3, budget_s=0.5)  # a budget under MIN_BILLED_S
    assert (tiny.billed_seconds, tiny.description) == (
        1.0,
        "Short GPU job (billed the 1 s minimum)",
    )
    assert pricing.price(SETTINGS, "short", 3, budget_s=5).billed_seconds == 3
