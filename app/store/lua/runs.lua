-- runs.lua: a run's start and end, as functions: start.lua and finish.lua call them with their
-- own KEYS and ARGV, and the fair queue's step calls them with keys built from the job's id
-- (hooks.lua), so that a worker's lease and a job's start are one call, and a job's end, its
-- bill, the ack and the next lease another. start.lua's and finish.lua's headers say what
-- their arguments hold.

local RUN_EWMA_WEIGHT = 0.2

-- A bill as the ledger keeps it (app/bill.py Bill): the worker's charge, its fields as they
-- came, stamped with what the store knows of its own (app/bill.py STAMPED): the job, its
-- account, queue and type from the job's record, and the time.
local function stamp_bill(bill, id, t)
  local job = redis.call('HMGET', JOB, 'owner', 'kind', 'type')
  bill.task_id, bill.user_id, bill.kind, bill.type = id, job[1], job[2], job[3] or 'burn'
  bill.billed_at = t
  return bill
end

-- Bill the job once (the billed marker says whether it was): the bill goes to the ledger's
-- outbox (app/ledger/outbox.py) and into the account's monthly use and the metrics, in the step
-- that ends the job. Integers all the way (cjson writes them exactly below 1e14): bills and
-- totals add up.
local function put_bill(usage, billed, metrics, ledger, id, t, ttl, bill)
  if not redis.call('SET', billed, 1, 'NX', 'EX', ttl) then return end
  bill = stamp_bill(bill, id, t)
  redis.call('XADD', ledger, '*', 'bill', cjson.encode(bill))
  local kind = redis.call('HGET', JOB, 'kind')
  local month = month_of(t)
  redis.call('HINCRBY', usage, month .. ':billed_ms', bill.billed_ms)
  redis.call('HINCRBY', usage, month .. ':cost_micros', bill.cost_micros)
  redis.call('HINCRBY', metrics, METRIC_BILLED_MICROS .. ':' .. kind, bill.cost_micros)
  redis.call('HINCRBY', metrics, METRIC_BILLED_MS .. ':' .. kind, bill.billed_ms)
end

-- A preempted job that ends without another run (cancelled or dropped while it waits, or out
-- of attempts) is billed for the runs it had: the charge its last preemption priced for them
-- (preempt.lua's `earlier_bill`). Key names are built here, as release_hold builds the
-- account's: the scripts that end a waiting job are given the job's keys only.
local function bill_earlier_runs(id, metrics, ttl)
  local raw = redis.call('HGET', JOB, 'earlier_bill')
  if not raw then return end
  redis.call('HDEL', JOB, 'earlier_bill')
  local usage = USAGE .. redis.call('HGET', JOB, 'owner')
  put_bill(usage, BILLED .. id, metrics, LEDGER, id, now(), ttl, cjson.decode(raw))
end

-- How many earlier runs of the job its ran_s holds the seconds of (ran_runs; a job preempted
-- before the field existed: its preemptions).
local function earlier_runs()
  local f = redis.call('HMGET', JOB, 'ran_runs', 'preemptions')
  return tonumber(f[1] or f[2] or '0')
end

local function start_run(keys, argv)
  JOB, EVENTS = keys[1], keys[2]
  local status = redis.call('HGET', JOB, 'status')
  if not status or TERMINAL[status] then return {'ended'} end
  local ttl = tonumber(argv[7])
  if redis.call('HGET', JOB, 'cancel') then
    -- cancelled while its last run was being lost: end it without running it again
    redis.call('HSET', JOB, 'status', 'REVOKED', 'finished_at', now(), 'error_kind', 'cancelled')
    bump(keys[3], METRIC_FINISHED .. ':' .. redis.call('HGET', JOB, 'kind') .. ':REVOKED')
    bill_earlier_runs(argv[1], keys[3], ttl)
    ended(keys[3], 'cancelled')
    notify(keys[5])
    emit(argv[6], argv[1], ttl)
    return {'ended'}
  end
  local attempts = tonumber(redis.call('HGET', JOB, 'attempts') or '0')
  local t = now()
  if attempts >= tonumber(argv[5]) then
    redis.call('HSET', JOB, 'status', 'FAILURE', 'finished_at', t, 'error_kind', 'lost', 'error',
               'the worker running it was lost ' .. attempts .. ' times')
    bump(keys[3], METRIC_FINISHED .. ':' .. redis.call('HGET', JOB, 'kind') .. ':FAILURE')
    bill_earlier_runs(argv[1], keys[3], ttl)
    ended(keys[3], 'lost')
    notify(keys[5])
    emit(argv[6], argv[1], ttl)
    return {'exhausted'}
  end
  redis.call('HSET', JOB, 'status', 'STARTED', 'attempts', attempts + 1, 'started_at', t,
             'worker', argv[3], 'token', argv[2])
  -- an earlier run's: its checkpoint (unbilled), and the facts it noted, which this run's replace
  redis.call('HDEL', JOB, 'checkpoint_s', 'checkpoint_bill', 'facts')
  if argv[4] == '' then redis.call('HDEL', JOB, 'gpu_id') else redis.call('HSET', JOB, 'gpu_id', argv[4]) end
  local kind = redis.call('HGET', JOB, 'kind')
  bump(keys[3], METRIC_ATTEMPTS .. ':' .. kind)
  if attempts == 0 then
    observe(keys[3], HISTOGRAM_WAIT, kind, t - tonumber(redis.call('HGET', JOB, 'enqueued_at')))
  end
  moved(argv[6], kind)
  emit(argv[6], argv[1], ttl)
  redis.call('EXPIRE', keys[4], ttl)
  local fields = redis.call('HMGET', JOB, 'owner', 'duration_s', 'type', 'preemptions', 'ran_s',
                           'preemptible')
  local input = redis.call('GET', keys[4])
  return {'run', attempts + 1, fields[1], fields[2], fields[3] or 'burn', input or '{}',
          fields[4] or '0', fields[5] or '0', fields[6] or '', tostring(earlier_runs())}
end

-- The run's end: `run` is app/store/recorder.py RunEnd.to_lua's object, decoded once.
local function finish_run(keys, id, token, channel, ttl, run)
  JOB, EVENTS = keys[1], keys[2]
  if redis.call('HGET', JOB, 'status') ~= 'STARTED' or redis.call('HGET', JOB, 'token') ~= token then
    return 0
  end
  local t = now()
  local status = run.status
  redis.call('HSET', JOB, 'status', status, 'finished_at', t)
  for field, value in pairs(run.job) do redis.call('HSET', JOB, field, value) end
  local how = run.job.error_kind or 'success'  -- the worker names it for every other end
  redis.call('EXPIRE', keys[6], ttl)
  redis.call('EXPIRE', keys[7], ttl)  -- the log lines are kept as long as the record
  local kind = redis.call('HGET', JOB, 'kind')
  local ran = t - tonumber(redis.call('HGET', JOB, 'started_at'))
  bump(keys[5], METRIC_FINISHED .. ':' .. kind .. ':' .. status)
  ended(keys[5], how)
  observe(keys[5], HISTOGRAM_RUN, kind, ran)
  if status == 'SUCCESS' then
    -- recent run time per queue, for the estimated start of queued jobs
    local mean = tonumber(redis.call('HGET', keys[5], 'run_ewma:' .. kind) or ran)
    redis.call('HSET', keys[5], 'run_ewma:' .. kind, mean + RUN_EWMA_WEIGHT * (ran - mean))
  end
  -- (this run's charge covers the job's earlier runs too, preempted or lost: the worker summed
  -- them)
  redis.call('HDEL', JOB, 'earlier_bill', 'checkpoint_s', 'checkpoint_bill')
  if run.bill then put_bill(keys[3], keys[4], keys[5], keys[9], id, t, ttl, run.bill) end
  notify(keys[8])
  emit(channel, id, ttl)
  return 1
end

-- A run was lost: its lease lapsed (its worker killed, frozen or cut off from Redis) and the
-- fair queue put its job back in line, at the front of its account's (app/vtrr/lua/_lib.lua
-- reclaim, whose hook calls this in the same call). The job is PENDING again at once, with no
-- worker, so that its status, its place in line and its account's running jobs say so; the
-- lost run stays one of its attempts. Only while the lapsed token still holds the job: a job
-- that has ended, or that another run holds, is left alone. The stale run, if it wakes, can
-- write nothing more (every write of a run is fenced by its token).
local function lose_run(keys, id, token)
  JOB, EVENTS = keys[1], keys[2]
  if redis.call('HGET', JOB, 'status') ~= 'STARTED' or redis.call('HGET', JOB, 'token') ~= token then
    return 0
  end
  -- the lost run is billed up to its last whole checkpoint, which its rerun resumes from: its
  -- seconds join the earlier runs', and the charge for all of them is kept for an end without
  -- another run (what the worker recorded at its heartbeats: checkpointed.lua)
  local f = redis.call('HMGET', JOB, 'checkpoint_s', 'checkpoint_bill')
  if f[1] and f[2] then
    local ran = tonumber(redis.call('HGET', JOB, 'ran_s') or '0') + tonumber(f[1])
    redis.call('HSET', JOB, 'ran_s', string.format('%.17g', ran), 'earlier_bill', f[2],
               'ran_runs', earlier_runs() + 1)
  end
  redis.call('HSET', JOB, 'status', 'PENDING', 'lost_at', now())
  redis.call('HDEL', JOB, 'token', 'worker', 'gpu_id', 'started_at', 'checkpoint_s',
             'checkpoint_bill')
  -- (an error here would fail the queue's reclaim, and every dequeue with it: nothing may be nil)
  moved(CHANNEL, redis.call('HGET', JOB, 'kind') or '')
  local ttl = redis.call('TTL', JOB)  -- (kept as long as it was: the hook has no settings)
  emit(CHANNEL, id, ttl > 0 and ttl or nil)
  return 1
end

-- A run asked to yield its GPU has stopped (preempt.lua's header says what the arguments hold):
-- the job is PENDING again, not ended, its run's seconds added to those of its earlier runs and
-- the charge for all of them kept for an end without another run. Not an attempt: the count
-- start_run made is given back.
local function preempt_run(keys, id, token, channel, ttl, seconds, bill)
  JOB, EVENTS = keys[1], keys[2]
  if redis.call('HGET', JOB, 'status') ~= 'STARTED' or redis.call('HGET', JOB, 'token') ~= token then
    return 0
  end
  local ran = tonumber(redis.call('HGET', JOB, 'ran_s') or '0') + tonumber(seconds)
  redis.call('HSET', JOB, 'status', 'PENDING', 'ran_s', string.format('%.17g', ran),
             'earlier_bill', bill, 'preempted_at', now(), 'ran_runs', earlier_runs() + 1)
  redis.call('HINCRBY', JOB, 'preemptions', 1)
  redis.call('HDEL', JOB, 'checkpoint_s', 'checkpoint_bill')
  redis.call('HINCRBY', JOB, 'attempts', -1)
  redis.call('HDEL', JOB, 'token', 'worker', 'gpu_id', 'started_at')
  local kind = redis.call('HGET', JOB, 'kind')
  bump(keys[3], METRIC_PREEMPTIONS .. ':' .. kind)
  moved(CHANNEL, kind)  -- (a hint to recount places, told at once even under replicas)
  -- a named event for the streams first (the status that follows it is PENDING again)
  local told = {preemptions = tonumber(redis.call('HGET', JOB, 'preemptions')),
                seconds = tonumber(seconds), ran_s = ran}
  redis.call('XADD', EVENTS, 'MAXLEN', '~', EVENTS_CAP, '*', 'event', 'preempted', 'data',
             cjson.encode(told))
  emit(channel, id, ttl)
  return 1
end
