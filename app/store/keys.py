"""Every Redis key and channel name of the service; the fair queue's are in app/vtrr/keys.py.

    fairgpu:job:<id>          hash    the job: owner, kind, type, duration_s, status, attempts,
                                      times, worker, gpu_id, tflops, error, error_kind, output,
                                      peak memory, current lease token, the latest progress
                                      and on SUCCESS the artifacts (both JSON)
    fairgpu:input:<id>        string  the job's input (JSON), apart from the hash that every
                                      event copies; renewed when a run starts or ends
    fairgpu:events:<id>       stream  one entry per change of the job, a copy of its hash; and
                                      the job's reports: entries with `event` (progress | log)
                                      and `data` (JSON)
    fairgpu:logs:<id>         stream  the job's log lines (at, stream, text), the newest
                                      MAX_LOG_LINES kept
    fairgpu:billed:<id>       string  "already billed" marker, set with the bill
    fairgpu:ledger            stream  bills on their way to the SQL ledger (`bill`, JSON), added
                                      with the job's end; read by the workers' consumer group
                                      (app/ledger/outbox.py), deleted once written
    fairgpu:usage:<user>      hash    the account's use of its monthly budgets: per month
                                      `<YYYY-MM>:billed_ms` and `<YYYY-MM>:cost_micros`, and
                                      `held_ms` and `held_micros`, what its unended jobs may
                                      still cost (set where it has a budget)
    fairgpu:idem:<account>:<sha256 of key>
                              string  "<job id> <request fingerprint>" for an Idempotency-Key
    fairgpu:rate:<key digest>:<second>
                              string  requests made with one API key in one second
    fairgpu:owned:<user>      zset    the account's jobs by submission time (the newest
                                      LISTED_PER_ACCOUNT), for GET /tasks
    fairgpu:metrics           hash    counters and histogram buckets (see app/api/collector.py)
    fairgpu:workers           hash    worker name -> its last heartbeat (see app/store/workers.py)
    fairgpu:changes:<id>      channel the job's id, published at every change of the job
    fairgpu:changes:moves     channel a queue's name, whenever its order changes
    fairgpu:stops             channel a running job's id, when its owner or an operator stops it
    fairgpu:webhooks          stream  ended jobs whose webhook is to be sent (`task_id`), added
                                      once per job by the script that ends it (the job's
                                      `webhook_queued` field marks it); read by the senders'
                                      consumer group (app/webhooks/)
    fairgpu:webhooks:due:<account>
                              zset    the account's deliveries: job id -> when the next attempt
                                      is due, or when the sender holding it lets go (ms, Redis's
                                      clock)
    fairgpu:webhooks:accounts zset    account -> the earliest score of its deliveries
    fairgpu:webhooks:due      zset    deliveries a sender of an earlier version scheduled for all
                                      accounts at once; senders move them to their accounts'
    fairgpu:webhooks:failed   hash    job id -> failed deliveries of its webhook so far
    fairgpu:yields            channel a running job's id, when its run is asked to yield its GPU
    fairgpu:preempt:heads     hash    queue -> "<job id> <since>": the job next in line with no
                                      free worker, and since when (Redis TIME) it has been
    fairgpu:preempt:lock      string  the worker that decides preemptions this second
    fairgpu:preempt:ask:<id>  string  "<owed job id> <its queue>": the run of job <id> is asked
                                      to yield to that job (expires PREEMPT_GRACE_S + ASK_SLACK_S
                                      after the ask)
    fairgpu:preempt:for:<id>  string  the job whose run was asked to yield to owed job <id>

Uploaded code (app/code/store.py; each archive is kept once, by its SHA-256, beside the
artifacts):

    fairgpu:code:<user>       hash    <sha256> -> "<bytes> <uploaded_at>", and `_total`: the
                                      bytes of all of them (MAX_CODE_BYTES_PER_ACCOUNT)
    fairgpu:code-owners:<sha256>
                              set     the accounts that own it; none left: it is removed
    fairgpu:code-used         zset    "<sha256>:<user>" by its last use (an upload, a script
                                      job's submit); the sweep drops those unused for
                                      CODE_TTL_S that no job needs
    fairgpu:code-jobs:<sha256>:<user>
                              zset    the account's script jobs that named it, by submit time:
                                      while one is not ended, the code stays; the sweep takes
                                      out those that ended (or never were written)
    fairgpu:code-gone:<sha256>
                              string  set while its archive is being removed: an upload of the
                                      same bytes waits until it is gone, then stores it anew

Job hashes, inputs and event streams expire job_ttl_s after their last change.
"""

from __future__ import annotations

import hashlib

CHANNEL = "fairgpu:changes"  # the scripts publish on channel .. ':' .. job id, and on MOVES
MOVES = f"{CHANNEL}:moves"
METRICS = "fairgpu:metrics"
WORKERS = "fairgpu:workers"
#: The fleet (app/fleet/view.py): each worker's last heartbeat again, kept when it stops on
#: purpose (a restart keeps its place) and forgotten FLEET_TTL_S after it was last heard.
FLEET = "fairgpu:fleet"
#: Workers listen here, so that a cancel reaches a running job at once, without polling.
STOPS = "fairgpu:stops"
#: How long a key's counter of one second is kept, from its latest request.
RATE_TTL_S = 2
#: Ended jobs with a webhook, for the sender; the job's hash holds the URL as `webhook`.
WEBHOOKS = "fairgpu:webhooks"
WEBHOOKS_ACCOUNTS = "fairgpu:webhooks:accounts"
WEBHOOKS_LEGACY_DUE = "fairgpu:webhooks:due"
WEBHOOKS_FAILED = "fairgpu:webhooks:failed"
#: Bills on their way to the SQL ledger (app/ledger/outbox.py).
LEDGER = "fairgpu:ledger"
#: Workers listen here too, so that an ask to yield reaches a running job at once.
YIELDS = "fairgpu:yields"
PREEMPT_HEADS = "fairgpu:preempt:heads"
PREEMPT_LOCK = "fairgpu:preempt:lock"
#: Every account's hold on uploaded code, by its last use.
CODE_USED = "fairgpu:code-used"


def ask_key(job_id: str) -> str:
    """The ask that the run of job_id yield its GPU: the owed job and its queue."""
    return f"fairgpu:preempt:ask:{job_id}"


def asked_for_key(owed_id: str) -> str:
    """The job whose run was asked to yield to the owed job owed_id."""
    return f"fairgpu:preempt:for:{owed_id}"


def job_key(job_id: str) -> str:
    """The hash that holds one job."""
    return f"fairgpu:job:{job_id}"


def webhooks_due_key(account: str) -> str:
    """The deliveries of one account's webhooks, for the senders (app/webhooks/)."""
    return f"fairgpu:webhooks:due:{account}"


def input_key(job_id: str) -> str:
    """The input of one job, as JSON text."""
    return f"fairgpu:input:{job_id}"


def idempotency_key(user_id: str, key: str) -> str:
    """The record of one Idempotency-Key of one account (the key itself is not stored)."""
    return f"fairgpu:idem:{user_id}:{hashlib.sha256(key.encode()).hexdigest()}"


def events_key(job_id: str) -> str:
    """The stream of one job's changes."""
    return f"fairgpu:events:{job_id}"


def logs_key(job_id: str) -> str:
    """The stream of one job's log lines."""
    return f"fairgpu:logs:{job_id}"


def job_channel(job_id: str) -> str:
    """The channel a job's changes are announced on (a job id is a UUID, never "moves")."""
    return f"{CHANNEL}:{job_id}"


def rate_key(key_digest: str, second: int) -> str:
    """The counter of one API key's requests in one second."""
    return f"fairgpu:rate:{key_digest}:{second}"


def usage_key(user_id: str) -> str:
    """The hash of one account's use of its monthly budgets (_lib.lua's USAGE)."""
    return f"fairgpu:usage:{user_id}"


def owned_key(user_id: str) -> str:
    """The index of one account's jobs, by submission time."""
    return f"fairgpu:owned:{user_id}"


def billed_key(job_id: str) -> str:
    """The marker that says a job has been billed."""
    return f"fairgpu:billed:{job_id}"


def code_key(user_id: str) -> str:
    """The hash of one account's uploaded code, and its total bytes."""
    return f"fairgpu:code:{user_id}"


def code_owners_key(code_id: str) -> str:
    """The set of the accounts that own one archive."""
    return f"fairgpu:code-owners:{code_id}"


def code_gone_key(code_id: str) -> str:
    """The mark of an archive being removed."""
    return f"fairgpu:code-gone:{code_id}"


def code_jobs_key(code_id: str, user_id: str) -> str:
    """The script jobs of one account that named one archive, by submit time."""
    return f"fairgpu:code-jobs:{code_id}:{user_id}"
