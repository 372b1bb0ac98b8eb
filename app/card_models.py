"""Wire shapes of a job's cards (issue 42): each card its run holds, and the reservation a queued
job of several cards waits on. Kept apart from app/models.py, which names them, for its length."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, Field

#: The most cards one job may take, all of one class on one host (a job type's `gpus`).
MAX_GPUS = 64


def _whole(value: Any) -> Any:
    """A count as JSON Schema's integer reads one: 2.0 is 2 (a bool is no count)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


#: A submit's count of cards: a whole number from 1 to MAX_GPUS (strictly: "2" is not one).
GpuCount = Annotated[int, Field(ge=1, le=MAX_GPUS), BeforeValidator(_whole)]


class Device(BaseModel):
    """One card of a job's run: the worker whose card it is, and the card's index (null on a
    CPU worker, whose card is simulated)."""

    worker: str
    gpu_id: int | None = None


class Reservation(BaseModel):
    """The cards set aside for a queued job whose turn has come: on which host, and when they
    should all be free (by the running jobs' declared time limits, the grace included)."""

    host: str
    expected_start_at: float = Field(description="Unix seconds")
