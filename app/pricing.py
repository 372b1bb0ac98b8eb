"""Pricing: what a run costs its account, exactly, as a Charge (app/bill.py, where a bill's
fields and shapes are). The charge itself is written once per task id, atomically with the
job's end (see app/store/lua/finish.lua and store.JobRecorder.finish).

Money is counted in integer micro-units (millionths of the currency) and time in whole
milliseconds, so bills add up exactly: a bill is the kind's price per second times the seconds
billed, max(MIN_BILLED_S, the GPU-seconds used, rounded up to the millisecond), times the price
weight of the class of card it ran on (GPU_CLASSES; 1.0 without a catalog), rounded to the
micro-unit only where that product is not whole (at most half a micro-unit, never to the cent).
The seconds billed stay plain GPU-time whatever the class. Only totals that a person reads are
rounded, where they are shown.

A job of several cards (gpus N, issue 42) is billed every card: its GPU-seconds and the seconds
billed are N times its own (the minimum, and the cap at its duration, apply to its wall-clock
seconds first, as they do to a one-card job's), and so is its cost.
"""

from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal

from app.bill import MICROS, MS, Charge, check_gpus
from app.models import Kind
from app.settings import Settings

#: MICROS, MS and Charge are app/bill.py's, named here as well for the callers of price().
__all__ = [
    "DESCRIPTIONS",
    "ENDED",
    "MICROS",
    "MS",
    "Charge",
    "micros_per_s",
    "milliseconds",
    "price",
    "weighted_micros",
]

DESCRIPTIONS: dict[Kind, str] = {"short": "Short GPU job", "long": "Long GPU job"}


def micros_per_s(price: float) -> int:
    """A price setting (a float, as the environment gives it) in micro-units per second."""
    return int(Decimal(repr(price)).scaleb(6).to_integral_value())


def milliseconds(seconds: float) -> int:
    """Seconds as whole milliseconds, a started millisecond counting in full. The float's
    shortest decimal form is used, so 0.07 s is 70 ms and not 71."""
    return math.ceil(Decimal(repr(seconds)) * MS)


#: How a bill says its run ended, where the run did not simply succeed.
ENDED = {
    "cancelled": "cancelled",
    "timeout": "stopped at its time limit",
    "exception": "failed",
    "crashed": "crashed",
    "oom": "out of GPU memory",
    "internal": "failed on an error of the service",
    "environment": "failed to build its environment",
    "exit_code": "its script failed",
}


def price(
    settings: Settings,
    kind: Kind,
    gpu_seconds: float,
    *,
    job_type: str = "burn",
    end: str | None = None,
    budget_s: float | None = None,
    gpu_class: str | None = None,
    class_price: float = 1.0,
    gpus: int = 1,
) -> Charge:
    """The charge for gpu_seconds of a job of this kind: the kind's price per second times the
    seconds billed. gpu_seconds are the job's wall-clock seconds (what its runs measured) and
    budget_s its declared wall-clock limit, whatever its count of cards: a job of `gpus` cards
    is billed each of them, so the charge's GPU-seconds, seconds billed and cost are `gpus`
    times one card's. Every run that held the GPU pays for the seconds it ran, whatever its end
    (which the description says), at least MIN_BILLED_S, and never more than its budget
    (budget_s, the job's duration_s: what admission held, so a bill cannot overrun a budget;
    the grace a job has past it to stop is the service's cost, and a run that used it ended
    `timeout`, its work not kept: app/worker/deadline.py). On a card of a class (gpu_class,
    which the charge names) the cost is weighted by its class_price; the seconds are not."""
    check_gpus(gpus)
    # one card's milliseconds: the minimum and the budget are wall-clock, as the job declared
    used_ms = milliseconds(gpu_seconds)
    run_ms = used_ms if budget_s is None else min(used_ms, milliseconds(budget_s))
    card_ms = max(milliseconds(settings.min_billed_s), run_ms)
    billed_ms = gpus * card_ms
    rate = micros_per_s(settings.price_per_s(kind))
    cost_micros = weighted_micros(rate * billed_ms, class_price)
    description = DESCRIPTIONS[kind] if job_type == "burn" else f"{job_type} job ({kind} queue)"
    if gpu_class is not None:
        cards = f"{gpus} {gpu_class} cards" if gpus > 1 else gpu_class
        description += f" on {cards} (price x{class_price:g})"
    elif gpus > 1:
        description += f" on {gpus} cards"
    if end in ENDED:
        description += f", {ENDED[end]} after {gpu_seconds:.1f} s"
    each = " a card" if gpus > 1 else ""
    if card_ms > run_ms:
        description += f" (billed the {card_ms / MS:g} s minimum{each})"
    elif run_ms < used_ms:
        description += f" (billed its budget of {run_ms / MS:g} s{each})"
    return Charge(
        cost_micros=cost_micros,
        description=description,
        gpu_seconds=gpus * used_ms / MS,
        billed_ms=billed_ms,
        gpu_class=gpu_class,
        gpus=gpus,
    )


def weighted_micros(micro_ms: int, class_price: float) -> int:
    """Micro-unit-milliseconds (a rate per second times milliseconds) in whole micro-units,
    weighted by a class's price (its shortest decimal form, so 1.1 is 1.1): half a micro-unit
    rounds up, and at price 1.0 the sum is what it was before classes, to the micro-unit."""
    exact = Decimal(micro_ms) * Decimal(repr(class_price)) / MS
    return int(exact.to_integral_value(rounding=ROUND_HALF_UP))
