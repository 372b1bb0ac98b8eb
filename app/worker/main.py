"""One fairgpu worker, pinned to one GPU (or the CPU): `uv run worker.py` or `python -m app.worker`.

CUDA_VISIBLE_DEVICES names the worker's one device (none, or "-1", for a CPU worker); naming more
than one is refused. WORKER_QUEUES picks `short`, `long` or both (the default). The worker runs one
job at a time in its own process (Celery's solo pool): CUDA does not survive a fork, and a
SIGKILL then takes the job down with the worker, whose lease the fair queue reclaims.

The module also exposes the Celery app as `app` for `celery -A worker beat` and Flower.
"""

from __future__ import annotations

import os
import sys

from celery import signals
from pydantic import ValidationError

from app import logs
from app.auth import Accounts
from app.settings import get_settings
from app.worker import gpu
from app.worker.celery_app import worker_argv
from app.worker.presence import Presence
from app.worker.runner import build_worker, worker_name


def _device() -> gpu.Device:
    try:
        device = gpu.choose_device(os.environ, gpu.torch_cuda_count)
    except gpu.DeviceError as exc:
        sys.exit(f"fairgpu worker refuses to start: {exc}")
    if device.gpu_id is not None and settings.host_gpu_id is not None:
        return gpu.Device(gpu_id=settings.host_gpu_id)  # a container numbers its one card 0
    return device


try:
    settings = get_settings()
except ValidationError as exc:  # a bad WORKER_QUEUES, say: one line, not a traceback
    sys.exit(f"fairgpu worker refuses to start: {exc}")
device = _device()
service, runner = build_worker(settings, Accounts.load(settings.users_file), device)
app = service.celery


def main() -> None:
    """Run the worker until it is stopped."""
    logs.configure(settings.log_format, settings.log_level)
    queues = settings.worker_queues
    name = worker_name(settings, device)
    beats = Presence(service.recorder.redis, name, queues, settings.heartbeat_seconds)
    runner.on_busy = beats.busy
    signals.worker_ready.connect(lambda **_: beats.start(), weak=False)
    signals.worker_shutdown.connect(lambda **_: beats.stop(), weak=False)
    app.worker_main(worker_argv(queues, name))


if __name__ == "__main__":
    main()
