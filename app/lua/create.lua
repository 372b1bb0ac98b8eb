-- create.lua: the record of a job accepted by the API, status PENDING; with an idempotency key,
-- at most one job per key: a repeat of the same request gets the job the first one created.
-- The new job is also listed in `unqueued` until the API has queued it, so that a job whose
-- queueing never happened (Redis lost, the API killed) is found and removed by the sweep.
-- KEYS[1] job hash  KEYS[2] event stream  KEYS[3] unqueued jobs (ZSET)
-- KEYS[4] idempotency record (optional)
-- ARGV[1] job id  ARGV[2] owner  ARGV[3] kind  ARGV[4] duration_s  ARGV[5] channel  ARGV[6] ttl
-- ARGV[7] request fingerprint  ARGV[8] idempotency ttl  ARGV[9] job key prefix (KEYS[4] only)
-- Reply: {'created', enqueued_at} | {'replay', job id of the first request}
-- Errors: "DUPLICATE <id>" when the job exists; "IDEMPOTENCY_MISMATCH <id>" when the key was
--         used with another request.
if KEYS[4] then
  local seen = redis.call('GET', KEYS[4])
  if seen then
    local sep = string.find(seen, ' ', 1, true)
    local first, fingerprint = string.sub(seen, 1, sep - 1), string.sub(seen, sep + 1)
    -- The first request's job may be gone (it could not be queued, or it expired): start afresh.
    if redis.call('EXISTS', ARGV[9] .. first) == 1 then
      if fingerprint ~= ARGV[7] then
        return redis.error_reply('IDEMPOTENCY_MISMATCH ' .. first)
      end
      return {'replay', first}
    end
  end
  redis.call('SET', KEYS[4], ARGV[1] .. ' ' .. ARGV[7], 'EX', tonumber(ARGV[8]))
end
if redis.call('EXISTS', JOB) == 1 then return redis.error_reply('DUPLICATE ' .. ARGV[1]) end
local t = now()
redis.call('HSET', JOB, 'task_id', ARGV[1], 'owner', ARGV[2], 'kind', ARGV[3],
           'duration_s', ARGV[4], 'status', 'PENDING', 'attempts', 0, 'enqueued_at', t)
redis.call('ZADD', KEYS[3], t, ARGV[1])
emit(ARGV[5], ARGV[1], tonumber(ARGV[6]))
return {'created', tostring(t)}
