"""`fairgpu dev` as a person sees it: start the stack, print where it is, stop it on Ctrl-C."""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType
from urllib.parse import urlsplit, urlunsplit

from rich.console import Console

from app.auth import Accounts
from app.dev.stack import Stack
from app.settings import get_settings

console = Console()


def run(port: int, workers: int) -> None:
    """Run Redis, the API, `workers` CPU workers and the periodic reclaim until a signal."""
    logging.basicConfig(level=logging.WARNING)
    settings = get_settings()
    given_redis = "redis_url" in settings.model_fields_set  # REDIS_URL was set
    settings = settings.model_copy(update={"port": port, "host": "127.0.0.1"})
    accounts = Accounts.load(settings.users_file)
    stack = Stack(settings, use_given_redis=given_redis, workers=workers)
    with console.status("starting Redis, the API and the workers..."):
        stack.start()
    try:
        where = "embedded, stops with the stack" if stack.redis_server else "from REDIS_URL"
        console.print(
            f"[bold green]fairgpu is up[/] at [bold]{stack.url}[/]  (docs: {stack.url}/docs)"
        )
        console.print(
            f"Redis: {without_password(stack.redis_url)} ({where}); {workers} CPU worker(s); "
            f"logs in {stack.log_dir}"
        )

        demo = next((a for a in accounts.all() if "default_api_key" in a.api_keys), None)
        if demo is not None:
            console.print(f"Demo key: [bold]default_api_key[/] (account {demo.user_id})")
        console.print(
            f"Try: curl -s -X POST {stack.url}/enqueue-task -H 'X-API-Key: default_api_key' "
            '-H \'Content-Type: application/json\' -d \'{"kind": "short", "duration_s": 2}\''
        )
        console.print("Ctrl-C stops everything.")
        _wait_for_signal()
    finally:
        with console.status("stopping..."):
            stack.stop()
        console.print("stopped.")


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

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    stop.wait()
