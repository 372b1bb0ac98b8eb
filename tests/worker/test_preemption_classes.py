"""Preemption in a mixed fleet (app/worker/preemption.py): a job owed a card of one class takes
only a run on a card of that class, and a job owed cards of two classes is asked for once."""

from __future__ import annotations

from dataclasses import replace

from app.settings import Settings
from app.store.workers import Running, Seen
from app.worker.preemption import Owed, choose

NOW = 10_000.0
SETTINGS = Settings(preempt_after_s=300, preempt_min_run_s=60)  # type: ignore[call-arg]


def card(name: str, account: str, gpu_class: str, ran_s: float = 900) -> Seen:
    run = Running(f"job-{name}", account, "short", NOW - ran_s, True)
    return Seen(name, ("short",), NOW, NOW + 3600, None, run, "host-1", gpu_class, 24.0)


def owed(gpu_class: str | None, job: str = "owed") -> Owed:
    return Owed(job, "b", "short", NOW - 400, gpu_class)


def even(user_id: str) -> float:
    return 1.0


def test_a_job_owed_a_big_card_takes_only_a_big_cards_run() -> None:
    busy = [card("small-1", "a", "small"), card("small-2", "a", "small", 100)]
    busy.append(card("big-1", "a", "big", 2000))
    asks = choose([owed("big")], busy, ["b"], even, NOW, SETTINGS)
    assert [(ask.victim, ask.worker) for ask in asks] == [("job-big-1", "big-1")]


def test_with_no_run_on_a_card_of_its_class_nothing_is_asked() -> None:
    busy = [card("small-1", "a", "small"), card("small-2", "a", "small")]
    assert choose([owed("big")], busy, ["b"], even, NOW, SETTINGS) == []


def test_a_job_owed_on_two_classes_is_asked_for_once() -> None:
    busy = [card("small-1", "a", "small"), card("big-1", "a", "big"), card("big-2", "a", "big")]
    asks = choose([owed("small"), owed("big")], busy, ["b"], even, NOW, SETTINGS)
    assert len(asks) == 1


def test_outside_a_mixed_fleet_any_card_of_the_queue_may_yield() -> None:
    busy = [replace(card("w1", "a", "small"), gpu_class=None), card("w2", "a", "big", 100)]
    asks = choose([owed(None)], busy, ["b"], even, NOW, SETTINGS)
    assert [ask.victim for ask in asks] == ["job-w2"]
