-- adopt.lua: move deliveries that a sender of an earlier version scheduled, in one schedule for
-- all accounts, into their accounts' own, each with its score (due, or held by such a sender:
-- then due when the hold runs out, and that sender's outcome is stale).
-- KEYS[1] the earlier schedule (ZSET)  KEYS[2] the accounts (ZSET)  KEYS[3] an account's
-- schedule, without the account  KEYS[4] a job's hash, without the job's id
-- ARGV: job ids
-- Reply: how many were moved.
local moved = 0
for _, job_id in ipairs(ARGV) do
  local score = redis.call('ZSCORE', KEYS[1], job_id)
  if score then
    redis.call('ZREM', KEYS[1], job_id)
    local account = owner_of(KEYS[4] .. job_id)
    if redis.call('ZADD', KEYS[3] .. account, 'NX', score, job_id) == 1 then
      redis.call('ZADD', KEYS[2], 'LT', score, account)
      moved = moved + 1
    end
  end
end
return moved
