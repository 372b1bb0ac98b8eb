-- finish.lua: record how a run ended and, when the worker gives a charge, bill the owner once
-- for what the run used, whatever its end (success, exception, timeout, the owner's cancel,
-- a crash). Only the run that holds the job's current lease token may finish it: a stale
-- worker is refused.
-- KEYS[1] job hash  KEYS[2] event stream  KEYS[3] owner's billing list  KEYS[4] billed marker
-- KEYS[5] metrics hash  KEYS[6] the job's input  KEYS[7] the job's log stream
-- KEYS[8] the webhooks stream: the job's webhook, if any, goes there (_lib.lua notify)
-- ARGV[1] job id  ARGV[2] lease token  ARGV[3] status (SUCCESS|FAILURE|REVOKED)
-- ARGV[4] error ('' none)  ARGV[5] tflops ('' none)
-- ARGV[6] cost in integer micro-units ('' bills nothing)
-- ARGV[7] description  ARGV[8] GPU-seconds used  ARGV[9] seconds billed, in whole milliseconds
-- ARGV[10] channel  ARGV[11] ttl
-- ARGV[12] error kind ('': 'exception' for a FAILURE, 'cancelled' for a REVOKED)
-- ARGV[13] the job's output, JSON ('' none)  ARGV[14] peak GPU memory, bytes ('' unknown)
-- ARGV[15] peak resident memory, bytes ('' unknown)
-- ARGV[16] the artifacts stored, JSON [{"name", "size", "sha256"}] ('' none)
-- Reply: 1 when recorded, 0 when refused (stale token, or the job is not running).
local RUN_EWMA_WEIGHT = 0.2
if redis.call('HGET', JOB, 'status') ~= 'STARTED' or redis.call('HGET', JOB, 'token') ~= ARGV[2] then
  return 0
end
local t = now()
local status = ARGV[3]
redis.call('HSET', JOB, 'status', status, 'finished_at', t)
local optional = {error = ARGV[4], tflops = ARGV[5], output = ARGV[13],
                  peak_gpu_memory_bytes = ARGV[14], peak_rss_bytes = ARGV[15],
                  artifacts = ARGV[16]}
for field, value in pairs(optional) do
  if value ~= '' then redis.call('HSET', JOB, field, value) end
end
local how = 'success'
if status ~= 'SUCCESS' then
  how = ARGV[12]
  if how == '' then how = (status == 'REVOKED') and 'cancelled' or 'exception' end
  redis.call('HSET', JOB, 'error_kind', how)
end
local ttl = tonumber(ARGV[11])
redis.call('EXPIRE', KEYS[6], ttl)
redis.call('EXPIRE', KEYS[7], ttl)  -- the log lines are kept as long as the record
local kind = redis.call('HGET', JOB, 'kind')
local ran = t - tonumber(redis.call('HGET', JOB, 'started_at'))
bump(KEYS[5], 'finished:' .. kind .. ':' .. status)
ended(KEYS[5], how)
observe(KEYS[5], 'run', kind, ran)
if status == 'SUCCESS' then
  -- recent run time per queue, for the estimated start of queued jobs
  local mean = tonumber(redis.call('HGET', KEYS[5], 'run_ewma:' .. kind) or ran)
  redis.call('HSET', KEYS[5], 'run_ewma:' .. kind, mean + RUN_EWMA_WEIGHT * (ran - mean))
end
if ARGV[6] ~= '' and redis.call('SET', KEYS[4], 1, 'NX', 'EX', ttl) then
  local fields = redis.call('HMGET', JOB, 'owner', 'kind')
  local micros, billed_ms = tonumber(ARGV[6]), tonumber(ARGV[9])
  -- integers all the way (cjson writes them exactly below 1e14): bills and totals add up
  redis.call('LPUSH', KEYS[3], cjson.encode({
    user_id = fields[1], task_id = ARGV[1], kind = fields[2], cost_micros = micros,
    description = ARGV[7], gpu_seconds = tonumber(ARGV[8]), billed_ms = billed_ms, billed_at = t,
  }))
  redis.call('HINCRBY', KEYS[5], 'billed_micros:' .. kind, micros)
  redis.call('HINCRBY', KEYS[5], 'billed_ms:' .. kind, billed_ms)
end
notify(KEYS[8])
emit(ARGV[10], ARGV[1], ttl)
return 1
