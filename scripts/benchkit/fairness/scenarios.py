"""The six fairness scenarios: who submits what, and when.

A scenario is a set of accounts (a share each, one or several API keys) and of streams that
submit jobs. Streams are the same rules for both systems under test:

- `Batch`: jobs submitted one after the other, in the order given, at a fixed offset from the
  scenario's start (or from the end of another stream's submissions);
- `Trickle`: a closed loop: submit one job, wait until it has finished, pause, submit the next;
- `Flood`: keep at least `depth` jobs queued (submitted, not started) until another stream is
  done.

Job counts are multiplied by the run's scale (the skew's light account always keeps its two
jobs); every job asks for `job_s` seconds.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

KIND = "short"  # every scenario job fits the short queue (see docs/fairness.md)


@dataclass(frozen=True)
class Account:
    """An account of a scenario: its name (unique within the run), share and number of keys."""

    name: str
    share: float = 1.0
    keys: int = 1

    def key(self, i: int = 0) -> str:
        """Its i-th API key."""
        return f"{self.name}-key{i + 1}"

    @property
    def all_keys(self) -> list[str]:
        """Every API key of the account."""
        return [self.key(i) for i in range(self.keys)]


@dataclass(frozen=True)
class JobSpec:
    """One job to submit: with which key, for which account, its queue and GPU-seconds."""

    key: str
    account: str
    duration: float
    kind: str = KIND


@dataclass(frozen=True)
class Batch:
    """Jobs submitted one after the other at `at` seconds (after stream `after` when set)."""

    name: str
    jobs: tuple[JobSpec, ...]
    at: float = 0.0
    after: str | None = None


@dataclass(frozen=True)
class Trickle:
    """n jobs, one at a time: the next is submitted `think` seconds after the last finished."""

    name: str
    job: JobSpec
    n: int
    at: float = 0.0
    think: float = 0.0


@dataclass(frozen=True)
class Flood:
    """Keeps at least `depth` jobs queued until stream `until` is done."""

    name: str
    job: JobSpec
    depth: int
    until: str


Stream = Batch | Trickle | Flood


@dataclass(frozen=True)
class Scenario:
    """A named scenario: its accounts, streams, and the accounts whose wait is reported."""

    name: str
    summary: str
    accounts: tuple[Account, ...]
    streams: tuple[Stream, ...]
    light: tuple[str, ...]
    targets: frozenset[str] = field(default_factory=frozenset)

    @property
    def weights(self) -> dict[str, float]:
        """Account name -> share."""
        return {a.name: a.share for a in self.accounts}

    @property
    def longest_job(self) -> float:
        """The longest job any stream submits."""
        durations = [j.duration for s in self.streams for j in jobs_of(s)]
        return max(durations)


@dataclass(frozen=True)
class Params:
    """The run's knobs: job length, job-count scale, and the number of workers."""

    job_s: float = 0.05
    scale: float = 1.0
    workers: int = 2

    def count(self, n: int) -> int:
        """A job count at this scale (at least 1)."""
        return max(1, round(n * self.scale))


def jobs_of(stream: Stream) -> tuple[JobSpec, ...]:
    """The job templates of a stream."""
    return stream.jobs if isinstance(stream, Batch) else (stream.job,)


def interleave(groups: Sequence[Sequence[JobSpec]]) -> tuple[JobSpec, ...]:
    """One job of each group in turn, in order, until all are used."""
    rounds = itertools.zip_longest(*groups)
    return tuple(j for r in rounds for j in r if j is not None)


def jobs(account: Account, n: int, seconds: float, key_index: int = 0) -> list[JobSpec]:
    """n jobs of an account through one of its keys."""
    return [JobSpec(account.key(key_index), account.name, seconds)] * n


def balanced(p: Params) -> Scenario:
    """Four equal accounts submit equal batches at once, interleaved."""
    accounts = tuple(Account(f"balanced-{c}") for c in "abcd")
    batch = interleave([jobs(a, p.count(100), p.job_s) for a in accounts])
    return Scenario(
        "balanced",
        "4 accounts, share 1 each, 100 jobs each submitted at once, interleaved",
        accounts,
        (Batch("all", batch),),
        light=(accounts[-1].name,),
        targets=frozenset({"share", "lag", "idle"}),
    )


def skew(p: Params) -> Scenario:
    """One account queues 1000 jobs; then another submits 2."""
    heavy, light = Account("skew-heavy"), Account("skew-light")
    return Scenario(
        "skew",
        "heavy queues 1000 jobs; 10 jobs' time after its last submit, light submits 2",
        (heavy, light),
        (
            Batch("heavy", tuple(jobs(heavy, p.count(1000), p.job_s))),
            Batch("light", tuple(jobs(light, 2, p.job_s)), at=10 * p.job_s, after="heavy"),
        ),
        light=(light.name,),
        targets=frozenset({"first_release", "lag", "idle"}),
    )


def sybil(p: Params) -> Scenario:
    """One account submits through three keys, another through one; each key the same jobs."""
    many, honest = Account("sybil-many", keys=3), Account("sybil-honest")
    n = p.count(150)
    groups = [jobs(many, n, p.job_s, k) for k in range(3)] + [jobs(honest, n, p.job_s)]
    return Scenario(
        "sybil",
        "one account with 3 keys against one with 1 key, 150 jobs per key, interleaved by key",
        (many, honest),
        (Batch("all", interleave(groups)),),
        light=(honest.name,),
        targets=frozenset({"share", "lag", "idle"}),
    )


def weighted(p: Params) -> Scenario:
    """Shares 5:3:2, job counts in the same ratio, submitted one job of each in turn."""
    accounts = (
        Account("weighted-5", share=5),
        Account("weighted-3", share=3),
        Account("weighted-2", share=2),
    )
    counts = (500, 300, 200)
    groups = [jobs(a, p.count(n), p.job_s) for a, n in zip(accounts, counts, strict=True)]
    return Scenario(
        "weighted",
        "shares 5:3:2 with 500/300/200 jobs, submitted one of each in turn",
        accounts,
        (Batch("all", interleave(groups)),),
        light=(accounts[-1].name,),
        targets=frozenset({"share", "lag", "idle"}),
    )


def trickle(p: Params) -> Scenario:
    """A light account submits one job at a time while a heavy one keeps a backlog."""
    heavy, light = Account("trickle-heavy"), Account("trickle-light")
    return Scenario(
        "trickle",
        "heavy keeps 40 jobs queued; light submits 12 jobs one at a time (pause 2 jobs' time)",
        (heavy, light),
        (
            Trickle(
                "light",
                JobSpec(light.key(), light.name, p.job_s),
                n=max(2, p.count(12)),
                at=10 * p.job_s,
                think=2 * p.job_s,
            ),
            Flood("heavy", JobSpec(heavy.key(), heavy.name, p.job_s), p.count(40), "light"),
        ),
        light=(light.name,),
        targets=frozenset({"lag", "idle"}),
    )


def burst(p: Params) -> Scenario:
    """A steady account has a deep backlog; three others arrive with bursts, one after another."""
    steady = Account("burst-steady")
    bursts = tuple(Account(f"burst-{i}") for i in (1, 2, 3))
    n_steady = p.count(300)
    backlog_s = n_steady * p.job_s / p.workers  # the steady backlog's length, without overhead
    streams: list[Stream] = [Batch("steady", tuple(jobs(steady, n_steady, p.job_s)))]
    for i, account in enumerate(bursts):
        at = backlog_s * (0.15 + 0.2 * i)
        streams.append(Batch(account.name, tuple(jobs(account, p.count(25), p.job_s)), at=at))
    return Scenario(
        "burst",
        "steady queues 300 jobs; 3 accounts each submit a burst of 25 at 15/35/55% of its backlog",
        (steady, *bursts),
        tuple(streams),
        light=tuple(a.name for a in bursts),
        targets=frozenset({"lag", "idle"}),
    )


SCENARIOS: dict[str, Callable[[Params], Scenario]] = {
    "balanced": balanced,
    "skew": skew,
    "sybil": sybil,
    "weighted": weighted,
    "trickle": trickle,
    "burst": burst,
}


def users_file(scenarios: Sequence[Scenario], extra: Sequence[Account] = ()) -> dict[str, object]:
    """The accounts file (fixtures/users.json's format) for these scenarios' accounts."""
    accounts = [a for s in scenarios for a in s.accounts] + list(extra)
    return {
        "accounts": [
            {
                "user_id": a.name,
                "description": f"fairness scenario account {a.name}",
                "api_keys": a.all_keys,
                "share": a.share,
            }
            for a in accounts
        ]
    }
