"""A worker's heartbeat is one typed record (app/store/workers.py Seen, its run a Running): what
the worker writes (encode) reads back (read) as it was, field by field, and an entry of an older
release or of garbage reads as far as it can."""

from __future__ import annotations

import json
from dataclasses import fields

import pytest

from app.store.workers import Running, Seen, parse

RUN = Running("job-1", "alice", "long", 1_700_000_000.25, preemptible=True)


@pytest.mark.parametrize(
    "seen",
    [
        Seen("gpu0@box", ("short", "long"), 1_700_000_001.5),
        Seen("gpu0@box", ("long",), 1_700_000_001.5, 1_700_000_600.0, running=RUN),
        Seen("gpu1@box", ("short",), 1_700_000_001.5, broken="its device is unusable: gone"),
    ],
)
def test_a_heartbeat_reads_back_as_it_was_written(seen: Seen) -> None:
    assert Seen.read(seen.name, seen.encode()) == seen
    assert parse({seen.name.encode(): seen.encode().encode()}) == [seen]


def test_every_field_of_a_run_is_written_by_its_name() -> None:
    written = json.loads(Seen("w", ("long",), 1.0, running=RUN).encode())["running"]
    assert written == {field.name: getattr(RUN, field.name) for field in fields(Running)}
    assert Running.read(written) == RUN


def test_a_run_of_a_release_before_preemption_reads_as_not_preemptible() -> None:
    old = {"job": "j", "account": "a", "kind": "short", "since": 5.0}
    assert Running.read(old) == Running("j", "a", "short", 5.0, preemptible=False)


@pytest.mark.parametrize(
    "raw",
    [None, "a run", {"job": "j", "since": "x"}, {"job": "j", "account": "a", "kind": "k"}],
)
def test_a_run_this_release_cannot_read_is_none(raw: object) -> None:
    assert Running.read(raw) is None


def test_a_heartbeat_that_is_not_one_is_skipped() -> None:
    entries = {"a": "[]", "b": json.dumps({"queues": ["x"], "seen": "nan"}), "c": "{"}
    assert parse(entries) == []
