"""What a job needs of its card (issue 41), and the classes of the catalog that meet it.

A job type declares its need (`@job(..., gpu=["big", "small"], min_gpu_memory_gb=40)`): the
classes it may run on, in order of preference, and the memory it needs. A submit may narrow that
need with the body's `gpu` ({"classes": [...], "min_memory_gb": N}), never widen it:

- a class the body names must be one the type allows (else a 422 naming `gpu.classes`);
- the memory needed is the larger of the type's and the body's: a body that asks for less than
  its type needs is given the type's, not refused (it widens nothing);
- the preference order is the type's, else the catalog's cheapest class first, then the
  smallest; a body's own order is not a preference (it only narrows the set).

A class the catalog lacks is a 422 (the body's names `gpu.classes`, the type's names `gpu`); a
need that no class of the catalog meets is a 422 naming `gpu`. Without a catalog (GPU_CLASSES
unset) any card serves any job: the answer is () (any card), a memory need is taken on trust
(no card's memory is known), and a need that names classes is a 422 (there are none to name).
This module imports pydantic and the catalog alone.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from app.fleet.catalog import NAME, Catalog

#: The fields a NeedError names, as the submit's 422 puts them in `loc` (after "body").
CLASSES_FIELD = "gpu.classes"
MEMORY_FIELD = "gpu.min_memory_gb"
NEED_FIELD = "gpu"
#: The most classes a submit's `gpu.classes` may name.
MAX_CLASSES = 64
#: A class's name, as the schema states it (the catalog's own rule).
ClassName = Annotated[str, StringConstraints(pattern=NAME.pattern)]
#: A submit's classes: 1 to MAX_CLASSES distinct names (the schema says so: uniqueItems).
ClassList = Annotated[
    list[ClassName],
    Field(min_length=1, max_length=MAX_CLASSES, json_schema_extra={"uniqueItems": True}),
]


class NeedError(ValueError):
    """A need the catalog cannot serve: `field` is the body's field to name in the 422
    (gpu.classes, gpu.min_memory_gb, or gpu for the need as a whole), `kind` the error's type."""

    def __init__(self, field: str, message: str, kind: str = "gpu_need") -> None:
        super().__init__(message)
        self.field, self.message, self.kind = field, message, kind


class GpuNeed(BaseModel):
    """A submit's `gpu`: narrows what its job type needs of a card, never widens it."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    classes: ClassList | None = Field(
        None,
        description="the GPU classes the job may run on, among those its type allows (GET "
        "/job-types); distinct names. The type's order of preference (else the cheapest class "
        "first) still holds",
    )
    min_memory_gb: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="the memory of one card the job needs, in GB (10^9 bytes); below its "
        "type's own need, the type's holds",
    )

    @field_validator("classes")
    @classmethod
    def _distinct_names(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and len(set(value)) != len(value):
            raise ValueError("each class is named once")
        return value

    def fingerprint(self) -> str:
        """The need as canonical text, for an Idempotency-Key's fingerprint."""
        return self.model_dump_json(exclude_none=True)


@functools.lru_cache(maxsize=8)
def catalog_of(setting: str | None) -> Catalog:
    """The catalog GPU_CLASSES declares, read once per process and value (the settings checked
    it at start, so it reads here too)."""
    return Catalog.from_setting(setting)


def _names(names: Sequence[str]) -> str:
    return ", ".join(map(repr, names))


def _type_classes(catalog: Catalog, type_gpu: Sequence[str]) -> None:
    """A NeedError (naming `gpu`) when the type names a class the catalog lacks."""
    unknown = [name for name in type_gpu if catalog.by_name(name) is None]
    if unknown:
        raise NeedError(
            NEED_FIELD,
            f"this job type runs only on GPU class {_names(unknown)}, which this deployment's "
            f"catalog lacks; the catalog has {catalog.describe()}",
            "gpu_class_unknown",
        )


def _body_classes(catalog: Catalog, type_gpu: Sequence[str] | None, classes: list[str]) -> None:
    """A NeedError (naming `gpu.classes`) for a class the catalog lacks, or one its type does
    not allow (a submit narrows its type's need, never widens it)."""
    unknown = [name for name in classes if catalog.by_name(name) is None]
    if unknown:
        raise NeedError(
            CLASSES_FIELD,
            f"unknown GPU class {_names(unknown)}; the catalog has {catalog.describe()}",
            "gpu_class_unknown",
        )
    outside = [name for name in classes if type_gpu is not None and name not in type_gpu]
    if outside:
        assert type_gpu is not None
        raise NeedError(
            CLASSES_FIELD,
            f"this job type may run only on {_names(type_gpu)}: a submit narrows that, never "
            f"widens it (not {_names(outside)})",
            "gpu_class_not_allowed",
        )


def needed_memory(type_min_gb: float | None, body_min_gb: float | None) -> float | None:
    """The memory a job needs: the larger of its type's and its submit's (None: no need)."""
    given = [gb for gb in (type_min_gb, body_min_gb) if gb is not None]
    return max(given) if given else None


def allowed_classes(
    catalog: Catalog,
    type_gpu: Sequence[str] | None,
    type_min_gb: float | None,
    body: GpuNeed | None,
) -> tuple[str, ...]:
    """The names of the classes a job may run on, in its order of preference: its type's, else
    the cheapest class first, then the smallest; () without a catalog (any card). A NeedError
    when the need names a class the catalog lacks, widens its type's, or no class meets it."""
    classes = None if body is None else body.classes
    if not catalog.declared:
        if type_gpu or classes:
            field = NEED_FIELD if type_gpu else CLASSES_FIELD
            raise NeedError(
                field,
                "this deployment has no GPU classes (GPU_CLASSES is unset): a job cannot name one",
                "gpu_class_unknown",
            )
        return ()
    if type_gpu:
        _type_classes(catalog, type_gpu)
    if classes is not None:
        _body_classes(catalog, type_gpu, classes)
    memory = needed_memory(type_min_gb, None if body is None else body.min_memory_gb)
    order = list(type_gpu) if type_gpu else [str(c.name) for c in catalog.cheapest_then_smallest()]
    chosen = tuple(
        name
        for name in order
        if (classes is None or name in classes)
        and (memory is None or _memory(catalog, name) >= memory)
    )
    if not chosen:
        raise NeedError(
            NEED_FIELD,
            f"no GPU class of the catalog meets this need ({_need(order, classes, memory)}); "
            f"the catalog has {catalog.describe()}",
            "gpu_need_unmet",
        )
    return chosen


def _memory(catalog: Catalog, name: str) -> float:
    found = catalog.by_name(name)
    assert found is not None  # the names were checked against the catalog
    return found.memory_gb


def _need(order: Sequence[str], classes: Sequence[str] | None, memory: float | None) -> str:
    names = [name for name in order if classes is None or name in classes]
    said = f"one of {_names(names)}"
    return said if memory is None else f"{said} with at least {memory:g} GB"


def serving(
    catalog: Catalog, type_gpu: Sequence[str] | None, type_min_gb: float | None
) -> list[str] | None:
    """The classes that can serve a job type's jobs, in its preference order (GET /job-types):
    None without a catalog (any card), [] when none can (a submit of it is then a 422)."""
    if not catalog.declared:
        return [] if type_gpu else None
    try:
        return list(allowed_classes(catalog, type_gpu, type_min_gb, None))
    except NeedError:
        return []
