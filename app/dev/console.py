"""`fairgpu dev` as a person sees it: start the stack, print where it is, keep it running (a
process that dies is started again, one line each), stop it on Ctrl-C."""

from __future__ import annotations

import logging
import signal
import tempfile
import threading
import time
from collections.abc import Sequence
from importlib.metadata import entry_points
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from rich.console import Console

from app.auth import Accounts
from app.dev import fleet
from app.dev.port import PortInUseError
from app.dev.stack import Stack
from app.fleet.catalog import Catalog
from app.fleet.worker_class import worker_host
from app.jobs.registry import BUILTIN_MODULE, ENTRY_POINT_GROUP, RegistryError, load_registry
from app.scripting import sandbox
from app.settings import Settings, get_settings
from app.worker.broker_check import consumer_timeout_problem

DEMO_KEY = "default_api_key"
SIGNAL_CHECK_S = 0.5


def make_console(**options: Any) -> Console:
    """The console of `fairgpu dev`: a line longer than the terminal is left for the terminal
    to wrap, never broken with newlines, so that a URL or a command copied from it works."""
    return Console(soft_wrap=True, **options)


console = make_console()


def run(
    port: int, workers: int | None, redis_port: int | None = None, worker: Sequence[str] = ()
) -> None:
    """Run Redis, the API, `workers` CPU workers (1 when None), or one per --worker CLASS[@HOST]
    (fleet.py), and the periodic reclaim until a signal; the embedded Redis on redis_port if
    given (else EMBEDDED_REDIS_PORT, else a free port)."""
    # One line a record, with the time: what the supervisor says is read by a person, between
    # the banner's lines, and must never be a traceback.
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    settings = get_settings()
    given_redis = "redis_url" in settings.model_fields_set  # REDIS_URL was set
    update: dict[str, object] = {"port": port, "host": "127.0.0.1"}
    if redis_port is not None:
        update["embedded_redis_port"] = redis_port
    settings = settings.model_copy(update=update)
    try:  # before anything starts: a wrong flag is one line, and nothing to stop
        workers_to_start = fleet.plan(
            worker, workers, Catalog.from_setting(settings.gpu_classes), worker_host(settings)
        )
    except fleet.FleetSpecError as exc:
        console.print(f"fairgpu dev: {exc}", markup=False, highlight=False)
        raise SystemExit(2) from None
    accounts = Accounts.load(settings.users_file)
    logs = settings.dev_log_dir or run_log_dir(port)
    stack = Stack(
        settings,
        use_given_redis=given_redis,
        fleet=workers_to_start,
        log_dir=logs,
        supervise=True,
    )
    try:
        with console.status("starting Redis, the API and the workers..."):
            stack.start()
            stack.wait_for_workers()  # "up" means a job submitted now starts at once
    except (RuntimeError, TimeoutError, OSError) as exc:
        stack.stop()  # what did start
        said = f"fairgpu dev could not start: {exc}"
        if logs.exists():
            said += f"; logs in {logs}"
        console.print(str(exc) if isinstance(exc, PortInUseError) else said, markup=False)
        raise SystemExit(1) from None
    try:
        banner(console, stack, accounts, str(settings.users_file))
        _wait_for_signal()
    finally:
        with console.status("stopping..."):
            stack.stop()
        # The logs outlive the stack's folder: they are what one reads after a surprise.
        console.print(f"stopped; its logs stay in {stack.log_dir}", markup=False, highlight=False)


def run_log_dir(port: int) -> Path:
    """A new folder for one run's logs, kept after it stops: in the system's temporary folder,
    named by the time and the API's port (two stacks never share a port), made at start."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path(tempfile.gettempdir()) / f"fairgpu-dev-{stamp}-port{port}"


def banner(out: Console, stack: Stack, accounts: Accounts, users_file: str) -> None:
    """Where the stack is, the broker, database and job types it uses, a key to try it with,
    a first command, and a warning about the broker's settings if it needs one."""
    where = "embedded, stops with the stack" if stack.redis_server else "from REDIS_URL"
    redis_is = f"{without_password(stack.redis_url)} ({where})"
    sentinels = stack.settings.redis_sentinels
    if sentinels:
        master = stack.settings.redis_sentinel_master
        redis_is = f"the primary '{master}' of the Sentinels at {', '.join(sentinels)}"
    out.print(f"[bold green]fairgpu is up[/] at [bold]{stack.url}[/]")
    out.print(f"Dashboard: [bold]{stack.url}/dashboard[/]  API docs: {stack.url}/docs")
    out.print(
        f"Redis: {redis_is}; {stack.worker_count} CPU worker(s); logs in {stack.log_dir}",
        markup=False,
    )
    catalog = Catalog.from_setting(stack.settings.gpu_classes)
    lines = (fleet.describe(stack.fleet, catalog), store_line(stack), jobs_line(stack.settings))
    for line in (*lines, scripts_line(stack.settings), webhook_line(stack)):
        if line:  # no fleet line without a catalog: the banner is as it always was
            out.print(line, markup=False, highlight=False)
    demo = next((a for a in accounts.all() if DEMO_KEY in a.api_keys), None)
    if demo is not None:
        out.print(
            f"Demo key: [bold]{DEMO_KEY}[/] (account {demo.user_id}); every key is in {users_file}"
        )
    out.print(curl_example(stack.url), markup=False, highlight=False)
    if problem := consumer_timeout_problem(stack.settings):  # each worker's log says it too
        out.print(f"Warning: {problem}", markup=False, highlight=False, style="bold red")
    out.print("Ctrl-C stops everything; a process that dies is started again.")


def store_line(stack: Stack) -> str:
    """The Celery broker and the SQL database the stack's processes use."""
    settings = stack.settings
    broker = "the Redis above"
    if settings.celery_broker_url:
        broker = f"{without_password(settings.celery_broker_url)} (CELERY_BROKER_URL)"
    source = "DATABASE_URL" if settings.database_url else "the default"
    database = f"{without_password(settings.database)} ({source})"
    if stack.own_database:
        database = f"{settings.database} (made for this run; set DATABASE_URL to keep one)"
    return f"Broker: {broker}; database: {database}"


def jobs_line(settings: Settings) -> str:
    """The job types the stack runs, and the modules and entry points they come from."""
    modules = [BUILTIN_MODULE, *settings.job_modules]
    points = [point.value for point in entry_points(group=ENTRY_POINT_GROUP)]
    origin = ", ".join(modules) + (f" and the entry points {', '.join(points)}" if points else "")
    if not settings.job_modules:
        origin += " (JOB_MODULES adds yours)"
    try:
        names = ", ".join(job_type.name for job_type in load_registry(settings.job_modules).types())
    except RegistryError as exc:
        return f"Jobs: from {origin}; cannot list them: {exc}"
    return f"Jobs: {names} from {origin}"


def scripts_line(settings: Settings) -> str:
    """Whether this machine's workers run script jobs, or why they refuse them: said at the
    start, not at a newcomer's first `fairgpu run`."""
    if settings.script_sandbox == "none":
        return "Scripts: unconfined (SCRIPT_SANDBOX=none): your own code on your own machine only"
    problem = sandbox.available(sandbox.NOBODY) or sandbox.network_available(sandbox.NOBODY)
    if problem is not None:
        return f"Scripts: refused on this machine ({problem}; docs/scripts.md, For the operator)"
    return "Scripts: `uv run fairgpu run -- python train.py` in a project folder (docs/scripts.md)"


def webhook_line(stack: Stack) -> str:
    """How the stack's webhooks are signed: the secret it made, in full, for a receiver to
    verify with (docs/webhooks.md); one from the environment is not printed."""
    if stack.generated_secret is None:
        return "Webhooks: signed with WEBHOOK_SECRET from the environment"
    return (
        f"Webhooks: signed with WEBHOOK_SECRET={stack.generated_secret} "
        "(made for this run; set WEBHOOK_SECRET to keep one)"
    )


def curl_example(url: str) -> str:
    """The banner's first command to try: submit a 2-second job with the demo key."""
    body = '{"kind": "short", "duration_s": 2}'
    return (
        f"Try: curl -s -X POST {url}/enqueue-task -H 'X-API-Key: {DEMO_KEY}' "
        f"-H 'Content-Type: application/json' -d '{body}'"
    )


def without_password(url: str) -> str:
    """A Redis URL fit to print: its password, if any, replaced by ***."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def _wait_for_signal() -> None:
    stop = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    # SIGHUP too: the children have sessions of their own, so a closed terminal reaches only us.
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, handler)
    # A timed wait, again and again: the kernel may hand the signal to another thread, and then
    # Python runs the handler only when this thread next returns from a wait.
    while not stop.wait(SIGNAL_CHECK_S):
        pass
