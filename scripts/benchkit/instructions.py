"""Instructions that redis-server executes per fair-queue operation, counted by callgrind.

Unlike time, an instruction count does not depend on what else the machine is doing, so it
shows what a change to the Lua scripts saves. Needs valgrind. Usage:

    uv run python scripts/count_instructions.py [--depth 1000] [--ops 300]
"""

from __future__ import annotations

import argparse
import os
import stat
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from app.dev import processes, redis_server
from app.dev.redis_server import RedisServer, find_binary
from app.vtrr import FairQueue, Item

PAYLOAD = "x" * 100


def wrapper(directory: Path, out: Path) -> Path:
    """A script that runs the real redis-server under callgrind, instrumentation off at start."""
    script = directory / "redis-under-callgrind.sh"
    script.write_text(
        "#!/bin/sh\n"
        f'exec valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="{out}.%p" '
        f'"{find_binary()}" "$@"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def control(pid: int, *args: str) -> None:
    """Send a command to the callgrind of redis-server pid."""
    subprocess.run(["callgrind_control", *args, str(pid)], check=True, stdout=subprocess.DEVNULL)


def count(pid: int, out: Path, work: Callable[[], None]) -> int:
    """Instructions redis-server executes while work() runs."""
    control(pid, "--zero")
    control(pid, "--instr=on")
    work()
    control(pid, "--instr=off")
    before = set(out.parent.glob(f"{out.name}.{pid}*"))
    control(pid, "--dump")
    # callgrind writes the dump asynchronously
    return processes.wait_until(lambda: totals(out, pid, before), 30, "callgrind's dump")


def totals(out: Path, pid: int, before: set[Path]) -> int:
    """The instruction total of a dump of pid's written since `before`; 0 while there is none."""
    for dump in set(out.parent.glob(f"{out.name}.{pid}*")) - before:
        for line in dump.read_text(errors="replace").splitlines():
            if line.startswith("totals:"):
                return int(line.split()[1])
    return 0


@contextmanager
def under_callgrind() -> Iterator[tuple[redis.Redis, int, Path]]:
    """A redis-server (find_binary's) started under callgrind, instrumentation off: a client on
    it, its pid and its dumps' path, for count()."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        os.environ["FAIRGPU_REDIS_SERVER"] = str(wrapper(Path(tmp), out))
        redis_server.START_TIMEOUT_S = 60.0  # valgrind starts slowly
        with RedisServer(Path(tmp) / "redis") as server:
            assert server.process is not None
            client = redis.Redis.from_url(server.url, socket_timeout=60)
            try:
                yield client, server.process.pid, out
            finally:
                client.close()


def main() -> int:
    """Count and print instructions per enqueue and per dequeue+ack."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=1000, help="items queued while measuring")
    parser.add_argument("--ops", type=int, default=300, help="operations counted of each kind")
    args = parser.parse_args()
    with under_callgrind() as (client, pid, out):
        queue = FairQueue(client, "bench")
        for start in range(0, args.depth, 1000):
            queue.enqueue("a", [Item(PAYLOAD) for _ in range(min(1000, args.depth - start))])

        def dequeue_ack() -> None:
            for _ in range(args.ops):
                lease = queue.dequeue()
                assert lease is not None
                queue.ack(lease.task_id, lease.token)

        def enqueue() -> None:
            for _ in range(args.ops):
                queue.enqueue("a", [Item(PAYLOAD)])

        dequeued = count(pid, out, dequeue_ack)
        enqueued = count(pid, out, enqueue)
    version = redis.__version__
    print(f"depth {args.depth}, {args.ops} ops each (redis-py {version}):")
    print(f"  dequeue+ack  {dequeued / args.ops:>10,.0f} instructions")
    print(f"  enqueue      {enqueued / args.ops:>10,.0f} instructions")
    return 0
