"""Job records, ownership, status events and bills in Redis.

keys.py names every key; record.py parses a job; jobs.py is the API's side (asyncio) and
recorder.py the workers' (blocking); workers.py reads the workers' heartbeats; scripts.py runs
lua/, one script per transition, each writing the new state, its event and its notification
atomically.
"""

from app.store.jobs import JobStore
from app.store.record import JobRecord
from app.store.recorder import JobRecorder, Started

__all__ = ["JobRecord", "JobRecorder", "JobStore", "Started"]
