-- _lib.lua: helpers shared by the service's job scripts; prepended to each of them.
-- Every script gets KEYS[1] = the job's hash and KEYS[2] = the job's event stream.

local JOB, EVENTS = KEYS[1], KEYS[2]
local TERMINAL = {SUCCESS = true, FAILURE = true, REVOKED = true}

local function now()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end

-- The newest entries kept in a job's event stream: its status changes, and its progress and log
-- events (progress.lua, log.lua), which come a few a second.
local EVENTS_CAP = 512

-- Append the job's new state to its event stream, tell the API processes that follow the job on
-- its own channel (`channel`:<job id>), and keep both keys for ttl seconds more. Returns the
-- event's id.
local function emit(channel, job_id, ttl)
  local id = redis.call('XADD', EVENTS, 'MAXLEN', '~', EVENTS_CAP, '*',
                        unpack(redis.call('HGETALL', JOB)))
  redis.call('PUBLISH', channel .. ':' .. job_id, job_id)
  redis.call('EXPIRE', JOB, ttl)
  redis.call('EXPIRE', EVENTS, ttl)
  return id
end

-- Counters and histograms of the service, all in one hash (see app/metrics.py): a field per
-- counter, `<name>:<kind>:<le>` per histogram bucket (not cumulative; the reader adds them up).
local BUCKETS = {0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200}
local function bump(metrics, field, by)
  redis.call('HINCRBYFLOAT', metrics, field, by or 1)
end
local function observe(metrics, name, kind, value)
  local le = '+Inf'
  for _, bound in ipairs(BUCKETS) do
    if value <= bound then le = tostring(bound); break end
  end
  bump(metrics, name .. ':' .. kind .. ':' .. le)
  bump(metrics, name .. '_sum:' .. kind, value)
end

-- Count a job's end by its type and how it ended ('success', or its error kind), for
-- fairgpu_jobs_ended_total; a job created before types existed is a burn job.
local function ended(metrics, how)
  bump(metrics, 'ended:' .. (redis.call('HGET', JOB, 'type') or 'burn') .. ':' .. how)
end

-- Tell the API processes that the order of a queue changed (a job joined, left or started), so
-- that the streams of queued jobs recompute their position.
local function moved(channel, kind)
  redis.call('PUBLISH', channel .. ':moves', kind)
end

-- Hand an ended job's webhook, if it has one, to the sender (app/webhooks/): its id goes on the
-- deliveries stream, in the same step as the end, so no crash can lose it; once per job, however
-- many scripts see the end (the field `webhook_queued` marks it).
local function notify(stream)
  if redis.call('HEXISTS', JOB, 'webhook') == 1 and redis.call('HSETNX', JOB, 'webhook_queued', 1) == 1 then
    redis.call('XADD', stream, '*', 'task_id', redis.call('HGET', JOB, 'task_id'))
  end
end
