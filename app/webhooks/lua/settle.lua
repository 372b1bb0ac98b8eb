-- settle.lua: the outcome of one delivery, from the sender that holds it (its hold's end is the
-- fence: a sender whose hold ran out, and another took over, changes nothing). Delivered: done.
-- Failed: counted, and due again after a pause that doubles from ARGV[5] ms (at most ARGV[6]),
-- or given up after ARGV[4] attempts. Gone (the job has expired): forgotten.
-- KEYS[1] the account's schedule (ZSET)  KEYS[2] the accounts (ZSET)  KEYS[3] failed attempts
-- per job (HASH)  KEYS[4] metrics hash
-- ARGV[1] job id  ARGV[2] the hold's end, as claim.lua replied  ARGV[3] delivered|failed|gone
-- ARGV[4] most attempts  ARGV[5] first pause, ms  ARGV[6] longest pause, ms  ARGV[7] the account
-- Reply: {'stale'} | {'delivered', attempts} | {'gone', attempts} | {'given_up', attempts} |
--        {'retry', attempts, pause in ms}
local job_id, outcome = ARGV[1], ARGV[3]
if tonumber(redis.call('ZSCORE', KEYS[1], job_id) or -1) ~= tonumber(ARGV[2]) then
  return {'stale'}
end
local failed = tonumber(redis.call('HGET', KEYS[3], job_id) or '0')
if outcome == 'failed' then
  failed = redis.call('HINCRBY', KEYS[3], job_id, 1)
  redis.call('HINCRBY', KEYS[4], METRIC_WEBHOOKS_FAILED, 1)
  if failed < tonumber(ARGV[4]) then
    local pause = math.min(tonumber(ARGV[5]) * 2 ^ (failed - 1), tonumber(ARGV[6]))
    redis.call('ZADD', KEYS[1], whole(now_ms() + pause), job_id)
    reindex(KEYS[2], ARGV[7], KEYS[1])
    return {'retry', failed, pause}
  end
  outcome = 'given_up'
  redis.call('HINCRBY', KEYS[4], METRIC_WEBHOOKS_GIVEN_UP, 1)
elseif outcome == 'delivered' then
  failed = failed + 1
  redis.call('HINCRBY', KEYS[4], METRIC_WEBHOOKS_DELIVERED, 1)
end
redis.call('ZREM', KEYS[1], job_id)
redis.call('HDEL', KEYS[3], job_id)
reindex(KEYS[2], ARGV[7], KEYS[1])
return {outcome, failed}
