-- ack.lua: finish a leased item, only for the holder of its current lease.
-- KEYS: all (see _lib.lua); touches inflight, inflight_task, lease, meta, timeouts, stats.
-- ARGV[1] task id  ARGV[2] lease token
-- Reply: 1 when acked, 0 when the token is not the item's current lease (stale or unknown).
local id, token = ARGV[1], ARGV[2]
if not holds_lease(id, token) then return 0 end
unlease(id)
redis.call('HDEL', K.meta, id)
redis.call('HDEL', K.timeouts, id)
count('acked', '1')
return 1
