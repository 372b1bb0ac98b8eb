"""One fairgpu worker pinned to one GPU (or the CPU); see app/worker/main.py. `celery -A worker
beat` and Flower find the Celery app here as `app`, built when first asked for: the worker's job
child imports this module again (multiprocessing's spawn) and must not build a worker."""

from typing import Any

from app.worker.main import main

__all__ = ["main"]


def __getattr__(name: str) -> Any:
    if name == "app":
        from app.worker import main as worker_main

        return worker_main.app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":
    main()
