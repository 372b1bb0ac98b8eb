"""Items of several cards (docs/vtrr.md, "Items of several cards"): all of an item's cards are
taken in one step on one host, never some of them; a card that is lent takes nothing else; the
cards that free first are kept for the item whose turn has come, and run meanwhile only what
ends before; every card is free again once the lease that held it ends, whichever way."""

from __future__ import annotations

import time

import pytest
import redis

from app.vtrr import FairQueue, Item, Limits, Slot

TTL = 30.0


def card(r: redis.Redis, host: str, name: str, **kw: object) -> FairQueue:
    """A slotted consumer: card `name` of `host`, driven by worker `name@host`."""
    return FairQueue(r, "jobs", slot=Slot(host, name, f"{name}@{host}"), **kw)  # type: ignore[arg-type]


def put(q: FairQueue, partition: str, task: str, size: int = 1, span: float | None = 60) -> None:
    q.enqueue(partition, [Item(task, id=task, weight=1000 * size, size=size, span=span)])


def live(*cards: FairQueue) -> None:
    for c in cards:
        c.tick(TTL)


def test_an_item_of_two_cards_is_claimed_whole_by_a_tick_never_by_a_lease(
    r: redis.Redis,
) -> None:
    a, b = card(r, "h1", "0"), card(r, "h1", "1")
    live(a, b)
    put(a, "A", "pair", size=2)
    assert a.dequeue() is None  # a lease never takes an item of several cards
    tick = a.tick(TTL)
    assert tick.claimed is not None and tick.claimed.task_id == "pair"
    assert tick.held is not None and tick.held.role == "lead"
    placed = a.placement("pair")
    assert placed is not None
    assert (placed.host, placed.cards, placed.workers) == ("h1", ("0", "1"), ("0@h1", "1@h1"))
    lent = b.tick(TTL).held
    assert lent is not None and (lent.role, lent.task_id, lent.ready) == ("lent", "pair", False)
    assert not a.lenders_ready("pair")
    assert b.lend_ready("pair")
    assert a.lenders_ready("pair")
    assert not b.lend_ready("other")  # only for the item its card is lent to


def test_a_lent_card_leases_nothing_until_the_item_ends(r: redis.Redis) -> None:
    a, b = card(r, "h1", "0"), card(r, "h1", "1")
    live(a, b)
    put(a, "A", "pair", size=2)
    claimed = a.tick(TTL).claimed
    assert claimed is not None
    put(a, "B", "single")
    assert b.dequeue() is None
    assert b.take("single") is None  # nor by name (preemption's owed job)
    assert b.card_held() is not None
    assert a.ack(claimed.task_id, claimed.token)
    assert b.card_held() is None and a.card_held() is None
    lease = b.dequeue()
    assert lease is not None and lease.task_id == "single"


def test_never_a_partial_claim_when_the_host_has_too_few_free_cards(r: redis.Redis) -> None:
    a, b, c = card(r, "h1", "0"), card(r, "h1", "1"), card(r, "h1", "2")
    live(a, b, c)
    put(a, "A", "busy")
    busy = a.dequeue()
    assert busy is not None
    put(a, "B", "triple", size=3)
    assert b.tick(TTL).claimed is None
    assert c.tick(TTL).claimed is None
    assert r.get(b.keys.card) is None and r.get(c.keys.card) is None
    assert a.ack(busy.task_id, busy.token)
    claimed = b.tick(TTL).claimed
    assert claimed is not None
    placed = b.placement("triple")
    assert placed is not None and sorted(placed.cards) == ["0", "1", "2"]


def test_the_cards_that_free_first_are_kept_and_run_only_what_ends_before(
    r: redis.Redis,
) -> None:
    a, b = card(r, "h1", "0"), card(r, "h1", "1")
    c = card(r, "h2", "0")
    live(a, b, c)
    put(a, "A", "long-run", span=100)
    running = a.dequeue()
    assert running is not None
    put(a, "B", "pair", size=2)
    put(a, "A", "too-long", span=500)
    put(a, "A", "short", span=5)
    assert b.tick(TTL).claimed is None
    kept = a.reservations()
    assert list(kept) == ["pair"]
    assert kept["pair"].host == "h1" and sorted(kept["pair"].cards) == ["0", "1"]
    assert kept["pair"].start_at == pytest.approx(time.time() + 100, abs=5)
    backfill = b.dequeue()
    assert backfill is not None and backfill.task_id == "short"  # ends before the start
    assert b.dequeue() is None  # the rest would not: nothing for the kept card
    other = c.dequeue()
    assert other is not None and other.task_id == "too-long"  # a card not kept takes it
    assert a.ack(running.task_id, running.token)
    assert a.tick(TTL).claimed is None  # b still runs its backfill
    assert b.ack(backfill.task_id, backfill.token)
    claimed = a.tick(TTL).claimed
    assert claimed is not None and claimed.task_id == "pair"
    assert a.reservations() == {}


def test_the_expected_start_moves_earlier_when_a_run_ends_early(r: redis.Redis) -> None:
    a, b, c = card(r, "h1", "0"), card(r, "h1", "1"), card(r, "h1", "2")
    live(a, b, c)
    for task, span in (("x", 100), ("y", 300), ("z", 600)):
        put(a, "A", task, span=span)
    runs = [q.dequeue() for q in (a, b, c)]
    assert all(runs)
    put(a, "B", "pair", size=2)
    a.tick(TTL)
    first = a.reservations()["pair"]
    assert sorted(first.cards) == ["0", "1"]  # the two that free first
    lease = runs[1]
    assert lease is not None and b.ack(lease.task_id, lease.token)
    a.tick(TTL)
    assert a.reservations()["pair"].start_at < first.start_at - 150


def test_a_reservation_goes_to_the_host_whose_cards_free_first(r: redis.Redis) -> None:
    slow = [card(r, "h1", str(i)) for i in range(2)]
    fast = [card(r, "h2", str(i)) for i in range(2)]
    live(*slow, *fast)
    for i, q in enumerate(slow):
        put(q, "A", f"slow{i}", span=900)
        assert q.dequeue() is not None
    for i, q in enumerate(fast):
        put(q, "A", f"fast{i}", span=30)
        assert q.dequeue() is not None
    put(slow[0], "B", "pair", size=2)
    slow[0].tick(TTL)
    assert slow[0].reservations()["pair"].host == "h2"


def test_one_reservation_per_host_in_fair_order(r: redis.Redis) -> None:
    h1 = [card(r, "h1", str(i)) for i in range(2)]
    h2 = [card(r, "h2", str(i)) for i in range(2)]
    live(*h1, *h2)
    for i, q in enumerate([*h1, *h2]):
        put(q, "A", f"run{i}", span=100 + i)
        assert q.dequeue() is not None
    put(h1[0], "B", "first", size=2)
    put(h1[0], "C", "second", size=2)
    h1[0].tick(TTL)
    kept = h1[0].reservations()
    assert {kept["first"].host, kept["second"].host} == {"h1", "h2"}
    assert kept["first"].host == "h1"  # the sooner host went to the earlier item


def test_a_card_not_seen_within_the_ttl_is_never_claimed(r: redis.Redis) -> None:
    a, b = card(r, "h1", "0"), card(r, "h1", "1")
    live(a, b)
    b.leave()
    put(a, "A", "pair", size=2)
    assert a.tick(TTL).claimed is None
    claimed = b.tick(TTL).claimed  # b is live again, and its host has the two cards now
    assert claimed is not None and claimed.task_id == "pair"


def test_a_reclaim_frees_every_card_and_the_item_runs_again(r: redis.Redis) -> None:
    a, b = card(r, "h1", "0", lease_seconds=0.05), card(r, "h1", "1", lease_seconds=0.05)
    live(a, b)
    put(a, "A", "pair", size=2)
    claimed = a.tick(TTL).claimed
    assert claimed is not None
    deadline = time.monotonic() + 5
    while a.reclaim() == 0:
        assert time.monotonic() < deadline, "the lease never expired"
    assert a.card_held() is None and b.card_held() is None
    assert not a.ack(claimed.task_id, claimed.token)  # the old lease frees nothing more
    again = b.tick(TTL).claimed
    assert again is not None and again.task_id == "pair"
    placed = b.placement("pair")
    assert placed is not None and placed.cards[0] == "1"


def test_release_and_put_back_free_the_cards(r: redis.Redis) -> None:
    a, b = card(r, "h1", "0"), card(r, "h1", "1")
    live(a, b)
    put(a, "A", "pair", size=2)
    claimed = a.tick(TTL).claimed
    assert claimed is not None and a.release(claimed.task_id, claimed.token)
    assert a.card_held() is None and b.card_held() is None
    claimed = b.tick(TTL).claimed
    assert claimed is not None and b.put_back(claimed.task_id, claimed.token)
    assert a.card_held() is None and b.card_held() is None


def test_max_running_counts_the_cards_an_item_holds(r: redis.Redis) -> None:
    a, b, c = card(r, "h1", "0"), card(r, "h1", "1"), card(r, "h1", "2")
    live(a, b, c)
    a.set_limits("A", Limits(most_in_flight=2))
    put(a, "A", "pair", size=2)
    put(a, "A", "single")
    claimed = a.tick(TTL).claimed
    assert claimed is not None
    assert c.dequeue() is None  # its two cards are the account's two
    assert a.ack(claimed.task_id, claimed.token)
    lease = c.dequeue()
    assert lease is not None and lease.task_id == "single"


def test_an_item_size_and_span_are_checked_before_redis_is_touched(r: redis.Redis) -> None:
    q = card(r, "h1", "0")
    for bad in ({"size": 0}, {"size": 65}, {"size": True}, {"span": 0}, {"span": float("inf")}):
        with pytest.raises(ValueError, match=r"size|span"):
            q.enqueue("A", [Item("x", **bad)])
    assert q.length() == 0
    with pytest.raises(ValueError, match="host"):
        Slot("h:1", "0", "w")


def test_without_reservations_an_item_of_two_cards_waits_for_free_ones(r: redis.Redis) -> None:
    a = card(r, "h1", "0", reserves=False)
    b = card(r, "h1", "1", reserves=False)
    live(a, b)
    put(a, "A", "busy", span=100)
    running = a.dequeue()
    assert running is not None
    put(a, "B", "pair", size=2)
    put(a, "A", "long", span=500)
    assert b.tick(TTL).claimed is None
    assert a.reservations() == {}
    lease = b.dequeue()
    assert lease is not None and lease.task_id == "long"  # nothing kept: anything runs


def test_the_queues_of_a_group_share_cards_and_reservations(r: redis.Redis) -> None:
    """A card lent by one queue's item is lent for the other queue too, and one queue's
    reservation is not another's to take."""

    def both(host: str, name: str) -> tuple[FairQueue, FairQueue]:
        slot = Slot(host, name, f"{name}@{host}")
        return tuple(FairQueue(r, q, slot=slot, limits_group="g") for q in ("short", "long"))  # type: ignore[return-value]

    (a_short, a_long), (b_short, _) = both("h1", "0"), both("h1", "1")
    (c_short, c_long), (d_short, _) = both("h2", "0"), both("h2", "1")
    live(a_short, b_short, c_short, d_short)
    put(a_long, "A", "pair-long", size=2, span=500)
    claimed = a_long.tick(TTL).claimed
    assert claimed is not None
    put(b_short, "B", "single-short")
    assert b_short.dequeue() is None  # card 1 of h1 is lent, for the short queue too
    for q, task in ((c_short, "x"), (d_short, "y")):
        put(q, "C", task, span=100)
        assert q.dequeue() is not None
    put(c_long, "D", "pair-long-2", size=2)
    put(c_short, "E", "pair-short", size=2)
    c_long.tick(TTL)
    assert c_long.reservations()["pair-long-2"].host == "h2"
    c_short.tick(TTL)
    kept = c_short.reservations()
    assert kept["pair-long-2"].host == "h2"  # the long queue's stays where it was
    assert kept["pair-short"].host == "h1"


def test_a_reservation_goes_when_its_items_turn_has_gone(r: redis.Redis) -> None:
    """An item of one card put back ahead of the item of several cards: the cards kept for the
    latter are let go at the next tick, or the former could never start (it ends too late)."""
    a, b = card(r, "h1", "0"), card(r, "h1", "1")
    live(a, b)
    put(a, "A", "long", span=1000)
    running = a.dequeue()
    assert running is not None
    put(a, "B", "pair", size=2)
    b.tick(TTL)
    assert "pair" in a.reservations()
    assert a.release(running.task_id, running.token)  # back at the front, ahead of the pair
    assert b.dequeue() is None  # the kept card: the long item would end after the start
    b.tick(TTL)
    assert a.reservations() == {}
    lease = b.dequeue()
    assert lease is not None and lease.task_id == "long"


def test_a_lease_that_meets_the_item_at_its_head_keeps_its_reservation_first(
    r: redis.Redis,
) -> None:
    """No tick between the item's turn and a card's freeing: the lease that would pass it keeps
    the cards that free first for it before it leases anything, so nothing long starts there."""
    a, b = card(r, "h1", "0"), card(r, "h1", "1")
    live(a, b)
    put(a, "A", "running", span=100)
    running = a.dequeue()
    assert running is not None
    put(a, "B", "pair", size=2)
    put(a, "A", "long", span=500)
    assert a.reservations() == {}  # no tick has seen the pair yet
    assert b.dequeue() is None
    assert a.reservations()["pair"].host == "h1"
