"""Stack: the whole service on one machine, as processes: Redis (embedded unless one is given),
the API, N CPU workers (or a simulated fleet of classes and hosts: fleet.py), the webhook
sender, and the periodic reclaim. `fairgpu dev` runs one,
supervised (a process that dies is started again, see supervisor.py); so do the end-to-end tests,
which also kill its workers and so leave supervision off.

What the environment leaves unset, the stack sets for its processes: ARTIFACTS_DIR is a folder in
its workdir, WEBHOOK_SECRET a key made for this run (the banner prints it), and
SCRIPT_ENV_CACHE_DIR a cache of script jobs' environments of its own (scripts.py). The
processes' logs go to log_dir: the workdir unless given (`fairgpu dev` gives a folder that
outlives it).

The API's port is checked before anything starts (port.py), and the stack is up only once the
socket that answers on it is its own API's: a server that another program (another fairgpu, say)
runs on that port is never taken for it.
"""

from __future__ import annotations

import base64
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType

import httpx
import redis
from kombu.exceptions import OperationalError
from pydantic import SecretStr

from app import connections
from app.auth import Accounts
from app.dev import port, processes, ready, scripts
from app.dev.fleet import FleetWorker, plain
from app.dev.redis_server import RedisServer, free_port
from app.dev.supervisor import RedisWatch, Slot, Supervisor, one_line
from app.settings import Settings
from app.wiring.service import build

log = logging.getLogger(__name__)
START_TIMEOUT_S = 30.0
#: A worker's start: Celery, and its warm child loading the job types (more on a busy machine).
WORKERS_TIMEOUT_S = 60.0


def reachable(url: str) -> bool:
    """Whether a Redis answers PING at url within a second."""
    return _answers(redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1))


def primary_reachable(settings: Settings) -> bool:
    """Whether the settings' Redis (the Sentinels' primary, under Sentinel) answers PING within
    a second."""
    client = connections.sync_client(settings, socket_connect_timeout=1, socket_timeout=1)
    return _answers(client)


def _answers(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except (redis.RedisError, OSError):
        return False
    finally:
        client.close()


class Stack:
    """Redis, the API, workers and the reclaim timer, started and stopped together."""

    def __init__(
        self,
        settings: Settings,
        *,
        use_given_redis: bool = True,
        workers: int = 1,
        fleet: Sequence[FleetWorker] | None = None,
        workdir: Path | None = None,
        log_dir: Path | None = None,
        supervise: bool = False,
    ) -> None:
        self.settings = settings
        self.supervise = supervise
        self._given_redis = settings.redis_url if use_given_redis else None
        self.port = settings.port
        #: The workers it starts: `workers` plain ones unless a fleet is given.
        self.fleet = list(plain(workers) if fleet is None else fleet)
        self.worker_count = len(self.fleet)
        self._tmp = None if workdir else tempfile.TemporaryDirectory(prefix="fairgpu-")
        self.workdir = workdir or Path(self._tmp.name)  # type: ignore[union-attr]
        self.log_dir = log_dir or self.workdir
        self.redis_server: RedisServer | None = None
        self.redis_url = ""
        self.env: dict[str, str] = {}
        self.api: subprocess.Popen[bytes] | None = None
        self.webhooks: subprocess.Popen[bytes] | None = None
        #: The WEBHOOK_SECRET the stack made, when the environment gave none.
        self.generated_secret: str | None = None
        #: Whether the SQL database is the stack's own SQLite file (DATABASE_URL was unset).
        self.own_database = False
        self.env_cache: Path | None = None  # its own SCRIPT_ENV_CACHE_DIR, removed at stop
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        # each worker's queues and environment, to start it again alike
        self._started: dict[str, tuple[str, dict[str, str]]] = {}
        self._lock = threading.RLock()  # the supervisor's ticks and the stack's own changes
        self._stop = threading.Event()
        self._reclaimer: threading.Thread | None = None
        self._supervisor: Supervisor | None = None
        self.redis_watch = RedisWatch("")

    @property
    def url(self) -> str:
        """The API's base URL."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Stack:
        """Start everything and wait until the API answers /health; port.PortInUseError, with
        nothing started, when another program holds the API's port (or EMBEDDED_REDIS_PORT, for
        a Redis of its own). The workers may still be starting: wait_for_workers. Under Sentinel
        (REDIS_SENTINELS) the stack uses the primary the Sentinels elect, and never starts a
        Redis of its own, nor one in place of a lost primary: the Sentinels replace it."""
        port.check_free(self.settings.host, self.port)
        self.redis_url = self._given_redis_url()
        chosen = self.settings.embedded_redis_port
        if not self.redis_url and chosen is not None:  # taken: one clear line, not Redis's log
            port.check_free("127.0.0.1", chosen, "the embedded Redis's port")
        self.log_dir.mkdir(parents=True, exist_ok=True)  # only now: a refusal leaves nothing
        if not self.redis_url:
            self.redis_server = RedisServer(
                self.workdir / "redis",
                port=chosen or free_port(besides=self.port),  # never the API's, not bound yet
                appendonly=True,
                new_session=self.supervise,
                log=self.log_dir / "redis.log",
            ).start()
            self.redis_url = self.redis_server.url
        self.redis_watch = RedisWatch(self.redis_url)
        update = {"redis_url": self.redis_url, **self._own_defaults()}
        self.env_cache = scripts.own_env_cache(self.settings)  # made here: stop removes it
        if self.env_cache is not None:
            update[scripts.ENV_CACHE] = self.env_cache
        self.settings = self.settings.model_copy(update=update)
        self.env = {**os.environ, **as_environment(self.settings)}
        self.api = self._spawn("api", "app.api.serve", {})
        self._start_webhooks()
        for worker in self.fleet:
            self.start_worker(worker.name, env=worker.env)
        self.wait_for_api()
        self._reclaimer = threading.Thread(target=self._reclaim_loop, name="reclaim", daemon=True)
        self._reclaimer.start()
        if self.supervise:
            self._supervisor = Supervisor(self._slots, self.redis_watch, self._ping, self._lock)
            self._supervisor.start()
        return self

    def _given_redis_url(self) -> str:
        """The Redis to use that is not the stack's own ("" when it starts one): the Sentinels'
        primary, or REDIS_URL when given and reachable."""
        if self.settings.redis_sentinels:
            return self.settings.redis_url
        if self._given_redis and reachable(self._given_redis):
            return self._given_redis
        return ""

    def _own_defaults(self) -> dict[str, object]:
        """The settings the stack picks where the environment gave none: its own artifacts
        folder and SQLite database, and a webhook secret for this run."""
        defaults: dict[str, object] = {}
        if self.settings.artifacts_dir is None:
            defaults["artifacts_dir"] = self.workdir / "artifacts"
        if self.settings.database_url is None:
            defaults["database_url"] = f"sqlite:///{self.workdir / 'fairgpu.db'}"
            self.own_database = True
        secret = self.settings.webhook_secret
        if secret is None or not secret.get_secret_value():
            self.generated_secret = new_webhook_secret()
            defaults["webhook_secret"] = SecretStr(self.generated_secret)
        return defaults

    def _start_webhooks(self) -> None:
        with self._lock:
            self.webhooks = self._spawn("webhooks", "app.webhooks", {})

    def start_worker(
        self, name: str, queues: str = "short,long", env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """Start one CPU worker called <name>@<host> on the given queues (with more
        environment variables, if given: a WORKER_NAME there replaces that name)."""
        env = {
            "WORKER_NAME": worker_name(name),
            "WORKER_QUEUES": queues,
            "CUDA_VISIBLE_DEVICES": "",
            **(env or {}),
        }
        with self._lock:
            process = self._spawn(name, "app.worker.main", env)
            self.workers[name] = process
            self._started[name] = (queues, env)
        return process

    def kill_worker(self, name: str) -> None:
        """SIGKILL a worker, as a crash would; a supervised stack does not start it again."""
        with self._lock:
            process = self.workers.pop(name)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=START_TIMEOUT_S)

    def _spawn(self, name: str, module: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-m", module]
        log_file = self.log_dir / f"{name}.log"
        # Supervised, each child has a session of its own: Ctrl-C reaches only `fairgpu dev`,
        # which stops them in order, rather than killing them under a supervisor that would
        # start them again.
        return processes.spawn(argv, {**self.env, **env}, log_file, new_session=self.supervise)

    def _slots(self) -> list[Slot]:
        """What the supervisor keeps running: the API, the webhook sender, each worker, and a
        Redis of our own."""
        slots = []
        if self.api is not None:
            slots.append(Slot("the API", self.api.poll, self._restart_api))
        if self.webhooks is not None:
            slots.append(Slot("the webhook sender", self.webhooks.poll, self._start_webhooks))
        for name, process in self.workers.items():
            slots.append(Slot(f"worker {name}", process.poll, self._restarter(name)))
        server = self.redis_server
        if server is not None and server.process is not None:
            what = f"the embedded Redis on port {server.port}"
            slots.append(Slot(what, server.process.poll, server.start, redis=True))
        return slots

    def _restart_api(self) -> None:
        port.check_free(self.settings.host, self.port)  # else the supervisor says who holds it
        self.api = self._spawn("api", "app.api.serve", {})

    def _restarter(self, name: str) -> Callable[[], object]:
        return lambda: self.start_worker(name, *self._started[name])

    def _ping(self) -> bool:
        return primary_reachable(self.settings)

    def wait_for_workers(self, timeout_s: float = WORKERS_TIMEOUT_S) -> None:
        """Wait until each of the stack's workers takes jobs (its heartbeat is in Redis:
        ready.py); TimeoutError with the last line of the log of one that does not."""
        with self._lock:
            names = [self._started[name][1]["WORKER_NAME"] for name in self.workers]
        ready.wait_for_workers(
            self.settings,
            names,
            lambda name: last_line(self.log_dir / f"{name.partition('@')[0]}.log"),
            timeout_s,
        )

    def wait_for_api(self) -> None:
        """Wait until api_answers(). PortInUseError, or RuntimeError with the last line of its log,
        at once if the API's process has exited."""
        processes.wait_until(self.api_answers, START_TIMEOUT_S, "the API's /health")

    def api_answers(self) -> bool:
        """Whether the stack's own API answers /health with 200 (another server on its port
        does not count); PortInUseError or RuntimeError once its process has exited."""
        assert self.api is not None
        if self.api.poll() is not None:
            if not port.is_free(self.settings.host, self.port):  # taken since the check
                raise port.PortInUseError(self.port)
            # The log's own words: the log itself goes with the workdir when the stack stops.
            raise RuntimeError(f"the API exited at start: {last_line(self.log_dir / 'api.log')}")
        if not self._api_listens():
            return False
        try:
            return httpx.get(f"{self.url}/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def _api_listens(self) -> bool:
        """Whether the socket listening on the port is the API process's own (True where /proc
        cannot tell: the port was free when the stack started)."""
        assert self.api is not None
        listening, its_own = port.listening(self.port), port.sockets_of(self.api.pid)
        return listening is None or its_own is None or bool(listening & its_own)

    def _reclaim_loop(self) -> None:
        """The dev stack's own timer in place of Celery Beat: the artifact sweep (when due), and
        reclaim_and_dispatch per queue."""
        settings = self.settings
        service = build(settings, Accounts.load(settings.users_file))
        try:
            while not self._stop.wait(settings.reclaim_interval_s):
                steps: list[tuple[str, Callable[[], object]]] = [
                    ("sweep of artifacts", service.sweep_artifacts)
                ]
                steps += [
                    (f"reclaim of {q.name}", q.reclaim_and_dispatch)
                    for q in service.queues.values()
                ]
                reached = [self._attempt(what, step) for what, step in steps]
                if all(reached) and self._supervisor is None:
                    self.redis_watch.up()
        finally:
            service.close()

    def _attempt(self, what: str, step: Callable[[], object]) -> bool:
        """Run one step of the timer; whether it reached Redis. Redis away is said once, by the
        watch (the supervisor's, which pings it, when there is one), not as a traceback each
        round; any other failure is one line."""
        try:
            step()
        except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
            if self._supervisor is None:
                self.redis_watch.down(f"{self.redis_url}: {exc}; waiting for it")
            return False
        except (redis.RedisError, OperationalError) as exc:
            log.warning(
                "%s failed: %s; next try in %g s",
                what,
                one_line(str(exc)),
                self.settings.reclaim_interval_s,
            )
        return True

    def stop(self) -> None:
        """Stop the supervisor, the timer, the workers, the API, and the Redis this stack
        started."""
        if self._supervisor is not None:
            self._supervisor.stop()  # first: nothing stopped below is started again
        self._stop.set()
        children = [*self.workers.values(), *([self.api] if self.api else [])]
        children += [self.webhooks] if self.webhooks else []
        if children:  # all at once, so that the slowest sets the time, not the sum
            with ThreadPoolExecutor(len(children)) as pool:
                list(pool.map(processes.stop, children))
        if self._reclaimer is not None:
            self._reclaimer.join(timeout=10)
        if self.redis_server is not None:
            self.redis_server.stop()
        scripts.remove(self.env_cache)
        if self._tmp is not None:
            self._tmp.cleanup()

    def __enter__(self) -> Stack:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def worker_name(name: str) -> str:
    """The name a worker of the stack goes by (its heartbeat's, Celery's): <name>@<host>."""
    return f"{name}@{socket.gethostname()}"


def last_line(log: Path) -> str:
    """The last line a process wrote to its log, on one line ("no output" for none)."""
    try:
        lines = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "no output"
    return one_line(lines[-1]) if lines else "no output"


def new_webhook_secret() -> str:
    """A random WEBHOOK_SECRET in the whsec_<base64> form, 32 bytes as Standard Webhooks
    suggests."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode("ascii")


def as_environment(settings: Settings) -> dict[str, str]:
    """The settings as the environment variables that make a child process read them back
    exactly: lists comma-separated, secrets in the clear (a child needs the secret itself, not
    the stars that str() shows), unset values left unset ("None" would not parse back)."""
    return {
        name.upper(): _as_text(value)
        for name in type(settings).model_fields
        if (value := getattr(settings, name)) is not None
    }


def _as_text(value: object) -> str:
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, list):
        return ",".join(map(str, value))
    return str(value)
