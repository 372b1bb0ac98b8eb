"""The most cards one job may take in a fleet (app/fleet/view.py largest_host): each worker drives
one card, and a job's cards are all of one class, on one host, of workers that serve its queue."""

from __future__ import annotations

from app.fleet.view import largest_host
from app.store.workers import Seen


def card(name: str, host: str | None, gpu_class: str | None = None, *queues: str) -> Seen:
    return Seen(name, queues or ("short", "long"), 0.0, host=host, gpu_class=gpu_class)


FLEET = [
    *(card(f"a{i}", "h1", "big") for i in range(2)),
    *(card(f"b{i}", "h2", "small") for i in range(3)),
    card("c0", "h2", "big"),
    card("d0", "h3", "big", "long"),
    card("d1", "h3", "big", "long"),
    card("d2", "h3", "big", "long"),
]


def test_a_host_counts_the_cards_of_one_class_only() -> None:
    """h2's three small cards and its big one are not four cards of a class."""
    assert largest_host(FLEET, "short") == 3
    assert largest_host(FLEET, "short", ("big",)) == 2
    assert largest_host(FLEET, "short", ("small",)) == 3
    assert largest_host(FLEET, "short", ("big", "small")) == 3


def test_only_the_workers_of_the_jobs_queue_count() -> None:
    assert largest_host(FLEET, "long", ("big",)) == 3  # h3 serves long alone
    assert largest_host(FLEET, "short", ("tiny",)) == 0


def test_a_worker_that_does_not_say_its_host_is_a_host_of_its_own() -> None:
    """A release before the fleet: its cards cannot be counted together."""
    assert largest_host([card("old0", None), card("old1", None)], "short") == 1
    assert largest_host([], "short") == 0


def test_without_a_catalog_every_card_is_of_one_class() -> None:
    fleet = [card(f"cpu{i}", "laptop") for i in range(4)]
    assert largest_host(fleet, "short") == 4
