"""Test fixtures: one throwaway Redis server per test process, a clean database for each test.

`pytest -m "not integration"` on the whole tree (the unit tests, as the README runs them) is
spread over worker processes, one per core and at most MAX_WORKERS (pytest-xdist); each worker
has a Redis server of its own. Every other run stays in one process unless -n says otherwise:
the integration tests start real workers and APIs whose leases and heartbeats are timed, and
should not share the cores with other tests. An explicit -n (-n 0: one process) always wins.
"""

from __future__ import annotations

import functools
import gc
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.utils

from app.dev.redis_server import RedisServer
from tests import support
from tests.s3_server import moto_url, s3_client, s3_env  # noqa: F401 (fixtures: one set a run)
from tests.support import empty_test_database, test_database

# Where the environment sets PYTHONDONTWRITEBYTECODE (this machine's does), every pytest process
# compiled the app and assert-rewrote every test module anew: ~1.7 s of CPU a process, paid again
# by each xdist worker. The suite writes both to __pycache__/ (ignored by git) and reuses them.
sys.dont_write_bytecode = False

#: More workers than this gain nothing: the longest single tests (the fair queue's model test,
#: the schema fuzz) bound the run, and each worker pays for its own collection.
MAX_WORKERS = 4
#: The files whose tests take longest, longest first: a worker starts on them while the others
#: share the rest, so that no worker is still on a long one when the rest are done. Only the
#: order changes; a file missing from this list just runs in its usual place.
LONGEST_FIRST = (
    "tests/vtrr/test_model.py",
    "tests/api/test_schema_fuzz.py",
    "tests/client/test_client_cli.py",
)
#: A free port can be taken by another process (another worker) between its choice and its use.
REDIS_START_TRIES = 3

# redis-py reads its own version from the installed package metadata (about 1 ms) each time it
# opens a connection, and the tests open thousands; the answer cannot change within a run.
redis.utils.get_lib_version = functools.cache(redis.utils.get_lib_version)


def _unit_tier(config: pytest.Config) -> bool:
    """Whether this run is the unit tier: -m "not integration" over the whole tree."""
    return (
        config.args_source == pytest.Config.ArgsSource.TESTPATHS
        and not config.option.collectonly
        and config.option.markexpr.split() == ["not", "integration"]
    )


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """Spread the unit tests over the cores: runs before xdist's own hook reads -n."""
    if (
        getattr(config.option, "numprocesses", "absent") is None  # xdist there, -n not given
        and not hasattr(config, "workerinput")  # not an xdist worker itself
        and _unit_tier(config)
    ):
        # xdist's count: the cores, or PYTEST_XDIST_AUTO_NUM_WORKERS; one worker only adds cost.
        workers = min(config.hook.pytest_xdist_auto_num_workers(config=config), MAX_WORKERS)
        if workers > 1:
            config.option.numprocesses = workers
    if getattr(config.option, "numprocesses", None) and config.option.maxschedchunk is None:
        # One test at a time to whichever worker is free (about 1 ms each): in the default
        # chunks of a hundred or more tests, one worker got every long test and finished last.
        config.option.maxschedchunk = 1


def pytest_configure(config: pytest.Config) -> None:
    """The unit tier generates a share of each property test's examples (tests/support.py);
    an xdist worker learns the tier from its controller (pytest_configure_node). Every test
    process has a SQLite database of its own (test_database)."""
    os.environ["DATABASE_URL"] = f"sqlite:///{test_database()}"
    worker = getattr(config, "workerinput", None)
    unit = worker["unit_tier"] if worker is not None else _unit_tier(config)
    if unit:
        support.unit_tier = True


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove this process's SQLite database (see test_database), then freeze the heap: the
    process is about to end.

    A test process holds some 500,000 objects by then (Hypothesis, Schemathesis, pydantic's
    validators, boto3 and moto's models, the collected tests), and what remains is only the
    interpreter's own shutdown: pytest's cleanup collects the garbage again and the interpreter
    collects it twice more as it clears its modules, each a pass over the whole heap. That took a
    worker 1.5 to 6 s of CPU after its last test, and the xdist controller waits for its workers
    to exit. gc.freeze() leaves the objects alive now out of those passes; they are freed with
    the process. It runs last (trylast), after pytest's own unconfigure hooks, so that the
    collection in which pytest looks for unraisable exceptions (unraisableexception) still sees
    the whole heap; every atexit handler, the modules' clearing and the collection of anything
    that becomes garbage afterwards still run."""
    shutil.rmtree(test_database().parent, ignore_errors=True)
    gc.freeze()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    node.workerinput["unit_tier"] = _unit_tier(node.config)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In an xdist worker, the longest files first (see LONGEST_FIRST); every worker collects
    the same order, as xdist requires."""
    if not hasattr(config, "workerinput"):
        return
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.partition("::")[0], len(rank)))


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A redis-server of the suite's own, never the machine's (one per xdist worker: each has a
    temporary directory of its own)."""
    server = _start_redis(tmp_path_factory.mktemp("redis"))
    try:
        yield server
    finally:
        server.stop()


def _start_redis(directory: Path) -> RedisServer:
    for _ in range(REDIS_START_TRIES - 1):
        try:
            return RedisServer(directory).start()  # a new free port each time
        except RuntimeError:  # exited at start: most likely its port was taken meanwhile
            continue
    return RedisServer(directory).start()


@pytest.fixture(scope="session")
def flusher(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """The client that empties the server around each test, one for the whole run: a new
    connection per test costs its handshake, about 3 ms, seconds over the suite."""
    client = redis.Redis.from_url(redis_server.url)
    yield client
    client.close()


@pytest.fixture
def redis_url(redis_server: RedisServer, flusher: redis.Redis) -> Iterator[str]:
    """The URL of an empty database, flushed again after the test; the process's SQL database
    is emptied with it."""
    flusher.flushall()
    empty_test_database()
    yield redis_server.url
    flusher.flushall()


@pytest.fixture
def r(redis_url: str, flusher: redis.Redis) -> redis.Redis:
    """A client on the empty database: the run's one. A client holds nothing of a test's but
    its connection (a test that closes it gets a new one at its next command), and opening one
    per test cost its handshake again."""
    return flusher
