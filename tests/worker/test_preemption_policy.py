"""The preemption policy's choice (app/worker/preemption.py choose): which run yields its GPU to a
job owed one, from the workers' heartbeats, the accounts' shares and the owed jobs."""

from __future__ import annotations

from app.settings import Settings
from app.store.workers import Running, Seen
from app.worker.preemption import Owed, choose

NOW = 10_000.0
SETTINGS = Settings(preempt_after_s=300, preempt_min_run_s=60)  # type: ignore[call-arg]


def worker(
    name: str,
    account: str,
    ran_s: float,
    *,
    preemptible: bool = True,
    queues: tuple[str, ...] = ("short", "long"),
) -> Seen:
    run = Running(f"job-{name}", account, "long", NOW - ran_s, preemptible)
    return Seen(name, queues, NOW, NOW + 3600, None, run)


def owed(account: str = "b", waited_s: float = 300, kind: str = "short", job: str = "owed") -> Owed:
    return Owed(job, account, kind, NOW - waited_s)


def even(user_id: str) -> float:
    return 1.0


def victims(*args: object, **kwargs: object) -> list[str]:
    return [ask.victim for ask in choose(*args, **kwargs)]  # type: ignore[arg-type]


def test_an_account_over_its_share_yields_its_shortest_run_to_an_owed_account_under_it() -> None:
    busy = [worker("w1", "a", 900), worker("w2", "a", 400), worker("w3", "a", 2000)]
    assert victims([owed()], busy, ["b"], even, NOW, SETTINGS) == ["job-w2"]


def test_nothing_is_asked_before_the_job_has_waited_preempt_after_s() -> None:
    busy = [worker("w1", "a", 900), worker("w2", "a", 900)]
    assert victims([owed(waited_s=299)], busy, ["b"], even, NOW, SETTINGS) == []


def test_a_run_younger_than_preempt_min_run_s_is_never_asked() -> None:
    busy = [worker("w1", "a", 59), worker("w2", "a", 30)]
    assert victims([owed()], busy, ["b"], even, NOW, SETTINGS) == []


def test_a_run_that_is_not_preemptible_is_never_asked() -> None:
    busy = [worker("w1", "a", 900, preemptible=False), worker("w2", "a", 900, preemptible=False)]
    assert victims([owed()], busy, ["b"], even, NOW, SETTINGS) == []


def test_only_a_worker_that_serves_the_owed_jobs_queue_is_asked() -> None:
    busy = [worker("w1", "a", 900, queues=("long",)), worker("w2", "a", 1900, queues=("short",))]
    assert victims([owed(kind="short")], busy, ["b"], even, NOW, SETTINGS) == ["job-w2"]
    assert victims([owed(kind="long")], busy, ["b"], even, NOW, SETTINGS) == ["job-w1"]


def test_an_account_at_its_share_is_not_preempted_and_an_owed_one_at_its_share_waits() -> None:
    busy = [worker("w1", "a", 900), worker("w2", "b", 900)]
    assert victims([owed("b")], busy, [], even, NOW, SETTINGS) == []  # b holds its share
    busy = [worker("w1", "a", 900), worker("w2", "a", 900)]
    busy += [worker("w3", "b", 900), worker("w4", "b", 900)]
    assert victims([owed("b")], busy, ["a"], even, NOW, SETTINGS) == []  # 2 of 4 each


def test_where_the_gpus_cannot_be_split_evenly_the_accounts_take_turns() -> None:
    one = [worker("w1", "a", 900)]  # one GPU, two accounts: half a GPU each
    assert victims([owed("b")], one, ["b"], even, NOW, SETTINGS) == ["job-w1"]
    turned = [worker("w1", "b", 30)]  # b's turn has lasted less than PREEMPT_MIN_RUN_S
    assert victims([owed("a", job="a2")], turned, ["a"], even, NOW, SETTINGS) == []


def test_the_account_furthest_over_its_share_yields_first() -> None:
    busy = [worker(f"a{n}", "a", 900) for n in range(3)]
    busy += [worker("b0", "b", 100), worker("b1", "b", 700)]  # a: 3 of 5, b: 2; c: 0
    thirds = victims([owed("c")], busy, ["c"], even, NOW, SETTINGS)
    assert thirds == ["job-a0"]  # a is 1.33 over a third of 5, b 0.33
    shares = {"a": 4.0, "b": 1.0, "c": 1.0}  # a's 3 of 5 are now under its 4/6 of them
    weighted = victims([owed("c")], busy, ["c"], shares.__getitem__, NOW, SETTINGS)
    assert weighted == ["job-b0"]  # b, 2 of 5 for 1/6, yields its shortest run


def test_one_ask_per_owed_job_and_never_two_for_one_need() -> None:
    busy = [worker(f"w{n}", "a", 900 + n) for n in range(4)]
    two = [owed(job="o1", waited_s=400), owed(job="o2", waited_s=350)]
    assert victims(two, busy, ["b"], even, NOW, SETTINGS) == ["job-w0", "job-w1"]  # b: 2 of 4
    assert victims(two, busy, ["b"], even, NOW, SETTINGS, answered={"o1"}) == ["job-w0"]
    # a run asked already counts as gone to the job it yields to: b has 1 of its 2 then
    assert victims(two[1:], busy, ["b"], even, NOW, SETTINGS, asked={"job-w0"}) == ["job-w1"]
    three = [*two, owed(job="o3", waited_s=320)]
    assert len(victims(three, busy, ["b"], even, NOW, SETTINGS)) == 2  # b's share is 2 of 4


def test_a_job_of_the_account_itself_never_preempts_its_own_runs() -> None:
    busy = [worker("w1", "a", 900), worker("w2", "a", 900)]
    assert victims([owed("a")], busy, [], even, NOW, SETTINGS) == []


def test_preemption_settles_where_the_shares_are_whole() -> None:
    four = [worker(f"a{n}", "a", 900) for n in range(4)]
    needs = [owed("b", job="b1", waited_s=500), owed("b", job="b2", waited_s=400)]
    assert victims(needs, four, ["a", "b"], even, NOW, SETTINGS) == ["job-a0", "job-a1"]
    after = [*four[2:], worker("b1", "b", 900), worker("b2", "b", 900)]  # 2 and 2 of 4
    assert victims([owed("b", job="b3")], after, ["a", "b"], even, NOW, SETTINGS) == []
    assert victims([owed("a", job="a9")], after, ["a", "b"], even, NOW, SETTINGS) == []
