-- create.lua: the record of a job accepted by the API, status PENDING; with an idempotency key,
-- at most one job per key: a repeat of the same request gets the job the first one created.
-- The new job is also listed in `unqueued` until the API has queued it, so that a job whose
-- queueing never happened (Redis lost, the API killed) is found and removed by the sweep.
-- The job is also listed in its owner's index (newest kept, at most ARGV[7] of them).
-- Its input is kept under a key of its own: the hash is copied into every event. Its webhook
-- URL, if any, is the hash's `webhook`, for the sender once the job has ended (_lib.lua notify).
-- First of all the request is counted against its API key's rate, as the API's RateLimiter
-- counts every other request (INCR, a two-second expiry): the submit's count and its record
-- are one round trip. A request over the limit writes nothing else.
-- KEYS[1] job hash  KEYS[2] event stream  KEYS[3] unqueued jobs (ZSET)
-- KEYS[4] the owner's jobs (ZSET id -> enqueued_at)  KEYS[5] the job's input
-- KEYS[6] the key's request counter for this second
-- KEYS[7] idempotency record (optional)
-- ARGV[1] job id  ARGV[2] owner  ARGV[3] kind  ARGV[4] duration_s  ARGV[5] channel  ARGV[6] ttl
-- ARGV[7] most jobs listed per owner  ARGV[8] job type  ARGV[9] input (JSON)
-- ARGV[10] webhook URL ('' none)  ARGV[11] requests allowed a second (0: not counted)
-- ARGV[12] counter ttl
-- ARGV[13] request fingerprint  ARGV[14] idempotency ttl  ARGV[15] job key prefix (KEYS[7] only)
-- Reply: {'created', enqueued_at} | {'replay', job id of the first request} | {'limited'}
-- Errors: "DUPLICATE <id>" when the job exists; "IDEMPOTENCY_MISMATCH <id>" when the key was
--         used with another request.
local allowed = tonumber(ARGV[11])
if allowed > 0 then
  local count = redis.call('INCR', KEYS[6])
  redis.call('EXPIRE', KEYS[6], tonumber(ARGV[12]))
  if count > allowed then return {'limited'} end
end
if KEYS[7] then
  local seen = redis.call('GET', KEYS[7])
  if seen then
    local sep = string.find(seen, ' ', 1, true)
    local first, fingerprint = string.sub(seen, 1, sep - 1), string.sub(seen, sep + 1)
    -- The first request's job may be gone (it could not be queued, or it expired): start afresh.
    if redis.call('EXISTS', ARGV[15] .. first) == 1 then
      if fingerprint ~= ARGV[13] then
        return redis.error_reply('IDEMPOTENCY_MISMATCH ' .. first)
      end
      return {'replay', first}
    end
  end
  redis.call('SET', KEYS[7], ARGV[1] .. ' ' .. ARGV[13], 'EX', tonumber(ARGV[14]))
end
if redis.call('EXISTS', JOB) == 1 then return redis.error_reply('DUPLICATE ' .. ARGV[1]) end
local t = now()
local ttl = tonumber(ARGV[6])
redis.call('HSET', JOB, 'task_id', ARGV[1], 'owner', ARGV[2], 'kind', ARGV[3], 'type', ARGV[8],
           'duration_s', ARGV[4], 'status', 'PENDING', 'attempts', 0, 'enqueued_at', t)
if ARGV[10] ~= '' then redis.call('HSET', JOB, 'webhook', ARGV[10]) end
redis.call('SET', KEYS[5], ARGV[9], 'EX', ttl)
redis.call('ZADD', KEYS[3], t, ARGV[1])
redis.call('ZADD', KEYS[4], t, ARGV[1])
redis.call('ZREMRANGEBYRANK', KEYS[4], 0, -tonumber(ARGV[7]) - 1)
redis.call('EXPIRE', KEYS[4], ttl)
moved(ARGV[5], ARGV[3])
emit(ARGV[5], ARGV[1], ttl)
return {'created', tostring(t)}
