-- submit.lua: a job accepted by the API, as functions of (owner, args) that the fair queue's
-- enqueue calls as its hooks (hooks.lua), so that the key's rate count, the job's record and
-- its queue item are one atomic call: admit_job before the queue's checks, create_job after
-- them and before the queue's writes. A job the queue refuses (FULL, DUPLICATE) is never written.
-- A job's keys are built from NAMES (app/store/hooks.py), those of the request (its rate
-- counter, its idempotency record) are given. The owner is the queue's partition; args
-- (app/store/submit.py hook_args):
--  [1] job id  [2] kind  [3] duration_s  [4] job type  [5] input (JSON)
--  [6] webhook URL ('' none)  [7] requests allowed a second (0: not counted)  [8] counter ttl
--  [9] the key's request counter for this second  [10] idempotency record key ('' none)
-- [11] request fingerprint  [12] idempotency ttl  [13] job ttl  [14] most jobs listed per owner
-- [15] channel
-- [16] the account's monthly budget of billed GPU-time, ms ('' none)
-- [17] its monthly budget of cost, micro-units ('' none)
-- [18] the most this job may be billed, ms  [19] the most it may cost, micro-units
-- [20] '1' when its type may be preempted (kept on the record: the workers do not load types)
-- [21] the GPU classes it may run on, comma-separated in order of preference ('' any card)
-- [22] the cards it takes (kept only when more than 1: a record without it is of one card)

local function budgeted(args) return args[16] ~= '' or args[17] ~= '' end

-- over_budget: with a budget, whether this month's bills, what the account's unended jobs may
-- still cost (their holds) and this job's most fit in it: nil when they do, else
-- {'over_budget', 'gpu_seconds' | 'cost', what is left (ms | micro-units), of which held}.
local function over_budget(owner, args)
  if not budgeted(args) then return nil end
  local month = month_of(now())
  local use = redis.call('HMGET', USAGE .. owner, month .. ':billed_ms', month .. ':cost_micros',
                         'held_ms', 'held_micros')
  local names = {'gpu_seconds', 'cost'}
  for i = 1, 2 do
    local budget = args[15 + i]
    if budget ~= '' then
      local held = tonumber(use[i + 2] or 0)
      local left = tonumber(budget) - tonumber(use[i] or 0) - held
      if tonumber(args[17 + i]) > left then return {'over_budget', names[i], left, held} end
    end
  end
  return nil
end

-- admit_job: first the request is counted against its API key's rate, as the API's RateLimiter
-- counts every other request (INCR, a short expiry): over the limit, {'limited'}, and nothing
-- else is written. With an idempotency key already used by a job that still exists: the same
-- request is {'replay', that job's id} (whatever its queue holds now), another request the
-- error "IDEMPOTENCY_MISMATCH <id>". A job id that exists is the error "DUPLICATE <id>".
-- Then the account's monthly budget, if it has one (over_budget). Else nil: the queue goes on.
local function admit_job(owner, args)
  local allowed = tonumber(args[7])
  if allowed > 0 then
    local count = redis.call('INCR', args[9])
    redis.call('EXPIRE', args[9], tonumber(args[8]))
    if count > allowed then return {'limited'} end
  end
  if args[10] ~= '' then
    local seen = redis.call('GET', args[10])
    if seen then
      local sep = string.find(seen, ' ', 1, true)
      local first, fingerprint = string.sub(seen, 1, sep - 1), string.sub(seen, sep + 1)
      -- The first request's job may have expired since: then this one starts afresh.
      if redis.call('EXISTS', NAMES.job .. first) == 1 then
        if fingerprint ~= args[11] then
          return redis.error_reply('IDEMPOTENCY_MISMATCH ' .. first)
        end
        return {'replay', first}
      end
    end
  end
  if redis.call('EXISTS', NAMES.job .. args[1]) == 1 then
    return redis.error_reply('DUPLICATE ' .. args[1])
  end
  return over_budget(owner, args)
end

-- create_job: the record, status PENDING, and its first event. Its input is kept under a key
-- of its own (the hash is copied into every event); its webhook URL, if any, is the hash's
-- `webhook`, for the sender once the job has ended (_lib.lua notify). The job is listed in its
-- owner's index (the newest kept), and in the idempotency record when there is one.
local function create_job(owner, args)
  local id, kind, ttl = args[1], args[2], tonumber(args[13])
  JOB, EVENTS = NAMES.job .. id, NAMES.events .. id
  local t = now()
  redis.call('HSET', JOB, 'task_id', id, 'owner', owner, 'kind', kind, 'type', args[4],
             'duration_s', args[3], 'status', 'PENDING', 'attempts', 0, 'enqueued_at', t)
  if args[6] ~= '' then redis.call('HSET', JOB, 'webhook', args[6]) end
  if args[20] == '1' then redis.call('HSET', JOB, 'preemptible', '1') end
  if args[21] ~= '' then redis.call('HSET', JOB, 'gpu_classes', args[21]) end
  if args[22] and args[22] ~= '1' then redis.call('HSET', JOB, 'gpus', args[22]) end
  if budgeted(args) then  -- what it may cost is held until it ends (_lib.lua release_hold)
    redis.call('HSET', JOB, 'held_ms', args[18], 'held_micros', args[19])
    redis.call('HINCRBY', USAGE .. owner, 'held_ms', args[18])
    redis.call('HINCRBY', USAGE .. owner, 'held_micros', args[19])
  end
  redis.call('SET', NAMES.input .. id, args[5], 'EX', ttl)
  if args[10] ~= '' then
    redis.call('SET', args[10], id .. ' ' .. args[11], 'EX', tonumber(args[12]))
  end
  local owned = NAMES.owned .. owner
  redis.call('ZADD', owned, t, id)
  redis.call('ZREMRANGEBYRANK', owned, 0, -tonumber(args[14]) - 1)
  redis.call('EXPIRE', owned, ttl)
  moved(args[15], kind)
  emit(args[15], id, ttl)
  return {'created'}
end
