"""One fairgpu worker pinned to one GPU (or the CPU); see app/worker.py. `celery -A worker beat`
and Flower find the Celery app here as `app`."""

from app.worker.main import app, main

__all__ = ["app"]

if __name__ == "__main__":
    main()
