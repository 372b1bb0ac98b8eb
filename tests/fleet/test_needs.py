"""What a job needs of its card: the classes it may run on, in its order of preference; a
submit that narrows its type's need and never widens it; and each refusal naming its field."""

from __future__ import annotations

import json
import math

import pytest
from pydantic import ValidationError

from app.fleet.catalog import Catalog
from app.fleet.needs import GpuNeed, NeedError, allowed_classes, serving

FLEET = Catalog.from_json(
    json.dumps(
        {
            "big": {"memory_gb": 80, "price": 2.0},
            "mid": {"memory_gb": 24, "price": 1.0},
            "small": {"memory_gb": 16, "price": 1.0},
        }
    )
)
ONE = Catalog.from_json(json.dumps({"only": {"memory_gb": 24, "price": 1.0}}))
NONE = Catalog.single()


def refused(
    catalog: Catalog,
    type_gpu: list[str] | None,
    type_min_gb: float | None,
    body: GpuNeed | None,
) -> NeedError:
    with pytest.raises(NeedError) as raised:
        allowed_classes(catalog, type_gpu, type_min_gb, body)
    return raised.value


def test_a_type_without_an_order_prefers_the_cheapest_then_the_smallest() -> None:
    assert allowed_classes(FLEET, None, None, None) == ("small", "mid", "big")


def test_a_type_s_order_is_its_preference() -> None:
    assert allowed_classes(FLEET, ["big", "small"], None, None) == ("big", "small")


def test_memory_leaves_out_the_classes_too_small() -> None:
    assert allowed_classes(FLEET, None, 20, None) == ("mid", "big")
    assert allowed_classes(FLEET, ["small", "big"], 40, None) == ("big",)
    assert allowed_classes(FLEET, None, 80, None) == ("big",)  # exactly enough is enough


def test_a_body_narrows_the_classes_keeping_the_type_s_order() -> None:
    need = GpuNeed(classes=["small", "big"])
    assert allowed_classes(FLEET, ["big", "mid", "small"], None, need) == ("big", "small")
    assert allowed_classes(FLEET, None, None, need) == ("small", "big")


def test_a_body_narrows_the_memory() -> None:
    assert allowed_classes(FLEET, None, 20, GpuNeed(min_memory_gb=40)) == ("big",)


def test_a_body_asking_less_memory_than_its_type_gets_the_type_s() -> None:
    assert allowed_classes(FLEET, None, 40, GpuNeed(min_memory_gb=1)) == ("big",)


def test_a_body_class_the_type_does_not_allow_names_gpu_classes() -> None:
    error = refused(FLEET, ["big"], None, GpuNeed(classes=["big", "small"]))
    assert (error.field, error.kind) == ("gpu.classes", "gpu_class_not_allowed")
    assert "'small'" in error.message and "never widens" in error.message


def test_an_unknown_body_class_names_gpu_classes() -> None:
    error = refused(FLEET, None, None, GpuNeed(classes=["huge"]))
    assert (error.field, error.kind) == ("gpu.classes", "gpu_class_unknown")
    assert "'huge'" in error.message and "big (80 GB)" in error.message


def test_an_unknown_class_of_the_type_names_gpu() -> None:
    error = refused(FLEET, ["a100", "big"], None, None)
    assert (error.field, error.kind) == ("gpu", "gpu_class_unknown")
    assert "'a100'" in error.message


def test_a_need_no_class_meets_names_gpu() -> None:
    error = refused(FLEET, None, 100, None)
    assert (error.field, error.kind) == ("gpu", "gpu_need_unmet")
    assert "at least 100 GB" in error.message
    error = refused(FLEET, ["small"], None, GpuNeed(min_memory_gb=20))
    assert (error.field, error.kind) == ("gpu", "gpu_need_unmet")


def test_without_a_catalog_any_card_serves_and_memory_is_taken_on_trust() -> None:
    assert allowed_classes(NONE, None, None, None) == ()
    assert allowed_classes(NONE, None, 40, GpuNeed(min_memory_gb=1000)) == ()


def test_without_a_catalog_a_need_that_names_classes_is_refused() -> None:
    error = refused(NONE, None, None, GpuNeed(classes=["big"]))
    assert (error.field, error.kind) == ("gpu.classes", "gpu_class_unknown")
    assert refused(NONE, ["big"], None, None).field == "gpu"


def test_a_catalog_of_one_class_serves_as_any_other() -> None:
    assert allowed_classes(ONE, None, None, None) == ("only",)
    assert refused(ONE, None, 40, None).field == "gpu"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"classes": []}, "classes"),
        ({"classes": ["big", "big"]}, "classes"),
        ({"classes": ["Big"]}, "classes"),
        ({"classes": "big"}, "classes"),
        ({"min_memory_gb": 0}, "min_memory_gb"),
        ({"min_memory_gb": -1}, "min_memory_gb"),
        ({"min_memory_gb": math.inf}, "min_memory_gb"),
        ({"min_memory_gb": "40"}, "min_memory_gb"),
        ({"gpus": 2}, "gpus"),
    ],
)
def test_a_malformed_need_is_refused_naming_its_field(body: object, field: str) -> None:
    with pytest.raises(ValidationError) as raised:
        GpuNeed.model_validate(body)
    assert raised.value.errors()[0]["loc"][0] == field


def test_the_fingerprint_is_the_need_as_stated() -> None:
    assert GpuNeed(classes=["big"]).fingerprint() == '{"classes":["big"]}'
    assert GpuNeed(min_memory_gb=40).fingerprint() != GpuNeed(min_memory_gb=41).fingerprint()


def test_the_classes_that_serve_a_type() -> None:
    assert serving(FLEET, None, 20) == ["mid", "big"]
    assert serving(FLEET, ["a100"], None) == []
    assert serving(FLEET, None, 100) == []
    assert serving(NONE, None, 40) is None
    assert serving(NONE, ["big"], None) == []
