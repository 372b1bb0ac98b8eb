-- began.lua: a running job's run has begun (its type set up in the worker's child): its
-- started_at becomes now, Redis's time, so that what reads the job (status, the CLI, the
-- dashboard, a run's measured time at its end) sees the time the job ran and not the start of
-- a child it waited for. Only the run that holds the job's current lease token may write it.
-- KEYS[1] job hash
-- ARGV[1] job id  ARGV[2] lease token
-- Reply: 1 when written, 0 when refused (stale token, or the job is not running).
if redis.call('HGET', JOB, 'status') ~= 'STARTED' or redis.call('HGET', JOB, 'token') ~= ARGV[2] then
  return 0
end
redis.call('HSET', JOB, 'started_at', now())
return 1
