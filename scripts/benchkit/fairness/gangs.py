"""The scenarios of jobs of several cards (issue 42) in `scripts/load.py`, each round on a stack of
its own whose CPU workers are the cards of one host.

- `gangs` (the bound): account `stream` keeps both cards of a 2-card host busy with one-card
  burn jobs of STREAM_S (STREAM_DEPTH outstanding, so a freed card always finds the next one
  queued), and a while in, account `pair` submits one 2-card `ddp-burn` job. With reservations
  the pair's turn comes at once (a newcomer) and the card that frees first is kept for it: it
  starts within the longest declared duration (+ TIMEOUT_GRACE_S) of what runs on its cards,
  plus its own start, plus 2 s. Without them (RESERVATIONS=false) the freed card takes the next
  stream job at once, and the pair waits until the stream ends.
- `gang-share`: accounts `pairs` (2-card jobs) and `singles` (1-card jobs), both kept busy on a
  4-card host for a few minutes: each should get half the GPU-seconds (cards x seconds).
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.dev.stack import Stack
from scripts.benchkit.fairness.metrics import Run
from scripts.benchkit.fairness.runner import warm_up
from scripts.benchkit.fairness.scenarios import Account, Batch, JobSpec, Params, Scenario
from scripts.benchkit.fairness.systems import FairSystem, Handle, RunError
from scripts.benchkit.report import Report, Section

BOUND, SHARE = "gangs", "gang-share"
STREAM, PAIR = Account("stream"), Account("pair")
PAIRS, SINGLES = Account("pairs"), Account("singles")
STREAM_S, PAIR_S = 4.0, 2.0  # declared (and burned) seconds of a stream job and of the pair
STREAM_JOBS, STREAM_DEPTH = 24, 3  # at scale 1: about 48 s of stream on two cards
PAIR_AFTER = 3  # the pair is submitted once this many stream jobs have started
SHARE_S, SHARE_DEPTH, SHARE_JOBS = 2.0, 4, 60  # each account's jobs in gang-share, at scale 1
POLL_S = 0.1
COLLECT_TIMEOUT_S = 900.0
SLACK_S = 2.0  # the bound's own allowance beyond the declarations


def scenario(accounts: Sequence[Account]) -> Scenario:
    """A Scenario that only names the accounts (the stack's users file); the rounds submit."""
    return Scenario(BOUND, "jobs of several cards", tuple(accounts), (Batch("none", ()),), ())


class GangSystem(FairSystem):
    """A fairgpu stack of `cards` CPU workers on one host, reservations on or off."""

    def __init__(self, accounts: Sequence[Account], cards: int, reserve: bool, work: Path) -> None:
        super().__init__([scenario(accounts)], cards, work)
        settings = self.stack.settings.model_copy(update={"reservations": reserve})
        self.stack = Stack(settings, use_given_redis=False, workers=cards, workdir=work / "fair")

    async def submit_job(self, spec: JobSpec, gpus: int) -> Handle:
        """POST /enqueue-task: a one-card burn, or a `ddp-burn` of `gpus` cards."""
        body: dict[str, Any] = {"type": "burn", "kind": spec.kind, "duration_s": spec.duration}
        if gpus > 1:
            body = {"type": "ddp-burn", "duration_s": spec.duration, "gpus": gpus}
        reply = await self._http().post("/enqueue-task", json=body, headers={"X-API-Key": spec.key})
        if reply.status_code != 200:
            raise RunError(f"submit refused: HTTP {reply.status_code} {reply.text[:200]}")
        return Handle(spec, str(reply.json()["task_id"]))

    async def started(self, handle: Handle) -> bool:
        """Whether the job has started (or ended)."""
        return str((await self._status(handle))["status"]) != "PENDING"


@dataclass
class Kept:
    """An account's jobs kept outstanding: submitted, and those not ended yet."""

    handles: list[Handle] = field(default_factory=list)
    outstanding: list[Handle] = field(default_factory=list)


async def keep_busy(
    system: GangSystem, spec: JobSpec, gpus: int, n: int, depth: int, kept: Kept
) -> None:
    """Submit n jobs of spec, `depth` of them outstanding at a time, into kept (which the
    caller may look at meanwhile); returns once all have ended."""
    while len(kept.handles) < n or kept.outstanding:
        while len(kept.outstanding) < depth and len(kept.handles) < n:
            kept.handles.append(await system.submit_job(spec, gpus))
            kept.outstanding.append(kept.handles[-1])
        await asyncio.sleep(POLL_S)  # between looks at the account's jobs
        kept.outstanding = [h for h in kept.outstanding if not await system.finished(h)]


@dataclass(frozen=True)
class BoundRound:
    """One round of `gangs`: the pair's wait, the bound, and when the stream ended."""

    reservations: bool
    pair_wait_s: float
    bound_s: float
    stream_end_after_s: float  # from the pair's submit to the stream's last end
    ran_between: int  # stream jobs that started after the pair's submit and before its start
    passed: int  # of those, the ones submitted after it: they passed it in line

    def as_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


async def _started(system: GangSystem, handles: Sequence[Handle]) -> int:
    return sum([await system.started(h) for h in handles])


async def _pair_round(system: GangSystem, params: Params, reserve: bool) -> BoundRound:
    await warm_up(system)
    stream, kept = JobSpec(STREAM.key(), STREAM.name, STREAM_S), Kept()
    n = max(PAIR_AFTER + STREAM_DEPTH, params.count(STREAM_JOBS))
    loop = asyncio.ensure_future(keep_busy(system, stream, 1, n, STREAM_DEPTH, kept))
    while await _started(system, list(kept.handles)) < PAIR_AFTER:  # well under way
        if loop.done():
            raise RunError("the stream ended before the pair was submitted")
        await asyncio.sleep(POLL_S)
    pair = await system.submit_job(JobSpec(PAIR.key(), PAIR.name, PAIR_S), 2)
    await loop
    *stream_runs, pair_run = await system.collect([*kept.handles, pair], COLLECT_TIMEOUT_S)
    await system.aclose()
    return bound_round(reserve, pair_run, stream_runs, system.stack.settings.timeout_grace_s)


def bound_round(reserve: bool, pair: Run, stream: Sequence[Run], grace_s: float) -> BoundRound:
    """The pair's wait from submit to start, against the longest declared end (start + duration
    + TIMEOUT_GRACE_S) of the stream jobs running at its submit, plus SLACK_S (the pair's own
    process start and setup are in its wait too: a CPU worker's are a fraction of a second)."""
    submit = pair.enqueued
    running = [r for r in stream if r.started <= submit < r.finished]
    declared_end = max((r.started + STREAM_S + grace_s for r in running), default=submit)
    between = [r for r in stream if submit < r.started < pair.started]
    passed = sum(1 for r in between if r.enqueued > submit)
    last_end = max(r.finished for r in stream)
    bound = max(0.0, declared_end - submit) + SLACK_S
    return BoundRound(reserve, pair.wait, bound, last_end - submit, len(between), passed)


def run_bound(params: Params) -> list[BoundRound]:
    """`gangs`: with reservations, then without, each on a stack of its own."""
    rounds = []
    for reserve in (True, False):
        with tempfile.TemporaryDirectory(prefix="gangs-") as tmp:
            system = GangSystem((STREAM, PAIR), 2, reserve, Path(tmp))
            try:  # (a stack that fails to start is stopped too: nothing of it left running)
                system.start()
                rounds.append(asyncio.run(_pair_round(system, params, reserve)))
            finally:
                system.stop()
    return rounds


@dataclass(frozen=True)
class ShareRound:
    """`gang-share`: each account's GPU-seconds (cards x run seconds) while both competed."""

    window_s: float
    pairs_gpu_s: float
    singles_gpu_s: float

    @property
    def pairs_share(self) -> float:
        total = self.pairs_gpu_s + self.singles_gpu_s
        return self.pairs_gpu_s / total if total else float("nan")

    def as_json(self) -> dict[str, Any]:
        return {**self.__dict__, "pairs_share": self.pairs_share}


def clipped(run: Run, start: float, end: float) -> float:
    """Seconds of a run within [start, end]."""
    return max(0.0, min(run.finished, end) - max(run.started, start))


def share_round(pairs: Sequence[Run], singles: Sequence[Run]) -> ShareRound:
    """GPU-seconds of each account from when both had started to when the first ran out."""
    start = max(min(r.started for r in pairs), min(r.started for r in singles))
    end = min(max(r.finished for r in pairs), max(r.finished for r in singles))
    two = sum(2 * clipped(r, start, end) for r in pairs)
    one = sum(clipped(r, start, end) for r in singles)
    return ShareRound(end - start, two, one)


async def _share_round(system: GangSystem, params: Params) -> ShareRound:
    await warm_up(system)
    n = max(2 * SHARE_DEPTH, params.count(SHARE_JOBS))
    two, one = Kept(), Kept()
    await asyncio.gather(
        keep_busy(system, JobSpec(PAIRS.key(), PAIRS.name, SHARE_S), 2, n // 2, SHARE_DEPTH, two),
        keep_busy(system, JobSpec(SINGLES.key(), SINGLES.name, SHARE_S), 1, n, SHARE_DEPTH, one),
    )
    runs = await system.collect([*two.handles, *one.handles], COLLECT_TIMEOUT_S)
    await system.aclose()
    return share_round(runs[: len(two.handles)], runs[len(two.handles) :])


def run_share(params: Params) -> ShareRound:
    """`gang-share` on a stack of its own: four cards on one host, reservations on."""
    with tempfile.TemporaryDirectory(prefix="gang-share-") as tmp:
        system = GangSystem((PAIRS, SINGLES), 4, True, Path(tmp))
        try:
            system.start()
            return asyncio.run(_share_round(system, params))
        finally:
            system.stop()


def report(rounds: Sequence[BoundRound], share: ShareRound | None) -> Report:
    """The bound's rounds, and the share round when it ran."""
    columns = (
        "reservations",
        "pair wait s",
        "bound s",
        "stream ended after s",
        "ran between",
        "passed",
    )
    rows = [
        ("on" if r.reservations else "off", r.pair_wait_s, r.bound_s, r.stream_end_after_s,
         r.ran_between, r.passed)
        for r in rounds
    ]  # fmt: skip
    sections = [Section("a 2-card job amid a stream of 1-card jobs", columns, rows)]
    notes = [summary(r) for r in rounds]
    if share is not None:
        notes.append(share_summary(share))
    return Report(BOUND, sections, notes=notes)


def summary(r: BoundRound) -> str:
    """One line per round of the bound."""
    if r.reservations:
        verdict = "within" if r.pair_wait_s <= r.bound_s else "NOT within"
        return (
            f"gangs, reservations on: the 2-card job waited {r.pair_wait_s:.1f} s, {verdict} its "
            f"bound of {r.bound_s:.1f} s; {r.ran_between} stream jobs started in between, "
            f"{r.passed} of them submitted after it"
        )
    return (
        f"gangs, reservations off: the 2-card job waited {r.pair_wait_s:.1f} s; the stream "
        f"ended {r.stream_end_after_s:.1f} s after it was submitted"
    )


def share_summary(s: ShareRound) -> str:
    """One line for gang-share."""
    return (
        f"gang-share: over the {s.window_s:.0f} s both competed, the 2-card account had "
        f"{s.pairs_share:.1%} of the GPU-seconds ({s.pairs_gpu_s:.0f} against "
        f"{s.singles_gpu_s:.0f})"
    )
