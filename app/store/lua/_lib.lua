-- _lib.lua: helpers shared by the service's job scripts; prepended to each of them.
-- Every script gets KEYS[1] = the job's hash and KEYS[2] = the job's event stream.
-- What the Python spells too is not spelled here: app/store/scripts.py puts its constants
-- before this file, as locals (TERMINAL, the statuses that end a job; USAGE; MOVES_SUFFIX; the
-- metrics' fields METRIC_* and HISTOGRAM_*, and BUCKETS with their BUCKET_LABELS).

local JOB, EVENTS = KEYS[1], KEYS[2]

local function now()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end

-- The newest entries kept in a job's event stream: its status changes, and its progress and log
-- events (progress.lua, log.lua), which come a few a second.
local EVENTS_CAP = 512

-- Append the job's new state to its event stream, tell the API processes that follow the job on
-- its own channel (`channel`:<job id>; '' tells none: the worker does once replicas have the
-- change, JobRecorder.announce), and keep both keys for ttl seconds more (nil: as long as they
-- were kept). Returns the event's id.
local function emit(channel, job_id, ttl)
  local id = redis.call('XADD', EVENTS, 'MAXLEN', '~', EVENTS_CAP, '*',
                        unpack(redis.call('HGETALL', JOB)))
  if channel ~= '' then redis.call('PUBLISH', channel .. ':' .. job_id, job_id) end
  if ttl then
    redis.call('EXPIRE', JOB, ttl)
    redis.call('EXPIRE', EVENTS, ttl)
  end
  return id
end

-- Counters and histograms of the service, all in one hash (see app/store/metrics.py): a field
-- per counter, `<name>:<kind>:<le>` per histogram bucket (not cumulative; the reader adds them
-- up).
local function bump(metrics, field, by)
  redis.call('HINCRBYFLOAT', metrics, field, by or 1)
end
local function observe(metrics, name, kind, value)
  local le = BEYOND
  for i, bound in ipairs(BUCKETS) do
    if value <= bound then le = BUCKET_LABELS[i]; break end
  end
  bump(metrics, name .. ':' .. kind .. ':' .. le)
  bump(metrics, name .. HISTOGRAM_SUM .. ':' .. kind, value)
end

-- An account's use of its monthly budgets (app/store/keys.py usage_key): `<YYYY-MM>:billed_ms`
-- and `<YYYY-MM>:cost_micros` per month billed (Redis's clock, UTC), and `held_ms` and
-- `held_micros`, what the account's unended jobs may still cost (each job's own share is on its
-- hash as `held_ms` and `held_micros`, set only where the account has a budget: submit.lua).
-- USAGE is the prefix of those hashes' keys.

-- The UTC month ('2026-11') of a Unix time: days since 1970 to a civil date (the proleptic
-- Gregorian calendar, counted in 400-year eras of 146097 days from 0000-03-01).
local function month_of(t)
  local z = math.floor(t / 86400) + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524)
                          - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local m = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400
  if m <= 2 then y = y + 1 end
  return string.format('%04d-%02d', y, m)
end

-- Give back what an ending job held of its account's budget (nothing when it held nothing).
local function release_hold()
  local held = redis.call('HMGET', JOB, 'held_ms', 'held_micros', 'owner')
  if held[1] then
    local usage = USAGE .. held[3]
    redis.call('HINCRBY', usage, 'held_ms', -tonumber(held[1]))
    redis.call('HINCRBY', usage, 'held_micros', -tonumber(held[2]))
    redis.call('HDEL', JOB, 'held_ms', 'held_micros')
  end
end

-- Count a job's end by its type and how it ended ('success', or its error kind), for
-- fairgpu_jobs_ended_total; a job created before types existed is a burn job. Every script
-- that ends a job calls this once, so the job's hold on its budget ends here too.
local function ended(metrics, how)
  bump(metrics, METRIC_ENDED .. ':' .. (redis.call('HGET', JOB, 'type') or 'burn') .. ':' .. how)
  release_hold()
end

-- Tell the API processes that the order of a queue changed (a job joined, left or started), so
-- that the streams of queued jobs recompute their position.
local function moved(channel, kind)
  redis.call('PUBLISH', channel .. MOVES_SUFFIX, kind)
end

-- Hand an ended job's webhook, if it has one, to the sender (app/webhooks/): its id goes on the
-- deliveries stream, in the same step as the end, so no crash can lose it; once per job, however
-- many scripts see the end (the field `webhook_queued` marks it).
local function notify(stream)
  if redis.call('HEXISTS', JOB, 'webhook') == 1 and redis.call('HSETNX', JOB, 'webhook_queued', 1) == 1 then
    redis.call('XADD', stream, '*', 'task_id', redis.call('HGET', JOB, 'task_id'))
  end
end
