"""How a mixed fleet meets the fair queues (app/fleet/routing.py): only two classes or more make
one; then a job's item names its classes in its order (all of the catalog's, cheapest first,
where it needs none in particular) and a worker of a class takes its own trigger queues."""

from __future__ import annotations

from app.fleet.catalog import Catalog
from app.fleet.routing import celery_queues, cheapest_price, item_kinds, mixed, queue_kind
from app.models import RECLAIM_QUEUE

TWO = Catalog.from_json(
    '{"big": {"memory_gb": 80, "price": 2.0}, "small": {"memory_gb": 24, "price": 1.0}}'
)
ONE = Catalog.from_json('{"only": {"memory_gb": 80, "price": 1.0}}')


def test_only_two_classes_or_more_make_a_mixed_fleet() -> None:
    assert mixed(TWO)
    assert not mixed(ONE)
    assert not mixed(Catalog.single())


def test_outside_a_mixed_fleet_nothing_names_a_kind() -> None:
    for catalog in (ONE, Catalog.single()):
        assert item_kinds(catalog, ["only"]) is None
        assert queue_kind(catalog, "only") is None
    assert celery_queues(["short", "long"], None) == ["short", "long"]


def test_in_a_mixed_fleet_a_job_names_its_classes_in_its_order() -> None:
    assert item_kinds(TWO, ["big", "small"]) == ("big", "small")
    assert item_kinds(TWO, []) == ("small", "big")  # any card: the cheapest first
    assert queue_kind(TWO, "big") == "big"


def test_a_worker_of_a_class_takes_its_own_trigger_queues() -> None:
    assert celery_queues(["short", "long"], "big") == ["short.big", "long.big"]
    # the reclaim queue is the whole queue's, whatever the worker's class
    assert celery_queues(["short", RECLAIM_QUEUE], "big") == ["short.big", RECLAIM_QUEUE]


def test_a_job_is_charged_at_its_cheapest_class_when_queued() -> None:
    assert cheapest_price(TWO, ("big",)) == 2.0
    assert cheapest_price(TWO, ("big", "small")) == 1.0
    assert cheapest_price(TWO, None) == 1.0
