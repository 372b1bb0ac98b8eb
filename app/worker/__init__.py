"""The worker process: main.py starts one Celery worker pinned to one device; celery_app.py holds
every reliability setting of Celery; runner.py runs one job under its lease; gpu.py picks the
device and runs the workload on it; presence.py keeps the worker's heartbeat."""
