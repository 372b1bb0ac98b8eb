-- requeue.lua: a running job's lease was given back to its queue (an admin's release, or a worker
-- that shuts down and hands its job back): the job is PENDING again, and the run that held that
-- lease can no longer finish it. A handed-back run does not count as one of the job's attempts.
-- KEYS[1] job hash  KEYS[2] event stream
-- ARGV[1] job id  ARGV[2] the released lease's token  ARGV[3] channel  ARGV[4] ttl
-- ARGV[5] '1': give the run's attempt back (optional)
-- Reply: 1 when the job is PENDING again, 0 when another run has it already (or it ended).
if redis.call('HGET', JOB, 'status') ~= 'STARTED' or redis.call('HGET', JOB, 'token') ~= ARGV[2] then
  return 0
end
redis.call('HSET', JOB, 'status', 'PENDING')
if ARGV[5] == '1' then redis.call('HINCRBY', JOB, 'attempts', -1) end
redis.call('HDEL', JOB, 'token', 'worker', 'gpu_id', 'started_at')
moved(ARGV[3], redis.call('HGET', JOB, 'kind'))
emit(ARGV[3], ARGV[1], tonumber(ARGV[4]))
return 1
