-- checkpointed.lua: a running job's run has written its checkpoint (the worker saw its copy
-- change at a heartbeat): what the run had done by that write, so that if the run is lost, its
-- job's bill counts it (runs.lua lose_run folds it in). Only the run that holds the job's
-- current lease token may write it: a stale run writes nothing.
-- KEYS[1] job hash
-- ARGV[1] lease token  ARGV[2] the run's seconds up to its last whole checkpoint write
-- ARGV[3] the charge for every run so far, this one through that write (app/bill.py Charge,
--         JSON), as preempt.lua's
-- Reply: 1 when written, 0 when refused (stale token, or the job is not running).
if redis.call('HGET', JOB, 'status') ~= 'STARTED' or redis.call('HGET', JOB, 'token') ~= ARGV[1] then
  return 0
end
redis.call('HSET', JOB, 'checkpoint_s', ARGV[2], 'checkpoint_bill', ARGV[3])
return 1
