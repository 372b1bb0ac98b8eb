-- accept.lua: move deliveries from the stream, where the job scripts put them, into the
-- schedule, due now; each stream entry is acknowledged and deleted in the same step, so none is
-- lost and none is scheduled twice (ZADD NX: a job already there keeps its place).
-- KEYS[1] the deliveries stream  KEYS[2] the schedule (ZSET)
-- ARGV[1] the consumer group  ARGV[2], ARGV[3], ...: pairs of stream entry id, job id ('' for
-- an entry without one)
-- Reply: how many jobs were scheduled.
local t = whole(now_ms())
local added = 0
for i = 2, #ARGV, 2 do
  local job_id = ARGV[i + 1]
  if job_id ~= '' then
    added = added + redis.call('ZADD', KEYS[2], 'NX', t, job_id)
  end
  redis.call('XACK', KEYS[1], ARGV[1], ARGV[i])
  redis.call('XDEL', KEYS[1], ARGV[i])
end
return added
