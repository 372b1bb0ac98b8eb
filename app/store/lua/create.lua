-- create.lua: the record of a job accepted by the API, status PENDING; with an idempotency key,
-- at most one job per key: a repeat of the same request gets the job the first one created.
-- The new job is also listed in `unqueued` until the API has queued it, so that a job whose
-- queueing never happened (Redis lost, the API killed) is found and removed by the sweep.
-- The job is also listed in its owner's index (newest kept, at most ARGV[7] of them).
-- Its input is kept under a key of its own: the hash is copied into every event. Its webhook
-- URL, if any, is the hash's `webhook`, for the sender once the job has ended (_lib.lua notify).
-- KEYS[1] job hash  KEYS[2] event stream  KEYS[3] unqueued jobs (ZSET)
-- KEYS[4] the owner's jobs (ZSET id -> enqueued_at)  KEYS[5] the job's input
-- KEYS[6] idempotency record (optional)
-- ARGV[1] job id  ARGV[2] owner  ARGV[3] kind  ARGV[4] duration_s  ARGV[5] channel  ARGV[6] ttl
-- ARGV[7] most jobs listed per owner  ARGV[8] job type  ARGV[9] input (JSON)
-- ARGV[10] webhook URL ('' none)
-- ARGV[11] request fingerprint  ARGV[12] idempotency ttl  ARGV[13] job key prefix (KEYS[6] only)
-- Reply: {'created', enqueued_at} | {'replay', job id of the first request}
-- Errors: "DUPLICATE <id>" when the job exists; "IDEMPOTENCY_MISMATCH <id>" when the key was
--         used with another request.
if KEYS[6] then
  local seen = redis.call('GET', KEYS[6])
  if seen then
    local sep = string.find(seen, ' ', 1, true)
    local first, fingerprint = string.sub(seen, 1, sep - 1), string.sub(seen, sep + 1)
    -- The first request's job may be gone (it could not be queued, or it expired): start afresh.
    if redis.call('EXISTS', ARGV[13] .. first) == 1 then
      if fingerprint ~= ARGV[11] then
        return redis.error_reply('IDEMPOTENCY_MISMATCH ' .. first)
      end
      return {'replay', first}
    end
  end
  redis.call('SET', KEYS[6], ARGV[1] .. ' ' .. ARGV[11], 'EX', tonumber(ARGV[12]))
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
