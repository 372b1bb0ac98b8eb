-- revoke.lua: a job is cancelled, by its owner or by an operator (an admin's drop of its queue),
-- and the job's `cancel` field says which, for the bill. A queued job ends REVOKED here. A
-- running one, if its owner cancels, is asked to stop (its worker, told on the stops channel,
-- ends it REVOKED and bills the seconds it ran); if an operator stops it, it ends REVOKED here,
-- unbilled, and the run that still holds it can no longer finish it (finish.lua wants it
-- STARTED). Either way a running job's id goes out on the stops channel, which workers listen
-- to. An ended job is left alone. Every REVOKED job's error kind is 'cancelled'.
-- A job that ends here with a webhook goes on the deliveries stream (_lib.lua notify). A job that
-- was preempted is billed here for the runs it had before (runs.lua bill_earlier_runs).
-- KEYS[1] job hash  KEYS[2] event stream  KEYS[3] metrics hash  KEYS[4] the webhooks stream
-- ARGV[1] job id  ARGV[2] channel  ARGV[3] ttl  ARGV[4] who: 'owner' | 'operator'
-- ARGV[5] the stops channel
-- Reply: 'revoked' (it was queued) | 'stopping' (the owner's, running) | 'stopped' (the
--        operator's, running: REVOKED now) | the job's final status when it had ended | 'gone'
local status = redis.call('HGET', JOB, 'status')
if not status then return 'gone' end
if TERMINAL[status] then return status end
local by = ARGV[4]
if status == 'STARTED' then redis.call('PUBLISH', ARGV[5], ARGV[1]) end
if status == 'STARTED' and by == 'owner' then
  redis.call('HSET', JOB, 'cancel', by)
  emit(ARGV[2], ARGV[1], tonumber(ARGV[3]))
  return 'stopping'
end
redis.call('HSET', JOB, 'status', 'REVOKED', 'finished_at', now(), 'cancel', by,
           'error_kind', 'cancelled')
local kind = redis.call('HGET', JOB, 'kind')
bump(KEYS[3], METRIC_FINISHED .. ':' .. kind .. ':REVOKED')
-- a preempted job is billed for the runs it had before, whoever ends it (an operator's stop of
-- its current run is not billed, as any run's)
bill_earlier_runs(ARGV[1], KEYS[3], tonumber(ARGV[3]))
ended(KEYS[3], 'cancelled')
notify(KEYS[4])
moved(ARGV[2], kind)
emit(ARGV[2], ARGV[1], tonumber(ARGV[3]))
if status == 'STARTED' then return 'stopped' end
return 'revoked'
