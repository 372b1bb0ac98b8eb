"""A job's cards in words (issue 42): the cards its run holds ("gpu-node-7: w0 GPU 0, w1 GPU 1"),
the reservation it waits on, and a type's range of cards. Pure functions of what the server
said."""

from __future__ import annotations

from app.card_models import Device, Reservation
from app.client.words import eta
from app.models import JobTypeView


def devices_words(devices: list[Device], host: str | None) -> str:
    """Every card of a run, in order, on its host: "on h1: w0 (GPU 0), w1 (GPU 1)"; a CPU
    worker's simulated card is its worker alone."""
    cards = ", ".join(
        d.worker if d.gpu_id is None else f"{d.worker} (GPU {d.gpu_id})" for d in devices
    )
    return cards if host is None else f"on {host}: {cards}"


def reserved_words(reservation: Reservation, now: float) -> str:
    """The cards set aside for a queued job: "on h1, starts in ~40 s (at 14:03:12)"."""
    return f"on {reservation.host}, {eta(reservation.expected_start_at, now)}"


def gpus_range(job_type: JobTypeView) -> str:
    """The cards a job of a type takes: "1", "4", or "1-64" where a submit picks."""
    low, high = job_type.min_gpus, job_type.max_gpus
    return str(low) if low == high else f"{low}-{high}"
