"""`uv run python scripts/bench_script.py`: what a script job costs over a typed job of the same
work, and what a project's environment costs to build and to use again (issue 40).

(a) **Overhead.** A typed `burn` job with `duration_s` D (a CPU worker sleeps for it) against a
script job running `python -c "import time; time.sleep(D)"` in its sandbox, its environment
already built: each submitted to a real stack (app/dev/stack.py: Redis, the API, one worker, as
processes) and timed from the submit to the moment its status reads SUCCESS. Rounds alternate
the two (ABBA), so a drift in the machine's load hits both alike; the difference is taken per
round (script minus typed) and reported by its median and p90.

(b) **Environment.** A project whose `requirements.txt` names one small pure-Python package:
its first job builds the environment (`result.environment`: `cached: false` and the build's
seconds), the next job of the same project finds it built (`cached: true`). Each round changes a
comment in the requirements, so each first job builds anew. The build needs the package index:
when it cannot be reached (checked first, with uv), (b) is skipped and says so.

Nothing here asserts a time: tests/scripts/test_bench_script.py runs it with tiny settings.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from app.client.pack import pack
from app.dev.redis_server import free_port
from app.dev.stack import Stack
from app.settings import Settings
from scripts.benchkit.host import log, machine
from scripts.benchkit.stats import alternate, median, percentile

ROOT = Path(__file__).resolve().parents[1]
ACCOUNTS = ROOT / "fixtures" / "users.json"
ENDED = ("SUCCESS", "FAILURE", "REVOKED")
#: How often a job's status is read: it adds up to this much to every end-to-end time, alike.
POLL_S = 0.02
#: The small pure-Python package of (b), with no dependencies.
PACKAGE = "six==1.17.0"
VARIANTS = ("typed", "script")


@dataclass
class Run:
    """One job's times: submit to SUCCESS (the client's clock), and the server's own split of
    it into the wait for a start and the run."""

    total_s: float
    start_s: float
    run_s: float
    environment: dict[str, Any] | None = None


@dataclass
class Results:
    """What a benchmark run measured."""

    duration_s: float
    rounds: int
    runs: dict[str, list[Run]] = field(default_factory=lambda: {v: [] for v in VARIANTS})
    first: list[Run] = field(default_factory=list)
    cached: list[Run] = field(default_factory=list)
    skipped: str | None = None  # why (b) did not run


class JobError(RuntimeError):
    """A job of the benchmark did not succeed: its state and the last lines of its log."""


def script_key(accounts: Path = ACCOUNTS) -> str:
    """A plain API key of an account that may run scripts (the demo account)."""
    for account in json.loads(accounts.read_text())["accounts"]:
        plain = [k for k in account.get("api_keys", []) if not k.startswith("sha256:")]
        if account.get("run_scripts") and plain:
            return str(plain[0])
    raise SystemExit(f"{accounts.name}: no account with run_scripts and a plain key")


class Client:
    """The stack's API, as one account sees it."""

    def __init__(self, url: str, key: str) -> None:
        self.http = httpx.Client(base_url=url, headers={"X-API-Key": key}, timeout=30)

    def upload(self, folder: Path) -> str:
        """Pack `folder` as `fairgpu run` does, upload it, and return its code id."""
        packed = pack(folder)
        try:
            reply = self.http.post(
                "/code",
                content=packed.path.read_bytes(),
                headers={"Content-Type": "application/gzip"},
            )
        finally:
            packed.discard()
        if reply.status_code not in (200, 201):
            raise SystemExit(f"POST /code: {reply.status_code} {reply.text}")
        return str(reply.json()["code_id"])

    def run(self, body: dict[str, Any], timeout_s: float) -> Run:
        """Submit a job and wait for its end; its times, or JobError unless it succeeded."""
        began = time.perf_counter()
        reply = self.http.post("/enqueue-task", json=body)
        if reply.status_code != 200:
            raise SystemExit(f"POST /enqueue-task: {reply.status_code} {reply.text}")
        task_id = reply.json()["task_id"]
        state = self._ended(task_id, timeout_s)
        total = time.perf_counter() - began
        result = state.get("result") or {}
        if state["status"] != "SUCCESS":
            raise JobError(
                f"{body['type']} job {state['status']}: {json.dumps(state)}\n"
                f"{self.log_tail(task_id)}"
            )
        started, finished = result.get("started_at"), result.get("finished_at")
        enqueued = result.get("enqueued_at") or state.get("enqueued_at")
        return Run(
            total_s=total,
            start_s=(started - enqueued) if started and enqueued else float("nan"),
            run_s=(finished - started) if started and finished else float("nan"),
            environment=result.get("environment"),
        )

    def _ended(self, task_id: str, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            state = dict(self.http.get(f"/task-status/{task_id}").json())
            if state["status"] in ENDED:
                return state
            if time.monotonic() > deadline:
                raise JobError(f"job {task_id} still {state['status']} after {timeout_s} s")
            time.sleep(POLL_S)

    def log_tail(self, task_id: str, lines: int = 20) -> str:
        reply = self.http.get(f"/tasks/{task_id}/logs")
        if reply.status_code != 200:
            return ""
        return "\n".join(line["text"] for line in reply.json()["lines"][-lines:])


def typed_body(duration_s: float) -> dict[str, Any]:
    return {"type": "burn", "input": {}, "duration_s": duration_s}


def script_body(code: str, command: list[str], limit_s: float) -> dict[str, Any]:
    return {"type": "script", "input": {"code": code, "command": command}, "duration_s": limit_s}


def sleep_command(duration_s: float) -> list[str]:
    return ["python", "-c", f"import time; time.sleep({duration_s!r})"]


def index_reachable() -> str | None:
    """None when uv can resolve PACKAGE from the index the workers use; else why not."""
    uv = shutil.which("uv")
    if uv is None:
        return "uv is not on PATH"
    try:
        done = subprocess.run(
            [uv, "pip", "compile", "-", "--no-header", "--quiet", "--no-cache"],
            input=PACKAGE,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return "uv could not resolve from the package index within 60 s"
    if done.returncode != 0:
        reason = done.stderr.strip().splitlines()[-1:] or [f"exit code {done.returncode}"]
        return f"uv could not resolve {PACKAGE} from the package index: {reason[0]}"
    return None


@contextmanager
def stack_up(workdir: Path) -> Iterator[Stack]:
    """A stack with one worker, its own Redis and SQLite, the demo accounts."""
    settings = Settings(users_file=ACCOUNTS, database_url=None, port=free_port())
    workdir.mkdir(parents=True, exist_ok=True)
    stack = Stack(settings, use_given_redis=False, workers=1, workdir=workdir)
    try:
        stack.start()
        stack.wait_for_workers()
        yield stack
    finally:
        stack.stop()


def project(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def measure(
    client: Client, workdir: Path, duration_s: float, rounds: int, env_rounds: int
) -> Results:
    """Both parts against a started stack; (b) skipped with its reason when it cannot run."""
    results = Results(duration_s, rounds)
    limit_s = duration_s + 30
    plain = client.upload(project(workdir / "plain", {"README.md": "bench_script.py\n"}))
    # Warm both up: the worker's first job of each type, and the script's environment built.
    client.run(typed_body(duration_s), limit_s + 60)
    warm = client.run(script_body(plain, sleep_command(0), limit_s), limit_s + 300)
    log(f"warm-up script job: environment {warm.environment}")
    for index, variant in alternate(rounds, VARIANTS):
        if variant == "typed":
            done = client.run(typed_body(duration_s), limit_s + 60)
        else:
            done = client.run(script_body(plain, sleep_command(duration_s), limit_s), limit_s + 60)
        results.runs[variant].append(done)
        log(f"round {index + 1}/{rounds} {variant}: {done.total_s:.3f} s")
    if env_rounds:
        results.skipped = index_reachable()
    if env_rounds and results.skipped is None:
        for index in range(env_rounds):
            requirements = f"{PACKAGE}\n# bench_script.py round {secrets.token_hex(4)}\n"
            folder = project(workdir / f"reqs{index}", {"requirements.txt": requirements})
            code = client.upload(folder)
            command = ["python", "-c", "import six"]
            first = client.run(script_body(code, command, limit_s), limit_s + 960)
            again = client.run(script_body(code, command, limit_s), limit_s + 60)
            results.first.append(first)
            results.cached.append(again)
            log(
                f"environment {index + 1}/{env_rounds}: {first.environment} then "
                f"{again.environment}"
            )
    elif not env_rounds:
        results.skipped = "--env-rounds 0"
    return results


def seconds(value: float) -> str:
    return f"{value:.3f}"


def report(results: Results, command: str) -> str:
    """The Markdown tables of a run."""
    d = results.duration_s
    typed, script = results.runs["typed"], results.runs["script"]
    diffs = [s.total_s - t.total_s for t, s in zip(typed, script, strict=True)]
    lines = [
        f"`{command}` ({machine()}; {results.rounds} rounds each, alternating; times in seconds)",
        "",
        "| job | submit to SUCCESS, median | p90 | start (enqueued to started), median |"
        " run (started to finished), median |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    hits = sum(1 for r in script if (r.environment or {}).get("cached") is True)
    rows = (
        (f"typed `burn`, duration_s {d:g}", typed),
        (
            f'script `python -c "import time; time.sleep({d:g})"`, environment '
            f"`cached: true` in {hits} of {len(script)}",
            script,
        ),
    )
    for name, runs in rows:
        totals = [r.total_s for r in runs]
        lines.append(
            f"| {name} | {seconds(median(totals))} | {seconds(percentile(totals, 90))} "
            f"| {seconds(median([r.start_s for r in runs]))} "
            f"| {seconds(median([r.run_s for r in runs]))} |"
        )
    lines.append(
        f"| **script minus typed**, per round | **{seconds(median(diffs))}** "
        f"| **{seconds(percentile(diffs, 90))}** | | |"
    )
    lines.append("")
    if results.skipped is not None:
        lines.append(f"Environment build: skipped ({results.skipped}).")
        return "\n".join(lines) + "\n"
    lines += [
        f"Environment of a project whose `requirements.txt` is `{PACKAGE}` "
        f"({len(results.first)} projects, each run twice):",
        "",
        "| job | `environment.cached` | `environment.seconds`, median "
        "| submit to SUCCESS, median |",
        "| --- | --- | ---: | ---: |",
    ]
    for name, runs in (("first job: the build", results.first), ("second job", results.cached)):
        cached = sorted({str((r.environment or {}).get("cached")).lower() for r in runs})
        built = [float((r.environment or {}).get("seconds", float("nan"))) for r in runs]
        lines.append(
            f"| {name} | {', '.join(cached)} | {seconds(median(built))} "
            f"| {seconds(median([r.total_s for r in runs]))} |"
        )
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20, help="rounds of (a), each job once")
    parser.add_argument("--duration", type=float, default=2.0, help="D: each job's work, in s")
    parser.add_argument("--env-rounds", type=int, default=3, help="projects built in (b)")
    parser.add_argument("--output", type=Path, help="also write the tables to this file")
    parser.add_argument("--quick", action="store_true", help="2 rounds of 0.2 s, 1 build")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.duration, args.env_rounds = 2, 0.2, min(args.env_rounds, 1)
    if args.rounds < 1 or args.duration <= 0 or args.env_rounds < 0:
        parser.error("--rounds >= 1, --duration > 0 and --env-rounds >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = "uv run python scripts/bench_script.py " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    # The sandbox's user must reach the job folders and environments under it: not a folder
    # only its owner may enter.
    workdir = Path(tempfile.mkdtemp(prefix="fairgpu-bench-script-"))
    workdir.chmod(0o711)
    try:
        with stack_up(workdir / "stack") as stack:
            client = Client(stack.url, script_key())
            try:
                results = measure(client, workdir, args.duration, args.rounds, args.env_rounds)
            except JobError as error:
                log(f"bench_script.py: {error}")
                return 1
            finally:
                client.http.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    text = report(results, command.strip())
    sys.stdout.write(text)
    if args.output is not None:
        args.output.write_text(text)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    sys.exit(main())
