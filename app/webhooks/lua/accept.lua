-- accept.lua: move deliveries from the stream, where the job scripts put them, into their
-- accounts' schedules (the account is the job's owner), due now; each stream entry is
-- acknowledged and deleted in the same step, so none is lost and none is scheduled twice
-- (ZADD NX: a job already there keeps its place).
-- KEYS[1] the deliveries stream  KEYS[2] the accounts (ZSET)  KEYS[3] an account's schedule,
-- without the account  KEYS[4] a job's hash, without the job's id
-- ARGV[1] the consumer group  ARGV[2], ARGV[3], ...: pairs of stream entry id, job id ('' for
-- an entry without one)
-- Reply: how many jobs were scheduled.
local t = whole(now_ms())
local added = 0
for i = 2, #ARGV, 2 do
  local job_id = ARGV[i + 1]
  if job_id ~= '' then
    local account = owner_of(KEYS[4] .. job_id)
    if redis.call('ZADD', KEYS[3] .. account, 'NX', t, job_id) == 1 then
      added = added + 1
      redis.call('ZADD', KEYS[2], 'LT', t, account)
    end
  end
  redis.call('XACK', KEYS[1], ARGV[1], ARGV[i])
  redis.call('XDEL', KEYS[1], ARGV[i])
end
return added
