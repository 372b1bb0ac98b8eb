"""A job type's count of cards (issue 42): `@job(gpus=N)` or `gpus=(LOW, HIGH)`, kept as a range,
one card when it says nothing; anything else stops the process at start (a RegistryError)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from app.card_models import MAX_GPUS
from app.jobs import JobContext, RegistryError, job, load_registry


class Nothing(BaseModel):
    pass


def declared(gpus: object) -> tuple[int, int]:
    """The range a type declared with gpus=… is kept as."""

    def run(ctx: JobContext, inp: Nothing) -> Nothing:
        return inp

    return job(name="gpus-probe", gpus=gpus)(run).gpus  # type: ignore[arg-type]


def test_a_type_takes_one_card_unless_it_says_otherwise() -> None:
    @job(name="one-card")
    def one(ctx: JobContext, inp: Nothing) -> Nothing:
        return inp

    assert one.gpus == (1, 1)


@pytest.mark.parametrize(
    ("gpus", "kept"),
    [(1, (1, 1)), (4, (4, 4)), ((1, 8), (1, 8)), ((2, 2), (2, 2)), ((1, MAX_GPUS), (1, 64))],
)
def test_a_count_or_a_range_is_kept_as_a_range(gpus: object, kept: tuple[int, int]) -> None:
    assert declared(gpus) == kept


@pytest.mark.parametrize(
    "gpus",
    [0, -1, 65, (0, 2), (3, 2), (1, 65), (1,), (1, 2, 3), [1, 2], 2.0, "2", True, (True, 2), None],
    ids=repr,
)
def test_anything_else_is_a_registry_error_that_names_the_type(gpus: object) -> None:
    with pytest.raises(RegistryError, match=r"'gpus-probe': gpus is a whole number of cards"):
        declared(gpus)


def test_the_script_type_takes_up_to_the_most_any_job_may() -> None:
    """Its real cap, the fleet's largest host, is the submit's to check (tests/api)."""
    registry = load_registry(entry_points=False)
    script, burn = registry.get("script"), registry.get("burn")
    assert script is not None and script.gpus == (1, MAX_GPUS)
    assert burn is not None and burn.gpus == (1, 1)
