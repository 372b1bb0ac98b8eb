-- start.lua: a worker holding the job's lease starts a run, unless the job has ended or has used
-- up its attempts (then it ends here as FAILURE, its error kind 'lost').
-- A job that ends here with a webhook goes on the deliveries stream (_lib.lua notify).
-- KEYS[1] job hash  KEYS[2] event stream  KEYS[3] metrics hash  KEYS[4] the job's input
-- KEYS[5] the webhooks stream
-- ARGV[1] job id  ARGV[2] lease token  ARGV[3] worker  ARGV[4] gpu id ('' for none)
-- ARGV[5] max attempts  ARGV[6] channel  ARGV[7] ttl
-- Reply: {'run', attempt, owner, duration_s, type, input} | {'ended'} (gone, ended, or
--        cancelled: now REVOKED) | {'exhausted'} (now FAILURE)
-- A job created before types existed is a burn job with the input {}.
local status = redis.call('HGET', JOB, 'status')
if not status or TERMINAL[status] then return {'ended'} end
local ttl = tonumber(ARGV[7])
if redis.call('HGET', JOB, 'cancel') then
  -- cancelled while its last run was being lost: end it without running it again
  redis.call('HSET', JOB, 'status', 'REVOKED', 'finished_at', now(), 'error_kind', 'cancelled')
  bump(KEYS[3], 'finished:' .. redis.call('HGET', JOB, 'kind') .. ':REVOKED')
  ended(KEYS[3], 'cancelled')
  notify(KEYS[5])
  emit(ARGV[6], ARGV[1], ttl)
  return {'ended'}
end
local attempts = tonumber(redis.call('HGET', JOB, 'attempts') or '0')
local t = now()
if attempts >= tonumber(ARGV[5]) then
  redis.call('HSET', JOB, 'status', 'FAILURE', 'finished_at', t, 'error_kind', 'lost', 'error',
             'the worker running it was lost ' .. attempts .. ' times')
  bump(KEYS[3], 'finished:' .. redis.call('HGET', JOB, 'kind') .. ':FAILURE')
  ended(KEYS[3], 'lost')
  notify(KEYS[5])
  emit(ARGV[6], ARGV[1], ttl)
  return {'exhausted'}
end
redis.call('HSET', JOB, 'status', 'STARTED', 'attempts', attempts + 1, 'started_at', t,
           'worker', ARGV[3], 'token', ARGV[2])
if ARGV[4] == '' then redis.call('HDEL', JOB, 'gpu_id') else redis.call('HSET', JOB, 'gpu_id', ARGV[4]) end
local kind = redis.call('HGET', JOB, 'kind')
bump(KEYS[3], 'attempts:' .. kind)
if attempts == 0 then
  observe(KEYS[3], 'wait', kind, t - tonumber(redis.call('HGET', JOB, 'enqueued_at')))
end
moved(ARGV[6], kind)
emit(ARGV[6], ARGV[1], ttl)
redis.call('EXPIRE', KEYS[4], ttl)
local fields = redis.call('HMGET', JOB, 'owner', 'duration_s', 'type')
local input = redis.call('GET', KEYS[4])
return {'run', attempts + 1, fields[1], fields[2], fields[3] or 'burn', input or '{}'}
