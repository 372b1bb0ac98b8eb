"""Pricing: what a finished job costs its account. The charge itself is written once per task id,
atomically with the job's end (see app/lua/finish.lua and store.JobRecorder.finish)."""

from __future__ import annotations

from dataclasses import dataclass

from app.models import Kind
from app.settings import Settings

DESCRIPTIONS: dict[Kind, str] = {"short": "Short GPU job", "long": "Long GPU job"}


@dataclass(frozen=True)
class Charge:
    """One bill: its cost, what it says, and the GPU-seconds it is for."""

    cost: float
    description: str
    gpu_seconds: float


def price(settings: Settings, kind: Kind, gpu_seconds: float, *, cancelled: bool = False) -> Charge:
    """The charge for gpu_seconds of a job of this kind: the kind's rate per second, rounded to
    the cent. A job cancelled while running pays for the seconds it ran."""
    cost = round(settings.price_per_s(kind) * gpu_seconds, 2)
    description = DESCRIPTIONS[kind] + (
        f", cancelled after {gpu_seconds:.1f} s" if cancelled else ""
    )
    return Charge(cost=cost, description=description, gpu_seconds=round(gpu_seconds, 3))
