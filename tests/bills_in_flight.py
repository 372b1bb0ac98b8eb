"""What the release before app/bill.py left in Redis while a job was billed (captured from it):
a deploy finds these in flight, and reads and ends them as its own."""

from __future__ import annotations

OWNER = "11111111-1111-1111-1111-111111111111"
ENDED = "0b7d2f6e-0000-4000-8000-0000000000aa"
RUNNING = "0b7d2f6e-0000-4000-8000-0000000000ab"

#: The bill its finish.lua put in the ledger's outbox (the stream's `bill` field) for a
#: timed-out vad job: cjson's order of the fields, its 14 digits of billed_at.
OUTBOX_ENTRY = (
    '{"gpu_seconds":7.25,"type":"vad","description":"vad job (long queue), stopped at its time'
    ' limit after 7.2 s (billed its budget of 5 s)",'
    '"task_id":"0b7d2f6e-0000-4000-8000-0000000000aa",'
    '"user_id":"11111111-1111-1111-1111-111111111111","cost_micros":1250000,"billed_ms":5000,'
    '"kind":"long","billed_at":1796416205.2245}'
)

#: A job its start.lua had started, still running.
STARTED = {
    "task_id": RUNNING,
    "owner": OWNER,
    "kind": "long",
    "type": "vad",
    "duration_s": "30.0",
    "status": "STARTED",
    "attempts": "1",
    "enqueued_at": "1796416205.2139721",
    "started_at": "1796416205.2229071",
    "worker": "cpu@test",
    "token": "tok",
}
