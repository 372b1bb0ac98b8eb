"""The GPU catalog: read from GPU_CLASSES inline or from a file, refused with a message that
names the class and the field, and its orderings."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from app.fleet.catalog import Catalog, CatalogError

FLEET = {
    "big": {"memory_gb": 80, "price": 2.0, "match": "A100"},
    "mid": {"memory_gb": 24, "price": 1.0},
    "small": {"memory_gb": 16, "price": 1.0, "match": "T4"},
}


def test_an_inline_catalog_keeps_the_operators_order() -> None:
    catalog = Catalog.from_setting(json.dumps(FLEET))
    assert [c.name for c in catalog.classes] == ["big", "mid", "small"]
    big = catalog.classes[0]
    assert (big.memory_gb, big.price, big.match) == (80, 2.0, "A100")
    assert catalog.classes[1].match is None
    assert catalog.declared and catalog.first is big


def test_a_catalog_is_read_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "classes.json"
    path.write_text(json.dumps(FLEET))
    assert Catalog.from_setting(str(path)) == Catalog.from_setting(json.dumps(FLEET))
    assert Catalog.from_setting(f"  {path}\n").first.name == "big"


def test_a_missing_file_is_named() -> None:
    with pytest.raises(CatalogError, match=r"cannot read the file '/nowhere/classes.json'"):
        Catalog.from_setting("/nowhere/classes.json")


@pytest.mark.parametrize("value", [None, "", "   "])
def test_unset_is_one_unnamed_class_that_serves_any_need(value: str | None) -> None:
    catalog = Catalog.from_setting(value)
    assert catalog == Catalog.single()
    assert not catalog.declared
    (only,) = catalog.classes
    assert (only.name, only.price, only.memory_gb) == (None, 1.0, math.inf)
    assert catalog.serving(min_memory_gb=1000) == (only,)
    assert catalog.by_name("big") is None
    assert "GPU_CLASSES is unset" in catalog.describe()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"memory_gb": 0, "price": 1}, r"class 'big': memory_gb: Input should be greater than 0"),
        ({"memory_gb": -8, "price": 1}, r"class 'big': memory_gb: .*greater than 0"),
        ({"memory_gb": 80, "price": 0}, r"class 'big': price: Input should be greater than 0"),
        ({"memory_gb": 80, "price": -1.5}, r"class 'big': price: .*greater than 0"),
        ({"memory_gb": 80, "price": 1e999}, r"class 'big': price: Input should be a finite"),
        ({"memory_gb": 1e999, "price": 1}, r"class 'big': memory_gb: Input should be a finite"),
        ({"memory_gb": "80", "price": 1}, r"class 'big': memory_gb: Input should be a valid"),
        ({"memory_gb": True, "price": 1}, r"class 'big': memory_gb: Input should be a valid"),
        ({"price": 1}, r"class 'big': memory_gb: Field required"),
        ({"memory_gb": 80}, r"class 'big': price: Field required"),
        ({"memory_gb": 80, "price": 1, "match": ""}, r"class 'big': match: .*at least 1"),
        ({"memory_gb": 80, "price": 1, "colour": "red"}, r"class 'big': colour: Extra inputs"),
        ({"memory_gb": 80, "price": 1, "name": "x"}, r"class 'big': name: Extra inputs"),
        ([80, 1.0], r"class 'big': give an object with memory_gb and price"),
    ],
)
def test_each_refusal_names_the_class_and_the_field(body: object, message: str) -> None:
    text = json.dumps({"small": FLEET["small"], "big": body}).replace("Infinity", "1e999")
    with pytest.raises(CatalogError, match=r"^GPU_CLASSES: " + message):
        Catalog.from_setting(text)


@pytest.mark.parametrize("name", ["Big", "-big", "a b", "x" * 65, "", "big/1"])
def test_names_are_written_as_job_types_are(name: str) -> None:
    with pytest.raises(CatalogError, match=r"class .*: a name is 1 to 64 of a-z"):
        Catalog.from_json(json.dumps({name: FLEET["big"]}))


def test_names_may_hold_digits_dots_dashes_and_underscores() -> None:
    text = json.dumps({"a100-80gb": FLEET["big"], "rtx_4090.24": FLEET["mid"]})
    assert [c.name for c in Catalog.from_json(text).classes] == ["a100-80gb", "rtx_4090.24"]


def test_names_differing_only_in_case_are_refused() -> None:
    # Upper case is refused by the name's pattern already; the check stands behind it.
    with pytest.raises(CatalogError, match=r"classes 'big' and 'BIG' differ only in case"):
        Catalog.from_json('{"big": {"memory_gb": 80, "price": 1}, "BIG": {"memory_gb": 8}}')


def test_a_class_given_twice_is_refused() -> None:
    text = '{"big": {"memory_gb": 80, "price": 1}, "big": {"memory_gb": 40, "price": 1}}'
    with pytest.raises(CatalogError, match=r"'big' is given twice"):
        Catalog.from_json(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", r"not valid JSON"),
        ("{}", r"give a JSON object of classes"),
        ('["big"]', r"give a JSON object of classes"),
    ],
)
def test_a_catalog_that_is_no_json_object_is_refused(text: str, message: str) -> None:
    with pytest.raises(CatalogError, match=r"^GPU_CLASSES: " + message):
        Catalog.from_json(text)


def test_cheapest_then_smallest_then_catalog_order() -> None:
    catalog = Catalog.from_json(
        json.dumps(
            {
                "big": {"memory_gb": 80, "price": 2.0},
                "mid": {"memory_gb": 24, "price": 1.0},
                "twin": {"memory_gb": 24, "price": 1.0},
                "small": {"memory_gb": 16, "price": 1.0},
                "spot": {"memory_gb": 80, "price": 0.5},
            }
        )
    )
    order = [c.name for c in catalog.cheapest_then_smallest()]
    assert order == ["spot", "small", "mid", "twin", "big"]


def test_serving_keeps_the_classes_that_meet_a_need_in_catalog_order() -> None:
    catalog = Catalog.from_json(json.dumps(FLEET))
    assert [c.name for c in catalog.serving()] == ["big", "mid", "small"]
    assert [c.name for c in catalog.serving(min_memory_gb=20)] == ["big", "mid"]
    assert [c.name for c in catalog.serving(min_memory_gb=24)] == ["big", "mid"]
    assert catalog.serving(min_memory_gb=81) == ()
    # The names narrow the classes; their order is the catalog's, not the caller's.
    assert [c.name for c in catalog.serving(classes=["small", "big"])] == ["big", "small"]
    assert [c.name for c in catalog.serving(40, ["small", "big"])] == ["big"]
    assert catalog.serving(40, ["small"]) == ()


def test_serving_refuses_a_class_the_catalog_lacks() -> None:
    catalog = Catalog.from_json(json.dumps(FLEET))
    with pytest.raises(CatalogError, match=r"unknown GPU class 'huge'; the catalog has big \("):
        catalog.serving(classes=["big", "huge"])


def test_by_name_is_exact() -> None:
    catalog = Catalog.from_json(json.dumps(FLEET))
    big = catalog.by_name("big")
    assert big is not None and big.memory_gb == 80
    assert catalog.by_name("BIG") is None and catalog.by_name("bi") is None


def test_describe_is_one_line() -> None:
    line = Catalog.from_json(json.dumps(FLEET)).describe()
    assert line == "big (80 GB, match 'A100'), mid (24 GB), small (16 GB, match 'T4')"


def test_the_dearest_price_among_a_jobs_classes_holds_its_budget() -> None:
    catalog = Catalog.from_json(
        '{"big": {"memory_gb": 80, "price": 2.5}, "small": {"memory_gb": 24, "price": 1.0}}'
    )
    assert catalog.dearest_price(["small"]) == 1.0
    assert catalog.dearest_price(["small", "big"]) == 2.5
    assert catalog.dearest_price() == 2.5  # any card: the dearest of all
    assert Catalog.single().dearest_price() == 1.0
