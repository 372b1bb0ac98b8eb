-- runs.lua: a run's start and end, as functions of (keys, argv): start.lua and finish.lua
-- call them with their own KEYS and ARGV, and the fair queue's step calls them with keys built
-- from the job's id (hooks.lua), so that a worker's lease and a job's start are one call, and
-- a job's end, its bill, the ack and the next lease another. Their header comments say what
-- keys and argv hold.

local RUN_EWMA_WEIGHT = 0.2

local function start_run(keys, argv)
  JOB, EVENTS = keys[1], keys[2]
  local status = redis.call('HGET', JOB, 'status')
  if not status or TERMINAL[status] then return {'ended'} end
  local ttl = tonumber(argv[7])
  if redis.call('HGET', JOB, 'cancel') then
    -- cancelled while its last run was being lost: end it without running it again
    redis.call('HSET', JOB, 'status', 'REVOKED', 'finished_at', now(), 'error_kind', 'cancelled')
    bump(keys[3], 'finished:' .. redis.call('HGET', JOB, 'kind') .. ':REVOKED')
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
    bump(keys[3], 'finished:' .. redis.call('HGET', JOB, 'kind') .. ':FAILURE')
    ended(keys[3], 'lost')
    notify(keys[5])
    emit(argv[6], argv[1], ttl)
    return {'exhausted'}
  end
  redis.call('HSET', JOB, 'status', 'STARTED', 'attempts', attempts + 1, 'started_at', t,
             'worker', argv[3], 'token', argv[2])
  if argv[4] == '' then redis.call('HDEL', JOB, 'gpu_id') else redis.call('HSET', JOB, 'gpu_id', argv[4]) end
  local kind = redis.call('HGET', JOB, 'kind')
  bump(keys[3], 'attempts:' .. kind)
  if attempts == 0 then
    observe(keys[3], 'wait', kind, t - tonumber(redis.call('HGET', JOB, 'enqueued_at')))
  end
  moved(argv[6], kind)
  emit(argv[6], argv[1], ttl)
  redis.call('EXPIRE', keys[4], ttl)
  local fields = redis.call('HMGET', JOB, 'owner', 'duration_s', 'type')
  local input = redis.call('GET', keys[4])
  return {'run', attempts + 1, fields[1], fields[2], fields[3] or 'burn', input or '{}'}
end

local function finish_run(keys, argv)
  JOB, EVENTS = keys[1], keys[2]
  if redis.call('HGET', JOB, 'status') ~= 'STARTED' or redis.call('HGET', JOB, 'token') ~= argv[2] then
    return 0
  end
  local t = now()
  local status = argv[3]
  redis.call('HSET', JOB, 'status', status, 'finished_at', t)
  local optional = {error = argv[4], tflops = argv[5], output = argv[13],
                    peak_gpu_memory_bytes = argv[14], peak_rss_bytes = argv[15],
                    artifacts = argv[16]}
  for field, value in pairs(optional) do
    if value ~= '' then redis.call('HSET', JOB, field, value) end
  end
  local how = 'success'
  if status ~= 'SUCCESS' then
    how = argv[12]
    if how == '' then how = (status == 'REVOKED') and 'cancelled' or 'exception' end
    redis.call('HSET', JOB, 'error_kind', how)
  end
  local ttl = tonumber(argv[11])
  redis.call('EXPIRE', keys[6], ttl)
  redis.call('EXPIRE', keys[7], ttl)  -- the log lines are kept as long as the record
  local kind = redis.call('HGET', JOB, 'kind')
  local ran = t - tonumber(redis.call('HGET', JOB, 'started_at'))
  bump(keys[5], 'finished:' .. kind .. ':' .. status)
  ended(keys[5], how)
  observe(keys[5], 'run', kind, ran)
  if status == 'SUCCESS' then
    -- recent run time per queue, for the estimated start of queued jobs
    local mean = tonumber(redis.call('HGET', keys[5], 'run_ewma:' .. kind) or ran)
    redis.call('HSET', keys[5], 'run_ewma:' .. kind, mean + RUN_EWMA_WEIGHT * (ran - mean))
  end
  if argv[6] ~= '' and redis.call('SET', keys[4], 1, 'NX', 'EX', ttl) then
    local fields = redis.call('HMGET', JOB, 'owner', 'kind', 'type')
    local micros, billed_ms = tonumber(argv[6]), tonumber(argv[9])
    -- integers all the way (cjson writes them exactly below 1e14): bills and totals add up.
    -- The bill goes to the ledger's outbox (app/ledger/outbox.py) in this same step.
    redis.call('XADD', keys[9], '*', 'bill', cjson.encode({
      user_id = fields[1], task_id = argv[1], kind = fields[2], type = fields[3] or 'burn',
      cost_micros = micros, description = argv[7], gpu_seconds = tonumber(argv[8]),
      billed_ms = billed_ms, billed_at = t,
    }))
    local month = month_of(t)
    redis.call('HINCRBY', keys[3], month .. ':billed_ms', billed_ms)
    redis.call('HINCRBY', keys[3], month .. ':cost_micros', micros)
    redis.call('HINCRBY', keys[5], 'billed_micros:' .. kind, micros)
    redis.call('HINCRBY', keys[5], 'billed_ms:' .. kind, billed_ms)
  end
  notify(keys[8])
  emit(argv[10], argv[1], ttl)
  return 1
end
