-- finish.lua: record how a run ended and charge the owner once (a success, or a run stopped by
-- its owner's cancel, for the time it used). Only the run that holds the job's current lease
-- token may finish it: a stale worker is refused.
-- KEYS[1] job hash  KEYS[2] event stream  KEYS[3] owner's billing list  KEYS[4] billed marker
-- KEYS[5] metrics hash
-- ARGV[1] job id  ARGV[2] lease token  ARGV[3] status (SUCCESS|FAILURE|REVOKED)
-- ARGV[4] error ('' none)  ARGV[5] tflops ('' none)
-- ARGV[6] cost in integer micro-units ('' bills nothing; a FAILURE is never billed)
-- ARGV[7] description  ARGV[8] GPU-seconds used  ARGV[9] seconds billed, in whole milliseconds
-- ARGV[10] channel  ARGV[11] ttl
-- Reply: 1 when recorded, 0 when refused (stale token, or the job is not running).
local RUN_EWMA_WEIGHT = 0.2
if redis.call('HGET', JOB, 'status') ~= 'STARTED' or redis.call('HGET', JOB, 'token') ~= ARGV[2] then
  return 0
end
local t = now()
redis.call('HSET', JOB, 'status', ARGV[3], 'finished_at', t)
if ARGV[4] ~= '' then redis.call('HSET', JOB, 'error', ARGV[4]) end
if ARGV[5] ~= '' then redis.call('HSET', JOB, 'tflops', ARGV[5]) end
local ttl = tonumber(ARGV[11])
local kind = redis.call('HGET', JOB, 'kind')
local ran = t - tonumber(redis.call('HGET', JOB, 'started_at'))
bump(KEYS[5], 'finished:' .. kind .. ':' .. ARGV[3])
observe(KEYS[5], 'run', kind, ran)
if ARGV[3] == 'SUCCESS' then
  -- recent run time per queue, for the estimated start of queued jobs
  local mean = tonumber(redis.call('HGET', KEYS[5], 'run_ewma:' .. kind) or ran)
  redis.call('HSET', KEYS[5], 'run_ewma:' .. kind, mean + RUN_EWMA_WEIGHT * (ran - mean))
end
local billable = ARGV[6] ~= '' and ARGV[3] ~= 'FAILURE'
if billable and redis.call('SET', KEYS[4], 1, 'NX', 'EX', ttl) then
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
emit(ARGV[10], ARGV[1], ttl)
return 1
