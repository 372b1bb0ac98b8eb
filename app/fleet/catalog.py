"""The GPU catalog: the classes of card a fleet holds, as the operator declares them in
GPU_CLASSES (issue 41). Each class has a name, its memory in GB (10^9 bytes, as vendors name
cards), a price weight beside the queues' prices (1.0 charges what a job is charged today) and,
optionally, a substring of the device name that identifies its cards:

    {"big": {"memory_gb": 80, "price": 2.0, "match": "A100"},
     "small": {"memory_gb": 24, "price": 1.0}}

GPU_CLASSES is that JSON object inline, or the path of a file that holds it. Unset, the fleet has
one class with no name (a result's gpu_class is null) that serves any need: everything behaves as
it did before there was a catalog. This module imports pydantic alone.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

#: A class's name is written as a job type's is (app/jobs/registry.py): it appears in job types'
#: declarations, submits and URLs.
NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")


class CatalogError(ValueError):
    """GPU_CLASSES cannot be read, or declares a class wrongly; or a need names no class."""


class ClassSpec(BaseModel):
    """What the operator writes for one class: its memory, its price, how its cards are known."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    memory_gb: float = Field(
        gt=0, allow_inf_nan=False, description="memory of one card, in GB (10^9 bytes)"
    )
    price: float = Field(
        gt=0,
        allow_inf_nan=False,
        description="price weight: a GPU-second on this class costs and counts this many times "
        "one at the queue's price",
    )
    match: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="a substring of the device's name (any case) that identifies this class",
    )


class GpuClass(ClassSpec):
    """One class of card; name None is the one class of a fleet without a catalog."""

    name: str | None


#: The one class of a fleet without GPU_CLASSES: no name, price 1.0, and no memory limit known,
#: so that it serves any need (placement and charges as they were before the catalog).
UNNAMED = GpuClass.model_construct(name=None, memory_gb=math.inf, price=1.0, match=None)


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json.loads keeps the last of two equal keys silently; a catalog says each thing once.
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise CatalogError(f"GPU_CLASSES: {key!r} is given twice")
        seen[key] = value
    return seen


def _field_errors(name: str, error: ValidationError) -> str:
    parts = []
    for item in error.errors():
        field = ".".join(str(part) for part in item["loc"]) or "body"
        parts.append(f"{field}: {item['msg']}")
    return f"GPU_CLASSES: class {name!r}: " + "; ".join(parts)


def _parse_class(name: str, body: Any) -> GpuClass:
    if not NAME.match(name):
        raise CatalogError(
            f"GPU_CLASSES: class {name!r}: a name is 1 to 64 of a-z, 0-9, '.', '_', '-', "
            "starting with a letter or digit"
        )
    if not isinstance(body, dict):
        raise CatalogError(f"GPU_CLASSES: class {name!r}: give an object with memory_gb and price")
    try:
        spec = ClassSpec.model_validate(body)
    except ValidationError as error:
        raise CatalogError(_field_errors(name, error)) from None
    return GpuClass(name=name, **spec.model_dump())


@dataclass(frozen=True)
class Catalog:
    """The classes of the fleet, in the order the operator wrote them."""

    classes: tuple[GpuClass, ...]

    @classmethod
    def single(cls) -> Catalog:
        """The catalog of a fleet without GPU_CLASSES: one unnamed class, as before issue 41."""
        return cls((UNNAMED,))

    @classmethod
    def from_setting(cls, value: str | None) -> Catalog:
        """The catalog GPU_CLASSES declares: a JSON object inline, or the path of a JSON file
        (anything not starting with '{'); unset or blank, the single catalog."""
        text = (value or "").strip()
        if not text:
            return cls.single()
        if not text.startswith("{"):
            try:
                text = Path(text).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as error:
                reason = getattr(error, "strerror", None) or str(error)
                raise CatalogError(
                    f"GPU_CLASSES: cannot read the file {value!r}: {reason}"
                ) from None
        return cls.from_json(text)

    @classmethod
    def from_json(cls, text: str) -> Catalog:
        """The catalog a JSON object declares, validated strictly."""
        try:
            data = json.loads(text, object_pairs_hook=_no_duplicate_keys)
        except json.JSONDecodeError as error:
            raise CatalogError(f"GPU_CLASSES: not valid JSON: {error}") from None
        if not isinstance(data, dict) or not data:
            raise CatalogError(
                'GPU_CLASSES: give a JSON object of classes, {"NAME": {"memory_gb": 80, '
                '"price": 1.0}, ...}'
            )
        seen: dict[str, str] = {}
        for name in data:
            other = seen.setdefault(name.lower(), name)
            if other != name:
                raise CatalogError(
                    f"GPU_CLASSES: classes {other!r} and {name!r} differ only in case"
                )
        return cls(tuple(_parse_class(name, body) for name, body in data.items()))

    @property
    def declared(self) -> bool:
        """Whether GPU_CLASSES declared this catalog (else it is the single one)."""
        return any(gpu_class.name is not None for gpu_class in self.classes)

    @property
    def first(self) -> GpuClass:
        """The catalog's first class: a CPU worker's."""
        return self.classes[0]

    def by_name(self, name: str) -> GpuClass | None:
        """The class of this name, exactly; None where the catalog has none."""
        return next((c for c in self.classes if c.name is not None and c.name == name), None)

    def cheapest_then_smallest(self) -> tuple[GpuClass, ...]:
        """The classes by price, then memory, then catalog order: the preference of a job type
        that names no order."""
        return tuple(sorted(self.classes, key=lambda c: (c.price, c.memory_gb)))

    def serving(
        self, min_memory_gb: float | None = None, classes: Sequence[str] | None = None
    ) -> tuple[GpuClass, ...]:
        """The classes that meet a need, in catalog order: among the named classes (all where
        None), those with at least min_memory_gb. A name the catalog lacks is a CatalogError;
        an empty answer means no class can ever serve the need."""
        allowed = None if classes is None else set(classes)
        if allowed is not None:
            unknown = sorted(name for name in allowed if self.by_name(name) is None)
            if unknown:
                raise CatalogError(
                    f"unknown GPU class {', '.join(map(repr, unknown))}; the catalog has "
                    f"{self.describe()}"
                )
        return tuple(
            c
            for c in self.classes
            if (allowed is None or c.name in allowed)
            and (min_memory_gb is None or c.memory_gb >= min_memory_gb)
        )

    def dearest_price(self, names: Sequence[str] = ()) -> float:
        """The highest price weight among the named classes (all of the catalog's where none
        are named): the most a job that may run on them can cost a GPU-second."""
        chosen = [c for c in self.classes if not names or c.name in names]
        return max((c.price for c in chosen), default=1.0)

    def describe(self) -> str:
        """The catalog in one line, for errors and logs."""
        if not self.declared:
            return "no classes (GPU_CLASSES is unset)"
        return ", ".join(
            f"{c.name} ({c.memory_gb:g} GB" + (f", match {c.match!r})" if c.match else ")")
            for c in self.classes
        )
