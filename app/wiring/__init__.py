"""What every fairgpu process shares, the API and the workers alike: the Celery app and its
reliability settings (celery_app.py), the fair queues and the job tasks that carry them
(service.py), and the order in which a worker serving both queues takes them (short_first.py).
The API imports nothing of app/worker/; a worker attaches its runner to what this builds."""
