"""fairgpu: a fair GPU job service on Redis and Celery."""
