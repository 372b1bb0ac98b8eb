-- devices.lua: a run of several cards names them on its job as it starts (the hash's `devices`,
-- JSON: [{"worker", "gpu_id"}], the leader's first), so that its status names every card while
-- it runs; its end names them again (finish). Only the run that holds the job's current lease
-- token may write it.
-- KEYS[1] job hash
-- ARGV[1] job id  ARGV[2] lease token  ARGV[3] the devices, as JSON
-- Reply: 1 when written, 0 when refused (stale token, or the job is not running).
if redis.call('HGET', JOB, 'status') ~= 'STARTED' or redis.call('HGET', JOB, 'token') ~= ARGV[2] then
  return 0
end
redis.call('HSET', JOB, 'devices', ARGV[3])
return 1
