-- create.lua: the record of a job accepted by the API, status PENDING.
-- KEYS[1] job hash  KEYS[2] event stream
-- ARGV[1] job id  ARGV[2] owner  ARGV[3] kind  ARGV[4] duration_s  ARGV[5] channel  ARGV[6] ttl
-- Reply: enqueued_at (Redis time, string). Error "DUPLICATE <id>" when the job exists.
if redis.call('EXISTS', JOB) == 1 then return redis.error_reply('DUPLICATE ' .. ARGV[1]) end
local t = now()
redis.call('HSET', JOB, 'task_id', ARGV[1], 'owner', ARGV[2], 'kind', ARGV[3],
           'duration_s', ARGV[4], 'status', 'PENDING', 'attempts', 0, 'enqueued_at', t)
emit(ARGV[5], ARGV[1], tonumber(ARGV[6]))
return tostring(t)
