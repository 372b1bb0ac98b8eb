"""Job records, ownership, status events and bills in Redis.

keys.py names every key; record.py parses a job; jobs.py is the API's side (asyncio) and
recorder.py the workers' (blocking); workers.py reads the workers' heartbeats; scripts.py runs
lua/, one script per transition, each writing the new state, its event and its notification
atomically; hooks.py puts a job's record into the fair queue's enqueue (submit.py: one call to
Redis per submit) and a run's start and end into its step on a worker's path, so that a job
costs a worker two calls to Redis.
"""

from app.store.hooks import RunHooks
from app.store.jobs import JobStore
from app.store.record import JobRecord
from app.store.recorder import JobRecorder, RunEnd, Started, started_of

__all__ = [
    "JobRecord",
    "JobRecorder",
    "JobStore",
    "RunEnd",
    "RunHooks",
    "Started",
    "started_of",
]
