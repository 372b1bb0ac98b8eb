"""The worker process: main.py starts one Celery worker pinned to one device (gpu.py picks it);
runner.py runs one job under its lease in the warm child process (child.py, job_process.py);
presence.py keeps the worker's heartbeat. The Celery app and the job tasks it shares with the
API are app/wiring/'s."""
