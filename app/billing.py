"""Pricing: what a run costs its account, exactly. The charge itself is written once per task id,
atomically with the job's end (see app/store/lua/finish.lua and store.JobRecorder.finish).

Money is counted in integer micro-units (millionths of the currency) and time in whole
milliseconds, so bills add up exactly: a bill is the kind's price per second times the seconds
billed, max(MIN_BILLED_S, the GPU-seconds used, rounded up to the millisecond), rounded to the
micro-unit only when the price is not a whole thousandth per second (at most half a micro-unit,
never to the cent). Only totals that a person reads are rounded, where they are shown.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from app.models import BillingRecord, Kind
from app.settings import Settings

DESCRIPTIONS: dict[Kind, str] = {"short": "Short GPU job", "long": "Long GPU job"}
MICROS = 1_000_000  # micro-units in one unit of money
MS = 1000  # milliseconds in a second


@dataclass(frozen=True)
class Charge:
    """One bill: its exact cost, what it says, the GPU-seconds the run used and those billed."""

    cost: Decimal
    description: str
    gpu_seconds: float
    billed_seconds: float = 0.0

    @property
    def micros(self) -> int:
        """The cost in micro-units."""
        return int(Decimal(self.cost) * MICROS)


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
}


def price(
    settings: Settings,
    kind: Kind,
    gpu_seconds: float,
    *,
    job_type: str = "burn",
    end: str | None = None,
    budget_s: float | None = None,
) -> Charge:
    """The charge for gpu_seconds of a job of this kind: the kind's price per second times the
    seconds billed. Every run that held the GPU pays for the seconds it ran, whatever its end
    (which the description says), at least MIN_BILLED_S, and never more than its budget
    (budget_s, the job's duration_s: what admission held, so a bill cannot overrun a budget;
    the grace a job has past it to stop is not billed)."""
    used_ms = milliseconds(gpu_seconds)
    run_ms = used_ms if budget_s is None else min(used_ms, milliseconds(budget_s))
    billed_ms = max(milliseconds(settings.min_billed_s), run_ms)
    rate = micros_per_s(settings.price_per_s(kind))
    cost_micros = (rate * billed_ms + MS // 2) // MS  # exact when rate is a multiple of MS
    description = DESCRIPTIONS[kind] if job_type == "burn" else f"{job_type} job ({kind} queue)"
    if end in ENDED:
        description += f", {ENDED[end]} after {gpu_seconds:.1f} s"
    if billed_ms > run_ms:
        description += f" (billed the {billed_ms / MS:g} s minimum)"
    elif run_ms < used_ms:
        description += f" (billed its budget of {run_ms / MS:g} s)"
    return Charge(
        cost=Decimal(cost_micros).scaleb(-6),
        description=description,
        gpu_seconds=used_ms / MS,
        billed_seconds=billed_ms / MS,
    )


def record(bill: str | Mapping[str, Any]) -> BillingRecord:
    """A billing record as finish.lua writes it (JSON text, or parsed): cost in micro-units,
    seconds billed in milliseconds. Records kept from before exact billing (a float cost) read
    as they were."""
    raw = json.loads(bill) if isinstance(bill, str) else bill
    micros = int(raw["cost_micros"]) if "cost_micros" in raw else round(raw["cost"] * MICROS)
    billed_ms = raw.get("billed_ms")
    return BillingRecord(
        user_id=raw["user_id"],
        task_id=raw["task_id"],
        cost=micros / MICROS,  # the float nearest the exact cost; JSON writes it digit for digit
        cost_micros=micros,
        description=raw["description"],
        kind=raw["kind"],
        gpu_seconds=raw["gpu_seconds"],
        billed_seconds=raw["gpu_seconds"] if billed_ms is None else billed_ms / MS,
        billed_at=raw["billed_at"],
        type=raw.get("type") or "burn",
    )
