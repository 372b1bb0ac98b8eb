-- progress.lua: a running job's latest progress, kept in its hash (`progress`) and added to its
-- event stream as an entry {event = 'progress', data = the JSON}. Only the run that holds the
-- job's current lease token may write it: a stale run writes nothing.
-- KEYS[1] job hash  KEYS[2] event stream
-- ARGV[1] job id  ARGV[2] lease token  ARGV[3] channel  ARGV[4] ttl
-- ARGV[5] the progress, JSON {"fraction", "message"}
-- Reply: 1 when written, 0 when refused (stale token, or the job is not running).
if redis.call('HGET', JOB, 'status') ~= 'STARTED' or redis.call('HGET', JOB, 'token') ~= ARGV[2] then
  return 0
end
local ttl = tonumber(ARGV[4])
redis.call('HSET', JOB, 'progress', ARGV[5])
redis.call('XADD', EVENTS, 'MAXLEN', '~', EVENTS_CAP, '*', 'event', 'progress', 'data', ARGV[5])
redis.call('PUBLISH', ARGV[3] .. ':' .. ARGV[1], ARGV[1])
redis.call('EXPIRE', JOB, ttl)
redis.call('EXPIRE', EVENTS, ttl)
return 1
