"""The webhook sender: `python -m app.webhooks`. Any number may run against one Redis (Compose
replicas): they share the deliveries, and none is handled by two at once. SIGTERM or SIGINT
stops it once the deliveries under way have ended."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys

from pydantic import ValidationError
from standardwebhooks import Webhook

from app import connections, logs
from app.settings import Settings, get_settings
from app.webhooks.sender import Sender, http_client
from app.webhooks.signing import signer

log = logging.getLogger("app.webhooks")


def _settings() -> Settings:
    try:
        return get_settings()
    except ValidationError as exc:
        sys.exit(f"fairgpu webhooks refuses to start: {exc}")


def _signer(settings: Settings) -> Webhook | None:
    try:
        return signer(settings)
    except ValueError as exc:
        sys.exit(f"fairgpu webhooks refuses to start: {exc}")


async def serve(settings: Settings, sign: Webhook | None) -> None:
    """Send webhooks until SIGTERM or SIGINT. Without a secret there is nothing to send (a
    submit with a webhook is refused): wait for the signal, rather than exit and be restarted
    in a loop by Compose or the dev stack."""
    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopped.set)
    if sign is None:
        log.warning("WEBHOOK_SECRET is not set: this deployment sends no webhooks")
        await stopped.wait()
        return
    client = connections.async_client(settings)
    consumer = f"{socket.gethostname()}:{os.getpid()}"
    try:
        async with http_client() as http:
            sender = Sender(settings, client, http, sign, consumer)
            loop.add_signal_handler(signal.SIGTERM, sender.stop)
            loop.add_signal_handler(signal.SIGINT, sender.stop)
            log.info("webhook sender started", extra={"consumer": consumer})
            await sender.run()
    finally:
        await client.aclose()


def main() -> None:
    """Run the sender."""
    settings = _settings()
    logs.configure(settings.log_format, settings.log_level)
    # httpx's own line per request names the URL, whose query may hold a receiver's token
    logging.getLogger("httpx").setLevel(logging.WARNING)
    asyncio.run(serve(settings, _signer(settings)))


if __name__ == "__main__":
    main()
