-- revoke.lua: the owner cancels a job. A queued job ends REVOKED here; a running one is asked to
-- stop (its worker looks at the `cancel` field and ends it REVOKED); an ended one is left alone.
-- KEYS[1] job hash  KEYS[2] event stream  KEYS[3] metrics hash
-- ARGV[1] job id  ARGV[2] channel  ARGV[3] ttl
-- Reply: 'revoked' | 'stopping' | the job's final status when it had ended | 'gone'
local status = redis.call('HGET', JOB, 'status')
if not status then return 'gone' end
if TERMINAL[status] then return status end
if status == 'STARTED' then
  redis.call('HSET', JOB, 'cancel', 1)
  emit(ARGV[2], ARGV[1], tonumber(ARGV[3]))
  return 'stopping'
end
redis.call('HSET', JOB, 'status', 'REVOKED', 'finished_at', now(), 'cancel', 1)
local kind = redis.call('HGET', JOB, 'kind')
bump(KEYS[3], 'finished:' .. kind .. ':REVOKED')
moved(ARGV[2], kind)
emit(ARGV[2], ARGV[1], tonumber(ARGV[3]))
return 'revoked'
